//! What the service says of a graph: its outline (nodes and edges, the
//! page's drawing is made from it) and its listing (`GET /graphs`, and
//! LangGraph's assistants). Types of their own, shared by the service and
//! both APIs' edges.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tollgate_engine::GraphShape;

/// A graph's nodes and edges: nodes in the order they were added
/// (`__start__` and `__end__` first), each subgraph node with its graph's
/// own outline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Outline {
    /// The graph's name.
    pub(crate) name: String,
    /// Its version (a subgraph's outline has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) version: Option<u32>,
    /// Its nodes.
    pub(crate) nodes: Vec<OutlineNode>,
    /// Its edges.
    pub(crate) edges: Vec<OutlineEdge>,
}

/// A node of an [`Outline`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutlineNode {
    /// Its name.
    pub(crate) name: String,
    /// `start`, `end` or `node`.
    pub(crate) kind: String,
    /// The graph a subgraph node runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) subgraph: Option<Box<Outline>>,
}

/// An edge of an [`Outline`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutlineEdge {
    /// Where it starts.
    pub(crate) from: String,
    /// Where it ends.
    pub(crate) to: String,
    /// `static`, `conditional`, `command` or `join`.
    pub(crate) kind: String,
    /// Its label, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) label: Option<String>,
}

impl Outline {
    /// The outline of a graph of `shape`, at `version`.
    pub(crate) fn of(shape: &GraphShape, version: Option<u32>) -> Self {
        let nodes = shape
            .nodes
            .iter()
            .map(|node| OutlineNode {
                name: node.name.clone(),
                kind: node.kind.to_owned(),
                subgraph: node.subgraph.as_deref().map(|inner| Box::new(Outline::of(inner, None))),
            })
            .collect();
        let edges = shape
            .edges
            .iter()
            .map(|edge| OutlineEdge {
                from: edge.from.clone(),
                to: edge.to.clone(),
                kind: edge.kind.to_owned(),
                label: edge.label.clone(),
            })
            .collect();
        Self { name: shape.name.clone(), version, nodes, edges }
    }
}

/// What a listed graph is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ListingKind {
    /// A typed Rust graph the server registered.
    Graph,
    /// A blueprint of the `--blueprints` folder.
    Blueprint,
}

/// A graph a server can start, as `GET /graphs` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct GraphListing {
    /// Its name (a blueprint's: its file's stem).
    pub(crate) name: String,
    /// Its newest version.
    pub(crate) version: u32,
    /// Every version there is, oldest first.
    pub(crate) versions: Vec<u32>,
    /// A registered graph or a blueprint.
    pub(crate) kind: ListingKind,
    /// A blueprint's own graph name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) graph: Option<String>,
    /// The JSON Schema of its input, where known.
    pub(crate) input_schema: Option<Value>,
    /// The newest version's outline.
    pub(crate) outline: Outline,
}
