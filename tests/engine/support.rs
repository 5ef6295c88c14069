//! Shared test state and helpers.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tollgate::{
    EventEnvelope, EventSink, Executor, GraphState, HasId, MemoryStore, NodeContext, NodeError,
    RunConfig, RunError, RunOutcome, StateGraph,
};

/// A message for the `messages` reducer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Msg {
    pub(crate) id: Option<String>,
    pub(crate) text: String,
}

impl HasId for Msg {
    fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }
}

/// A state exercising every built-in reducer.
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Trace {
    /// Node names in merge order.
    #[reducer(append)]
    pub(crate) visited: Vec<String>,
    #[reducer(sum)]
    pub(crate) count: i64,
    /// Last value: conflicts when two nodes write it in one step.
    pub(crate) last: Option<String>,
    #[reducer(merge)]
    pub(crate) tags: BTreeMap<String, String>,
    #[reducer(messages)]
    pub(crate) messages: Vec<Msg>,
    #[reducer(min)]
    pub(crate) low: i64,
    #[reducer(max)]
    pub(crate) high: i64,
}

pub(crate) type Graph = StateGraph<Trace>;

/// Adds a node that appends its own name to `visited` and counts one.
pub(crate) fn visit(graph: Graph, name: &'static str) -> Graph {
    graph.node(name, move |_state: Arc<Trace>, _ctx: NodeContext| async move {
        Ok(TraceUpdate::default().visited(vec![name.to_owned()]).count(1))
    })
}

/// Adds one `visit` node per name.
pub(crate) fn visits(mut graph: Graph, names: &[&'static str]) -> Graph {
    for name in names {
        graph = visit(graph, name);
    }
    graph
}

/// A node that always fails with `message`.
pub(crate) fn failing(graph: Graph, name: &'static str, message: &'static str) -> Graph {
    graph.node(name, move |_state: Arc<Trace>, _ctx| async move {
        Err::<TraceUpdate, _>(NodeError::fatal(message))
    })
}

/// Runs to the end on a fresh in-memory store.
pub(crate) async fn run(graph: Graph, max_steps: u64) -> Result<RunOutcome<Trace>, RunError> {
    let graph = graph.compile().expect("test graph compiles");
    Executor::new(MemoryStore::new())
        .run(&graph, Trace::default(), RunConfig::new().max_steps(max_steps))
        .await
}

/// Runs and also returns every event received live.
pub(crate) async fn run_with_events(
    executor: &Executor,
    graph: &tollgate::CompiledGraph<Trace>,
    config: RunConfig,
) -> (Result<RunOutcome<Trace>, RunError>, Vec<EventEnvelope>) {
    let (sink, mut stream) = EventSink::channel();
    let result = executor.run(graph, Trace::default(), config.events(sink)).await;
    let mut events = Vec::new();
    while let Some(event) = stream.try_recv() {
        events.push(event);
    }
    (result, events)
}

/// A multi-thread runtime, so concurrent tasks really run in parallel.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Runs a compiled graph to the end on a fresh in-memory store.
pub(crate) async fn run_graph(
    graph: &tollgate::CompiledGraph<Trace>,
) -> Result<RunOutcome<Trace>, RunError> {
    Executor::new(MemoryStore::new()).run(graph, Trace::default(), RunConfig::new()).await
}

/// Holds a node until the test opens it, so a test can act while a step is
/// in flight without racing the run.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    permits: Arc<tokio::sync::Semaphore>,
}

impl Gate {
    pub(crate) fn closed() -> Self {
        Self { permits: Arc::new(tokio::sync::Semaphore::new(0)) }
    }

    /// Waits until the gate opens.
    pub(crate) async fn pass(&self) {
        self.permits.acquire().await.expect("the gate is never closed for good").forget();
    }

    pub(crate) fn open(&self) {
        self.permits.add_permits(1);
    }
}

/// The `event_type` of each stored event, in order.
pub(crate) fn event_kinds(stored: &[tollgate::EventRecord]) -> Vec<String> {
    stored
        .iter()
        .map(|event| {
            let line: serde_json::Value = serde_json::from_str(&event.json).expect("stored JSON");
            line["event_type"].as_str().expect("every event has a type").to_owned()
        })
        .collect()
}
