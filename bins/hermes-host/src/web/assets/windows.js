// Extension windows (`ui/openWindow`): the extension's http(s) page in a
// frame inside this page, with its title and size, over a backdrop when
// modal. Closed by the extension (`ui/closeWindow`: the host tells it
// `window/closed {reason: "extension"}`) or by the person (the page sends
// `window/closed`, which the host passes on with reason `user`).

import { h } from './dom.js';

export class Windows {
  constructor(rpc, layer) {
    this.rpc = rpc;
    this.layer = layer;
    this.open = new Map(); // windowId → element
    rpc.serve('ui/openWindow', (p) => this.show(p));
    rpc.serve('ui/closeWindow', (p) => {
      this.remove(p.windowId);
      return { success: true };
    });
  }

  show(p) {
    const width = Math.min(Number(p.width) || 800, window.innerWidth - 40);
    const height = Math.min(Number(p.height) || 600, window.innerHeight - 80);
    const url = new URL(p.url);
    // A page of this host's own origin would reach the live channel: no same-origin rights for it.
    const sandbox = `allow-scripts allow-forms allow-popups allow-modals allow-downloads${url.origin === location.origin ? '' : ' allow-same-origin'}`;
    const frame = h('iframe', { src: url.href, sandbox, title: p.title });
    const close = h('button', { class: 'icon close-window', title: 'close', 'aria-label': `close ${p.title}`, onclick: () => this.closeByUser(p.windowId) }, '×');
    const win = h('div', {
      class: `window${p.resizable === false ? '' : ' resizable'}`, role: 'dialog', 'aria-label': p.title,
      dataset: { windowId: p.windowId }, style: { width: `${width}px`, height: `${height}px` },
    }, h('div', { class: 'window-title' }, h('span', {}, p.title), h('span', { class: 'muted by' }, p.extension), close), frame);
    const el = p.modal ? h('div', { class: 'backdrop window-backdrop' }, win) : win;
    this.layer.append(el);
    this.open.set(p.windowId, el);
    return { windowId: p.windowId };
  }

  remove(id) {
    this.open.get(id)?.remove();
    this.open.delete(id);
  }

  async closeByUser(id) {
    this.remove(id);
    try {
      await this.rpc.call('window/closed', { windowId: id });
    } catch { /* the host already forgot it: nothing to tell */ }
  }

  /** The connection dropped: the host closed this page's windows (`ui_detached`). */
  reset() {
    for (const id of [...this.open.keys()]) this.remove(id);
  }
}
