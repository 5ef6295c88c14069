//! Workers live through a restart of the Postgres server: every run
//! completes, each step once. A test binary of its own, so that no other
//! test is using the server while it restarts. It restarts the server with
//! `scripts/postgres --restart` (root), which CI allows by setting
//! `TOLLGATE_PG_RESTART=1`; under `CI=true` without it, the test fails.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::process::Command;

use support::{
    assert_events_gap_free, queue_blueprint, queue_runs, signal, start_worker_with, stopped_report,
    wait_for,
};

#[test]
fn workers_finish_every_run_through_a_database_restart() {
    let Some(fx) = support::Fixture::postgres() else { return };
    if std::env::var("TOLLGATE_PG_RESTART").as_deref() != Ok("1") {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI must allow the restart test (TOLLGATE_PG_RESTART=1)"
        );
        eprintln!("skipped: TOLLGATE_PG_RESTART=1 allows this test to restart the server");
        return;
    }
    queue_blueprint(&fx, 0.05);
    let runs = queue_runs(&fx, 10);
    let workers =
        [start_worker_with(&fx, &["--lease", "1"]), start_worker_with(&fx, &["--lease", "1"])];
    let completed = |now: &[String]| now.iter().filter(|s| *s == "completed").count();
    wait_for(&fx, &runs, |now| completed(now) >= 2);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/postgres");
    let restarted = Command::new("bash").args([script, "--restart"]).status().unwrap();
    assert!(restarted.success(), "the server restarted");
    wait_for(&fx, &runs, |now| completed(now) == runs.len());
    for worker in &workers {
        signal(worker, "TERM");
    }
    for worker in workers {
        let report = stopped_report(worker);
        assert_eq!(report["dead_lettered"], 0, "{report}");
    }
    for run in &runs {
        let shown = fx.json(&["runs", "show", run, "--json"], 0);
        assert_eq!(
            (shown["status"].as_str(), shown["step"].as_u64()),
            (Some("completed"), Some(11))
        );
        assert_events_gap_free(&fx, run);
    }
    // Five calls a run; a leg cut by the restart may repeat its call in
    // flight (two workers, three legs each).
    let effects = std::fs::read_to_string(fx.path("effects.log")).unwrap().lines().count();
    assert!((50..=56).contains(&effects), "{effects} tool side effects");
}
