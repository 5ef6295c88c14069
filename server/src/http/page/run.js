// One run: its summary, the decisions it waits for, a drawing of its
// graph with each node's state, and its live timeline of events.

import { api, ApiError, socket, Unauthorized } from './api.js';
import { badge, clock, h, pretty, reviewerField, statusWord } from './dom.js';
import { formable, jsonEditor, schemaForm } from './form.js';
import { drawGraph, nodeStates } from './graph.js';
import {
  cssId, describeDecision, finalText, interruptDetails, sayFork, sayInterrupt, shortId, transcript,
} from './words.js';

const FINAL = new Set(['completed', 'failed', 'rejected', 'interrupted']);

export async function runPage(main, id, { fail }) {
  let summary = await api(`/runs/${encodeURIComponent(id)}`);
  // Where a forked run came from: in this first view only (later
  // summaries, after a decision, leave it out); it never changes.
  const origin = summary.forked_from;
  let graph = null;
  let graphNote = '';
  // Subgraph nodes drawn open, by path.
  const open = new Set();
  const readGraph = async () => {
    const query = open.size ? `?open=${encodeURIComponent([...open].join(','))}` : '';
    try {
      graph = await api(`/runs/${encodeURIComponent(id)}/graph${query}`);
    } catch (error) {
      if (error instanceof Unauthorized) throw error;
      graphNote = error.message;
    }
  };
  await readGraph();
  const events = [];
  const panels = new Map();
  const calls = new Map();
  let ws = null;
  let closed = false;
  let refreshing = null;
  let decidedHere = false; // a decision was sent from this page (see `gone`)

  const title = h('h1', {}, 'Run ', h('code', { class: 'mono' }, id));
  const status = h('span', { id: 'run-status' });
  const live = h('span', { class: 'live', id: 'live-state' }, 'connecting…');
  const facts = h('dl', { class: 'facts', id: 'facts' });
  const actions = h('div', { class: 'actions', id: 'actions' });
  const notice = h('p', { id: 'run-notice', role: 'status', 'aria-live': 'polite' });
  const decisionsList = h('div', { id: 'decision-list' });
  const nameField = reviewerField('Your name (recorded with your decision)');
  const decisions = h('section', { id: 'decisions', class: 'card', 'aria-labelledby': 'decisions-title', hidden: true },
    h('h2', { id: 'decisions-title' }, 'Waiting for a decision'),
    nameField.element,
    decisionsList);
  const asked = h('div', { id: 'asked' }, h('p', { class: 'muted' }, 'Reading…'));
  const askedTitle = h('h2', { id: 'asked-title' }, 'Conversation');
  const nodeDetail = h('div', { id: 'node-detail', 'aria-live': 'polite' });
  const drawing = h('div', { id: 'graph', class: 'drawing', onclick: (event) => pickNode(event),
    onkeydown: (event) => { if (event.key === 'Enter' || event.key === ' ') pickNode(event); } });
  const timeline = h('ol', { id: 'timeline', class: 'timeline' });

  main.replaceChildren(
    h('div', { class: 'heading' }, title, status, live),
    notice,
    h('div', { class: 'columns' },
      h('div', { class: 'side' },
        decisions,
        h('section', { class: 'card', id: 'conversation', 'aria-labelledby': 'asked-title' }, askedTitle, asked),
        h('section', { class: 'card', 'aria-labelledby': 'summary-title' },
          h('h2', { id: 'summary-title' }, 'Summary'), facts, actions),
        h('section', { class: 'card', 'aria-labelledby': 'graph-heading' },
          h('h2', { id: 'graph-heading' }, 'Graph'), drawing, nodeDetail)),
      h('section', { class: 'card wide', 'aria-labelledby': 'timeline-title' },
        h('h2', { id: 'timeline-title' }, 'Timeline'), timeline)),
  );

  const reviewer = nameField.read;

  function renderSummary() {
    status.replaceChildren(badge(summary.status),
      summary.wakes_at ? h('span', { class: 'muted wakes' }, ` · sleeps until ${clock(summary.wakes_at)}`) : '');
    const entries = [
      ['Graph', summary.graph],
      summary.thread ? ['Thread', summary.thread] : null,
      ['Step', String(summary.step)],
      ['Started', clock(summary.created_at)],
      ['Updated', clock(summary.updated_at)],
    ].filter(Boolean);
    const answer = finalText(summary.result);
    const items = entries.flatMap(([term, value]) => [h('dt', {}, term), h('dd', {}, value)]);
    if (origin) {
      // The run it came from, a link; when, who, and what the fork changed.
      const from = h('a', { href: `#/run/${origin.run}`, class: 'mono', title: origin.run }, shortId(origin.run));
      const rest = sayFork(origin).replace(/^forked from \S+/, '');
      items.push(h('dt', {}, 'Forked from'), h('dd', { id: 'forked-from' }, from, rest));
    }
    if (answer) items.push(h('dt', {}, 'Answer'), h('dd', { id: 'final-answer' }, answer));
    if (summary.error) {
      items.push(h('dt', {}, 'Error'), h('dd', { class: 'error', id: 'run-error' }, `${summary.error.class ?? summary.error.kind}: ${summary.error.message}`));
    }
    facts.replaceChildren(...items);
    const buttons = [];
    if (summary.status === 'running' || summary.status === 'queued') {
      buttons.push(h('button', { type: 'button', id: 'cancel', onclick: (event) => act(event.target, 'cancel', 'Cancelled.') }, 'Cancel run'));
    }
    if (summary.status === 'interrupted' || summary.status === 'failed' || summary.status === 'running') {
      buttons.push(h('button', { type: 'button', id: 'continue', onclick: (event) => act(event.target, 'continue', 'Continuing.') }, 'Continue'));
    }
    buttons.push(h('a', { href: `#/run/${id}/history`, class: 'button' }, 'History'));
    actions.replaceChildren(...buttons);
  }

  async function act(button, verb, done) {
    button.disabled = true;
    try {
      summary = await api(`/runs/${encodeURIComponent(id)}/${verb}`, { method: 'POST' });
      notice.textContent = done;
      renderSummary();
      // The server closes the socket when a leg ends for good; one still
      // closing would take the new leg's events with it.
      if (!ws || ws.readyState === WebSocket.CLOSED || ws.readyState === WebSocket.CLOSING) connect();
    } catch (error) {
      if (error instanceof Unauthorized) return fail(error);
      notice.textContent = error.message;
      button.disabled = false;
    }
    return undefined;
  }

  function refresh() {
    if (refreshing) return;
    refreshing = setTimeout(async () => {
      refreshing = null;
      try {
        summary = await api(`/runs/${encodeURIComponent(id)}`);
        renderSummary();
        renderDecisions();
      } catch (error) {
        if (error instanceof Unauthorized) fail(error);
        if (error instanceof ApiError && error.status === 404) gone();
      }
    }, 80);
  }

  // The run is not there (any more) for this caller: deleted, or, after a
  // decision sent from here, no longer waiting for a reviewer who only
  // sees it while it waits for them.
  function gone() {
    live.textContent = 'gone';
    notice.textContent = decidedHere
      ? 'Your decision is recorded. The run no longer waits for you, so it is no longer shown to you.'
      : 'This run no longer exists (it was deleted).';
  }

  // What the run was asked and what was said since: an agent's messages
  // as a transcript, another graph's state as JSON. Read again at each
  // checkpoint.
  let reading = null;
  function renderAsked() {
    if (reading) return;
    reading = setTimeout(async () => {
      reading = null;
      try {
        const state = await api(`/runs/${encodeURIComponent(id)}/state`);
        const chat = transcript(state.values);
        askedTitle.textContent = chat ? 'Conversation' : 'Input and state';
        asked.replaceChildren(chat ?? h('pre', { id: 'state-now', tabindex: '0' }, pretty(state.values)));
      } catch (error) {
        if (error instanceof Unauthorized) fail(error);
        else asked.replaceChildren(h('p', { class: 'muted' }, error.message));
      }
    }, 80);
  }

  // A node of the drawing clicked (or Enter on it): its state and the
  // update it last wrote, from the run's events.
  let picked = null;
  function pickNode(event) {
    const node = event.target.closest?.('g.node[role=button]');
    if (!node) return;
    event.preventDefault();
    picked = node.dataset.node;
    renderNodeDetail();
  }
  function renderNodeDetail() {
    if (!picked) return;
    const last = events.filter((e) => e.node === picked && ['node_completed', 'node_failed'].includes(e.event_type)).at(-1);
    const state = nodeStates(events).get(picked) ?? 'not run';
    nodeDetail.replaceChildren(h('div', {}, h('h3', {}, picked, h('span', { class: 'muted' }, ` · ${state}`)),
      !last ? h('p', { class: 'muted' }, 'It has written nothing yet.')
        : last.event_type === 'node_failed' ? h('p', { class: 'error' }, `Failed at step ${last.step}: ${last.error}`)
          : [h('p', { class: 'muted' }, `Its last update, at step ${last.step}:`), h('pre', { tabindex: '0' }, pretty(last.update ?? null))]));
  }

  function renderGraph() {
    if (!graph) {
      drawing.replaceChildren(h('p', { class: 'muted' }, graphNote || 'No drawing for this run.'));
      return;
    }
    drawing.replaceChildren(...drawGraph(graph, nodeStates(events), toggleSubgraph));
    renderNodeDetail();
  }

  async function toggleSubgraph(path) {
    if (open.has(path)) {
      for (const inner of [...open]) if (inner === path || inner.startsWith(`${path}/`)) open.delete(inner);
    } else {
      open.add(path);
    }
    try {
      await readGraph();
    } catch (error) {
      if (error instanceof Unauthorized) return fail(error);
    }
    renderGraph();
    drawing.querySelector(`[data-toggle="${CSS.escape(path)}"]`)?.focus();
    return undefined;
  }

  // ---- decisions ----

  function renderDecisions() {
    const open = summary.status === 'awaiting_hitl' ? summary.interrupts : [];
    for (const interrupt of open) {
      if (!panels.has(interrupt.id)) {
        const panel = decisionPanel(interrupt);
        panels.set(interrupt.id, panel);
        decisionsList.append(panel.element);
      }
    }
    for (const [key, panel] of panels) {
      if (!open.some((interrupt) => interrupt.id === key)) panel.settled();
    }
    decisions.hidden = panels.size === 0;
    // Once nothing is open the section reads as what was decided, not as
    // pending; the reviewer's name field goes with the controls.
    const pending = open.length > 0;
    decisions.dataset.pending = String(pending);
    document.getElementById('decisions-title').textContent = pending ? 'Waiting for a decision' : 'Decided';
    decisions.querySelector('.reviewer').hidden = !pending;
  }

  /** Who decided `interrupt` and how, from the run's events. */
  function winner(interrupt) {
    for (let i = events.length - 1; i >= 0; i -= 1) {
      const event = events[i];
      if (event.event_type !== 'run_resumed') continue;
      const found = (event.decisions ?? []).find((d) => d.id === interrupt);
      if (found?.decision) return found;
    }
    return null;
  }

  function decisionPanel(interrupt) {
    const key = interrupt.id;
    let sending = false;
    let over = false;
    let mine = false;
    const result = h('div', { class: 'outcome', role: 'status', 'aria-live': 'polite' });
    const error = h('p', { class: 'error', role: 'alert' });
    const area = h('div', { class: 'decision-area' });
    const choices = h('div', { class: 'choices', role: 'group', 'aria-label': 'Decision' });
    const element = h('article', { class: 'interrupt', 'data-interrupt': key },
      h('h3', {}, interrupt.kind.replace('_', ' '), h('span', { class: 'muted' }, ` at ${interrupt.node}`)),
      h('p', { class: 'muted' }, 'Raised ', clock(interrupt.raised_at), ' · ', h('code', { class: 'mono' }, key)),
      interruptDetails(interrupt),
      choices, area, error, result);
    const proposed = interrupt.payload && typeof interrupt.payload === 'object' && 'args' in interrupt.payload ? interrupt.payload.args : undefined;

    const controls = () => element.querySelectorAll('button, input, select, textarea');
    const lock = (locked) => { for (const control of controls()) control.disabled = locked; };

    async function send(path, body, said) {
      if (sending || over) return;
      sending = true;
      error.textContent = '';
      lock(true);
      try {
        summary = await api(`/runs/${encodeURIComponent(id)}/${path}`, { method: 'POST', body: { ...body, interrupt: key, by: reviewer() } });
        over = true;
        mine = true;
        decidedHere = true;
        area.replaceChildren();
        choices.replaceChildren();
        result.replaceChildren(h('p', { class: 'ok' }, `${said} Recorded${reviewer() ? ` as ${reviewer()}` : ''}.`));
        renderSummary();
        refresh();
      } catch (failure) {
        if (failure instanceof Unauthorized) { fail(failure); return; }
        if (failure instanceof ApiError && failure.status === 409) {
          over = true;
          area.replaceChildren();
          choices.replaceChildren();
          result.dataset.conflict = 'true';
          lost(failure.message);
          refresh();
        } else {
          // Refused (a value the server's schema check rejects, say):
          // nothing was recorded; change it and send again.
          sending = false;
          lock(false);
          error.textContent = `Not recorded: ${failure.message}`;
        }
        return;
      }
    }

    function lost(message) {
      const won = winner(key);
      result.replaceChildren(
        h('p', { class: 'warning' }, 'Another decision was recorded first; yours was not sent again.'),
        won
          ? h('p', { class: 'winner' }, `Decided by ${won.decided_by ?? 'someone who gave no name'}: ${describeDecision(won.decision)}.`)
          : h('p', { class: 'muted' }, message),
        h('p', {}, 'The run is now ', badge(summary.status), '.'));
    }

    function open(kind) {
      error.textContent = '';
      for (const button of choices.querySelectorAll('button')) button.setAttribute('aria-pressed', String(button.dataset.kind === kind));
      if (kind === 'approve') {
        area.replaceChildren(h('form', { onsubmit: (event) => { event.preventDefault(); send('resume', { decision: 'approve' }, 'Approved.'); } },
          h('p', {}, 'Go ahead as proposed.'),
          h('button', { type: 'submit', class: 'primary', 'data-send': 'approve' }, 'Send approval')));
      } else if (kind === 'edit' || kind === 'respond') {
        const start = kind === 'edit' ? proposed ?? interrupt.payload : undefined;
        let editor = formable(interrupt.schema) ? schemaForm(interrupt.schema, start) : jsonEditor(start, 'Value (JSON)');
        const holder = h('div', {}, editor.element);
        const toggle = h('button', { type: 'button', class: 'link', onclick: () => {
          const current = editor.read();
          editor = jsonEditor(current === undefined ? start : current, 'Value (JSON)');
          holder.replaceChildren(editor.element);
          toggle.remove();
        } }, 'Edit as JSON');
        area.replaceChildren(h('form', { novalidate: true, onsubmit: (event) => {
          event.preventDefault();
          const value = editor.read();
          if (value === undefined) return;
          send('resume', { decision: kind, value }, kind === 'edit' ? 'Edited.' : 'Answered.');
        } },
        interrupt.schema ? h('p', { class: 'muted' }, 'Checked here and again by the server against the interrupt’s schema.') : null,
        holder,
        h('div', { class: 'row' }, h('button', { type: 'submit', class: 'primary', 'data-send': kind }, kind === 'edit' ? 'Send edit' : 'Send answer'),
          formable(interrupt.schema) ? toggle : null)));
      } else if (kind === 'reject') {
        const reason = h('textarea', { id: `reason-${cssId(key)}`, rows: 3, name: 'reason' });
        area.replaceChildren(h('form', { onsubmit: (event) => {
          event.preventDefault();
          send('reject', { reason: reason.value.trim() || undefined }, 'Rejected.');
        } },
        h('label', { for: reason.id }, 'Reason (shown to the agent or recorded with the run)'),
        reason,
        h('button', { type: 'submit', class: 'danger', 'data-send': 'reject' }, 'Send rejection')));
      }
      area.querySelector('input, textarea, select, button[type=submit]')?.focus();
    }

    const labels = { approve: 'Approve', edit: 'Edit', respond: 'Respond', reject: 'Reject' };
    for (const kind of ['approve', 'edit', 'respond', 'reject']) {
      if (!interrupt.decisions.includes(kind)) continue;
      choices.append(h('button', { type: 'button', 'data-kind': kind, 'aria-pressed': 'false', class: kind === 'reject' ? 'danger' : null, onclick: () => open(kind) }, labels[kind]));
    }

    return {
      element,
      /** The interrupt is no longer open: someone (maybe this page) decided. */
      settled() {
        if (mine) return;
        if (!over) {
          over = true;
          area.replaceChildren();
          choices.replaceChildren();
          result.dataset.conflict = 'elsewhere';
        }
        lost('It was decided elsewhere.');
      },
      /** New events may name the winner. */
      update() {
        if (over && !mine) lost('It was decided elsewhere.');
      },
    };
  }

  // ---- timeline ----

  function entry(event, kind, ...content) {
    return h('li', { class: `event ${kind}`, 'data-seq': event.seq, 'data-type': event.event_type },
      h('time', { datetime: event.ts }, event.ts.slice(11, 19)),
      event.node_id ? h('span', { class: 'node-id mono' }, event.node_id) : null,
      h('div', { class: 'what' }, ...content));
  }

  function show(event) {
    const type = event.event_type;
    let item = null;
    switch (type) {
      case 'run_started':
        item = entry(event, 'run', h('strong', {}, event.from_step ? `Leg started at step ${event.from_step}` : 'Run started'), ` · ${event.graph}`);
        break;
      case 'run_ended':
        item = entry(event, `run end-${event.status}`, h('strong', {}, `Leg ended: ${statusWord(event.status).toLowerCase()}`),
          event.error ? h('p', { class: 'error' }, event.error.message) : null);
        break;
      case 'node_started':
        item = entry(event, 'node muted', `${event.node} started`);
        break;
      case 'node_completed':
        item = entry(event, 'node muted', `${event.node} finished`, event.reused ? ' (reused)' : '', event.cached ? ' (from its cache)' : '');
        break;
      case 'node_failed':
        item = entry(event, 'node failed', h('strong', {}, `${event.node} failed`), ` after ${event.attempts} attempt(s)`, h('p', { class: 'error' }, event.error));
        break;
      case 'retry_scheduled':
        item = entry(event, 'retry', `Retry ${event.attempt} in ${event.delay_ms} ms: `, h('span', { class: 'error' }, event.error));
        break;
      case 'checkpoint_saved':
        item = entry(event, 'checkpoint muted', `Checkpoint ${event.step}`);
        break;
      case 'interrupt_raised':
        item = entry(event, 'interrupt', h('strong', {}, `Waiting for a decision: ${sayInterrupt(event.interrupt)}`),
          h('pre', {}, pretty(event.interrupt.payload)));
        break;
      case 'run_resumed':
        item = entry(event, 'resumed', h('strong', {}, 'Decided'), h('ul', {}, (event.decisions ?? []).map((d) =>
          h('li', {}, `${describeDecision(d.decision)}${d.decided_by ? ` by ${d.decided_by}` : ''} (${d.kind.replace('_', ' ')})`))));
        break;
      case 'model_started': {
        const text = h('p', { class: 'stream' });
        const extra = h('div');
        item = entry(event, 'model', h('strong', {}, `${event.agent} → ${event.model}`), event.attempt > 1 ? ` (attempt ${event.attempt})` : '', text, extra);
        calls.set(`model:${event.call_id}`, { text, extra, attempt: event.attempt });
        break;
      }
      case 'model_delta': {
        const call = calls.get(`model:${event.call_id}`);
        if (call) {
          if (call.attempt !== event.attempt) { call.text.textContent = ''; call.attempt = event.attempt; }
          call.text.append(event.text);
        }
        break;
      }
      case 'model_completed': {
        const call = calls.get(`model:${event.call_id}`);
        const message = event.message ?? {};
        const parts = [];
        if (message.tool_calls?.length) parts.push(h('p', { class: 'muted' }, 'Asks for: ', message.tool_calls.map((c) => `${c.name}(${JSON.stringify(c.args)})`).join(', ')));
        if (event.usage) parts.push(h('p', { class: 'muted tokens' }, `${event.usage.input_tokens} in · ${event.usage.output_tokens} out tokens · ${event.duration_ms} ms`));
        if (call) {
          call.text.textContent = message.content ?? '';
          call.extra.replaceChildren(...parts);
        } else {
          item = entry(event, 'model', h('strong', {}, event.agent), h('p', { class: 'stream' }, message.content ?? ''), parts);
        }
        break;
      }
      case 'tool_started': {
        const output = h('pre', { class: 'output', hidden: true });
        const outcome = h('p', { class: 'muted' }, 'running…');
        item = entry(event, 'tool', h('strong', {}, `Tool ${event.tool}`), h('pre', { class: 'args' }, pretty(event.args)), output, outcome);
        calls.set(`tool:${event.call_id}`, { output, outcome });
        break;
      }
      case 'tool_delta': {
        const call = calls.get(`tool:${event.call_id}`);
        if (call) { call.output.hidden = false; call.output.append(`${event.line}\n`); }
        break;
      }
      case 'tool_completed': {
        const call = calls.get(`tool:${event.call_id}`);
        const outcome = h('p', { class: event.ok ? 'ok' : 'error' }, `${event.ok ? 'Result' : 'Error'}: ${event.summary}`);
        if (call) call.outcome.replaceWith(outcome);
        else item = entry(event, 'tool', h('strong', {}, `Tool ${event.tool}`), outcome);
        break;
      }
      case 'task_started':
        item = entry(event, 'task muted', `Task ${event.task} · ${event.name} started`);
        break;
      case 'task_completed':
        item = entry(event, 'task', h('strong', {}, `Task ${event.task} · ${event.name}`), ' finished',
          h('pre', { class: 'output' }, pretty(event.output)));
        break;
      case 'task_failed':
        item = entry(event, 'task failed', h('strong', {}, `Task ${event.task} · ${event.name} failed`), ` (attempt ${event.attempt})`,
          event.retry_in_ms != null ? ` · retried in ${event.retry_in_ms} ms` : '', h('p', { class: 'error' }, event.error));
        break;
      case 'custom':
        item = entry(event, 'custom', h('strong', {}, event.name), h('pre', {}, pretty(event.payload)));
        break;
      case 'pack_run':
        item = entry(event, 'pack', h('strong', {}, 'Pack '), h('code', { class: 'mono' }, event.bundle_hash.slice(0, 16)),
          event.signature_verified ? ` signed by trusted key ${event.key_id}` : event.key_id ? ` signed by untrusted key ${event.key_id}, run unverified` : ' unsigned, run unverified',
          event.cache_hit ? ' (cached)' : '');
        break;
      case 'persona_stage':
        item = entry(event, 'persona', h('strong', {}, event.persona), ` ${event.transition} (${event.stage})`);
        break;
      case 'events_capped':
        item = entry(event, 'muted', `Detail events capped at ${event.cap}`);
        break;
      default:
        break;
    }
    if (item) {
      // Follow the newest events unless the reader scrolled up.
      const following = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 40;
      timeline.append(item);
      if (following) timeline.scrollTop = timeline.scrollHeight;
    }
  }

  function take(event, replay) {
    if (events.length && event.seq <= events[events.length - 1].seq) return;
    events.push(event);
    show(event);
    if (replay) return;
    if (['node_started', 'node_completed', 'node_failed', 'interrupt_raised', 'run_resumed', 'run_ended'].includes(event.event_type)) renderGraph();
    if (['run_started', 'run_ended', 'run_resumed', 'interrupt_raised', 'checkpoint_saved'].includes(event.event_type)) refresh();
    if (['run_started', 'run_ended', 'checkpoint_saved'].includes(event.event_type)) renderAsked();
    for (const panel of panels.values()) panel.update();
  }

  // Draws the timeline again from `list`: the stored log a socket starts
  // with (what an earlier socket showed live may have been taken back
  // since), or what is left after a rewind.
  function redraw(list) {
    events.length = 0;
    calls.clear();
    timeline.replaceChildren();
    for (const event of list) take(event, true);
    renderGraph();
    refresh();
    for (const panel of panels.values()) panel.update();
  }

  /** Follows the run's events; `quiet` keeps the badge as it is. */
  function connect(quiet = false) {
    if (!quiet) live.textContent = 'connecting…';
    const mine = socket(`/runs/${encodeURIComponent(id)}/ws?format=events`, (message) => {
      if (message.type === 'log') {
        redraw(message.events);
        timeline.scrollTop = timeline.scrollHeight;
        live.textContent = 'live';
      } else if (message.type === 'event') {
        take(message.event, false);
      } else if (message.type === 'rewind') {
        // Events past `after` came live from a step that never committed
        // (its leg was cancelled, or its process died).
        redraw(events.filter((event) => event.seq <= message.after));
      } else if (message.type === 'orphaned') {
        notice.textContent = `${message.message}. Continue it here:`;
        notice.append(' ', h('button', { type: 'button', onclick: (event) => act(event.target, 'continue', 'Continuing.') }, 'Continue'));
      }
    }, async () => {
      // A socket replaced meanwhile (by `act`) is no longer followed.
      if (closed || ws !== mine) return;
      // Why did it close? The run as it is now says (the summary shown
      // may be older than the leg's last event): ended, paused (the
      // server closes a leg's stream when the leg ends), or a connection
      // lost. Only the last reads as reconnecting.
      let reachable = true;
      try {
        summary = await api(`/runs/${encodeURIComponent(id)}`);
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) {
          gone();
          return;
        }
        if (error instanceof Unauthorized) {
          fail(error);
          return;
        }
        reachable = false;
      }
      if (closed || ws !== mine) return;
      renderSummary();
      renderDecisions();
      if (reachable && FINAL.has(summary.status)) {
        live.textContent = 'ended';
        return;
      }
      // Reachable and not ended: the stream is taken up again quietly.
      if (!reachable) live.textContent = 'reconnecting…';
      setTimeout(() => {
        if (!closed && ws === mine) connect(reachable);
      }, 1000);
    });
    ws = mine;
  }

  renderSummary();
  renderDecisions();
  renderGraph();
  renderAsked();
  connect();
  performance.mark('tollgate:run-rendered');
  return () => {
    closed = true;
    ws?.close();
    clearTimeout(refreshing);
    clearTimeout(reading);
  };
}
