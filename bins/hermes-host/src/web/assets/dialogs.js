// The extensions' dialogs, answered in the page: while the page is open it
// is the attached UI (`ui/attach {takeover: true}`: the newest tab
// answers). Each dialog names the extension that asks, and its answer goes
// back to it. A dialog another tab (or `ctl ui`) is answering shows here
// as pending elsewhere, from the `dialog` events.

import { h, clear, modal } from './dom.js';
import { pickHostPath } from './files.js';

export class Dialogs {
  constructor(rpc, banner) {
    this.rpc = rpc;
    this.banner = banner;
    this.open = new Map(); // dialogId → {close} of the dialogs shown here
    this.seen = new Set(); // dialogIds this page was asked
    this.elsewhere = new Map(); // dialogId → the event
    const from = (p) => `${p.extension} asks`;
    rpc.serve('ui/showMessage', (p) => this.ask(p, (handle) => modal({
      title: p.title || { warning: 'Warning', error: 'Error' }[p.kind] || 'Message',
      subtitle: from(p), handle, className: `kind-${p.kind || 'info'}`,
      body: [h('p', { class: 'dialog-message' }, p.message)],
      buttons: [{ label: 'OK', primary: true, value: { acknowledged: true } }],
      cancel: { acknowledged: true },
    })));
    rpc.serve('ui/showConfirm', (p) => this.ask(p, (handle) => {
      const [yes, no] = p.buttons === 'okCancel' ? ['OK', 'Cancel'] : ['Yes', 'No'];
      return modal({
        title: p.title || 'Confirm', subtitle: from(p), handle,
        body: [h('p', { class: 'dialog-message' }, p.message)],
        buttons: [{ label: yes, primary: true, value: { confirmed: true } }, { label: no, value: { confirmed: false } }],
        cancel: { confirmed: false },
      });
    }));
    const picker = (mode, key) => (p) => this.ask(p, async (handle) => {
      const path = await pickHostPath(rpc, { ...p, mode, title: p.title || 'Choose', subtitle: from(p), handle });
      return { [key]: path };
    });
    rpc.serve('ui/openFile', picker('open', 'path'));
    rpc.serve('ui/openFiles', picker('openMany', 'paths'));
    rpc.serve('ui/saveFile', picker('save', 'path'));
    rpc.serve('ui/selectDirectory', picker('directory', 'path'));
    rpc.on('dialog', (event) => this.event(event));
  }

  async ask(params, show) {
    const id = params.dialogId;
    this.seen.add(id);
    this.elsewhere.delete(id);
    this.render();
    const handle = {};
    this.open.set(id, handle);
    try {
      return await show(handle);
    } finally {
      this.open.delete(id);
    }
  }

  event(event) {
    const id = event.dialogId;
    if (event.state === 'pending' && !this.seen.has(id)) this.elsewhere.set(id, event);
    if (event.state === 'done') {
      this.elsewhere.delete(id);
      // Ended without this page's answer: the extension went away.
      this.open.get(id)?.close?.(null);
    }
    this.render();
  }

  /** The connection dropped: nothing pending is known any more. */
  reset() {
    this.elsewhere.clear();
    this.render();
  }

  render() {
    clear(this.banner);
    this.banner.hidden = this.elsewhere.size === 0;
    for (const e of this.elsewhere.values()) {
      const what = e.title || e.message || e.method.replace('ui/', '');
      this.banner.append(h('div', { class: 'pending' }, `${e.extension} asks “${what}”: pending in another window, which answers it`));
    }
  }
}
