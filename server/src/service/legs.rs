//! The legs this server drives: run in the background, released when the
//! server stops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tollgate_checkpoint::RunId;
use tollgate_engine::CancelToken;

use crate::error::ServiceError;
use crate::service::{self, Leg};

/// Legs in flight, by run.
#[derive(Clone, Default)]
pub(crate) struct Legs {
    running: Arc<Mutex<HashMap<RunId, CancelToken>>>,
    ended: Arc<Notify>,
}

impl Legs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, CancelToken>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the leg to end (registered meanwhile, so a stopping server
    /// releases it and a cancel stops it).
    pub(crate) async fn wait(&self, handle: Leg) -> Result<(), ServiceError> {
        self.register(&handle);
        self.waited(handle).await
    }

    /// Registers the leg before anything else happens, so that a cancel
    /// that comes before the task waiting for it ran still finds it.
    fn register(&self, handle: &Leg) {
        self.lock().insert(handle.run_id(), handle.cancel_token());
    }

    /// Waits for a registered leg to end, then forgets it.
    async fn waited(&self, handle: Leg) -> Result<(), ServiceError> {
        let run = handle.run_id();
        let result = handle.wait().await;
        self.lock().remove(&run);
        self.ended.notify_waiters();
        service::leg_result(result)
    }

    /// After a cancel took `run` over: if this server drives it, its leg
    /// renews its lease at once, is refused, and drops the tasks it had in
    /// flight (a command tool's process is killed) instead of running them
    /// to their end.
    pub(crate) fn cancelled(&self, run: RunId) {
        if let Some(token) = self.lock().get(&run) {
            token.cancel();
        }
    }

    /// Waits for the leg to end (`wait`, a request's `?wait=true`), or
    /// lets it run in the background.
    pub(crate) async fn wait_or_drive(&self, handle: Leg, wait: bool) -> Result<(), ServiceError> {
        if wait {
            return self.wait(handle).await;
        }
        self.drive(handle);
        Ok(())
    }

    /// Lets the leg run to its end in the background.
    pub(crate) fn drive(&self, handle: Leg) {
        self.register(&handle);
        let legs = self.clone();
        let run = handle.run_id();
        tokio::spawn(async move {
            if let Err(error) = legs.waited(handle).await {
                tracing::warn!(%run, %error, "leg failed");
            }
        });
    }

    /// Releases every leg (each goes back to `queued` at its next step
    /// boundary) and waits for them, `patience` at most; returns how many
    /// ended and how many were still in a step.
    pub(crate) async fn release_all(&self, patience: Duration) -> (usize, usize) {
        let total = {
            let running = self.lock();
            running.values().for_each(CancelToken::release);
            running.len()
        };
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let left = self.lock().len();
            if left == 0 || tokio::time::Instant::now() >= deadline {
                return (total - left.min(total), left);
            }
            let _ = tokio::time::timeout_at(deadline, ended).await;
        }
    }
}
