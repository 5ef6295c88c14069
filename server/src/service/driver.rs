//! The worker an [`Api`](crate::Api) runs in its own process on SQLite
//! (`ServeOptions::worker`): it drives queued runs (decided or continued
//! from another process), wakes sleeping workflows, recovers the runs of
//! a process that died and fires schedules, as `tollgate serve` does.
//! Stopped by [`Api::release`](crate::Api::release), or once the last
//! router and `Api` are gone.

use std::sync::Mutex;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_engine::{DEFAULT_LEASE, DEFAULT_MAX_LEASE_LOSSES};

use crate::service::Runs;

/// Legs the in-process worker drives at once.
const IN_PROCESS_LEGS: usize = 4;

/// A running in-process worker.
#[derive(Debug)]
pub(crate) struct Driver {
    stop: Mutex<Option<oneshot::Sender<()>>>,
    task: Mutex<Option<JoinHandle<tollgate_engine::WorkerReport>>>,
}

impl Driver {
    /// Starts a worker over `runs` on the current Tokio runtime (none:
    /// `None`, and a warning that nothing drives queued runs here).
    pub(crate) fn start(runs: &Runs) -> Option<Self> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "tollgate: the API was made outside a Tokio runtime: no worker drives queued runs, sleeping workflows or schedules in this process"
            );
            return None;
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let runs = runs.clone();
        let task = runtime.spawn(async move {
            let stopped = async move {
                let _ = stopped.await;
            };
            runs.work(IN_PROCESS_LEGS, DEFAULT_LEASE, DEFAULT_MAX_LEASE_LOSSES, stopped).await
        });
        Some(Self { stop: Mutex::new(Some(stop)), task: Mutex::new(Some(task)) })
    }

    /// Stops the worker: it releases the legs it drives at their next step
    /// boundary and ends.
    pub(crate) async fn stop(&self) {
        if let Some(stop) = self.stop.lock().ok().and_then(|mut stop| stop.take()) {
            let _ = stop.send(());
        }
        let task = self.task.lock().ok().and_then(|mut task| task.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.get_mut().ok().and_then(Option::take) {
            let _ = stop.send(());
        }
    }
}
