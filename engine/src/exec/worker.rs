//! Workers: processes that take runs no one drives and drive them.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{broadcast, watch, Notify};
use tokio::task::{JoinError, JoinSet};
use tollgate_checkpoint::{
    Owner, PageRequest, RunFailure, RunFilter, RunId, RunRecord, RunStatus, StoreError, Transition,
};

use crate::event::Event;
use crate::graph::CompiledGraph;
use crate::state::State;
use crate::telemetry;

use super::config::RunConfig;
use super::emit::{Emitter, Live};
use super::error::json_error;
use super::error::RunError;
use super::executor::Executor;
use super::handle::{RunHandle, RunOutcome};
use super::setup::graph_ref;
use super::token::CancelToken;

/// What a [`Worker`] can drive. A [`CompiledGraph`] drives the runs of its
/// own name and version; a program whose graphs are rebuilt per run (a
/// blueprint stored with the run) implements it itself.
#[async_trait]
pub trait Workload: Send + Sync + 'static {
    /// `None`, at once and without touching the run, when this workload
    /// does not drive `run` (it is left for other workers). Otherwise
    /// claims it (a compare-and-set: another worker may win, and the
    /// answer is then [`StoreError::Fenced`] or [`RunError::RunOwned`]) and
    /// drives its leg to its end with `config` (a workload with settings of
    /// its own keeps at least `config`'s cancel token,
    /// [`RunConfig::given_cancel_token`], through which the worker has the
    /// leg renew its lease when told the run changed). When `shutdown` turns
    /// `true`, the leg is to be released at its next step boundary
    /// ([`RunHandle::release`]): [`drive_leg`] does that for a handle.
    async fn drive(
        &self,
        executor: &Executor,
        run: &RunRecord,
        config: RunConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Option<Result<RunStatus, RunError>>;
}

#[async_trait]
impl<S: State> Workload for CompiledGraph<S> {
    async fn drive(
        &self,
        executor: &Executor,
        run: &RunRecord,
        config: RunConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Option<Result<RunStatus, RunError>> {
        if run.graph != graph_ref(self) {
            return None;
        }
        Some(match executor.continue_run(self, run.id, config).await {
            Ok(handle) => drive_leg(handle, shutdown).await.map(|outcome| outcome.status),
            Err(error) => Err(error),
        })
    }
}

/// Waits for a leg, releasing it (back to `queued` at its next step
/// boundary) as soon as `shutdown` turns `true`.
pub async fn drive_leg<S>(
    handle: RunHandle<S>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<RunOutcome<S>, RunError> {
    let token = handle.cancel_token();
    let wait = handle.wait();
    tokio::pin!(wait);
    loop {
        tokio::select! {
            outcome = &mut wait => return outcome,
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    token.release();
                    return wait.await;
                }
            }
        }
    }
}

/// What a running worker holds: its legs, the runs they drive (with
/// their legs' tokens), the runs no workload of it drives (not offered
/// again), and its report.
#[derive(Default)]
struct Driving {
    legs: JoinSet<(RunId, Option<Result<RunStatus, RunError>>)>,
    driving: HashMap<RunId, CancelToken>,
    declined: HashSet<RunId>,
    report: WorkerReport,
}

impl Driving {
    /// A leg ended: counted, or its run declined.
    fn ended(&mut self, done: Result<(RunId, Option<Result<RunStatus, RunError>>), JoinError>) {
        metrics::gauge!(telemetry::LEASES_HELD).decrement(1.0);
        if let Ok((run, driven)) = done {
            self.driving.remove(&run);
            match driven {
                Some(result) => self.report.count(run, result),
                None => {
                    self.declined.insert(run);
                }
            }
        }
    }

    /// A run changed in another process: its leg renews its lease at once
    /// (and so learns of a cancel), every leg when changes were missed.
    /// Whether the changes' channel closed.
    fn changed(&self, change: Result<Option<RunId>, broadcast::error::RecvError>) -> bool {
        match change {
            Ok(Some(run)) => {
                if let Some(token) = self.driving.get(&run) {
                    token.renew_now();
                }
            }
            Ok(None) | Err(broadcast::error::RecvError::Lagged(_)) => {
                self.driving.values().for_each(CancelToken::renew_now);
            }
            Err(broadcast::error::RecvError::Closed) => return true,
        }
        false
    }
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Legs driven to their end (any status).
    pub legs: u64,
    /// Of those, runs that completed.
    pub completed: u64,
    /// Legs that ended failed (the run records why).
    pub failed: u64,
    /// Legs released back to the queue at shutdown.
    pub released: u64,
    /// Claims another worker won first.
    pub lost_claims: u64,
    /// Runs given up on: marked failed (`dead_letter`) because their
    /// owners kept disappearing.
    pub dead_lettered: u64,
}

/// Takes runs that no process drives and drives them: `queued` runs (new
/// ones from [`Executor::enqueue`], and paused ones a decision made ready)
/// and `running` runs whose owner is gone (its lease expired, or it was a
/// process of this host that died). Any number of workers, in any number
/// of processes, share a store: each run is claimed by a compare-and-set
/// on its epoch, so exactly one worker drives it, and an owner that lost
/// its lease is fenced off at its next commit.
///
/// ```no_run
/// # use tollgate_engine::{CompiledGraph, DynState, Executor, Worker};
/// # async fn demo(executor: Executor, graph: CompiledGraph<DynState>) {
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// // ... `stop.send(())` on SIGTERM ...
/// let report = Worker::new(executor)
///     .graph(graph)
///     .concurrency(4)
///     .run(async { stopped.await.ok(); })
///     .await;
/// println!("{} runs completed", report.completed);
/// # drop(stop);
/// # }
/// ```
pub struct Worker {
    executor: Executor,
    workloads: Vec<Arc<dyn Workload>>,
    concurrency: usize,
    poll: Duration,
    config: RunConfig,
    wake: Option<Arc<Notify>>,
    changes: Option<broadcast::Receiver<Option<RunId>>>,
    max_lease_losses: u32,
    /// Fires due schedules each poll.
    schedules: bool,
}

/// How often a worker looks for runs whose owner was a process of this
/// host that died (cheaper than waiting for their leases, dearer than the
/// claimable query).
const DEAD_OWNER_SCAN: Duration = Duration::from_secs(2);

/// Default of [`Worker::max_lease_losses`].
pub const DEFAULT_MAX_LEASE_LOSSES: u32 = 3;

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("workloads", &self.workloads.len())
            .field("concurrency", &self.concurrency)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker on `executor`'s store, with no workloads yet, 4 legs at a
    /// time, looking for runs every second.
    pub fn new(executor: Executor) -> Self {
        Self {
            executor,
            workloads: Vec::new(),
            concurrency: 4,
            poll: Duration::from_secs(1),
            config: RunConfig::new(),
            wake: None,
            changes: None,
            max_lease_losses: DEFAULT_MAX_LEASE_LOSSES,
            schedules: true,
        }
    }

    /// Whether the worker fires due schedules each poll
    /// ([`Executor::fire_schedules`]; default `true`). Any number of
    /// workers may: each tick starts one run.
    pub fn fire_schedules(mut self, fire: bool) -> Self {
        self.schedules = fire;
        self
    }

    /// A run whose owners disappeared (lease expired, process dead) this
    /// many times in a row without its leg ending is marked failed, kind
    /// `dead_letter`, instead of being taken over again: a run that kills
    /// every worker that drives it is not retried forever. `runs continue`
    /// (or [`Executor::continue_run`]) tries it again on purpose. Default
    /// [`DEFAULT_MAX_LEASE_LOSSES`]; at least 1.
    pub fn max_lease_losses(mut self, losses: u32) -> Self {
        self.max_lease_losses = losses.max(1);
        self
    }

    /// Drives the runs of `graph` (its name and version).
    pub fn graph<S: State>(self, graph: CompiledGraph<S>) -> Self {
        self.workload(Arc::new(graph))
    }

    /// Drives the runs `workload` accepts.
    pub fn workload(mut self, workload: Arc<dyn Workload>) -> Self {
        self.workloads.push(workload);
        self
    }

    /// At most `legs` legs at once (at least 1).
    pub fn concurrency(mut self, legs: usize) -> Self {
        self.concurrency = legs.max(1);
        self
    }

    /// How often an idle worker looks for runs (default 1 s). With
    /// [`Worker::wake_on`], only a fallback.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// The settings of every leg (lease, `max_steps`, event sink, clock).
    /// Its `run_id` is ignored.
    pub fn config(mut self, config: RunConfig) -> Self {
        self.config = config;
        self
    }

    /// Looks for runs at once whenever `wake` is notified (a store's
    /// notification that a run was queued or decided).
    pub fn wake_on(mut self, wake: Arc<Notify>) -> Self {
        self.wake = Some(wake);
        self
    }

    /// Has a leg renew its lease at once whenever `changes` names its run
    /// (`None`: any run may have changed, so every leg does; so does a
    /// receiver that lagged): a leg whose run was cancelled
    /// ([`Executor::cancel_run`]) or claimed by another process then stops
    /// at once, its tasks dropped (a command tool's process killed),
    /// instead of at its next renewal, a third of the lease later. A run
    /// that did not change costs one renewal. The store's stream of
    /// changed runs (`PostgresStore::run_changes`). A change does not make
    /// the worker look for runs ([`Worker::wake_on`] does); however many
    /// come, it still looks every poll interval.
    pub fn wake_legs_on(mut self, changes: broadcast::Receiver<Option<RunId>>) -> Self {
        self.changes = Some(changes);
        self
    }

    /// Drives runs until `shutdown` completes; then claims no more,
    /// releases its legs at their next step boundary (back to `queued`,
    /// no owner: another worker continues them) and returns once they
    /// have ended. A store that fails (a database restarting) is retried
    /// with back-off; nothing is given up.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> WorkerReport {
        let (stop, stopped) = watch::channel(false);
        let mut at = Driving::default();
        let mut changes = self.changes.take();
        let mut stopping = false;
        // Failed looks for runs in a row, and how long to wait after them
        // (`look_retry`).
        let mut failures: u32 = 0;
        let mut backoff = Duration::ZERO;
        let retry = self.look_retry();
        let seed = u64::from(std::process::id()) ^ self.config.clock.now_ms() as u64;
        let wake = self.wake.clone().unwrap_or_default();
        // Where this worker starts in the list of claimable runs, so that
        // workers started together do not all race for the oldest one.
        let offset = std::process::id() as usize;
        let mut last_scan: Option<std::time::Instant> = None;
        tokio::pin!(shutdown);
        // Whether to look for runs: not after a change of a run (the store's
        // wake-up for it comes apart), unless the last look is a poll
        // interval old (changes coming without pause would reset the timer).
        let mut look = true;
        let mut looked = std::time::Instant::now();
        let mut fired: Option<std::time::Instant> = None;
        loop {
            let mut due = look || looked.elapsed() >= self.poll;
            if self.schedules && !stopping && fired.is_none_or(|at| at.elapsed() >= self.poll) {
                fired = Some(std::time::Instant::now());
                let now = self.config.clock.now_ms();
                match self.executor.fire_schedules(now).await {
                    // Runs it just queued are claimed now, not at the next
                    // wake-up (which, without LISTEN, is the next poll).
                    Ok(started) => due |= !started.is_empty(),
                    Err(error) => tracing::warn!(%error, "worker: cannot fire schedules"),
                }
            }
            if due && !stopping && at.legs.len() < self.concurrency {
                looked = std::time::Instant::now();
                let scan = last_scan.is_none_or(|at| at.elapsed() >= DEAD_OWNER_SCAN);
                if scan {
                    last_scan = Some(std::time::Instant::now());
                }
                // Runs this worker declined stay claimable: look past them.
                let wanted = self.concurrency * 4 + at.declined.len();
                match self.ready(wanted, scan, offset).await {
                    Ok(ready) => {
                        failures = 0;
                        backoff = Duration::ZERO;
                        self.start_legs(ready, &mut at, &stopped).await;
                    }
                    Err(error) => {
                        failures = failures.saturating_add(1);
                        backoff = retry.backoff(failures, seed);
                        tracing::warn!(%error, ?backoff, "worker: cannot look for runs");
                    }
                }
            }
            if stopping && at.legs.is_empty() {
                return at.report;
            }
            let idle = if backoff.is_zero() { self.poll } else { backoff };
            look = true;
            tokio::select! {
                () = &mut shutdown, if !stopping => {
                    stopping = true;
                    let _ = stop.send(true);
                }
                Some(done) = at.legs.join_next(), if !at.legs.is_empty() => at.ended(done),
                () = wake.notified(), if !stopping => {}
                () = tokio::time::sleep(idle), if !stopping => {}
                change = changed(&mut changes), if changes.is_some() => {
                    look = false;
                    if at.changed(change) {
                        changes = None;
                    }
                }
            }
        }
    }

    /// How a worker backs off after failed looks for runs: doubling from
    /// 100 ms to ten polls, jittered (half to all of it) so that a fleet
    /// that lost the database together comes back apart.
    fn look_retry(&self) -> crate::RetryPolicy {
        crate::RetryPolicy {
            max_attempts: u32::MAX,
            initial_backoff: Duration::from_millis(100),
            multiplier: 2.0,
            max_backoff: self.poll * 10,
            jitter: true,
        }
    }

    /// Starts a leg for each of `ready` this worker has room for and does
    /// not drive or decline yet; a run whose owners kept disappearing is
    /// dead-lettered instead.
    async fn start_legs(
        &self,
        ready: Vec<RunRecord>,
        at: &mut Driving,
        stopped: &watch::Receiver<bool>,
    ) {
        for record in ready {
            if at.legs.len() >= self.concurrency {
                break;
            }
            if at.driving.contains_key(&record.id) || at.declined.contains(&record.id) {
                continue;
            }
            if record.status == RunStatus::Running && record.lease_losses >= self.max_lease_losses {
                match self.dead_letter(&record).await {
                    Ok(()) => at.report.dead_lettered += 1,
                    Err(error) => at.report.count(record.id, Err(error)),
                }
                continue;
            }
            let token = CancelToken::new();
            at.driving.insert(record.id, token.clone());
            let workloads = self.workloads.clone();
            let (executor, config) = (self.executor.clone(), self.config.clone());
            let shutdown = stopped.clone();
            metrics::gauge!(telemetry::LEASES_HELD).increment(1.0);
            at.legs.spawn(async move {
                let config = RunConfig { run_id: None, ..config }.cancel_token(token);
                for workload in workloads {
                    let driven =
                        workload.drive(&executor, &record, config.clone(), shutdown.clone()).await;
                    if driven.is_some() {
                        return (record.id, driven);
                    }
                }
                (record.id, None)
            });
        }
    }

    /// Runs no one drives: the `wanted` oldest claimable ones (`queued`,
    /// then `running` with an expired lease), rotated by `offset`; with
    /// `scan_dead_owners`, also `running` runs whose owner was a process of
    /// this host that died (found before its lease ends).
    async fn ready(
        &self,
        wanted: usize,
        scan_dead_owners: bool,
        offset: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let store = self.executor.store();
        let now = self.config.clock.now_ms();
        let mut ready = store.claimable(now, wanted as u64).await?;
        if !ready.is_empty() {
            let shift = offset % ready.len();
            ready.rotate_left(shift);
        }
        if scan_dead_owners {
            let filter = RunFilter { status: Some(RunStatus::Running), ..RunFilter::default() };
            let mut page = PageRequest { limit: 100, cursor: None };
            for _ in 0..10 {
                let listed = store.list_runs(&filter, &page).await?;
                ready.extend(listed.runs.into_iter().filter(|run| {
                    run.lease_until_ms.is_some_and(|until| until >= now)
                        && run.owner.as_ref().is_some_and(Owner::is_dead_here)
                }));
                match listed.next {
                    Some(next) => page.cursor = Some(next),
                    None => break,
                }
            }
        }
        Ok(ready)
    }
}

/// The next changed run `changes` names (`changes` is `Some`).
async fn changed(
    changes: &mut Option<broadcast::Receiver<Option<RunId>>>,
) -> Result<Option<RunId>, broadcast::error::RecvError> {
    match changes {
        Some(changes) => changes.recv().await,
        None => std::future::pending().await,
    }
}

impl Worker {
    /// Marks `record` failed, kind `dead_letter`: claims it (whoever wins
    /// the claim decides) and ends it with a `run_ended` event.
    async fn dead_letter(&self, record: &RunRecord) -> Result<(), RunError> {
        let store = self.executor.store();
        let clock = Arc::clone(&self.config.clock);
        let lease = self.config.lease_until();
        let epoch = store.claim(record.id, record.epoch, Owner::current(), lease).await?;
        let failure = RunFailure::new(
            "dead_letter",
            None,
            // The owner found gone now is one more than the losses counted
            // at the takeovers before it.
            format!(
                "its owner disappeared {} times in a row without ending a leg (lease expired \
                 or process gone); given up so that it is not retried forever \
                 (`runs continue` tries again)",
                record.lease_losses.saturating_add(1)
            ),
        );
        let emitter = Emitter::new(record.id, record.last_seq, Arc::clone(&clock), None);
        let event = Event::RunEnded {
            status: RunStatus::Failed,
            step: record.step,
            result: None,
            error: Some(failure.clone()),
            interrupts: Vec::new(),
        };
        emitter
            .emit(None, event, Live::Now)
            .map_err(|source| json_error(record.id, record.step, source))?;
        store
            .commit(Transition {
                run: record.id,
                epoch,
                step: None,
                status: RunStatus::Failed,
                failure: Some(failure),
                events: emitter.take_batch(),
                at_ms: clock.now_ms(),
                lease_until_ms: None,
                interrupts: Vec::new(),
            })
            .await?;
        tracing::warn!(run = %record.id, losses = record.lease_losses, "worker: run dead-lettered");
        Ok(())
    }
}

impl WorkerReport {
    fn count(&mut self, run: RunId, result: Result<RunStatus, RunError>) {
        match result {
            Ok(status) => {
                self.legs += 1;
                match status {
                    RunStatus::Completed => self.completed += 1,
                    RunStatus::Queued => self.released += 1,
                    _ => {}
                }
            }
            // Another worker claimed it first, or even finished it between
            // the listing and the claim.
            Err(
                RunError::Store(StoreError::Fenced { .. } | StoreError::RunTerminal { .. })
                | RunError::RunOwned { .. },
            ) => {
                self.lost_claims += 1;
            }
            // Cancelled from elsewhere: the leg ran and ended interrupted.
            Err(RunError::Cancelled { .. }) => self.legs += 1,
            Err(error) => {
                self.legs += 1;
                self.failed += 1;
                tracing::warn!(%run, %error, "worker: leg failed");
            }
        }
    }
}
