//! Queued runs and workers: runs enqueued without a driver, claimed once by
//! one of several workers, released back to the queue at shutdown and
//! finished by another, decided runs picked up, foreign graphs left alone.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    Decision, DecisionRequest, Executor, Interrupt, NodeContext, PageRequest, Route, RunConfig,
    RunFilter, RunId, RunStatus, SqliteStore, StateGraph, Store, Worker, END, START,
};

use crate::support::{Trace, TraceUpdate};

/// A loop of `steps` steps; each step sleeps `pause` and counts one.
fn counter(name: &'static str, steps: i64, pause: Duration) -> tollgate::CompiledGraph<Trace> {
    StateGraph::<Trace>::new(name, 1)
        .node("tick", move |_state: Arc<Trace>, _ctx: NodeContext| async move {
            tokio::time::sleep(pause).await;
            Ok(TraceUpdate::default().count(1))
        })
        .edge(START, "tick")
        .route("tick", ["tick", END], move |state: &Trace| {
            if state.count < steps {
                Route::to("tick")
            } else {
                Route::end()
            }
        })
        .compile()
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Event sequence numbers of a run, which must be 1..=n.
async fn assert_gap_free(store: &dyn Store, run: RunId) {
    let seqs: Vec<u64> =
        store.events(run, 0, u64::MAX).await.unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "run {run}");
}

async fn runs_with(store: &dyn Store, status: RunStatus) -> Vec<RunId> {
    let filter = RunFilter { status: Some(status), ..RunFilter::default() };
    let page = PageRequest { limit: 1_000, cursor: None };
    store.list_runs(&filter, &page).await.unwrap().runs.iter().map(|r| r.id).collect()
}

#[test]
fn two_workers_on_one_file_drive_every_queued_run_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let graph = counter("queue", 5, Duration::from_millis(1));
    runtime().block_on(async {
        let queue = Executor::new(SqliteStore::open(&path).unwrap());
        let mut ids = Vec::new();
        for _ in 0..12 {
            ids.push(queue.enqueue(&graph, Trace::default(), RunConfig::new()).await.unwrap());
        }
        let record = queue.store().run(ids[0]).await.unwrap();
        assert_eq!((record.status, record.owner, record.last_seq), (RunStatus::Queued, None, 0));

        // Two workers, each with its own connection, as two processes would.
        let done = Arc::new(tokio::sync::Notify::new());
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let executor = Executor::new(SqliteStore::open(&path).unwrap());
                let done = Arc::clone(&done);
                let worker = Worker::new(executor)
                    .graph(graph.clone())
                    .concurrency(3)
                    .poll_interval(Duration::from_millis(20));
                tokio::spawn(worker.run(async move { done.notified().await }))
            })
            .collect();
        let store = queue.store();
        for _ in 0..500 {
            if runs_with(&**store, RunStatus::Completed).await.len() == ids.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        done.notify_waiters();
        let mut completed = 0;
        for worker in workers {
            let report = worker.await.unwrap();
            assert_eq!(report.failed, 0, "{report:?}");
            completed += report.completed;
        }
        assert_eq!(completed, ids.len() as u64, "each run completed by exactly one worker");
        for run in ids {
            let record = store.run(run).await.unwrap();
            assert_eq!((record.status, record.step, record.owner), (RunStatus::Completed, 5, None));
            let state = store.checkpoint(run, None).await.unwrap();
            assert_eq!(state.run.step, 5);
            assert_gap_free(&**store, run).await;
        }
    });
}

#[test]
fn a_worker_that_shuts_down_releases_its_leg_and_another_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("release.db");
    let steps = 30;
    let graph = counter("release", steps, Duration::from_millis(10));
    runtime().block_on(async {
        let executor = Executor::new(SqliteStore::open(&path).unwrap());
        let run = executor.enqueue(&graph, Trace::default(), RunConfig::new()).await.unwrap();
        let first = Worker::new(executor.clone())
            .graph(graph.clone())
            .poll_interval(Duration::from_millis(10));
        let report = first.run(tokio::time::sleep(Duration::from_millis(120))).await;
        assert_eq!((report.legs, report.released, report.completed), (1, 1, 0), "{report:?}");
        let record = executor.store().run(run).await.unwrap();
        assert_eq!((record.status, &record.owner), (RunStatus::Queued, &None), "back in the queue");
        assert!(record.step > 0 && record.step < steps as u64, "released mid-run: {record:?}");

        let second = Worker::new(executor.clone()).graph(graph.clone());
        let finished = Arc::new(tokio::sync::Notify::new());
        let signal = Arc::clone(&finished);
        let store = Arc::clone(executor.store());
        let watcher = tokio::spawn(async move {
            while store.run(run).await.unwrap().status != RunStatus::Completed {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            signal.notify_one();
        });
        let report = second.run(async move { finished.notified().await }).await;
        watcher.await.unwrap();
        assert_eq!(report.completed, 1, "{report:?}");
        let state = executor.store().checkpoint(run, None).await.unwrap();
        assert_eq!(state.run.step, steps as u64, "every step committed once, none lost");
        assert_gap_free(&**executor.store(), run).await;
    });
}

#[test]
fn a_decided_run_and_an_orphaned_one_are_picked_up_and_foreign_graphs_left_alone() {
    let graph = StateGraph::<Trace>::new("gate", 1)
        .node("ask", |_state: Arc<Trace>, ctx: NodeContext| async move {
            ctx.interrupt(Interrupt::new("approval", serde_json::json!({"amount": 5})))?;
            Ok(TraceUpdate::default().count(1))
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let foreign = counter("foreign", 1, Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let executor = Executor::new(SqliteStore::open(dir.path().join("w.db")).unwrap());
        let paused = executor.run(&graph, Trace::default(), RunConfig::new()).await.unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingHitl);
        // Decided by a process without the graph: the run is ready, queued.
        executor.decide(paused.run_id, DecisionRequest::new(Decision::Approve)).await.unwrap();
        assert_eq!(executor.store().run(paused.run_id).await.unwrap().status, RunStatus::Queued);
        // A run whose owner's lease ran out.
        let orphan_graph = counter("orphan", 2, Duration::ZERO);
        let stuck =
            executor.enqueue(&orphan_graph, Trace::default(), RunConfig::new()).await.unwrap();
        executor.store().claim(stuck, 1, tollgate::Owner::current(), 0).await.unwrap();
        assert_eq!(executor.store().run(stuck).await.unwrap().status, RunStatus::Running);
        let other = executor.enqueue(&foreign, Trace::default(), RunConfig::new()).await.unwrap();

        let store = Arc::clone(executor.store());
        let until_done = async move {
            loop {
                let a = store.run(paused.run_id).await.unwrap().status;
                let b = store.run(stuck).await.unwrap().status;
                if a == RunStatus::Completed && b == RunStatus::Completed {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let report = Worker::new(executor.clone())
            .graph(graph)
            .graph(orphan_graph)
            .poll_interval(Duration::from_millis(10))
            .run(until_done)
            .await;
        assert_eq!(report.completed, 2, "{report:?}");
        let record = executor.store().run(paused.run_id).await.unwrap();
        assert_eq!((record.status, record.step), (RunStatus::Completed, 1));
        let record = executor.store().run(other).await.unwrap();
        assert_eq!(
            (record.status, record.owner),
            (RunStatus::Queued, None),
            "no workload of this worker accepts it"
        );
    });
}

#[test]
fn a_run_that_keeps_losing_its_owner_is_dead_lettered_not_retried_forever() {
    let dir = tempfile::tempdir().unwrap();
    let graph = counter("cursed", 2, Duration::ZERO);
    runtime().block_on(async {
        let executor = Executor::new(SqliteStore::open(dir.path().join("dead.db")).unwrap());
        let store = Arc::clone(executor.store());
        // Claimed, then taken over `losses` times from owners whose lease
        // ran out (expired at once: lease until 0).
        let run_with_losses = |losses: u64| {
            let (executor, store, graph) = (executor.clone(), Arc::clone(&store), graph.clone());
            async move {
                let run =
                    executor.enqueue(&graph, Trace::default(), RunConfig::new()).await.unwrap();
                for epoch in 1..=losses + 1 {
                    store.claim(run, epoch, tollgate::Owner::current(), 0).await.unwrap();
                }
                assert_eq!(store.run(run).await.unwrap().lease_losses, losses as u32);
                run
            }
        };
        let cursed = run_with_losses(3).await;
        let unlucky = run_with_losses(2).await;
        let watched = Arc::clone(&store);
        let settled = async move {
            loop {
                let a = watched.run(cursed).await.unwrap().status;
                let b = watched.run(unlucky).await.unwrap().status;
                if a == RunStatus::Failed && b == RunStatus::Completed {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let report = Worker::new(executor.clone())
            .graph(graph)
            .max_lease_losses(3)
            .poll_interval(Duration::from_millis(10))
            .run(settled)
            .await;
        assert_eq!((report.dead_lettered, report.completed), (1, 1), "{report:?}");
        let record = store.run(cursed).await.unwrap();
        let failure = record.failure.unwrap();
        assert_eq!((failure.kind.as_str(), record.owner, record.step), ("dead_letter", None, 0));
        // Three takeovers, and the fourth owner gone too: four owners lost.
        assert!(failure.message.contains("4 times"), "{}", failure.message);
        let events = store.events(cursed, 0, u64::MAX).await.unwrap();
        let last: serde_json::Value = serde_json::from_str(&events.last().unwrap().json).unwrap();
        assert_eq!(
            (last["event_type"].as_str(), last["status"].as_str()),
            (Some("run_ended"), Some("failed"))
        );
        assert_gap_free(&*store, cursed).await;
        // Continuing it on purpose still works.
        let outcome = executor
            .continue_run(&counter("cursed", 2, Duration::ZERO), cursed, RunConfig::new())
            .await
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert_eq!(outcome.status, RunStatus::Completed);
    });
}

/// A worker told of changed runs without pause still looks for runs every
/// poll interval: a change does not make it look (the store's own wake-up
/// does), but a stream of them must not keep it from looking at all.
#[test]
fn a_stream_of_changed_runs_does_not_keep_a_worker_from_its_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let graph = counter("flood", 3, Duration::from_millis(1));
    runtime().block_on(async {
        let executor = Executor::new(SqliteStore::open(&path).unwrap());
        let (changes, told) = tokio::sync::broadcast::channel(64);
        let flood = tokio::spawn(async move {
            loop {
                let _ = changes.send(Some(RunId::new()));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let worker = Worker::new(executor.clone())
            .graph(graph.clone())
            .poll_interval(Duration::from_millis(50))
            .wake_legs_on(told);
        let running = tokio::spawn(worker.run(async {
            let _ = stopped.await;
        }));
        // Queued once the worker has looked and found nothing.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let run = executor.enqueue(&graph, Trace::default(), RunConfig::new()).await.unwrap();
        let done = tokio::time::timeout(Duration::from_secs(10), async {
            while executor.store().run(run).await.unwrap().status != RunStatus::Completed {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        done.await.expect("the worker took the run within 10 s");
        flood.abort();
        stop.send(()).unwrap();
        assert_eq!(running.await.unwrap().completed, 1);
    });
}
