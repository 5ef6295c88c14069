//! The graph builder.

use std::future::Future;
use std::sync::Arc;

use crate::node::{NodeContext, NodeError, NodeFn, NodeOutput, RetryPolicy, RouteFn};
use crate::route::{Command, Route};
use crate::state::State;

use super::compile;
use super::compiled::{CompiledGraph, Outline};
use super::validate::CompileError;

/// Builds a graph of nodes over state `S`; [`StateGraph::compile`] checks it.
///
/// ```
/// use std::sync::Arc;
/// use tollgate_engine::{DynReducer, DynSchema, DynState, StateGraph, END, START};
///
/// let schema = DynSchema::new().field("log", DynReducer::Append);
/// let graph = StateGraph::<DynState>::with_schema("hello", 1, schema)
///     .node("greet", |_state: Arc<DynState>, _ctx| async move {
///         let mut update = serde_json::Map::new();
///         update.insert("log".into(), serde_json::json!(["hello"]));
///         Ok(update)
///     })
///     .edge(START, "greet")
///     .edge("greet", END)
///     .compile()
///     .expect("a valid graph");
/// assert_eq!(graph.node_names().collect::<Vec<_>>(), ["greet"]);
/// ```
pub struct StateGraph<S: State> {
    pub(super) name: String,
    pub(super) version: u32,
    pub(super) schema: S::Schema,
    pub(super) nodes: Vec<NodeDecl<S>>,
    pub(super) edges: Vec<(String, String)>,
    pub(super) routes: Vec<RouteDecl<S>>,
    pub(super) joins: Vec<JoinDecl>,
    pub(super) retries: Vec<(String, RetryPolicy)>,
    pub(super) caches: Vec<(String, std::time::Duration)>,
    pub(super) visit_limits: Vec<(String, u32)>,
    pub(super) break_before: Vec<String>,
    pub(super) break_after: Vec<String>,
    pub(super) on_reject: Vec<(String, String)>,
    /// Drawing labels of edges: (from, to, label).
    pub(super) labels: Vec<(String, String, String)>,
}

pub(super) struct NodeDecl<S: State> {
    pub(super) name: String,
    pub(super) run: NodeFn<S>,
    /// Declared `Command` targets, for command nodes.
    pub(super) destinations: Option<Vec<String>>,
    /// For a subgraph node: the subgraph's outline.
    pub(super) subgraph: Option<Arc<Outline>>,
}

pub(super) struct RouteDecl<S: State> {
    pub(super) from: String,
    pub(super) targets: Vec<String>,
    pub(super) route: RouteFn<S>,
}

pub(super) struct JoinDecl {
    pub(super) sources: Vec<String>,
    pub(super) target: String,
}

impl<S: State> std::fmt::Debug for StateGraph<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateGraph")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("nodes", &self.nodes.iter().map(|n| &n.name).collect::<Vec<_>>())
            .field("edges", &self.edges)
            .finish_non_exhaustive()
    }
}

impl<S: State> StateGraph<S>
where
    S::Schema: Default,
{
    /// An empty graph named `name` at `version` (runs are pinned to both).
    pub fn new(name: impl Into<String>, version: u32) -> Self {
        Self::with_schema(name, version, S::Schema::default())
    }
}

impl<S: State> StateGraph<S> {
    /// An empty graph over a state described at run time (a [`DynState`](crate::DynState)).
    pub fn with_schema(name: impl Into<String>, version: u32, schema: S::Schema) -> Self {
        Self {
            name: name.into(),
            version,
            schema,
            nodes: Vec::new(),
            edges: Vec::new(),
            routes: Vec::new(),
            joins: Vec::new(),
            retries: Vec::new(),
            caches: Vec::new(),
            visit_limits: Vec::new(),
            break_before: Vec::new(),
            break_after: Vec::new(),
            on_reject: Vec::new(),
            labels: Vec::new(),
        }
    }

    /// Adds a node: an async function of the state and its context that
    /// returns a partial update.
    pub fn node<F, Fut>(mut self, name: impl Into<String>, run: F) -> Self
    where
        F: Fn(Arc<S>, NodeContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<S::Update, NodeError>> + Send + 'static,
    {
        let run: NodeFn<S> = Arc::new(move |state, ctx| {
            let future = run(state, ctx);
            Box::pin(async move { future.await.map(NodeOutput::Update) })
        });
        self.nodes.push(NodeDecl { name: name.into(), run, destinations: None, subgraph: None });
        self
    }

    /// Adds a node that returns a [`Command`]: an optional update plus
    /// targets, each of which must be among `destinations`.
    pub fn command_node<F, Fut, D>(
        mut self,
        name: impl Into<String>,
        destinations: D,
        run: F,
    ) -> Self
    where
        F: Fn(Arc<S>, NodeContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Command<S::Update>, NodeError>> + Send + 'static,
        D: IntoIterator,
        D::Item: Into<String>,
    {
        let run: NodeFn<S> = Arc::new(move |state, ctx| {
            let future = run(state, ctx);
            Box::pin(async move { future.await.map(NodeOutput::Command) })
        });
        let destinations = destinations.into_iter().map(Into::into).collect();
        self.nodes.push(NodeDecl {
            name: name.into(),
            run,
            destinations: Some(destinations),
            subgraph: None,
        });
        self
    }

    /// Adds `graph` as node `name`: a subgraph with its own state type,
    /// run inside the parent's task. `input` makes its input from the
    /// parent's state (and, for a task started by a `Send`, that input);
    /// `output` turns its final state into the parent's update.
    ///
    /// The subgraph's steps are checkpointed as part of the parent run
    /// (see [`RunStore::put_task_progress`](tollgate_checkpoint::RunStore::put_task_progress)):
    /// a crash inside it continues inside it; an interrupt inside it
    /// pauses the parent run, is decided on the parent run like any other,
    /// and resumes inside it. Its events carry the enclosing task in their
    /// `node_id` (`review:3.0/draft:2.0`) and `node` (`review/draft`). Its
    /// steps count against the run's `max_steps` on their own (each
    /// instance from 0). The subgraph's own breakpoints apply; a run's
    /// breakpoints (by node name) name the parent's nodes only.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde::{Deserialize, Serialize};
    /// use tollgate_checkpoint::MemoryStore;
    /// use tollgate_engine::{Executor, GraphState, RunConfig, StateGraph, END, START};
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// #[graph_state(crate = tollgate_engine)]
    /// struct Draft {
    ///     text: String,
    /// }
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// #[graph_state(crate = tollgate_engine)]
    /// struct Doc {
    ///     topic: String,
    ///     #[reducer(append)]
    ///     drafts: Vec<String>,
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let writer = StateGraph::<Draft>::new("writer", 1)
    ///     .node("draft", |s: Arc<Draft>, _ctx| async move {
    ///         Ok(DraftUpdate::default().text(format!("{} (drafted)", s.text)))
    ///     })
    ///     .edge(START, "draft")
    ///     .edge("draft", END)
    ///     .compile()
    ///     .unwrap();
    /// let graph = StateGraph::<Doc>::new("doc", 1)
    ///     .subgraph(
    ///         "write",
    ///         writer,
    ///         |doc: &Doc, _send| Ok(Draft { text: doc.topic.clone() }),
    ///         |_doc: &Doc, draft: Draft| Ok(DocUpdate::default().drafts(vec![draft.text])),
    ///     )
    ///     .edge(START, "write")
    ///     .edge("write", END)
    ///     .compile()
    ///     .unwrap();
    /// let executor = Executor::new(MemoryStore::new());
    /// let input = Doc { topic: "tides".into(), ..Doc::default() };
    /// let outcome = executor.run(&graph, input, RunConfig::new()).await.unwrap();
    /// assert_eq!(outcome.state.drafts, ["tides (drafted)"]);
    /// # });
    /// ```
    pub fn subgraph<T, I, O>(
        mut self,
        name: impl Into<String>,
        graph: CompiledGraph<T>,
        input: I,
        output: O,
    ) -> Self
    where
        T: State,
        I: Fn(&S, Option<&serde_json::Value>) -> Result<T, NodeError> + Send + Sync + 'static,
        O: Fn(&S, T) -> Result<S::Update, NodeError> + Send + Sync + 'static,
    {
        let outline = Arc::new(graph.outline());
        let run = crate::exec::subgraph_node::<S, T>(graph, Arc::new(input), Arc::new(output));
        self.nodes.push(NodeDecl {
            name: name.into(),
            run,
            destinations: None,
            subgraph: Some(outline),
        });
        self
    }

    /// Names the edge `from` → `to` in drawings ([`CompiledGraph::shape`],
    /// the review page): say when a route takes it (`"calls tools"`,
    /// `"approved"`). The edge (static, route target, command
    /// destination or join) must exist: compiling refuses a label on
    /// none with [`GraphProblem::UnknownLabelledEdge`](crate::GraphProblem::UnknownLabelledEdge).
    /// An edge taken on rejection ([`StateGraph::on_reject`]) is labelled
    /// `rejected` unless labelled here.
    pub fn label(
        mut self,
        from: impl Into<String>,
        to: impl Into<String>,
        label: impl Into<String>,
    ) -> Self {
        self.labels.push((from.into(), to.into(), label.into()));
        self
    }

    /// A static edge: after `from` runs, `to` runs. Several edges from one
    /// node fork. `from` may be [`START`](crate::START), `to` may be
    /// [`END`](crate::END).
    pub fn edge(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.edges.push((from.into(), to.into()));
        self
    }

    /// A conditional route: after `from` runs, `route` is called on the
    /// merged state and picks among `targets` (nodes or `END`; `Send`s must
    /// name one of them too).
    pub fn route<T, F>(self, from: impl Into<String>, targets: T, route: F) -> Self
    where
        T: IntoIterator,
        T::Item: Into<String>,
        F: Fn(&S) -> Route + Send + Sync + 'static,
    {
        self.try_route(from, targets, move |state: &S| Ok(route(state)))
    }

    /// A route that may fail (it reads something that can be missing or
    /// malformed): an `Err` fails the run with
    /// [`RunError::RouteFailed`](crate::RunError::RouteFailed), naming the
    /// node and the cause, and keeps its last checkpoint, as a failing node
    /// does.
    pub fn try_route<T, F>(mut self, from: impl Into<String>, targets: T, route: F) -> Self
    where
        T: IntoIterator,
        T::Item: Into<String>,
        F: Fn(&S) -> Result<Route, NodeError> + Send + Sync + 'static,
    {
        self.routes.push(RouteDecl {
            from: from.into(),
            targets: targets.into_iter().map(Into::into).collect(),
            route: Arc::new(route),
        });
        self
    }

    /// A join: `target` runs once after every node in `sources` has run
    /// (since the join last fired), whatever the lengths of their branches.
    /// The sources must be able to run in parallel.
    pub fn join<T>(mut self, sources: T, target: impl Into<String>) -> Self
    where
        T: IntoIterator,
        T::Item: Into<String>,
    {
        self.joins.push(JoinDecl {
            sources: sources.into_iter().map(Into::into).collect(),
            target: target.into(),
        });
        self
    }

    /// Retries the node's retryable errors under `policy`.
    pub fn retry(mut self, node: impl Into<String>, policy: RetryPolicy) -> Self {
        self.retries.push((node.into(), policy));
        self
    }

    /// Caches the node's output for `ttl`, in the run's store (it survives
    /// restarts, and serves every run of this graph's name and version):
    /// the key is the SHA-256 of the node's input (the state as JSON, or a
    /// `Send`'s input). A hit skips the node; its `node_completed` event
    /// says `"cached": true`. A node that pauses, or fails, stores nothing.
    pub fn cache(mut self, node: impl Into<String>, ttl: std::time::Duration) -> Self {
        self.caches.push((node.into(), ttl));
        self
    }

    /// Fails the run with `VisitLimitExceeded` if the node would run more
    /// than `limit` times.
    pub fn max_visits(mut self, node: impl Into<String>, limit: u32) -> Self {
        self.visit_limits.push((node.into(), limit));
        self
    }

    /// Static breakpoints: every run pauses (`awaiting_hitl`) before these
    /// nodes run, until a person approves (or rejects).
    pub fn interrupt_before<T>(mut self, nodes: T) -> Self
    where
        T: IntoIterator,
        T::Item: Into<String>,
    {
        self.break_before.extend(nodes.into_iter().map(Into::into));
        self
    }

    /// Static breakpoints: every run pauses after these nodes ran, before
    /// their output is merged, until a person approves (or rejects). The
    /// node does not run again on resume.
    pub fn interrupt_after<T>(mut self, nodes: T) -> Self
    where
        T: IntoIterator,
        T::Item: Into<String>,
    {
        self.break_after.extend(nodes.into_iter().map(Into::into));
        self
    }

    /// When a person rejects an interrupt raised by `node`, go to `target`
    /// instead of ending the run `rejected`. The node does not run again.
    pub fn on_reject(mut self, node: impl Into<String>, target: impl Into<String>) -> Self {
        self.on_reject.push((node.into(), target.into()));
        self
    }

    /// Validates the graph and compiles it. Every problem is reported at
    /// once.
    pub fn compile(self) -> Result<CompiledGraph<S>, CompileError> {
        compile::compile(self)
    }
}
