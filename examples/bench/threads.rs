//! The `threads_search_100k` workload: LangGraph's `POST /threads/search`
//! (25 per page) against an in-process server over 100,000 thread records
//! of 100 users, one thread in 20 of each user's with a run that waits
//! for a decision.
//! Each thread is owned by its user (tenant `acme`), and reviewed by group
//! `finance`. Searches, each timed `SEARCHES` times after a warm-up, as
//! an admin: the newest threads, the interrupted ones, one user's (by
//! metadata), one user's interrupted; as a user (a JWT of role `user`,
//! ownership applied by the server): their own newest, their own
//! interrupted; and as a reviewer of `finance`, the review inbox's first
//! page (`GET /runs?status=awaiting_hitl&limit=25`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tollgate::{Executor, Interrupt, RunConfig, StateGraph, END, START};
use tollgate_checkpoint::ThreadRecord;
use tollgate_server::{Api, Auth, Graphs, Jwt, Runs, ServeOptions};

use crate::backend::Backend;
use crate::{median, Counter, CounterUpdate, Outcome};

/// Thread records in the database.
const THREADS: u64 = 100_000;
/// Their owners (`metadata.user`), round robin.
const USERS: u64 = 100;
/// One thread in this many of each user's has a paused run.
const PAUSED_EVERY: u64 = 20;
/// Timed requests per search.
const SEARCHES: usize = 15;
/// Writers filling the database at once.
const FILLERS: u64 = 8;

/// The graph whose runs pause: one node that asks for an approval.
fn review() -> tollgate::CompiledGraph<Counter> {
    StateGraph::<Counter>::new("review", 1)
        .node("review", |_s: Arc<Counter>, ctx| async move {
            ctx.interrupt(Interrupt::new("approval", json!({"amount": 7})))?;
            Ok(CounterUpdate::default().count(1))
        })
        .edge(START, "review")
        .edge("review", END)
        .compile()
        .expect("valid graph")
}

pub(crate) async fn threads_search(backend: &Backend) -> Outcome {
    let name = "threads_search";
    let store = backend.open(name).await?;
    let started = Instant::now();
    let mut fillers = tokio::task::JoinSet::new();
    for filler in 0..FILLERS {
        let store = Arc::clone(&store);
        fillers.spawn(async move {
            let executor = Executor::with_store(Arc::clone(&store));
            let graph = review();
            let mut index = filler;
            while index < THREADS {
                let id = format!("thread-{index:06}");
                let user = format!("u{}", index % USERS);
                let metadata = json!({"user": user, "graph_id": "review"});
                let mut record = ThreadRecord::new(&id, index as i64, metadata)
                    .with_owner(Some(user), Some("acme".to_owned()));
                record.reviewers = vec!["finance".to_owned()];
                store.create_thread(record).await?;
                if (index / USERS) % PAUSED_EVERY == 0 {
                    executor.run(&graph, Counter::default(), RunConfig::new().thread(&id)).await?;
                }
                index += FILLERS;
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        });
    }
    while let Some(filled) = fillers.join_next().await {
        filled?.map_err(|error| error.to_string())?;
    }
    let filled_s = started.elapsed().as_secs_f64();
    drop(store);
    backend.analyze(name).await?;

    let runs = Runs::open(std::path::Path::new(&backend.url(name)), false)
        .await?
        .with_graphs(Graphs::new().graph(review()));
    let mut options = ServeOptions::new("127.0.0.1:0".parse()?);
    let jwt = Jwt::hs256(SECRET)?;
    (options.auth, options.worker) = (Auth::Jwt(jwt, None), false);
    let api = Api::new(runs, options)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let root = format!("http://{}", listener.local_addr()?);
    let base = format!("{root}/lg/threads/search");
    let server =
        tokio::spawn(std::future::IntoFuture::into_future(axum::serve(listener, api.router())));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let (admin, user) = (token("root", "admin", &[])?, token("u41", "user", &[])?);
    let reviewer = token("fay", "user", &["finance"])?;
    let searches = [
        ("newest", &admin, json!({"limit": 25})),
        ("interrupted", &admin, json!({"status": "interrupted", "limit": 25})),
        ("one_user", &admin, json!({"metadata": {"user": "u42"}, "limit": 25})),
        (
            "one_user_interrupted",
            &admin,
            json!({"metadata": {"user": "u40"}, "status": "interrupted", "limit": 25}),
        ),
        ("own", &user, json!({"limit": 25})),
        ("own_interrupted", &user, json!({"status": "interrupted", "limit": 25})),
        ("inbox_reviewer", &reviewer, Value::Null),
    ];
    let mut line = json!({"workload": "threads_search_100k", "threads": THREADS, "users": USERS, "fill_s": filled_s});
    for (label, token, body) in searches {
        let mut times = Vec::new();
        for round in 0..SEARCHES + 3 {
            let at = Instant::now();
            let request = match body.is_null() {
                true => client.get(format!("{root}/runs?status=awaiting_hitl&limit=25")),
                false => client.post(&base).json(&body),
            };
            let response = request.bearer_auth(token).send().await?.error_for_status()?;
            let found: Value = response.json().await?;
            let found = found.get("runs").unwrap_or(&found).as_array().cloned().unwrap_or_default();
            let took = at.elapsed();
            if found.len() != 25 {
                return Err(format!("search {label} found {} threads, not 25", found.len()).into());
            }
            if round >= 3 {
                times.push(took.as_secs_f64() * 1e3);
            }
        }
        line[format!("{label}_p50_ms")] = json!(median(times));
    }
    server.abort();
    api.release(Duration::from_secs(1)).await;
    Ok(line)
}

/// The secret the bench's server verifies its callers' JWTs with.
const SECRET: &[u8] = b"the bench's secret, at least 32 bytes long";

/// A JWT of `sub` with `role`, in `groups`, of tenant `acme`.
fn token(sub: &str, role: &str, groups: &[&str]) -> Result<String, jsonwebtoken::errors::Error> {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |now| now.as_secs())
        + 3_600;
    let claims =
        json!({"sub": sub, "roles": [role], "groups": groups, "tenant": "acme", "exp": exp});
    let key = jsonwebtoken::EncodingKey::from_secret(SECRET);
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key)
}
