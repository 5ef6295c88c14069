//! The engine on the SQLite store: reopening, recovery of dead owners,
//! fencing of an owner that lost its run.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    Event, EventSink, Executor, Owner, Route, RunConfig, RunError, RunStatus, SqliteOptions,
    SqliteStore, StoreError, END, START,
};

use crate::support::{self, Gate, Graph, Trace, TraceUpdate};

/// A loop of `steps` single-task steps; the node of step `at` waits for
/// the gate.
fn looping(steps: i64, gate: Option<(u64, Gate)>) -> tollgate::CompiledGraph<Trace> {
    Graph::new("durable", 1)
        .node("tick", move |_s: Arc<Trace>, ctx| {
            let gate = gate.clone();
            async move {
                if let Some((at, gate)) = gate {
                    if ctx.step() == at {
                        gate.pass().await;
                    }
                }
                Ok(TraceUpdate::default().count(1).visited(vec![format!("t{}", ctx.step())]))
            }
        })
        .edge(START, "tick")
        .route("tick", ["tick", END], move |s: &Trace| {
            if s.count < steps {
                Route::to("tick")
            } else {
                Route::end()
            }
        })
        .compile()
        .unwrap()
}

/// Starts a gated run and waits until step `at` is in flight.
async fn started_and_held(
    executor: &Executor,
    at: u64,
) -> (tollgate::RunHandle<Trace>, Gate, tollgate::CompiledGraph<Trace>) {
    let gate = Gate::closed();
    let graph = looping(10, Some((at, gate.clone())));
    let (sink, mut events) = EventSink::channel();
    let handle =
        executor.start(&graph, Trace::default(), RunConfig::new().events(sink)).await.unwrap();
    while let Some(event) = events.recv().await {
        if matches!(event.event, Event::NodeStarted { step, .. } if step == at) {
            break;
        }
    }
    (handle, gate, graph)
}

/// Claims `run` as another process would (a far lease): the epoch won.
async fn take_over(store: &dyn tollgate::Store, run: tollgate::RunId) -> u64 {
    let record = store.run(run).await.unwrap();
    store.claim(run, record.epoch, Owner::current(), i64::MAX / 2).await.unwrap()
}

#[test]
fn a_run_continues_after_the_database_is_reopened() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let run = runtime.block_on(async {
        let executor = Executor::new(SqliteStore::open(&path).unwrap());
        let (handle, gate, _) = started_and_held(&executor, 4).await;
        handle.cancel();
        gate.open();
        let run = handle.run_id();
        assert_eq!(handle.wait().await.unwrap().status, RunStatus::Interrupted);
        run
    });
    // A new store and executor on the same file, as another process would.
    let reference = runtime.block_on(support::run_graph(&looping(10, None))).unwrap();
    let executor = Executor::new(SqliteStore::open(&path).unwrap());
    let handle =
        runtime.block_on(executor.continue_run(&looping(10, None), run, RunConfig::new())).unwrap();
    let outcome = runtime.block_on(handle.wait()).unwrap();
    assert_eq!(outcome.state, reference.state);
    let record = runtime.block_on(executor.store().run(run)).unwrap();
    assert_eq!((record.status, record.step, record.owner), (RunStatus::Completed, 10, None));
}

#[test]
fn recover_takes_over_runs_whose_owner_died_and_leaves_live_ones() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
    let store = Arc::clone(executor.store());
    let graph = looping(6, None);
    let me = Owner::current();

    // Three runs interrupted, then claimed by three kinds of owner.
    let mut runs = Vec::new();
    for _ in 0..3 {
        let (handle, gate, _) = runtime.block_on(started_and_held(&executor, 2));
        handle.cancel();
        gate.open();
        runs.push(handle.run_id());
        runtime.block_on(handle.wait()).unwrap();
    }
    let dead_here = Owner { started: me.started + 12_345, ..me.clone() };
    let live_elsewhere = Owner { host: "elsewhere".into(), ..me.clone() };
    let far = i64::MAX / 2;
    let owners = [(dead_here, far), (live_elsewhere.clone(), 0), (live_elsewhere, far)];
    for (run, (owner, lease)) in runs.iter().zip(owners) {
        let epoch = runtime.block_on(store.run(*run)).unwrap().epoch;
        runtime.block_on(store.claim(*run, epoch, owner, lease)).unwrap();
    }

    let handles = runtime.block_on(executor.recover(&graph, RunConfig::new())).unwrap();
    let mut recovered: Vec<_> = handles.iter().map(|h| h.run_id()).collect();
    recovered.sort();
    let mut expected = vec![runs[0], runs[1]];
    expected.sort();
    assert_eq!(recovered, expected, "the dead local owner and the expired lease are recovered");
    for handle in handles {
        assert_eq!(runtime.block_on(handle.wait()).unwrap().status, RunStatus::Completed);
    }
    let error =
        runtime.block_on(executor.continue_run(&graph, runs[2], RunConfig::new())).unwrap_err();
    assert!(matches!(error, RunError::RunOwned { .. }), "{error:?}");
    assert_eq!(runtime.block_on(store.run(runs[2])).unwrap().status, RunStatus::Running);
}

#[test]
fn an_owner_that_lost_its_run_cannot_write() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
    let store = Arc::clone(executor.store());
    let (handle, gate, _) = runtime.block_on(started_and_held(&executor, 3));
    let run = handle.run_id();

    // Another process takes the run over while step 3 is in flight.
    let epoch = runtime.block_on(take_over(&*store, run));
    gate.open();
    let error = runtime.block_on(handle.wait()).unwrap_err();
    assert!(
        matches!(error, RunError::Store(StoreError::Fenced { writer: 1, current: 2, .. })),
        "{error:?}"
    );
    assert_eq!(epoch, 2);
    let after = runtime.block_on(store.run(run)).unwrap();
    assert_eq!((after.step, after.epoch), (2, 2), "the fenced step was not written");
}

/// The fenced leg above, counted: `tollgate_worker_leases_lost_total`
/// (metrics recorded on this thread, a current-thread runtime), and the
/// steps and commits it made before.
#[test]
fn a_fenced_leg_counts_a_lost_lease() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let executor = Executor::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
            let store = Arc::clone(executor.store());
            let (handle, gate, _) = started_and_held(&executor, 3).await;
            let run = handle.run_id();
            take_over(&*store, run).await;
            gate.open();
            assert!(handle.wait().await.is_err(), "fenced");
        })
    });
    let counters: std::collections::BTreeMap<String, u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(count) => Some((key.key().name().to_owned(), count)),
            DebugValue::Histogram(samples) => {
                Some((format!("{}_count", key.key().name()), samples.len() as u64))
            }
            DebugValue::Gauge(_) => None,
        })
        .collect();
    assert_eq!(counters.get("tollgate_worker_leases_lost_total"), Some(&1), "{counters:?}");
    assert_eq!(counters.get("tollgate_runs_started_total"), Some(&1));
    // Steps 1 and 2 committed; step 3 ran and was refused.
    assert_eq!(counters.get("tollgate_commit_duration_seconds_count"), Some(&3));
    assert_eq!(counters.get("tollgate_step_duration_seconds_count"), Some(&3));
    assert_eq!(counters.get("tollgate_store_errors_total"), None, "a lost run is no store error");
    assert_eq!(counters.get("tollgate_runs_finished_total"), None);
}

/// A cancel claims the run, then ends it: a leg fenced between the two
/// writes still reports that it was cancelled (it waits for the second).
#[test]
fn a_leg_fenced_between_a_cancels_two_writes_reports_the_cancel() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
    let store = Arc::clone(executor.store());
    let (handle, gate, _) = runtime.block_on(started_and_held(&executor, 3));
    let run = handle.run_id();
    // The cancel's first write: the claim.
    let epoch = runtime.block_on(take_over(&*store, run));
    gate.open();
    // The second write lands a moment after the leg was refused.
    std::thread::sleep(Duration::from_millis(150));
    let ended = tollgate_checkpoint::Transition {
        run,
        epoch,
        step: None,
        status: RunStatus::Interrupted,
        failure: None,
        events: Vec::new(),
        at_ms: 0,
        lease_until_ms: None,
        interrupts: Vec::new(),
    };
    runtime.block_on(store.commit(ended)).unwrap();
    let error = runtime.block_on(handle.wait()).unwrap_err();
    assert!(matches!(error, RunError::Cancelled { .. }), "{error:?}");
}

#[test]
fn the_lease_is_renewed_while_a_long_step_runs() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
    let graph = Graph::new("slow", 1)
        .node("slow", |_s: Arc<Trace>, _ctx| async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            Ok(TraceUpdate::default().count(1))
        })
        .edge(START, "slow")
        .edge("slow", END)
        .compile()
        .unwrap();
    let config = RunConfig::new().lease(Duration::from_millis(150));
    let handle = runtime.block_on(executor.start(&graph, Trace::default(), config)).unwrap();
    let run = handle.run_id();
    std::thread::sleep(Duration::from_millis(300));
    let record = runtime.block_on(executor.store().run(run)).unwrap();
    let now = tollgate::Clock::now_ms(&tollgate::SystemClock);
    assert!(!record.is_orphaned(now), "the lease was kept fresh: {record:?} at {now}");
    runtime.block_on(handle.wait()).unwrap();
}

#[test]
fn the_background_checkpointer_keeps_the_wal_small() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.db");
    let store = SqliteStore::open(&path).unwrap();
    let executor = Executor::new(store);
    let runtime = support::runtime();
    // A few pages a step: 12,000 steps write about 30,000 frames, all of
    // which the WAL would hold were the background thread not
    // checkpointing (the inline safety net is at forty times
    // `wal_autocheckpoint`, 40,000 pages; the thread's own restart at
    // sixteen times, 16,000, is not what keeps it small here).
    for _ in 0..12 {
        let config = RunConfig::new().max_steps(2_000);
        let outcome =
            runtime.block_on(executor.run(&looping(1_000, None), Trace::default(), config));
        assert_eq!(outcome.unwrap().status, RunStatus::Completed);
        std::thread::sleep(Duration::from_millis(150));
    }
    let wal = std::fs::metadata(dir.path().join("wal.db-wal")).map(|m| m.len()).unwrap_or(0);
    let frames = wal / (u64::from(SqliteOptions::default().page_size) + 24);
    // A run writes about 2,900 frames; the WAL starts over once the thread
    // has copied all of it, normally in the pause after each run (its
    // high-water mark is then one run's frames). On a loaded machine, or
    // while a sync waits on a busy disk, the thread may not get there in a
    // pause or several (CI saw 5,735 frames once with 6 runs, and 10,074
    // once). Without the thread the WAL grows to all the frames written:
    // the bound sits halfway.
    assert!(
        frames < 15_000,
        "the WAL grew to {frames} pages ({wal} bytes): the background checkpointer is not keeping up"
    );
    drop(executor);
}

/// `cancel_run` from another executor on the same file (as another
/// process would): the owner is refused at its next write and its leg ends
/// `Cancelled`; the run is `interrupted`, its log closed, and it continues
/// later from the last committed step.
#[test]
fn a_run_cancelled_elsewhere_ends_interrupted_and_can_continue() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let executor = Executor::new(SqliteStore::open(&path).unwrap());
    let other = Executor::new(SqliteStore::open(&path).unwrap());
    let (handle, gate, graph) = runtime.block_on(started_and_held(&executor, 3));
    let run = handle.run_id();

    let cancelled = runtime.block_on(other.cancel_run(run)).unwrap();
    assert_eq!(
        (cancelled.status, cancelled.step, cancelled.owner),
        (RunStatus::Interrupted, 2, None)
    );
    gate.open();
    let error = runtime.block_on(handle.wait()).unwrap_err();
    assert!(matches!(error, RunError::Cancelled { run: r } if r == run), "{error:?}");
    assert_eq!(error.kind(), "cancelled");
    let after = runtime.block_on(other.store().run(run)).unwrap();
    assert_eq!((after.status, after.step), (RunStatus::Interrupted, 2), "step 3 was not stored");
    let events = runtime.block_on(other.store().events(run, 0, 1_000)).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "gap-free");
    let last: tollgate::EventEnvelope = serde_json::from_str(&events.last().unwrap().json).unwrap();
    assert!(matches!(last.event, Event::RunEnded { status: RunStatus::Interrupted, step: 2, .. }));

    // Cancelling again changes nothing; the run continues where it stopped.
    let again = runtime.block_on(other.cancel_run(run)).unwrap();
    assert_eq!(again, after);
    gate.open();
    let outcome = runtime
        .block_on(async {
            executor.continue_run(&graph, run, RunConfig::new()).await?.wait().await
        })
        .unwrap();
    assert_eq!((outcome.status, outcome.state.count), (RunStatus::Completed, 10));
    let error = runtime.block_on(other.cancel_run(run)).unwrap_err();
    assert!(
        matches!(error, RunError::NotCancellable { status: RunStatus::Completed, .. }),
        "{error:?}"
    );
}

/// A queued run ends `interrupted` at once, as a leg of its own.
#[test]
fn a_queued_run_is_cancelled_at_once() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
    let graph = looping(2, None);
    let run =
        runtime.block_on(executor.enqueue(&graph, Trace::default(), RunConfig::new())).unwrap();
    let record = runtime.block_on(executor.cancel_run(run)).unwrap();
    assert_eq!((record.status, record.owner), (RunStatus::Interrupted, None));
    let events = runtime.block_on(executor.store().events(run, 0, 10)).unwrap();
    let kinds: Vec<String> = events
        .iter()
        .map(|e| {
            serde_json::from_str::<tollgate::EventEnvelope>(&e.json)
                .unwrap()
                .event
                .kind()
                .to_owned()
        })
        .collect();
    assert_eq!(kinds, ["run_started", "run_ended"]);
}

/// A long run on a runtime with one thread lets the other tasks run
/// between its steps. Its commits never make it wait (the connection is
/// free, the write runs at once); the yields come from tokio's cooperative
/// budget, which the tokio primitives each step uses spend (about one
/// yield every 128 steps). Without them the leg would keep the thread
/// until it ended: a server's requests and the other runs on that thread
/// would wait for all of its steps.
#[test]
fn a_long_run_lets_other_tasks_run_between_its_steps() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
    let steps = 2_000;
    let (turns, outcome) = runtime.block_on(async {
        let turns = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = Arc::clone(&turns);
        let other = tokio::spawn(async move {
            loop {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        });
        // The other task has run once before the run starts.
        while turns.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let before = turns.load(std::sync::atomic::Ordering::SeqCst);
        let config = RunConfig::new().max_steps(steps as u64);
        let outcome = executor.run(&looping(steps, None), support::Trace::default(), config).await;
        let during = turns.load(std::sync::atomic::Ordering::SeqCst) - before;
        other.abort();
        (during, outcome)
    });
    let outcome = outcome.unwrap();
    assert_eq!((outcome.status, outcome.state.count), (RunStatus::Completed, steps));
    // 15 when written: 2,000 steps / 128.
    assert!(turns >= 10, "the other task ran {turns} times during {steps} steps");
}

/// Two nodes taking turns: their frontiers are stored once each, later
/// steps refer to them (nine bytes instead of the frontier), and every
/// step's checkpoint reads back the very frontier the in-memory store
/// keeps, from the store that wrote them and from the file reopened.
#[test]
fn frontiers_a_run_repeats_are_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("frontiers.db");
    let graph =
        support::visits(Graph::new("turns", 1), &["ask", "answer"])
            .edge(START, "ask")
            .edge("ask", "answer")
            .route("answer", ["ask", END], |s: &Trace| {
                if s.count < 12 {
                    Route::to("ask")
                } else {
                    Route::end()
                }
            })
            .compile()
            .unwrap();
    let runtime = support::runtime();
    let memory = Executor::new(tollgate::MemoryStore::new());
    let on_file = Executor::new(SqliteStore::open(&path).unwrap());
    let (kept, written) = runtime.block_on(async {
        let kept = memory.run(&graph, Trace::default(), RunConfig::new()).await.unwrap();
        let written = on_file.run(&graph, Trace::default(), RunConfig::new()).await.unwrap();
        assert_eq!(written.status, RunStatus::Completed);
        (kept.run_id, written.run_id)
    });
    let conn = rusqlite::Connection::open(&path).unwrap();
    let sizes: Vec<(i64, i64)> = conn
        .prepare("SELECT step, length(frontier) FROM steps ORDER BY step")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    drop(conn);
    assert_eq!(sizes.len(), 13, "steps 0 to 12: {sizes:?}");
    // Step 0 (ask next), step 1 (answer next) and step 12 (the end) store
    // theirs; the others repeat one of the first two.
    let referring: Vec<i64> =
        sizes.iter().filter(|(_, size)| *size == 9).map(|(step, _)| *step).collect();
    assert_eq!(referring, (2..12).collect::<Vec<_>>(), "{sizes:?}");
    let reopened: Arc<dyn tollgate::Store> = Arc::new(SqliteStore::open(&path).unwrap());
    runtime.block_on(async {
        for store in [on_file.store(), &reopened] {
            for step in 0..=12 {
                let expected = memory.store().checkpoint(kept, Some(step)).await.unwrap();
                let found = store.checkpoint(written, Some(step)).await.unwrap();
                assert_eq!(found.frontier.to_bytes(), expected.frontier.to_bytes(), "step {step}");
            }
        }
    });
}
