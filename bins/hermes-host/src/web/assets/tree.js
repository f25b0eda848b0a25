// The message tree: one row per location (segment, field, repetition,
// component, subcomponent), its path, its schema name, its value. A leaf's
// value is edited in place (click, or Enter on its row) and applied as
// `message/patch`; segments are added and removed. Keyboard: arrows move
// (Right/Left open and close a level), Enter edits, Escape cancels.
//
// A change from elsewhere while a value is being edited waits until the
// edit ends, so typing is never lost under a re-render.

import { h } from './dom.js';
import { nameKey } from './hl7.js';

/** Past this many segments, segments start closed: the tree stays quick to draw. */
const LARGE = 200;

/** Rows drawn at once; "Show more" draws as many again. */
const ROWS_AT_ONCE = 3000;

export class MessageTree {
  constructor(root, actions) {
    this.root = root;
    this.actions = actions; // {patch(path, value), addSegment(name), removeSegment(path), rerender()}
    // What the person opened or closed; a large message starts with its segments closed.
    this.closed = new Set();
    this.opened = new Set();
    this.large = false;
    this.limit = ROWS_AT_ONCE;
    this.focusPath = null;
    this.editing = null;
    this.deferred = null;
    this.list = h('div', { class: 'rows', role: 'tree', 'aria-label': 'message' });
    root.append(this.list, this.adder());
    // One listener each for every row: rows are drawn as markup, many at once.
    this.list.addEventListener('click', (e) => this.click(e));
    root.addEventListener('keydown', (e) => this.key(e));
  }

  /** Shows `segments` (from hl7.parse) with `names` (from hl7.fieldNames). */
  show(segments, names) {
    if (this.editing) {
      this.deferred = [segments, names];
      return;
    }
    this.deferred = null;
    this.large = segments.length > LARGE;
    const hadFocus = this.root.contains(document.activeElement) && document.activeElement.classList.contains('row');
    const html = [];
    let drawn = 0;
    for (; drawn < segments.length && html.length < this.limit; drawn++) this.segmentRows(html, segments[drawn], names);
    if (drawn < segments.length) {
      html.push(`<button class="show-more">Show more (${segments.length - drawn} segments not drawn)</button>`);
    }
    this.list.innerHTML = html.join('');
    const focus = (this.focusPath !== null && this.list.querySelector(`.row[data-path="${CSS.escape(this.focusPath)}"]`))
      || this.list.querySelector('.row');
    if (focus) {
      focus.tabIndex = 0;
      this.focusPath = focus.dataset.path;
      if (hadFocus) focus.focus();
    }
  }

  isOpen(path, level) {
    return this.large && level === 1 ? this.opened.has(path) : !this.closed.has(path);
  }

  segmentRows(html, segment, names) {
    const open = this.isOpen(segment.path, 1);
    const remove = segment.name === 'MSH' ? ''
      : `<button class="icon remove" title="remove ${esc(segment.path)}" aria-label="remove ${esc(segment.path)}">×</button>`;
    html.push(row(1, segment.path, names.get(segment.name), null, open, 'segment', remove));
    if (!open) return;
    for (const field of segment.fields) {
      const nested = field.reps.length > 1 || field.reps[0]?.components.length > 0;
      const fieldOpen = nested && !this.closed.has(field.path);
      const leaf = nested ? null : { value: field.value, fixed: field.fixed };
      html.push(row(2, field.path, names.get(nameKey(field.path)), leaf, nested ? fieldOpen : null, 'field', '', nested ? field.value : null));
      if (!fieldOpen) continue;
      if (field.reps.length > 1) {
        for (const rep of field.reps) {
          const nestedRep = rep.components.length > 0;
          const repOpen = nestedRep && !this.closed.has(rep.path);
          html.push(row(3, rep.path, null, nestedRep ? null : { value: rep.value }, nestedRep ? repOpen : null, 'repetition', '', nestedRep ? rep.value : null));
          if (repOpen) this.componentRows(html, rep, names, 4);
        }
      } else this.componentRows(html, field.reps[0], names, 3);
    }
  }

  componentRows(html, rep, names, level) {
    for (const comp of rep.components) {
      const nested = comp.subs.length > 0;
      const subOpen = nested && !this.closed.has(comp.path);
      html.push(row(level, comp.path, names.get(nameKey(comp.path)), nested ? null : { value: comp.value },
        nested ? subOpen : null, 'component', '', nested ? comp.value : null));
      if (subOpen) {
        for (const sub of comp.subs) html.push(row(level + 1, sub.path, null, { value: sub.value }, null, 'subcomponent', ''));
      }
    }
  }

  click(e) {
    if (e.target.closest('.show-more')) {
      this.limit += ROWS_AT_ONCE;
      this.actions.rerender();
      return;
    }
    const target = e.target.closest('.row');
    if (!target) return;
    const path = target.dataset.path;
    if (e.target.closest('.toggle') && target.hasAttribute('aria-expanded')) this.flip(path);
    else if (e.target.closest('button.remove')) this.actions.removeSegment(path);
    else if (e.target.closest('.value') && target.dataset.editable === 'yes') this.edit(target);
    else this.focus(target);
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
    return [...this.list.querySelectorAll('.row')];
  }

  focus(row) {
    if (!row) return;
    for (const r of this.root.querySelectorAll('.row[tabindex="0"]')) r.tabIndex = -1;
    row.tabIndex = 0;
    row.focus();
    this.focusPath = row.dataset.path;
  }

  flip(path) {
    const set = this.large && !path.includes('.') ? this.opened : this.closed;
    if (set.has(path)) set.delete(path);
    else set.add(path);
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

/** Text for markup: the message's values are data, never markup. */
function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** One row's markup; `open` is null for a row with no children; `leaf` {value, fixed} for an editable value. */
function row(level, path, name, leaf, open, kind, extra, summary) {
  const toggle = open === null ? '<span class="toggle"></span>' : `<span class="toggle">${open ? '▾' : '▸'}</span>`;
  const value = leaf
    ? `<span class="value${leaf.fixed ? ' fixed' : ''}${leaf.value === '' ? ' empty' : ''}">${esc(leaf.value)}</span>`
    : `<span class="summary">${esc(summary ?? '')}</span>`;
  const expanded = open === null ? '' : ` aria-expanded="${open}"`;
  const editable = leaf && !leaf.fixed ? 'yes' : 'no';
  return `<div class="row ${kind} level-${level}" role="treeitem" tabindex="-1" aria-level="${level}"${expanded} data-path="${esc(path)}" data-editable="${editable}">`
    + `${toggle}<code class="path">${esc(path)}</code>${name ? `<span class="name">${esc(name)}</span>` : ''}${value}${extra}</div>`;
}
