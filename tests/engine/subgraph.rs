//! Subgraphs: a compiled graph as a node of another, with its own state,
//! checkpointed inside the parent run: events under a namespace, pauses
//! inside, crashes and cancels continued inside, `Send` instances, the step
//! guard per graph, nested drawings.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{
    CancelToken, CompiledGraph, Decision, DecisionRequest, EventEnvelope, EventSink, Executor,
    GraphState, Interrupt, MemoryStore, NodeContext, NodeError, Resumed, Route, RunConfig,
    RunError, RunId, RunStatus, Send, SqliteStore, StateGraph, Store, END, START,
};

use crate::support::{self, visit, Graph, Trace, TraceUpdate};

/// The subgraphs' own state.
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Inner {
    /// What the subgraph's nodes did, in order.
    #[reducer(append)]
    pub(crate) done: Vec<String>,
    #[reducer(sum)]
    pub(crate) n: i64,
    /// Where the instance started (a `Send`'s input).
    pub(crate) label: String,
}

/// Every node execution of a test, as `node n` (shared across runs and
/// runtimes).
#[derive(Debug, Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub(crate) fn push(&self, entry: String) {
        self.0.lock().unwrap().push(entry);
    }
    pub(crate) fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    pub(crate) fn count(&self, entry: &str) -> usize {
        self.entries().iter().filter(|e| *e == entry).count()
    }
}

/// A hook a test gives the `work` node: called with `n` before it works.
pub(crate) type Hook =
    Arc<dyn Fn(i64, &NodeContext) -> Result<(), NodeError> + std::marker::Send + Sync>;

/// `work` adds one to `n` until it reaches `limit`.
pub(crate) fn looping(limit: i64, log: &Log, hook: Option<Hook>) -> CompiledGraph<Inner> {
    let log = log.clone();
    StateGraph::<Inner>::new("loop", 1)
        .node("work", move |state: Arc<Inner>, ctx: NodeContext| {
            let (log, hook) = (log.clone(), hook.clone());
            async move {
                if let Some(hook) = &hook {
                    hook(state.n, &ctx)?;
                }
                let entry = format!("work {}{}", state.label, state.n + 1);
                log.push(entry.clone());
                Ok(InnerUpdate::default().done(vec![entry]).n(1))
            }
        })
        .edge(START, "work")
        .route("work", ["work", END], move |state: &Inner| {
            if state.n < limit {
                Route::to("work")
            } else {
                Route::end()
            }
        })
        .compile()
        .unwrap()
}

/// The parent's input and output mappings for an [`Inner`] subgraph.
pub(crate) fn into_inner(
    _parent: &Trace,
    send: Option<&serde_json::Value>,
) -> Result<Inner, NodeError> {
    let label = send.and_then(|v| v.as_str()).map(|s| format!("{s}:")).unwrap_or_default();
    Ok(Inner { label, ..Inner::default() })
}

pub(crate) fn from_inner(_parent: &Trace, inner: Inner) -> Result<TraceUpdate, NodeError> {
    Ok(TraceUpdate::default().visited(inner.done).count(inner.n))
}

/// `START -> a -> sub -> b -> END`, `sub` running `inner`.
pub(crate) fn parent(inner: CompiledGraph<Inner>) -> CompiledGraph<Trace> {
    let graph = visit(Graph::new("parent", 1), "a")
        .subgraph("sub", inner, into_inner, from_inner)
        .edge(START, "a")
        .edge("a", "sub")
        .edge("sub", "b")
        .edge("b", END);
    visit(graph, "b").compile().unwrap()
}

fn ids(events: &[EventEnvelope], kind: &str) -> Vec<(Option<String>, Option<String>)> {
    events
        .iter()
        .filter(|e| e.event.kind() == kind)
        .map(|e| (e.node.clone(), e.node_id.clone()))
        .collect()
}

fn live(mut stream: tollgate::EventStream) -> Vec<EventEnvelope> {
    let mut events = Vec::new();
    while let Some(event) = stream.try_recv() {
        events.push(event);
    }
    events
}

/// Runs `graph` from the default state on `executor`, with every event
/// received live.
fn run_live(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    graph: &CompiledGraph<Trace>,
) -> (tollgate::RunOutcome<Trace>, Vec<EventEnvelope>) {
    let (sink, stream) = EventSink::channel();
    let outcome = runtime
        .block_on(executor.run(graph, Trace::default(), RunConfig::new().events(sink)))
        .unwrap();
    (outcome, live(stream))
}

async fn stored(store: &dyn Store, run: RunId) -> Vec<serde_json::Value> {
    let records = store.events(run, 0, 10_000).await.unwrap();
    records.iter().map(|r| serde_json::from_str(&r.json).unwrap()).collect()
}

#[test]
fn a_subgraph_runs_its_own_state_and_its_events_carry_the_namespace() {
    let runtime = support::runtime();
    let log = Log::default();
    let graph = parent(looping(3, &log, None));
    let executor = Executor::new(MemoryStore::new());
    let (outcome, events) = run_live(&runtime, &executor, &graph);
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.state.visited, ["a", "work 1", "work 2", "work 3", "b"]);
    assert_eq!(outcome.state.count, 1 + 3 + 1);
    assert_eq!(outcome.step, 3, "the parent ran three steps; the subgraph's are its own");

    let inner = |step| (Some("sub/work".to_owned()), Some(format!("sub:2.0/work:{step}.0")));
    let completed = ids(&events, "node_completed");
    assert_eq!(
        completed,
        [
            (Some("a".into()), Some("a:1.0".into())),
            inner(1),
            inner(2),
            inner(3),
            (Some("sub".into()), Some("sub:2.0".into())),
            (Some("b".into()), Some("b:3.0".into())),
        ]
    );
    assert_eq!(ids(&events, "node_started").len(), 6);
    assert_eq!(ids(&events, "checkpoint_saved").len(), 3, "only the parent's steps");
    assert_eq!(ids(&events, "run_ended").len(), 1);
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "gap-free");
    // The stored log is the live log.
    let stored = runtime.block_on(stored(&**executor.store(), outcome.run_id));
    let live: Vec<serde_json::Value> =
        events.iter().map(|e| serde_json::to_value(e).unwrap()).collect();
    assert_eq!(stored, live);
    assert_eq!(log.entries(), ["work 1", "work 2", "work 3"]);
}

/// `prep -> ask -> ask2 -> after`: two pauses in two inner steps.
fn asking(log: &Log) -> CompiledGraph<Inner> {
    let node = |name: &'static str, asks: bool, log: &Log| {
        let log = log.clone();
        move |_state: Arc<Inner>, ctx: NodeContext| {
            let log = log.clone();
            async move {
                log.push(format!("{name} ran"));
                let mut done = vec![name.to_owned()];
                if asks {
                    let decision =
                        ctx.interrupt(Interrupt::new("approval", json!({"at": name})))?;
                    done.push(format!("{name}: {}", decision.kind().as_str()));
                }
                Ok(InnerUpdate::default().done(done))
            }
        }
    };
    StateGraph::<Inner>::new("asking", 1)
        .node("prep", node("prep", false, log))
        .node("ask", node("ask", true, log))
        .node("ask2", node("ask2", true, log))
        .node("after", node("after", false, log))
        .edge(START, "prep")
        .edge("prep", "ask")
        .edge("ask", "ask2")
        .edge("ask2", "after")
        .edge("after", END)
        .compile()
        .unwrap()
}

#[test]
fn an_interrupt_inside_pauses_the_parent_and_the_decision_resumes_inside() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let log = Log::default();
    let inner = asking(&log);
    let graph = || {
        Graph::new("review", 1)
            .subgraph("review", inner.clone(), into_inner, from_inner)
            .edge(START, "review")
            .edge("review", END)
            .compile()
            .unwrap()
    };
    let executor = Executor::new(SqliteStore::open(&path).unwrap());
    let (outcome, events) = run_live(&runtime, &executor, &graph());
    let run = outcome.run_id;
    assert_eq!((outcome.status, outcome.step), (RunStatus::AwaitingHitl, 0));
    let asked = &outcome.interrupts[0];
    assert_eq!(asked.id, format!("{run}.1.0.0"), "an id of the parent's step and task");
    assert_eq!((asked.node.as_str(), asked.step, asked.task), ("review/ask", 1, 0));
    assert_eq!(asked.payload, json!({"at": "ask"}));
    assert_eq!(
        ids(&events, "interrupt_raised"),
        [(Some("review/ask".into()), Some("review:1.0/ask:2.0".into()))]
    );
    assert_eq!(ids(&events, "run_ended").len(), 1);
    let pending = runtime.block_on(executor.store().interrupts(run)).unwrap();
    assert_eq!(pending.len(), 1, "one interrupt is stored, on the parent run");
    drop(executor);

    // Decided from another store on the same file, as another process.
    let decide = |ordinal: u32| {
        let executor = Executor::new(SqliteStore::open(&path).unwrap());
        let request = DecisionRequest::on(format!("{run}.1.0.{ordinal}"), Decision::Approve);
        match runtime.block_on(executor.resume_run(&graph(), run, request, RunConfig::new())) {
            Ok(Resumed::Continuing(outcome)) => outcome,
            other => panic!("expected the run to continue, got {other:?}"),
        }
    };
    let second = decide(0);
    assert_eq!(second.status, RunStatus::AwaitingHitl);
    assert_eq!(second.interrupts.len(), 1);
    let again = &second.interrupts[0];
    assert_eq!((again.id.clone(), again.node.as_str()), (format!("{run}.1.0.1"), "review/ask2"));
    let done = decide(1);
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.step, 1);
    assert_eq!(
        done.state.visited,
        ["prep", "ask", "ask: approve", "ask2", "ask2: approve", "after"]
    );
    assert_eq!(log.count("prep ran"), 1, "a finished inner step is not run again");
    assert_eq!(log.count("ask ran"), 2, "asked, then answered");
    assert_eq!(log.count("ask2 ran"), 2);
    assert_eq!(log.count("after ran"), 1);
    let executor = Executor::new(SqliteStore::open(&path).unwrap());
    let decisions = runtime
        .block_on(stored(&**executor.store(), run))
        .into_iter()
        .filter(|e| e["event_type"] == "run_resumed")
        .map(|e| e["decisions"].as_array().unwrap().iter().map(|d| d["id"].clone()).collect())
        .collect::<Vec<Vec<_>>>();
    let (first, second) = (json!(format!("{run}.1.0.0")), json!(format!("{run}.1.0.1")));
    assert_eq!(
        decisions,
        [vec![first.clone()], vec![first, second]],
        "the step's decisions so far"
    );
}

#[test]
fn a_rejection_inside_ends_the_run_unless_the_parent_routes_it() {
    let runtime = support::runtime();
    let log = Log::default();
    let build = |routed: bool| {
        let graph = Graph::new("review", 1)
            .subgraph("review", asking(&log), into_inner, from_inner)
            .edge(START, "review")
            .edge("review", END);
        let graph = visit(graph, "fallback").edge("fallback", END);
        match routed {
            true => graph.on_reject("review", "fallback"),
            false => graph.edge(START, "fallback"),
        }
        .compile()
        .unwrap()
    };
    for routed in [false, true] {
        let graph = build(routed);
        let executor = Executor::new(MemoryStore::new());
        let outcome =
            runtime.block_on(executor.run(&graph, Trace::default(), RunConfig::new())).unwrap();
        assert_eq!(outcome.status, RunStatus::AwaitingHitl);
        let reject = Decision::Reject { reason: Some("no".into()) };
        let request = DecisionRequest::new(reject);
        let resumed = runtime
            .block_on(executor.resume_run(&graph, outcome.run_id, request, RunConfig::new()))
            .unwrap();
        match (routed, resumed) {
            (false, Resumed::Rejected(_)) => {
                let record = runtime.block_on(executor.store().run(outcome.run_id)).unwrap();
                assert_eq!(record.status, RunStatus::Rejected);
            }
            (true, Resumed::Continuing(outcome)) => {
                assert_eq!(outcome.status, RunStatus::Completed);
                assert!(outcome.state.visited.ends_with(&["fallback".to_owned()]));
                assert!(!outcome.state.visited.contains(&"after".to_owned()));
            }
            (routed, other) => panic!("routed {routed}: unexpected {other:?}"),
        }
    }
}

#[test]
fn a_crash_inside_a_subgraph_continues_inside_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let log = Log::default();
    // The fourth inner step hangs on its first attempt: the process
    // "dies" there (its runtime is dropped mid-step).
    let (hung, hanging) = std::sync::mpsc::channel::<()>();
    let hung = Arc::new(Mutex::new(Some(hung)));
    let hook: Hook = Arc::new(move |n, _ctx| {
        if n == 3 {
            let first = hung.lock().unwrap().take();
            if let Some(hung) = first {
                hung.send(()).unwrap();
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        Ok(())
    });
    let graph = parent(looping(5, &log, Some(hook)));
    let config = || RunConfig::new().lease(Duration::from_millis(100));
    let dying = support::runtime();
    let executor = Executor::new(SqliteStore::open(&path).unwrap());
    let handle = dying.block_on(executor.start(&graph, Trace::default(), config())).unwrap();
    let run = handle.run_id();
    hanging.recv_timeout(Duration::from_secs(20)).expect("the fourth inner step started");
    dying.shutdown_background();
    drop(executor);
    assert_eq!(log.entries(), ["work 1", "work 2", "work 3"]);

    let runtime = support::runtime();
    let executor = Executor::new(SqliteStore::open(&path).unwrap());
    let checkpoint = runtime.block_on(executor.store().checkpoint(run, None)).unwrap();
    assert_eq!(checkpoint.run.step, 1, "the parent's step 2 is in flight");
    assert_eq!(checkpoint.progress.len(), 1, "the subgraph's progress is stored");
    std::thread::sleep(Duration::from_millis(250));
    let handles = runtime.block_on(executor.recover(&graph, config())).unwrap();
    assert_eq!(handles.len(), 1, "the run whose lease expired is taken over");
    let outcome = runtime.block_on(handles.into_iter().next().unwrap().wait()).unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.state.visited, ["a", "work 1", "work 2", "work 3", "work 4", "work 5", "b"]);
    assert_eq!(
        log.entries(),
        ["work 1", "work 2", "work 3", "work 4", "work 5"],
        "finished inner steps are not run again (the hung attempt never logged)"
    );
    let events = runtime.block_on(stored(&**executor.store(), run));
    let inner: Vec<&str> = events
        .iter()
        .filter(|e| e["event_type"] == "node_completed" && e["node"] == "sub/work")
        .map(|e| e["node_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (1..=5).map(|step| format!("sub:2.0/work:{step}.0")).collect();
    assert_eq!(inner, expected, "the inner steps' events were stored with their progress");
}

#[test]
fn a_cancel_inside_stops_at_an_inner_step_and_continue_resumes_inside() {
    let runtime = support::runtime();
    let log = Log::default();
    let token: Arc<OnceLock<CancelToken>> = Arc::default();
    let cancel = Arc::clone(&token);
    let hook: Hook = Arc::new(move |n, _ctx| {
        if n == 2 {
            // Cancels the run from inside its third inner step (waiting,
            // briefly, for the test to hand over the token).
            for _ in 0..500 {
                if let Some(token) = cancel.get() {
                    token.cancel();
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            return Err(NodeError::fatal("the test never handed over the cancel token"));
        }
        Ok(())
    });
    let graph = parent(looping(4, &log, Some(hook)));
    let executor = Executor::new(MemoryStore::new());
    let handle = runtime.block_on(executor.start(&graph, Trace::default(), RunConfig::new()));
    let handle = handle.unwrap();
    token.set(handle.cancel_token()).unwrap();
    let run = handle.run_id();
    let stopped = runtime.block_on(handle.wait()).unwrap();
    assert_eq!((stopped.status, stopped.step), (RunStatus::Interrupted, 1));
    assert_eq!(log.entries(), ["work 1", "work 2", "work 3"]);
    let checkpoint = runtime.block_on(executor.store().checkpoint(run, None)).unwrap();
    assert_eq!(checkpoint.progress.len(), 1, "the subgraph's progress is kept");
    let handle = runtime.block_on(executor.continue_run(&graph, run, RunConfig::new())).unwrap();
    let outcome = runtime.block_on(handle.wait()).unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(log.entries(), ["work 1", "work 2", "work 3", "work 4"]);
    assert_eq!(outcome.state.visited, ["a", "work 1", "work 2", "work 3", "work 4", "b"]);
}

#[test]
fn instances_sent_in_parallel_each_keep_their_own_state() {
    let runtime = support::runtime();
    let log = Log::default();
    let keys: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&keys);
    let hook: Hook = Arc::new(move |_n, ctx| {
        seen.lock().unwrap().push(ctx.idempotency_key());
        Ok(())
    });
    let graph = Graph::new("fan", 1)
        .subgraph("sub", looping(2, &log, Some(hook)), into_inner, from_inner)
        .route(START, ["sub"], |_: &Trace| {
            Route::send(["x", "y", "z"].map(|label| Send::new("sub", json!(label))))
        })
        .edge("sub", END)
        .compile()
        .unwrap();
    let executor = Executor::new(MemoryStore::new());
    let (outcome, events) = run_live(&runtime, &executor, &graph);
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(
        outcome.state.visited,
        ["work x:1", "work x:2", "work y:1", "work y:2", "work z:1", "work z:2"],
        "merged in task order"
    );
    assert_eq!(outcome.state.count, 6);
    let mut keys = keys.lock().unwrap().clone();
    keys.sort();
    let mut expected_keys: Vec<String> = (0..3)
        .flat_map(|task| {
            (1..=2)
                .map(move |step| format!("{run}:sub:1.{task}/{step}:work:0", run = outcome.run_id))
        })
        .collect();
    expected_keys.sort();
    assert_eq!(keys, expected_keys, "each instance's tasks have keys of their own");
    let mut inner: Vec<String> = ids(&events, "node_completed")
        .into_iter()
        .filter_map(|(node, id)| (node.as_deref() == Some("sub/work")).then(|| id.unwrap()))
        .collect();
    inner.sort();
    let mut expected: Vec<String> = (0..3)
        .flat_map(|task| (1..=2).map(move |step| format!("sub:1.{task}/work:{step}.0")))
        .collect();
    expected.sort();
    assert_eq!(inner, expected);
}

#[test]
fn the_step_guard_counts_each_graph_on_its_own() {
    let runtime = support::runtime();
    let log = Log::default();
    let graph = parent(looping(4, &log, None));
    let executor = Executor::new(MemoryStore::new());
    // Four inner steps and three parent steps: seven in all, four at most
    // in either graph.
    let outcome = runtime
        .block_on(executor.run(&graph, Trace::default(), RunConfig::new().max_steps(4)))
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let error = runtime
        .block_on(executor.run(&graph, Trace::default(), RunConfig::new().max_steps(3)))
        .unwrap_err();
    match &error {
        RunError::NodeFailed { node, step, source, .. } => {
            assert_eq!((node.as_str(), *step), ("sub", 2));
            let message = source.to_string();
            assert!(message.contains("subgraph `sub` failed"), "{message}");
            assert!(message.contains("step limit of 3"), "{message}");
        }
        other => panic!("expected the subgraph node to fail, got {other:?}"),
    }
}

#[test]
fn subgraphs_nest_and_an_interrupt_two_levels_down_resumes_there() {
    let runtime = support::runtime();
    let log = Log::default();
    // Inner (Inner state) inside middle (Inner state) inside the parent.
    let middle = StateGraph::<Inner>::new("middle", 1)
        .subgraph(
            "inner",
            asking(&log),
            |_: &Inner, _| Ok(Inner::default()),
            |_: &Inner, inner: Inner| Ok(InnerUpdate::default().done(inner.done)),
        )
        .edge(START, "inner")
        .edge("inner", END)
        .compile()
        .unwrap();
    let graph = Graph::new("outer", 1)
        .subgraph("middle", middle, into_inner, from_inner)
        .edge(START, "middle")
        .edge("middle", END)
        .compile()
        .unwrap();
    let executor = Executor::new(MemoryStore::new());
    let (outcome, events) = run_live(&runtime, &executor, &graph);
    assert_eq!(outcome.status, RunStatus::AwaitingHitl);
    assert_eq!(outcome.interrupts[0].node, "middle/inner/ask");
    assert_eq!(
        ids(&events, "interrupt_raised"),
        [(Some("middle/inner/ask".into()), Some("middle:1.0/inner:1.0/ask:2.0".into()))]
    );
    let mut status = outcome.status;
    let mut last = None;
    while status == RunStatus::AwaitingHitl {
        let request = DecisionRequest::new(Decision::Approve);
        let resumed = runtime
            .block_on(executor.resume_run(&graph, outcome.run_id, request, RunConfig::new()))
            .unwrap();
        let Resumed::Continuing(next) = resumed else { panic!("the run continues") };
        status = next.status;
        last = Some(next);
    }
    let last = last.unwrap();
    assert_eq!(last.status, RunStatus::Completed);
    assert_eq!(
        last.state.visited,
        ["prep", "ask", "ask: approve", "ask2", "ask2: approve", "after"]
    );
    assert_eq!(log.count("prep ran"), 1);
}
