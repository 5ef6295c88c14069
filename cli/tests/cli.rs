//! The real `tollgate` binary on temporary databases: every command, every
//! exit code, the JSON shapes, and two concurrent resumes.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

#[macro_use]
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
                .map(support::Reaped::new)
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
    assert!(String::from_utf8_lossy(&continued.stderr)
        .contains("of a graph this process does not have"));

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
        .map(support::Reaped::new)
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

/// Ctrl-C stops a run at the next step boundary, letting the step in
/// flight finish; a second Ctrl-C stops it at once: its tool's process is
/// killed, and the run is `interrupted`.
#[test]
fn a_second_ctrl_c_stops_a_run_at_once() {
    let fx = Fixture::new();
    let pid_file = support::pid_blueprint(&fx, "pid");
    let child = fx
        .command(&["run", "pid.json", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(support::Reaped::new)
        .unwrap();
    let pid = support::written_pid(&pid_file);
    let seen = std::time::Instant::now();
    signal(&child, "INT");
    // The first lets the tool go on (it prints for a minute).
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(support::alive(pid), "the first Ctrl-C let the step finish");
    signal(&child, "INT");
    // The leg would otherwise learn of the cancel at its first lease
    // renewal, 5 s after its step began.
    while support::alive(pid) {
        assert!(seen.elapsed() < std::time::Duration::from_secs(4), "the tool {pid} still runs");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "an interrupted run exits 1: {stderr}");
    assert!(stderr.contains("stopping now"), "{stderr}");
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (summary["status"].as_str(), summary["step"].as_u64()),
        (Some("interrupted"), Some(1))
    );
    assert_events_gap_free(&fx, summary["id"].as_str().unwrap());
}

/// On Postgres, a run cancelled from another process (`runs cancel`)
/// stops its worker's leg at once: the worker is told the run changed, the
/// leg renews its lease, is refused, and its tool's process is killed. Its
/// own renewal would come 20 s after its step began (a 60 s lease).
#[test]
fn a_run_cancelled_elsewhere_stops_the_tool_of_its_worker_at_once_on_postgres() {
    let Some(fx) = Fixture::postgres() else { return };
    let pid_file = support::pid_blueprint(&fx, "pid");
    let queued = fx.json(&["run", "pid.json", "--input", "go", "--queue", "--json"], 0);
    let run = queued["id"].as_str().unwrap().to_owned();
    let worker = support::start_worker_with(&fx, &["--lease", "60"]);
    let pid = support::written_pid(&pid_file);
    cancel_and_see_the_tool_stop(&fx, &run, pid, std::time::Duration::from_secs(10));
    signal(&worker, "TERM");
    let report = support::stopped_report(worker);
    assert_eq!((report["completed"].as_u64(), report["released"].as_u64()), (Some(0), Some(0)));
    let shown = fx.json(&["runs", "show", &run, "--json"], 0);
    // Step 1 called the model; the tool's step is not stored.
    assert_eq!((shown["status"].as_str(), shown["step"].as_u64()), (Some("interrupted"), Some(1)));
    assert_events_gap_free(&fx, &run);
}

/// The same for a leg `tollgate run` drives itself on Postgres; its own
/// renewal would come 5 s after its step began (the default 15 s lease).
#[test]
fn a_run_cancelled_elsewhere_stops_the_tool_of_tollgate_run_at_once_on_postgres() {
    let Some(fx) = Fixture::postgres() else { return };
    let pid_file = support::pid_blueprint(&fx, "pid");
    let child = fx
        .command(&["run", "pid.json", "--input", "go", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(support::Reaped::new)
        .unwrap();
    let pid = support::written_pid(&pid_file);
    let listed = fx.json(&["runs", "list", "--json"], 0);
    let run = listed["runs"][0]["id"].as_str().unwrap().to_owned();
    cancel_and_see_the_tool_stop(&fx, &run, pid, std::time::Duration::from_secs(3));
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "an interrupted run exits 1: {stderr}");
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (summary["id"].as_str(), summary["status"].as_str(), summary["step"].as_u64()),
        (Some(run.as_str()), Some("interrupted"), Some(1))
    );
    assert_events_gap_free(&fx, &run);
}

/// Cancels `run` with `runs cancel` and waits for its tool `pid` to be
/// gone, at most `within` after now.
fn cancel_and_see_the_tool_stop(fx: &Fixture, run: &str, pid: u32, within: std::time::Duration) {
    let asked = std::time::Instant::now();
    let cancelled = fx.json(&["runs", "cancel", run, "--json"], 0);
    assert_eq!(cancelled["status"], "interrupted", "{cancelled}");
    let answered = asked.elapsed();
    while support::alive(pid) {
        let waited = asked.elapsed();
        assert!(
            waited < within,
            "the tool {pid} still runs {waited:?} after the cancel (answered in {answered:?})"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
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
        let log = std::fs::read_to_string(fx.path("workers.log")).unwrap_or_default();
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(
            (report["failed"].as_u64(), report["dead_lettered"].as_u64()),
            (Some(0), Some(0)),
            "{report}; the workers warned:\n{}",
            warnings.join("\n")
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
