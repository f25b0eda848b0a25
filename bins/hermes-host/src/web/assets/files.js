// Files: new, open (a path on the host, through the host's file picker, or a
// file uploaded from this browser), save, save as, download; the file's
// name and whether it has unsaved changes. And the host file picker itself,
// which the extensions' openFile/saveFile/selectDirectory dialogs use too:
// it browses the host's directories with `files/list`.

import { h, clear, modal, toast } from './dom.js';

export class Files {
  constructor(bar, rpc, state) {
    this.rpc = rpc;
    this.state = state; // {message, hasFile, filePath, dirty}
    this.name = h('span', { class: 'file-name' });
    this.dirty = h('span', { class: 'dirty', title: 'unsaved changes' });
    const upload = h('input', { type: 'file', class: 'upload', hidden: true, onchange: () => this.upload(upload) });
    const button = (action, label, title, fn) => h('button', { title, dataset: { action }, onclick: fn }, label);
    bar.append(
      button('new', 'New', 'a new message', () => this.run(() => rpc.call('message/new'))),
      button('open', 'Open…', 'open a file on the host', () => this.open()),
      button('upload', 'Upload…', 'open a file from this computer', () => upload.click()),
      upload,
      button('save', 'Save', 'save (Ctrl-S)', () => this.save()),
      button('save-as', 'Save as…', 'save to another file on the host', () => this.saveAs()),
      button('download', 'Download', 'download the message', () => this.download()),
      h('span', { class: 'file' }, this.dirty, this.name),
    );
  }

  show() {
    const { hasFile, filePath, dirty, message } = this.state;
    this.name.textContent = message === null ? 'no message' : hasFile ? filePath : 'new message (no file yet)';
    this.dirty.textContent = dirty ? '●' : '';
    document.title = `${dirty ? '● ' : ''}${hasFile ? filePath.split('/').pop() : 'hermes-host'} — hermes-host`;
  }

  async run(action, done) {
    try {
      const result = await action();
      if (done) toast(done);
      return result;
    } catch (error) {
      toast(error.message, 'error');
      return undefined;
    }
  }

  async open() {
    const path = await pickHostPath(this.rpc, { mode: 'open', title: 'Open a message on the host', defaultPath: this.state.filePath });
    if (path) await this.run(() => this.rpc.call('message/open', { path }), `opened ${path}`);
  }

  async upload(input) {
    const file = input.files[0];
    input.value = '';
    if (!file) return;
    const text = await file.text();
    await this.run(() => this.rpc.call('message/new', { message: text, format: 'hl7' }), `${file.name} uploaded (save it to keep it on the host)`);
  }

  async save() {
    if (this.state.message === null) return;
    if (!this.state.hasFile) return this.saveAs();
    await this.run(() => this.rpc.call('message/save', {}), 'saved');
  }

  async saveAs() {
    if (this.state.message === null) return;
    const current = this.state.filePath || '';
    const path = await pickHostPath(this.rpc, {
      mode: 'save', title: 'Save the message on the host', defaultPath: current,
      defaultName: current.split('/').pop() || 'message.hl7',
    });
    if (path) await this.run(() => this.rpc.call('message/save', { path }), `saved to ${path}`);
  }

  download() {
    if (this.state.message === null) return;
    const name = (this.state.filePath || '').split('/').pop() || 'message.hl7';
    const url = URL.createObjectURL(new Blob([this.state.message], { type: 'application/hl7-v2' }));
    const link = h('a', { href: url, download: name });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }
}

/**
 * Picks a path on the host: mode `open`, `openMany`, `save` or `directory`.
 * Resolves with a path (an array for `openMany`), or null when cancelled.
 */
export function pickHostPath(rpc, { mode, title, defaultPath, defaultName, filters, subtitle, handle }) {
  const list = h('div', { class: 'picker-list', role: 'listbox', 'aria-label': 'files' });
  const where = h('div', { class: 'picker-where' });
  const name = h('input', { class: 'picker-name', placeholder: mode === 'save' ? 'file name' : 'path', 'aria-label': 'path' });
  const chosen = new Set();
  const extensions = (filters || []).flatMap((f) => f.extensions || []).filter((e) => e && e !== '*');
  let dir = null;
  const load = async (path) => {
    try {
      const listing = await rpc.call('files/list', path ? { path } : {});
      dir = listing.path;
      clear(where).append(h('code', {}, listing.path));
      clear(list);
      if (listing.parent) list.append(entry('..', true, listing.parent));
      for (const e of listing.entries) {
        const shown = e.dir || !extensions.length || extensions.some((x) => e.name.endsWith(`.${x}`));
        if (shown) list.append(entry(e.name, e.dir, `${listing.path}/${e.name}`));
      }
      if (mode === 'directory') name.value = listing.path;
    } catch (error) {
      clear(where).append(h('span', { class: 'error' }, error.message));
    }
  };
  const entry = (label, isDir, path) => h('button', {
    class: `picker-entry${isDir ? ' dir' : ''}`, role: 'option', dataset: { path },
    onclick: (e) => {
      if (isDir) return load(path);
      if (mode === 'openMany' && e.ctrlKey) chosen.add(path);
      else chosen.clear();
      chosen.add(path);
      name.value = mode === 'save' ? label : path;
      for (const b of list.children) b.classList.toggle('chosen', chosen.has(b.dataset.path));
    },
    ondblclick: () => { if (!isDir) modal.current?.close(answer()); },
  }, isDir ? `${label}/` : label);
  const answer = () => {
    const typed = name.value.trim();
    if (!typed) return null;
    const path = typed.startsWith('/') ? typed : `${dir}/${typed}`;
    return mode === 'openMany' ? (chosen.size > 1 ? [...chosen] : [path]) : path;
  };
  if (defaultName) name.value = defaultName;
  const start = defaultPath && defaultPath.startsWith('/') ? defaultPath : null;
  load(start).then(() => { if (start && !dir) load(null); });
  return modal({
    title, subtitle, handle, className: 'picker', cancel: null,
    body: [where, list, name],
    buttons: [
      { label: mode === 'save' ? 'Save' : mode === 'directory' ? 'Select' : 'Open', primary: true, value: answer },
      { label: 'Cancel', value: null },
    ],
  });
}
