//! Runs that wait before they start, kept in the store's outbox so that
//! a server stopped meanwhile leaves them to the next: a run on a thread
//! busy with another (`multitask_strategy="enqueue"`) and a run asked to
//! start later (`after_seconds`). Each has the id its run will have; the
//! dispatcher (`dispatch.rs`) creates that run once the thread is free
//! and the time has come. Until then the API shows it `pending`; once
//! cancelled, `interrupted`; if it could not start, `error`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate_checkpoint::{OutboxEntry, OutboxQuery, RunId};
use tollgate_engine::format_rfc3339;

use super::super::errors::{ApiError, ApiResult};
use super::super::App;
use super::body::RunBody;
use super::wire::assistant_uuid;
use crate::error::ServiceError;

/// The outbox kind of a pending run.
pub(super) const KIND: &str = "run";

/// A pending run's outbox body (version [`VERSION`]).
#[derive(Serialize, Deserialize)]
pub(super) struct PendingRun {
    /// The record's version.
    pub(super) v: u32,
    /// The assistant (graph or blueprint) it runs.
    pub(super) assistant: String,
    /// The request it was created with.
    pub(super) request: RunBody,
    /// Where it is.
    pub(super) state: PendingState,
    /// Why it could not start (`state` `failed`): `{"kind", "message"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<Value>,
}

const VERSION: u32 = 1;

/// The due time of a pending run that never starts (cancelled, failed):
/// no listing of what is due finds it, so "waiting" is "due before it".
const NEVER: i64 = i64::MAX;

/// Where a pending run is.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub(super) enum PendingState {
    /// Waiting for its thread or its time.
    Waiting,
    /// Cancelled before it started: never starts.
    Cancelled,
    /// Could not start (its error kept): never starts.
    Failed,
}

/// A pending run as read back: its entry and what it holds.
pub(super) struct Pending {
    pub(super) entry: OutboxEntry,
    pub(super) run: PendingRun,
}

impl Pending {
    pub(super) fn read(entry: OutboxEntry) -> ApiResult<Self> {
        let run = serde_json::from_value::<PendingRun>(entry.body.clone()).map_err(|error| {
            ServiceError::failed(format!(
                "pending run {}: its record does not read: {error}",
                entry.id
            ))
        })?;
        if run.v > VERSION {
            return Err(ServiceError::failed(format!(
                "pending run {} is a record of version {}; this build reads up to {VERSION}",
                entry.id, run.v
            ))
            .into());
        }
        Ok(Self { entry, run })
    }

    /// Whether it may still start.
    pub(super) fn waiting(&self) -> bool {
        self.run.state == PendingState::Waiting
    }

    /// Writes it back in `state`, never to start again.
    async fn settle(
        &mut self,
        app: &App,
        state: PendingState,
        error: Option<Value>,
    ) -> ApiResult<()> {
        self.run.state = state;
        self.run.error = error;
        self.entry.body = json!(self.run);
        self.entry.due_ms = NEVER;
        self.entry.lease_until_ms = 0;
        store(app).put_outbox(self.entry.clone()).await.map_err(ServiceError::from)?;
        Ok(())
    }

    /// As LangGraph's `Run`.
    pub(super) fn json(&self) -> Value {
        let status = match self.run.state {
            PendingState::Waiting => "pending",
            PendingState::Cancelled => "interrupted",
            PendingState::Failed => "error",
        };
        let created = format_rfc3339(self.entry.created_at_ms);
        json!({
            "run_id": self.entry.id,
            "thread_id": self.entry.thread,
            "assistant_id": assistant_uuid(&self.run.assistant),
            "created_at": created,
            "updated_at": created,
            "status": status,
            "metadata": {"graph_id": self.run.assistant, "tollgate_status": status,
                         "starts_after": (self.entry.due_ms < NEVER)
                             .then(|| format_rfc3339(self.entry.due_ms)),
                         "error": self.run.error},
            "multitask_strategy": self.run.request.multitask_strategy.as_deref().unwrap_or("reject"),
            "kwargs": {},
        })
    }
}

fn store(app: &App) -> &dyn tollgate_checkpoint::Store {
    app.runs.store().as_ref()
}

/// Has the dispatcher (`dispatch.rs`) look at the outbox at once.
pub(super) fn wake(app: &App) {
    app.outbox.notify_one();
}

/// Keeps a run of `assistant` asked by `request` on `thread` (none: a
/// stateless run) to start at `due_ms` or once its thread is free; its
/// id is `run`'s.
pub(super) async fn put(
    app: &App,
    run: RunId,
    thread: Option<&str>,
    assistant: &str,
    request: &RunBody,
    due_ms: i64,
) -> ApiResult<Pending> {
    let record = PendingRun {
        v: VERSION,
        assistant: assistant.to_owned(),
        request: request.clone(),
        state: PendingState::Waiting,
        error: None,
    };
    let now = super::wire::now_ms();
    let entry = OutboxEntry::new(
        run.to_string(),
        KIND,
        thread.map(str::to_owned),
        now,
        due_ms,
        json!(record),
    );
    store(app).put_outbox(entry.clone()).await.map_err(ServiceError::from)?;
    Ok(Pending { entry, run: record })
}

/// The pending run `id`, if there is one.
pub(super) async fn get(app: &App, id: &str) -> ApiResult<Option<Pending>> {
    let entry = store(app).outbox_entry(id).await.map_err(ServiceError::from)?;
    entry.filter(|entry| entry.kind == KIND).map(Pending::read).transpose()
}

/// Every pending run of `thread` (those that will never start
/// included), the oldest first.
pub(super) async fn of_thread(app: &App, thread: &str) -> ApiResult<Vec<Pending>> {
    let query = OutboxQuery::new(KIND, 10_000).thread(thread);
    let entries = store(app).list_outbox(query).await.map_err(ServiceError::from)?;
    let mut pending = entries.into_iter().map(Pending::read).collect::<ApiResult<Vec<_>>>()?;
    pending.sort_by(|a, b| a.entry.id.cmp(&b.entry.id));
    Ok(pending)
}

/// Pending runs that may still start, of `thread` or of every thread, at
/// most `limit` (cancelled and failed ones are due never: not read).
async fn still_waiting(app: &App, thread: Option<&str>, limit: u64) -> ApiResult<Vec<OutboxEntry>> {
    let mut query = OutboxQuery::new(KIND, limit).due_by(NEVER - 1);
    query.thread = thread.map(str::to_owned);
    Ok(store(app).list_outbox(query).await.map_err(ServiceError::from)?)
}

/// The threads that have a run waiting to start.
pub(super) async fn threads_waiting(app: &App) -> ApiResult<std::collections::HashSet<String>> {
    let entries = still_waiting(app, None, 100_000).await?;
    Ok(entries.into_iter().filter_map(|entry| entry.thread).collect())
}

/// Whether a run of `thread` waits to start: one indexed read of one
/// entry, as every run on a thread asks.
pub(super) async fn any_waiting(app: &App, thread: &str) -> ApiResult<bool> {
    Ok(!still_waiting(app, Some(thread), 1).await?.is_empty())
}

/// Cancels pending run `pending`: it never starts, and reads
/// `interrupted` (`forget`: it is deleted). Taken from the dispatcher's
/// hands first, so that it is either cancelled or started, never both:
/// `None` when it started meanwhile.
pub(super) async fn cancel(
    app: &App,
    pending: Pending,
    forget: bool,
) -> ApiResult<Option<Pending>> {
    let id = pending.entry.id.clone();
    let mut pending = pending;
    while pending.waiting() {
        let now = super::wire::now_ms();
        let taken =
            store(app).take_outbox(&id, now, now + HOLD_MS).await.map_err(ServiceError::from)?;
        if let Some(taken) = taken {
            let started = match id.parse::<RunId>() {
                Ok(run) => store(app).run(run).await.is_ok(),
                Err(_) => false,
            };
            if started {
                // Started by a server that died before it forgot it.
                delete(app, &id).await?;
                return Ok(None);
            }
            pending = Pending::read(taken)?;
            if !forget {
                pending.settle(app, PendingState::Cancelled, None).await?;
            }
            break;
        }
        // The dispatcher holds it: it starts it, or puts it back.
        tokio::time::sleep(LOOK_EVERY).await;
        match get(app, &id).await? {
            Some(again) => pending = again,
            None => return Ok(None),
        }
    }
    if forget {
        delete(app, &id).await?;
    }
    Ok(Some(pending))
}

/// How long a process holds a pending run it is starting or cancelling.
pub(super) const HOLD_MS: i64 = 30_000;

/// Records that `pending` (held by the caller) could not start, and why.
pub(super) async fn failed(app: &App, mut pending: Pending, error: &ApiError) -> ApiResult<()> {
    let why =
        json!({"kind": error.kind, "message": error.message, "status": error.status.as_u16()});
    pending.settle(app, PendingState::Failed, Some(why)).await
}

/// Puts `pending` (held by the caller) back to wait, free, at `due_ms`.
pub(super) async fn release(app: &App, mut pending: Pending, due_ms: i64) -> ApiResult<()> {
    pending.entry.lease_until_ms = 0;
    pending.entry.due_ms = due_ms;
    store(app).put_outbox(pending.entry).await.map_err(ServiceError::from)?;
    Ok(())
}

/// Forgets pending run `id`.
pub(super) async fn delete(app: &App, id: &str) -> ApiResult<()> {
    store(app).delete_outbox(id).await.map_err(ServiceError::from)?;
    Ok(())
}

/// How often a caller waiting for a pending run looks.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Waits until pending run `id` started (its id), or ended without
/// (`None`: cancelled or deleted); one that could not start is its
/// error.
pub(super) async fn started(app: &App, id: RunId) -> ApiResult<Option<RunId>> {
    let text = id.to_string();
    loop {
        if store(app).run(id).await.is_ok() {
            return Ok(Some(id));
        }
        match get(app, &text).await? {
            Some(pending) if pending.waiting() => {}
            Some(pending) if pending.run.state == PendingState::Failed => {
                let error = pending.run.error.unwrap_or(Value::Null);
                let status = error["status"].as_u64().and_then(|s| u16::try_from(s).ok());
                let status = status
                    .and_then(|s| axum::http::StatusCode::from_u16(s).ok())
                    .unwrap_or(axum::http::StatusCode::UNPROCESSABLE_ENTITY);
                let message = error["message"].as_str().unwrap_or("the run could not start");
                return Err(ApiError::new(status, "failed", message));
            }
            // Cancelled, or gone: started between the two reads?
            _ => return Ok(store(app).run(id).await.is_ok().then_some(id)),
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}
