//! A thread's history as LangGraph's clients read it
//! (`threads.get_history`): the checkpoints of all its runs, newest first,
//! each as a `ThreadState`, filtered by their metadata.

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tollgate_checkpoint::RunStatus;
use tollgate_engine::format_rfc3339;

use super::super::errors::ApiResult;
use super::super::extract::JsonOrDefault;
use super::super::App;
use super::threads::{latest, not_found, state_json, CheckpointMetadata};
use super::wire;
use crate::error::ServiceError;

/// Checkpoints read at once while a metadata filter passes some over.
const PAGE: u64 = 200;

#[derive(Deserialize, Default)]
pub(super) struct HistoryBody {
    limit: Option<u64>,
    before: Option<Value>,
    /// Only the checkpoints whose metadata has these keys with these
    /// values.
    metadata: Option<Map<String, Value>>,
    /// Whose checkpoints: the root graph's (an empty `checkpoint_ns`, the
    /// only one served).
    checkpoint: Option<CheckpointNs>,
}

#[derive(Deserialize, Default)]
pub(super) struct CheckpointNs {
    #[serde(default)]
    checkpoint_ns: String,
}

/// The checkpoint id a `before` names: a checkpoint id, or a config
/// `{"configurable": {"checkpoint_id"}}` (free-form: LangGraph's clients
/// send either, so it is read by key).
fn before_id(before: Option<&Value>) -> Option<String> {
    let before = before?;
    before
        .as_str()
        .or_else(|| before["configurable"]["checkpoint_id"].as_str())
        .or_else(|| before["checkpoint_id"].as_str())
        .map(str::to_owned)
}

/// `POST /threads/{thread}/history`: the thread's checkpoints across all
/// its runs, newest first, each as a `ThreadState`; those before
/// `before` (a checkpoint id or config) whose metadata has every key of
/// `metadata`, at most `limit` (10). A subgraph's `checkpoint_ns` is
/// refused (422).
pub(super) async fn history(
    State(app): State<App>,
    Path(thread): Path<String>,
    JsonOrDefault(body): JsonOrDefault<HistoryBody>,
) -> ApiResult<Json<Value>> {
    history_page(&app, &thread, body).await
}

#[derive(Deserialize, Default)]
pub(super) struct HistoryQuery {
    limit: Option<u64>,
    before: Option<String>,
}

/// `GET /threads/{thread}/history`.
pub(super) async fn history_get(
    State(app): State<App>,
    Path(thread): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> ApiResult<Json<Value>> {
    let body = HistoryBody {
        limit: query.limit,
        before: query.before.map(Value::String),
        ..HistoryBody::default()
    };
    history_page(&app, &thread, body).await
}

/// The thread-wide number of the checkpoint `id` names, found in the
/// pages of the thread's history.
async fn number_of(app: &App, thread: &str, id: &str) -> ApiResult<u64> {
    let mut page_before = None;
    loop {
        let page = app.runs.thread_history(thread, page_before, 1000).await?;
        for entry in &page.checkpoints {
            if wire::checkpoint_id(entry.state.run, entry.state.step) == id {
                return Ok(entry.number);
            }
        }
        match page.next_before {
            Some(next) => page_before = Some(next),
            None => {
                return Err(ServiceError::missing(format!(
                    "no checkpoint `{id}` on thread `{thread}`"
                ))
                .into())
            }
        }
    }
}

async fn history_page(app: &App, thread: &str, body: HistoryBody) -> ApiResult<Json<Value>> {
    if body.checkpoint.as_ref().is_some_and(|checkpoint| !checkpoint.checkpoint_ns.is_empty()) {
        return Err(super::unsupported_error(
            "the history of a subgraph (`checkpoint.checkpoint_ns`; nested states are on the run's `/runs/{id}/state`)",
        ));
    }
    let limit = body.limit.unwrap_or(10).clamp(1, 1000);
    let Some(head) = latest(app, thread).await? else {
        return match app.runs.thread_record(thread).await? {
            Some(_) => Ok(Json(json!([]))),
            None => Err(not_found(thread)),
        };
    };
    let mut before = match before_id(body.before.as_ref()) {
        Some(id) => Some(number_of(app, thread, &id).await?),
        None => None,
    };
    let wanted = body.metadata.unwrap_or_default();
    // Without a filter one page of `limit`; with one, pages until enough
    // pass it.
    let page_size = if wanted.is_empty() { limit } else { PAGE.max(limit) };
    let mut states = Vec::new();
    loop {
        let page = app.runs.thread_history(thread, before, page_size).await?;
        for entry in &page.checkpoints {
            if !CheckpointMetadata::of(thread, &entry.state).has(&wanted) {
                continue;
            }
            let at = format_rfc3339(entry.info.at_ms);
            // The head of a run that waits carries its pending interrupts,
            // as `/state` does: `useStream` reads them from here.
            let waits = head.status == RunStatus::AwaitingHitl
                && entry.state.run == head.id
                && entry.state.step == head.step;
            states.push(if waits {
                state_json(thread, &app.runs.state(head.id, None).await?, Some(&at), true)
            } else {
                state_json(thread, &entry.state, Some(&at), false)
            });
            if states.len() as u64 >= limit {
                return Ok(Json(Value::Array(states)));
            }
        }
        match page.next_before {
            Some(next) if !wanted.is_empty() => before = Some(next),
            _ => return Ok(Json(Value::Array(states))),
        }
    }
}
