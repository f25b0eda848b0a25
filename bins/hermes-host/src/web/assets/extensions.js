// Extensions: each one's state (starting, running, failed, stopped),
// version, restarts and commands, with a button to run each command and to
// reload it (or all); their toolbar buttons in the page's toolbar; and a
// live tail of the chosen extension's log, levels coloured.

import { h, clear, toast } from './dom.js';

const TAIL = 300;

export class Extensions {
  constructor(rpc, { list, toolbar, log, logTitle }) {
    this.rpc = rpc;
    this.el = { list, toolbar, log, logTitle };
    this.all = [];
    this.chosen = null;
  }

  async refresh() {
    const { extensions } = await this.rpc.call('extensions/list');
    this.all = extensions;
    if (!this.chosen && extensions.length) this.choose(extensions[0].name);
    this.render();
  }

  /** An `extension_state` event: one extension's listing. */
  update(listing) {
    const at = this.all.findIndex((e) => e.name === listing.name);
    if (at >= 0) this.all[at] = listing;
    else this.all.push(listing);
    this.render();
  }

  run(command) {
    this.rpc.call('command/execute', { command }).catch((error) => toast(error.message, 'error'));
  }

  async reload(name) {
    try {
      const { extensions } = await this.rpc.call('extensions/reload', name ? { name } : {});
      toast(`reloaded ${extensions.join(', ') || 'nothing'}`);
      await this.refresh();
    } catch (error) {
      toast(error.message, 'error');
    }
  }

  render() {
    const { list, toolbar } = this.el;
    clear(list);
    list.append(h('div', { class: 'panel-head' }, h('h2', {}, 'Extensions'),
      h('button', { onclick: () => this.reload(null), title: 'reload the config file and every extension' }, 'Reload all')));
    if (!this.all.length) list.append(h('p', { class: 'muted' }, 'No extensions configured.'));
    for (const e of this.all) {
      list.append(h('div', { class: `extension${e.name === this.chosen ? ' chosen' : ''}`, dataset: { name: e.name } },
        h('div', { class: 'ext-head', onclick: () => this.choose(e.name) },
          h('span', { class: `state state-${e.state}`, title: e.reason || e.state }, e.state),
          h('strong', {}, e.name),
          e.version ? h('span', { class: 'muted' }, ` v${e.version}`) : null,
          e.restarts ? h('span', { class: 'muted' }, ` · ${e.restarts} restart${e.restarts > 1 ? 's' : ''}`) : null,
          h('button', { class: 'small', onclick: (ev) => { ev.stopPropagation(); this.reload(e.name); } }, 'Reload')),
        e.reason ? h('div', { class: 'reason' }, e.reason) : null,
        h('div', { class: 'commands' }, e.commands.map((c) => h('button', {
          class: 'small command', dataset: { command: c }, disabled: e.state !== 'running', onclick: () => this.run(c),
        }, c)))));
    }
    clear(toolbar);
    for (const e of this.all.filter((x) => x.state === 'running')) {
      for (const b of e.toolbarButtons || []) {
        const icon = b.icon && b.icon.trim().startsWith('<svg')
          ? h('img', { src: `data:image/svg+xml,${encodeURIComponent(b.icon)}`, alt: '', class: 'tool-icon' }) : null;
        toolbar.append(h('button', {
          class: 'tool', title: `${b.command} (${e.name})`, dataset: { command: b.command, button: b.id }, onclick: () => this.run(b.command),
        }, icon, b.label));
      }
    }
  }

  async choose(name) {
    this.chosen = name;
    this.el.logTitle.textContent = `Log: ${name}`;
    this.render();
    try {
      const { lines } = await this.rpc.call('extensions/logs', { name, lines: TAIL });
      if (this.chosen !== name) return;
      clear(this.el.log);
      for (const line of lines) this.append(line);
    } catch (error) {
      clear(this.el.log).append(h('div', { class: 'error' }, error.message));
    }
  }

  /** A `log` event: a line one extension wrote to stderr. */
  log(event) {
    if (event.extension === this.chosen) this.append(event);
  }

  append({ level, line }) {
    const log = this.el.log;
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.append(h('div', { class: `log-line level-${level}` }, h('span', { class: 'level' }, level), line));
    while (log.childElementCount > TAIL) log.firstChild.remove();
    if (atEnd) log.scrollTop = log.scrollHeight;
  }
}
