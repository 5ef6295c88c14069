//! The LangGraph API's deferred work, done by every server of the
//! database: pending runs started once their thread is free and their
//! time has come (`queue.rs`), webhooks sent once their run settled
//! (`webhook.rs`). Both live in the store's outbox, so what one server
//! did not get to, another (or the same, restarted) does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tollgate_checkpoint::{OutboxEntry, OutboxGate, OutboxQuery, RunId};

use super::super::errors::ApiResult;
use super::super::App;
use super::queue::{self, Pending};
use super::{runs, webhook, wire};
use crate::error::ServiceError;

/// How often the outbox is read when nothing wakes the dispatcher.
const POLL: Duration = Duration::from_millis(250);
/// The shortest time between two reads that runs changing status
/// prompt (on SQLite every commit does).
const MIN_GAP: Duration = Duration::from_millis(20);
/// Starts of a pending run that may fail on a conflict before it is
/// given up (a conflict that is not a busy thread repeats).
const MAX_STARTS: u32 = 20;
/// Ready pending runs (and webhooks) read at once (a page).
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
        let mut cursors = Cursors::default();
        loop {
            if Arc::strong_count(&app.settings) <= 1 {
                return;
            }
            let began = Instant::now();
            match tick(&app, &mut cursors).await {
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
async fn tick(app: &App, cursors: &mut Cursors) -> ApiResult<bool> {
    let runs = start_due(app, &mut cursors.runs).await?;
    let hooks = webhook::deliver_due(app, &mut cursors.webhooks).await?;
    Ok(runs || hooks)
}

/// Where each kind's next look goes on from: a look reads at most
/// [`PAGES`] pages of what is ready, so that many entries that are
/// ready but cannot proceed here (a graph this server does not serve, a
/// webhook host it does not allow) never hide the rest: the next look
/// reads on after them, and starts over once it has read to the end.
#[derive(Default)]
pub(super) struct Cursors {
    runs: Option<OutboxEntry>,
    webhooks: Option<OutboxEntry>,
}

/// Pages of ready entries one look reads, at most.
pub(super) const PAGES: usize = 16;

/// The next page of ready entries of `kind` after `cursor` (and moves
/// it: to the last entry read, or back to the start past the end).
pub(super) async fn next_page(
    app: &App,
    kind: &str,
    now: i64,
    cursor: &mut Option<OutboxEntry>,
) -> ApiResult<Vec<OutboxEntry>> {
    let mut query = OutboxQuery::new(kind, BATCH).ready(now);
    if let Some(last) = cursor.as_ref() {
        query = query.after(last);
    }
    let page = app.runs.store().list_outbox(query).await.map_err(ServiceError::from)?;
    *cursor = if page.len() < usize::try_from(BATCH).unwrap_or(usize::MAX) {
        None
    } else {
        page.last().cloned()
    };
    Ok(page)
}

/// What a look found of a thread: pending runs of a thread held by a run
/// are gated on it (out of sight until it ends); others wait for the
/// next look.
enum Thread {
    /// Held by this run.
    Held(RunId),
    /// Free, or its earliest pending run seen: the rest wait.
    Seen,
}

/// Starts the pending runs that are ready, each thread's oldest first and
/// only once no run of its thread is in flight or waits for a decision;
/// those of a thread that is not free are gated on the run that holds it,
/// so that they are read again only once it ends. One that fails to be
/// read or started is left for the next look, the others go on.
async fn start_due(app: &App, cursor: &mut Option<OutboxEntry>) -> ApiResult<bool> {
    let now = wire::now_ms();
    let mut threads = HashMap::new();
    let mut any = false;
    for _ in 0..PAGES {
        let entries = next_page(app, queue::KIND, now, cursor).await?;
        any |= !entries.is_empty();
        for entry in entries {
            let id = entry.id.clone();
            if let Err(error) = consider(app, entry, now, &mut threads).await {
                tracing::warn!(%id, error = %error.message, "langgraph: a pending run was not started");
            }
        }
        if cursor.is_none() {
            break;
        }
    }
    Ok(any)
}

/// Starts pending run `entry` if it is free and its thread is; gates it
/// on the run that holds its thread if there is one.
async fn consider(
    app: &App,
    entry: OutboxEntry,
    now: i64,
    threads: &mut HashMap<String, Thread>,
) -> ApiResult<()> {
    let store = app.runs.store();
    if entry.is_held(now) {
        if let Some(thread) = &entry.thread {
            threads.insert(thread.clone(), Thread::Seen);
        }
        return Ok(());
    }
    let Ok(run) = entry.id.parse::<RunId>() else {
        tracing::warn!(id = %entry.id, "langgraph outbox: a pending run without a run id; dropped");
        return queue::delete(app, &entry.id).await;
    };
    if let Some(thread) = entry.thread.clone() {
        match threads.get(&thread) {
            Some(Thread::Held(holder)) => return gate(app, &entry, *holder).await,
            Some(Thread::Seen) => return Ok(()),
            None => {}
        }
        let latest = app.runs.executor().thread_latest(&thread).await;
        let latest = latest.map_err(ServiceError::from)?;
        if let Some(holder) = latest.filter(|latest| latest.status.holds_thread()) {
            if holder.id != run {
                threads.insert(thread, Thread::Held(holder.id));
                return gate(app, &entry, holder.id).await;
            }
        }
        threads.insert(thread.clone(), Thread::Seen);
        // Only the thread's earliest pending run starts (a look that went
        // on from a cursor may meet a later one first).
        let head = OutboxQuery::new(queue::KIND, 1).thread(thread).due_by(now);
        let head = store.list_outbox(head).await.map_err(ServiceError::from)?;
        if head.first().is_some_and(|head| head.id != entry.id) {
            return Ok(());
        }
    }
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
    let taken = store.take_outbox(&entry.id, now, now + queue::HOLD_MS).await;
    let Some(taken) = taken.map_err(ServiceError::from)? else { return Ok(()) };
    let pending = Pending::read(taken)?;
    if pending.waiting() {
        start(app, pending, run).await?;
    }
    Ok(())
}

/// Gates pending run `entry` on run `holder`, which holds its thread: out
/// of sight until it ends (if it ended meanwhile, the next look sees it).
async fn gate(app: &App, entry: &OutboxEntry, holder: RunId) -> ApiResult<()> {
    let gate = OutboxGate::ended(holder);
    let ids = [entry.id.clone()];
    app.runs.store().gate_outbox(&ids, gate).await.map_err(ServiceError::from)?;
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
