//! A compiled graph's shape as plain data, for drawings: its nodes, its
//! edges with their kinds and labels, and the shapes of subgraph nodes.

use petgraph::visit::EdgeRef;
use serde::Serialize;

use crate::state::State;

use super::compiled::{CompiledGraph, EdgeKind, GraphNode, Outline};

/// A graph's shape ([`CompiledGraph::shape`]): nodes in the order they
/// were added (`__start__` and `__end__` first), its edges, and for each
/// subgraph node ([`StateGraph::subgraph`](crate::StateGraph::subgraph))
/// the subgraph's own shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GraphShape {
    /// The graph's name.
    pub name: String,
    /// Its nodes.
    pub nodes: Vec<ShapeNode>,
    /// Its edges.
    pub edges: Vec<ShapeEdge>,
}

/// A node of a [`GraphShape`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ShapeNode {
    /// Its name (`__start__` and `__end__` for the virtual ones).
    pub name: String,
    /// `start`, `end` or `node`.
    pub kind: &'static str,
    /// The graph it runs, for a subgraph node.
    pub subgraph: Option<Box<GraphShape>>,
}

/// An edge of a [`GraphShape`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ShapeEdge {
    /// Where it starts.
    pub from: String,
    /// Where it ends.
    pub to: String,
    /// `static`, `conditional` (a route's target, or where a rejection
    /// goes), `command` or `join`.
    pub kind: &'static str,
    /// Its label ([`StateGraph::label`](crate::StateGraph::label)), if any.
    pub label: Option<String>,
}

impl<S: State> CompiledGraph<S> {
    /// The graph's shape, subgraphs nested, for drawings.
    pub fn shape(&self) -> GraphShape {
        shape_of(&self.outline())
    }
}

fn shape_of(outline: &Outline) -> GraphShape {
    let graph = &outline.graph;
    let nodes = graph
        .node_indices()
        .map(|index| {
            let node = &graph[index];
            let kind = match node {
                GraphNode::Start => "start",
                GraphNode::End => "end",
                GraphNode::Node(_) => "node",
            };
            let subgraph = outline.nested.get(node.name()).map(|inner| Box::new(shape_of(inner)));
            ShapeNode { name: node.name().to_owned(), kind, subgraph }
        })
        .collect();
    let edges = graph
        .edge_references()
        .map(|edge| ShapeEdge {
            from: graph[edge.source()].name().to_owned(),
            to: graph[edge.target()].name().to_owned(),
            kind: match edge.weight() {
                EdgeKind::Static => "static",
                EdgeKind::Conditional => "conditional",
                EdgeKind::Command => "command",
                EdgeKind::Join => "join",
            },
            label: outline.labels.get(&(edge.source().index(), edge.target().index())).cloned(),
        })
        .collect();
    GraphShape { name: outline.name.clone(), nodes, edges }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{GraphProblem, StateGraph, END, START};

    type Json = crate::DynState;

    fn noop(graph: StateGraph<Json>, name: &str) -> StateGraph<Json> {
        graph.node(name, |_state: Arc<Json>, _ctx| async { Ok(Default::default()) })
    }

    #[test]
    fn labels_and_subgraphs_are_in_the_shape() {
        let inner = noop(StateGraph::<Json>::with_schema("inner", 1, Default::default()), "draft")
            .edge(START, "draft")
            .edge("draft", END)
            .compile()
            .expect("inner compiles");
        let graph = noop(StateGraph::<Json>::with_schema("outer", 1, Default::default()), "check")
            .subgraph(
                "write",
                inner,
                |_s, _send| Ok(Json::default()),
                |_s, _t| Ok(Default::default()),
            )
            .edge(START, "check")
            .route("check", ["write", END], |_s: &Json| crate::Route::to(END))
            .edge("write", END)
            .label("check", "write", "needs a draft")
            .compile()
            .expect("outer compiles");
        let shape = graph.shape();
        let names: Vec<&str> = shape.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, [START, END, "check", "write"]);
        let write = &shape.nodes[3];
        let inner = write.subgraph.as_ref().expect("write is a subgraph");
        assert_eq!(inner.name, "inner");
        assert!(inner.edges.iter().any(|e| e.from == "draft" && e.to == END));
        let labelled: Vec<(&str, &str, &str, Option<&str>)> = shape
            .edges
            .iter()
            .map(|e| (e.from.as_str(), e.to.as_str(), e.kind, e.label.as_deref()))
            .collect();
        assert!(labelled.contains(&("check", "write", "conditional", Some("needs a draft"))));
        assert!(labelled.contains(&("check", END, "conditional", None)));
        assert!(shape.nodes[2].subgraph.is_none());
    }

    #[test]
    fn a_label_on_a_missing_edge_is_refused() {
        let error = noop(StateGraph::<Json>::with_schema("g", 1, Default::default()), "a")
            .edge(START, "a")
            .edge("a", END)
            .label("a", START, "never")
            .label("nowhere", "a", "never")
            .compile()
            .expect_err("labels on missing edges");
        let refused: Vec<&GraphProblem> = error
            .problems
            .iter()
            .filter(|p| matches!(p, GraphProblem::UnknownLabelledEdge { .. }))
            .collect();
        assert_eq!(refused.len(), 2, "{error}");
    }
}
