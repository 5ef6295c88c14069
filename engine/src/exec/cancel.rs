//! Cancelling a run from any process, without its graph. (A leg's stop
//! flag and [`CancelToken`](super::CancelToken) are in `token.rs`.)

use std::sync::Arc;
use std::time::Duration;

use tollgate_checkpoint::{Owner, RunId, RunRecord, RunStatus, StoreError, Transition};

use crate::event::{Clock, Event, SystemClock};
use crate::telemetry;

use super::emit::{Emitter, Live};
use super::error::{json_error, RunError};
use super::executor::Executor;

/// How long the canceller holds the run between taking it and ending it
/// (one write later).
const CANCEL_LEASE: Duration = Duration::from_secs(30);

/// Times a cancel retries when another process took the run meanwhile.
const ATTEMPTS: u32 = 5;

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
