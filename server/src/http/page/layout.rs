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

use crate::service::{Outline, OutlineNode};
use place::place;

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
        if index.contains_key(node.name.as_str()) {
            continue;
        }
        let (placed, drawn) = sized(node, prefix, depth, open);
        index.insert(node.name.clone(), nodes.len());
        nodes.push(placed);
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

/// Node `node` of a graph drawn at `depth` (its path under `prefix`),
/// sized for its name, not yet placed; a subgraph node whose path is in
/// `open` drawn open, with the drawing inside it.
fn sized(
    node: &OutlineNode,
    prefix: &str,
    depth: usize,
    open: &BTreeSet<String>,
) -> (Placed, Option<Drawing>) {
    let name = node.name.as_str();
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
    let placed = Placed {
        path,
        name: name.to_owned(),
        kind: kind.to_owned(),
        x: 0.0,
        y: 0.0,
        width,
        height,
        depth,
        open: nested.map(|_| drawn.is_some()),
    };
    (placed, drawn)
}

mod order;
mod place;

#[cfg(test)]
mod segment;
#[cfg(test)]
mod tests;
