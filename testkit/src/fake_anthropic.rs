//! A fake Anthropic Messages API (feature `provider-suite`): answers
//! `POST /v1/messages` with scripted replies in the real wire format (a
//! message as JSON, or its SSE events) and records every request, with
//! its `x-api-key` and `anthropic-version` headers.

use std::time::Duration;

use serde_json::{json, Value};

pub use crate::fake_http::Recorded;
use crate::fake_http::{Answer, FakeHttp};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A JSON body with a status and extra headers.
    Json {
        /// HTTP status.
        status: u16,
        /// Extra headers (`retry-after`, ...).
        headers: Vec<(String, String)>,
        /// The body.
        body: Value,
    },
    /// A stream of SSE events `(event name, data)`, in order, `delay`
    /// before each. The data is sent as it is (JSON text, or anything, to
    /// test malformed streams). With `cut`, the connection drops after
    /// the last one.
    Events {
        /// The events.
        events: Vec<(String, String)>,
        /// Pause before each.
        delay: Duration,
        /// Drop the connection after the last event.
        cut: bool,
    },
    /// Never answers (for timeouts and cancellation).
    Hang,
}

/// The usage every scripted message reports: 11 in, 7 out, 5 read from
/// the cache and 3 written to it.
pub fn usage() -> Value {
    json!({"input_tokens": 11, "output_tokens": 7, "cache_read_input_tokens": 5,
           "cache_creation_input_tokens": 3})
}

/// A complete message with these content blocks.
pub fn message(content: Value, stop_reason: &str) -> Value {
    json!({"id": "msg_fake", "type": "message", "role": "assistant", "model": "fake-claude",
           "content": content, "stop_reason": stop_reason, "stop_sequence": null,
           "usage": usage()})
}

impl Reply {
    /// A 200 message with text.
    pub fn text(text: &str) -> Self {
        Self::message(json!([{"type": "text", "text": text}]), "end_turn")
    }

    /// A 200 message with these content blocks.
    pub fn message(content: Value, stop_reason: &str) -> Self {
        Reply::Json { status: 200, headers: Vec::new(), body: message(content, stop_reason) }
    }

    /// A 200 message calling tools: `(id, name, input)`.
    pub fn tool_uses(calls: &[(&str, &str, Value)]) -> Self {
        let blocks: Vec<Value> = calls
            .iter()
            .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}))
            .collect();
        Self::message(Value::Array(blocks), "tool_use")
    }

    /// An error status with Anthropic's error body (`{"type": "error",
    /// "error": {"type", "message"}}`).
    pub fn error(status: u16, kind: &str, message: &str) -> Self {
        Reply::Json {
            status,
            headers: Vec::new(),
            body: json!({"type": "error", "error": {"type": kind, "message": message}}),
        }
    }

    /// A stream of these events, ended normally.
    pub fn events(events: Vec<(String, Value)>) -> Self {
        let events = events.into_iter().map(|(name, data)| (name, data.to_string())).collect();
        Reply::Events { events, delay: Duration::ZERO, cut: false }
    }

    /// These events, then the connection dropped (no `message_stop`).
    pub fn cut(events: Vec<(String, Value)>) -> Self {
        let events = events.into_iter().map(|(name, data)| (name, data.to_string())).collect();
        Reply::Events { events, delay: Duration::ZERO, cut: true }
    }

    /// A streamed message of text pieces: `message_start`, one text block
    /// with a delta per piece (and a `ping` between), `message_delta` with
    /// the stop reason and usage, `message_stop`.
    pub fn stream_text(pieces: &[&str]) -> Self {
        let mut events = vec![start(), ping(), block_start(0, json!({"type": "text", "text": ""}))];
        events.extend(pieces.iter().map(|piece| text_delta(0, piece)));
        events.extend([block_stop(0), stop_delta("end_turn"), stop()]);
        Self::events(events)
    }
}

/// `message_start`, its usage counting the input.
pub fn start() -> (String, Value) {
    let message = json!({"id": "msg_fake", "type": "message", "role": "assistant",
        "model": "fake-claude", "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 11, "output_tokens": 1, "cache_read_input_tokens": 5,
                  "cache_creation_input_tokens": 3}});
    event("message_start", json!({"type": "message_start", "message": message}))
}

/// `ping`.
pub fn ping() -> (String, Value) {
    event("ping", json!({"type": "ping"}))
}

/// `content_block_start` of block `index`.
pub fn block_start(index: u64, block: Value) -> (String, Value) {
    event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

/// A `text_delta` of block `index`.
pub fn text_delta(index: u64, text: &str) -> (String, Value) {
    delta(index, json!({"type": "text_delta", "text": text}))
}

/// An `input_json_delta` of block `index`: a piece of a tool's input.
pub fn input_delta(index: u64, partial_json: &str) -> (String, Value) {
    delta(index, json!({"type": "input_json_delta", "partial_json": partial_json}))
}

/// A `content_block_delta` of block `index`.
pub fn delta(index: u64, delta: Value) -> (String, Value) {
    event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

/// `content_block_stop` of block `index`.
pub fn block_stop(index: u64) -> (String, Value) {
    event("content_block_stop", json!({"type": "content_block_stop", "index": index}))
}

/// `message_delta` with the stop reason and the output count.
pub fn stop_delta(reason: &str) -> (String, Value) {
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
               "usage": {"output_tokens": 7}}),
    )
}

/// `message_stop`.
pub fn stop() -> (String, Value) {
    event("message_stop", json!({"type": "message_stop"}))
}

/// An `error` event, as the API sends one mid-stream.
pub fn error_event(kind: &str, message: &str) -> (String, Value) {
    event("error", json!({"type": "error", "error": {"type": kind, "message": message}}))
}

fn event(name: &str, data: Value) -> (String, Value) {
    (name.to_owned(), data)
}

/// A running fake server; stops when dropped.
#[derive(Debug)]
pub struct FakeAnthropic {
    http: FakeHttp,
}

impl FakeAnthropic {
    /// Starts a server on a free loopback port (inside a tokio runtime).
    pub async fn start() -> Self {
        Self { http: FakeHttp::start("/v1/messages", "").await }
    }

    /// The base URL to give the adapter (`http://127.0.0.1:PORT`).
    pub fn base_url(&self) -> &str {
        self.http.base_url()
    }

    /// Queues the answer to the next request.
    pub fn push(&self, reply: Reply) {
        self.http.push(match reply {
            Reply::Json { status, headers, body } => Answer::Json { status, headers, body },
            Reply::Events { events, delay, cut } => {
                let frames = events
                    .into_iter()
                    .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
                    .collect();
                Answer::Frames { frames, delay, abort: cut }
            }
            Reply::Hang => Answer::Hang,
        });
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.http.requests()
    }

    /// The last request's body.
    pub fn last_body(&self) -> Value {
        self.http.last_body()
    }

    /// Streams abandoned by their client before the end.
    pub fn dropped_streams(&self) -> u32 {
        self.http.dropped_streams()
    }
}
