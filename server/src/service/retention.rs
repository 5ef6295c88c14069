//! Retention: threads that expire. A thread record may carry a time to
//! live ([`ThreadRecord::ttl_ms`](tollgate_checkpoint::ThreadRecord)),
//! given when it is created or the server's default
//! ([`Runs::with_thread_ttl`]); once the thread has been idle that long
//! the sweeper ([`Runs::sweep_expired_every`]) removes it with its runs
//! (their checkpoints, pending writes, interrupts and events) and the
//! webhooks kept for them. A thread with a run in flight, one waiting for
//! a decision, or a run waiting to start on it is kept. A thread pruned
//! with `keep_latest` keeps its latest run alone.

use std::time::Duration;

use tollgate_checkpoint::{StoreError, ThreadStorage};

use super::pending::now_ms;
use super::{thread_not_found, Legs, Runs, WEBHOOK_KIND};
use crate::error::ServiceError;

/// How a thread is pruned ([`Runs::prune_threads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PruneStrategy {
    /// Deleted whole: its runs and its record.
    Delete,
    /// Its latest run kept alone: the older runs deleted with their
    /// checkpoints and events; its state unchanged.
    KeepLatest,
}

impl PruneStrategy {
    /// The strategy named `name` (`delete`, `keep_latest`).
    pub fn named(name: &str) -> Result<Self, ServiceError> {
        match name {
            "delete" => Ok(PruneStrategy::Delete),
            "keep_latest" => Ok(PruneStrategy::KeepLatest),
            other => Err(ServiceError::invalid(format!(
                "prune strategy `{other}` is not `delete` or `keep_latest`"
            ))),
        }
    }
}

/// How many expired threads one look at the store returns.
const THREAD_SWEEP_BATCH: u64 = 100;

impl Runs {
    /// The same runs, whose new thread records (made through the LangGraph
    /// API, or for a run there whose thread had none) expire once idle
    /// for `ttl` unless created with their own (`None`: kept until
    /// deleted, the default).
    pub fn with_thread_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.thread_ttl = ttl;
        self
    }

    /// The time to live of a thread record made now: `given`, else the
    /// server's default, in milliseconds.
    pub(crate) fn thread_ttl_ms(&self, given: Option<Duration>) -> Option<i64> {
        given.or(self.thread_ttl).map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
    }

    /// What the runs of `thread` occupy in the store; not found when it
    /// has neither a record nor a run.
    pub async fn thread_storage(&self, thread: &str) -> Result<ThreadStorage, ServiceError> {
        let storage = self.store().thread_storage(thread).await?;
        if storage.runs == 0 && self.thread_record(thread).await?.is_none() {
            return Err(thread_not_found(thread));
        }
        Ok(storage)
    }

    /// Prunes each of `threads` by `strategy` (threads asked for by name:
    /// a run in flight is cancelled first when the thread is deleted); the
    /// threads pruned, an id of no thread passed over. For a process that
    /// drives no legs of its own (the CLI); the API's servers cancel
    /// theirs too.
    pub async fn prune_threads(
        &self,
        threads: &[String],
        strategy: PruneStrategy,
    ) -> Result<Vec<String>, ServiceError> {
        self.prune_threads_with(&Legs::default(), threads, strategy).await
    }

    /// [`Runs::prune_threads`], cancelling the legs of `legs` too.
    pub(crate) async fn prune_threads_with(
        &self,
        legs: &Legs,
        threads: &[String],
        strategy: PruneStrategy,
    ) -> Result<Vec<String>, ServiceError> {
        let mut pruned = Vec::new();
        for thread in threads {
            let done = match strategy {
                PruneStrategy::Delete => self.delete_thread(legs, thread).await,
                PruneStrategy::KeepLatest => self.keep_latest(thread).await.map(drop),
            };
            match done {
                Ok(()) => pruned.push(thread.clone()),
                Err(ServiceError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(pruned)
    }

    /// Keeps only the latest run of `thread` (LangGraph's prune strategy
    /// `keep_latest`): every older run is deleted with its checkpoints
    /// and events; the latest run is kept whole, so the thread's state
    /// and what its next run builds on are unchanged, and a paused run
    /// still waits for its decision. How many runs were deleted; not
    /// found when the thread has neither a record nor a run.
    async fn keep_latest(&self, thread: &str) -> Result<usize, ServiceError> {
        let runs = self.thread_runs(thread).await?;
        if runs.is_empty() && self.thread_record(thread).await?.is_none() {
            return Err(thread_not_found(thread));
        }
        let mut deleted = 0;
        // Newest first: all but the first.
        for run in runs.iter().skip(1) {
            match self.store().delete_run(run.id).await {
                Ok(()) => deleted += 1,
                // Gone meanwhile, or (an older run cannot run while a newer
                // one exists) left as it is.
                Err(StoreError::RunNotFound { .. } | StoreError::RunInFlight { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(deleted)
    }

    /// Removes the threads whose time to live ran out, a batch of
    /// [`THREAD_SWEEP_BATCH`] at a time, each thread on its own (a run
    /// of another thread never waits for it); how many.
    pub(crate) async fn sweep_threads(&self) -> Result<u64, ServiceError> {
        let mut removed = 0;
        loop {
            let expired = self.store().expired_threads(now_ms(), THREAD_SWEEP_BATCH).await?;
            let mut gone = 0;
            for thread in &expired {
                if self.remove_expired(thread).await? {
                    gone += 1;
                }
            }
            removed += gone;
            // A batch of threads kept (a run waits to start on each) is
            // looked at again next time.
            if (expired.len() as u64) < THREAD_SWEEP_BATCH || gone == 0 {
                return Ok(removed);
            }
        }
    }

    /// Removes an expired thread unless a run waits to start on it or
    /// holds it now; whether it was removed. Its runs go newest first,
    /// each refused by the store while running: a run started on the
    /// thread since it was found keeps it (with the runs not yet
    /// deleted).
    async fn remove_expired(&self, thread: &str) -> Result<bool, ServiceError> {
        if self.any_pending(thread).await? {
            return Ok(false);
        }
        let runs = self.thread_runs(thread).await?;
        if runs.iter().any(|run| run.holds_thread()) {
            return Ok(false);
        }
        for run in &runs {
            match self.store().delete_run(run.id).await {
                Ok(()) | Err(StoreError::RunNotFound { .. }) => {}
                Err(StoreError::RunInFlight { .. }) => return Ok(false),
                Err(error) => return Err(error.into()),
            }
        }
        self.forget_outbox(thread, &[WEBHOOK_KIND]).await?;
        self.forget_thread(thread).await?;
        tracing::debug!(thread, runs = runs.len(), "an expired thread removed");
        Ok(true)
    }
}
