//! A leg's stop flag and its public handle, the [`CancelToken`]; and
//! whether a fenced leg was cancelled from elsewhere. A leaf: the driver,
//! the executor and cancelling (`cancel.rs`) all use it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tollgate_checkpoint::{RunId, RunStatus};

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
    /// the leg's (cancelled with [`Executor::cancel_run`](crate::Executor::cancel_run) or claimed by
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
