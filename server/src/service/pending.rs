//! Runs that wait before they start, kept in the store's outbox so that a
//! server stopped meanwhile leaves them to the next: a run on a thread
//! busy with another (LangGraph's `multitask_strategy="enqueue"`) and a
//! run asked to start later (`after_seconds`). Each has the id its run
//! will have; a dispatcher creates that run once the thread is free and
//! the time has come. The request a pending run was made with is the
//! caller's (JSON its API reads back); the service keeps it, and where the
//! pending run is.

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate_checkpoint::{OutboxEntry, OutboxQuery, RunId};

use super::Runs;
use crate::error::ServiceError;

/// The outbox kind of a pending run.
pub(crate) const PENDING_KIND: &str = "run";

/// How long a process holds a pending run it is starting or cancelling.
pub(crate) const PENDING_HOLD_MS: i64 = 30_000;

/// The version of [`PendingRun`] this build writes.
const VERSION: u32 = 1;

/// The due time of a pending run that never starts (cancelled, failed):
/// no listing of what is due finds it, so "waiting" is "due before it".
const NEVER: i64 = i64::MAX;

/// How often a caller waiting for a pending run looks.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// A pending run's outbox body (version [`VERSION`]).
#[derive(Serialize, Deserialize)]
pub(crate) struct PendingRun {
    /// The record's version.
    pub(crate) v: u32,
    /// The assistant (graph or blueprint) it runs.
    pub(crate) assistant: String,
    /// The request it was created with (the API's own JSON).
    pub(crate) request: Value,
    /// Where it is.
    pub(crate) state: PendingState,
    /// Why it could not start (`state` `failed`), as the API put it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<Value>,
    /// Where its agents' memory lies: the shelf of the caller who asked
    /// for it ([`Caller::shelf`](crate::Caller::shelf)); none when they
    /// reach everything. Kept apart from the request, which the client
    /// wrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) memory_shelf: Vec<String>,
}

/// Where a pending run is.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PendingState {
    /// Waiting for its thread or its time.
    Waiting,
    /// Cancelled before it started: never starts.
    Cancelled,
    /// Could not start (its error kept): never starts.
    Failed,
}

/// A pending run as read back: its entry and what it holds.
pub(crate) struct Pending {
    /// Its outbox entry (its id is its run's).
    pub(crate) entry: OutboxEntry,
    /// What it holds.
    pub(crate) run: PendingRun,
}

/// How a pending run a caller waited for ended ([`Runs::pending_started`]).
pub(crate) enum PendingEnd {
    /// Its run exists.
    Started(RunId),
    /// Cancelled or deleted before it started.
    Gone,
    /// It could not start: the error kept with it.
    Failed(Value),
}

impl Pending {
    /// `entry` read as a pending run.
    pub(crate) fn read(entry: OutboxEntry) -> Result<Self, ServiceError> {
        let run = serde_json::from_value::<PendingRun>(entry.body.clone()).map_err(|error| {
            ServiceError::failed(format!(
                "pending run {}: its record does not read: {error}",
                entry.id
            ))
            .with_source(error)
        })?;
        if run.v > VERSION {
            return Err(ServiceError::failed(format!(
                "pending run {} is a record of version {}; this build reads up to {VERSION}",
                entry.id, run.v
            )));
        }
        Ok(Self { entry, run })
    }

    /// Whether it may still start.
    pub(crate) fn waiting(&self) -> bool {
        self.run.state == PendingState::Waiting
    }

    /// When it starts at the earliest, if it may still start.
    pub(crate) fn starts_after_ms(&self) -> Option<i64> {
        (self.entry.due_ms < NEVER).then_some(self.entry.due_ms)
    }
}

impl Runs {
    /// Keeps a run of `assistant` asked by `request` on `thread` (none: a
    /// stateless run) to start at `due_ms` or once its thread is free; its
    /// id is `run`'s.
    pub(crate) async fn put_pending(
        &self,
        run: RunId,
        thread: Option<&str>,
        assistant: &str,
        request: Value,
        due_ms: i64,
        memory_shelf: Vec<String>,
    ) -> Result<Pending, ServiceError> {
        let record = PendingRun {
            v: VERSION,
            assistant: assistant.to_owned(),
            request,
            state: PendingState::Waiting,
            error: None,
            memory_shelf,
        };
        let now = now_ms();
        let thread = thread.map(str::to_owned);
        let entry =
            OutboxEntry::new(run.to_string(), PENDING_KIND, thread, now, due_ms, json!(record));
        self.store().put_outbox(entry.clone()).await?;
        Ok(Pending { entry, run: record })
    }

    /// The pending run `id`, if there is one.
    pub(crate) async fn pending(&self, id: &str) -> Result<Option<Pending>, ServiceError> {
        let entry = self.store().outbox_entry(id).await?;
        entry.filter(|entry| entry.kind == PENDING_KIND).map(Pending::read).transpose()
    }

    /// Every pending run of `thread` (those that will never start
    /// included), the oldest first.
    pub(crate) async fn pending_of_thread(
        &self,
        thread: &str,
    ) -> Result<Vec<Pending>, ServiceError> {
        let query = OutboxQuery::new(PENDING_KIND, 10_000).thread(thread);
        let entries = self.store().list_outbox(query).await?;
        let mut pending = entries.into_iter().map(Pending::read).collect::<Result<Vec<_>, _>>()?;
        pending.sort_by(|a, b| a.entry.id.cmp(&b.entry.id));
        Ok(pending)
    }

    /// Pending runs that may still start, of `thread` or of every thread,
    /// at most `limit` (cancelled and failed ones are due never: not read).
    async fn still_waiting(
        &self,
        thread: Option<&str>,
        limit: u64,
    ) -> Result<Vec<OutboxEntry>, ServiceError> {
        let mut query = OutboxQuery::new(PENDING_KIND, limit).due_by(NEVER - 1);
        query.thread = thread.map(str::to_owned);
        Ok(self.store().list_outbox(query).await?)
    }

    /// Every pending run that may still start, of every thread and none.
    pub(crate) async fn pending_waiting(&self) -> Result<Vec<Pending>, ServiceError> {
        let entries = self.still_waiting(None, 100_000).await?;
        entries.into_iter().map(Pending::read).collect()
    }

    /// The threads that have a run waiting to start.
    pub(crate) async fn threads_waiting(&self) -> Result<HashSet<String>, ServiceError> {
        let entries = self.still_waiting(None, 100_000).await?;
        Ok(entries.into_iter().filter_map(|entry| entry.thread).collect())
    }

    /// Whether a run of `thread` waits to start: one indexed read of one
    /// entry, as every run on a thread asks.
    pub(crate) async fn any_pending(&self, thread: &str) -> Result<bool, ServiceError> {
        Ok(!self.still_waiting(Some(thread), 1).await?.is_empty())
    }

    /// Cancels `pending`: it never starts, and reads `cancelled`
    /// (`forget`: it is deleted). Taken from a dispatcher's hands first,
    /// so that it is either cancelled or started, never both: `None` when
    /// it started meanwhile.
    pub(crate) async fn cancel_pending(
        &self,
        pending: Pending,
        forget: bool,
    ) -> Result<Option<Pending>, ServiceError> {
        let id = pending.entry.id.clone();
        let mut pending = pending;
        while pending.waiting() {
            let now = now_ms();
            if let Some(taken) = self.store().take_outbox(&id, now, now + PENDING_HOLD_MS).await? {
                if self.pending_run_exists(&id).await {
                    // Started by a server that died before it forgot it.
                    self.delete_pending(&id).await?;
                    return Ok(None);
                }
                pending = Pending::read(taken)?;
                if !forget {
                    self.settle_pending(&mut pending, PendingState::Cancelled, None).await?;
                }
                break;
            }
            // A dispatcher holds it: it starts it, or puts it back.
            tokio::time::sleep(LOOK_EVERY).await;
            match self.pending(&id).await? {
                Some(again) => pending = again,
                None => return Ok(None),
            }
        }
        if forget {
            self.delete_pending(&id).await?;
        }
        Ok(Some(pending))
    }

    /// Whether the run pending entry `id` names exists (it started).
    async fn pending_run_exists(&self, id: &str) -> bool {
        match id.parse::<RunId>() {
            Ok(run) => self.store().run(run).await.is_ok(),
            Err(_) => false,
        }
    }

    /// Records that `pending` (held by the caller) could not start, and
    /// `why` (the API's words).
    pub(crate) async fn pending_failed(
        &self,
        mut pending: Pending,
        why: Value,
    ) -> Result<(), ServiceError> {
        self.settle_pending(&mut pending, PendingState::Failed, Some(why)).await
    }

    /// Writes `pending` back in `state`, never to start again.
    async fn settle_pending(
        &self,
        pending: &mut Pending,
        state: PendingState,
        error: Option<Value>,
    ) -> Result<(), ServiceError> {
        pending.run.state = state;
        pending.run.error = error;
        pending.entry.body = json!(pending.run);
        pending.entry.due_ms = NEVER;
        pending.entry.lease_until_ms = 0;
        self.store().put_outbox(pending.entry.clone()).await?;
        Ok(())
    }

    /// Puts `pending` (held by the caller) back to wait, free, at `due_ms`.
    pub(crate) async fn release_pending(
        &self,
        mut pending: Pending,
        due_ms: i64,
    ) -> Result<(), ServiceError> {
        pending.entry.lease_until_ms = 0;
        pending.entry.due_ms = due_ms;
        self.store().put_outbox(pending.entry).await?;
        Ok(())
    }

    /// Forgets pending run `id`.
    pub(crate) async fn delete_pending(&self, id: &str) -> Result<(), ServiceError> {
        self.store().delete_outbox(id).await?;
        Ok(())
    }

    /// Waits until pending run `id` started, or ended without.
    pub(crate) async fn pending_started(&self, id: RunId) -> Result<PendingEnd, ServiceError> {
        let text = id.to_string();
        loop {
            if self.store().run(id).await.is_ok() {
                return Ok(PendingEnd::Started(id));
            }
            match self.pending(&text).await? {
                Some(pending) if pending.waiting() => {}
                Some(pending) if pending.run.state == PendingState::Failed => {
                    return Ok(PendingEnd::Failed(pending.run.error.unwrap_or(Value::Null)));
                }
                // Cancelled, or gone: started between the two reads?
                _ => {
                    return Ok(if self.store().run(id).await.is_ok() {
                        PendingEnd::Started(id)
                    } else {
                        PendingEnd::Gone
                    });
                }
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }
}

/// Now, in Unix milliseconds.
pub(super) fn now_ms() -> i64 {
    use tollgate_engine::Clock as _;
    tollgate_engine::SystemClock.now_ms()
}
