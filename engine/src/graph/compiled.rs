//! The compiled, validated graph.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use petgraph::graph::DiGraph;

use crate::node::{NodeFn, RetryPolicy, RouteFn};
use crate::state::State;

/// A vertex of the compiled petgraph.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GraphNode {
    /// The virtual entry.
    Start,
    /// The virtual exit.
    End,
    /// A user node, by name.
    Node(String),
}

impl GraphNode {
    /// The node's name (`__start__` / `__end__` for the virtual ones).
    pub fn name(&self) -> &str {
        match self {
            GraphNode::Start => crate::START,
            GraphNode::End => crate::END,
            GraphNode::Node(name) => name,
        }
    }
}

/// Why an arc of the compiled petgraph exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdgeKind {
    /// A static edge.
    Static,
    /// A declared target of a conditional route.
    Conditional,
    /// A declared destination of a command node.
    Command,
    /// From a join's source to the join's target.
    Join,
}

/// Where a resolved route points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Node(usize),
    End,
}

/// What follows a node (or `START`).
pub(crate) struct Successors<S: State> {
    pub(crate) edges: Vec<Target>,
    pub(crate) route: Option<CompiledRoute<S>>,
}

impl<S: State> Default for Successors<S> {
    fn default() -> Self {
        Self { edges: Vec::new(), route: None }
    }
}

pub(crate) struct CompiledRoute<S: State> {
    pub(crate) run: RouteFn<S>,
    /// Declared targets, by name, for checking what the route returns.
    pub(crate) allowed: HashMap<String, Target>,
}

pub(crate) struct CompiledNode<S: State> {
    pub(crate) name: Arc<str>,
    pub(crate) run: NodeFn<S>,
    pub(crate) next: Successors<S>,
    /// Declared command destinations, for command nodes.
    pub(crate) commands: Option<HashMap<String, Target>>,
    /// (join, position of this node among the join's sources).
    pub(crate) joins: Vec<(usize, usize)>,
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) max_visits: Option<u32>,
    /// Its output is cached (`StateGraph::cache`): its context gets the
    /// store.
    pub(crate) cached: bool,
    /// Pause before the node runs / after it ran (compile-time breakpoints).
    pub(crate) break_before: bool,
    pub(crate) break_after: bool,
    /// Where a rejected interrupt of this node goes (else the run ends
    /// `rejected`).
    pub(crate) on_reject: Option<usize>,
    /// For a subgraph node: the subgraph, for drawings.
    pub(crate) subgraph: Option<Arc<Outline>>,
}

/// A compiled graph's shape without its types: what a parent graph keeps
/// of its subgraphs, to draw them nested.
#[derive(Debug)]
pub(crate) struct Outline {
    pub(crate) name: String,
    pub(crate) graph: DiGraph<GraphNode, EdgeKind>,
    /// The subgraphs of its nodes, by node name.
    pub(crate) nested: HashMap<String, Arc<Outline>>,
    /// Edge labels by (source, target) petgraph index.
    pub(crate) labels: HashMap<(usize, usize), String>,
}

pub(crate) struct CompiledJoin {
    pub(crate) sources: Vec<usize>,
    pub(crate) target: usize,
}

pub(crate) struct Inner<S: State> {
    pub(crate) name: String,
    pub(crate) version: u32,
    pub(crate) schema: S::Schema,
    pub(crate) graph: DiGraph<GraphNode, EdgeKind>,
    pub(crate) nodes: Vec<CompiledNode<S>>,
    pub(crate) index: HashMap<String, usize>,
    pub(crate) start: Successors<S>,
    pub(crate) joins: Vec<CompiledJoin>,
    /// Whether any node has a visit limit (visits are counted only then).
    pub(crate) limited: bool,
    /// Drawing labels of edges, by (source, target) petgraph index.
    pub(crate) labels: HashMap<(usize, usize), String>,
}

/// A validated graph, ready to run. Cheap to clone and shareable across
/// tasks and threads.
pub struct CompiledGraph<S: State> {
    pub(crate) inner: Arc<Inner<S>>,
}

impl<S: State> Clone for CompiledGraph<S> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<S: State> fmt::Debug for CompiledGraph<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledGraph")
            .field("name", &self.inner.name)
            .field("version", &self.inner.version)
            .field("nodes", &self.node_names().collect::<Vec<_>>())
            .finish()
    }
}

impl<S: State> CompiledGraph<S> {
    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The graph's version.
    pub fn version(&self) -> u32 {
        self.inner.version
    }

    /// The state schema the graph was built with.
    pub fn schema(&self) -> &S::Schema {
        &self.inner.schema
    }

    /// User node names, in declaration order.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.inner.nodes.iter().map(|node| &*node.name)
    }

    /// The compiled petgraph: `START`, `END` and every node, with an arc per
    /// static edge, declared route target, command destination and join.
    pub fn graph(&self) -> &DiGraph<GraphNode, EdgeKind> {
        &self.inner.graph
    }

    pub(crate) fn node(&self, index: usize) -> &CompiledNode<S> {
        &self.inner.nodes[index]
    }

    /// The graph's outline (name, shape, nested subgraphs).
    pub(crate) fn outline(&self) -> Outline {
        Outline {
            name: self.inner.name.clone(),
            graph: self.inner.graph.clone(),
            nested: self.nested(),
            labels: self.inner.labels.clone(),
        }
    }

    /// The subgraphs of its nodes, by node name.
    pub(crate) fn nested(&self) -> HashMap<String, Arc<Outline>> {
        self.inner
            .nodes
            .iter()
            .filter_map(|node| Some((node.name.to_string(), Arc::clone(node.subgraph.as_ref()?))))
            .collect()
    }

    /// The index of a node by name.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.inner.index.get(name).copied()
    }
}
