// Small helpers to build the page's elements (text is always set as text,
// never parsed as HTML).

/**
 * An element: `h('a', {href: '#/'}, 'Inbox')`. Attributes starting with
 * `on` are listeners; `class`, `hidden`, `disabled` and the rest are set
 * as attributes; `false`, `null` and `undefined` leave them out.
 */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (value === true) {
      element.setAttribute(name, '');
    } else {
      element.setAttribute(name, String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** `value` as indented JSON. */
export function pretty(value) {
  return JSON.stringify(value, null, 2);
}

/** How long ago `iso` was, in words ("42 s", "3 min", "2 h", "5 d"). */
export function age(iso, now = Date.now()) {
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h`;
  return `${Math.floor(seconds / 86400)} d`;
}

const STATUS_WORDS = {
  awaiting_hitl: 'Needs decision',
  queued: 'Queued',
  running: 'Running',
  completed: 'Done',
  failed: 'Failed',
  rejected: 'Rejected',
  interrupted: 'Stopped',
};

/** A status in plain words. */
export function statusWord(status) {
  return STATUS_WORDS[status] ?? String(status).replace('_', ' ');
}

/** A status as a badge in plain words; the API's value in `data-status`. */
export function badge(status) {
  return h('span', { class: `badge status-${status}`, 'data-status': status, title: `status: ${status}` }, statusWord(status));
}

/** The local time of an RFC 3339 instant, to the second. */
export function clock(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/** Where the page keeps the name a reviewer gave (recorded with what they do). */
export const REVIEWER = 'tollgate.reviewer';

/** A field for the reviewer's name, kept between visits; `read()` gives it or undefined. */
export function reviewerField(label) {
  const input = h('input', { id: 'reviewer', name: 'reviewer', autocomplete: 'name', value: localStorage.getItem(REVIEWER) ?? '',
    onchange: (event) => localStorage.setItem(REVIEWER, event.target.value.trim()) });
  return {
    element: h('div', { class: 'field reviewer' }, h('label', { for: 'reviewer' }, label), input),
    read: () => input.value.trim() || undefined,
  };
}
