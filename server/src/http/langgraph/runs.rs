//! Runs: a run with input is a new tollgate run of the assistant's graph
//! (on the thread, or without one); a run with `command.resume` is a
//! decision on the thread's paused run, which continues it. Background,
//! `wait` and `stream` answer the same start; `join`, `get`, `list`,
//! `cancel` and `delete` read and change runs.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tollgate_checkpoint::{RunId, RunStatus};
use tollgate_engine::{Decision, DecisionRequest};

use super::super::errors::{ApiError, ApiResult};
use super::super::follow::{Follow, Until};
use super::super::routes::{blueprint, read_json, run_id};
use super::super::App;
use super::assistants::{self, Assistant};
use super::resume::answers;
use super::stream::sse;
use super::threads::{self, latest};
use super::{webhook, wire};
use crate::error::ServiceError;
use crate::service::{self, Decided, Launch, Leg, RunSummary};

/// What a run is created with (the fields of LangGraph's `RunCreate` that
/// tollgate reads; the others are accepted and ignored, or refused when
/// they would change what runs: see [`RunBody::refusal`]).
#[derive(Deserialize, Default)]
pub(super) struct RunBody {
    assistant_id: Option<String>,
    input: Option<Value>,
    command: Option<CommandBody>,
    stream_mode: Option<Value>,
    interrupt_before: Option<Value>,
    interrupt_after: Option<Value>,
    webhook: Option<String>,
    multitask_strategy: Option<String>,
    if_not_exists: Option<String>,
    after_seconds: Option<f64>,
    checkpoint_id: Option<String>,
    checkpoint: Option<Value>,
    config: Option<Value>,
    context: Option<Value>,
}

/// LangGraph's `Command` as run input.
#[derive(Deserialize, Default)]
struct CommandBody {
    resume: Option<Value>,
    update: Option<Value>,
    goto: Option<Value>,
}

impl CommandBody {
    /// Whether it names where to go.
    fn moves(&self) -> bool {
        self.goto.as_ref().is_some_and(|goto| !goto.is_null())
    }

    /// The nodes of `goto`: a node's name or a list of them (a `Send`,
    /// `{"node", "arg"}`, is refused).
    fn nodes(&self) -> ApiResult<Vec<String>> {
        let named = |value: &Value| match value {
            Value::String(node) => Ok(node.clone()),
            Value::Object(send) if send.contains_key("node") => {
                Err(super::unsupported_error("`Send` in `Command(goto=…)` (name the nodes)"))
            }
            _ => Err(ServiceError::invalid("`goto` must name a node or a list of nodes").into()),
        };
        match &self.goto {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(nodes)) => nodes.iter().map(named).collect(),
            Some(node) => Ok(vec![named(node)?]),
        }
    }

    /// The state update, an object.
    fn state_update(&self) -> ApiResult<Option<Value>> {
        match &self.update {
            None | Some(Value::Null) => Ok(None),
            Some(update @ Value::Object(_)) => Ok(Some(update.clone())),
            Some(_) => {
                Err(ServiceError::invalid("`update` must be an object: the fields to write").into())
            }
        }
    }
}

impl RunBody {
    /// What of the body this server does not do (yet), as a 422.
    fn refusal(&self) -> Option<ApiError> {
        let what = if self.interrupt_before.as_ref().is_some_and(|v| v.is_string())
            || self.interrupt_after.as_ref().is_some_and(|v| v.is_string())
        {
            "`interrupt_before`/`interrupt_after` as `\"*\"` (name the nodes)"
        } else if self.multitask_strategy.as_deref() == Some("enqueue") {
            "`multitask_strategy=\"enqueue\"`"
        } else if !matches!(
            self.multitask_strategy.as_deref(),
            None | Some("reject" | "interrupt" | "rollback")
        ) {
            "a `multitask_strategy` other than `reject`, `interrupt` or `rollback`"
        } else if self.after_seconds.is_some_and(|seconds| seconds > 0.0) {
            "`after_seconds`"
        } else if self.checkpoint().is_some() && self.command.is_some() {
            "a `command` together with a checkpoint to start from"
        } else if self.command.as_ref().is_some_and(|command| {
            command.resume.is_some() && (command.moves() || command.update.is_some())
        }) {
            "`Command(resume=…)` together with `update` or `goto`"
        } else {
            return None;
        };
        Some(super::unsupported_error(what))
    }

    /// The checkpoint to start from: `checkpoint_id`, or
    /// `checkpoint.checkpoint_id`.
    fn checkpoint(&self) -> Option<&str> {
        self.checkpoint_id
            .as_deref()
            .or_else(|| self.checkpoint.as_ref().and_then(|c| c["checkpoint_id"].as_str()))
    }

    /// The stream modes asked for (`values` when none).
    fn modes(&self) -> ApiResult<Vec<String>> {
        let modes: Vec<String> = match &self.stream_mode {
            None | Some(Value::Null) => vec!["values".into()],
            Some(Value::String(mode)) => vec![mode.clone()],
            Some(Value::Array(modes)) => {
                modes.iter().filter_map(Value::as_str).map(str::to_owned).collect()
            }
            Some(_) => {
                return Err(
                    ServiceError::invalid("`stream_mode` must be a mode or a list of them").into()
                )
            }
        };
        for mode in &modes {
            if !STREAM_MODES.contains(&mode.as_str()) {
                return Err(ServiceError::invalid(format!(
                    "unknown stream mode `{mode}` (values, updates, messages-tuple, messages, custom, events, debug)"
                ))
                .into());
            }
        }
        Ok(modes)
    }
}

const STREAM_MODES: [&str; 7] =
    ["values", "updates", "messages-tuple", "messages", "custom", "events", "debug"];

/// A run started (or continued) for a request.
struct Started {
    run: RunId,
    assistant: String,
    /// The events before this start: a stream of it begins after them.
    after_seq: u64,
    /// Its leg, when this process drives it.
    leg: Option<Leg>,
}

/// Starts what `body` asks on `thread` (none: a stateless run): a new run
/// from `input`, the thread's paused run continued by `command.resume`,
/// or its interrupted run continued by no input.
async fn start(app: &App, thread: Option<&str>, body: &RunBody) -> ApiResult<Started> {
    if let Some(refusal) = body.refusal() {
        return Err(refusal);
    }
    let Some(assistant_id) = &body.assistant_id else {
        return Err(ServiceError::invalid("`assistant_id` is required").into());
    };
    let assistant = assistants::to_run(app, assistant_id).await?;
    let latest = match thread {
        Some(thread) => {
            let record =
                app.runs.store().thread_record(thread).await.map_err(ServiceError::from)?;
            let latest = latest(app, thread).await?;
            if record.is_none() && latest.is_none() {
                if body.if_not_exists.as_deref() != Some("create") {
                    return Err(threads::not_found(thread));
                }
                let record =
                    tollgate_checkpoint::ThreadRecord::new(thread, threads::now_ms(), json!({}));
                app.runs.store().create_thread(record).await.map_err(ServiceError::from)?;
            }
            latest
        }
        None => None,
    };
    if let Some(checkpoint) = body.checkpoint() {
        return checkpoint_run(app, assistant, thread, latest, checkpoint, body).await;
    }
    if let Some(resume) = body.command.as_ref().and_then(|command| command.resume.clone()) {
        let Some(latest) = latest else {
            return Err(ServiceError::Conflict {
                message: "`Command(resume=…)` needs a thread whose run waits for a decision".into(),
            }
            .into());
        };
        return resume_run(app, assistant, latest, &resume).await;
    }
    let latest = match (&latest, body.multitask_strategy.as_deref()) {
        (Some(busy), Some(strategy @ ("interrupt" | "rollback")))
            if matches!(busy.status, RunStatus::Running | RunStatus::Queued) =>
        {
            // The thread's run in flight stops (at its next step
            // boundary, its tasks dropped) before the new one starts;
            // with `rollback` it is deleted too.
            let id = run_id(&busy.id)?;
            app.runs.cancel(id).await?;
            app.legs.cancelled(id);
            app.runs.settled(id).await?;
            if strategy == "rollback" {
                app.runs.delete(id).await?;
                None
            } else {
                Some(app.runs.summary(id).await?)
            }
        }
        _ => latest,
    };
    if let Some(command) = body.command.as_ref().filter(|c| c.update.is_some() || c.moves()) {
        return command_run(app, assistant, thread, latest, command).await;
    }
    let no_input = body.input.as_ref().is_none_or(Value::is_null);
    if let Some(paused) = &latest {
        let at_breakpoints = paused.status == RunStatus::AwaitingHitl
            && paused.interrupts.iter().all(|i| i.kind == tollgate_engine::BREAKPOINT);
        if no_input && at_breakpoints {
            // LangGraph goes on from `interrupt_before`/`interrupt_after`
            // with a run without input: every breakpoint approved.
            let answers = paused.interrupts.iter().map(|i| (i.id.clone(), Decision::Approve));
            return decided(app, assistant, &paused.id, answers.collect()).await;
        }
    }
    if let Some(latest) = &latest {
        match latest.status {
            RunStatus::Running | RunStatus::Queued => {
                return Err(ServiceError::Conflict {
                    message: format!(
                        "thread `{}` is busy: run {} is {} (multitask strategy `reject`)",
                        thread.unwrap_or(""),
                        latest.id,
                        latest.status
                    ),
                }
                .into())
            }
            RunStatus::Interrupted | RunStatus::Failed if no_input => {
                // No input: the thread's stopped run goes on.
                let run = run_id(&latest.id)?;
                let after_seq = last_seq(app, run).await?;
                let leg = app.runs.continue_leg(run, Some(app.hub.sink(run))).await?;
                return Ok(Started { run, assistant: assistant.name, after_seq, leg: Some(leg) });
            }
            _ => {}
        }
    }
    let run = RunId::new();
    let names = |value: &Option<Value>| -> Vec<String> {
        value
            .as_ref()
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let launch = Launch {
        thread: thread.map(str::to_owned),
        max_steps: None,
        breakpoints: (names(&body.interrupt_before), names(&body.interrupt_after)),
    };
    let sink = Some(app.hub.sink(run));
    let input = body.input.clone().unwrap_or(Value::Null);
    let leg = match assistant.kind.as_str() {
        "blueprint" => {
            let found = blueprint(app, Value::String(assistant.name.clone())).await?;
            let mut given = service::UserInput::from_json(&input);
            if let Some(text) = wire::user_text(&input) {
                given.message = text;
            }
            // LangGraph's run context: `context`, and `config.configurable`.
            let configurable = body.config.as_ref().map(|config| &config["configurable"]);
            for values in [configurable, body.context.as_ref()].into_iter().flatten() {
                if let Value::Object(values) = values {
                    given = given.with_context(values.clone());
                }
            }
            app.runs.launch(&found, &given, launch, run, sink).await?
        }
        _ => {
            let input = if input.is_null() { json!({}) } else { input };
            app.runs.launch_graph(&assistant.name, input, launch, run, sink).await?
        }
    };
    Ok(Started { run, assistant: assistant.name, after_seq: 0, leg })
}

/// A run on `thread` from one of its checkpoints (`RUN-STEP`): with
/// input, a new run whose input is written at that checkpoint, starting
/// again from the graph's entry; without, a new run going on from there
/// with what was to run next (time travel; the runs after that
/// checkpoint stay in the thread's history). A thread busy with a run is
/// refused as with `reject`.
async fn checkpoint_run(
    app: &App,
    assistant: Assistant,
    thread: Option<&str>,
    latest: Option<RunSummary>,
    checkpoint: &str,
    body: &RunBody,
) -> ApiResult<Started> {
    let Some(thread) = thread else {
        return Err(ServiceError::invalid(
            "a checkpoint to start from belongs to a thread: give one",
        )
        .into());
    };
    let unknown = || -> ApiError {
        ServiceError::NotFound {
            message: format!("thread `{thread}` has no checkpoint `{checkpoint}`"),
        }
        .into()
    };
    let (run, step) = wire::parse_checkpoint_id(checkpoint).ok_or_else(unknown)?;
    let run = run_id(&run).map_err(|_| unknown())?;
    let source = app.runs.summary(run).await.map_err(|_| unknown())?;
    if source.thread.as_deref() != Some(thread) || step > source.step {
        return Err(unknown());
    }
    if let Some(busy) =
        latest.filter(|l| matches!(l.status, RunStatus::Running | RunStatus::Queued))
    {
        return Err(ServiceError::Conflict {
            message: format!(
                "thread `{thread}` is busy: run {} is {} (multitask strategy `reject`)",
                busy.id, busy.status
            ),
        }
        .into());
    }
    let into = RunId::new();
    let input = match body.input.clone().filter(|input| !input.is_null()) {
        Some(input) if assistant.kind == "blueprint" => {
            let Some(text) = wire::user_text(&input) else {
                return Err(ServiceError::invalid(
                    "a blueprint agent's input is `{\"messages\": [...]}` with a user message",
                )
                .into());
            };
            let message = json!({"id": format!("{into}.input"), "role": "user", "content": text});
            Some(json!({"messages": [{"upsert": message}]}))
        }
        other => other,
    };
    let sink = Some(app.hub.sink(into));
    let leg = app.runs.start_at(run, step, input, thread, into, sink).await?;
    Ok(Started { run: into, assistant: assistant.name, after_seq: 0, leg: Some(leg) })
}

/// `Command(update=…, goto=…)`: the thread's stopped or paused run gets
/// the update (as `update_state` writes it, or as `__start__` with
/// `goto`) and, with `goto`, goes to those nodes next; then it goes on.
/// A thread with no such run (none, a finished one, one in flight) is a
/// conflict: start a run with input.
async fn command_run(
    app: &App,
    assistant: Assistant,
    thread: Option<&str>,
    latest: Option<RunSummary>,
    command: &CommandBody,
) -> ApiResult<Started> {
    let stopped = latest.filter(|latest| {
        matches!(
            latest.status,
            RunStatus::AwaitingHitl | RunStatus::Interrupted | RunStatus::Failed
        )
    });
    let Some(latest) = stopped else {
        return Err(ServiceError::Conflict {
            message: format!(
                "`Command(update=…)` and `Command(goto=…)` go to a thread whose latest run is paused, interrupted or failed; thread `{}` has none (start a run with input)",
                thread.unwrap_or("")
            ),
        }
        .into());
    };
    let run = run_id(&latest.id)?;
    let update = command.state_update()?;
    if command.moves() {
        let nodes = command.nodes()?;
        let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
        app.runs.goto(run, update, &nodes, None).await?;
    } else if let Some(update) = update {
        app.runs.update_state(run, update, None, None).await?;
    }
    let after_seq = last_seq(app, run).await?;
    let leg = app.runs.continue_leg(run, Some(app.hub.sink(run))).await?;
    Ok(Started { run, assistant: assistant.name, after_seq, leg: Some(leg) })
}

/// `Command(resume=…)`: the thread's paused run decided and continued.
async fn resume_run(
    app: &App,
    assistant: Assistant,
    latest: RunSummary,
    resume: &Value,
) -> ApiResult<Started> {
    if latest.status != RunStatus::AwaitingHitl {
        return Err(ServiceError::Conflict {
            message: format!(
                "run {} is {}: there is no interrupt to resume",
                latest.id, latest.status
            ),
        }
        .into());
    }
    decided(app, assistant, &latest.id, answers(&latest.interrupts, resume)?).await
}

/// Records `answers` on paused run `run` and continues it when they were
/// the last it waited for (its leg, driven here when this process has
/// its graph).
async fn decided(
    app: &App,
    assistant: Assistant,
    run: &str,
    answers: Vec<(String, Decision)>,
) -> ApiResult<Started> {
    let run = run_id(run)?;
    let request = DecisionRequest::all(answers)
        .ok_or_else(|| ApiError::from(ServiceError::invalid("`resume` answers no interrupt")))?;
    let after_seq = last_seq(app, run).await?;
    let leg = match app.runs.decide(run, request, Some(app.hub.sink(run))).await? {
        Decided::Continuing(leg) => Some(leg),
        Decided::Settled | Decided::Recorded => None,
    };
    Ok(Started { run, assistant: assistant.name, after_seq, leg })
}

/// The run's last event: a stream of what it does next starts after it.
async fn last_seq(app: &App, run: RunId) -> ApiResult<u64> {
    Ok(app.runs.store().run(run).await.map_err(ServiceError::from)?.last_seq)
}

/// The run's outcome as `runs.wait` returns it: the values at its last
/// checkpoint, with `__interrupt__` when it waits and `__error__` when it
/// failed.
async fn outcome(app: &App, run: RunId) -> ApiResult<Value> {
    let summary = app.runs.summary(run).await?;
    let mut values = match app.runs.state(run, None).await {
        Ok(state) => wire::values(&state["values"]),
        Err(_) => summary.result.clone(),
    };
    if !summary.interrupts.is_empty() {
        let interrupts: Vec<Value> =
            summary.interrupts.iter().map(|i| wire::interrupt(&json!(i))).collect();
        values["__interrupt__"] = json!(interrupts);
    }
    if matches!(summary.status, RunStatus::Failed | RunStatus::Rejected) {
        let error = &summary.error;
        values["__error__"] = json!({"error": error["class"], "message": error["message"]});
    }
    Ok(values)
}

/// Waits until `started`'s run settles.
async fn settle(app: &App, started: Started) -> ApiResult<RunId> {
    match started.leg {
        Some(leg) => app.legs.wait(leg).await?,
        None => app.runs.settled(started.run).await?,
    }
    Ok(started.run)
}

fn location(thread: Option<&str>, run: RunId) -> HeaderValue {
    let path = match thread {
        Some(thread) => format!("/threads/{thread}/runs/{run}"),
        None => format!("/runs/{run}"),
    };
    HeaderValue::from_str(&path).unwrap_or_else(|_| HeaderValue::from_static("/runs"))
}

async fn run_json(app: &App, run: RunId, assistant: &str) -> ApiResult<Value> {
    Ok(wire::run(&app.runs.summary(run).await?, assistant))
}

/// `POST /threads/{thread}/runs` (and `POST /runs`, a stateless run):
/// started in the background.
pub(super) async fn create(
    State(app): State<App>,
    thread: Option<Path<String>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let body: RunBody = read_json(&app, body, true).await?;
    background(app, thread.map(|Path(thread)| thread), body, &headers).await
}

/// Starts what `body` asks, and its webhook once it settles.
async fn begin(
    app: &App,
    thread: Option<&str>,
    body: &RunBody,
    headers: &HeaderMap,
) -> ApiResult<Started> {
    let allowed = &app.settings.allow_webhook_hosts;
    let hook =
        body.webhook.as_deref().map(|url| webhook::checked(url, headers, allowed)).transpose()?;
    let started = start(app, thread, body).await?;
    if let Some(url) = hook {
        let assistant = started.assistant.clone();
        webhook::send_when_settled(app.clone(), started.run, url, move |app, run| async move {
            let mut body = run_json(&app, run, &assistant).await?;
            body["values"] = outcome(&app, run).await?;
            Ok(body)
        });
    }
    Ok(started)
}

async fn background(
    app: App,
    thread: Option<String>,
    body: RunBody,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let started = begin(&app, thread.as_deref(), &body, headers).await?;
    let (run, assistant) = (started.run, started.assistant.clone());
    if let Some(leg) = started.leg {
        app.legs.drive(leg);
    }
    let mut response = Json(run_json(&app, run, &assistant).await?).into_response();
    response.headers_mut().insert(header::CONTENT_LOCATION, location(thread.as_deref(), run));
    Ok(response)
}

/// `POST /threads/{thread}/runs/wait` (and `POST /runs/wait`): started
/// and waited for; the values at its end.
pub(super) async fn wait(
    State(app): State<App>,
    thread: Option<Path<String>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let body: RunBody = read_json(&app, body, true).await?;
    waited(app, thread.map(|Path(thread)| thread), body, &headers).await
}

async fn waited(
    app: App,
    thread: Option<String>,
    body: RunBody,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let started = begin(&app, thread.as_deref(), &body, headers).await?;
    let run = settle(&app, started).await?;
    let mut response = Json(outcome(&app, run).await?).into_response();
    response.headers_mut().insert(header::CONTENT_LOCATION, location(thread.as_deref(), run));
    Ok(response)
}

/// `POST /threads/{thread}/runs/stream` (and `POST /runs/stream`):
/// started, its events streamed in the modes asked for.
pub(super) async fn stream(
    State(app): State<App>,
    thread: Option<Path<String>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let body: RunBody = read_json(&app, body, true).await?;
    streamed(app, thread.map(|Path(thread)| thread), body, &headers).await
}

async fn streamed(
    app: App,
    thread: Option<String>,
    body: RunBody,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let modes = body.modes()?;
    let started = begin(&app, thread.as_deref(), &body, headers).await?;
    let (run, after) = (started.run, started.after_seq);
    let follow = Follow::new(&app, run, after, Until::LegEnds).await?;
    if let Some(leg) = started.leg {
        app.legs.drive(leg);
    }
    let mut response = sse(app, follow, modes, true).into_response();
    response.headers_mut().insert(header::CONTENT_LOCATION, location(thread.as_deref(), run));
    Ok(response)
}

/// The run `run` of `thread`, or 404 (a run of another thread included).
async fn thread_run(app: &App, thread: &str, run: &str) -> ApiResult<RunSummary> {
    let id = run_id(run).map_err(|_| run_not_found(thread, run))?;
    let summary = app.runs.summary(id).await.map_err(|_| run_not_found(thread, run))?;
    if summary.thread.as_deref() != Some(thread) {
        return Err(run_not_found(thread, run));
    }
    Ok(summary)
}

fn run_not_found(thread: &str, run: &str) -> ApiError {
    ServiceError::NotFound { message: format!("no run `{run}` on thread `{thread}`") }.into()
}

/// `GET /threads/{thread}/runs/{run}`.
pub(super) async fn get(
    State(app): State<App>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let summary = thread_run(&app, &thread, &run).await?;
    Ok(Json(wire::run(&summary, &summary.graph)))
}

#[derive(Deserialize)]
pub(super) struct ListQuery {
    limit: Option<usize>,
    offset: Option<usize>,
    status: Option<String>,
}

/// `GET /threads/{thread}/runs`: newest first.
pub(super) async fn list(
    State(app): State<App>,
    Path(thread): Path<String>,
    Query(query): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let runs = threads::thread_runs(&app, &thread).await?;
    let shown: Vec<Value> = runs
        .iter()
        .map(|summary| wire::run(summary, &summary.graph))
        .filter(|run| query.status.as_ref().is_none_or(|status| run["status"] == status.as_str()))
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
    let summary = thread_run(&app, &thread, &run).await?;
    let id = run_id(&summary.id)?;
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
    let summary = thread_run(&app, &thread, &run).await?;
    let id = run_id(&summary.id)?;
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
    let follow = Follow::new(&app, id, after, Until::LegEnds).await?;
    Ok(sse(app, follow, modes, false).into_response())
}

#[derive(Deserialize)]
pub(super) struct CancelQuery {
    wait: Option<String>,
    action: Option<String>,
}

/// `POST /threads/{thread}/runs/{run}/cancel`: cancelled wherever it is
/// driven (`interrupted`); `action=rollback` also deletes it; `wait=1`
/// waits until it stopped.
pub(super) async fn cancel(
    State(app): State<App>,
    Path((thread, run)): Path<(String, String)>,
    Query(query): Query<CancelQuery>,
) -> ApiResult<Response> {
    let summary = thread_run(&app, &thread, &run).await?;
    let id = run_id(&summary.id)?;
    if matches!(summary.status, RunStatus::Running | RunStatus::Queued) {
        app.runs.cancel(id).await?;
        app.legs.cancelled(id);
    }
    let rollback = query.action.as_deref() == Some("rollback");
    if rollback || matches!(query.wait.as_deref(), Some("1" | "true")) {
        app.runs.settled(id).await?;
    }
    if rollback {
        app.runs.delete(id).await?;
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(Json(wire::run(&app.runs.summary(id).await?, &summary.graph)).into_response())
}

/// `DELETE /threads/{thread}/runs/{run}`: a run that is not running.
pub(super) async fn delete(
    State(app): State<App>,
    Path((thread, run)): Path<(String, String)>,
) -> ApiResult<Response> {
    let summary = thread_run(&app, &thread, &run).await?;
    app.runs.delete(run_id(&summary.id)?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
