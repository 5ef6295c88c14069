//! Threads, whichever API asks: their records (metadata kept apart from
//! runs), their latest run and all their runs, and the rules of creating,
//! updating, copying and deleting them.

use std::time::Duration;

use serde_json::{json, Map, Value};
use tollgate_checkpoint::{OutboxQuery, RunFilter, RunId, RunStatus, ThreadQuery, ThreadRecord};

use crate::error::ServiceError;
use crate::identity::Caller;

use super::{Legs, RunSummary, Runs, PENDING_KIND, WEBHOOK_KIND};

/// What creating a thread that exists does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfExists {
    /// Refuse it (a conflict).
    Raise,
    /// Leave it as it is.
    DoNothing,
}

/// What a new run on a thread does about the run in flight there
/// (LangGraph's `multitask_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Multitask {
    /// The new run is refused (a conflict).
    Reject,
    /// The run in flight stops (at its next step boundary, its tasks
    /// dropped) and the new one starts.
    Interrupt,
    /// As `Interrupt`, and the run that stopped is deleted.
    Rollback,
    /// The new run waits until the thread is free (a pending run).
    Enqueue,
}

impl RunSummary {
    /// Whether the run is in flight: running, or queued for a worker.
    pub fn in_flight(&self) -> bool {
        matches!(self.status, RunStatus::Running | RunStatus::Queued)
    }

    /// Whether the run holds its thread: in flight, or waiting for a
    /// decision (a run enqueued on the thread waits for it).
    pub fn holds_thread(&self) -> bool {
        self.in_flight() || self.status == RunStatus::AwaitingHitl
    }
}

impl Runs {
    /// Cancels `run` ([`Runs::cancel`]) and, if this server drives it,
    /// its leg at once: it renews its lease, is refused, and drops the
    /// tasks it had in flight instead of running them to their end.
    pub(crate) async fn stop(&self, legs: &Legs, run: RunId) -> Result<RunSummary, ServiceError> {
        let summary = self.cancel(run).await?;
        legs.cancelled(run);
        Ok(summary)
    }

    /// The thread's latest run once `strategy` dealt with a run in flight
    /// there: with [`Multitask::Interrupt`] it is stopped and settled
    /// before the new one starts; with [`Multitask::Rollback`] deleted
    /// too (no latest run then). Other strategies leave it.
    pub(crate) async fn make_way(
        &self,
        legs: &Legs,
        latest: Option<RunSummary>,
        strategy: Multitask,
    ) -> Result<Option<RunSummary>, ServiceError> {
        let Some(busy) = latest.as_ref().filter(|latest| latest.in_flight()) else {
            return Ok(latest);
        };
        if !matches!(strategy, Multitask::Interrupt | Multitask::Rollback) {
            return Ok(latest);
        }
        let id = busy.id;
        self.stop(legs, id).await?;
        self.settled(id).await?;
        if strategy == Multitask::Rollback {
            self.delete(id).await?;
            return Ok(None);
        }
        Ok(Some(self.summary(id).await?))
    }

    /// Deletes `thread`: first its pending runs and webhooks (so that no
    /// pending run starts while it goes), then each run (one in flight
    /// stopped and settled first), then its record. A thread with neither
    /// record nor run is not found.
    pub(crate) async fn delete_thread(
        &self,
        legs: &Legs,
        thread: &str,
    ) -> Result<(), ServiceError> {
        let runs = self.thread_runs(thread).await?;
        if runs.is_empty() && self.thread_record(thread).await?.is_none() {
            return Err(thread_not_found(thread));
        }
        self.forget_outbox(thread, &[PENDING_KIND, WEBHOOK_KIND]).await?;
        for run in &runs {
            if run.in_flight() {
                self.stop(legs, run.id).await?;
                self.settled(run.id).await?;
            }
            self.delete(run.id).await?;
        }
        self.forget_thread(thread).await
    }

    /// The thread's record, if it has one (a thread only runs named has
    /// none).
    pub(crate) async fn thread_record(
        &self,
        thread: &str,
    ) -> Result<Option<ThreadRecord>, ServiceError> {
        Ok(self.store().thread_record(thread).await?)
    }

    /// The summary of the thread's latest run, if it has one, without a
    /// completed run's result: the thread's rules and views read its
    /// status, step and interrupts (its values come from its state), and
    /// the result would cost a read of its last event on every run start
    /// and every thread shown.
    pub(crate) async fn latest_run(
        &self,
        thread: &str,
    ) -> Result<Option<RunSummary>, ServiceError> {
        match self.executor.thread_latest(thread).await? {
            // Summarised from the record just read (not read again).
            Some(record) => Ok(Some(self.summarize(record, false).await?)),
            None => Ok(None),
        }
    }

    /// [`Runs::latest_run`] with the values at that run's last checkpoint
    /// (`None` when this process does not have its graph, or its state
    /// does not read), from one read of the run's record; the run's open
    /// interrupts and its state are read at once.
    pub(crate) async fn latest_with_values(
        &self,
        thread: &str,
    ) -> Result<Option<(RunSummary, Option<Value>)>, ServiceError> {
        let Some(record) = self.executor.thread_latest(thread).await? else {
            return Ok(None);
        };
        let run = record.id;
        let values = async {
            let rebuilt = self.rebuild(&record).await.ok().flatten()?;
            let state = rebuilt.graph.state(&self.executor, run, None).await.ok()?;
            Some(state.values)
        };
        let (summary, values) = tokio::join!(self.summarize(record.clone(), false), values);
        Ok(Some((summary?, values)))
    }

    /// Every run of `thread`, newest first.
    pub(crate) async fn thread_runs(&self, thread: &str) -> Result<Vec<RunSummary>, ServiceError> {
        self.all_runs(RunFilter { thread: Some(thread.to_owned()), ..RunFilter::default() }).await
    }

    /// Every run of `status`, newest first.
    pub(crate) async fn runs_of_status(
        &self,
        status: RunStatus,
    ) -> Result<Vec<RunSummary>, ServiceError> {
        self.all_runs(RunFilter { status: Some(status), ..RunFilter::default() }).await
    }

    /// Every run `filter` lets through, newest first (page by page).
    async fn all_runs(&self, filter: RunFilter) -> Result<Vec<RunSummary>, ServiceError> {
        let mut runs = Vec::new();
        let mut cursor = None;
        loop {
            let page = self.list(filter.clone(), 1000, cursor).await?;
            runs.extend(page.runs);
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(runs),
            }
        }
    }

    /// Records thread `id` with `metadata` at `now_ms`, expiring once
    /// idle for `ttl` (`None`: the server's default, see
    /// [`Runs::with_thread_ttl`]). A thread that exists (a record or a
    /// run) is a conflict with [`IfExists::Raise`], also when another
    /// request created it meanwhile.
    ///
    /// The record is `caller`'s. A thread that exists out of their scope
    /// is a conflict whatever `if_exists` says (never handed to them).
    pub(crate) async fn create_thread(
        &self,
        caller: &Caller,
        id: &str,
        metadata: Value,
        if_exists: IfExists,
        now_ms: i64,
        ttl: Option<Duration>,
    ) -> Result<(), ServiceError> {
        let raise = if_exists == IfExists::Raise;
        let record = self.thread_record(id).await?;
        let has_runs = self.executor.thread_latest(id).await?.is_some();
        let theirs = caller.scope().holds(record.as_ref());
        if (record.is_some() || has_runs) && (raise || !theirs) {
            return Err(exists(id));
        }
        let record =
            ThreadRecord::new(id.to_owned(), now_ms, metadata).with_ttl(self.thread_ttl_ms(ttl));
        let (made, created) = self.store().create_thread(caller.stamp(record)).await?;
        if !created && (raise || !caller.scope().holds(Some(&made))) {
            return Err(exists(id));
        }
        Ok(())
    }

    /// Merges `given` into the thread's metadata (a thread only runs
    /// named gets a record first). Not found when the thread has neither.
    pub(crate) async fn update_thread(
        &self,
        thread: &str,
        given: Map<String, Value>,
        now_ms: i64,
    ) -> Result<(), ServiceError> {
        let store = self.store();
        let record = match store.thread_record(thread).await? {
            Some(record) => record,
            None if self.executor.thread_latest(thread).await?.is_some() => {
                let record = ThreadRecord::new(thread.to_owned(), now_ms, json!({}));
                store.create_thread(record).await?.0
            }
            None => return Err(thread_not_found(thread)),
        };
        let mut merged: Map<String, Value> =
            record.metadata.as_object().cloned().unwrap_or_default();
        merged.extend(given);
        store.update_thread(thread, Value::Object(merged), now_ms).await?;
        Ok(())
    }

    /// Sets `labels` in the thread's metadata unless they are there (its
    /// `record` as read, `None`: made now, `caller`'s, with the labels; not
    /// found when another caller's was made meanwhile).
    pub(crate) async fn label_thread(
        &self,
        caller: &Caller,
        thread: &str,
        record: Option<ThreadRecord>,
        labels: Map<String, Value>,
        now_ms: i64,
    ) -> Result<(), ServiceError> {
        let store = self.store();
        let record = match record {
            Some(record) => record,
            None => {
                let fresh = ThreadRecord::new(thread, now_ms, Value::Object(labels.clone()))
                    .with_ttl(self.thread_ttl_ms(None));
                let (made, created) = store.create_thread(caller.stamp(fresh)).await?;
                if created {
                    return Ok(());
                }
                if !caller.scope().holds(Some(&made)) {
                    return Err(thread_not_found(thread));
                }
                // Made by another request meanwhile: labelled below.
                made
            }
        };
        let mut metadata = record.metadata.as_object().cloned().unwrap_or_default();
        if labels.iter().all(|(key, value)| metadata.get(key) == Some(value)) {
            return Ok(());
        }
        metadata.extend(labels);
        store.update_thread(thread, Value::Object(metadata), now_ms).await?;
        Ok(())
    }

    /// The thread records `query` asks for, newest first (the store's
    /// indexes find them: a page costs what it returns).
    pub(crate) async fn search_threads(
        &self,
        query: &ThreadQuery,
    ) -> Result<Vec<ThreadRecord>, ServiceError> {
        Ok(self.store().search_threads(query).await?)
    }

    /// Forgets the thread's record (its runs are deleted apart).
    pub(super) async fn forget_thread(&self, thread: &str) -> Result<(), ServiceError> {
        self.store().delete_thread(thread).await?;
        Ok(())
    }

    /// Forgets every entry of the outbox of `kinds` kept for `thread`
    /// (pending runs, webhooks: it is deleted).
    pub(super) async fn forget_outbox(
        &self,
        thread: &str,
        kinds: &[&str],
    ) -> Result<(), ServiceError> {
        let store = self.store();
        for kind in kinds {
            let query = OutboxQuery::new(*kind, 10_000).thread(thread);
            for entry in store.list_outbox(query).await? {
                store.delete_outbox(&entry.id).await?;
            }
        }
        Ok(())
    }

    /// A new thread `into`, `caller`'s, with the metadata of `thread` and a copy of
    /// every run of it, going on apart from it. A busy thread (a run
    /// running or queued) is a conflict; one with neither record nor run
    /// is not found.
    pub(crate) async fn copy_thread_as(
        &self,
        caller: &Caller,
        thread: &str,
        into: &str,
        now_ms: i64,
    ) -> Result<(), ServiceError> {
        let record = self.thread_record(thread).await?;
        let latest = self.latest_run(thread).await?;
        if record.is_none() && latest.is_none() {
            return Err(thread_not_found(thread));
        }
        if let Some(busy) = latest.as_ref().filter(|latest| latest.in_flight()) {
            return Err(ServiceError::conflict(format!(
                "thread `{thread}` is busy (run {} is {}): copy it once it settles",
                busy.id, busy.status
            )));
        }
        let metadata = record.map_or_else(|| json!({}), |record| record.metadata);
        let copy = ThreadRecord::new(into.to_owned(), now_ms, metadata);
        self.store().create_thread(caller.stamp(copy)).await?;
        if latest.is_some() {
            self.copy_thread(thread, into).await?;
        }
        Ok(())
    }
}

/// A thread with neither record nor run.
pub(crate) fn thread_not_found(thread: &str) -> ServiceError {
    ServiceError::missing(format!("thread `{thread}` not found"))
}

fn exists(thread: &str) -> ServiceError {
    ServiceError::conflict(format!("thread `{thread}` exists"))
}
