//! The LangGraph API's deferred work, done by every server of the
//! database: pending runs started once their thread is free and their
//! time has come (`queue.rs`), webhooks sent once their run settled
//! (`webhook.rs`). Both live in the store's outbox, so what one server
//! did not get to, another (or the same, restarted) does.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tollgate_checkpoint::{OutboxEntry, OutboxQuery, RunId};

use super::super::errors::ApiResult;
use super::super::App;
use super::queue::{self, Pending};
use super::{runs, threads, webhook, wire};
use crate::error::ServiceError;

/// How often the outbox is read when nothing wakes the dispatcher.
const POLL: Duration = Duration::from_millis(250);
/// The shortest time between two reads that runs changing status
/// prompt (on SQLite every commit does).
const MIN_GAP: Duration = Duration::from_millis(20);
/// Starts of a pending run that may fail on a conflict before it is
/// given up (a conflict that is not a busy thread repeats).
const MAX_STARTS: u32 = 20;
/// Pending runs (and webhooks) read at once.
const BATCH: u64 = 64;

/// Starts the dispatcher of `app` on the current runtime (none: not at
/// all); it ends once no router or [`Api`](crate::Api) of `app` is left.
pub(crate) fn spawn(app: App) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let changes = app.runs.status_changes();
        let mut outstanding = true;
        loop {
            if Arc::strong_count(&app.settings) <= 1 {
                return;
            }
            let began = Instant::now();
            match tick(&app).await {
                Ok(any) => outstanding = any,
                // The database away (503): `/healthz` and the store-error
                // metric say so; no warning four times a second here.
                Err(error) if error.status == StatusCode::SERVICE_UNAVAILABLE => {
                    tracing::debug!(error = %error.message, "langgraph outbox: not read");
                }
                Err(error) => tracing::warn!(error = %error.message, "langgraph outbox: not read"),
            }
            let woken = app.outbox.notified();
            // Runs changing status matter only while work waits.
            let changed = async {
                match changes.as_deref().filter(|_| outstanding) {
                    Some(changes) => {
                        changes.notified().await;
                        tokio::time::sleep(MIN_GAP.saturating_sub(began.elapsed())).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = woken => {}
                () = changed => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    });
}

/// One look: due pending runs started, settled runs' webhooks sent.
/// Whether any work waits.
async fn tick(app: &App) -> ApiResult<bool> {
    let runs = start_due(app).await?;
    let hooks = webhook::deliver_due(app).await?;
    Ok(runs || hooks)
}

/// Starts the pending runs that are due, each thread's oldest first and
/// only once no run of its thread is in flight or waits for a decision.
/// One that fails to be read or started is left for the next look, the
/// others go on.
async fn start_due(app: &App) -> ApiResult<bool> {
    let now = wire::now_ms();
    let query = OutboxQuery::new(queue::KIND, BATCH).due_by(now);
    let entries = app.runs.store().list_outbox(query).await.map_err(ServiceError::from)?;
    let any = !entries.is_empty();
    let mut seen = HashSet::new();
    for entry in entries {
        // A thread's later runs wait for its earliest, held or not.
        if entry.thread.as_ref().is_some_and(|thread| !seen.insert(thread.clone())) {
            continue;
        }
        let id = entry.id.clone();
        if let Err(error) = consider(app, entry, now).await {
            tracing::warn!(%id, error = %error.message, "langgraph: a pending run was not started");
        }
    }
    Ok(any)
}

/// Starts pending run `entry` if it is free and its thread is.
async fn consider(app: &App, entry: OutboxEntry, now: i64) -> ApiResult<()> {
    let store = app.runs.store();
    if entry.is_held(now) {
        return Ok(());
    }
    let Ok(run) = entry.id.parse::<RunId>() else {
        tracing::warn!(id = %entry.id, "langgraph outbox: a pending run without a run id; dropped");
        return queue::delete(app, &entry.id).await;
    };
    if store.run(run).await.is_ok() {
        // Started before its record was deleted (a crash between).
        return queue::delete(app, &entry.id).await;
    }
    // Servers of one database may serve other graphs: a run of one this
    // server does not have waits for a server that has it.
    let assistant = Pending::read(entry.clone())?.run.assistant;
    if super::assistants::to_run(app, &assistant).await.is_err() {
        return Ok(());
    }
    if let Some(thread) = &entry.thread {
        if runs::occupied(threads::latest(app, thread).await?.as_ref()) {
            return Ok(());
        }
    }
    let taken = store.take_outbox(&entry.id, now, now + queue::HOLD_MS).await;
    let Some(taken) = taken.map_err(ServiceError::from)? else { return Ok(()) };
    let pending = Pending::read(taken)?;
    if pending.waiting() {
        start(app, pending, run).await?;
    }
    Ok(())
}

/// Starts `pending` (held) as run `run`: its record deleted once the run
/// exists; put back on a conflict (the thread took a run meanwhile) or
/// while the database is away; kept as failed when it cannot start.
async fn start(app: &App, pending: Pending, run: RunId) -> ApiResult<()> {
    let thread = pending.entry.thread.clone();
    match runs::start_pending(app, thread.as_deref(), &pending.run.request, run).await {
        Ok(started) => {
            if let Some(leg) = started.leg {
                app.legs.drive(leg);
            }
            queue::delete(app, &pending.entry.id).await
        }
        Err(error)
            if (error.status == StatusCode::CONFLICT && pending.entry.attempts < MAX_STARTS)
                || error.status == StatusCode::SERVICE_UNAVAILABLE =>
        {
            queue::release(app, pending, wire::now_ms()).await
        }
        Err(error) => {
            tracing::warn!(%run, error = %error.message, "langgraph: a pending run could not start");
            queue::failed(app, pending, &error).await
        }
    }
}
