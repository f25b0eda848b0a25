// The message tree: one row per location (segment, field, repetition,
// component, subcomponent), its path, its schema name, its value. A leaf's
// value is edited in place (click, or Enter on its row) and applied as
// `message/patch`; segments are added and removed. Keyboard: arrows move
// (Right/Left open and close a level), Enter edits, Escape cancels.
//
// A change from elsewhere while a value is being edited waits until the
// edit ends, so typing is never lost under a re-render.

import { h, clear } from './dom.js';
import { nameKey } from './hl7.js';

export class MessageTree {
  constructor(root, actions) {
    this.root = root;
    this.actions = actions; // {patch(path, value), addSegment(name), removeSegment(path)}
    this.closed = new Set();
    this.focusPath = null;
    this.editing = null;
    this.deferred = null;
    this.root.addEventListener('keydown', (e) => this.key(e));
  }

  /** Shows `segments` (from hl7.parse) with `names` (from hl7.fieldNames). */
  show(segments, names) {
    if (this.editing) {
      this.deferred = [segments, names];
      return;
    }
    this.deferred = null;
    const hadFocus = this.root.contains(document.activeElement);
    clear(this.root);
    const list = h('div', { class: 'rows', role: 'tree', 'aria-label': 'message' });
    for (const segment of segments) this.segmentRows(list, segment, names);
    this.root.append(list, this.adder());
    const rows = this.rows();
    let focus = rows.find((r) => r.dataset.path === this.focusPath) || rows[0];
    if (focus) {
      focus.tabIndex = 0;
      this.focusPath = focus.dataset.path;
      if (hadFocus) focus.focus();
    }
  }

  segmentRows(list, segment, names) {
    const open = !this.closed.has(segment.path);
    const remove = segment.name === 'MSH' ? null : h('button', {
      class: 'icon', title: `remove ${segment.path}`, 'aria-label': `remove ${segment.path}`,
      onclick: (e) => { e.stopPropagation(); this.actions.removeSegment(segment.path); },
    }, '×');
    list.append(this.row(1, segment.path, names.get(segment.name), null, open, 'segment', remove));
    if (!open) return;
    for (const field of segment.fields) {
      const nested = field.reps.length > 1 || field.reps[0]?.components.length > 0;
      const fieldOpen = nested && !this.closed.has(field.path);
      const leaf = nested ? null : { value: field.value, fixed: field.fixed };
      list.append(this.row(2, field.path, names.get(nameKey(field.path)), leaf, nested ? fieldOpen : null, 'field', null, nested ? field.value : null));
      if (!fieldOpen) continue;
      if (field.reps.length > 1) {
        for (const rep of field.reps) {
          const repOpen = rep.components.length > 0 && !this.closed.has(rep.path);
          const repLeaf = rep.components.length ? null : { value: rep.value };
          list.append(this.row(3, rep.path, null, repLeaf, rep.components.length ? repOpen : null, 'repetition', null, rep.components.length ? rep.value : null));
          if (repOpen) this.componentRows(list, rep, names, 4);
        }
      } else this.componentRows(list, field.reps[0], names, 3);
    }
  }

  componentRows(list, rep, names, level) {
    for (const comp of rep.components) {
      const subOpen = comp.subs.length > 0 && !this.closed.has(comp.path);
      list.append(this.row(level, comp.path, names.get(nameKey(comp.path)), comp.subs.length ? null : { value: comp.value },
        comp.subs.length ? subOpen : null, 'component', null, comp.subs.length ? comp.value : null));
      if (subOpen) {
        for (const sub of comp.subs) list.append(this.row(level + 1, sub.path, null, { value: sub.value }, null, 'subcomponent'));
      }
    }
  }

  /** One row; `open` is null for a row with no children; `leaf` {value, fixed} for an editable value. */
  row(level, path, name, leaf, open, kind, extra, summary) {
    const toggle = open === null ? h('span', { class: 'toggle' }) : h('span', {
      class: 'toggle', onclick: (e) => { e.stopPropagation(); this.flip(path); },
    }, open ? '▾' : '▸');
    const value = leaf
      ? h('span', {
        class: `value${leaf.fixed ? ' fixed' : ''}${leaf.value === '' ? ' empty' : ''}`,
        onclick: leaf.fixed ? null : (e) => { e.stopPropagation(); this.edit(e.target.closest('.row')); },
      }, leaf.value)
      : h('span', { class: 'summary' }, summary ?? '');
    const row = h('div', {
      class: `row ${kind}`, role: 'treeitem', tabindex: -1, 'aria-level': level,
      'aria-expanded': open === null ? null : String(open),
      dataset: { path, editable: leaf && !leaf.fixed ? 'yes' : 'no' },
      style: { paddingLeft: `${(level - 1) * 1.2 + 0.3}em` },
      onclick: () => this.focus(row),
    }, toggle, h('code', { class: 'path' }, path), name ? h('span', { class: 'name' }, name) : null, value, extra);
    return row;
  }

  adder() {
    const input = h('input', { class: 'segment-name', placeholder: 'NTE', maxlength: 3, size: 4, 'aria-label': 'new segment name' });
    const add = () => {
      const name = input.value.trim().toUpperCase();
      if (/^[A-Z][A-Z0-9]{2}$/.test(name)) this.actions.addSegment(name);
      input.value = '';
    };
    input.addEventListener('keydown', (e) => { if (e.key === 'Enter') add(); });
    return h('div', { class: 'adder' }, 'Add segment ', input, h('button', { onclick: add }, 'Add'));
  }

  rows() {
    return [...this.root.querySelectorAll('.row')];
  }

  focus(row) {
    if (!row) return;
    for (const r of this.root.querySelectorAll('.row[tabindex="0"]')) r.tabIndex = -1;
    row.tabIndex = 0;
    row.focus();
    this.focusPath = row.dataset.path;
  }

  flip(path) {
    if (this.closed.has(path)) this.closed.delete(path);
    else this.closed.add(path);
    this.focusPath = path;
    this.actions.rerender();
  }

  edit(row) {
    if (!row || row.dataset.editable !== 'yes' || this.editing) return;
    this.focus(row);
    const span = row.querySelector('.value');
    const before = span.textContent;
    const input = h('input', { class: 'edit', value: before, 'aria-label': `value of ${row.dataset.path}` });
    this.editing = { row, input };
    span.replaceWith(input);
    input.focus();
    input.select();
    let done = false;
    const finish = (apply) => {
      if (done) return;
      done = true;
      this.editing = null;
      const value = input.value;
      input.replaceWith(span);
      if (apply && value !== before) {
        span.textContent = value;
        this.actions.patch(row.dataset.path, value);
      }
      this.focus(this.rows().find((r) => r.dataset.path === row.dataset.path));
      if (this.deferred) this.show(...this.deferred);
    };
    input.addEventListener('keydown', (e) => {
      e.stopPropagation();
      if (e.key === 'Enter') finish(true);
      else if (e.key === 'Escape') finish(false);
    });
    input.addEventListener('blur', () => finish(true));
  }

  key(e) {
    if (this.editing || !e.target.classList.contains('row')) return;
    const rows = this.rows();
    const at = rows.indexOf(e.target);
    const row = rows[at];
    const level = Number(row.getAttribute('aria-level'));
    const expanded = row.getAttribute('aria-expanded');
    const go = (r) => { e.preventDefault(); this.focus(r); };
    switch (e.key) {
      case 'ArrowDown': return go(rows[at + 1]);
      case 'ArrowUp': return go(rows[at - 1]);
      case 'Home': return go(rows[0]);
      case 'End': return go(rows[rows.length - 1]);
      case 'ArrowRight':
        e.preventDefault();
        if (expanded === 'false') this.flip(row.dataset.path);
        else if (expanded === 'true') this.focus(rows[at + 1]);
        return;
      case 'ArrowLeft':
        e.preventDefault();
        if (expanded === 'true') this.flip(row.dataset.path);
        else this.focus(rows.slice(0, at).reverse().find((r) => Number(r.getAttribute('aria-level')) < level));
        return;
      case 'Enter':
      case 'F2':
        e.preventDefault();
        this.edit(row);
        return;
      default:
    }
  }
}
