// A run's checkpoints: the state at any step, what changed between two
// steps, and time travel: fields written on the latest checkpoint, a new
// run forked from any.

import { api, Unauthorized } from './api.js';
import { clock, h, pretty, reviewerField } from './dom.js';
import { formable, jsonEditor, schemaForm } from './form.js';

const PAGE = 50;

/** Statuses whose latest checkpoint takes written fields. */
const WRITABLE = new Set(['awaiting_hitl', 'interrupted', 'failed']);

export async function historyPage(main, id, params, { fail } = {}) {
  const before = params.get('before');
  const query = new URLSearchParams({ limit: String(PAGE), values: 'true' });
  if (before) query.set('before', before);
  const page = await api(`/runs/${encodeURIComponent(id)}/history?${query}`);
  const checkpoints = page.checkpoints;
  const chosen = Number(params.get('step') ?? checkpoints[0]?.step ?? 0);
  const against = params.has('compare') ? Number(params.get('compare')) : null;

  const list = h('ol', { class: 'checkpoints', id: 'checkpoints' }, checkpoints.map((checkpoint) => {
    const query = new URLSearchParams(params);
    query.set('step', String(checkpoint.step));
    return h('li', { 'data-step': checkpoint.step },
      h('a', { href: `#/run/${id}/history?${query}`, 'aria-current': checkpoint.step === chosen ? 'true' : null },
        `Step ${checkpoint.step}`),
      h('span', { class: 'muted' }, ` · ${clock(checkpoint.at)} · ${checkpoint.tasks} task(s)`,
        written(checkpoint), checkpoint.next?.length ? ` · next: ${checkpoint.next.join(', ')}` : ''));
  }));
  const here = checkpoints.find((checkpoint) => checkpoint.step === chosen);
  const compareSelect = h('select', { id: 'compare', name: 'compare' },
    h('option', { value: '' }, '— pick a step —'),
    checkpoints.filter((c) => c.step !== chosen).map((c) => h('option', { value: String(c.step), selected: c.step === against }, `Step ${c.step}`)));
  const compareForm = h('form', { class: 'row', onsubmit: (event) => {
    event.preventDefault();
    const query = new URLSearchParams(params);
    query.set('step', String(chosen));
    if (compareSelect.value) query.set('compare', compareSelect.value);
    else query.delete('compare');
    location.hash = `#/run/${id}/history?${query}`;
  } }, h('label', { for: 'compare' }, `Compare step ${chosen} with`), compareSelect, h('button', { type: 'submit' }, 'Compare'));

  let comparison = null;
  if (against !== null && here) {
    let other = checkpoints.find((c) => c.step === against);
    if (!other) {
      const state = await api(`/runs/${encodeURIComponent(id)}/state?step=${against}`);
      other = { step: against, values: state.values };
    }
    const [older, newer] = other.step < here.step ? [other, here] : [here, other];
    const changes = diff(older.values, newer.values);
    comparison = h('section', { class: 'card', 'aria-labelledby': 'diff-title' },
      h('h2', { id: 'diff-title' }, `What changed from step ${older.step} to step ${newer.step}`),
      changes.length === 0 ? h('p', { class: 'muted' }, 'Nothing.') : h('table', { class: 'diff', id: 'diff' },
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Where'), h('th', { scope: 'col' }, 'Change'), h('th', { scope: 'col' }, 'Before'), h('th', { scope: 'col' }, 'After'))),
        h('tbody', {}, changes.map((change) => h('tr', { class: `change-${change.kind}` },
          h('td', { class: 'mono' }, change.path || '/'),
          h('td', {}, change.kind),
          h('td', {}, change.before === undefined ? '' : h('pre', {}, pretty(change.before))),
          h('td', {}, change.after === undefined ? '' : h('pre', {}, pretty(change.after))))))));
  }

  const summary = await api(`/runs/${encodeURIComponent(id)}`);
  const schema = await inputSchema(summary.graph);
  const travel = here ? timeTravel(id, here, summary, !before && here.step === checkpoints[0]?.step, schema, fail) : null;

  main.replaceChildren(
    h('div', { class: 'heading' }, h('h1', {}, 'History of ', h('a', { href: `#/run/${id}`, class: 'mono' }, id))),
    h('div', { class: 'columns' },
      h('section', { class: 'card side', 'aria-labelledby': 'checkpoints-title' },
        h('h2', { id: 'checkpoints-title' }, 'Checkpoints, newest first'),
        checkpoints.length ? list : h('p', { class: 'muted' }, 'No checkpoints yet.'),
        page.next_before !== null && page.next_before !== undefined
          ? h('p', {}, h('a', { href: `#/run/${id}/history?before=${page.next_before}` }, 'Older checkpoints'))
          : null),
      h('div', { class: 'wide' },
        here ? h('section', { class: 'card', 'aria-labelledby': 'state-title' },
          h('h2', { id: 'state-title' }, `State at step ${here.step}`),
          here.next?.length ? h('p', {}, `Next: ${here.next.join(', ')}`) : h('p', { class: 'muted' }, 'Nothing next.'),
          checkpoints.length > 1 ? compareForm : null,
          h('pre', { class: 'state', id: 'state', tabindex: '0', 'aria-label': `State at step ${here.step}` }, pretty(here.values))) : null,
        travel,
        comparison)),
  );
  return () => {};
}

/** How a checkpoint not written by the run's own loop came about, and who asked. */
function written(checkpoint) {
  const how = { update: 'edited', fork: 'forked' }[checkpoint.source];
  if (!how) return '';
  return ` · ${how}${checkpoint.by ? ` by ${checkpoint.by}` : ''}`;
}

/**
 * The JSON Schema of what the server's graph `name` takes (the fields of
 * its state's update), when it says and fields can be edited one by one;
 * otherwise null (blueprints, graphs registered without one).
 */
async function inputSchema(name) {
  try {
    const graph = await api(`/graphs/${encodeURIComponent(name)}`);
    return formable(graph.input_schema) ? graph.input_schema : null;
  } catch (error) {
    if (error instanceof Unauthorized) throw error;
    return null;
  }
}

/** The fields of `values` a form can show as they are (text, numbers, yes/no). */
function plain(values) {
  const kept = {};
  for (const [key, value] of Object.entries(values ?? {})) {
    if (['string', 'number', 'boolean'].includes(typeof value)) kept[key] = value;
  }
  return kept;
}

/**
 * The time-travel card of checkpoint `here`: fields to write, written on
 * it when it is the run's `latest` and the run waits, stopped or failed
 * (the run is then stopped, to be continued from its page), or merged
 * into a new run forked from it (the page then opens that run). With the
 * graph's `schema`, a form prefilled with the state's plain fields (only
 * the fields changed are written; lists and objects are written as typed,
 * through their reducers); otherwise, or on request, JSON.
 */
function timeTravel(id, here, summary, latest, schema, fail) {
  const outcome = h('p', { id: 'travel-outcome', role: 'status', 'aria-live': 'polite' });
  const name = reviewerField('Your name (recorded with the change)');
  const writable = latest && WRITABLE.has(summary.status);
  const asJson = () => jsonEditor({}, 'Fields to write (JSON; merged through the state’s reducers)');
  let form = schema ? schemaForm({ ...schema, required: [] }, plain(here.values)) : null;
  let editor = form ?? asJson();
  const slot = h('div', { id: 'travel-editor' }, editor.element);
  const switchToJson = form ? h('button', { type: 'button', class: 'link', id: 'travel-json', onclick: () => {
    form = null;
    editor = asJson();
    slot.replaceChildren(editor.element);
    switchToJson.remove();
  } }, 'Edit as JSON instead') : null;
  const read = () => {
    const values = editor.read();
    if (values === undefined) return undefined;
    if (!values || typeof values !== 'object' || Array.isArray(values)) {
      outcome.textContent = 'The fields to write must be a JSON object.';
      return undefined;
    }
    if (!form) return values;
    // From the form: only what differs from the checkpoint.
    return Object.fromEntries(Object.entries(values)
      .filter(([key, value]) => JSON.stringify(value) !== JSON.stringify(here.values?.[key])));
  };
  const go = async (button, work) => {
    const values = read();
    if (values === undefined) return;
    button.disabled = true;
    try {
      await work(values);
    } catch (error) {
      if (error instanceof Unauthorized) {
        fail?.(error);
        return;
      }
      outcome.textContent = `Not done: ${error.message}`;
      button.disabled = false;
    }
  };
  const write = (event) => go(event.target, async (values) => {
    if (!Object.keys(values).length) {
      outcome.textContent = 'Nothing changed: there is nothing to write.';
      event.target.disabled = false;
      return;
    }
    const written = await api(`/runs/${encodeURIComponent(id)}/state`, { method: 'POST', body: { values, by: name.read() } });
    outcome.textContent = `Written as step ${written.step}. The run is stopped: continue it from its page.`;
    outcome.className = 'ok';
  });
  const fork = (event) => go(event.target, async (values) => {
    const body = { step: here.step, by: name.read() };
    if (Object.keys(values).length) body.values = values;
    const forked = await api(`/runs/${encodeURIComponent(id)}/fork`, { method: 'POST', body });
    location.hash = `#/run/${forked.id}`;
  });
  return h('section', { class: 'card', id: 'travel', 'aria-labelledby': 'travel-title' },
    h('h2', { id: 'travel-title' }, `Change it from step ${here.step}`),
    h('p', { class: 'muted' }, schema
      ? 'Fields you change are written through the state’s reducers. A fork leaves this run as it is.'
      : 'Messages go as {"messages": [{"upsert": {"id": "…", "role": "user", "content": "…"}}]}. A fork leaves this run as it is.'),
    slot, switchToJson,
    name.element,
    h('div', { class: 'actions' },
      writable ? h('button', { type: 'button', id: 'write-state', onclick: write }, 'Write on this checkpoint') : null,
      h('button', { type: 'button', id: 'fork', onclick: fork }, `Fork a new run from step ${here.step}`)),
    outcome);
}

/**
 * The changes from `before` to `after`: `{path, kind, before, after}` with
 * kind `added`, `removed`, `changed` or `appended` (items added at the end
 * of a list, the rest equal), paths as JSON Pointers.
 */
export function diff(before, after, path = '') {
  if (JSON.stringify(before) === JSON.stringify(after)) return [];
  const object = (value) => value && typeof value === 'object' && !Array.isArray(value);
  if (object(before) && object(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
    return keys.flatMap((key) => {
      const at = `${path}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
      if (!(key in after)) return [{ path: at, kind: 'removed', before: before[key] }];
      if (!(key in before)) return [{ path: at, kind: 'added', after: after[key] }];
      return diff(before[key], after[key], at);
    });
  }
  if (Array.isArray(before) && Array.isArray(after) && after.length > before.length
    && before.every((item, index) => JSON.stringify(item) === JSON.stringify(after[index]))) {
    return [{ path, kind: 'appended', after: after.slice(before.length) }];
  }
  return [{ path, kind: 'changed', before, after }];
}
