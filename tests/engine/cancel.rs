//! Cancelling a run whose step is in flight: a leg whose run was taken
//! over drops its tasks at its next lease renewal, at once when its handle
//! is cancelled too or its worker is told the run changed, and a plain
//! cancel (or a change that took nothing over) still lets the step finish.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tollgate::{
    CompiledGraph, Event, EventSink, Executor, RunConfig, RunError, RunHandle, RunId, RunStatus,
    SqliteStore, Worker, WorkerReport, END, START,
};

use crate::support::{self, Gate, Graph, Trace, TraceUpdate};

/// Far above any renewal or wake-up here: a leg that has not stopped by
/// then would have waited for a task that never ends.
const HANG: Duration = Duration::from_secs(30);

/// Marks a task dropped before it finished.
struct InFlight {
    dropped: Arc<AtomicBool>,
    finished: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.finished {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }
}

/// What the test sees of the first node of [`held`].
#[derive(Clone)]
struct Probe {
    gate: Gate,
    /// The first attempt's task was dropped before it finished.
    dropped: Arc<AtomicBool>,
    attempts: Arc<AtomicU32>,
}

impl Default for Probe {
    fn default() -> Self {
        Self { gate: Gate::closed(), dropped: Arc::default(), attempts: Arc::default() }
    }
}

/// Two steps, `work` then `after`; `work`'s first attempt waits for the
/// probe's gate (forever, unless the test opens it), later ones finish at
/// once.
fn held(probe: &Probe) -> CompiledGraph<Trace> {
    let probe = probe.clone();
    Graph::new("held", 1)
        .node("work", move |_s: Arc<Trace>, _ctx| {
            let probe = probe.clone();
            async move {
                let mut task = InFlight { dropped: Arc::clone(&probe.dropped), finished: false };
                if probe.attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                    probe.gate.pass().await;
                }
                task.finished = true;
                Ok(TraceUpdate::default().count(1))
            }
        })
        .node("after", |_s: Arc<Trace>, _ctx| async move { Ok(TraceUpdate::default().count(1)) })
        .edge(START, "work")
        .edge("work", "after")
        .edge("after", END)
        .compile()
        .unwrap()
}

/// A SQLite file, an executor on it, and a [`held`] graph with its probe.
struct Setup {
    runtime: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    executor: Executor,
    probe: Probe,
    graph: CompiledGraph<Trace>,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let executor = Executor::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
        let probe = Probe::default();
        let graph = held(&probe);
        Self { runtime: support::runtime(), dir, executor, probe, graph }
    }

    /// Another executor on the same file, as another process would have.
    fn other(&self) -> Executor {
        Executor::new(SqliteStore::open(self.dir.path().join("runs.db")).unwrap())
    }

    /// Starts a run with `lease` and waits until its first step is in
    /// flight.
    async fn started(&self, lease: Duration) -> RunHandle<Trace> {
        let (sink, mut events) = EventSink::channel();
        let config = RunConfig::new().lease(lease).events(sink);
        let handle = self.executor.start(&self.graph, Trace::default(), config).await.unwrap();
        while let Some(event) = events.recv().await {
            if matches!(event.event, Event::NodeStarted { step: 1, .. }) {
                break;
            }
        }
        handle
    }
}

/// The leg's end, or a panic if it never ends.
async fn ended(handle: RunHandle<Trace>) -> Result<tollgate::RunOutcome<Trace>, RunError> {
    tokio::time::timeout(HANG, handle.wait()).await.expect("the leg stopped")
}

/// Cancelled from another process: the owner learns it at its next lease
/// renewal (every third of the lease) and drops its task there, rather
/// than running it to its end for a commit that would be refused. The run
/// continues later from its last committed step.
#[test]
fn a_run_cancelled_elsewhere_drops_its_task_in_flight_at_the_next_renewal() {
    let setup = Setup::new();
    let (executor, other, probe) = (&setup.executor, setup.other(), &setup.probe);
    setup.runtime.block_on(async {
        let handle = setup.started(Duration::from_millis(300)).await;
        let run = handle.run_id();
        let cancelled = other.cancel_run(run).await.unwrap();
        assert_eq!(cancelled.status, RunStatus::Interrupted);
        let error = ended(handle).await.unwrap_err();
        assert!(matches!(error, RunError::Cancelled { run: r } if r == run), "{error:?}");
        assert!(probe.dropped.load(Ordering::SeqCst), "the task in flight was dropped");
        let after = other.store().run(run).await.unwrap();
        assert_eq!((after.status, after.step), (RunStatus::Interrupted, 0));
        let outcome = executor.continue_run(&setup.graph, run, RunConfig::new()).await.unwrap();
        let outcome = ended(outcome).await.unwrap();
        assert_eq!((outcome.status, outcome.state.count), (RunStatus::Completed, 2));
        assert_eq!(probe.attempts.load(Ordering::SeqCst), 2);
    });
}

/// Where the cancel's own process drives the leg (as the server does),
/// cancelling its handle after the cancel's claim wakes the step: it
/// renews at once, is refused, and drops its task, with no wait for a
/// renewal (this lease renews every 200 s).
#[test]
fn a_leg_woken_after_its_run_was_taken_over_drops_its_task_at_once() {
    let setup = Setup::new();
    let (executor, probe) = (&setup.executor, &setup.probe);
    setup.runtime.block_on(async {
        let handle = setup.started(Duration::from_secs(600)).await;
        let run = handle.run_id();
        executor.cancel_run(run).await.unwrap();
        handle.cancel();
        let error = ended(handle).await.unwrap_err();
        assert!(matches!(error, RunError::Cancelled { .. }), "{error:?}");
        assert!(probe.dropped.load(Ordering::SeqCst), "the task in flight was dropped");
        let record = executor.store().run(run).await.unwrap();
        assert_eq!((record.status, record.step), (RunStatus::Interrupted, 0));
    });
}

/// A cancel of the handle alone (nobody took the run over) wakes the step
/// too, but its renewal succeeds: the task runs to its end, its step is
/// committed, and the run stops at that boundary.
#[test]
fn a_plain_cancel_still_lets_the_step_in_flight_finish() {
    let setup = Setup::new();
    let probe = &setup.probe;
    setup.runtime.block_on(async {
        let handle = setup.started(Duration::from_secs(600)).await;
        handle.cancel();
        // The wake-up's renewal happens while the task still waits.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!probe.dropped.load(Ordering::SeqCst), "the task goes on");
        probe.gate.open();
        let outcome = ended(handle).await.unwrap();
        assert_eq!(
            (outcome.status, outcome.step, outcome.state.count),
            (RunStatus::Interrupted, 1, 1)
        );
        assert!(!probe.dropped.load(Ordering::SeqCst));
    });
}

/// A worker driving [`held`] runs with a 600 s lease (it renews every
/// 200 s), told of changed runs through the returned sender; stopped by
/// dropping the other sender.
fn worker(
    setup: &Setup,
) -> (
    broadcast::Sender<Option<RunId>>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<WorkerReport>,
) {
    let (changes, told) = broadcast::channel(16);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::new(setup.executor.clone())
        .graph(setup.graph.clone())
        .config(RunConfig::new().lease(Duration::from_secs(600)))
        .poll_interval(Duration::from_millis(20))
        .wake_legs_on(told);
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    (changes, stop, running)
}

/// Waits until `held`'s first attempt is in flight (the worker claimed
/// the run and started its step).
async fn in_flight(probe: &Probe) {
    let waited = tokio::time::timeout(HANG, async {
        while probe.attempts.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    waited.await.expect("the worker started the run");
}

/// A worker told that a run it drives changed has its leg renew at once:
/// cancelled from another process, the leg drops its task then, not 200 s
/// later at its next renewal.
#[test]
fn a_worker_told_its_run_changed_stops_the_leg_of_a_run_cancelled_elsewhere() {
    let setup = Setup::new();
    let (other, probe) = (setup.other(), &setup.probe);
    setup.runtime.block_on(async {
        let run = setup.executor.enqueue(&setup.graph, Trace::default(), RunConfig::new());
        let run = run.await.unwrap();
        let (changes, stop, running) = worker(&setup);
        in_flight(probe).await;
        other.cancel_run(run).await.unwrap();
        // Not told yet: nothing stops the task before its renewal.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!probe.dropped.load(Ordering::SeqCst), "the leg has not looked yet");
        changes.send(Some(run)).unwrap();
        let dropped = tokio::time::timeout(HANG, async {
            while !probe.dropped.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        dropped.await.expect("the task in flight was dropped");
        let record = other.store().run(run).await.unwrap();
        assert_eq!((record.status, record.step), (RunStatus::Interrupted, 0));
        stop.send(()).unwrap();
        let report = tokio::time::timeout(HANG, running).await.expect("stops").unwrap();
        assert_eq!((report.completed, report.released), (0, 0), "{report:?}");
    });
}

/// Changes that took nothing from the leg (another run's, or "any run may
/// have changed") cost it a renewal: its task goes on and the run
/// completes.
#[test]
fn a_worker_told_of_changes_that_took_nothing_from_its_leg_drives_it_on() {
    let setup = Setup::new();
    let probe = &setup.probe;
    setup.runtime.block_on(async {
        let run = setup.executor.enqueue(&setup.graph, Trace::default(), RunConfig::new());
        let run = run.await.unwrap();
        let (changes, stop, running) = worker(&setup);
        in_flight(probe).await;
        changes.send(Some(RunId::new())).unwrap();
        changes.send(None).unwrap();
        changes.send(Some(run)).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!probe.dropped.load(Ordering::SeqCst), "the task goes on");
        probe.gate.open();
        let done = tokio::time::timeout(HANG, async {
            loop {
                let record = setup.executor.store().run(run).await.unwrap();
                if record.status != RunStatus::Running && record.status != RunStatus::Queued {
                    return record;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let record = done.await.expect("the run ends");
        assert_eq!((record.status, record.step), (RunStatus::Completed, 2));
        assert!(!probe.dropped.load(Ordering::SeqCst));
        stop.send(()).unwrap();
        let report = tokio::time::timeout(HANG, running).await.expect("stops").unwrap();
        assert_eq!(report.completed, 1, "{report:?}");
    });
}
