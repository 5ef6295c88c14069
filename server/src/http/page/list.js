// The inbox (runs waiting for a decision) and the list of all runs: newest
// first, paged, filtered, refreshed live when runs change status.

import { api, socket } from './api.js';
import { age, badge, clock, h, statusWord } from './dom.js';
import { preview, sayFork, sayInterrupt, shortId } from './words.js';

const STATUSES = ['awaiting_hitl', 'running', 'queued', 'completed', 'failed', 'rejected', 'interrupted'];
const PAGE = 25;

/**
 * Renders the listing into `main`; returns what stops its live updates.
 * `inbox` lists runs awaiting a decision unless the filter says otherwise.
 */
export async function listing(main, params, { inbox, fail }) {
  const base = inbox ? '#/' : '#/runs';
  const filter = {
    status: params.has('status') ? params.get('status') : inbox ? 'awaiting_hitl' : '',
    graph: params.get('graph') ?? '',
    thread: params.get('thread') ?? '',
  };
  const cursor = params.get('cursor');
  const body = h('tbody');
  const note = h('p', { class: 'muted', id: 'list-note', 'aria-live': 'polite' });
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages of runs' });
  const live = h('span', { class: 'live', id: 'live-state' }, 'connecting…');
  let timer = null;

  const address = (extra) => {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries({ ...filter, ...extra })) {
      if (value !== '' && value !== null && value !== undefined) query.set(key, value);
    }
    if (inbox && !query.has('status')) query.set('status', '');
    const text = query.toString();
    return text ? `${base}?${text}` : base;
  };

  const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter runs', onsubmit: (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = { status: data.get('status'), graph: data.get('graph').trim(), thread: data.get('thread').trim() };
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(next)) if (value) query.set(key, value);
    if (inbox && !next.status) query.set('status', '');
    const text = query.toString();
    location.hash = text ? `${base}?${text}` : base;
  } },
  h('div', {}, h('label', { for: 'filter-status' }, 'Status'),
    h('select', { id: 'filter-status', name: 'status' },
      h('option', { value: '', selected: filter.status === '' }, 'any'),
      STATUSES.map((status) => h('option', { value: status, selected: filter.status === status }, statusWord(status))))),
  h('div', {}, h('label', { for: 'filter-graph' }, 'Graph'),
    h('input', { id: 'filter-graph', name: 'graph', value: filter.graph, autocomplete: 'off' })),
  h('div', {}, h('label', { for: 'filter-thread' }, 'Thread'),
    h('input', { id: 'filter-thread', name: 'thread', value: filter.thread, autocomplete: 'off' })),
  h('button', { type: 'submit' }, 'Filter'));

  main.replaceChildren(
    h('div', { class: 'heading' }, h('h1', {}, inbox ? 'Waiting for a decision' : 'All runs'), live),
    form,
    h('div', { class: 'scroll' }, h('table', { class: 'runs', id: 'runs' },
      h('caption', { class: 'visually-hidden' }, inbox ? 'Runs waiting for a decision, newest first' : 'Runs, newest first'),
      h('thead', {}, h('tr', {},
        h('th', { scope: 'col' }, 'Run'),
        h('th', { scope: 'col' }, 'Graph'),
        h('th', { scope: 'col' }, 'Status'),
        h('th', { scope: 'col' }, 'Waiting for'),
        h('th', { scope: 'col' }, 'Updated'))),
      body)),
    note,
    pager,
  );

  // What each run was asked, read once per run from its state.
  const asks = new Map();
  function fillPreviews(runs) {
    for (const run of runs) {
      if (asks.has(run.id)) continue;
      asks.set(run.id, '');
      api(`/runs/${encodeURIComponent(run.id)}/state`).then((state) => {
        // What it was asked, and where it came from when it is a fork.
        const fork = state.forked_from ? sayFork(state.forked_from) : '';
        const text = [preview(state.values), fork].filter(Boolean).join(' · ');
        asks.set(run.id, text);
        for (const cell of body.querySelectorAll(`[data-preview="${run.id}"]`)) cell.textContent = text;
      }).catch(() => asks.delete(run.id));
    }
  }

  async function load() {
    const query = new URLSearchParams({ limit: String(PAGE) });
    for (const [key, value] of Object.entries(filter)) if (value) query.set(key, value);
    if (cursor) query.set('cursor', cursor);
    const page = await api(`/runs?${query}`);
    render(page);
  }

  function render(page) {
    const rows = page.runs.map((run) => {
      const waits = run.interrupts ?? [];
      const since = waits.length ? waits.map((i) => i.raised_at).sort()[0] : null;
      const asked = h('span', { class: 'preview', 'data-preview': run.id }, asks.get(run.id) ?? '');
      return h('tr', { 'data-run': run.id, 'data-status': run.status },
        h('td', { class: 'run-cell' },
          h('a', { href: `#/run/${run.id}`, class: 'mono run-id', title: run.id }, shortId(run.id)),
          h('button', { type: 'button', class: 'copy', title: 'Copy the run id', 'aria-label': `Copy run id ${run.id}`,
            onclick: () => navigator.clipboard?.writeText(run.id) }, 'Copy'),
          h('br'), asked),
        h('td', {}, run.graph, run.thread ? h('span', { class: 'muted' }, ` · ${run.thread}`) : null),
        h('td', {}, badge(run.status), run.wakes_at ? h('span', { class: 'muted wakes' }, ` · wakes ${clock(run.wakes_at)}`) : null),
        h('td', {}, waits.length
          ? [waits.map((i) => sayInterrupt(i)).join('; '), ' · ', h('time', { datetime: since, 'data-age': since }, age(since))]
          : h('span', { class: 'muted' }, '—')),
        h('td', {}, h('time', { datetime: run.updated_at, title: clock(run.updated_at) }, clock(run.updated_at))));
    });
    body.replaceChildren(...rows);
    fillPreviews(page.runs);
    const damaged = page.damaged?.length ? ` ${page.damaged.length} stored run(s) on this page do not read.` : '';
    note.textContent = rows.length === 0
      ? (inbox && filter.status === 'awaiting_hitl' ? 'Nothing is waiting for a decision.' : 'No runs match.') + damaged
      : damaged.trim();
    const links = [];
    if (cursor) links.push(h('a', { href: address({ cursor: null }) }, 'Newest'));
    if (page.next_cursor) links.push(h('a', { href: address({ cursor: page.next_cursor }), rel: 'next' }, 'Older'));
    pager.replaceChildren(...links);
    main.dataset.loaded = String(Date.now());
  }

  await load();
  performance.mark('tollgate:list-rendered');

  // Live: the listing is read again whenever runs change status.
  let reading = Promise.resolve();
  let closed = false;
  let ws = null;
  const connect = () => {
    ws = socket('/changes', (message) => {
      if (message.type === 'ready') live.textContent = 'live';
      if (message.type === 'runs_changed') {
        reading = reading.then(load).catch(fail);
      }
    }, () => {
      if (closed) return;
      live.textContent = 'reconnecting…';
      setTimeout(() => { if (!closed) { connect(); reading = reading.then(load).catch(fail); } }, 1000);
    });
  };
  connect();
  timer = setInterval(() => {
    for (const time of body.querySelectorAll('time[data-age]')) time.textContent = age(time.dataset.age);
  }, 1000);
  return () => {
    closed = true;
    ws?.close();
    clearInterval(timer);
  };
}
