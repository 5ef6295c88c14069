//! The runs of a thread once asked for: get, list, join, join_stream,
//! cancel and delete, for runs that started and runs that wait to start
//! (`queue.rs`) alike.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use tollgate_checkpoint::{RunId, RunStatus};

use super::super::errors::{ApiError, ApiResult};
use super::super::extract::{run_id, JsonOrDefault};
use super::super::App;
use super::outcome::{last_seq, outcome};
use super::queue::{self, Pending};
use super::runs::when_started;
use super::stream::sse;
use super::{threads, wire};
use crate::error::ServiceError;
use crate::service::RunSummary;
use crate::service::{Follow, Until};

/// The run `run` of `thread`, or 404 (a run of another thread included).
async fn thread_run(app: &App, thread: &str, run: &str) -> ApiResult<RunSummary> {
    let id = run_id(run).map_err(|_| run_not_found(thread, run))?;
    let summary = app.runs.summary(id).await.map_err(|_| run_not_found(thread, run))?;
    if summary.thread.as_deref() != Some(thread) {
        return Err(run_not_found(thread, run));
    }
    Ok(summary)
}

/// A run of a thread: started, or waiting to start (`queue.rs`).
enum ThreadRun {
    Started(Box<RunSummary>),
    Pending(Box<Pending>),
}

/// The run `run` of `thread`, started or pending, or 404.
async fn started_or_pending(app: &App, thread: &str, run: &str) -> ApiResult<ThreadRun> {
    match thread_run(app, thread, run).await {
        Ok(summary) => Ok(ThreadRun::Started(Box::new(summary))),
        Err(error) => match queue::get(app, run).await? {
            Some(pending) if pending.entry.thread.as_deref() == Some(thread) => {
                Ok(ThreadRun::Pending(Box::new(pending)))
            }
            // Started between the two reads?
            _ => thread_run(app, thread, run)
                .await
                .map(|summary| ThreadRun::Started(Box::new(summary)))
                .map_err(|_| error),
        },
    }
}

fn run_not_found(thread: &str, run: &str) -> ApiError {
    ServiceError::missing(format!("no run `{run}` on thread `{thread}`")).into()
}

/// `GET /threads/{thread}/runs/{run}`.
pub(super) async fn get(
    State(app): State<App>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(match started_or_pending(&app, &thread, &run).await? {
        ThreadRun::Started(summary) => wire::run(&summary, &summary.graph),
        ThreadRun::Pending(pending) => queue::view(&pending),
    }))
}

#[derive(Deserialize)]
pub(super) struct ListQuery {
    limit: Option<usize>,
    offset: Option<usize>,
    status: Option<String>,
}

/// `GET /threads/{thread}/runs`: newest first, those waiting to start
/// (and those that never will) before the ones that started.
pub(super) async fn list(
    State(app): State<App>,
    Path(thread): Path<String>,
    Query(query): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let pending = queue::of_thread(&app, &thread).await?;
    let runs = app.runs.thread_runs(&thread).await?;
    let started: std::collections::HashSet<String> =
        runs.iter().map(|r| r.id.to_string()).collect();
    let wanted = |status: &str| query.status.as_deref().is_none_or(|asked| asked == status);
    let waiting = pending.iter().rev().filter(|p| !started.contains(&p.entry.id));
    let shown: Vec<Value> = waiting
        .filter(|pending| wanted(queue::status(pending)))
        .map(queue::view)
        .chain(
            runs.iter()
                .filter(|summary| wanted(wire::run_status(summary.status)))
                .map(|summary| wire::run(summary, &summary.graph)),
        )
        .skip(query.offset.unwrap_or(0))
        .take(query.limit.unwrap_or(10))
        .collect();
    Ok(Json(Value::Array(shown)))
}

/// `GET /threads/{thread}/runs/{run}/join`: waits for the run to settle;
/// its values then.
pub(super) async fn join(
    State(app): State<App>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let id = match started_or_pending(&app, &thread, &run).await? {
        ThreadRun::Started(summary) => summary.id,
        ThreadRun::Pending(pending) => {
            match queue::started(&app, run_id(&pending.entry.id)?).await? {
                Some(id) => id,
                // Cancelled before it started: the thread's values as they are.
                None => return Ok(Json(threads::view(&app, &thread).await?.values)),
            }
        }
    };
    app.runs.settled(id).await?;
    Ok(Json(outcome(&app, id).await?))
}

#[derive(Deserialize)]
pub(super) struct JoinStreamQuery {
    stream_mode: Option<String>,
    #[allow(dead_code)] // Accepted: a disconnect never cancels a run here.
    cancel_on_disconnect: Option<bool>,
}

/// `GET /threads/{thread}/runs/{run}/stream`: the run's events from
/// `Last-Event-ID` (from its next event without one) until it settles.
pub(super) async fn join_stream(
    State(app): State<App>,
    Path((thread, run)): Path<(String, String)>,
    Query(query): Query<JoinStreamQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = match started_or_pending(&app, &thread, &run).await? {
        ThreadRun::Started(summary) => summary.id,
        ThreadRun::Pending(pending) => when_started(&app, &pending.entry.id).await?,
    };
    let after = match headers.get("last-event-id").and_then(|value| value.to_str().ok()) {
        Some(text) => text.trim().parse().map_err(|_| {
            ServiceError::invalid(format!(
                "Last-Event-ID `{text}` is not an event id of this stream"
            ))
        })?,
        None => last_seq(&app, id).await?,
    };
    let modes = match query.stream_mode {
        Some(mode) => vec![mode],
        None => vec![
            "values".to_owned(),
            "updates".to_owned(),
            "custom".to_owned(),
            "messages-tuple".to_owned(),
        ],
    };
    let follow = Follow::new(&app.hub, &app.runs, id, after, Until::LegEnds).await?;
    Ok(sse(app, follow, modes, false).into_response())
}

#[derive(Deserialize)]
pub(super) struct CancelQuery {
    wait: Option<String>,
    action: Option<String>,
}

/// What cancelling one run came to.
enum Cancelled {
    /// A run that waited to start, now cancelled.
    Pending(Box<Pending>),
    /// A run that started, now cancelled (or already settled).
    Started(RunId),
    /// Deleted (`action=rollback`).
    Deleted,
}

/// Cancels run `run` of `thread` wherever it is driven; with `rollback`
/// deletes it once it stopped; with `wait` waits until it stopped.
async fn cancel_one(
    app: &App,
    thread: &str,
    run: &str,
    rollback: bool,
    wait: bool,
) -> ApiResult<Cancelled> {
    let summary = match started_or_pending(app, thread, run).await? {
        ThreadRun::Started(summary) => *summary,
        ThreadRun::Pending(pending) => match queue::cancel(app, *pending, rollback).await? {
            Some(_) if rollback => return Ok(Cancelled::Deleted),
            Some(cancelled) => return Ok(Cancelled::Pending(Box::new(cancelled))),
            // It started meanwhile: cancelled as a run.
            None => thread_run(app, thread, run).await?,
        },
    };
    stop_started(app, &summary, rollback, wait).await
}

/// Stops a run that started (when in flight); with `rollback` deletes it
/// once settled; with `wait` waits until it settled.
async fn stop_started(
    app: &App,
    summary: &RunSummary,
    rollback: bool,
    wait: bool,
) -> ApiResult<Cancelled> {
    let id = summary.id;
    if summary.in_flight() {
        app.runs.stop(&app.legs, id).await?;
    }
    if rollback || wait {
        app.runs.settled(id).await?;
    }
    if rollback {
        app.runs.delete(id).await?;
        return Ok(Cancelled::Deleted);
    }
    Ok(Cancelled::Started(id))
}

/// `POST /threads/{thread}/runs/{run}/cancel`: cancelled wherever it is
/// driven (`interrupted`); `action=rollback` also deletes it; `wait=1`
/// waits until it stopped.
pub(super) async fn cancel(
    State(app): State<App>,
    Path((thread, run)): Path<(String, String)>,
    Query(query): Query<CancelQuery>,
) -> ApiResult<Response> {
    let rollback = query.action.as_deref() == Some("rollback");
    let wait = matches!(query.wait.as_deref(), Some("1" | "true"));
    Ok(match cancel_one(&app, &thread, &run, rollback, wait).await? {
        Cancelled::Deleted => StatusCode::NO_CONTENT.into_response(),
        Cancelled::Pending(cancelled) => Json(queue::view(&cancelled)).into_response(),
        Cancelled::Started(id) => {
            let summary = app.runs.summary(id).await?;
            Json(wire::run(&summary, &summary.graph)).into_response()
        }
    })
}

#[derive(Deserialize, Default)]
pub(super) struct CancelManyBody {
    thread_id: Option<String>,
    run_ids: Option<Vec<String>>,
    status: Option<String>,
}

/// `POST /runs/cancel` (`runs.cancel_many`): the runs `run_ids` of
/// `thread_id`, or every run of a `status`: `pending` (waiting to start,
/// or queued for a worker), `running`, or `all` of both. Each as
/// `POST /threads/{thread}/runs/{run}/cancel` cancels one (`action=rollback`
/// deletes them too); 204 once all are cancelled.
pub(super) async fn cancel_many(
    State(app): State<App>,
    Query(query): Query<CancelQuery>,
    JsonOrDefault(body): JsonOrDefault<CancelManyBody>,
) -> ApiResult<Response> {
    let rollback = query.action.as_deref() == Some("rollback");
    match (body.thread_id, body.run_ids, body.status.as_deref()) {
        (Some(thread), Some(runs), None) => {
            for run in &runs {
                cancel_one(&app, &thread, run, rollback, false).await?;
            }
        }
        (None, None, Some(status @ ("pending" | "running" | "all"))) => {
            let (pending, running) = (status != "running", status != "pending");
            if pending {
                for waiting in app.runs.pending_waiting().await? {
                    queue::cancel(&app, waiting, rollback).await?;
                }
            }
            let statuses = [(pending, RunStatus::Queued), (running, RunStatus::Running)];
            for (_, status) in statuses.into_iter().filter(|(wanted, _)| *wanted) {
                for summary in app.runs.runs_of_status(status).await? {
                    stop_started(&app, &summary, rollback, false).await?;
                }
            }
        }
        _ => {
            return Err(ServiceError::invalid(
                "`runs.cancel_many` takes `thread_id` with `run_ids`, or a `status` (`pending`, `running` or `all`)",
            )
            .into())
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /threads/{thread}/runs/{run}`: a run that is not running.
pub(super) async fn delete(
    State(app): State<App>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Response> {
    match started_or_pending(&app, &thread, &run).await? {
        ThreadRun::Started(summary) => app.runs.delete(summary.id).await?,
        ThreadRun::Pending(pending) => {
            if queue::cancel(&app, *pending, true).await?.is_none() {
                // It started meanwhile: deleted as a run (refused while it runs).
                app.runs.delete(thread_run(&app, &thread, &run).await?.id).await?;
            }
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
