// Small DOM helpers: `h` builds an element, `clear` empties one.

/** h('div', {class: 'x', onclick: fn}, 'text', child, [children]) */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key === 'style' && typeof value === 'object') Object.assign(el.style, value);
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

export const $ = (selector) => document.querySelector(selector);

/** A short note at the bottom of the page (errors, what happened). */
export function toast(text, kind = 'info') {
  const box = $('#toasts');
  const note = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
  box.append(note);
  setTimeout(() => note.remove(), kind === 'error' ? 8000 : 3000);
}

/**
 * A modal box over the page: `title`, `body` (nodes), `buttons`
 * ([{label, primary, value}]; a function value is called when pressed).
 * Resolves with the value of the button pressed, or `cancel` on Escape;
 * `modal.current.close(value)` closes the newest one from outside.
 */
export function modal({ title, subtitle, body = [], buttons = [], cancel = null, className = '', handle = {} }) {
  return new Promise((resolve) => {
    const previous = document.activeElement;
    const close = (value) => {
      backdrop.remove();
      previous?.focus?.();
      resolve(value);
    };
    const row = h('div', { class: 'buttons' }, buttons.map((b) => h('button', {
      class: b.primary ? 'primary' : '', dataset: { answer: b.label }, onclick: () => close(typeof b.value === 'function' ? b.value() : b.value),
    }, b.label)));
    const box = h('div', { class: `modal ${className}`, role: 'dialog', 'aria-modal': 'true', 'aria-label': title },
      h('h2', {}, title), subtitle ? h('p', { class: 'asker' }, subtitle) : null, body, row);
    const backdrop = h('div', { class: 'backdrop' }, box);
    backdrop.addEventListener('keydown', (e) => {
      e.stopPropagation();
      if (e.key === 'Escape') { e.preventDefault(); close(cancel); }
      if (e.key === 'Enter' && e.target.tagName === 'INPUT') { e.preventDefault(); box.querySelector('button.primary')?.click(); }
    });
    document.body.append(backdrop);
    (box.querySelector('input') || box.querySelector('button.primary') || box.querySelector('button'))?.focus();
    modal.current = { close };
    handle.close = close;
  });
}
