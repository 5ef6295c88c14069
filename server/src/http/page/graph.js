// A drawing of a run's graph (GET /runs/{id}/graph) with each node's
// state: rows by distance from the start, arrows between, edges back up
// the drawing (the loops of an agent) curved along the side.

import { h } from './dom.js';

const SVG = 'http://www.w3.org/2000/svg';
const W = 150;
const H = 36;
const GAP_X = 28;
const GAP_Y = 46;

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

/** Each node's row: its distance from `__start__` (unreachable ones last). */
function rows(graph) {
  const depth = new Map([['__start__', 0]]);
  const queue = ['__start__'];
  while (queue.length) {
    const node = queue.shift();
    for (const edge of graph.edges) {
      if (edge.from === node && !depth.has(edge.to)) {
        depth.set(edge.to, depth.get(node) + 1);
        queue.push(edge.to);
      }
    }
  }
  const deepest = Math.max(0, ...[...depth.entries()].filter(([n]) => n !== '__end__').map(([, d]) => d));
  // The end sits below everything else.
  depth.set('__end__', deepest + 1);
  for (const node of graph.nodes) if (!depth.has(node.name)) depth.set(node.name, deepest + 1);
  const byRow = [];
  for (const node of graph.nodes) {
    const row = depth.get(node.name);
    (byRow[row] ??= []).push(node);
  }
  return byRow.filter(Boolean);
}

/**
 * The drawing: an `<svg>` plus a list of the nodes and their states for
 * readers who do not see it. `states` maps a node's name to `done`,
 * `running`, `waiting`, `failed` or nothing (not run).
 */
export function drawGraph(graph, states) {
  const layout = rows(graph);
  const widest = Math.max(...layout.map((row) => row.length));
  const width = widest * W + (widest - 1) * GAP_X + 80;
  const height = layout.length * H + (layout.length - 1) * GAP_Y + 20;
  const at = new Map();
  layout.forEach((row, r) => {
    const span = row.length * W + (row.length - 1) * GAP_X;
    row.forEach((node, i) => {
      at.set(node.name, { x: (width - 80 - span) / 2 + i * (W + GAP_X), y: 10 + r * (H + GAP_Y), row: r });
    });
  });
  const marker = s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    s('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }));
  const edges = graph.edges.map((edge) => {
    const from = at.get(edge.from);
    const to = at.get(edge.to);
    if (!from || !to) return null;
    let d;
    if (to.row > from.row) {
      d = `M${from.x + W / 2},${from.y + H} L${to.x + W / 2},${to.y}`;
    } else {
      // Back up the drawing: around the right side.
      const side = Math.max(from.x, to.x) + W;
      const bend = side + 30 + 10 * Math.abs(from.row - to.row);
      d = `M${from.x + W},${from.y + H / 2} C${bend},${from.y + H / 2} ${bend},${to.y + H / 2} ${to.x + W},${to.y + H / 2}`;
    }
    return s('path', { d, class: `edge edge-${edge.kind}`, 'marker-end': 'url(#arrow)' });
  });
  const nodes = graph.nodes.map((node) => {
    const place = at.get(node.name);
    const state = states.get(node.name) ?? (node.kind === 'node' ? 'idle' : node.kind);
    const label = node.kind === 'start' ? 'start' : node.kind === 'end' ? 'end' : node.name;
    return s('g', { class: `node node-${state}`, 'data-node': node.name, 'data-state': state,
      tabindex: node.kind === 'node' ? '0' : null, role: node.kind === 'node' ? 'button' : null,
      'aria-label': node.kind === 'node' ? `${label}: ${state}; show its last update` : null },
      s('title', {}, `${label}: ${state}`),
      s('rect', { x: place.x, y: place.y, width: W, height: H, rx: node.kind === 'node' ? 6 : H / 2 }),
      s('text', { x: place.x + W / 2, y: place.y + H / 2 + 5, 'text-anchor': 'middle' }, label.length > 20 ? `${label.slice(0, 19)}…` : label));
  });
  const svg = s('svg', { viewBox: `0 0 ${width} ${height}`, width, height, class: 'graph', role: 'img', 'aria-labelledby': 'graph-title' },
    s('title', { id: 'graph-title' }, `Graph ${graph.name}`),
    s('defs', {}, marker), edges, nodes);
  const list = h('ul', { class: 'visually-hidden', id: 'node-states' },
    graph.nodes.filter((node) => node.kind === 'node').map((node) => h('li', {}, `${node.name}: ${states.get(node.name) ?? 'not run'}`)));
  return [svg, list];
}

/** The drawn node an event's node path belongs to (`review/draft` is inside `review`). */
function topNode(path) {
  const slash = (path ?? '').indexOf('/');
  return slash < 0 ? path : path.slice(0, slash);
}

/**
 * Each node's state from the run's events, in order. Events inside a
 * subgraph (node paths `review/draft`) mark the subgraph's node running or
 * waiting; only its own completion marks it done.
 */
export function nodeStates(events) {
  const states = new Map();
  for (const event of events) {
    const node = topNode(event.node);
    const inner = node !== event.node;
    switch (event.event_type) {
      case 'node_started': states.set(node, 'running'); break;
      case 'node_completed': if (!inner) states.set(node, 'done'); break;
      case 'node_failed': if (!inner) states.set(node, 'failed'); break;
      case 'interrupt_raised': states.set(node, 'waiting'); break;
      case 'run_resumed':
        for (const decision of event.decisions ?? []) {
          const decided = topNode(decision.node);
          if (states.get(decided) === 'waiting') states.set(decided, 'running');
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
