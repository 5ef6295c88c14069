use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::{Drawing, Placed};

/// Whether the segment from `p` to `q` enters the inside of `node`'s box.
fn enters(p: (f64, f64), q: (f64, f64), node: &Placed) -> bool {
    super::segment::enters(p, q, (node.x, node.y, node.width, node.height))
}

/// Whether `point` is on the border of `node`'s box.
fn on_border(point: (f64, f64), node: &Placed) -> bool {
    let near = |a: f64, b: f64| (a - b).abs() < 0.01;
    let inside_x = point.0 >= node.x - 0.01 && point.0 <= node.x + node.width + 0.01;
    let inside_y = point.1 >= node.y - 0.01 && point.1 <= node.y + node.height + 0.01;
    (inside_x && (near(point.1, node.y) || near(point.1, node.y + node.height)))
        || (inside_y && (near(point.0, node.x) || near(point.0, node.x + node.width)))
}

fn node<'d>(drawing: &'d Drawing, path: &str) -> &'d Placed {
    drawing.nodes.iter().find(|n| n.path == path).unwrap()
}

/// Whether `inner` is a node inside the open subgraph `outer`.
fn within(inner: &Placed, outer: &Placed) -> bool {
    inner.path.starts_with(&format!("{}/", outer.path))
}

/// No edge passes through a node that is not one of its ends (nor
/// through the subgraph boxes holding its ends from outside); each edge
/// starts on its source's border and ends on its target's; boxes of one
/// level do not overlap.
fn check(drawing: &Drawing) {
    for line in &drawing.lines {
        let (from, to) = (node(drawing, &line.from), node(drawing, &line.to));
        assert!(line.points.len() >= 2, "{line:?}");
        assert!(
            on_border(line.points[0], from),
            "{} starts off its source: {line:?} {from:?}",
            line.from
        );
        assert!(
            on_border(*line.points.last().unwrap(), to),
            "{} ends off its target: {line:?} {to:?}",
            line.to
        );
        for other in &drawing.nodes {
            if other.path == line.from || other.path == line.to {
                continue;
            }
            // A line inside an open subgraph is inside its box.
            if within(from, other) && within(to, other) {
                continue;
            }
            for w in line.points.windows(2) {
                assert!(
                    !enters(w[0], w[1], other),
                    "{} -> {} crosses {}: {:?}",
                    line.from,
                    line.to,
                    other.path,
                    line.points
                );
            }
        }
    }
    for (i, a) in drawing.nodes.iter().enumerate() {
        for b in &drawing.nodes[i + 1..] {
            if within(a, b) || within(b, a) {
                continue;
            }
            let apart = a.x + a.width <= b.x
                || b.x + b.width <= a.x
                || a.y + a.height <= b.y
                || b.y + b.height <= a.y;
            assert!(apart, "{} and {} overlap", a.path, b.path);
        }
        assert!(
            a.x >= 0.0
                && a.y >= 0.0
                && a.x + a.width <= drawing.width
                && a.y + a.height <= drawing.height,
            "{} outside the drawing",
            a.path
        );
    }
}

/// The drawing of an outline given as JSON.
fn draw(outline: &Value, open: &BTreeSet<String>) -> Drawing {
    super::draw(&serde_json::from_value(outline.clone()).unwrap(), open)
}

fn outline(nodes: &[&str], edges: &[(&str, &str)]) -> Value {
    let mut listed = vec![
        json!({"name": "__start__", "kind": "start"}),
        json!({"name": "__end__", "kind": "end"}),
    ];
    listed.extend(nodes.iter().map(|n| json!({"name": n, "kind": "node"})));
    let edges: Vec<Value> =
        edges.iter().map(|(f, t)| json!({"from": f, "to": t, "kind": "static"})).collect();
    json!({"name": "g", "nodes": listed, "edges": edges})
}

#[test]
fn an_agent_loop_is_drawn_back_from_its_real_source() {
    let agent = outline(
        &["agent", "agent.tools"],
        &[
            ("__start__", "agent"),
            ("agent", "agent.tools"),
            ("agent.tools", "agent"),
            ("agent", "__end__"),
        ],
    );
    let drawing = draw(&agent, &BTreeSet::new());
    check(&drawing);
    let (agent, tools, end) =
        (node(&drawing, "agent"), node(&drawing, "agent.tools"), node(&drawing, "__end__"));
    assert!(tools.y > agent.y, "the tools below the agent");
    assert!(end.y > tools.y, "the end at the bottom");
    let back = drawing.lines.iter().find(|l| l.from == "agent.tools" && l.to == "agent").unwrap();
    // It leaves the tools upward and arrives at the agent's bottom.
    assert!((back.points[0].1 - tools.y).abs() < 0.01, "{back:?}");
    assert!((back.points.last().unwrap().1 - (agent.y + agent.height)).abs() < 0.01, "{back:?}");
    let forth = drawing.lines.iter().find(|l| l.from == "agent" && l.to == "agent.tools").unwrap();
    assert_ne!(
        forth.points[0].0,
        back.points.last().unwrap().0,
        "the two directions do not share a port"
    );
}

#[test]
fn a_long_edge_goes_round_the_nodes_it_skips() {
    // a -> b -> c -> d and a -> d, with b, c in the way of a straight line.
    let chain = outline(
        &["a", "b", "c", "d"],
        &[
            ("__start__", "a"),
            ("a", "b"),
            ("b", "c"),
            ("c", "d"),
            ("a", "d"),
            ("d", "__end__"),
            ("c", "c"),
        ],
    );
    let drawing = draw(&chain, &BTreeSet::new());
    check(&drawing);
    let skip = drawing.lines.iter().find(|l| l.from == "a" && l.to == "d").unwrap();
    assert!(skip.points.len() > 4, "it bends through slots: {skip:?}");
    let looped = drawing.lines.iter().find(|l| l.from == "c" && l.to == "c").unwrap();
    assert_eq!(looped.points.len(), 4, "a self-loop on the node's side");
}

#[test]
fn an_open_subgraph_holds_its_graph_and_a_closed_one_does_not() {
    let mut parent = outline(
        &["plan", "write"],
        &[("__start__", "plan"), ("plan", "write"), ("write", "plan"), ("write", "__end__")],
    );
    parent["nodes"][3]["subgraph"] = outline(
        &["draft", "edit"],
        &[("__start__", "draft"), ("draft", "edit"), ("edit", "draft"), ("edit", "__end__")],
    );
    parent["edges"][1]["label"] = json!("needs writing");
    let closed = draw(&parent, &BTreeSet::new());
    check(&closed);
    assert_eq!(node(&closed, "write").open, Some(false));
    assert!(closed.nodes.iter().all(|n| !n.path.contains('/')));
    let labelled = closed.lines.iter().find(|l| l.label.is_some()).unwrap();
    assert!(labelled.label_at.is_some());

    let open = draw(&parent, &BTreeSet::from(["write".to_owned()]));
    check(&open);
    let write = node(&open, "write");
    assert_eq!(write.open, Some(true));
    for inner in ["write/draft", "write/edit", "write/__start__", "write/__end__"] {
        let inner = node(&open, inner);
        assert!(within(inner, write) && inner.depth == 1);
        assert!(
            inner.x >= write.x && inner.y >= write.y + super::HEADER - 0.01,
            "{inner:?} in {write:?}"
        );
        assert!(
            inner.x + inner.width <= write.x + write.width
                && inner.y + inner.height <= write.y + write.height
        );
    }
    assert!(write.height > closed.nodes.iter().find(|n| n.path == "write").unwrap().height);
}

#[test]
fn positions_keep_order_and_distance_closest_to_what_is_wanted() {
    let fitted = super::place::fit(&[10.0, 10.0, 10.0], &[4.0, 4.0]);
    assert_eq!(fitted, [6.0, 10.0, 14.0]);
    let apart = super::place::fit(&[0.0, 100.0], &[4.0]);
    assert_eq!(apart, [0.0, 100.0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any graph, cycles, self-loops, fan-outs and nodes nothing reaches
    /// included, is drawn with no edge through a node.
    #[test]
    fn no_edge_passes_through_a_node(
        count in 1usize..10,
        picks in proptest::collection::vec((0usize..12, 0usize..12), 0..24),
        open in any::<bool>(),
    ) {
        let names: Vec<String> = (0..count).map(|i| format!("n{i}")).collect();
        let name = |i: usize| match i % (count + 2) {
            0 => "__start__".to_owned(),
            1 => "__end__".to_owned(),
            k => names[k - 2].clone(),
        };
        let mut edges = vec![("__start__".to_owned(), names[0].clone())];
        for (a, b) in picks {
            let (from, to) = (name(a), name(b));
            if from == "__end__" || to == "__start__" || edges.contains(&(from.clone(), to.clone())) {
                continue;
            }
            edges.push((from, to));
        }
        let refs: Vec<(&str, &str)> = edges.iter().map(|(f, t)| (f.as_str(), t.as_str())).collect();
        let node_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut graph = outline(&node_refs, &refs);
        // The first node is a subgraph: the same graph again.
        graph["nodes"][2]["subgraph"] = outline(&node_refs, &refs);
        let opened = if open { BTreeSet::from([names[0].clone()]) } else { BTreeSet::new() };
        check(&draw(&graph, &opened));
    }
}

/// The check itself: a line moved straight through a node is caught.
#[test]
#[should_panic(expected = "crosses")]
fn the_check_catches_a_line_through_a_node() {
    let chain = outline(
        &["a", "b", "c"],
        &[("__start__", "a"), ("a", "b"), ("b", "c"), ("a", "c"), ("c", "__end__")],
    );
    let mut drawing = draw(&chain, &BTreeSet::new());
    let b = node(&drawing, "b").clone();
    let skip = drawing.lines.iter_mut().find(|l| l.from == "a" && l.to == "c").unwrap();
    let (first, last) = (skip.points[0], *skip.points.last().unwrap());
    // Straight down the middle of b's column.
    let x = b.x + b.width / 2.0;
    skip.points = vec![first, (x, first.1 + 1.0), (x, last.1 - 1.0), last];
    check(&drawing);
}
