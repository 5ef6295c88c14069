//! The LangGraph API's deferred work. It never stalls behind what cannot
//! proceed: with 1,000 threads each holding a run that waits for a
//! decision and a run enqueued behind it (its webhook waiting too), and
//! 1,000 runs due in an hour with webhooks, another thread's enqueued run
//! starts, and a run that ended has its webhook sent, within a second.
//! Two servers share the database; on SQLite and on PostgreSQL
//! (`TOLLGATE_PG_URL`). And webhooks go only where they are allowed: no
//! redirect is followed, the server is known by where it listens.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::task::JoinSet;
use tollgate_checkpoint::OutboxQuery;
use tollgate_engine::{CompiledGraph, GraphState, Interrupt, NodeContext, StateGraph, END, START};
use tollgate_server::{Api, Graphs, Runs, ServeOptions};

/// How many threads are blocked, and how many runs wait for their time.
const BLOCKED: usize = 1_000;
/// Requests in flight at once while the blocked work is made.
const PARALLEL: usize = 16;
/// What "at once" means here.
const PROMPTLY: Duration = Duration::from_secs(1);

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
#[graph_state(crate = tollgate_engine)]
struct Text {
    text: String,
    #[reducer(append)]
    log: Vec<String>,
}

/// `gate`: asks a question, then logs `gate`.
fn gate() -> CompiledGraph<Text> {
    StateGraph::<Text>::new("gate", 1)
        .node("gate", |_state: Arc<Text>, ctx: NodeContext| async move {
            ctx.interrupt(Interrupt::new("question", json!({"question": "go on?"})))?;
            Ok(TextUpdate::default().log(vec!["gate".to_owned()]))
        })
        .edge(START, "gate")
        .edge("gate", END)
        .compile()
        .unwrap()
}

/// `echo`: logs `echo`.
fn echo() -> CompiledGraph<Text> {
    StateGraph::<Text>::new("echo", 1)
        .node("echo", |_state: Arc<Text>, _ctx| async move {
            Ok(TextUpdate::default().log(vec!["echo".to_owned()]))
        })
        .edge(START, "echo")
        .edge("echo", END)
        .compile()
        .unwrap()
}

/// A server of `db` with both graphs and a worker (on PostgreSQL, runs
/// queued by one server are driven by any server's worker), webhooks to
/// loopback allowed.
async fn serve(db: &Path) -> (String, Runs, Api) {
    let graphs = Graphs::new().graph(gate()).graph(echo());
    let runs = Runs::open(db, true).await.unwrap().with_graphs(graphs);
    let worker = runs.clone();
    let lease = Duration::from_secs(30);
    tokio::spawn(async move { worker.work(4, lease, 3, std::future::pending()).await });
    let mut options = ServeOptions::new(([127, 0, 0, 1], 0).into());
    options.allow_webhook_hosts = vec!["127.0.0.1".into()];
    let api = Api::new(runs.clone(), options).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    api.listening_on(address);
    let app = Router::new().merge(api.router());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}/lg"), runs, api)
}

/// Webhooks received: the run's id, and when.
type Received = Arc<Mutex<Vec<(String, Instant)>>>;

/// A receiver of webhooks; its URL.
async fn receiver(received: Received) -> String {
    let app = Router::new().route(
        "/hook",
        post(move |Json(body): Json<Value>| {
            let received = Arc::clone(&received);
            async move {
                let run = body["run_id"].as_str().unwrap_or_default().to_owned();
                received.lock().unwrap().push((run, Instant::now()));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}/hook")
}

async fn send(client: &reqwest::Client, url: String, body: Value) -> Value {
    let response = client.post(&url).json(&body).send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(status.is_success(), "{url}: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

/// A new thread whose `gate` run waits for a decision; its id.
async fn paused_thread(client: &reqwest::Client, base: &str) -> String {
    let thread = send(client, format!("{base}/threads"), json!({})).await;
    let thread = thread["thread_id"].as_str().unwrap().to_owned();
    let input = json!({"assistant_id": "gate", "input": {"text": "x"}});
    send(client, format!("{base}/threads/{thread}/runs/wait"), input).await;
    thread
}

/// A `gate` run enqueued on `thread` (a thread runs one graph), with a
/// webhook; its id.
async fn enqueue(client: &reqwest::Client, base: &str, thread: &str, hook: &str) -> String {
    let body = json!({"assistant_id": "gate", "input": {"text": "y"},
                      "multitask_strategy": "enqueue", "webhook": hook});
    let run = send(client, format!("{base}/threads/{thread}/runs"), body).await;
    assert_eq!(run["status"], "pending", "{run}");
    run["run_id"].as_str().unwrap().to_owned()
}

/// Makes the blocked work: `BLOCKED` threads each with a paused run and
/// an enqueued one (with a webhook), and `BLOCKED` stateless runs due in
/// an hour (with webhooks).
async fn block(client: &reqwest::Client, base: &str, hook: &str) {
    let mut tasks = JoinSet::new();
    for index in 0..BLOCKED * 2 {
        if tasks.len() >= PARALLEL {
            tasks.join_next().await.unwrap().unwrap();
        }
        let (client, base, hook) = (client.clone(), base.to_owned(), hook.to_owned());
        tasks.spawn(async move {
            if index % 2 == 0 {
                let thread = paused_thread(&client, &base).await;
                enqueue(&client, &base, &thread, &hook).await;
            } else {
                let body = json!({"assistant_id": "echo", "input": {"text": "later"},
                                  "after_seconds": 3600, "webhook": hook});
                let run = send(&client, format!("{base}/runs"), body).await;
                assert_eq!(run["status"], "pending", "{run}");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// Waits until none of `kind`'s entries is ready: every blocked one is
/// gated on its run, out of the dispatchers' sight.
async fn gated(runs: &Runs, kind: &str) {
    let started = Instant::now();
    loop {
        let now = i64::try_from(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis(),
        )
        .unwrap();
        let ready = runs.store().list_outbox(OutboxQuery::new(kind, 10).ready(now)).await.unwrap();
        if ready.is_empty() {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{kind}: still ready: {ready:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `url` until `done` says the run is there; how long it took.
async fn until(client: &reqwest::Client, url: &str, done: impl Fn(&Value) -> bool) -> Duration {
    let started = Instant::now();
    loop {
        let shown: Value = client.get(url).send().await.unwrap().json().await.unwrap();
        if done(&shown) {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{url}: {shown}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for the webhook of `run`; how long after `since` it came.
async fn webhook_of(received: &Received, run: &str, since: Instant) -> Duration {
    let started = Instant::now();
    loop {
        let at = received.lock().unwrap().iter().find(|(id, _)| id == run).map(|(_, at)| *at);
        if let Some(at) = at {
            return at.saturating_duration_since(since);
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no webhook for {run}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn nothing_stalls(db: &Path) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (first, runs, _first_api) = serve(db).await;
    let (second, _, _second_api) = serve(db).await;
    let received = Received::default();
    let hook = receiver(Arc::clone(&received)).await;
    let client = reqwest::Client::new();

    let made = Instant::now();
    block(&client, &first, &hook).await;
    gated(&runs, "run").await;
    gated(&runs, "webhook").await;
    eprintln!(
        "{} blocked threads and {BLOCKED} later runs made and gated in {:?}",
        BLOCKED,
        made.elapsed()
    );

    // Another thread's enqueued run starts once its thread is free.
    let thread = paused_thread(&client, &second).await;
    let queued = enqueue(&client, &second, &thread, &hook).await;
    let resume = json!({"assistant_id": "gate", "command": {"resume": "yes"}});
    let freed = Instant::now();
    send(&client, format!("{first}/threads/{thread}/runs/wait"), resume).await;
    let url = format!("{second}/threads/{thread}/runs/{queued}");
    // It starts, and pauses at its own question.
    until(&client, &url, |run| run["status"] == "interrupted").await;
    let started = freed.elapsed();
    eprintln!("the enqueued run behind a decided one ran within {started:?}");
    assert!(started < PROMPTLY, "enqueued run started after {started:?}");
    let sent = webhook_of(&received, &queued, freed).await;
    assert!(sent < PROMPTLY * 2, "its webhook came {sent:?} after the decision");

    // A run that ends has its webhook sent at once.
    let body = json!({"assistant_id": "echo", "input": {"text": "now"}, "webhook": hook});
    let asked = Instant::now();
    let run = send(&client, format!("{second}/runs"), body).await;
    let run = run["run_id"].as_str().unwrap().to_owned();
    let sent = webhook_of(&received, &run, asked).await;
    eprintln!("a new run's webhook came {sent:?} after it was asked for");
    assert!(sent < PROMPTLY, "its webhook came after {sent:?}");
    // Nothing blocked was started or sent meanwhile.
    assert_eq!(received.lock().unwrap().len(), 2, "only the two runs that ended were posted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_stalls_behind_blocked_threads_and_waiting_webhooks_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    nothing_stalls(&dir.path().join("runs.db")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_stalls_behind_blocked_threads_and_waiting_webhooks_on_postgres() {
    let Some(url) = support::postgres_database().await else { return };
    nothing_stalls(Path::new(&url)).await;
}

/// A server answering every request with `code` and a `Location` on
/// `to`; how many requests it had.
async fn redirector(to: String) -> (String, Arc<Mutex<usize>>) {
    let hits = Arc::new(Mutex::new(0));
    let counted = Arc::clone(&hits);
    let app = Router::new().route(
        "/hook/{code}",
        post(move |axum::extract::Path(code): axum::extract::Path<u16>| {
            let (counted, to) = (Arc::clone(&counted), to.clone());
            async move {
                *counted.lock().unwrap() += 1;
                let status = axum::http::StatusCode::from_u16(code).unwrap();
                (status, [(axum::http::header::LOCATION, to)])
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}/hook"), hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_follow_no_redirect_and_never_reach_the_server_itself() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let (base, runs, _api) = serve(&dir.path().join("runs.db")).await;
    let client = reqwest::Client::new();
    let trapped = Received::default();
    let trap = receiver(Arc::clone(&trapped)).await;
    let (redirecting, hits) = redirector(trap).await;

    // Every redirect is the delivery's failure, for good: nothing reaches
    // the address it points to, nothing is retried.
    let codes = [301, 302, 303, 307, 308];
    for code in codes {
        let body = json!({"assistant_id": "echo", "input": {"text": "x"},
                          "webhook": format!("{redirecting}/{code}")});
        send(&client, format!("{base}/runs"), body).await;
    }
    let started = Instant::now();
    while *hits.lock().unwrap() < codes.len() {
        assert!(started.elapsed() < Duration::from_secs(10), "not every webhook was tried");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Retries would come after 0.25 s at the earliest.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(*hits.lock().unwrap(), codes.len(), "given up, not retried");
    assert!(trapped.lock().unwrap().is_empty(), "a redirect was followed");
    let left = runs.store().list_outbox(OutboxQuery::new("webhook", 10)).await.unwrap();
    assert!(left.is_empty(), "given up and forgotten: {left:?}");

    // The server itself, by the address it listens on, whatever `Host`
    // says (a name resolving to loopback: `target.rs`'s unit tests).
    let own = base.trim_end_matches("/lg").to_owned();
    let allowed_host_only = base.split("//").nth(1).unwrap().split(':').next().unwrap();
    assert_eq!(allowed_host_only, "127.0.0.1");
    for (webhook, host, says) in [
        (format!("{own}/runs"), "127.0.0.1", "is this server"),
        (format!("{own}/runs"), "elsewhere.example:80", "is this server"),
    ] {
        let body = json!({"assistant_id": "echo", "input": {"text": "x"}, "webhook": webhook});
        let response = client
            .post(format!("{base}/runs"))
            .header(axum::http::header::HOST, host)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 422, "{webhook} with Host {host}");
        let text = response.text().await.unwrap();
        assert!(text.contains(says), "{webhook}: {text}");
    }
}
