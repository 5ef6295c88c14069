// Forms generated from an interrupt's JSON Schema. The browser's own
// constraint validation (required, min, max, step, minlength, maxlength,
// pattern) checks values in the page; the server checks them again
// against the whole schema.

import { h, pretty } from './dom.js';

let serial = 0;

/**
 * A form for `schema` holding `value`: `{element, read()}` where `read()`
 * returns the value, or `undefined` after marking what is wrong inline.
 * Objects with properties get a field per property; strings, numbers,
 * integers, booleans and enums get their own control; anything else is
 * edited as JSON.
 */
export function schemaForm(schema, value) {
  const field = build(schema ?? {}, value, 'value', true, '');
  return {
    element: field.element,
    read() {
      clearErrors(field.element);
      let ok = true;
      for (const control of field.element.querySelectorAll('input, select, textarea')) {
        if (control.dataset.json !== undefined) checkJson(control);
        if (!control.checkValidity()) {
          ok = false;
          mark(control, control.validationMessage);
        }
      }
      if (!ok) {
        field.element.querySelector('[aria-invalid="true"]')?.focus();
        return undefined;
      }
      return field.read();
    },
  };
}

/** Whether a schema can be edited field by field. */
export function formable(schema) {
  return Boolean(schema) && schema.type === 'object' && schema.properties && Object.keys(schema.properties).length > 0;
}

function build(schema, value, name, required, path) {
  const id = `f${++serial}`;
  const label = schema.title ?? name;
  const help = schema.description ? h('span', { class: 'help', id: `${id}-help` }, schema.description) : null;
  const error = h('span', { class: 'field-error', id: `${id}-error`, role: 'alert' });
  const described = [help ? `${id}-help` : null, `${id}-error`].filter(Boolean).join(' ');
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type;

  if (type === 'object' && schema.properties) {
    const needed = new Set(schema.required ?? []);
    const fields = Object.entries(schema.properties).map(([key, sub]) =>
      [key, build(sub, value?.[key], key, needed.has(key), `${path}/${key}`)]);
    const element = path === ''
      ? h('div', { class: 'schema-form' }, fields.map(([, f]) => f.element))
      : h('fieldset', {}, h('legend', {}, label), help, fields.map(([, f]) => f.element));
    return {
      element,
      read() {
        const out = {};
        // Keys the form does not show are kept as they were.
        if (value && typeof value === 'object' && !Array.isArray(value)) Object.assign(out, value);
        for (const [key, f] of fields) {
          const v = f.read();
          if (v === undefined) delete out[key];
          else out[key] = v;
        }
        return out;
      },
    };
  }

  let control;
  let read;
  if (Array.isArray(schema.enum)) {
    control = h('select', { id, name: path, required, 'aria-describedby': described },
      required ? null : h('option', { value: '' }, '—'),
      schema.enum.map((option, index) => h('option', { value: String(index), selected: JSON.stringify(option) === JSON.stringify(value) }, typeof option === 'string' ? option : JSON.stringify(option))));
    read = () => (control.value === '' ? undefined : schema.enum[Number(control.value)]);
  } else if (type === 'boolean') {
    control = h('input', { id, name: path, type: 'checkbox', checked: value === true, 'aria-describedby': described });
    read = () => control.checked;
  } else if (type === 'integer' || type === 'number') {
    control = h('input', {
      id, name: path, type: 'number', inputmode: type === 'integer' ? 'numeric' : 'decimal', required,
      step: type === 'integer' ? '1' : 'any',
      min: schema.minimum ?? null, max: schema.maximum ?? null,
      value: typeof value === 'number' ? String(value) : null,
      'aria-describedby': described,
    });
    read = () => (control.value === '' ? undefined : Number(control.value));
  } else if (type === 'string') {
    const long = (schema.maxLength ?? 0) > 200 || (typeof value === 'string' && (value.length > 80 || value.includes('\n')));
    control = h(long ? 'textarea' : 'input', {
      id, name: path, required,
      type: long ? null : schema.format === 'email' ? 'email' : 'text',
      minlength: schema.minLength ?? null, maxlength: schema.maxLength ?? null,
      pattern: schema.pattern ?? null,
      value: long ? null : typeof value === 'string' ? value : null,
      rows: long ? 4 : null,
      'aria-describedby': described,
    });
    if (long && typeof value === 'string') control.value = value;
    read = () => (control.value === '' && !required ? undefined : control.value);
  } else {
    control = h('textarea', { id, name: path, required, rows: 4, class: 'mono', 'data-json': '', 'aria-describedby': described });
    control.value = value === undefined ? '' : pretty(value);
    read = () => (control.value.trim() === '' ? undefined : JSON.parse(control.value));
  }
  const element = h('div', { class: type === 'boolean' ? 'field check' : 'field' },
    type === 'boolean' ? [control, h('label', { for: id }, label)] : [h('label', { for: id }, label, required ? h('span', { class: 'req', 'aria-hidden': 'true' }, ' *') : null), control],
    help, error);
  return { element, read };
}

/** A JSON editor: `{element, read()}`, `read()` as for `schemaForm`. */
export function jsonEditor(value, label) {
  const id = `f${++serial}`;
  const control = h('textarea', { id, rows: 8, class: 'mono', required: true, 'data-json': '', 'aria-describedby': `${id}-error`, spellcheck: 'false' });
  control.value = value === undefined ? '' : pretty(value);
  const element = h('div', { class: 'field' }, h('label', { for: id }, label), control,
    h('span', { class: 'field-error', id: `${id}-error`, role: 'alert' }));
  return {
    element,
    read() {
      clearErrors(element);
      checkJson(control);
      if (!control.checkValidity()) {
        mark(control, control.validationMessage);
        control.focus();
        return undefined;
      }
      return JSON.parse(control.value);
    },
  };
}

function checkJson(control) {
  control.setCustomValidity('');
  if (control.value.trim() === '') return;
  try {
    JSON.parse(control.value);
  } catch (error) {
    control.setCustomValidity(`Not valid JSON: ${error.message}`);
  }
}

function mark(control, message) {
  control.setAttribute('aria-invalid', 'true');
  const error = document.getElementById(`${control.id}-error`);
  if (error) error.textContent = message;
}

function clearErrors(root) {
  for (const control of root.querySelectorAll('[aria-invalid]')) control.removeAttribute('aria-invalid');
  for (const error of root.querySelectorAll('.field-error')) error.textContent = '';
}
