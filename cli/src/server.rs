//! `tollgate serve`: the REST API, SSE and WebSocket event streams over one
//! database (axum).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{json, Value};
use tollgate_checkpoint::{EventRecord, RunFilter, RunId, RunStatus};
use tollgate_engine::{Decision, Event, EventEnvelope, StreamMode};

use crate::error::CliError;
use crate::service::{self, Decided, Runs};

/// How often a stream looks for new events.
const POLL: Duration = Duration::from_millis(100);

#[derive(Clone)]
struct App {
    runs: Runs,
    token: Option<Arc<str>>,
}

/// A typed error as JSON: `{"error": {"kind", "message"}}`, with the HTTP
/// status of the CLI exit code of the same meaning.
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl From<CliError> for ApiError {
    fn from(error: CliError) -> Self {
        let status =
            StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self { status, kind: error.kind(), message: error.to_string() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"kind": self.kind, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// Serves until Ctrl-C. Prints `listening on http://ADDR` first, so a caller
/// that asked for port 0 learns the port.
pub(crate) async fn serve(
    runs: Runs,
    addr: SocketAddr,
    token: Option<String>,
) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|error| CliError::Failed {
        message: format!("cannot listen on {addr}: {error}"),
    })?;
    let local = listener.local_addr().map_err(|error| CliError::Failed {
        message: format!("cannot read the bound address: {error}"),
    })?;
    if !local.ip().is_loopback() && token.is_none() {
        eprintln!("tollgate: warning: serving on {local} without --token; anyone who can reach it can decide runs");
    }
    println!("listening on http://{local}");
    let app = App { runs, token: token.map(Arc::from) };
    axum::serve(listener, router(app))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|error| CliError::Failed { message: format!("server failed: {error}") })
}

fn router(app: App) -> Router {
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"ok": true})) }))
        .route("/runs", get(list))
        .route("/runs/{id}", get(show))
        .route("/runs/{id}/history", get(history))
        .route("/runs/{id}/resume", post(resume))
        .route("/runs/{id}/reject", post(reject))
        .route("/runs/{id}/events", get(events))
        .route("/runs/{id}/ws", get(ws))
        .with_state(app)
}

fn run_id(text: &str) -> ApiResult<RunId> {
    text.parse().map_err(|_| CliError::invalid(format!("`{text}` is not a run id")).into())
}

fn authorize(app: &App, headers: &HeaderMap) -> ApiResult<()> {
    let Some(token) = &app.token else { return Ok(()) };
    let given = headers.get("authorization").and_then(|value| value.to_str().ok());
    match given.and_then(|value| value.strip_prefix("Bearer ")) {
        Some(given) if given == &**token => Ok(()),
        _ => Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            kind: "unauthorized",
            message: "this endpoint needs `Authorization: Bearer TOKEN` (the server's --token)"
                .into(),
        }),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    status: Option<String>,
    graph: Option<String>,
    limit: Option<usize>,
    cursor: Option<String>,
}

async fn list(State(app): State<App>, Query(query): Query<ListQuery>) -> ApiResult<Json<Value>> {
    let status = query
        .status
        .map(|text| text.parse::<RunStatus>().map_err(|error| CliError::invalid(error.to_string())))
        .transpose()?;
    let filter = RunFilter { status, graph: query.graph, thread: None };
    let (runs, next) = app.runs.list(filter, query.limit.unwrap_or(20), query.cursor).await?;
    Ok(Json(json!({"runs": runs, "next_cursor": next})))
}

async fn show(State(app): State<App>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let summary = app.runs.summary(run_id(&id)?).await?;
    Ok(Json(serde_json::to_value(summary).unwrap_or(Value::Null)))
}

#[derive(Deserialize)]
struct HistoryQuery {
    before: Option<u64>,
    limit: Option<usize>,
}

async fn history(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> ApiResult<Json<Value>> {
    Ok(Json(app.runs.history(run_id(&id)?, query.before, query.limit.unwrap_or(20)).await?))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    interrupt: Option<String>,
    decision: String,
    value: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RejectBody {
    interrupt: Option<String>,
    reason: Option<String>,
}

fn body<T: serde::de::DeserializeOwned + Default>(bytes: &Bytes, required: bool) -> ApiResult<T> {
    if bytes.iter().all(u8::is_ascii_whitespace) && !required {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes)
        .map_err(|error| CliError::invalid(format!("bad request body: {error}")).into())
}

async fn resume(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Json<Value>> {
    authorize(&app, &headers)?;
    let run = run_id(&id)?;
    let body: ResumeBody = body(&bytes, true)?;
    let decision = match (body.decision.as_str(), body.value) {
        ("approve", None) => Decision::Approve,
        ("edit", Some(value)) => Decision::Edit { value },
        ("respond", Some(value)) => Decision::Respond { value },
        ("approve", Some(_)) => return Err(CliError::invalid("`approve` takes no value").into()),
        ("edit" | "respond", None) => {
            return Err(CliError::invalid("`edit` and `respond` need a `value`").into())
        }
        (other, _) => {
            return Err(CliError::invalid(format!(
                "unknown decision `{other}` (approve, edit, respond; reject has its own endpoint)"
            ))
            .into())
        }
    };
    decided(&app, run, body.interrupt, decision).await
}

async fn reject(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Json<Value>> {
    authorize(&app, &headers)?;
    let run = run_id(&id)?;
    let body: RejectBody = body(&bytes, false)?;
    decided(&app, run, body.interrupt, Decision::Reject { reason: body.reason }).await
}

/// Records the decision; a blueprint run continues in the background and
/// the answer is the run as it stands (`running`).
async fn decided(
    app: &App,
    run: RunId,
    interrupt: Option<String>,
    decision: Decision,
) -> ApiResult<Json<Value>> {
    if let Decided::Continuing(handle) = app.runs.decide(run, interrupt, decision, None).await? {
        tokio::spawn(async move {
            if let Err(error) = handle.wait().await {
                eprintln!("tollgate: run {run} failed: {error}");
            }
        });
    }
    let summary = app.runs.summary(run).await?;
    Ok(Json(serde_json::to_value(summary).unwrap_or(Value::Null)))
}

/// Reads a run's events from the store as they arrive: stored ones after
/// `after` first, then new ones, until the run's leg is over and its
/// closing event delivered.
struct Tail {
    runs: Runs,
    run: RunId,
    after: u64,
    pending: VecDeque<EventRecord>,
}

impl Tail {
    fn new(runs: Runs, run: RunId, after: u64) -> Self {
        Self { runs, run, after, pending: VecDeque::new() }
    }

    /// The next event, or `None` once the run's leg is over.
    async fn next(&mut self) -> Result<Option<EventRecord>, CliError> {
        loop {
            if let Some(record) = self.pending.pop_front() {
                self.after = record.seq;
                return Ok(Some(record));
            }
            let batch = self.runs.events(self.run, self.after, 500).await?;
            if !batch.is_empty() {
                self.pending.extend(batch);
                continue;
            }
            let record = self.runs.store().run(self.run).await?;
            let in_flight = matches!(record.status, RunStatus::Running | RunStatus::Queued);
            if !in_flight && record.last_seq <= self.after {
                return Ok(None);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[derive(Deserialize)]
struct EventsQuery {
    mode: Option<String>,
}

async fn events(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    let run = run_id(&id)?;
    app.runs.summary(run).await?;
    let mode = match query.mode {
        Some(text) => text.parse::<StreamMode>().map_err(CliError::invalid)?,
        None => StreamMode::Events,
    };
    let after = match headers.get("last-event-id").and_then(|value| value.to_str().ok()) {
        Some(text) => text.trim().parse().map_err(|_| {
            CliError::invalid(format!("Last-Event-ID `{text}` is not a sequence number"))
        })?,
        None => 0,
    };
    let tail = Tail::new(app.runs.clone(), run, after);
    let stream = futures_util::stream::unfold(tail, move |mut tail| async move {
        loop {
            match tail.next().await {
                Ok(Some(record)) => {
                    let Ok(envelope) = service::parse(&record) else { continue };
                    if !mode.accepts(&envelope.event) {
                        continue;
                    }
                    let event = SseEvent::default()
                        .id(record.seq.to_string())
                        .event(envelope.event.kind())
                        .data(record.json);
                    return Some((Ok(event), tail));
                }
                Ok(None) => return None,
                Err(error) => {
                    let event = SseEvent::default()
                        .event("error")
                        .data(json!({"error": error.to_string()}).to_string());
                    // One error frame, then the stream ends.
                    tail.after = u64::MAX;
                    tail.pending.clear();
                    return Some((Ok(event), tail));
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

async fn ws(
    State(app): State<App>,
    Path(id): Path<String>,
    upgrade: WebSocketUpgrade,
) -> ApiResult<Response> {
    let run = run_id(&id)?;
    app.runs.summary(run).await?;
    Ok(upgrade.on_upgrade(move |socket| stream_ws(app.runs, run, socket)))
}

/// `full_state` with the stored events, then each new event, in the UI
/// shape; closes after the run's leg ended.
async fn stream_ws(runs: Runs, run: RunId, mut socket: WebSocket) {
    let stored = match runs.events(run, 0, usize::MAX).await {
        Ok(stored) => stored,
        Err(_) => return,
    };
    let after = stored.last().map_or(0, |record| record.seq);
    let events: Vec<Value> =
        stored.iter().filter_map(|r| service::parse(r).ok()).filter_map(|e| ui_event(&e)).collect();
    let full = json!({"type": "full_state", "runId": run.to_string(), "events": events});
    if socket.send(WsMessage::Text(full.to_string().into())).await.is_err() {
        return;
    }
    let mut tail = Tail::new(runs, run, after);
    while let Ok(Some(record)) = tail.next().await {
        let Some(ui) = service::parse(&record).ok().and_then(|e| ui_event(&e)) else { continue };
        if socket.send(WsMessage::Text(ui.to_string().into())).await.is_err() {
            return;
        }
    }
    let _ = socket.send(WsMessage::Close(None)).await;
}

/// One event in the UI shape of the WebSocket contract: `nodeId`,
/// `currentNode`, `nodeStatus` (started|running|ended), `executionType`
/// (agent|tool|run), `toolName`, `plainTextMessage`. Checkpoints and
/// middleware hooks are not shown.
pub(crate) fn ui_event(envelope: &EventEnvelope) -> Option<Value> {
    let node = envelope.node.clone().unwrap_or_else(|| "run".into());
    let node_id = envelope.node_id.clone().unwrap_or_else(|| "run".into());
    let (status, kind, tool, text, extra): (&str, &str, Option<&str>, String, Value) =
        match &envelope.event {
            Event::RunStarted { graph, from_step, .. } => {
                ("started", "run", None, format!("{graph} from step {from_step}"), json!({}))
            }
            Event::RunEnded { status, result, error, interrupts, .. } => (
                "ended",
                "run",
                None,
                match error {
                    Some(error) => format!("{status}: {}", error.message),
                    None => status.to_string(),
                },
                json!({"runStatus": status, "result": result, "error": error, "interrupts": interrupts}),
            ),
            Event::NodeStarted { .. } => ("started", "agent", None, String::new(), json!({})),
            Event::NodeCompleted { .. } => ("ended", "agent", None, String::new(), json!({})),
            Event::NodeFailed { error, .. } => {
                ("ended", "agent", None, error.clone(), json!({"error": error}))
            }
            Event::RetryScheduled { error, delay_ms, .. } => {
                ("running", "agent", None, format!("retrying in {delay_ms} ms: {error}"), json!({}))
            }
            Event::InterruptRaised { interrupt, .. } => (
                "running",
                "agent",
                None,
                format!("waiting for a decision: {}", interrupt.kind),
                json!({"interrupt": interrupt}),
            ),
            Event::RunResumed { .. } => ("running", "run", None, "resumed".into(), json!({})),
            Event::ModelStarted { agent, model, call_id, attempt } => (
                "running",
                "agent",
                None,
                format!("calling {model}"),
                json!({"agentId": agent, "callId": call_id, "attempt": attempt}),
            ),
            Event::ModelDelta { agent, text, call_id, attempt } => (
                "running",
                "agent",
                None,
                text.clone(),
                json!({"agentId": agent, "callId": call_id, "attempt": attempt}),
            ),
            Event::ModelCompleted { agent, message, .. } => (
                "running",
                "agent",
                None,
                message["content"].as_str().unwrap_or_default().to_owned(),
                json!({"agentId": agent}),
            ),
            Event::ToolStarted { agent, tool, call_id, .. } => (
                "started",
                "tool",
                Some(tool.as_str()),
                format!("calling {tool}"),
                json!({"agentId": agent, "callId": call_id}),
            ),
            Event::ToolDelta { agent, call_id, line, .. } => (
                "running",
                "tool",
                None,
                line.clone(),
                json!({"agentId": agent, "callId": call_id}),
            ),
            Event::ToolCompleted { agent, tool, ok, summary, call_id, .. } => (
                "ended",
                "tool",
                Some(tool.as_str()),
                summary.clone(),
                json!({"agentId": agent, "callId": call_id, "ok": ok}),
            ),
            Event::Custom { name, payload } => {
                ("running", "agent", None, name.clone(), json!({"payload": payload}))
            }
            _ => return None,
        };
    let mut ui = json!({
        "seq": envelope.seq,
        "ts": envelope.ts,
        "runId": envelope.run_id.to_string(),
        "eventType": envelope.event.kind(),
        "nodeId": node_id,
        "currentNode": node,
        "nodeStatus": status,
        "executionType": kind,
        "toolName": tool,
        "plainTextMessage": text,
    });
    if let (Some(ui), Some(extra)) = (ui.as_object_mut(), extra.as_object()) {
        ui.extend(extra.clone());
    }
    Some(ui)
}
