//! Live event streams: SSE, the WebSockets of a run and the `/changes`
//! feed, over a [`Follow`] of the run's log (`follow.rs`).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::ws::{
    close_code, CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade,
};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::Response;
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate_checkpoint::RunId;
use tollgate_engine::{Event, StreamMode};

use crate::error::ServiceError;
use crate::service::ServedGraph;

use super::super::errors::ApiResult;
use super::super::extract::RunPath;
use super::super::App;
use crate::service::{Follow, Item, Logged, Until};

/// A run whose owner is gone: `{"run", "owner", "message", "continue"}`
/// (over a WebSocket also `"type": "orphaned"`, the SSE event's name).
#[derive(Serialize)]
struct OrphanNotice<'a> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    run: String,
    owner: &'a str,
    message: String,
    #[serde(rename = "continue")]
    resume: String,
}

fn orphan_notice(run: RunId, owner: &str) -> OrphanNotice<'_> {
    OrphanNotice {
        kind: None,
        run: run.to_string(),
        owner,
        message: format!("run {run} is running under an owner that is gone ({owner}); nobody drives it until a worker or `tollgate runs continue {run}` takes it over"),
        resume: format!("tollgate runs continue {run}"),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    mode: Option<String>,
}

/// What an SSE stream carries: events of a stream mode, or the state
/// after each step (`values`).
#[derive(Clone, Copy)]
enum Carry {
    Events(StreamMode),
    Values,
}

/// `GET /runs/{id}/events`: Server-Sent Events, replayed from
/// `Last-Event-ID` (0 by default) and then live until no leg of the run is
/// in flight; keep-alive comments every 15 s.
pub(crate) async fn sse(
    State(app): State<App>,
    RunPath(run): RunPath,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    app.runs.summary(run).await?;
    let carry = match query.mode.as_deref() {
        Some("values") => Carry::Values,
        Some(text) => Carry::Events(text.parse::<StreamMode>().map_err(|_| {
            ServiceError::invalid(format!(
                "unknown stream mode `{text}` (values, messages, tools, updates, events, final)"
            ))
        })?),
        None => Carry::Events(StreamMode::Events),
    };
    let agent = match carry {
        Carry::Values => {
            let rebuilt =
                app.runs.blueprint_graph(run, "follow its states (mode `values`)").await?;
            Some(rebuilt.graph)
        }
        Carry::Events(_) => None,
    };
    let after = match headers.get("last-event-id").and_then(|value| value.to_str().ok()) {
        Some(text) => text.trim().parse().map_err(|_| {
            ServiceError::invalid(format!("Last-Event-ID `{text}` is not a sequence number"))
        })?,
        None => 0,
    };
    let follow = Follow::new(&app.hub, &app.runs, run, after, Until::LegEnds).await?;
    let stream = futures_util::stream::unfold(Some(follow), move |follow| {
        let agent = agent.clone();
        async move {
            let mut follow = follow?;
            loop {
                match follow.next().await {
                    Ok(Some(Item::Event(logged))) => {
                        if let Some(event) =
                            sse_event(&follow, carry, agent.as_deref(), &logged).await
                        {
                            return Some((Ok(event), Some(follow)));
                        }
                    }
                    Ok(Some(Item::Orphaned { owner })) => {
                        let data = json!(orphan_notice(follow.run, &owner)).to_string();
                        return Some((
                            Ok(SseEvent::default().event("orphaned").data(data)),
                            Some(follow),
                        ));
                    }
                    // With the id it goes back to, so that a client that
                    // reconnects resumes from there.
                    Ok(Some(Item::Rewind { after })) => {
                        let frame = SseEvent::default()
                            .id(after.to_string())
                            .event("rewind")
                            .data(json!({"after": after}).to_string());
                        return Some((Ok(frame), Some(follow)));
                    }
                    Ok(None) => return None,
                    Err(error) => {
                        let data = json!({"error": error.to_string()}).to_string();
                        // One error frame, then the stream ends.
                        return Some((Ok(SseEvent::default().event("error").data(data)), None));
                    }
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The SSE frame for one event, or `None` when the stream does not carry
/// it.
async fn sse_event(
    follow: &Follow,
    carry: Carry,
    agent: Option<&dyn ServedGraph>,
    logged: &Logged,
) -> Option<SseEvent> {
    let (envelope, json) = (&logged.envelope, logged.json.as_str());
    let frame = SseEvent::default().id(envelope.seq.to_string());
    match carry {
        Carry::Events(mode) => {
            mode.accepts(&envelope.event).then(|| frame.event(envelope.event.kind()).data(json))
        }
        Carry::Values => match (&envelope.event, agent) {
            (Event::CheckpointSaved { step, .. }, Some(agent)) => {
                let state = agent.state(follow.runs.executor(), follow.run, Some(*step)).await;
                let data = match state {
                    Ok(state) => json!({"step": step, "values": state.values}),
                    Err(error) => json!({"step": step, "error": error.to_string()}),
                };
                Some(frame.event("values").data(data.to_string()))
            }
            (Event::RunStarted { .. } | Event::RunEnded { .. }, _) => {
                Some(frame.event(envelope.event.kind()).data(json))
            }
            _ => None,
        },
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WsQuery {
    format: Option<String>,
}

/// What the WebSocket sends of each event.
#[derive(Clone, Copy)]
enum Shape {
    /// The UI shape (`nodeId`, `nodeStatus`, ...; docs/cli.md).
    Ui,
    /// The event envelopes themselves (docs/events.md).
    Events,
}

/// The subprotocol the server selects on its WebSockets. A browser cannot
/// set `Authorization` on a WebSocket, so it offers this and
/// `tollgate.token.HEX` (the token's bytes in hex) instead; see
/// `auth::require_token`.
pub(crate) const SUBPROTOCOL: &str = "tollgate";

/// `GET /runs/{id}/ws`: the stored events, then each new one, across
/// pauses, decisions and resumed legs; closes once the run is completed,
/// failed, rejected or interrupted. `?format=ui` (the default) sends
/// `full_state` and events in the UI shape; `?format=events` sends
/// `{"type": "log", "events": [...]}` and then `{"type": "event",
/// "event": ENVELOPE}` per event.
pub(crate) async fn ws(
    State(app): State<App>,
    RunPath(run): RunPath,
    Query(query): Query<WsQuery>,
    upgrade: WebSocketUpgrade,
) -> ApiResult<Response> {
    let shape = match query.format.as_deref() {
        None | Some("ui") => Shape::Ui,
        Some("events") => Shape::Events,
        Some(other) => {
            return Err(
                ServiceError::invalid(format!("unknown format `{other}` (ui, events)")).into()
            )
        }
    };
    app.runs.summary(run).await?;
    Ok(upgrade
        .protocols([SUBPROTOCOL])
        .on_upgrade(move |socket| stream_ws(app, run, shape, socket)))
}

/// One event in the socket's shape as JSON text, or `None` when the shape
/// leaves it out. The envelopes are the stored lines themselves, not
/// parsed again.
fn shaped(shape: Shape, logged: &Logged) -> Option<String> {
    match shape {
        Shape::Ui => super::wire::ui_event(&logged.envelope).map(|ui| ui.to_string()),
        Shape::Events => Some(logged.json.clone()),
    }
}

/// The message for one new event (the UI shape is its own message).
fn ws_event(shape: Shape, logged: &Logged) -> Option<String> {
    match shape {
        Shape::Ui => shaped(shape, logged),
        Shape::Events => Some(format!(r#"{{"type":"event","event":{}}}"#, logged.json)),
    }
}

async fn stream_ws(app: App, run: RunId, shape: Shape, mut socket: WebSocket) {
    let Ok(mut follow) = Follow::new(&app.hub, &app.runs, run, 0, Until::Final).await else {
        return;
    };
    // The stored log first, as one message.
    let Ok(backlog) = follow.backlog().await else { return };
    let events: Vec<String> = backlog.iter().filter_map(|logged| shaped(shape, logged)).collect();
    let kind = match shape {
        Shape::Ui => "full_state",
        Shape::Events => "log",
    };
    let first = format!(r#"{{"type":"{kind}","runId":"{run}","events":[{}]}}"#, events.join(","));
    if socket.send(WsMessage::Text(first.into())).await.is_err() {
        return;
    }
    loop {
        let message = tokio::select! {
            next = follow.next() => match next {
                Ok(Some(Item::Event(logged))) => match ws_event(shape, &logged) {
                    Some(message) => message,
                    None => continue,
                },
                Ok(Some(Item::Orphaned { owner })) => {
                    json!(OrphanNotice { kind: Some("orphaned"), ..orphan_notice(run, &owner) })
                        .to_string()
                }
                Ok(Some(Item::Rewind { after })) => {
                    json!({"type": "rewind", "runId": run.to_string(), "after": after}).to_string()
                }
                Ok(None) => break,
                // The run cannot be read any more (deleted, say): say why
                // once and close, rather than repeating it.
                Err(error) => {
                    let message = json!({"type": "error", "error": error.to_string()});
                    let _ = socket.send(WsMessage::Text(message.to_string().into())).await;
                    break;
                }
            },
            // The client left (or sent something we do not read).
            incoming = socket.recv() => match incoming {
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => continue,
            },
        };
        if socket.send(WsMessage::Text(message.into())).await.is_err() {
            return;
        }
    }
    // A normal closure (1000), so clients see the stream ended as meant.
    let close = CloseFrame { code: close_code::NORMAL, reason: "the run's stream ended".into() };
    let _ = socket.send(WsMessage::Close(Some(close))).await;
}

/// The shortest gap between two `runs_changed` messages: a burst of
/// commits is one message.
const CHANGES_GAP: Duration = Duration::from_millis(150);

/// How often `runs_changed` is sent anyway where the store gives no
/// change signal.
const CHANGES_POLL: Duration = Duration::from_secs(2);

/// `GET /changes`: a WebSocket that sends `{"type": "runs_changed"}`
/// whenever runs may have changed status in any process (at most every
/// 150 ms), so that a listing refreshes without polling; `{"type":
/// "ready"}` first.
pub(crate) async fn changes(State(app): State<App>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.protocols([SUBPROTOCOL]).on_upgrade(move |socket| feed_changes(app, socket))
}

async fn feed_changes(app: App, mut socket: WebSocket) {
    let signal = app.runs.status_changes();
    // Armed before a message goes out: a commit from then on wakes it.
    let arm = || {
        signal.clone().map(|signal| {
            let mut notified = Box::pin(signal.notified_owned());
            notified.as_mut().enable();
            notified
        })
    };
    let mut next = arm();
    let ready = json!({"type": "ready"}).to_string();
    if socket.send(WsMessage::Text(ready.into())).await.is_err() {
        return;
    }
    let changed = json!({"type": "runs_changed"}).to_string();
    loop {
        let wait = async {
            match next.as_mut() {
                Some(notified) => notified.as_mut().await,
                None => tokio::time::sleep(CHANGES_POLL).await,
            }
        };
        tokio::select! {
            () = wait => {}
            incoming = socket.recv() => match incoming {
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => continue,
            },
        }
        // Let the burst settle; what commits meanwhile is in the listing
        // the client reads next.
        tokio::time::sleep(CHANGES_GAP).await;
        next = arm();
        if socket.send(WsMessage::Text(changed.clone().into())).await.is_err() {
            return;
        }
    }
}
