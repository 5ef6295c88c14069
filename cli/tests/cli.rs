//! The real `tollgate` binary on temporary databases: every command, every
//! exit code, the JSON shapes, and two concurrent resumes.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use support::{
    assert_events_gap_free, code, queue_blueprint, queue_runs, signal, start_worker,
    start_worker_with, stopped_report, wait_for, Fixture,
};

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{json, Value};
use tollgate_checkpoint::{RunStatus, SqliteStore};
use tollgate_engine::{
    DynState, Executor, Interrupt, NodeContext, RunConfig, StateGraph, END, START,
};

/// Each case once on SQLite and once on Postgres.
macro_rules! on_both_stores {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $case() {
                super::$case(super::Fixture::new());
            })*
        }
        mod postgres {
            $(#[test]
            fn $case() {
                if let Some(fx) = super::Fixture::postgres() {
                    super::$case(fx);
                }
            })*
        }
    };
}

on_both_stores!(
    run_pauses_at_approval_and_resume_finishes_it,
    list_pages_newest_first_with_filters,
    events_print_ndjson_and_follow_ends_with_a_finished_run,
    exit_codes_cover_failure_usage_not_found_and_conflict,
    two_concurrent_resumes_one_wins_one_conflicts,
    continue_picks_up_a_blueprint_run_whose_process_was_killed,
    workers_drain_the_queue_through_a_kill_exactly_once,
    a_frozen_worker_loses_its_run_and_its_late_commit_is_refused,
    a_terminated_worker_releases_its_legs_for_another
);

fn assert_summary_shape(summary: &Value) {
    let keys: Vec<&str> = summary.as_object().unwrap().keys().map(String::as_str).collect();
    for key in [
        "id",
        "graph",
        "status",
        "step",
        "created_at",
        "updated_at",
        "interrupts",
        "result",
        "error",
    ] {
        assert!(keys.contains(&key), "summary lacks `{key}`: {summary}");
    }
}

fn run_pauses_at_approval_and_resume_finishes_it(fx: Fixture) {
    let summary = fx.json(&["run", "refunds.json", "--input", "Refund order 7", "--json"], 10);
    assert_summary_shape(&summary);
    assert_eq!(summary["status"], "awaiting_hitl");
    let interrupt = &summary["interrupts"][0];
    assert_eq!(
        (interrupt["kind"].as_str(), interrupt["node"].as_str()),
        (Some("tool_approval"), Some("refunds.tools"))
    );
    assert_eq!(interrupt["payload"]["args"], json!({"id": 7}));
    let id = summary["id"].as_str().unwrap();

    let shown = fx.json(&["runs", "show", id, "--json"], 0);
    assert_eq!(shown["interrupts"], summary["interrupts"]);

    let done = fx.json(
        &[
            "runs",
            "resume",
            id,
            "--interrupt",
            interrupt["id"].as_str().unwrap(),
            "--approve",
            "--json",
        ],
        0,
    );
    assert_eq!(done["status"], "completed");
    let answer = done["result"]["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(answer, "Refunded 20 EUR for order 7.");

    // Human output says what happened, without JSON.
    let text = fx.run(&["runs", "show", id]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("status   completed") && text.contains("answer   Refunded 20 EUR"),
        "{text}"
    );
}

fn list_pages_newest_first_with_filters(fx: Fixture) {
    let ids: Vec<String> = (0..3).map(|_| fx.paused()).collect();
    let done = fx.json(&["run", "hello_bp.json", "--json"], 0);
    let page = fx.json(&["runs", "list", "--limit", "2", "--json"], 0);
    let first: Vec<&str> =
        page["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(first, [done["id"].as_str().unwrap(), ids[2].as_str()]);
    assert_summary_shape(&page["runs"][0]);
    assert_eq!(page["runs"][0]["result"], Value::Null, "listings do not load final states");
    let shown = fx.json(&["runs", "show", done["id"].as_str().unwrap(), "--json"], 0);
    assert!(shown["result"]["messages"].is_array(), "show does");
    let cursor = page["next_cursor"].as_str().unwrap();
    let rest = fx.json(&["runs", "list", "--limit", "2", "--cursor", cursor, "--json"], 0);
    let second: Vec<&str> =
        rest["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(second, [ids[1].as_str(), ids[0].as_str()]);
    assert_eq!(rest["next_cursor"], Value::Null);

    let paused = fx.json(&["runs", "list", "--status", "awaiting_hitl", "--json"], 0);
    assert_eq!(paused["runs"].as_array().unwrap().len(), 3);
    let hello = fx.json(&["runs", "list", "--graph", "hello", "--json"], 0);
    assert_eq!(hello["runs"].as_array().unwrap().len(), 1);
    let table = String::from_utf8(fx.run(&["runs", "list"]).stdout).unwrap();
    assert!(table.starts_with("ID ") && table.contains("awaiting_hitl"), "{table}");
    assert_eq!(code(&fx.run(&["runs", "list", "--status", "sleeping"])), Some(2));
}

fn events_print_ndjson_and_follow_ends_with_a_finished_run(fx: Fixture) {
    let id = fx.json(&["run", "hello_bp.json", "--json"], 0)["id"].as_str().unwrap().to_owned();
    let output = fx.run(&["runs", "events", &id, "--json"]);
    assert_eq!(code(&output), Some(0));
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.first().unwrap()["event_type"], "run_started");
    assert_eq!(lines.last().unwrap()["event_type"], "run_ended");
    let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=lines.len() as u64).collect::<Vec<_>>());
    // --follow on a completed run prints everything and ends.
    let followed = fx.run(&["runs", "events", &id, "--follow", "--json"]);
    assert_eq!(code(&followed), Some(0));
    assert_eq!(String::from_utf8(followed.stdout).unwrap().lines().count(), lines.len());
}

fn exit_codes_cover_failure_usage_not_found_and_conflict(fx: Fixture) {
    // 1: the run failed (the provider refused the key); the summary says why.
    let failed = fx.json(&["run", "down_bp.json", "--json"], 1);
    assert_eq!(failed["status"], "failed");
    assert!(failed["error"]["message"].as_str().unwrap().contains("bad key"), "{failed}");
    // 2: bad usage and invalid input.
    assert_eq!(code(&fx.run(&["runs", "resume", "x"])), Some(2), "no decision flag");
    assert_eq!(code(&fx.run(&["runs", "show", "not-a-run-id"])), Some(2));
    std::fs::write(fx.path("bad.json"), r#"{"name": 1}"#).unwrap();
    let bad = fx.run(&["run", "bad.json"]);
    assert_eq!(code(&bad), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid blueprint"));
    let id = fx.paused();
    assert_eq!(code(&fx.run(&["runs", "resume", &id, "--edit", "{not json"])), Some(2));
    let refused = fx.run(&["runs", "resume", &id, "--edit", r#"{"id": "seven"}"#]);
    assert_eq!(code(&refused), Some(2), "an edit breaking the schema");
    // 3: not found.
    assert_eq!(code(&fx.run(&["runs", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV"])), Some(3));
    assert_eq!(
        code(&fx.run(&["runs", "resume", &id, "--interrupt", "nope", "--approve"])),
        Some(3)
    );
    // 4: a decision on a run that is no longer waiting.
    assert_eq!(code(&fx.run(&["runs", "resume", &id, "--approve"])), Some(0));
    assert_eq!(code(&fx.run(&["runs", "reject", &id])), Some(4));
    // `continue` needs a run that is not finished: a conflict, as for
    // `resume`.
    assert_eq!(
        code(&fx.run(&["runs", "continue", &id])),
        Some(4),
        "a completed run cannot continue"
    );
}

fn two_concurrent_resumes_one_wins_one_conflicts(fx: Fixture) {
    for _ in 0..3 {
        let id = fx.paused();
        let spawn = || {
            fx.command(&["runs", "resume", &id, "--approve", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (first, second) = (spawn(), spawn());
        let mut codes = [first.wait_with_output().unwrap(), second.wait_with_output().unwrap()]
            .map(|output| output.status.code().unwrap());
        codes.sort_unstable();
        assert_eq!(codes, [0, 4], "exactly one resume wins");
        // The refund ran once: one tool_completed for it in the log.
        let output = fx.run(&["runs", "events", &id, "--json"]);
        let refunds = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .filter(|line| line.contains("\"tool_completed\"") && line.contains("issue_refund"))
            .count();
        assert_eq!(refunds, 1);
    }
}

/// A graph defined in Rust, paused in this process, decided by the CLI.
fn rust_graph_run(db: &Path) -> String {
    let graph = StateGraph::<DynState>::new("rust-graph", 1)
        .node("ask", |_s: Arc<DynState>, ctx: NodeContext| async move {
            ctx.interrupt(Interrupt::new("approval", json!({"amount": 20})))?;
            Ok(Default::default())
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let executor = Executor::new(SqliteStore::open(db).unwrap());
        let outcome = executor.run(&graph, DynState::default(), RunConfig::new()).await.unwrap();
        assert_eq!(outcome.status, RunStatus::AwaitingHitl);
        outcome.run_id.to_string()
    })
}

#[test]
fn decisions_on_rust_graphs_are_recorded_for_their_process() {
    let fx = Fixture::new();
    let id = rust_graph_run(&fx.db());
    let recorded = fx.json(&["runs", "resume", &id, "--approve", "--json"], 0);
    assert_eq!(recorded["status"], "queued", "waits for the process that has the graph");
    let continued = fx.run(&["runs", "continue", &id]);
    assert_eq!(code(&continued), Some(2));
    assert!(String::from_utf8_lossy(&continued.stderr).contains("not started from a blueprint"));

    let id = rust_graph_run(&fx.db());
    let rejected = fx.json(&["runs", "reject", &id, "--reason", "too much", "--json"], 11);
    assert_eq!(rejected["status"], "rejected");
    assert_eq!(rejected["error"]["message"], "too much");
}

fn continue_picks_up_a_blueprint_run_whose_process_was_killed(fx: Fixture) {
    std::fs::write(
        fx.path("slow_replies.json"),
        r#"[{"tool_calls": [{"name": "wait", "args": {}}]}, {"text": "waited"}]"#,
    )
    .unwrap();
    let slow = json!({"name": "slow", "model": "scripted:slow_replies.json",
        "tools": [{"name": "wait", "description": "", "parameters": {"type": "object"},
                   "command": ["/bin/sh", "-c", "sleep 2; echo '{}'"]}]});
    std::fs::write(fx.path("slow.json"), slow.to_string()).unwrap();
    let mut child = fx
        .command(&["run", "slow.json", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the tool runs, then kill the process in the middle of it.
    let id = loop {
        // Until the run's process has created the database, there is none.
        let listed = fx.run(&["runs", "list", "--json"]);
        let list: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        let started = list["runs"][0]["step"].as_u64().is_some_and(|step| step >= 1);
        if started {
            break list["runs"][0]["id"].as_str().unwrap().to_owned();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        fx.json(&["runs", "show", &id, "--json"], 0)["status"],
        "running",
        "left running by a dead owner"
    );
    let done = fx.json(&["runs", "continue", &id, "--json"], 0);
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["messages"].as_array().unwrap().last().unwrap()["content"], "waited");
}

#[test]
fn a_postgres_url_that_cannot_be_used_is_a_clear_error_without_its_password() {
    let fx = Fixture::new();
    let open = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["runs", "list"])
            .env("TOLLGATE_DB", url)
            .current_dir(fx.path("."))
            .output()
            .unwrap()
    };
    let down = open("postgres://me:s3cret@127.0.0.1:1/db?sslmode=disable");
    let message = String::from_utf8_lossy(&down.stderr).into_owned();
    assert_eq!(code(&down), Some(1), "{message}");
    assert!(
        message.contains("cannot open database postgres://me:***@127.0.0.1:1/db")
            && message.contains("unavailable"),
        "{message}"
    );
    let bad = open("postgres://me:s3cret@host:notaport/db");
    let message = String::from_utf8_lossy(&bad.stderr).into_owned();
    assert_eq!(code(&bad), Some(2), "{message}");
    assert!(message.contains("invalid database settings"), "{message}");
    for output in [&down, &bad] {
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), message);
        assert!(!text.contains("s3cret"), "the password leaked: {text}");
    }
}

fn workers_drain_the_queue_through_a_kill_exactly_once(fx: Fixture) {
    queue_blueprint(&fx, 0.02);
    let runs = queue_runs(&fx, 20);
    let (first, second) = (start_worker(&fx), start_worker(&fx));
    let completed = |statuses: &[String]| statuses.iter().filter(|s| *s == "completed").count();
    wait_for(&fx, &runs, |now| completed(now) >= 3);
    let mut first = first;
    first.kill().unwrap(); // SIGKILL, in the middle of legs
    first.wait().unwrap();
    let third = start_worker(&fx);
    wait_for(&fx, &runs, |now| completed(now) == runs.len());
    signal(&second, "TERM");
    signal(&third, "TERM");
    let reports = [stopped_report(second), stopped_report(third)];
    let log = std::fs::read_to_string(fx.path("workers.log")).unwrap_or_default();
    assert!(reports.iter().all(|r| r["failed"] == 0), "{reports:?}\n{log}");
    for run in &runs {
        let shown = fx.json(&["runs", "show", run, "--json"], 0);
        assert_eq!(
            (shown["status"].as_str(), shown["step"].as_u64()),
            (Some("completed"), Some(11))
        );
        assert_events_gap_free(&fx, run);
    }
    // Each run called the tool five times; the killed worker's legs (three
    // at most) may have repeated the one call each had in flight.
    let effects = std::fs::read_to_string(fx.path("effects.log")).unwrap().lines().count();
    assert!((100..=103).contains(&effects), "{effects} tool side effects");
}

fn a_terminated_worker_releases_its_legs_for_another(fx: Fixture) {
    queue_blueprint(&fx, 0.3);
    let runs = queue_runs(&fx, 3);
    let worker = start_worker(&fx);
    // All three legs under way, then SIGTERM.
    wait_for(&fx, &runs, |now| now.iter().all(|s| s == "running"));
    signal(&worker, "TERM");
    let report = stopped_report(worker);
    assert_eq!((report["released"].as_u64(), report["completed"].as_u64()), (Some(3), Some(0)));
    for run in &runs {
        let shown = fx.json(&["runs", "show", run, "--json"], 0);
        assert_eq!(shown["status"], "queued", "released back to the queue: {shown}");
    }
    let next = start_worker(&fx);
    wait_for(&fx, &runs, |now| now.iter().all(|s| s == "completed"));
    signal(&next, "TERM");
    assert_eq!(stopped_report(next)["completed"], 3);
    let effects = std::fs::read_to_string(fx.path("effects.log")).unwrap().lines().count();
    assert_eq!(effects, 15, "a release at a step boundary repeats nothing");
}

fn a_frozen_worker_loses_its_run_and_its_late_commit_is_refused(fx: Fixture) {
    queue_blueprint(&fx, 0.4);
    let runs = queue_runs(&fx, 1);
    let frozen = start_worker_with(&fx, &["--lease", "1"]);
    let step = |fx: &Fixture| fx.json(&["runs", "show", &runs[0], "--json"], 0)["step"].as_u64();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while step(&fx).unwrap_or(0) < 2 {
        assert!(std::time::Instant::now() < deadline, "the worker never started the run");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    signal(&frozen, "STOP");
    // Its lease runs out while it cannot renew it; another worker takes over.
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let other = start_worker_with(&fx, &["--lease", "1"]);
    wait_for(&fx, &runs, |now| now[0] == "completed");
    signal(&frozen, "CONT");
    // Whatever it finished meanwhile, its next write is fenced off.
    std::thread::sleep(std::time::Duration::from_millis(1_000));
    signal(&frozen, "TERM");
    signal(&other, "TERM");
    let (late, other) = (stopped_report(frozen), stopped_report(other));
    assert_eq!(
        (late["completed"].as_u64(), late["lost_claims"].as_u64(), late["failed"].as_u64()),
        (Some(0), Some(1), Some(0)),
        "the frozen worker's leg was fenced: {late}"
    );
    assert_eq!(other["completed"], 1, "{other}");
    let shown = fx.json(&["runs", "show", &runs[0], "--json"], 0);
    assert_eq!((shown["status"].as_str(), shown["step"].as_u64()), (Some("completed"), Some(11)));
    assert_events_gap_free(&fx, &runs[0]);
    let effects = std::fs::read_to_string(fx.path("effects.log")).unwrap().lines().count();
    assert!((5..=6).contains(&effects), "{effects}: the call in flight repeats at most once");
}

/// The kill sweep at scale, on Postgres: 4 workers, 200 queued runs of 11
/// steps, a worker killed (SIGKILL) at a random moment and restarted, 6
/// times over.
#[test]
fn four_workers_drain_200_runs_through_random_kills_on_postgres() {
    let Some(fx) = Fixture::postgres() else { return };
    queue_blueprint(&fx, 0.0);
    let runs = queue_runs(&fx, 200);
    let mut workers: Vec<_> = (0..4).map(|_| start_worker(&fx)).collect();
    // A small LCG, seeded from the clock: the moments differ run to run
    // and the seed is printed for a replay.
    let mut seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as u64;
    eprintln!("kill sweep seed {seed}");
    let mut next = move |below: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % below
    };
    let kills = 6;
    for _ in 0..kills {
        std::thread::sleep(std::time::Duration::from_millis(200 + next(600)));
        let victim = next(workers.len() as u64) as usize;
        workers[victim].kill().unwrap();
        workers[victim].wait().unwrap();
        workers[victim] = start_worker(&fx);
    }
    let completed = |now: &[String]| now.iter().filter(|s| *s == "completed").count();
    wait_for(&fx, &runs, |now| completed(now) == runs.len());
    for worker in &workers {
        signal(worker, "TERM");
    }
    for worker in workers {
        let report = stopped_report(worker);
        assert_eq!(
            (report["failed"].as_u64(), report["dead_lettered"].as_u64()),
            (Some(0), Some(0))
        );
    }
    let list = fx.json(&["runs", "list", "--limit", "1000", "--json"], 0);
    for run in list["runs"].as_array().unwrap() {
        assert_eq!((run["status"].as_str(), run["step"].as_u64()), (Some("completed"), Some(11)));
    }
    // Event logs gap-free: checked on a sample (each `runs events` is a
    // process); the steps above are exact for all.
    for run in runs.iter().step_by(20) {
        assert_events_gap_free(&fx, run);
    }
    // 5 calls a run; each kill may repeat the call in flight of each of the
    // killed worker's (3) legs, once.
    let effects = std::fs::read_to_string(fx.path("effects.log")).unwrap().lines().count();
    assert!((1_000..=1_000 + kills * 3).contains(&effects), "{effects} tool side effects");
}

/// A mistyped `--db` is "not found" for every command but `run`, and no
/// file appears; another application's SQLite file is refused (exit 2) and
/// left byte for byte as it was.
#[test]
fn missing_and_foreign_databases_are_refused_untouched() {
    let fx = Fixture::new();
    let missing = fx.path("typo.db");
    for args in [
        vec!["runs", "list"],
        vec!["runs", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
        vec!["runs", "events", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
        vec!["runs", "prune", "--older-than", "1d"],
        vec!["worker"],
        vec!["serve", "--addr", "127.0.0.1:0"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("--db")
            .arg(&missing)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(code(&output), Some(3), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("no database at"), "{args:?}: {stderr}");
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }

    let foreign = fx.path("shop.db");
    let conn = rusqlite::Connection::open(&foreign).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER); INSERT INTO customers VALUES (7);")
        .unwrap();
    drop(conn);
    let before = std::fs::read(&foreign).unwrap();
    for args in [vec!["runs", "list"], vec!["run", "hello_bp.json"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .arg("--db")
            .arg(&foreign)
            .args(&args)
            .current_dir(fx.dir.path())
            .output()
            .unwrap();
        assert_eq!(code(&output), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("customers"), "{args:?}");
        assert_eq!(std::fs::read(&foreign).unwrap(), before, "{args:?}: the file changed");
    }
}

/// A paused run whose checkpoint is damaged: `resume` fails with the
/// checksum error, and a later `reject` says why the run failed rather than
/// "someone decided first". `continue` on a finished run conflicts, as
/// `resume` on one does.
#[test]
fn deciding_a_run_that_failed_says_why() {
    let fx = Fixture::new();
    let run = fx.paused();
    let conn = rusqlite::Connection::open(fx.db()).unwrap();
    let (id, mut updates): (i64, Vec<u8>) = conn
        .query_row("SELECT id, updates FROM steps ORDER BY id DESC LIMIT 1", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    let middle = updates.len() / 2;
    updates[middle] ^= 0xff;
    conn.execute("UPDATE steps SET updates = ?1 WHERE id = ?2", rusqlite::params![updates, id])
        .unwrap();
    drop(conn);
    let resumed = fx.run(&["runs", "resume", &run, "--approve"]);
    assert_eq!(code(&resumed), Some(1));
    assert!(String::from_utf8_lossy(&resumed.stderr).contains("checksum"));
    let rejected = fx.run(&["runs", "reject", &run, "--reason", "no"]);
    assert_eq!(code(&rejected), Some(4));
    let said = String::from_utf8_lossy(&rejected.stderr);
    assert!(said.contains("failed") && said.contains("checksum"), "{said}");
    assert!(!said.contains("decided first"), "{said}");

    // A paused run: continue waits for a decision, and says how to give it.
    let paused = fx.paused();
    let output = fx.run(&["runs", "continue", &paused]);
    assert_eq!(code(&output), Some(4));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains(&format!("tollgate runs resume {paused} --interrupt")), "{said}");

    let done = fx.json(&["run", "hello_bp.json", "--json"], 0);
    let id = done["id"].as_str().unwrap();
    for args in [vec!["runs", "continue", id], vec!["runs", "resume", id, "--approve"]] {
        let output = fx.run(&args);
        assert_eq!(code(&output), Some(4), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("completed"), "{args:?}");
    }
}

/// The human `runs events` shows what every event carries: the decision
/// and its reason, the tool refusal told to the model, node updates.
#[test]
fn human_events_show_decisions_reasons_and_updates() {
    let fx = Fixture::new();
    let run = fx.paused();
    let rejected = fx.run(&["runs", "reject", &run, "--reason", "too much"]);
    assert_eq!(code(&rejected), Some(0), "{}", String::from_utf8_lossy(&rejected.stderr));
    let output = fx.run(&["runs", "events", &run]);
    assert_eq!(code(&output), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    let line = |kind: &str| {
        text.lines()
            .filter(|line| line.split_whitespace().nth(2) == Some(kind))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(line("run_resumed").contains("reject: too much"), "{text}");
    assert!(
        line("custom").contains("tool_refused") && line("custom").contains("too much"),
        "{text}"
    );
    assert!(line("node_completed").contains("update {"), "{text}");
    assert!(line("interrupt_raised").contains("approve/edit/reject"), "{text}");
    assert!(line("run_ended").contains("waiting on"), "{text}");
}

/// A graph problem is a blueprint error: exit 2, every problem listed,
/// nothing run.
#[test]
fn graph_problems_exit_2_before_anything_runs() {
    let fx = Fixture::new();
    let graph = json!({"name": "g",
        "agents": [{"name": "END", "model": "scripted:hello.json"},
                   {"name": "lonely", "model": "scripted:hello.json"}],
        "edges": [["START", "END"], ["lonely", "END"]]});
    std::fs::write(fx.path("bad_graph.json"), graph.to_string()).unwrap();
    let output = fx.run(&["run", "bad_graph.json"]);
    assert_eq!(code(&output), Some(2));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("`END` is reserved") && said.contains("`lonely` cannot be reached"),
        "{said}"
    );
    assert!(!fx.db().exists(), "nothing was run, no database made");
}

/// The refunds example ends its run when the refund is rejected: exit 11,
/// the reason as the failure, no refund, the model not called again.
#[test]
fn a_rejected_refund_ends_the_run() {
    let fx = Fixture::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/blueprints/refunds");
    let folder = fx.path("example");
    std::fs::create_dir_all(&folder).unwrap();
    for file in ["refunds.json", "replies.json", "refund.sh"] {
        std::fs::copy(example.join(file), folder.join(file)).unwrap();
    }
    let paused =
        fx.json(&["run", "example/refunds.json", "--input", "Refund order 7", "--json"], 10);
    let run = paused["id"].as_str().unwrap();
    let rejected = fx.run(&["runs", "reject", run, "--reason", "not eligible", "--json"]);
    assert_eq!(code(&rejected), Some(11), "{}", String::from_utf8_lossy(&rejected.stderr));
    let summary: Value = serde_json::from_slice(&rejected.stdout).unwrap();
    assert_eq!(summary["status"], "rejected");
    assert_eq!(summary["error"]["message"], "not eligible");
    let events = fx.run(&["runs", "events", run, "--json"]);
    let events: Vec<Value> = String::from_utf8_lossy(&events.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let models = events.iter().filter(|e| e["event_type"] == "model_started").count();
    assert_eq!(models, 2, "no model call after the rejection");
    let refunds = events
        .iter()
        .filter(|e| e["event_type"] == "tool_started" && e["tool"] == "issue_refund")
        .count();
    assert_eq!(refunds, 0, "the refund was not made");
}

/// A run row with an unknown status is reported as damaged while the other
/// runs are listed; a damaged stored event line stops `runs events`
/// (exit 1), named.
#[test]
fn damaged_rows_are_reported_without_hiding_the_rest() {
    let fx = Fixture::new();
    let ids: Vec<String> = (0..3)
        .map(|_| fx.json(&["run", "hello_bp.json", "--json"], 0)["id"].as_str().unwrap().to_owned())
        .collect();
    let conn = rusqlite::Connection::open(fx.db()).unwrap();
    conn.execute("UPDATE runs SET status = 'sleepy' WHERE id = ?1", [&ids[1]]).unwrap();
    let num: i64 =
        conn.query_row("SELECT num FROM runs WHERE id = ?1", [&ids[2]], |row| row.get(0)).unwrap();
    conn.execute(
        "UPDATE steps SET events = '{broken' || substr(events, 8) WHERE id = (?1 << 32) + 1",
        [num],
    )
    .unwrap();
    drop(conn);

    let listed = fx.json(&["runs", "list", "--json"], 0);
    let listed_ids: Vec<&str> =
        listed["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(listed_ids, [ids[2].as_str(), ids[0].as_str()], "the others are listed");
    assert_eq!(listed["damaged"][0]["id"], ids[1].as_str());
    assert!(listed["damaged"][0]["error"].as_str().unwrap().contains("sleepy"), "{listed}");
    let human = fx.run(&["runs", "list"]);
    assert_eq!(code(&human), Some(0));
    assert!(String::from_utf8_lossy(&human.stdout).contains(&format!("damaged run {}", ids[1])));

    for json in [false, true] {
        let mut args = vec!["runs", "events", ids[2].as_str()];
        if json {
            args.push("--json");
        }
        let output = fx.run(&args);
        assert_eq!(code(&output), Some(1), "{args:?}");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            said.contains("stored event") && said.contains("not valid JSON"),
            "{args:?}: {said}"
        );
    }
}

/// `runs history --values`: every checkpoint, newest first, with its state
/// and next nodes; pages with `--before`.
#[test]
fn history_with_values_and_next_nodes() {
    let fx = Fixture::new();
    let run = fx.paused();
    let page = fx.json(&["runs", "history", &run, "--values", "--json"], 0);
    let checkpoints = page["checkpoints"].as_array().unwrap();
    let steps: Vec<u64> = checkpoints.iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [3, 2, 1, 0], "newest first");
    assert_eq!(checkpoints[0]["next"], json!(["refunds.tools"]));
    assert_eq!(checkpoints[3]["next"], json!(["refunds"]));
    let messages = |c: &Value| c["values"]["messages"].as_array().unwrap().len();
    assert_eq!((messages(&checkpoints[3]), messages(&checkpoints[0])), (1, 4));
    let older = fx.json(&["runs", "history", &run, "--limit", "2", "--before", "2", "--json"], 0);
    let steps: Vec<u64> = older["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 0]);
    assert!(older["checkpoints"][0].get("values").is_none(), "values only when asked");
    let human = fx.run(&["runs", "history", &run, "--values"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("next: refunds.tools") && text.contains("values: {"), "{text}");
}
