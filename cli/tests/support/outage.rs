//! One workload through a database outage, for the failover and restart
//! tests: a `tollgate serve` and two workers on the fixture's database,
//! runs created and decisions made through the API while the outage
//! happens, and the checks of what tollgate acknowledged afterwards.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio_postgres::NoTls;

use super::{
    assert_events_gap_free, client, queue_blueprint, signal, start_worker_with, stopped_report,
    Fixture, Served,
};

/// Runs created through the API: half-second gaps, every fourth one
/// pausing for an approval.
const CREATED: usize = 16;
/// Legs in flight at once: two workers of `--concurrency 3`.
const LEGS: usize = 6;

/// What an outage cost, for the test's report.
#[derive(Debug)]
pub(crate) struct Report {
    /// From the outage's start to the first step committed after it.
    pub(crate) first_commit: Duration,
    /// The longest time without a step committed, from a second before
    /// the outage on: how long the outage stopped the work.
    pub(crate) stall: Duration,
    /// Tool calls made again (a call in flight when its leg lost the
    /// database runs once more when another leg takes the run over).
    pub(crate) repeated_calls: usize,
    /// Creations and decisions the API refused with 503 meanwhile.
    pub(crate) refused: usize,
}

/// A blueprint whose one tool call (the `note` tool of `steps.json`, which
/// appends to `effects.log`) waits for an approval.
fn gated_blueprint(fx: &Fixture) {
    let replies =
        json!([{"tool_calls": [{"name": "note", "args": {"gate": true}}]}, {"text": "done"}]);
    std::fs::write(fx.path("gated_replies.json"), replies.to_string()).unwrap();
    let blueprint = json!({"name": "gated", "model": "scripted:gated_replies.json", "max_steps": 10,
        "tools": [{"name": "note", "description": "", "parameters": {"type": "object"},
                   "command": ["/bin/sh", "note.sh"], "approval": true}]});
    std::fs::write(fx.path("gated.json"), blueprint.to_string()).unwrap();
}

/// Runs the workload on `fx` (a Postgres fixture), calls `outage` once a
/// few runs have completed (it returns when the database is writable
/// again, or about to be), and checks, once every run has ended:
/// - every run whose creation the API acknowledged exists and completed;
/// - every decision the API acknowledged was applied, once (one
///   `run_resumed` event per gated run, each tool called after it);
/// - no step was stored twice or lost (each run's events number 1..=n,
///   a steps run ends at step 11);
/// - a tool call ran again only if it was in flight when the database
///   went away (at most one more per leg then).
pub(crate) fn survive(fx: &Fixture, outage: impl FnOnce()) -> Report {
    queue_blueprint(fx, 0.05);
    gated_blueprint(fx);
    let server = Served::start(fx, &["--blueprints", "."]);
    let workers =
        [start_worker_with(fx, &["--lease", "2"]), start_worker_with(fx, &["--lease", "2"])];
    let runtime = super::runtime();
    let acked = Arc::new(Mutex::new(Vec::<(String, &'static str)>::new()));
    let decided = Arc::new(Mutex::new(BTreeMap::<String, u16>::new()));
    let refused = Arc::new(Mutex::new(0usize));
    let (outage_at, everything) = runtime.block_on(async {
        let http = client();
        let creator =
            tokio::spawn(create(http.clone(), server.base.clone(), acked.clone(), refused.clone()));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let decider = tokio::spawn(decide(
            http.clone(),
            server.base.clone(),
            decided.clone(),
            refused.clone(),
            done.clone(),
        ));
        // Cut once three runs completed, in the middle of the creations.
        let deadline = Instant::now() + Duration::from_secs(60);
        while completed(&http, &server.base).await < 3 {
            assert!(Instant::now() < deadline, "three runs completed before the outage");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        let healthz = server.url("/healthz");
        tokio::task::block_in_place(outage);
        creator.await.unwrap();
        // Every run acknowledged, and any other a refused creation made.
        let deadline = Instant::now() + Duration::from_secs(180);
        let everything = loop {
            let listed = list(&http, &server.base).await;
            if listed.len() >= CREATED && listed.values().all(|(s, _)| s == "completed") {
                break listed;
            }
            assert!(Instant::now() < deadline, "every run completed: {listed:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        decider.await.unwrap();
        let health: Value = http.get(&healthz).send().await.unwrap().json().await.unwrap();
        assert_eq!(health["status"], "ok", "healthy again without a restart: {health}");
        (at, everything)
    });
    for worker in &workers {
        signal(worker, "TERM");
    }
    for worker in workers {
        let report = stopped_report(worker);
        assert_eq!(report["dead_lettered"], 0, "{report}");
    }
    drop(server);

    let acked = acked.lock().unwrap().clone();
    for (id, _) in &acked {
        assert!(everything.contains_key(id), "acknowledged run {id} exists");
    }
    let mut expected_calls = 0;
    for id in everything.keys() {
        assert_events_gap_free(fx, id);
        let shown = fx.json(&["runs", "show", id, "--json"], 0);
        let events = fx.run(&["runs", "events", id, "--json"]);
        let resumed = String::from_utf8(events.stdout)
            .unwrap()
            .lines()
            .filter(|line| line.contains("\"event_type\":\"run_resumed\""))
            .count();
        if everything[id].1 == "gated" {
            assert_eq!(resumed, 1, "run {id}: its decision applied once");
            assert!(decided.lock().unwrap().contains_key(id), "run {id}: decided by the test");
            expected_calls += 1;
        } else {
            assert_eq!(shown["step"], 11, "run {id}: every step once: {shown}");
            expected_calls += 5;
        }
    }
    let calls = std::fs::read_to_string(fx.path("effects.log")).unwrap().lines().count();
    assert!(
        (expected_calls..=expected_calls + LEGS).contains(&calls),
        "{calls} tool calls for {expected_calls} (at most one more per leg in flight)"
    );
    let (first_commit, stall) =
        runtime.block_on(commits_after(&fx.db.to_string_lossy(), outage_at));
    let refused = *refused.lock().unwrap();
    Report { first_commit, stall, repeated_calls: calls - expected_calls, refused }
}

/// Creates [`CREATED`] runs through the API, retrying each while the API
/// answers 503; the acknowledged ones go into `acked`.
async fn create(
    http: reqwest::Client,
    base: String,
    acked: Arc<Mutex<Vec<(String, &'static str)>>>,
    refused: Arc<Mutex<usize>>,
) {
    for n in 0..CREATED {
        let kind = if n % 4 == 3 { "gated" } else { "steps" };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let body = json!({"blueprint": kind, "input": "go"});
            let response = http.post(format!("{base}/runs")).json(&body).send().await.unwrap();
            let status = response.status().as_u16();
            if status == 503 {
                assert!(response.headers().contains_key("retry-after"), "503 with Retry-After");
                *refused.lock().unwrap() += 1;
                assert!(Instant::now() < deadline, "the API accepted runs again");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let answer: Value = response.json().await.unwrap();
            assert!((200..300).contains(&status), "POST /runs: {status} {answer}");
            acked.lock().unwrap().push((answer["id"].as_str().unwrap().to_owned(), kind));
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Approves each paused run (whether or not its creation was
/// acknowledged) until `done`. A decision answered 503 may still have
/// been stored: if its run then goes on, it counts as made.
async fn decide(
    http: reqwest::Client,
    base: String,
    decided: Arc<Mutex<BTreeMap<String, u16>>>,
    refused: Arc<Mutex<usize>>,
    done: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut unsure = std::collections::BTreeSet::new();
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        for (id, (status, _)) in list(&http, &base).await {
            if decided.lock().unwrap().contains_key(&id) {
                continue;
            }
            if status != "awaiting_hitl" {
                if unsure.contains(&id) {
                    decided.lock().unwrap().insert(id, 503);
                }
                continue;
            }
            let body = json!({"decision": "approve", "by": "failover-test"});
            let Ok(response) =
                http.post(format!("{base}/runs/{id}/resume")).json(&body).send().await
            else {
                continue;
            };
            match response.status().as_u16() {
                200 => {
                    decided.lock().unwrap().insert(id, 200);
                }
                503 => {
                    *refused.lock().unwrap() += 1;
                    unsure.insert(id);
                }
                409 if unsure.contains(&id) => {
                    decided.lock().unwrap().insert(id, 409);
                }
                other => panic!("POST /runs/{id}/resume: {other}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every run the API lists, with its status and graph (an empty map
/// while the database is away).
async fn list(http: &reqwest::Client, base: &str) -> BTreeMap<String, (String, String)> {
    let Ok(response) = http.get(format!("{base}/runs?limit=200")).send().await else {
        return BTreeMap::new();
    };
    if response.status() != 200 {
        return BTreeMap::new();
    }
    let page: Value = response.json().await.unwrap();
    page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| {
            let text = |field: &str| run[field].as_str().unwrap_or_default().to_owned();
            (text("id"), (text("status"), text("graph")))
        })
        .collect()
}

async fn completed(http: &reqwest::Client, base: &str) -> usize {
    list(http, base).await.values().filter(|(status, _)| status == "completed").count()
}

/// From `at` (ms since the epoch) to the first step stored after it, and
/// the longest time without a step stored from a second before `at` on,
/// read from the database at `url` (each step row carries its commit
/// time).
async fn commits_after(url: &str, at: i64) -> (Duration, Duration) {
    let (db, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    let row = db
        .query_one(
            "SELECT (SELECT min(at_ms) FROM steps WHERE at_ms > $1), \
                    (SELECT max(gap) FROM (SELECT at_ms - lag(at_ms) OVER (ORDER BY at_ms) AS gap \
                                           FROM steps WHERE at_ms >= $1 - 1000) AS gaps)",
            &[&at],
        )
        .await
        .unwrap();
    let first: Option<i64> = row.get(0);
    let stall: Option<i64> = row.get(1);
    let first = first.expect("a step committed after the outage") - at;
    (Duration::from_millis(first as u64), Duration::from_millis(stall.unwrap_or(0) as u64))
}
