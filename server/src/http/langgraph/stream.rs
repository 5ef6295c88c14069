//! The Server-Sent Events of `runs.stream` and `runs.join_stream`: a
//! run's logged events (a `Follow`) as LangGraph's stream modes.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde_json::{json, Value};
use tollgate_checkpoint::RunId;
use tollgate_engine::Event;

use super::super::App;
use super::wire;
use crate::service::{Follow, Item};

/// What a LangGraph stream is at.
struct Streaming {
    app: App,
    follow: Option<Follow>,
    modes: Vec<String>,
    /// Frames made and not yet sent.
    frames: VecDeque<SseEvent>,
    /// `end` was queued: the stream ends once the frames are sent.
    ended: bool,
}

impl Streaming {
    fn wants(&self, mode: &str) -> bool {
        self.modes.iter().any(|m| m == mode)
    }

    /// The frames one logged event makes.
    async fn frames_of(
        &mut self,
        run: RunId,
        seq: u64,
        event: &Event,
        node: Option<&str>,
        json: &str,
    ) {
        let id = seq.to_string();
        let frame = |event: &str, data: Value| {
            SseEvent::default().id(id.clone()).event(event).data(data.to_string())
        };
        if self.wants("events") || self.wants("debug") {
            let kind = if self.wants("events") { "events" } else { "debug" };
            let raw: Value = serde_json::from_str(json).unwrap_or(Value::Null);
            self.frames.push_back(frame(kind, raw));
        }
        match event {
            Event::RunStarted { from_step, .. }
            | Event::CheckpointSaved { step: from_step, .. }
                if self.wants("values") =>
            {
                if let Ok(state) = self.app.runs.state(run, Some(*from_step)).await {
                    self.frames.push_back(frame("values", wire::values(&state.values)));
                }
            }
            Event::NodeCompleted { update, .. } if self.wants("updates") => {
                let name = node.unwrap_or("").to_owned();
                self.frames.push_back(frame("updates", json!({name: wire::update(update)})));
            }
            Event::InterruptRaised { interrupt, .. }
                if self.wants("updates") || self.wants("values") =>
            {
                // As LangGraph streams a pause: in `updates`, and in
                // `values` as a chunk of its own (what `useStream` reads
                // its `interrupt` from).
                let shown = json!({"__interrupt__": [wire::interrupt(interrupt)]});
                for mode in ["updates", "values"] {
                    if self.wants(mode) {
                        self.frames.push_back(frame(mode, shown.clone()));
                    }
                }
            }
            Event::ModelDelta { agent, call_id, text, .. }
                if self.wants("messages-tuple") || self.wants("messages") =>
            {
                let chunk = json!({"type": "AIMessageChunk", "content": text, "id": call_id,
                                   "name": agent, "tool_calls": [], "additional_kwargs": {},
                                   "response_metadata": {}});
                let metadata = json!({"langgraph_node": node, "run_id": run.to_string()});
                self.frames.push_back(frame("messages", json!([chunk, metadata])));
            }
            Event::Custom { name, payload } if self.wants("custom") => {
                let _ = name;
                self.frames.push_back(frame("custom", payload.clone()));
            }
            _ => {}
        }
    }
}

/// The SSE response of a follow: `metadata` first (when `announce`), the
/// events in the modes asked for (each with its event's sequence number
/// as id, so that `Last-Event-ID` resumes after it), `end` last.
pub(super) fn sse(
    app: App,
    follow: Follow,
    modes: Vec<String>,
    announce: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let run = follow.run;
    let mut frames = VecDeque::new();
    if announce {
        let data = json!({"run_id": run.to_string(), "attempt": 1});
        frames.push_back(SseEvent::default().event("metadata").data(data.to_string()));
    }
    let state = Streaming { app, follow: Some(follow), modes, frames, ended: false };
    let stream = futures_util::stream::unfold(state, move |mut state| async move {
        loop {
            if let Some(frame) = state.frames.pop_front() {
                return Some((Ok(frame), state));
            }
            if state.ended {
                return None;
            }
            let Some(follow) = state.follow.as_mut() else {
                state.ended = true;
                let status = state.app.runs.summary(run).await.map(|s| s.status).ok();
                let data = json!({"run_id": run.to_string(),
                                  "status": status.map(wire::run_status)});
                state.frames.push_back(SseEvent::default().event("end").data(data.to_string()));
                continue;
            };
            match follow.next().await {
                Ok(Some(Item::Event(logged))) => {
                    let (seq, node) = (logged.envelope.seq, logged.envelope.node.clone());
                    let event = logged.envelope.event.clone();
                    state.frames_of(run, seq, &event, node.as_deref(), &logged.json).await;
                }
                Ok(Some(_)) => {}
                Ok(None) => state.follow = None,
                Err(error) => {
                    let data = json!({"error": "error", "message": error.to_string()});
                    state
                        .frames
                        .push_back(SseEvent::default().event("error").data(data.to_string()));
                    state.follow = None;
                }
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
