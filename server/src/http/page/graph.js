// A drawing of a run's graph (GET /runs/{id}/graph) with each node's
// state. The server lays the graph out in layers (`layout`: boxes, and
// polylines that start at each edge's real source and pass through no
// other node); this draws it: conditional edges dashed and labelled,
// subgraph nodes with a mark that opens them into a box holding their
// own graph.

import { h } from './dom.js';

const SVG = 'http://www.w3.org/2000/svg';
/** Width the layout gives each character of a name (13 px text). */
const CHAR_W = 7.6;

function s(tag, attributes = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) element.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** `text` cut with an ellipsis to fit `width` pixels. */
function fit(text, width) {
  const room = Math.max(3, Math.floor(width / CHAR_W));
  return text.length > room ? `${text.slice(0, room - 1)}…` : text;
}

/**
 * The drawing: an `<svg>` plus a list of the nodes and their states for
 * readers who do not see it. `states` maps a node's path (`review`,
 * `review/draft`) to `done`, `running`, `waiting`, `failed`, `stopped`
 * or nothing (not run); `toggle(path)` opens or closes a subgraph node.
 */
export function drawGraph(graph, states, toggle) {
  const layout = graph.layout;
  const marker = s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    s('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }));
  const boxes = [...layout.nodes].sort((a, b) => a.depth - b.depth).map((node) => {
    const state = states.get(node.path) ?? (node.kind === 'node' ? 'idle' : node.kind);
    const label = node.kind === 'start' ? 'start' : node.kind === 'end' ? 'end' : node.name;
    const user = node.kind === 'node';
    const open = node.subgraph === 'open';
    const mark = node.subgraph
      ? s('g', { class: 'toggle', role: 'button', tabindex: '0', 'data-toggle': node.path, 'aria-expanded': String(open),
        'aria-label': `${open ? 'Close' : 'Open'} subgraph ${node.path}` },
        s('rect', { x: node.x + node.width - 24, y: node.y + 6, width: 18, height: 18, rx: 3 }),
        s('text', { x: node.x + node.width - 15, y: node.y + 19, 'text-anchor': 'middle' }, open ? '−' : '+'))
      : null;
    const room = node.width - 20 - (node.subgraph ? 24 : 0);
    const text = open
      ? s('text', { x: node.x + 10, y: node.y + 18, class: 'subgraph-title' }, fit(label, room))
      : s('text', { x: node.x + (node.subgraph ? (node.width - 24) / 2 : node.width / 2), y: node.y + node.height / 2 + 5, 'text-anchor': 'middle' }, fit(label, room));
    return s('g', { class: `node node-${state}${open ? ' subgraph-open' : ''}`, 'data-node': node.path, 'data-state': state,
      tabindex: user ? '0' : null, role: user ? 'button' : null,
      'aria-label': user ? `${node.path}: ${state}; show its last update` : null },
      s('title', {}, `${node.path}: ${state}`),
      s('rect', { x: node.x, y: node.y, width: node.width, height: node.height, rx: user ? 6 : node.height / 2 }),
      text, mark);
  });
  const edges = layout.edges.map((edge) => {
    const d = edge.points.map(([x, y], i) => `${i ? 'L' : 'M'}${x},${y}`).join(' ');
    const label = edge.label && edge.label_at
      ? s('text', { x: edge.label_at[0] + (edge.label_anchor === 'end' ? -5 : 5), y: edge.label_at[1] + 4,
        'text-anchor': edge.label_anchor, class: 'edge-label' }, edge.label)
      : null;
    return s('g', { class: 'edge-group', 'data-from': edge.from, 'data-to': edge.to },
      s('path', { d, class: `edge edge-${edge.kind}`, 'marker-end': 'url(#arrow)' }), label);
  });
  // Boxes of open subgraphs first, then edges, then the nodes in them.
  const outer = boxes.filter((box) => box.classList.contains('subgraph-open'));
  const rest = boxes.filter((box) => !box.classList.contains('subgraph-open'));
  const svg = s('svg', { viewBox: `0 0 ${layout.width} ${layout.height}`, width: layout.width, height: layout.height, class: 'graph', role: 'img', 'aria-labelledby': 'graph-title' },
    s('title', { id: 'graph-title' }, `Graph ${graph.name}`),
    s('defs', {}, marker), outer, edges, rest);
  svg.addEventListener('click', (event) => {
    const mark = event.target.closest?.('[data-toggle]');
    if (!mark) return;
    event.stopPropagation();
    toggle?.(mark.dataset.toggle);
  });
  svg.addEventListener('keydown', (event) => {
    const mark = event.target.closest?.('[data-toggle]');
    if (!mark || (event.key !== 'Enter' && event.key !== ' ')) return;
    event.preventDefault();
    event.stopPropagation();
    toggle?.(mark.dataset.toggle);
  });
  const list = h('ul', { class: 'visually-hidden', id: 'node-states' },
    layout.nodes.filter((node) => node.kind === 'node').map((node) => h('li', {}, `${node.path}: ${states.get(node.path) ?? 'not run'}`)));
  return [svg, list];
}

/** The subgraph nodes enclosing a node path, outermost first (`a/b/c`: `a`, `a/b`). */
function enclosing(path) {
  const parts = (path ?? '').split('/');
  return parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join('/'));
}

/**
 * Each node's state from the run's events, in order, by node path. Events
 * inside a subgraph (node paths `review/draft`) mark the subgraph nodes
 * around them running or waiting; only a node's own completion marks it
 * done.
 */
export function nodeStates(events) {
  const states = new Map();
  const mark = (path, state) => {
    for (const outer of enclosing(path)) {
      if (state === 'running' || state === 'waiting') states.set(outer, state);
    }
    states.set(path, state);
  };
  for (const event of events) {
    switch (event.event_type) {
      case 'node_started': mark(event.node, 'running'); break;
      case 'node_completed': states.set(event.node, 'done'); break;
      case 'node_failed': states.set(event.node, 'failed'); break;
      case 'interrupt_raised': mark(event.node, 'waiting'); break;
      case 'run_resumed':
        for (const decision of event.decisions ?? []) {
          for (const path of [...enclosing(decision.node), decision.node]) {
            if (states.get(path) === 'waiting') states.set(path, 'running');
          }
        }
        break;
      case 'run_ended':
        if (event.status !== 'awaiting_hitl') {
          for (const [name, state] of states) {
            if (state === 'running' || state === 'waiting') states.set(name, event.status === 'failed' ? 'failed' : 'stopped');
          }
        }
        break;
      default: break;
    }
  }
  return states;
}
