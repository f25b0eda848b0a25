// The message as text beside the tree: raw HL7 (one segment a line,
// delimiters coloured), editable as a whole and applied as `message/set`;
// and the JSON, YAML and TOML forms, read-only, as `message/get` gives them.

import { h, clear } from './dom.js';
import { delimiters, segmentLines } from './hl7.js';

/** The raw view colours at most this many characters of a message; Download gives all. */
const SHOWN = 300000;

export class TextViews {
  constructor(root, actions) {
    this.root = root;
    this.actions = actions; // {set(text), get(format) -> Promise<string>}
    this.format = 'hl7';
    this.text = null;
    this.editing = false;
    this.tabs = h('div', { class: 'tabs', role: 'tablist' },
      ['hl7', 'json', 'yaml', 'toml'].map((f) => h('button', {
        role: 'tab', class: 'tab', dataset: { format: f }, onclick: () => this.pick(f),
      }, f.toUpperCase())));
    this.editButton = h('button', { class: 'edit-raw', onclick: () => this.edit() }, 'Edit');
    this.body = h('div', { class: 'text-body' });
    root.append(h('div', { class: 'text-bar' }, this.tabs, this.editButton), this.body);
    this.mark();
  }

  mark() {
    for (const tab of this.tabs.children) tab.setAttribute('aria-selected', String(tab.dataset.format === this.format));
    this.editButton.hidden = this.format !== 'hl7' || this.editing;
  }

  pick(format) {
    if (this.editing) return;
    this.format = format;
    this.mark();
    this.show(this.text);
  }

  /** Shows the message `text` (raw HL7) in the current form. */
  async show(text) {
    this.text = text;
    if (this.editing) return;
    if (text === null) {
      clear(this.body).append(h('p', { class: 'muted' }, 'No message open.'));
      return;
    }
    if (this.format === 'hl7') {
      const shown = text.length > SHOWN ? text.slice(0, text.lastIndexOf('\r', SHOWN) + 1 || SHOWN) : text;
      clear(this.body).append(coloured(shown));
      if (shown.length < text.length) {
        this.body.append(h('p', { class: 'muted' }, `The first ${SHOWN / 1000} kB of ${Math.round(text.length / 1000)} kB; Download for all of it.`));
      }
      return;
    }
    const format = this.format;
    try {
      const rendered = await this.actions.get(format);
      if (this.format === format && !this.editing) clear(this.body).append(h('pre', { class: 'tree-text' }, rendered));
    } catch (error) {
      clear(this.body).append(h('p', { class: 'error' }, error.message));
    }
  }

  edit() {
    if (this.text === null) return;
    this.editing = true;
    this.mark();
    const area = h('textarea', { class: 'raw-edit', spellcheck: 'false', 'aria-label': 'raw HL7' });
    area.value = segmentLines(this.text).join('\n');
    const stop = () => { this.editing = false; this.mark(); this.show(this.text); };
    const apply = async () => {
      try {
        await this.actions.set(area.value.split('\n').filter((l) => l.trim()).join('\r'));
        stop();
      } catch { /* the error is shown; the text stays for fixing */ }
    };
    area.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') { e.preventDefault(); stop(); }
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); apply(); }
    });
    clear(this.body).append(area, h('div', { class: 'buttons' },
      h('button', { class: 'primary apply-raw', onclick: apply }, 'Apply'),
      h('button', { onclick: stop }, 'Cancel'),
      h('span', { class: 'muted' }, ' Ctrl-Enter applies, Escape cancels')));
    area.focus();
  }
}

/** Raw HL7 with its delimiters in spans of their own kind (drawn as markup: a message may have many). */
function coloured(text) {
  const d = delimiters(text);
  const kinds = new Map([[d.field, 'd-field'], [d.component, 'd-component'], [d.repetition, 'd-repetition'],
    [d.subcomponent, 'd-subcomponent'], [d.escape, 'd-escape']]);
  const html = [];
  for (const line of segmentLines(text)) {
    html.push(`<div class="raw-line"><span class="seg-name">${esc(line.slice(0, 3))}</span>`);
    let plain = '';
    for (let i = 3; i < line.length; i++) {
      // MSH-2 is the delimiters themselves, shown as they are.
      const kind = line.startsWith('MSH') && i > 3 && i < 8 ? null : kinds.get(line[i]);
      if (kind) {
        html.push(esc(plain), `<span class="${kind}">${esc(line[i])}</span>`);
        plain = '';
      } else plain += line[i];
    }
    html.push(esc(plain), '</div>');
  }
  const pre = h('pre', { class: 'raw', 'aria-label': 'raw HL7' });
  pre.innerHTML = html.join('');
  return pre;
}

/** Text for markup: the message's values are data, never markup. */
function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
