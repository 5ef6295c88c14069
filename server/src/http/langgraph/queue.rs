//! Pending runs as LangGraph shows them: the service keeps them
//! (`service/pending.rs`: a run on a thread busy with another,
//! `multitask_strategy="enqueue"`, and a run asked to start later,
//! `after_seconds`), with the request they were made with; the dispatcher
//! (`dispatch.rs`) starts them. Until then the API shows one `pending`;
//! once cancelled, `interrupted`; if it could not start, `error`.

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate_checkpoint::RunId;
use tollgate_engine::format_rfc3339;

use super::super::errors::{ApiError, ApiResult};
use super::super::App;
use super::body::RunBody;
use super::wire::assistant_uuid;
use crate::error::ServiceError;
pub(super) use crate::service::Pending;
use crate::service::{PendingEnd, PendingState};

/// Why a pending run could not start, as it is kept with it.
#[derive(Serialize, Deserialize)]
struct Failure {
    kind: String,
    message: String,
    status: u16,
}

/// The request `pending` was made with.
pub(super) fn request(pending: &Pending) -> ApiResult<RunBody> {
    serde_json::from_value(pending.run.request.clone()).map_err(|error| {
        let message =
            format!("pending run {}: its request does not read: {error}", pending.entry.id);
        ServiceError::failed(message).with_source(error).into()
    })
}

/// A pending run's status as LangGraph names it: `pending`, or
/// `interrupted` (cancelled) or `error` (it will never start).
pub(super) fn status(pending: &Pending) -> &'static str {
    match pending.run.state {
        PendingState::Waiting => "pending",
        PendingState::Cancelled => "interrupted",
        PendingState::Failed => "error",
    }
}

/// `pending` as LangGraph's `Run`.
pub(super) fn view(pending: &Pending) -> Value {
    let status = status(pending);
    let created = format_rfc3339(pending.entry.created_at_ms);
    let strategy = request(pending).ok().and_then(|request| request.multitask_strategy);
    json!({
        "run_id": pending.entry.id,
        "thread_id": pending.entry.thread,
        "assistant_id": assistant_uuid(&pending.run.assistant),
        "created_at": created,
        "updated_at": created,
        "status": status,
        "metadata": {"graph_id": pending.run.assistant, "tollgate_status": status,
                     "starts_after": pending.starts_after_ms().map(format_rfc3339),
                     "error": pending.run.error},
        "multitask_strategy": strategy.as_deref().unwrap_or("reject"),
        "kwargs": {},
    })
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
    let shelf = request.shelf.clone();
    let request = serde_json::to_value(request).map_err(|error| {
        ServiceError::failed(format!("a pending run's request does not write: {error}"))
            .with_source(error)
    })?;
    Ok(app.runs.put_pending(run, thread, assistant, request, due_ms, shelf).await?)
}

/// The pending run `id`, if there is one.
pub(super) async fn get(app: &App, id: &str) -> ApiResult<Option<Pending>> {
    Ok(app.runs.pending(id).await?)
}

/// Every pending run of `thread`, the oldest first.
pub(super) async fn of_thread(app: &App, thread: &str) -> ApiResult<Vec<Pending>> {
    Ok(app.runs.pending_of_thread(thread).await?)
}

/// The threads that have a run waiting to start.
pub(super) async fn threads_waiting(app: &App) -> ApiResult<std::collections::HashSet<String>> {
    Ok(app.runs.threads_waiting().await?)
}

/// Whether a run of `thread` waits to start.
pub(super) async fn any_waiting(app: &App, thread: &str) -> ApiResult<bool> {
    Ok(app.runs.any_pending(thread).await?)
}

/// Cancels `pending` (`forget`: deletes it); `None` when it started
/// meanwhile.
pub(super) async fn cancel(
    app: &App,
    pending: Pending,
    forget: bool,
) -> ApiResult<Option<Pending>> {
    Ok(app.runs.cancel_pending(pending, forget).await?)
}

/// What is kept with a pending run that could not start: `error`.
pub(super) fn failure(error: &ApiError) -> Value {
    let why = Failure {
        kind: error.kind.to_string(),
        message: error.message.clone(),
        status: error.status.as_u16(),
    };
    json!(why)
}

/// Waits until pending run `id` started (its id), or ended without
/// (`None`: cancelled or deleted); one that could not start is its
/// error.
pub(super) async fn started(app: &App, id: RunId) -> ApiResult<Option<RunId>> {
    match app.runs.pending_started(id).await? {
        PendingEnd::Started(run) => Ok(Some(run)),
        PendingEnd::Gone => Ok(None),
        PendingEnd::Failed(why) => {
            let why = serde_json::from_value::<Failure>(why).ok();
            let status = why.as_ref().and_then(|why| StatusCode::from_u16(why.status).ok());
            let message =
                why.map_or_else(|| "the run could not start".to_owned(), |why| why.message);
            Err(ApiError::new(
                status.unwrap_or(StatusCode::UNPROCESSABLE_ENTITY),
                "failed",
                &message,
            ))
        }
    }
}
