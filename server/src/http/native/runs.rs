//! The REST endpoints (docs/openapi.yaml).

use std::collections::BTreeSet;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tollgate_checkpoint::{RunFilter, RunId, RunStatus};
use tollgate_engine::{Decision, DecisionRequest};
use tollgate_nodes::Blueprint;

use crate::error::ServiceError;
use crate::identity::Caller;
use crate::service::{self, Decided, GraphListing, Launch, Leg, Made, Makes};

use super::super::errors::{ApiError, ApiResult};
use super::super::extract::{
    self as extract, run_id, JsonBody, JsonOrDefault, KeyedJson, KeyedJsonOrDefault, RunPath,
};
use super::super::{App, Principal};
use super::wire;

/// `GET /healthz`: the server is up (`ok`, always 200: a database that is
/// away needs no restart of the server); `status` `degraded`, with the
/// database's error, when a probe of the store fails or takes more than
/// [`HEALTH_PROBE`].
pub(crate) async fn health(State(app): State<App>) -> Json<Value> {
    let probe = tokio::time::timeout(HEALTH_PROBE, app.runs.probe()).await;
    let database = match probe {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some(format!("no answer within {} s", HEALTH_PROBE.as_secs())),
    };
    Json(match database {
        None => json!({"ok": true, "status": "ok", "database": "ok"}),
        Some(error) => {
            json!({"ok": true, "status": "degraded", "database": format!("unavailable: {error}")})
        }
    })
}

/// How long `/healthz` waits for the store.
const HEALTH_PROBE: std::time::Duration = std::time::Duration::from_secs(2);

fn summary_json(summary: &service::RunSummary) -> Json<Value> {
    Json(serde_json::to_value(summary).unwrap_or(Value::Null))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    status: Option<String>,
    graph: Option<String>,
    thread: Option<String>,
    limit: Option<u64>,
    cursor: Option<String>,
}

pub(crate) async fn list(
    State(app): State<App>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let status = query
        .status
        .map(|text| {
            text.parse::<RunStatus>()
                .map_err(|error| ServiceError::invalid(error.to_string()).with_source(error))
        })
        .transpose()?;
    let filter = RunFilter {
        status,
        graph: query.graph,
        thread: query.thread,
        held_by: caller.scope().holder(),
        reviewed_by: caller.scope().reviewing(),
    };
    let listing = app.runs.list(filter, query.limit.unwrap_or(20), query.cursor).await?;
    Ok(Json(super::wire::listing_json(&listing)))
}

pub(crate) async fn show(State(app): State<App>, RunPath(run): RunPath) -> ApiResult<Json<Value>> {
    Ok(summary_json(&app.runs.show(run).await?))
}

pub(crate) async fn delete(
    State(app): State<App>,
    RunPath(run): RunPath,
) -> ApiResult<Json<Value>> {
    app.runs.delete(run).await?;
    Ok(Json(json!({"id": run.to_string(), "deleted": true})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateQuery {
    step: Option<u64>,
}

pub(crate) async fn state(
    State(app): State<App>,
    RunPath(run): RunPath,
    Query(query): Query<StateQuery>,
) -> ApiResult<Json<Value>> {
    Ok(Json(wire::state_json(&app.runs.state(run, query.step).await?)))
}

/// `GET /threads/{thread}`: the thread's latest run and the state its
/// next run starts from.
pub(crate) async fn thread(
    State(app): State<App>,
    Path(thread): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(wire::thread_json(&app.runs.thread(&thread).await?)))
}

/// `GET /threads/{thread}/storage`: what the thread's runs occupy in the
/// store (their number, the bytes of their checkpoints and events).
pub(crate) async fn thread_storage(
    State(app): State<App>,
    Path(thread): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(wire::thread_storage_json(&thread, &app.runs.thread_storage(&thread).await?)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct PruneBody {
    strategy: Option<String>,
}

/// `POST /threads/{thread}/prune`: with strategy `keep_latest` the
/// thread keeps its latest run alone; with `delete` (the default) it is
/// deleted whole (a run in flight cancelled first). 404 for a thread with
/// neither a record nor a run; `{"thread", "strategy", "pruned": true}`.
pub(crate) async fn prune_thread(
    State(app): State<App>,
    Path(thread): Path<String>,
    JsonOrDefault(body): JsonOrDefault<PruneBody>,
) -> ApiResult<Json<Value>> {
    let name = body.strategy.as_deref().unwrap_or("delete");
    let strategy = service::PruneStrategy::named(name)?;
    let threads = [thread.clone()];
    if app.runs.prune_threads_with(&app.legs, &threads, strategy).await?.is_empty() {
        return Err(service::thread_not_found(&thread).into());
    }
    Ok(Json(json!({"thread": thread, "strategy": name, "pruned": true})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GraphQuery {
    open: Option<String>,
}

/// `GET /runs/{id}/graph`: the run's graph as nodes and edges, and its
/// `layout`, a layered drawing with the subgraph nodes named in `open`
/// (paths, comma-separated) drawn open.
pub(crate) async fn graph(
    State(app): State<App>,
    RunPath(run): RunPath,
    Query(query): Query<GraphQuery>,
) -> ApiResult<Json<wire::Drawn>> {
    let outline = app.runs.graph(run).await?;
    let open: BTreeSet<String> = query
        .open
        .iter()
        .flat_map(|open| open.split(','))
        .map(str::trim)
        .filter(|path| !path.is_empty())
        .map(str::to_owned)
        .collect();
    let layout = super::super::page::draw(&outline, &open).to_json();
    Ok(Json(wire::Drawn { outline, layout }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ThreadHistoryQuery {
    before: Option<u64>,
    limit: Option<u64>,
}

/// `GET /threads/{thread}/history`: the thread's checkpoints across all
/// its runs, newest first, numbered from its first run's input.
pub(crate) async fn thread_history(
    State(app): State<App>,
    Path(thread): Path<String>,
    Query(query): Query<ThreadHistoryQuery>,
) -> ApiResult<Json<Value>> {
    let limit = query.limit.unwrap_or(20);
    Ok(Json(wire::thread_history_json(
        &thread,
        &app.runs.thread_history(&thread, query.before, limit).await?,
    )))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    before: Option<u64>,
    limit: Option<u64>,
    values: Option<bool>,
}

pub(crate) async fn history(
    State(app): State<App>,
    RunPath(run): RunPath,
    Query(query): Query<HistoryQuery>,
) -> ApiResult<Json<Value>> {
    let limit = query.limit.unwrap_or(20);
    let values = query.values.unwrap_or(false);
    Ok(Json(wire::run_history_json(&app.runs.history(run, query.before, limit, values).await?)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeBody {
    interrupt: Option<String>,
    decision: Option<String>,
    value: Option<Value>,
    by: Option<String>,
    /// Several interrupts at once: id -> decision as the engine writes it
    /// (`{"decision": "approve"}`, `{"decision": "reject", "reason": …}`).
    answers: Option<serde_json::Map<String, Value>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RejectBody {
    interrupt: Option<String>,
    reason: Option<String>,
    by: Option<String>,
}

/// The decision request as the caller makes it: a caller known by name
/// (named tokens, a service's check) decides as itself, and a free-text
/// `by` becomes a note beside the decision; otherwise `by` names who
/// decides, as the caller says.
fn as_caller(request: DecisionRequest, principal: Option<Extension<Principal>>) -> DecisionRequest {
    let Some(Extension(principal)) = principal else { return request };
    let note = request.by.clone().filter(|by| *by != principal.name);
    let request = DecisionRequest { by: None, ..request }.by(principal.name);
    match note {
        Some(note) => request.note(note),
        None => request,
    }
}

pub(crate) async fn resume(
    State(app): State<App>,
    RunPath(run): RunPath,
    principal: Option<Extension<Principal>>,
    JsonBody(body): JsonBody<ResumeBody>,
) -> ApiResult<Json<Value>> {
    if let Some(answers) = body.answers {
        if body.decision.is_some() || body.interrupt.is_some() || body.value.is_some() {
            return Err(ServiceError::invalid(
                "give either `answers` or `decision` (with `interrupt` and `value`), not both",
            )
            .into());
        }
        let mut decisions = Vec::with_capacity(answers.len());
        for (id, answer) in answers {
            let decision: Decision = serde_json::from_value(answer).map_err(|error| {
                ServiceError::invalid(format!("answer to `{id}` is not a decision: {error}"))
            })?;
            decisions.push((id, decision));
        }
        let request = DecisionRequest::all(decisions)
            .ok_or_else(|| ServiceError::invalid("`answers` is empty"))?;
        let request = match body.by.filter(|by| !by.trim().is_empty()) {
            Some(by) => request.by(by.trim()),
            None => request,
        };
        return decided(&app, run, as_caller(request, principal)).await;
    }
    let Some(kind) = body.decision else {
        return Err(ServiceError::invalid("`decision` (or `answers`) is required").into());
    };
    let decision = match (kind.as_str(), body.value) {
        ("approve", None) => Decision::Approve,
        ("edit", Some(value)) => Decision::Edit { value },
        ("respond", Some(value)) => Decision::Respond { value },
        ("approve", Some(_)) => {
            return Err(ServiceError::invalid("`approve` takes no value").into())
        }
        ("edit" | "respond", None) => {
            return Err(ServiceError::invalid("`edit` and `respond` need a `value`").into())
        }
        (other, _) => {
            return Err(ServiceError::invalid(format!(
                "unknown decision `{other}` (approve, edit, respond; reject has its own endpoint)"
            ))
            .into())
        }
    };
    let request = service::decision_request(body.interrupt, decision, body.by);
    decided(&app, run, as_caller(request, principal)).await
}

pub(crate) async fn reject(
    State(app): State<App>,
    RunPath(run): RunPath,
    principal: Option<Extension<Principal>>,
    JsonOrDefault(body): JsonOrDefault<RejectBody>,
) -> ApiResult<Json<Value>> {
    let decision = Decision::Reject { reason: body.reason };
    let request = service::decision_request(body.interrupt, decision, body.by);
    decided(&app, run, as_caller(request, principal)).await
}

/// `GET /me`: who the server takes the caller for: `{"name", "role"}`
/// (`name` null when the server knows no names: one token, or none).
pub(crate) async fn me(principal: Option<Extension<Principal>>) -> Json<Value> {
    Json(match principal {
        Some(Extension(principal)) => json!(principal),
        None => json!({"name": null, "role": "admin"}),
    })
}

/// Records the decision; a blueprint run continues here in the
/// background, its events going to live subscribers, and the answer is the
/// run as it stands (`running`).
async fn decided(app: &App, run: RunId, request: DecisionRequest) -> ApiResult<Json<Value>> {
    let sink = app.hub.sink(run);
    if let Decided::Continuing(handle) = app.runs.decide(run, request, Some(sink)).await? {
        app.legs.drive(handle);
    }
    Ok(summary_json(&app.runs.summary(run).await?))
}

pub(crate) async fn cancel(
    State(app): State<App>,
    RunPath(run): RunPath,
) -> ApiResult<Json<Value>> {
    let summary = app.runs.stop(&app.legs, run).await?;
    Ok(summary_json(&summary))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitQuery {
    wait: Option<bool>,
}

/// `POST /runs/{id}/continue`: continues an interrupted or failed blueprint
/// run, or one whose owner died, here; answers at once (`running`), or
/// when the leg ends with `?wait=true`.
pub(crate) async fn resume_leg(
    State(app): State<App>,
    RunPath(run): RunPath,
    Query(query): Query<WaitQuery>,
) -> ApiResult<Json<Value>> {
    let handle = app.runs.continue_leg(run, Some(app.hub.sink(run))).await?;
    app.legs.wait_or_drive(handle, query.wait.unwrap_or(false)).await?;
    Ok(summary_json(&app.runs.summary(run).await?))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateStateBody {
    values: Value,
    as_node: Option<String>,
    by: Option<String>,
}

/// Who asks for a state update or fork: a caller known by name (named
/// tokens, a service's check) as itself, otherwise the body's `by`.
fn asker(principal: Option<Extension<Principal>>, by: Option<String>) -> Option<String> {
    principal.map(|Extension(principal)| principal.name).or(by)
}

/// `POST /runs/{id}/state`: `values` (an update of the run's state)
/// written on its latest checkpoint as if `as_node` ran
/// (`Executor::update_state`), a new checkpoint; the run is left
/// `interrupted`, ready to be continued. Refused while it runs (409) and
/// once it is finished. Recorded with who asked (see [`asker`]).
pub(crate) async fn update_state(
    State(app): State<App>,
    RunPath(run): RunPath,
    principal: Option<Extension<Principal>>,
    JsonBody(body): JsonBody<UpdateStateBody>,
) -> ApiResult<Json<Value>> {
    if !body.values.is_object() {
        return Err(ServiceError::invalid("`values` must be an object: the fields to write").into());
    }
    let by = asker(principal, body.by);
    let step =
        app.runs.update_state(run, body.values, body.as_node.as_deref(), by.as_deref()).await?;
    let summary = app.runs.summary(run).await?;
    Ok(Json(json!({"step": step, "run": summary_json(&summary).0})))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkBody {
    step: Option<u64>,
    values: Option<Value>,
    by: Option<String>,
}

/// `POST /runs/{id}/fork`: a new run from checkpoint `step` (the latest
/// when absent) of the run, with `values` merged through the reducers,
/// driven here; 201 with the new run, at once or, with `?wait=true`, when
/// its leg ends. The source run is unchanged. Recorded with who asked
/// (see [`asker`]).
pub(crate) async fn fork(
    State(app): State<App>,
    RunPath(run): RunPath,
    Query(query): Query<WaitQuery>,
    principal: Option<Extension<Principal>>,
    KeyedJsonOrDefault { body, key }: KeyedJsonOrDefault<ForkBody>,
) -> ApiResult<Response> {
    if body.values.as_ref().is_some_and(|values| !values.is_object()) {
        return Err(ServiceError::invalid("`values` must be an object: the fields to write").into());
    }
    let into = RunId::new();
    let fresh = into.to_string();
    let by = asker(principal, body.by);
    let made = app.runs.made_once(key.as_ref(), &fresh, Makes::Run, || async {
        let sink = Some(app.hub.sink(into));
        let leg = app.runs.fork(run, body.step, body.values, into, sink, by.as_deref()).await?;
        Ok::<_, ApiError>((Some(leg), fresh.clone()))
    });
    created(&app, made.await?, into, query.wait.unwrap_or(false), true).await
}

/// 201 with the run a request made (its leg driven here, or waited for
/// with `wait`), or, for a request retried with its `Idempotency-Key`,
/// the run the first one made (waited for to settle with `wait`; marked
/// `Idempotent-Replayed: true`). With `origin`, the view says where the
/// run was forked from ([`Runs::show`](crate::Runs::show)).
async fn created(
    app: &App,
    made: Made<Option<Leg>>,
    fresh: RunId,
    wait: bool,
    origin: bool,
) -> ApiResult<Response> {
    let (run, replayed) = match made {
        Made::Fresh(handle) => {
            match (handle, wait) {
                (Some(handle), wait) => app.legs.wait_or_drive(handle, wait).await?,
                (None, true) => app.runs.settled(fresh).await?,
                (None, false) => {}
            }
            (fresh, false)
        }
        Made::Replay(made) => {
            let run = run_id(&made)?;
            if wait {
                app.runs.settled(run).await?;
            }
            (run, true)
        }
    };
    let summary = if origin { app.runs.show(run).await? } else { app.runs.summary(run).await? };
    Ok(extract::replayed((StatusCode::CREATED, summary_json(&summary)).into_response(), replayed))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    blueprint: Option<Value>,
    graph: Option<String>,
    #[serde(default)]
    input: Value,
    thread: Option<String>,
    max_steps: Option<u64>,
}

/// `POST /runs`: starts a run of a blueprint (inline, or by name from
/// `--blueprints`) or of a registered graph (`graph`, its newest
/// version). Answers 201 once the run is stored (driven here on SQLite,
/// queued for workers on Postgres), or when its leg ends with
/// `?wait=true`. With `Idempotency-Key`, a retry of the same request
/// answers the run the first one started (`Idempotent-Replayed: true`),
/// and never starts a second.
pub(crate) async fn create(
    State(app): State<App>,
    caller: Caller,
    Query(query): Query<WaitQuery>,
    KeyedJson { body, key }: KeyedJson<CreateBody>,
) -> ApiResult<Response> {
    if body.max_steps == Some(0) {
        return Err(ServiceError::invalid("`max_steps` must be at least 1").into());
    }
    if body.thread.as_deref().is_some_and(|thread| thread.trim().is_empty()) {
        return Err(ServiceError::invalid("`thread` must not be empty").into());
    }
    let run = RunId::new();
    let fresh = run.to_string();
    let made = app.runs.made_once(key.as_ref(), &fresh, Makes::Run, || async {
        let body = owned(&app, &caller, body, run).await?;
        let handle = launch(&app, &caller, body, run).await?;
        Ok::<_, ApiError>((handle, fresh.clone()))
    });
    created(&app, made.await?, run, query.wait.unwrap_or(false), false).await
}

/// The request as a caller who reaches less than everything makes it:
/// on a thread of theirs (the one named, made theirs when new; without
/// one, a new thread named by the run's id), so that they find the run
/// again.
async fn owned(app: &App, caller: &Caller, body: CreateBody, run: RunId) -> ApiResult<CreateBody> {
    if !caller.is_restricted() {
        return Ok(body);
    }
    let thread = body.thread.clone().unwrap_or_else(|| run.to_string());
    app.runs.claim_thread(caller, &thread).await?;
    Ok(CreateBody { thread: Some(thread), ..body })
}

/// Stores the run `body` asks for as `run`: its leg when driven here.
async fn launch(
    app: &App,
    caller: &Caller,
    body: CreateBody,
    run: RunId,
) -> ApiResult<Option<Leg>> {
    let launch = Launch {
        thread: body.thread,
        max_steps: body.max_steps,
        memory_shelf: caller.shelf(),
        ..Launch::default()
    };
    let sink = Some(app.hub.sink(run));
    Ok(match (body.blueprint, body.graph) {
        (Some(given), None) => {
            let blueprint = blueprint(app, given).await?;
            let input = service::UserInput::from_json(&body.input);
            app.runs.launch(&blueprint, &input, launch, run, sink).await?
        }
        (None, Some(name)) => app.runs.launch_graph(&name, body.input, launch, run, sink).await?,
        _ => {
            return Err(ServiceError::invalid(
                "give `blueprint` (a blueprint's JSON or the name of one the server has) or `graph` (the name of a graph the server serves), one of them",
            )
            .into())
        }
    })
}

/// `GET /graphs`: what this server can start: its registered graphs and
/// the blueprints of its `--blueprints` folder, each `{"name", "version",
/// "versions", "kind", "input_schema", "outline"}` (read off the request
/// path's workers).
pub(crate) async fn graphs(State(app): State<App>) -> ApiResult<Json<Value>> {
    let (graphs, invalid) = app.settings.admission.listing(&app.runs).await?;
    Ok(Json(json!({"graphs": graphs, "invalid": invalid})))
}

/// `GET /graphs/{name}`: one of them.
pub(crate) async fn graph_named(
    State(app): State<App>,
    Path(name): Path<String>,
) -> ApiResult<Json<GraphListing>> {
    app.runs
        .graphs()
        .described(&name)
        .map(Json)
        .ok_or_else(|| ServiceError::missing(format!("this server has no graph `{name}`")).into())
}

/// The blueprint a request names, as the server admits it.
pub(crate) async fn blueprint(app: &App, given: Value) -> ApiResult<Blueprint> {
    Ok(app.settings.admission.blueprint(given).await?)
}
