//! Continuing runs from their checkpoints: after cancellation, after a
//! failure (reusing finished siblings), across snapshots; and the typed
//! errors when a checkpoint cannot be used.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tollgate::{
    Blob, Event, EventSink, Executor, GraphState, MemoryStore, NodeError, Route, RunConfig,
    RunError, RunId, RunStatus, RunStore, StateGraph, StoreError, END, START,
};
use tollgate_checkpoint::{StoredCheckpoint, Transition};
use tollgate_testkit::{HookedStore, StoreHooks};

use crate::support::{self, Gate, Graph, Trace, TraceUpdate};

/// A loop appending one 200-byte line per step until `steps`; with a gate,
/// the node of step `at` waits for the gate.
fn gated_appender(steps: i64, gate: Option<(u64, Gate)>) -> tollgate::CompiledGraph<Trace> {
    Graph::new("appender", 1)
        .node("append", move |state: Arc<Trace>, ctx| {
            let gate = gate.clone();
            async move {
                if let Some((at, gate)) = gate {
                    if ctx.step() == at {
                        gate.pass().await;
                    }
                }
                let line = format!("{:0>200}", state.count);
                Ok(TraceUpdate::default().count(1).visited(vec![line]))
            }
        })
        .edge(START, "append")
        .route("append", ["append", END], move |s: &Trace| {
            if s.count < steps {
                Route::to("append")
            } else {
                Route::end()
            }
        })
        .compile()
        .unwrap()
}

fn appender(steps: i64) -> tollgate::CompiledGraph<Trace> {
    gated_appender(steps, None)
}

/// Hooks that count written bytes and can damage what the engine reads.
#[derive(Debug, Default)]
struct Inspecting {
    delta_bytes: AtomicUsize,
    snapshot_bytes: AtomicUsize,
    snapshots: AtomicUsize,
    corrupt_reads: AtomicBool,
    commits: Mutex<Vec<(Option<u64>, RunStatus)>>,
}

type Inspected = HookedStore<MemoryStore, Inspecting>;

fn inspected() -> Arc<Inspected> {
    Arc::new(HookedStore::new(MemoryStore::new(), Inspecting::default()))
}

fn damage(blob: &Blob) -> Blob {
    let mut bytes = blob.to_bytes();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x20;
    Blob::from_bytes(&bytes).unwrap()
}

impl StoreHooks for Inspecting {
    fn before_commit(&self, transition: &Transition) {
        if let Some(step) = &transition.step {
            let delta: usize = step.updates.iter().map(|u| u.update.stored_len()).sum();
            self.delta_bytes.fetch_add(delta, Ordering::SeqCst);
            if let Some(snapshot) = &step.snapshot {
                self.snapshots.fetch_add(1, Ordering::SeqCst);
                self.snapshot_bytes.fetch_add(snapshot.stored_len(), Ordering::SeqCst);
            }
        }
        self.commits
            .lock()
            .unwrap()
            .push((transition.step.as_ref().map(|s| s.step), transition.status));
    }

    fn on_checkpoint(&self, mut checkpoint: StoredCheckpoint) -> StoredCheckpoint {
        if self.corrupt_reads.load(Ordering::SeqCst) {
            checkpoint.snapshot = damage(&checkpoint.snapshot);
        }
        checkpoint
    }
}

/// Runs the appender, cancels it while step `at` is in flight, waits.
async fn interrupted_at(executor: &Executor, steps: i64, at: u64) -> RunId {
    let gate = Gate::closed();
    let graph = gated_appender(steps, Some((at, gate.clone())));
    let (sink, mut events) = EventSink::channel();
    let handle =
        executor.start(&graph, Trace::default(), RunConfig::new().events(sink)).await.unwrap();
    while let Some(event) = events.recv().await {
        if matches!(event.event, Event::NodeStarted { step, .. } if step == at) {
            handle.cancel();
            gate.open();
            break;
        }
    }
    let run = handle.run_id();
    let outcome = handle.wait().await.unwrap();
    assert_eq!((outcome.status, outcome.step), (RunStatus::Interrupted, at));
    run
}

#[test]
fn an_interrupted_run_continues_to_the_same_end_as_an_uninterrupted_one() {
    let runtime = support::runtime();
    let graph = appender(300);
    let reference = runtime.block_on(support::run_graph(&graph)).unwrap();

    let store = inspected();
    let executor = Executor::with_store(store.clone());
    let run = runtime.block_on(interrupted_at(&executor, 300, 170));
    let checkpoint = runtime.block_on(store.checkpoint(run, None)).unwrap();
    assert!(checkpoint.snapshot_step > 0, "snapshots were taken along the way");
    assert!(!checkpoint.deltas.is_empty(), "loading replays deltas after the snapshot");

    let (sink, mut events) = EventSink::channel();
    let handle = runtime
        .block_on(executor.continue_run(&graph, run, RunConfig::new().events(sink)))
        .unwrap();
    let outcome = runtime.block_on(handle.wait()).unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.state, reference.state);
    assert_eq!(outcome.step, reference.step);

    let first = events.try_recv().unwrap();
    assert_eq!(
        first.event,
        Event::RunStarted { graph: "appender".into(), graph_version: 1, from_step: 170 }
    );
    let stored = runtime.block_on(store.events(run, 0, u64::MAX)).unwrap();
    let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=stored.len() as u64).collect::<Vec<_>>(), "gap-free across legs");
    let kinds = support::event_kinds(&stored);
    assert_eq!(kinds.iter().filter(|k| *k == "run_started").count(), 2);
    assert_eq!(kinds.iter().filter(|k| *k == "run_ended").count(), 2);
    assert_eq!(kinds.last().map(String::as_str), Some("run_ended"));
}

#[test]
fn checkpoints_grow_with_the_updates_not_with_the_state() {
    let runtime = support::runtime();
    let store = inspected();
    let executor = Executor::with_store(store.clone());
    let outcome = runtime
        .block_on(executor.run(&appender(1_000), Trace::default(), RunConfig::new()))
        .unwrap();
    assert_eq!(outcome.step, 1_000);
    let deltas = store.hooks().delta_bytes.load(Ordering::SeqCst);
    let snapshots = store.hooks().snapshot_bytes.load(Ordering::SeqCst);
    // 1000 x ~230-byte deltas; full snapshots every step would be ~100 MB.
    assert!(deltas < 300_000, "delta bytes {deltas}");
    assert!(
        snapshots <= 2 * deltas + 64 * 1024,
        "snapshot bytes {snapshots} vs delta bytes {deltas}"
    );
    assert!(
        store.hooks().snapshots.load(Ordering::SeqCst) >= 3,
        "snapshots are taken as the state grows"
    );
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Sibling {
    #[reducer(append)]
    done: Vec<String>,
}

#[test]
fn a_failed_run_continues_without_rerunning_finished_siblings() {
    let runtime = support::runtime();
    let steady_calls = Arc::new(AtomicU32::new(0));
    let broken = Arc::new(AtomicBool::new(true));
    let (calls, flag) = (Arc::clone(&steady_calls), Arc::clone(&broken));
    let graph = StateGraph::<Sibling>::new("siblings", 1)
        .node("steady", move |_s: Arc<Sibling>, _ctx| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok(SiblingUpdate::default().done(vec!["steady".into()])) }
        })
        .node("fragile", move |_s: Arc<Sibling>, _ctx| {
            let broken = flag.load(Ordering::SeqCst);
            async move {
                if broken {
                    return Err(NodeError::fatal("dependency down"));
                }
                Ok(SiblingUpdate::default().done(vec!["fragile".into()]))
            }
        })
        .edge(START, "steady")
        .edge(START, "fragile")
        .edge("steady", END)
        .edge("fragile", END)
        .compile()
        .unwrap();
    let executor = Executor::new(MemoryStore::new());
    let handle =
        runtime.block_on(executor.start(&graph, Sibling::default(), RunConfig::new())).unwrap();
    let run = handle.run_id();
    let error = runtime.block_on(handle.wait()).unwrap_err();
    assert!(matches!(&error, RunError::NodeFailed { node, .. } if node == "fragile"), "{error:?}");
    assert_eq!(runtime.block_on(executor.store().run(run)).unwrap().status, RunStatus::Failed);

    broken.store(false, Ordering::SeqCst);
    let (sink, mut events) = EventSink::channel();
    let handle = runtime
        .block_on(executor.continue_run(&graph, run, RunConfig::new().events(sink)))
        .unwrap();
    let outcome = runtime.block_on(handle.wait()).unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.state.done, ["steady", "fragile"], "merged in task order");
    assert_eq!(steady_calls.load(Ordering::SeqCst), 1, "the finished sibling did not run again");
    let mut reused = Vec::new();
    while let Some(event) = events.try_recv() {
        if let Event::NodeCompleted { reused: flag, .. } = event.event {
            reused.push((event.node.unwrap(), flag));
        }
    }
    assert_eq!(reused, [("steady".to_owned(), true), ("fragile".to_owned(), false)]);
}

#[test]
fn unusable_checkpoints_are_typed_errors() {
    let runtime = support::runtime();
    let graph = appender(400);
    let store = inspected();
    let executor = Executor::with_store(store.clone());
    let run = runtime.block_on(interrupted_at(&executor, 400, 3));

    let other_version = Graph::new("appender", 2)
        .node("append", |_s: Arc<Trace>, _ctx| async move { Ok(TraceUpdate::default()) })
        .edge(START, "append")
        .edge("append", END)
        .compile()
        .unwrap();
    let error =
        runtime.block_on(executor.continue_run(&other_version, run, RunConfig::new())).unwrap_err();
    assert!(matches!(error, RunError::GraphMismatch { .. }), "{error:?}");
    assert_eq!(
        runtime.block_on(store.run(run)).unwrap().status,
        RunStatus::Interrupted,
        "a refused continue changes nothing"
    );

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Changed {
        renamed: u64,
    }
    let changed = StateGraph::<Changed>::new("appender", 1)
        .node("append", |_s: Arc<Changed>, _ctx| async move { Ok(ChangedUpdate::default()) })
        .edge(START, "append")
        .edge("append", END)
        .compile()
        .unwrap();
    let error =
        runtime.block_on(executor.continue_run(&changed, run, RunConfig::new())).unwrap_err();
    assert!(
        matches!(error, RunError::StateDecode { run: r, step: 0, .. } if r == run),
        "{error:?}"
    );
    let record = runtime.block_on(store.run(run)).unwrap();
    assert_eq!(record.status, RunStatus::Failed, "the failed load is recorded");
    assert_eq!(record.failure.unwrap().kind, "state_decode");

    store.hooks().corrupt_reads.store(true, Ordering::SeqCst);
    let error = runtime.block_on(executor.continue_run(&graph, run, RunConfig::new())).unwrap_err();
    assert!(
        matches!(error, RunError::Store(StoreError::CorruptCheckpoint { run: r, step: 0, .. }) if r == run),
        "{error:?}"
    );
    store.hooks().corrupt_reads.store(false, Ordering::SeqCst);

    let done = runtime.block_on(executor.run(&graph, Trace::default(), RunConfig::new())).unwrap();
    let error =
        runtime.block_on(executor.continue_run(&graph, done.run_id, RunConfig::new())).unwrap_err();
    assert!(
        matches!(
            error,
            RunError::Store(StoreError::RunTerminal { status: RunStatus::Completed, .. })
        ),
        "{error:?}"
    );
}

#[test]
fn join_arrivals_survive_an_interruption() {
    let runtime = support::runtime();
    let build = |gate: Option<Gate>| {
        support::visits(Graph::new("join", 1), &["a", "b", "c", "c3", "d"])
            .node("c2", move |_s: Arc<Trace>, _ctx| {
                let gate = gate.clone();
                async move {
                    if let Some(gate) = gate {
                        gate.pass().await;
                    }
                    Ok(TraceUpdate::default().visited(vec!["c2".into()]).count(1))
                }
            })
            .edge(START, "a")
            .edge("a", "b")
            .edge("a", "c")
            .edge("c", "c2")
            .edge("c2", "c3")
            .join(["b", "c3"], "d")
            .edge("d", END)
            .compile()
            .unwrap()
    };
    let reference = runtime.block_on(support::run_graph(&build(None))).unwrap();

    // `b` arrives at the join in step 2; interrupt while `c2` runs (step 3).
    let gate = Gate::closed();
    let graph = build(Some(gate.clone()));
    let executor = Executor::new(MemoryStore::new());
    let (sink, mut events) = EventSink::channel();
    let handle = runtime
        .block_on(executor.start(&graph, Trace::default(), RunConfig::new().events(sink)))
        .unwrap();
    runtime.block_on(async {
        while let Some(event) = events.recv().await {
            if event.node.as_deref() == Some("c2") {
                handle.cancel();
                gate.open();
                break;
            }
        }
    });
    let run = handle.run_id();
    let paused = runtime.block_on(handle.wait()).unwrap();
    assert_eq!((paused.status, paused.step), (RunStatus::Interrupted, 3));

    gate.open();
    let continued = runtime.block_on(executor.continue_run(&graph, run, RunConfig::new())).unwrap();
    let outcome = runtime.block_on(continued.wait()).unwrap();
    assert_eq!(outcome.state, reference.state);
    assert_eq!(outcome.state.visited, ["a", "b", "c", "c2", "c3", "d"], "the join fired once");
}
