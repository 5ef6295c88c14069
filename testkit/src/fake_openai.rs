//! A fake OpenAI-compatible server (feature `provider-suite`): answers
//! `POST /v1/chat/completions` with scripted replies in the real wire format
//! (JSON or SSE) and records every request.

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
    /// An SSE stream: each item is one `data:` payload, sent in order with
    /// `delay` between them; `[DONE]` closes it when `done`.
    Sse {
        /// The `data:` payloads (chunks as JSON text, or anything to test
        /// malformed streams).
        data: Vec<String>,
        /// Send `data: [DONE]` at the end.
        done: bool,
        /// Pause before each item.
        delay: Duration,
    },
    /// Never answers (for timeouts and cancellation).
    Hang,
}

impl Reply {
    /// A 200 completion with text and usage.
    pub fn text(content: &str) -> Self {
        Self::completion(json!({"role": "assistant", "content": content}))
    }

    /// A 200 completion carrying `message`.
    pub fn completion(message: Value) -> Self {
        Reply::Json {
            status: 200,
            headers: Vec::new(),
            body: json!({
                "id": "chatcmpl-fake", "object": "chat.completion", "model": "fake-model",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            }),
        }
    }

    /// A 200 completion calling tools: `(id, name, arguments as sent)`.
    pub fn tool_calls(calls: &[(&str, &str, &str)]) -> Self {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
            .collect();
        Self::completion(json!({"role": "assistant", "content": null, "tool_calls": calls}))
    }

    /// An error status with an OpenAI error body.
    pub fn error(status: u16, message: &str) -> Self {
        Reply::Json {
            status,
            headers: Vec::new(),
            body: json!({"error": {"message": message, "type": "fake_error", "param": null, "code": null}}),
        }
    }

    /// A stream that sends `before` as text, then fails the way OpenAI's
    /// format does once a stream has started: a `data:` line holding an
    /// `error` object (`{"message", "type", "param", "code"}`, `code` often
    /// a string such as `"429"`), and no `[DONE]`.
    pub fn stream_error(before: &str, error: Value) -> Self {
        let data = vec![
            chunk(json!({"role": "assistant", "content": ""})),
            chunk(json!({"content": before})),
            json!({"error": error}).to_string(),
        ];
        Reply::Sse { data, done: false, delay: Duration::ZERO }
    }

    /// A stream of text deltas, then a usage chunk, then `[DONE]`.
    pub fn stream_text(pieces: &[&str]) -> Self {
        let mut data = vec![chunk(json!({"role": "assistant", "content": ""}))];
        data.extend(pieces.iter().map(|piece| chunk(json!({"content": piece}))));
        data.push(chunk_finish("stop"));
        data.push(usage_chunk());
        Reply::Sse { data, done: true, delay: Duration::ZERO }
    }
}

/// One `chat.completion.chunk` with `delta`, as JSON text.
pub fn chunk(delta: Value) -> String {
    json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake-model",
           "choices": [{"index": 0, "delta": delta, "finish_reason": null}], "usage": null})
    .to_string()
}

/// The chunk that ends the choice.
pub fn chunk_finish(reason: &str) -> String {
    json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake-model",
           "choices": [{"index": 0, "delta": {}, "finish_reason": reason}], "usage": null})
    .to_string()
}

/// The final usage chunk of `stream_options.include_usage`.
pub fn usage_chunk() -> String {
    json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake-model", "choices": [],
           "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
    .to_string()
}

/// A running fake server; stops when dropped.
#[derive(Debug)]
pub struct FakeOpenAi {
    http: FakeHttp,
}

impl FakeOpenAi {
    /// Starts a server on a free loopback port (inside a tokio runtime).
    pub async fn start() -> Self {
        Self { http: FakeHttp::start("/v1/chat/completions", "/v1").await }
    }

    /// Starts a server answering `POST /v1/embeddings` instead (for
    /// `OpenAiEmbedder`).
    pub async fn start_embeddings() -> Self {
        Self { http: FakeHttp::start("/v1/embeddings", "/v1").await }
    }

    /// The base URL to give the adapter (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> &str {
        self.http.base_url()
    }

    /// Queues the answer to the next request.
    pub fn push(&self, reply: Reply) {
        self.http.push(match reply {
            Reply::Json { status, headers, body } => Answer::Json { status, headers, body },
            Reply::Sse { data, done, delay } => {
                let mut frames: Vec<String> =
                    data.into_iter().map(|data| format!("data: {data}\n\n")).collect();
                if done {
                    frames.push("data: [DONE]\n\n".to_owned());
                }
                Answer::Frames { frames, delay, abort: false }
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
