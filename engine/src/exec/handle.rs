//! What starting a leg gives back: a [`RunHandle`] to wait on or cancel,
//! and the [`RunOutcome`] it ends with. A leaf under the driver.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tollgate_checkpoint::{RunId, RunStatus};

use crate::hitl::PendingInterrupt;

use super::error::RunError;
use super::token::{CancelToken, Stop};

/// How a run (or leg) that did not fail ended.
#[derive(Debug, Clone)]
pub struct RunOutcome<S> {
    /// The run.
    pub run_id: RunId,
    /// `completed`, `interrupted` or `awaiting_hitl`.
    pub status: RunStatus,
    /// Last committed step.
    pub step: u64,
    /// The state at that step.
    pub state: S,
    /// What the run waits for, when `awaiting_hitl`.
    pub interrupts: Vec<PendingInterrupt>,
}

/// A run in progress: wait for it, or cancel it at the next step boundary.
#[derive(Debug)]
pub struct RunHandle<S> {
    pub(crate) run_id: RunId,
    pub(crate) cancel: Arc<Stop>,
    pub(crate) join: JoinHandle<Result<RunOutcome<S>, RunError>>,
}

impl<S> RunHandle<S> {
    /// The run's id.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// Asks the run to stop at the next step boundary; it ends
    /// `interrupted` and can be continued later. Tasks already running
    /// finish first and their step is committed. The leg also renews its
    /// lease at once: after [`Executor::cancel_run`](crate::Executor::cancel_run) took the run over, it
    /// thus stops its tasks at once instead of at their end.
    pub fn cancel(&self) {
        self.cancel_token().cancel();
    }

    /// Asks the run to stop at the next step boundary and go back to the
    /// queue: it ends the leg `queued`, with no owner and no lease, for
    /// any process (a [`Worker`](crate::Worker)) to continue from that
    /// step. Tasks already running finish first and their step is
    /// committed. What a worker does when it shuts down.
    pub fn release(&self) {
        self.cancel_token().release();
    }

    /// A handle that cancels this run (like [`RunHandle::cancel`]) from
    /// elsewhere, while another task waits on the run.
    pub fn cancel_token(&self) -> CancelToken {
        CancelToken(Arc::clone(&self.cancel))
    }

    /// Waits for the leg to end: `Ok` when it completed, was interrupted
    /// or paused for a decision, `Err` when it failed.
    pub async fn wait(self) -> Result<RunOutcome<S>, RunError> {
        let run = self.run_id;
        self.join.await.unwrap_or(Err(RunError::DriverLost { run }))
    }
}
