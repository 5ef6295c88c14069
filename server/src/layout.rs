//! A layered drawing of a graph outline (the Sugiyama method), for the
//! review page: nodes in ranks from the top (`__start__` first,
//! `__end__` last), edges that close a cycle reversed for ranking and
//! drawn back the right way, an edge spanning several ranks led through
//! a slot of its own in each rank between, orders within ranks chosen to
//! cross few edges, and positions pulled toward their neighbours.
//!
//! Every edge is a polyline whose slanted parts lie in the free bands
//! between ranks and whose upright parts run inside its own node's column
//! or its own slot, so no edge passes through a node that is not one of
//! its ends. A subgraph node can be drawn open: a box holding its graph's
//! own drawing.

use std::collections::{BTreeSet, HashMap};

use serde_json::{json, Value};

use crate::service::Outline;
use order::{back_edges, crossings, sweep_order};

/// Height of a closed node.
const NODE_H: f64 = 36.0;
/// Narrowest and widest node (longer names are cut by the page).
const MIN_W: f64 = 96.0;
const MAX_W: f64 = 220.0;
/// Width given to each character of a name (13 px sans-serif).
const CHAR_W: f64 = 7.6;
/// Width of the slot an edge takes in a rank it passes through.
const SLOT_W: f64 = 10.0;
/// Space between two nodes of a rank (room for a self-loop), a node and a
/// slot, two slots.
const GAP_NODES: f64 = 40.0;
const GAP_NODE_SLOT: f64 = 22.0;
const GAP_SLOTS: f64 = 12.0;
/// Height of the band between two ranks (room for labels).
const GAP_RANKS: f64 = 58.0;
/// Space around a drawing.
const MARGIN: f64 = 16.0;
/// Height of an open subgraph's title strip.
const HEADER: f64 = 26.0;
/// How far a self-loop reaches out of its node.
const LOOP: f64 = 18.0;
/// Rounds of reordering and of pulling positions.
const ORDER_ROUNDS: usize = 24;
const PLACE_ROUNDS: usize = 8;

/// A node placed: its top-left corner and size.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub(crate) path: String,
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) width: f64,
    pub(crate) height: f64,
    /// How many subgraphs it is inside.
    pub(crate) depth: usize,
    /// For a subgraph node: whether it is drawn open.
    pub(crate) open: Option<bool>,
}

/// An edge drawn: the polyline from its source to its target.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) kind: String,
    pub(crate) label: Option<String>,
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) label_at: Option<(f64, f64)>,
    /// Which side of `label_at` the label goes: `start` (to its right) or
    /// `end` (to its left, for a line heading left), as SVG's
    /// `text-anchor`.
    pub(crate) label_anchor: &'static str,
    pub(crate) depth: usize,
}

/// A whole drawing, nested drawings included (their nodes and lines in
/// the same lists, at their place inside their boxes).
#[derive(Debug, Clone, Default)]
pub(crate) struct Drawing {
    pub(crate) width: f64,
    pub(crate) height: f64,
    pub(crate) nodes: Vec<Placed>,
    pub(crate) lines: Vec<Line>,
}

impl Drawing {
    fn shift(&mut self, dx: f64, dy: f64) {
        for node in &mut self.nodes {
            node.x += dx;
            node.y += dy;
        }
        for line in &mut self.lines {
            for point in &mut line.points {
                point.0 += dx;
                point.1 += dy;
            }
            if let Some(at) = &mut line.label_at {
                at.0 += dx;
                at.1 += dy;
            }
        }
    }

    /// `{"width", "height", "nodes": [{"name", "path", "kind", "x", "y",
    /// "width", "height", "depth", "subgraph": "open" | "closed" |
    /// null}], "edges": [{"from", "to", "kind", "label", "points":
    /// [[x, y], …], "label_at": [x, y] | null, "label_anchor": "start" |
    /// "end", "depth"}]}`, paths naming
    /// nodes inside subgraphs as `outer/inner`.
    pub(crate) fn to_json(&self) -> Value {
        let r = |v: f64| (v * 10.0).round() / 10.0;
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .map(|n| {
                let open = n.open.map(|open| if open { "open" } else { "closed" });
                json!({"name": n.name, "path": n.path, "kind": n.kind, "x": r(n.x), "y": r(n.y),
                       "width": r(n.width), "height": r(n.height), "depth": n.depth, "subgraph": open})
            })
            .collect();
        let edges: Vec<Value> = self
            .lines
            .iter()
            .map(|l| {
                let points: Vec<[f64; 2]> = l.points.iter().map(|&(x, y)| [r(x), r(y)]).collect();
                json!({"from": l.from, "to": l.to, "kind": l.kind, "label": l.label,
                       "points": points, "label_at": l.label_at.map(|(x, y)| [r(x), r(y)]),
                       "label_anchor": l.label_anchor, "depth": l.depth})
            })
            .collect();
        json!({"width": r(self.width), "height": r(self.height), "nodes": nodes, "edges": edges})
    }
}

/// The drawing of `outline`, the subgraph nodes whose paths are in `open`
/// drawn open.
pub(crate) fn draw(outline: &Outline, open: &BTreeSet<String>) -> Drawing {
    draw_at(outline, "", 0, open)
}

fn draw_at(outline: &Outline, prefix: &str, depth: usize, open: &BTreeSet<String>) -> Drawing {
    let listed = &outline.nodes;
    let mut index = HashMap::new();
    let mut nodes = Vec::with_capacity(listed.len());
    let mut inner: Vec<Option<Drawing>> = Vec::with_capacity(listed.len());
    for node in listed {
        let name = node.name.as_str();
        if index.contains_key(name) {
            continue;
        }
        let kind = node.kind.as_str();
        let path = format!("{prefix}{name}");
        let nested = node.subgraph.as_deref();
        let label = match kind {
            "start" => "start",
            "end" => "end",
            _ => name,
        };
        // Room for the name, and for the open/close mark of a subgraph.
        let extra = if nested.is_some() { 22.0 } else { 0.0 };
        let closed_w = (label.chars().count() as f64 * CHAR_W + 28.0 + extra).clamp(MIN_W, MAX_W);
        let drawn = match nested {
            Some(sub) if open.contains(&path) => {
                Some(draw_at(sub, &format!("{path}/"), depth + 1, open))
            }
            _ => None,
        };
        let (width, height) = match &drawn {
            Some(d) => (d.width.max(closed_w), d.height + HEADER),
            None => (closed_w, NODE_H),
        };
        index.insert(name.to_owned(), nodes.len());
        nodes.push(Placed {
            path,
            name: name.to_owned(),
            kind: kind.to_owned(),
            x: 0.0,
            y: 0.0,
            width,
            height,
            depth,
            open: nested.map(|_| drawn.is_some()),
        });
        inner.push(drawn);
    }
    let mut edges = Vec::new();
    let mut lines = Vec::new();
    for edge in &outline.edges {
        let ends = index.get(edge.from.as_str()).zip(index.get(edge.to.as_str()));
        let Some((&from, &to)) = ends else { continue };
        edges.push((from, to));
        lines.push(Line {
            from: nodes[from].path.clone(),
            to: nodes[to].path.clone(),
            kind: edge.kind.clone(),
            label: edge.label.clone(),
            points: Vec::new(),
            label_at: None,
            label_anchor: "start",
            depth,
        });
    }
    let sizes: Vec<(f64, f64)> = nodes.iter().map(|n| (n.width, n.height)).collect();
    let end = nodes.iter().position(|n| n.kind == "end");
    let placed = place(&sizes, &edges, end);
    for (node, &(x, y)) in nodes.iter_mut().zip(&placed.corners) {
        node.x = x;
        node.y = y;
    }
    for (line, (points, label)) in lines.iter_mut().zip(placed.routes) {
        line.points = points;
        line.label_at = label.map(|(at, _)| at);
        line.label_anchor = label.map_or("start", |(_, anchor)| anchor);
    }
    let mut drawing = Drawing { width: placed.width, height: placed.height, nodes, lines };
    for (i, nested) in inner.into_iter().enumerate() {
        let Some(mut nested) = nested else { continue };
        let node = &drawing.nodes[i];
        nested.shift(node.x + (node.width - nested.width) / 2.0, node.y + HEADER);
        drawing.nodes.extend(nested.nodes);
        drawing.lines.extend(nested.lines);
    }
    drawing
}

/// Where an edge's label goes, and on which side (see [`Line`]).
type LabelPlace = Option<((f64, f64), &'static str)>;

/// What [`place`] found: each node's top-left corner, each edge's
/// polyline and label place, the drawing's size.
struct Placement {
    corners: Vec<(f64, f64)>,
    routes: Vec<(Vec<(f64, f64)>, LabelPlace)>,
    width: f64,
    height: f64,
}

/// An entry of a rank: a node, or the slot of a long edge.
#[derive(Clone, Copy)]
struct Item {
    rank: usize,
    width: f64,
    node: bool,
}

/// Lays out nodes of `sizes` joined by `edges` (`end`, if given, at the
/// bottom). Node 0 is taken first when looking for cycles.
fn place(sizes: &[(f64, f64)], edges: &[(usize, usize)], end: Option<usize>) -> Placement {
    let n = sizes.len();
    // 1. Cycles: a depth-first walk from each node in turn (the entry
    //    first); an edge back to a node still on the walk is reversed.
    let reversed = back_edges(n, edges);
    let dag: Vec<(usize, usize)> = edges
        .iter()
        .zip(&reversed)
        .map(|(&(a, b), &back)| if back { (b, a) } else { (a, b) })
        .collect();
    // 2. Ranks: the longest path from a source; the end below everything.
    let mut rank = vec![0usize; n];
    let mut incoming = vec![0usize; n];
    for &(a, b) in &dag {
        if a != b {
            incoming[b] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&v| incoming[v] == 0).collect();
    while let Some(v) = ready.pop() {
        for &(a, b) in &dag {
            if a == v && a != b {
                rank[b] = rank[b].max(rank[a] + 1);
                incoming[b] -= 1;
                if incoming[b] == 0 {
                    ready.push(b);
                }
            }
        }
    }
    if let Some(end) = end {
        let deepest = (0..n).filter(|&v| v != end).map(|v| rank[v]).max();
        if let Some(deepest) = deepest {
            rank[end] = rank[end].max(deepest + 1);
        }
    }
    // 3. Slots: each edge becomes a chain of items, one per rank it
    //    touches (self-loops have none).
    let mut items: Vec<Item> =
        (0..n).map(|v| Item { rank: rank[v], width: sizes[v].0, node: true }).collect();
    let mut chains: Vec<Vec<usize>> = Vec::with_capacity(dag.len());
    for &(a, b) in &dag {
        if a == b {
            chains.push(Vec::new());
            continue;
        }
        let mut chain = vec![a];
        for r in rank[a] + 1..rank[b] {
            items.push(Item { rank: r, width: SLOT_W, node: false });
            chain.push(items.len() - 1);
        }
        chain.push(b);
        chains.push(chain);
    }
    let ranks = items.iter().map(|item| item.rank + 1).max().unwrap_or(0);
    let segments: Vec<(usize, usize)> =
        chains.iter().flat_map(|c| c.windows(2).map(|w| (w[0], w[1]))).collect();
    // 4. Orders: first as found walking down from the top, then sorted
    //    by the mean position of neighbours, sweeping down and up; the
    //    order with fewest crossings is kept.
    let mut layers = first_order(&items, &segments, ranks);
    let mut best = (crossings(&layers, &segments, items.len()), layers.clone());
    for round in 0..ORDER_ROUNDS {
        let down = round % 2 == 0;
        sweep_order(&mut layers, &segments, items.len(), down);
        let found = crossings(&layers, &segments, items.len());
        if found < best.0 {
            best = (found, layers.clone());
        }
    }
    let layers = best.1;
    // 5. Positions: centres pulled toward the mean of their neighbours
    //    (above, then below), kept apart, in order.
    let mut centre = vec![0.0f64; items.len()];
    for layer in &layers {
        let mut x = 0.0;
        for (k, &item) in layer.iter().enumerate() {
            if k > 0 {
                x += gap(&items[layer[k - 1]], &items[item]);
            }
            centre[item] = x;
        }
    }
    for round in 0..PLACE_ROUNDS {
        let down = round % 2 == 0;
        let order: Vec<usize> =
            if down { (1..ranks).collect() } else { (0..ranks.saturating_sub(1)).rev().collect() };
        for r in order {
            let layer = &layers[r];
            let wanted: Vec<f64> = layer
                .iter()
                .map(|&item| {
                    let near: Vec<f64> = segments
                        .iter()
                        .filter_map(|&(a, b)| match down {
                            true if b == item => Some(centre[a]),
                            false if a == item => Some(centre[b]),
                            _ => None,
                        })
                        .collect();
                    if near.is_empty() {
                        centre[item]
                    } else {
                        near.iter().sum::<f64>() / near.len() as f64
                    }
                })
                .collect();
            let seps: Vec<f64> =
                layer.windows(2).map(|w| gap(&items[w[0]], &items[w[1]])).collect();
            for (&item, x) in layer.iter().zip(fit(&wanted, &seps)) {
                centre[item] = x;
            }
        }
    }
    let left =
        (0..items.len()).map(|i| centre[i] - items[i].width / 2.0).fold(f64::INFINITY, f64::min);
    let shift = if left.is_finite() { MARGIN - left } else { MARGIN };
    centre.iter_mut().for_each(|x| *x += shift);
    // 6. Bands: each rank as tall as its tallest node.
    let mut band_h = vec![0.0f64; ranks];
    for v in 0..n {
        band_h[rank[v]] = band_h[rank[v]].max(sizes[v].1);
    }
    for h in &mut band_h {
        if *h == 0.0 {
            *h = NODE_H / 2.0;
        }
    }
    let mut band_top = vec![MARGIN; ranks];
    for r in 1..ranks {
        band_top[r] = band_top[r - 1] + band_h[r - 1] + GAP_RANKS;
    }
    let band_bottom: Vec<f64> = (0..ranks).map(|r| band_top[r] + band_h[r]).collect();
    let corners: Vec<(f64, f64)> = (0..n)
        .map(|v| {
            (centre[v] - sizes[v].0 / 2.0, band_top[rank[v]] + (band_h[rank[v]] - sizes[v].1) / 2.0)
        })
        .collect();
    // 7. Ports: the edges leaving a node's bottom (entering its top)
    //    spread along it, in the order of where they go (come from).
    let mut bottom: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
    let mut top: Vec<Vec<(f64, usize)>> = vec![Vec::new(); n];
    for (e, chain) in chains.iter().enumerate() {
        if chain.len() < 2 {
            continue;
        }
        bottom[chain[0]].push((centre[chain[1]], e));
        top[chain[chain.len() - 1]].push((centre[chain[chain.len() - 2]], e));
    }
    let mut out_port = vec![0.0; dag.len()];
    let mut in_port = vec![0.0; dag.len()];
    for v in 0..n {
        for (ports, slot) in [(&mut bottom[v], &mut out_port), (&mut top[v], &mut in_port)] {
            ports.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let (left, width) = (corners[v].0, sizes[v].0);
            let count = ports.len() as f64;
            for (k, &(_, e)) in ports.iter().enumerate() {
                slot[e] = left + width * (k as f64 + 1.0) / (count + 1.0);
            }
        }
    }
    // 8. Routes, drawn downward along the chain, then turned round for
    //    reversed edges so that every line starts at its real source.
    let mut right = (0..items.len()).map(|i| centre[i] + items[i].width / 2.0).fold(0.0, f64::max);
    let mut routes = Vec::with_capacity(dag.len());
    for (e, chain) in chains.iter().enumerate() {
        if chain.is_empty() {
            let v = dag[e].0;
            let (x, y) = corners[v];
            let (w, h) = sizes[v];
            let (mid, out) = (y + h / 2.0, x + w + LOOP);
            right = right.max(out);
            let points =
                vec![(x + w, mid - 8.0), (out, mid - 8.0), (out, mid + 8.0), (x + w, mid + 8.0)];
            routes.push((points, Some(((out, mid), "start"))));
            continue;
        }
        let (a, b) = (chain[0], chain[chain.len() - 1]);
        let mut points = vec![(out_port[e], corners[a].1 + sizes[a].1)];
        if band_bottom[rank[a]] > points[0].1 {
            points.push((out_port[e], band_bottom[rank[a]]));
        }
        for &slot in &chain[1..chain.len() - 1] {
            let r = items[slot].rank;
            points.push((centre[slot], band_top[r]));
            points.push((centre[slot], band_bottom[r]));
        }
        let b_top = corners[b].1;
        if band_top[rank[b]] < b_top {
            points.push((in_port[e], band_top[rank[b]]));
        }
        points.push((in_port[e], b_top));
        if reversed[e] {
            points.reverse();
        }
        // The label sits halfway along the first part crossing a band
        // between ranks, on the side the line heads away from.
        let label = points
            .windows(2)
            .find(|w| (w[0].1 - w[1].1).abs() > 1.0 && band_gap(w, &band_top, &band_bottom))
            .map(|w| {
                let anchor = if w[1].0 < w[0].0 - 1.0 { "end" } else { "start" };
                (((w[0].0 + w[1].0) / 2.0, (w[0].1 + w[1].1) / 2.0), anchor)
            });
        routes.push((points, label));
    }
    let height = band_bottom.last().copied().unwrap_or(MARGIN) + MARGIN;
    Placement { corners, routes, width: right + MARGIN, height }
}

/// Whether the segment `w` lies in a band between ranks.
fn band_gap(w: &[(f64, f64)], band_top: &[f64], band_bottom: &[f64]) -> bool {
    let (low, high) = (w[0].1.min(w[1].1), w[0].1.max(w[1].1));
    band_bottom
        .iter()
        .zip(band_top.iter().skip(1))
        .any(|(&b, &t)| low >= b - 0.5 && high <= t + 0.5)
}

/// The items of each rank in the order a walk down the segments first
/// meets them (items never met last).
fn first_order(items: &[Item], segments: &[(usize, usize)], ranks: usize) -> Vec<Vec<usize>> {
    let mut layers: Vec<Vec<usize>> = vec![Vec::new(); ranks];
    let mut seen = vec![false; items.len()];
    let mut queue = std::collections::VecDeque::new();
    for start in 0..items.len() {
        if seen[start] || !items[start].node {
            continue;
        }
        seen[start] = true;
        queue.push_back(start);
        while let Some(v) = queue.pop_front() {
            layers[items[v].rank].push(v);
            for &(a, b) in segments {
                if a == v && !seen[b] {
                    seen[b] = true;
                    queue.push_back(b);
                }
            }
        }
    }
    for (i, item) in items.iter().enumerate() {
        if !seen[i] {
            layers[item.rank].push(i);
        }
    }
    layers
}

/// The space between the centres of two neighbours in a rank.
fn gap(left: &Item, right: &Item) -> f64 {
    let space = match (left.node, right.node) {
        (true, true) => GAP_NODES,
        (false, false) => GAP_SLOTS,
        _ => GAP_NODE_SLOT,
    };
    left.width / 2.0 + space + right.width / 2.0
}

/// Positions as close as can be (least squares) to `wanted`, in order,
/// each at least `seps[i]` after the one before: with each position
/// measured from its least offset the constraint is plain order, solved
/// by pooling adjacent violators.
fn fit(wanted: &[f64], seps: &[f64]) -> Vec<f64> {
    let mut offset = vec![0.0; wanted.len()];
    for i in 1..wanted.len() {
        offset[i] = offset[i - 1] + seps[i - 1];
    }
    // Blocks of (mean, size) of the shifted targets.
    let mut blocks: Vec<(f64, usize)> = Vec::new();
    for (w, o) in wanted.iter().zip(&offset) {
        blocks.push((w - o, 1));
        while let [.., (m1, n1), (m2, n2)] = blocks[..] {
            if m1 <= m2 {
                break;
            }
            blocks.truncate(blocks.len() - 2);
            let size = n1 + n2;
            blocks.push(((m1 * n1 as f64 + m2 * n2 as f64) / size as f64, size));
        }
    }
    blocks
        .into_iter()
        .flat_map(|(mean, size)| std::iter::repeat_n(mean, size))
        .zip(&offset)
        .map(|(y, o)| y + o)
        .collect()
}

#[path = "layout_order.rs"]
mod order;

#[cfg(test)]
#[path = "layout_segment.rs"]
mod segment;

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
