//! The HTTP server behind the fake providers: answers one `POST` path with
//! scripted answers (a JSON body, a stream of SSE frames, or nothing ever)
//! and records every request.

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

/// One scripted answer, in wire terms.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// A JSON body with a status and extra headers.
    Json { status: u16, headers: Vec<(String, String)>, body: Value },
    /// An SSE stream of these frames (each written as it is), `delay`
    /// before each; with `abort` the connection is then cut instead of
    /// the stream ending.
    Frames { frames: Vec<String>, delay: Duration, abort: bool },
    /// Never answers.
    Hang,
}

/// A request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// Every header, names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
}

impl Recorded {
    /// The value of header `name` (lower case), if it was sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(found, _)| found == name).map(|(_, value)| value.as_str())
    }
}

#[derive(Default)]
struct Shared {
    answers: Mutex<VecDeque<Answer>>,
    requests: Mutex<Vec<Recorded>>,
    /// Streams whose client went away before they finished.
    dropped: AtomicU32,
}

/// A running fake server; stops when dropped.
pub(crate) struct FakeHttp {
    base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FakeHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeHttp").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

impl Drop for FakeHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeHttp {
    /// Starts a server answering `POST path` on a free loopback port
    /// (inside a tokio runtime); its base URL ends with `base`.
    pub(crate) async fn start(path: &str, base: &str) -> Self {
        let shared = Arc::new(Shared::default());
        let app = Router::new().route(path, post(handle)).with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let address = listener.local_addr().expect("a bound address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { base_url: format!("http://{address}{base}"), shared, task }
    }

    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    pub(crate) fn push(&self, answer: Answer) {
        self.shared.answers.lock().unwrap_or_else(PoisonError::into_inner).push_back(answer);
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub(crate) fn last_body(&self) -> Value {
        self.requests().last().map(|r| r.body.clone()).unwrap_or(Value::Null)
    }

    pub(crate) fn dropped_streams(&self) -> u32 {
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

/// The frames still to send, and whether to cut the connection after them.
type Pending = (VecDeque<String>, DropGuard, bool);

async fn handle(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let authorization =
        headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let all = headers
        .iter()
        .map(|(name, value)| {
            (name.as_str().to_owned(), value.to_str().unwrap_or_default().to_owned())
        })
        .collect();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared.requests.lock().unwrap_or_else(PoisonError::into_inner).push(Recorded {
        authorization,
        headers: all,
        body,
    });
    let answer = shared.answers.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
    let answer = answer.unwrap_or_else(|| Answer::Json {
        status: 500,
        headers: Vec::new(),
        body: json!({"error": {"message": "the fake server has no scripted reply left"}}),
    });
    let stream = |body: Body| {
        Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap_or_default()
    };
    match answer {
        Answer::Json { status, headers, body } => {
            let mut response = Response::builder()
                .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
                .header("content-type", "application/json");
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response.body(Body::from(body.to_string())).unwrap_or_default()
        }
        Answer::Frames { frames, delay, abort } => {
            let guard = DropGuard(Some(Arc::clone(&shared)));
            let pending: Pending = (frames.into(), guard, abort);
            let frames = futures_util::stream::unfold(
                pending,
                move |(mut frames, mut guard, abort)| async move {
                    match frames.pop_front() {
                        Some(frame) => {
                            if !delay.is_zero() {
                                tokio::time::sleep(delay).await;
                            }
                            Some((Ok(Bytes::from(frame)), (frames, guard, abort)))
                        }
                        // An error cuts the connection mid-stream.
                        None if abort => {
                            guard.0.take();
                            let cut = std::io::Error::other("the fake server cut the stream");
                            Some((Err(cut), (frames, guard, false)))
                        }
                        None => {
                            guard.0.take();
                            None
                        }
                    }
                },
            );
            stream(Body::from_stream(frames))
        }
        Answer::Hang => {
            let guard = DropGuard(Some(Arc::clone(&shared)));
            let never = futures_util::stream::unfold(guard, |guard| async move {
                std::future::pending::<()>().await;
                Some((Ok::<_, Infallible>(Bytes::new()), guard))
            });
            stream(Body::from_stream(never))
        }
    }
}
