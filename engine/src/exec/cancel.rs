//! Stopping a leg: its stop flag and [`CancelToken`], and cancelling a run
//! from any process, without its graph.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tollgate_checkpoint::{Owner, RunId, RunRecord, RunStatus, StoreError, Transition};

use crate::event::{Clock, Event, SystemClock};
use crate::telemetry;

use super::emit::{Emitter, Live};
use super::error::RunError;
use super::executor::{json_error, Executor};

/// How long the canceller holds the run between taking it and ending it
/// (one write later).
const CANCEL_LEASE: Duration = Duration::from_secs(30);

/// Times a cancel retries when another process took the run meanwhile.
const ATTEMPTS: u32 = 5;

/// How a leg was asked to stop at its next step boundary (shared by the
/// leg and its handles): not at all, cancelled, or released.
pub(crate) mod stop {
    /// Not asked to stop.
    pub(crate) const NONE: u8 = 0;
    /// Cancelled: the run ends `interrupted`.
    pub(crate) const CANCEL: u8 = 1;
    /// Released: the run goes back to `queued` with no owner.
    pub(crate) const RELEASE: u8 = 2;
}

/// How a leg was asked to stop (`stop`), shared by the leg, its subgraphs'
/// legs and its handles; and the wake-up of a step waiting on its tasks.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    asked: AtomicU8,
    /// Rung by a cancel: a step waiting on its tasks renews the lease at
    /// once, and stops at once when the renewal is refused (the run was
    /// cancelled elsewhere: `Leg::leased`).
    wake: Notify,
}

impl Stop {
    /// What was asked: `stop::NONE`, `stop::CANCEL` or `stop::RELEASE`.
    pub(crate) fn asked(&self) -> u8 {
        self.asked.load(Ordering::SeqCst)
    }

    /// Resolves when the leg is cancelled (or was, since the last wait).
    pub(crate) fn woken(&self) -> Notified<'_> {
        self.wake.notified()
    }

    fn cancel(&self) {
        self.asked.store(stop::CANCEL, Ordering::SeqCst);
        // Every step waiting now (a run's and its subgraphs'), and the next
        // one to wait if none is.
        self.renew_now();
    }

    /// Has a step waiting on its tasks renew the lease at once (and the
    /// next one to wait, if none is).
    fn renew_now(&self) {
        self.wake.notify_waiters();
        self.wake.notify_one();
    }

    fn release(&self) {
        let _ = self.asked.compare_exchange(
            stop::NONE,
            stop::RELEASE,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

/// Cancels a run at its next step boundary; see
/// [`RunHandle::cancel_token`](crate::RunHandle::cancel_token).
/// One made beforehand ([`CancelToken::new`]) is given to a leg with
/// [`RunConfig::cancel_token`](crate::RunConfig::cancel_token).
#[derive(Debug, Clone, Default)]
pub struct CancelToken(pub(crate) Arc<Stop>);

impl CancelToken {
    /// A token for a leg not started yet
    /// ([`RunConfig::cancel_token`](crate::RunConfig::cancel_token)).
    pub fn new() -> Self {
        Self::default()
    }

    /// Has the leg renew its lease at once if a step is waiting on its
    /// tasks (otherwise when the next one waits): when the run is no longer
    /// the leg's (cancelled with [`Executor::cancel_run`] or claimed by
    /// another process) the leg stops at once, its tasks dropped, instead
    /// of at its next renewal (a third of the lease). Otherwise nothing
    /// changes. For a process told that a run it drives changed elsewhere
    /// (a store's notification; what [`Worker::wake_legs_on`](crate::Worker::wake_legs_on)
    /// does).
    pub fn renew_now(&self) {
        self.0.renew_now();
    }

    /// Asks the run to stop at the next step boundary; it ends
    /// `interrupted` (see [`RunHandle::cancel`](crate::RunHandle::cancel)).
    pub fn cancel(&self) {
        self.0.cancel();
    }

    /// Asks the run to stop at the next step boundary and go back to the
    /// queue (see [`RunHandle::release`](crate::RunHandle::release)). A
    /// cancel asked before wins.
    pub fn release(&self) {
        self.0.release();
    }
}

impl Executor {
    /// Cancels a run from any process; no graph needed (the CLI's `runs
    /// cancel` and the server's `POST /runs/{id}/cancel` use it).
    ///
    /// A `running` run is taken over (compare-and-set on its epoch, which
    /// fences its owner off) and ended `interrupted` in the next write, its
    /// open leg closed with `run_ended`. The owner, wherever it is, is
    /// refused at its next write (a finished task's output, the step's
    /// commit or a lease renewal) and its leg ends with
    /// [`RunError::Cancelled`]; the step it had in flight is not stored.
    /// A refused renewal stops the tasks in flight at once (they are
    /// dropped); where this process drives the leg, [`RunHandle::cancel`](crate::RunHandle::cancel)
    /// after this call has it renew at once. A
    /// `queued` run ends `interrupted` at once, as a leg of its own
    /// (`run_started`, `run_ended`). Either way `continue_run` (or `runs
    /// continue`) can take it up again later.
    ///
    /// An `interrupted` run is returned as it is (cancelling twice is
    /// harmless). A paused run is refused with
    /// [`RunError::AwaitingDecision`] (reject it instead); a `failed`,
    /// `completed` or `rejected` one with [`RunError::NotCancellable`].
    pub async fn cancel_run(&self, run: RunId) -> Result<RunRecord, RunError> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let mut taken = None;
        for _ in 0..ATTEMPTS {
            let record = self.store.run(run).await?;
            match record.status {
                RunStatus::Interrupted => return Ok(record),
                RunStatus::Running | RunStatus::Queued => {}
                RunStatus::AwaitingHitl => {
                    let pending = self.store.interrupts(run).await?;
                    let pending = pending
                        .into_iter()
                        .filter(|i| i.decision.is_none())
                        .map(|i| i.id)
                        .collect();
                    return Err(RunError::AwaitingDecision { run, pending });
                }
                status => return Err(RunError::NotCancellable { run, status }),
            }
            let lease = clock.now_ms().saturating_add(CANCEL_LEASE.as_millis() as i64);
            let epoch = match self.store.claim(run, record.epoch, Owner::current(), lease).await {
                Ok(epoch) => epoch,
                // Another process took it first (a worker, a resume): look
                // again.
                Err(error @ StoreError::Fenced { .. }) => {
                    taken = Some(error);
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            // The owner may have committed steps between the read above and
            // the claim (a step leaves the epoch as it is): read again, now
            // that nobody else can write.
            let queued = record.status == RunStatus::Queued;
            let record = self.store.run(run).await?;
            let emitter = Emitter::new(run, record.last_seq, Arc::clone(&clock), None);
            let mut events = Vec::new();
            if queued {
                events.push(Event::RunStarted {
                    graph: record.graph.name.clone(),
                    graph_version: record.graph.version,
                    from_step: record.step,
                });
            }
            events.push(Event::RunEnded {
                status: RunStatus::Interrupted,
                step: record.step,
                result: None,
                error: None,
                interrupts: Vec::new(),
            });
            for event in events {
                emitter
                    .emit(None, event, Live::Now)
                    .map_err(|source| json_error(run, record.step, source))?;
            }
            self.store
                .commit(Transition {
                    run,
                    epoch,
                    step: None,
                    status: RunStatus::Interrupted,
                    failure: None,
                    events: emitter.take_batch(),
                    at_ms: clock.now_ms(),
                    lease_until_ms: None,
                    interrupts: Vec::new(),
                })
                .await?;
            metrics::counter!(
                telemetry::RUNS_FINISHED,
                "graph" => record.graph.name.clone(),
                "status" => RunStatus::Interrupted.as_str()
            )
            .increment(1);
            tracing::info!(%run, from = %record.status, "run cancelled");
            return Ok(self.store.run(run).await?);
        }
        Err(taken.map_or(RunError::DriverLost { run }, RunError::Store))
    }
}

/// Whether a leg refused as fenced was cancelled from elsewhere: the run
/// is now `interrupted` rather than taken over by another owner. A cancel
/// claims the run and then ends it (two writes), so a leg fenced in
/// between finds it `running` for a moment: it looks again for up to
/// [`SETTLE`] before taking the run as taken over.
pub(crate) async fn cancelled_elsewhere(
    store: &dyn tollgate_checkpoint::Store,
    run: RunId,
) -> bool {
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        match store.run(run).await {
            Ok(record) if record.status == RunStatus::Interrupted => return true,
            Ok(record)
                if record.status == RunStatus::Running && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            _ => return false,
        }
    }
}

/// How long a fenced leg waits for a cancel's second write.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);
