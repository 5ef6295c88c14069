// What the page says in words: what an interrupt asks, what a run was
// asked, and an agent's conversation as a transcript.

import { h, pretty } from './dom.js';

/** A value short enough for a sentence. */
function brief(value, limit = 40) {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

/** The arguments of a tool call, when they are a plain object. */
function argsOf(payload) {
  const args = payload?.args;
  return args && typeof args === 'object' && !Array.isArray(args) ? args : null;
}

/** A run id short enough for a narrow screen (its end, which varies). */
export function shortId(id) {
  return id.length > 10 ? `…${id.slice(-8)}` : id;
}

/**
 * Where a forked run came from, in words: "forked from …3F9KQ2ZM at step
 * 2 by ann; changed: amount".
 */
export function sayFork(origin) {
  const by = origin.by ? ` by ${origin.by}` : '';
  const changed = origin.changed?.length ? `; changed: ${origin.changed.join(', ')}` : '';
  return `forked from ${shortId(origin.run)} at step ${origin.step}${by}${changed}`;
}

/**
 * What an interrupt asks, as a sentence: "Agent refunds wants to call
 * issue_refund with id = 7"; a graph's own interrupt by its `title`, its
 * `question`, or its kind.
 */
export function sayInterrupt(interrupt) {
  const payload = interrupt.payload;
  if (payload && typeof payload === 'object' && typeof payload.tool === 'string') {
    const who = payload.agent ? `Agent ${payload.agent}` : 'The agent';
    const args = Object.entries(argsOf(payload) ?? {});
    const said = args.slice(0, 3).map(([key, value]) => `${key} = ${brief(value, 24)}`).join(', ');
    const more = args.length > 3 ? ', …' : '';
    return `${who} wants to call ${payload.tool}${said ? ` with ${said}${more}` : ''}`;
  }
  if (payload && typeof payload === 'object') {
    for (const key of ['title', 'question', 'prompt', 'message']) {
      if (typeof payload[key] === 'string' && payload[key].trim()) return payload[key].trim();
    }
  }
  if (typeof payload === 'string' && payload.trim()) return brief(payload.trim(), 120);
  return `Decide: ${interrupt.kind.replace('_', ' ')}`;
}

/**
 * The body of a decision panel: the sentence, a graph interrupt's
 * description, the arguments as a table, and the raw JSON one click away.
 */
export function interruptDetails(interrupt) {
  const payload = interrupt.payload;
  const args = argsOf(payload);
  const description = payload && typeof payload === 'object' && typeof payload.description === 'string'
    ? h('p', { class: 'description' }, payload.description) : null;
  const table = args && Object.keys(args).length
    ? h('table', { class: 'args' },
      h('caption', { class: 'visually-hidden' }, 'Arguments'),
      h('tbody', {}, Object.entries(args).map(([key, value]) => h('tr', {},
        h('th', { scope: 'row' }, key),
        h('td', {}, typeof value === 'string' ? value : h('code', { class: 'mono' }, JSON.stringify(value)))))))
    : null;
  return [
    h('p', { class: 'ask' }, sayInterrupt(interrupt)),
    description,
    table,
    h('details', { class: 'raw' }, h('summary', {}, 'Raw JSON'),
      h('pre', { class: 'payload', tabindex: '0', 'aria-label': 'What is asked, as JSON' }, pretty(payload))),
  ];
}

/** The text of a message's content (a string, or parts with text). */
function textOf(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((part) => (typeof part === 'string' ? part : part?.text ?? '')).join('');
  }
  return content === undefined || content === null ? '' : JSON.stringify(content);
}

/**
 * What a run was asked, in a line: the first user message of an agent
 * run, else its input state summarised ("key: value, …").
 */
export function preview(values) {
  if (!values || typeof values !== 'object') return '';
  const messages = Array.isArray(values.messages) ? values.messages : [];
  const first = messages.find((message) => message?.role === 'user');
  if (first) return brief(textOf(first.content).trim(), 120);
  const fields = Object.entries(values).filter(([key]) => key !== 'messages').slice(0, 3);
  return brief(fields.map(([key, value]) => `${key}: ${brief(value, 30)}`).join(', '), 120);
}

/** An agent run's messages as a chat transcript; `null` without any. */
export function transcript(values) {
  const messages = Array.isArray(values?.messages) ? values.messages : [];
  if (!messages.length) return null;
  return h('ol', { class: 'transcript', id: 'transcript' }, messages.map((message) => {
    const role = message.role ?? 'message';
    const who = { user: 'User', assistant: message.agent ? `Agent ${message.agent}` : 'Assistant', tool: 'Tool result', system: 'System' }[role] ?? role;
    const calls = Array.isArray(message.tool_calls) ? message.tool_calls : [];
    return h('li', { class: `said said-${role}`, 'data-role': role },
      h('span', { class: 'who' }, who, message.name ? ` (${message.name})` : ''),
      textOf(message.content) ? h('p', {}, textOf(message.content)) : null,
      calls.map((call) => h('p', { class: 'call' }, 'Calls ', h('code', { class: 'mono' }, call.name ?? call.function?.name ?? 'a tool'),
        ' with ', h('code', { class: 'mono' }, brief(call.args ?? call.arguments ?? {}, 200)))));
  }));
}

/** A decision as the end of a sentence ("approved", "rejected (“…”)"). */
export function describeDecision(decision) {
  if (!decision) return 'decided';
  switch (decision.decision) {
    case 'approve': return 'approved';
    case 'edit': return `edited to ${JSON.stringify(decision.value)}`;
    case 'respond': return `answered ${JSON.stringify(decision.value)}`;
    case 'reject': return decision.reason ? `rejected (“${decision.reason}”)` : 'rejected';
    default: return decision.decision;
  }
}

/** The last assistant message of a run's result, if it has one. */
export function finalText(result) {
  const messages = result?.messages;
  if (!Array.isArray(messages)) return null;
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const message = messages[i];
    if (message.role === 'assistant' && typeof message.content === 'string' && message.content) return message.content;
  }
  return null;
}

/** Text made safe for an element id. */
export function cssId(text) {
  return text.replace(/[^A-Za-z0-9_-]/g, '-');
}
