//! A fake OpenAI-compatible server (feature `provider-suite`): answers
//! `POST /v1/chat/completions` with scripted replies in the real wire format
//! (JSON or SSE) and records every request.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

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

/// A request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body.
    pub body: Value,
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    /// Streams whose client went away before they finished.
    dropped: AtomicU32,
}

/// A running fake server; stops when dropped.
pub struct FakeOpenAi {
    base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FakeOpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeOpenAi").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeOpenAi {
    /// Starts a server on a free loopback port (inside a tokio runtime).
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let address = listener.local_addr().expect("a bound address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { base_url: format!("http://{address}/v1"), shared, task }
    }

    /// The base URL to give the adapter (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Queues the answer to the next request.
    pub fn push(&self, reply: Reply) {
        self.shared.replies.lock().unwrap_or_else(PoisonError::into_inner).push_back(reply);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The last request's body.
    pub fn last_body(&self) -> Value {
        self.requests().last().map(|r| r.body.clone()).unwrap_or(Value::Null)
    }

    /// Streams abandoned by their client before the end.
    pub fn dropped_streams(&self) -> u32 {
        self.shared.dropped.load(Ordering::SeqCst)
    }
}

/// Counts a stream dropped before its end.
struct DropGuard(Option<Arc<Shared>>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let authorization =
        headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Recorded { authorization, body });
    let reply = shared.replies.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
    let reply =
        reply.unwrap_or_else(|| Reply::error(500, "the fake server has no scripted reply left"));
    match reply {
        Reply::Json { status, headers, body } => {
            let mut response = Response::builder()
                .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
                .header("content-type", "application/json");
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response.body(Body::from(body.to_string())).unwrap_or_default()
        }
        Reply::Sse { data, done, delay } => {
            let guard = DropGuard(Some(Arc::clone(&shared)));
            let mut items: VecDeque<String> =
                data.into_iter().map(|d| format!("data: {d}\n\n")).collect();
            if done {
                items.push_back("data: [DONE]\n\n".to_owned());
            }
            let stream = futures_util::stream::unfold(
                (items, guard),
                move |(mut items, mut guard)| async move {
                    match items.pop_front() {
                        Some(item) => {
                            if !delay.is_zero() {
                                tokio::time::sleep(delay).await;
                            }
                            Some((Ok::<_, Infallible>(Bytes::from(item)), (items, guard)))
                        }
                        None => {
                            guard.0.take();
                            None
                        }
                    }
                },
            );
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap_or_default()
        }
        Reply::Hang => {
            let guard = DropGuard(Some(Arc::clone(&shared)));
            let stream = futures_util::stream::unfold(guard, |guard| async move {
                std::future::pending::<()>().await;
                Some((Ok::<_, Infallible>(Bytes::new()), guard))
            });
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap_or_default()
        }
    }
}
