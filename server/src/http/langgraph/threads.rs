//! Threads: tollgate's durable threads, with a record of their own once
//! created (`ThreadStore::create_thread`: id, times, metadata). A thread that
//! only runs name (started through the native API) is shown too.

use std::collections::HashSet;

use futures_util::StreamExt;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tollgate_engine::{CheckpointSource, StateSnapshot, END};

use super::super::errors::{ApiError, ApiResult};
use super::super::extract::{self, JsonBody, JsonOrDefault, Keyed};
use super::super::{App, Principal};
use super::wire;
use crate::error::ServiceError;
use crate::identity::Caller;
use crate::service::InScope;
use crate::service::{
    thread_not_found, IfExists, Made, Makes, PruneStrategy, RunSummary, StateWrite,
};
use tollgate_checkpoint::{RunId, ThreadQuery, ThreadRecord, ThreadStatus};

/// Whether `metadata` holds every key of `filter` with the same value
/// (no filter: yes).
pub(super) fn metadata_matches(filter: Option<&Value>, metadata: &Value) -> bool {
    match filter {
        Some(Value::Object(wanted)) => {
            wanted.iter().all(|(key, value)| metadata.get(key) == Some(value))
        }
        _ => true,
    }
}

/// The latest run of `thread`, summarised.
pub(super) async fn latest(app: &App, thread: &str) -> ApiResult<Option<RunSummary>> {
    Ok(app.runs.latest_run(thread).await?)
}

/// The thread as LangGraph's `Thread`, or 404 when it has neither a
/// record nor a run.
pub(super) async fn view(app: &App, thread: &str) -> ApiResult<wire::Thread> {
    let record = app.runs.thread_record(thread).await?;
    view_among(app, thread, record, None).await
}

/// [`view`] of a thread whose `record` the caller read, with the threads
/// that have runs waiting to start when the caller read them for many
/// threads at once (`None`: read for this one).
async fn view_among(
    app: &App,
    thread: &str,
    record: Option<ThreadRecord>,
    waiting: Option<&HashSet<String>>,
) -> ApiResult<wire::Thread> {
    let (latest, values) = match app.runs.latest_with_values(thread).await? {
        Some((latest, Some(values))) => (Some(latest), wire::values(&values)),
        Some((latest, None)) => (Some(latest), Value::Null),
        None if record.is_none() => return Err(not_found(thread)),
        None => (None, json!({})),
    };
    let interrupts: Vec<Value> =
        latest.iter().flat_map(|latest| latest.interrupts.iter()).map(wire::interrupt).collect();
    let mut shown = wire::thread(thread, record.as_ref(), latest.as_ref(), values, &interrupts);
    let waits = match waiting {
        _ if shown.status == ThreadStatus::Busy.as_str() => false,
        Some(waiting) => waiting.contains(thread),
        None => super::queue::any_waiting(app, thread).await?,
    };
    if waits {
        // A run waits to start on it (`enqueue`, `after_seconds`).
        shown.status = ThreadStatus::Busy.as_str();
    }
    Ok(shown)
}

pub(super) fn not_found(thread: &str) -> ApiError {
    thread_not_found(thread).into()
}

#[derive(Deserialize, Default)]
pub(super) struct CreateBody {
    thread_id: Option<String>,
    metadata: Option<Value>,
    if_exists: Option<String>,
    ttl: Option<Value>,
}

/// `POST /threads`: a thread with the given id (a new UUID-like id
/// otherwise) and metadata; `if_exists`: `raise` (409, the default) or
/// `do_nothing` (the existing thread); `ttl`: removed once idle that many
/// minutes (the server's `--thread-ttl` otherwise).
pub(super) async fn create(
    State(app): State<App>,
    caller: Caller,
    JsonOrDefault(body): JsonOrDefault<CreateBody>,
) -> ApiResult<Response> {
    let id = match body.thread_id {
        Some(id) if id.trim().is_empty() => {
            return Err(ServiceError::invalid("`thread_id` must not be empty").into())
        }
        Some(id) => id,
        None => new_id(),
    };
    let metadata = object(body.metadata, "metadata")?;
    let if_exists = match body.if_exists.as_deref() {
        None | Some("raise") => IfExists::Raise,
        Some("do_nothing") => IfExists::DoNothing,
        Some(other) => {
            return Err(ServiceError::invalid(format!(
                "`if_exists` must be `raise` or `do_nothing`, not `{other}`"
            ))
            .into())
        }
    };
    let ttl = wire::thread_ttl(body.ttl.as_ref())?;
    app.runs.create_thread(&caller, &id, metadata, if_exists, wire::now_ms(), ttl).await?;
    Ok(Json(view(&app, &id).await?).into_response())
}

/// A fresh thread id, formatted as a UUID (from a ULID's 128 bits), as
/// LangGraph's clients expect.
pub(super) fn new_id() -> String {
    let ulid = ulid::Ulid::new().0.to_be_bytes();
    let hex: String = ulid.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// A JSON object (none: `{}`), or 422 naming `what`.
fn object(value: Option<Value>, what: &str) -> ApiResult<Value> {
    match value {
        None | Some(Value::Null) => Ok(json!({})),
        Some(value @ Value::Object(_)) => Ok(value),
        Some(_) => Err(ServiceError::invalid(format!("`{what}` must be an object")).into()),
    }
}

/// `GET /threads/{thread}`.
pub(super) async fn get(
    State(app): State<App>,
    Path(thread): Path<String>,
) -> ApiResult<Json<wire::Thread>> {
    Ok(Json(view(&app, &thread).await?))
}

#[derive(Deserialize, Default)]
pub(super) struct UpdateBody {
    metadata: Option<Value>,
    ttl: Option<Value>,
}

/// `PATCH /threads/{thread}`: its metadata merged with the given keys (a
/// thread only runs named gets a record).
pub(super) async fn update(
    State(app): State<App>,
    Path(thread): Path<String>,
    JsonOrDefault(body): JsonOrDefault<UpdateBody>,
) -> ApiResult<Json<wire::Thread>> {
    if body.ttl.as_ref().is_some_and(|ttl| !ttl.is_null()) {
        return Err(ServiceError::unusable(
            "a thread's `ttl` is set when it is created (`threads.create(ttl=…)`) and not changed after",
        )
        .into());
    }
    let given = match object(body.metadata, "metadata")? {
        Value::Object(given) => given,
        _ => Map::new(),
    };
    app.runs.update_thread(&thread, given, wire::now_ms()).await?;
    Ok(Json(view(&app, &thread).await?))
}

/// `GET /threads/{thread}/storage` (a tollgate extension): what its runs
/// occupy in the store: `{"thread_id", "runs", "checkpoint_bytes",
/// "event_bytes", "bytes"}`.
pub(super) async fn storage(
    State(app): State<App>,
    Path(thread): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(wire::storage(&thread, &app.runs.thread_storage(&thread).await?)))
}

/// `DELETE /threads/{thread}`: its runs (a running or queued one
/// cancelled first) and its record.
pub(super) async fn delete(
    State(app): State<App>,
    Path(thread): Path<String>,
) -> ApiResult<Response> {
    app.runs.delete_thread(&app.legs, &thread).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
pub(super) struct PruneBody {
    thread_ids: Vec<String>,
    strategy: Option<String>,
}

/// `POST /threads/prune` (`threads.prune`): with strategy `delete` (the
/// default), each listed thread deleted as `DELETE /threads/{thread}`
/// deletes it; with `keep_latest`, each keeps its latest run alone (the
/// older runs deleted with their checkpoints and events; the thread's
/// state unchanged). Ids of no thread are passed over. `{"pruned_count":
/// N}`, the threads pruned.
pub(super) async fn prune(
    State(app): State<App>,
    caller: Caller,
    JsonBody(body): JsonBody<PruneBody>,
) -> ApiResult<Json<Value>> {
    let strategy = PruneStrategy::named(body.strategy.as_deref().unwrap_or("delete"))?;
    let mut threads = Vec::with_capacity(body.thread_ids.len());
    for thread in body.thread_ids {
        // Another's thread is passed over as an id of no thread is.
        if app.runs.thread_in_scope(caller.scope(), &thread).await? == InScope::Yes {
            threads.push(thread);
        }
    }
    let pruned = app.runs.prune_threads_with(&app.legs, &threads, strategy).await?;
    Ok(Json(json!({"pruned_count": pruned.len()})))
}

#[derive(Deserialize, Default)]
pub(super) struct SearchBody {
    metadata: Option<Value>,
    status: Option<String>,
    ids: Option<Vec<String>>,
    limit: Option<u64>,
    offset: Option<u64>,
}

/// The threads `body` asks for, newest first, as the store finds them
/// (through its indexes), with the threads that have runs waiting to start
/// (busy whatever their latest run).
async fn matching(
    app: &App,
    caller: &Caller,
    body: SearchBody,
    offset: u64,
    limit: u64,
) -> ApiResult<(Vec<ThreadRecord>, HashSet<String>)> {
    let status = match body.status.as_deref() {
        None => None,
        Some(name) => match ThreadStatus::from_name(name) {
            Some(status) => Some(status),
            None => {
                return Err(ServiceError::invalid(format!(
                    "thread status `{name}` is not `idle`, `busy`, `interrupted` or `error`"
                ))
                .into())
            }
        },
    };
    let metadata = match object(body.metadata, "metadata")? {
        Value::Object(metadata) => metadata,
        _ => Map::new(),
    };
    // One read for every thread's pending runs, not one per thread.
    let waiting = super::queue::threads_waiting(app).await?;
    let busy = match status {
        Some(_) => waiting.iter().cloned().collect(),
        None => Vec::new(),
    };
    let query = ThreadQuery::page(offset, limit)
        .metadata(metadata)
        .status(status, busy)
        .ids(body.ids)
        .held_by(caller.scope().holder())
        .reviewed_by(caller.scope().reviewing());
    Ok((app.runs.search_threads(&query).await?, waiting))
}

/// `POST /threads/search`: threads with a record, newest first, matching
/// `metadata` (every key equal), `status` and `ids`; `offset` skipped, at
/// most `limit` (10).
pub(super) async fn search(
    State(app): State<App>,
    caller: Caller,
    JsonOrDefault(body): JsonOrDefault<SearchBody>,
) -> ApiResult<Json<Vec<wire::Thread>>> {
    let (offset, limit) = (body.offset.unwrap_or(0), body.limit.unwrap_or(10));
    let (records, waiting) = matching(&app, &caller, body, offset, limit).await?;
    // The page's threads shown a few at a time (their reads overlap on
    // the store's read connections), in the page's order.
    let views = futures_util::stream::iter(records.into_iter().map(|record| {
        let (app, waiting) = (&app, &waiting);
        async move {
            let id = record.id.clone();
            view_among(app, &id, Some(record), Some(waiting)).await
        }
    }))
    .buffered(4);
    Ok(Json(futures_util::TryStreamExt::try_collect(views).await?))
}

/// `POST /threads/count`: how many threads `threads/search` finds without
/// a limit.
pub(super) async fn count(
    State(app): State<App>,
    caller: Caller,
    JsonOrDefault(body): JsonOrDefault<SearchBody>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(matching(&app, &caller, body, 0, u64::MAX).await?.0.len())))
}

/// `POST /threads/{thread}/copy`: a new thread with the same metadata
/// and a copy of every run of the source (its whole history, checkpoint
/// for checkpoint; a paused run waits for the same decision), going on
/// apart from it. Pending runs are not copied. With `Idempotency-Key`, a
/// retry answers the copy the first request made.
pub(super) async fn copy(
    State(app): State<App>,
    caller: Caller,
    Path(thread): Path<String>,
    Keyed(key): Keyed,
) -> ApiResult<Response> {
    let fresh = new_id();
    let made = app.runs.made_once(key.as_ref(), &fresh, Makes::Thread, || async {
        app.runs.copy_thread_as(&caller, &thread, &fresh, wire::now_ms()).await?;
        Ok::<_, ApiError>(((), fresh.clone()))
    });
    let (id, replayed) = match made.await? {
        Made::Fresh(()) => (fresh, false),
        Made::Replay(made) => (made, true),
    };
    Ok(extract::replayed(Json(view(&app, &id).await?).into_response(), replayed))
}

/// The thread's state at checkpoint `step` of `run` (its latest when
/// `None`) as LangGraph's `ThreadState`.
pub(super) async fn thread_state(
    app: &App,
    thread: &str,
    at: Option<(RunId, u64)>,
) -> ApiResult<Value> {
    let (run, step) = match at {
        Some((run, step)) => (run, Some(step)),
        None => match latest(app, thread).await? {
            Some(latest) => (latest.id, None),
            None => {
                if app.runs.thread_record(thread).await?.is_none() {
                    return Err(not_found(thread));
                }
                return Ok(json!({
                    "values": {}, "next": [], "tasks": [], "interrupts": [],
                    "checkpoint": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": null},
                    "metadata": {}, "created_at": null, "parent_checkpoint": null,
                }));
            }
        },
    };
    let state = app.runs.state(run, step).await?;
    Ok(state_json(thread, &state, None, true))
}

/// A checkpoint's `metadata` as LangGraph's clients read it.
#[derive(Serialize)]
pub(super) struct CheckpointMetadata<'a> {
    source: CheckpointSource,
    step: u64,
    run_id: String,
    thread_id: &'a str,
}

impl<'a> CheckpointMetadata<'a> {
    pub(super) fn of(thread: &'a str, state: &StateSnapshot<Value>) -> Self {
        Self {
            source: state.source,
            step: state.step,
            run_id: state.run.to_string(),
            thread_id: thread,
        }
    }

    /// Whether it has every key of `wanted` with its value (a history's
    /// `metadata` filter; a key it does not have never matches).
    pub(super) fn has(&self, wanted: &Map<String, Value>) -> bool {
        wanted.iter().all(|(key, value)| {
            let mine = match key.as_str() {
                "source" => json!(self.source),
                "step" => json!(self.step),
                "run_id" => json!(self.run_id),
                "thread_id" => json!(self.thread_id),
                _ => return false,
            };
            &mine == value
        })
    }
}

/// A checkpoint's state as LangGraph's `ThreadState`; with `tasks`, the
/// tasks of the step in flight and the interrupts (the thread's head),
/// without, as a past entry of its history shows.
pub(super) fn state_json(
    thread: &str,
    state: &StateSnapshot<Value>,
    created_at: Option<&str>,
    tasks: bool,
) -> Value {
    let (run, step) = (state.run, state.step);
    // A past entry of a history shows neither.
    let (shown, asked) = match tasks {
        true => (state.tasks.as_slice(), state.interrupts.as_slice()),
        false => (&[][..], &[][..]),
    };
    let shown_tasks: Vec<Value> = shown
        .iter()
        .map(|task| {
            let interrupts: Vec<Value> = task.interrupts.iter().map(wire::interrupt).collect();
            json!({
                "id": task.id,
                "name": task.node,
                "error": task.error.as_ref().map(|error| &error.message),
                "interrupts": interrupts,
                "checkpoint": null,
                "state": null,
                "result": task.writes,
            })
        })
        .collect();
    let interrupts: Vec<Value> = asked.iter().map(wire::interrupt).collect();
    json!({
        "values": wire::values(&state.values),
        "next": state.next,
        "tasks": shown_tasks,
        "interrupts": interrupts,
        "checkpoint": wire::checkpoint(thread, run, step),
        "metadata": CheckpointMetadata::of(thread, state),
        "created_at": created_at,
        "parent_checkpoint": if step > 0 { wire::checkpoint(thread, run, step - 1) } else { Value::Null },
    })
}

#[derive(Deserialize)]
pub(super) struct StateQuery {
    #[allow(dead_code)] // Accepted: nested states are always shown in `tasks`.
    subgraphs: Option<bool>,
}

/// `GET /threads/{thread}/state`.
pub(super) async fn state(
    State(app): State<App>,
    Path(thread): Path<String>,
    Query(_query): Query<StateQuery>,
) -> ApiResult<Json<Value>> {
    Ok(Json(thread_state(&app, &thread, None).await?))
}

/// `GET /threads/{thread}/state/{checkpoint_id}`.
pub(super) async fn state_at(
    State(app): State<App>,
    Path((thread, checkpoint)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let at = wire::parse_checkpoint_id(&checkpoint).ok_or_else(|| {
        ApiError::from(ServiceError::missing(format!(
            "no checkpoint `{checkpoint}` on thread `{thread}`"
        )))
    })?;
    Ok(Json(thread_state(&app, &thread, Some(at)).await?))
}

/// What `threads.get_state` with a `checkpoint` sends; its `subgraphs`
/// and `select` are passed over, as on `GET …/state` (nested states are
/// on the run's `/runs/{id}/state`; the whole state is returned).
#[derive(Deserialize)]
pub(super) struct CheckpointBody {
    checkpoint: CheckpointRef,
}

/// A checkpoint as LangGraph's clients name one in a body.
#[derive(Deserialize)]
struct CheckpointRef {
    checkpoint_id: Option<String>,
    #[serde(default)]
    checkpoint_ns: String,
}

/// `POST /threads/{thread}/state/checkpoint` (`threads.get_state` with a
/// `checkpoint`): the state at `checkpoint.checkpoint_id`, as
/// `GET /threads/{thread}/state/{checkpoint}` shows it (the latest when
/// the checkpoint names no id). A subgraph's namespace is refused (422).
pub(super) async fn state_checkpoint(
    State(app): State<App>,
    Path(thread): Path<String>,
    JsonBody(body): JsonBody<CheckpointBody>,
) -> ApiResult<Json<Value>> {
    if !body.checkpoint.checkpoint_ns.is_empty() {
        return Err(super::unsupported_error(
            "a checkpoint of a subgraph (`checkpoint_ns`; nested states are on the run's `/runs/{id}/state`)",
        ));
    }
    let at = match body.checkpoint.checkpoint_id.as_deref() {
        None => None,
        Some(checkpoint) => Some(wire::parse_checkpoint_id(checkpoint).ok_or_else(|| {
            ApiError::from(ServiceError::missing(format!(
                "no checkpoint `{checkpoint}` on thread `{thread}`"
            )))
        })?),
    };
    Ok(Json(thread_state(&app, &thread, at).await?))
}

#[derive(Deserialize, Default)]
pub(super) struct UpdateStateBody {
    values: Option<Value>,
    as_node: Option<String>,
    checkpoint_id: Option<String>,
}

/// `POST /threads/{thread}/state`: `values` written on the latest
/// checkpoint of the thread's latest run as if `as_node` ran (see
/// `Executor::update_state`): the run must be paused, interrupted or
/// failed (a finished run is refused with 409); a past checkpoint is
/// refused. `as_node: "__end__"` ends the run there (LangGraph's way of
/// marking a thread resolved): it completes with its state as it is (or
/// with `values` written first), its pending interrupts dropped.
pub(super) async fn update_state(
    State(app): State<App>,
    Path(thread): Path<String>,
    principal: Option<Extension<Principal>>,
    JsonBody(body): JsonBody<UpdateStateBody>,
) -> ApiResult<Json<Value>> {
    let Some(latest) = latest(&app, &thread).await? else {
        return Err(not_found(&thread));
    };
    if let Some(checkpoint) = &body.checkpoint_id {
        let current = wire::checkpoint_id(latest.id, latest.step);
        if *checkpoint != current {
            return Err(super::unsupported_error("updating the state at a past checkpoint"));
        }
    }
    if latest.status.is_terminal() {
        return Err(ServiceError::conflict(format!(
                "thread `{thread}`'s latest run {} is {}: its state can no longer be updated; start a run with input",
                latest.id, latest.status
            ))
        .into());
    }
    let run = latest.id;
    let by = principal.map(|Extension(principal)| principal.name);
    if body.as_node.as_deref() == Some(END) {
        // "Resolved" (Agent Inbox): the run ends here, its pending
        // questions dropped, and the thread is idle.
        let update = body.values.filter(|values| !values.is_null());
        let write = StateWrite::Goto { update, nodes: &[] };
        let sink = Some(app.hub.sink(run));
        let continuing = app.runs.write_and_continue(run, write, by.as_deref(), sink).await?;
        let step = continuing.step;
        app.legs.wait(continuing.leg).await?;
        return Ok(Json(json!({"checkpoint": wire::checkpoint(&thread, latest.id, step)})));
    }
    let step = app
        .runs
        .update_state(
            run,
            body.values.unwrap_or_else(|| json!({})),
            body.as_node.as_deref(),
            by.as_deref(),
        )
        .await?;
    Ok(Json(json!({"checkpoint": wire::checkpoint(&thread, latest.id, step)})))
}
