//! `tollgate schedule` and `/schedules` with the real binary: schedules
//! added, listed, shown and deleted; a cron schedule ticking every second
//! while two worker processes fire it starts one run per tick; `serve`
//! alone (on SQLite) fires and drives a schedule; the API's answers.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

#[macro_use]
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{client, code, runtime, signal, start_worker, stopped_report, Fixture, Served};

on_both_stores!(two_workers_start_one_run_per_tick);

/// The runs of the database, as `runs list --json` shows them.
fn listed(fx: &Fixture) -> Vec<Value> {
    let page = fx.json(&["runs", "list", "--limit", "200", "--json"], 0);
    page["runs"].as_array().unwrap().clone()
}

fn two_workers_start_one_run_per_tick(fx: Fixture) {
    // Usage errors first (exit 2, saying what): nothing is added.
    let usage = [
        (&["x", "--cron", "61 * * * *"][..], "not a cron expression"),
        (&["x", "--at", "soon"][..], "--at takes an RFC 3339 time"),
        (&["has space", "--at", "2020-01-01T00:00:00Z"][..], "not a schedule id"),
        (&["x", "--cron", "* * * * *", "--missed", "later"][..], "not a missed-ticks policy"),
    ];
    for (args, said) in usage {
        let bad =
            fx.run(&[&["schedule", "add", "--blueprint", "hello_bp.json"][..], args].concat());
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(code(&bad), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }

    let added = fx.json(
        &[
            "schedule",
            "add",
            "every-second",
            "--blueprint",
            "hello_bp.json",
            "--cron",
            "* * * * * *",
            "--input",
            "Hi",
            "--missed",
            "skip",
            "--json",
        ],
        0,
    );
    assert_eq!(
        (added["graph"].as_str(), added["cron"].as_str()),
        (Some("hello"), Some("* * * * * *"))
    );
    assert_eq!((added["missed"].as_str(), added["runs_started"].as_u64()), (Some("skip"), Some(0)));
    let taken = fx.run(&[
        "schedule",
        "add",
        "every-second",
        "--blueprint",
        "hello_bp.json",
        "--cron",
        "* * * * *",
    ]);
    assert_eq!(code(&taken), Some(4), "a taken id is a conflict");

    let started = Instant::now();
    let (first, second) = (start_worker(&fx), start_worker(&fx));
    std::thread::sleep(Duration::from_millis(3_500));
    signal(&first, "TERM");
    signal(&second, "TERM");
    let reports = [stopped_report(first), stopped_report(second)];
    let elapsed = started.elapsed().as_secs_f64();
    assert!(reports.iter().all(|r| r["failed"] == 0), "{reports:?}");

    let shown = fx.json(&["schedule", "show", "every-second", "--json"], 0);
    let runs = listed(&fx);
    let started_runs = shown["runs_started"].as_u64().unwrap();
    assert_eq!(runs.len() as u64, started_runs, "one run per firing: {runs:?}");
    // One tick a second: as many runs as seconds went by, never more.
    assert!(
        started_runs >= 2 && (started_runs as f64) <= elapsed + 1.0,
        "{started_runs} runs in {elapsed} s"
    );
    // Each run's creation second differs: no tick fired twice.
    let mut seconds: Vec<String> =
        runs.iter().map(|run| run["created_at"].as_str().unwrap()[..19].to_owned()).collect();
    seconds.sort();
    seconds.dedup();
    assert_eq!(seconds.len(), runs.len(), "{runs:?}");
    assert_eq!(shown["last_run"], runs[0]["id"], "the newest run is the last");
    for run in &runs {
        assert_eq!(run["status"], "completed", "{run}");
    }

    let list = fx.run(&["schedule", "list"]);
    assert!(String::from_utf8_lossy(&list.stdout)
        .starts_with("every-second\thello@1\tcron * * * * * *"));
    let deleted = fx.run(&["schedule", "delete", "every-second"]);
    assert_eq!(code(&deleted), Some(0));
    assert_eq!(code(&fx.run(&["schedule", "delete", "every-second"])), Some(3));
    assert_eq!(code(&fx.run(&["schedule", "show", "every-second"])), Some(3));
    assert_eq!(listed(&fx).len(), runs.len(), "its runs stay");
}

/// On SQLite, `serve` alone fires schedules and drives their runs; the
/// API adds, lists, shows and deletes them, refusing what is wrong.
#[test]
fn serve_alone_fires_schedules_and_the_api_manages_them() {
    let fx = Fixture::new();
    let due = fx.json(
        &[
            "schedule",
            "add",
            "past",
            "--blueprint",
            "hello_bp.json",
            "--at",
            "2020-01-01T00:00:00Z",
            "--json",
        ],
        0,
    );
    assert_eq!(due["next_at"], "2020-01-01T00:00:00.000Z");
    let folder = fx.dir.path().to_str().unwrap().to_owned();
    let served = Served::start(&fx, &["--blueprints", &folder]);
    let client = client();
    runtime().block_on(async {
        // The one-off, long past, runs once (missed ticks run once).
        let mut shown = Value::Null;
        for _ in 0..200 {
            shown = client.get(served.url("/schedules/past")).send().await.unwrap().json().await.unwrap();
            if shown["runs_started"] == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!((shown["runs_started"].as_u64(), &shown["next_at"]), (Some(1), &Value::Null), "{shown}");
        let run = shown["last_run"].as_str().unwrap().to_owned();
        let mut status = Value::Null;
        for _ in 0..200 {
            let run: Value = client.get(served.url(&format!("/runs/{run}"))).send().await.unwrap().json().await.unwrap();
            status = run["status"].clone();
            if status == "completed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(status, "completed");

        let post = |body: Value| {
            let client = client.clone();
            let url = served.url("/schedules");
            async move {
                let response = client.post(url).json(&body).send().await.unwrap();
                let status = response.status().as_u16();
                (status, response.json::<Value>().await.unwrap())
            }
        };
        let (status, added) = post(json!({"id": "weekdays", "blueprint": "hello_bp", "input": "Hi", "cron": "0 9 * * MON-FRI", "grace_seconds": 30})).await;
        assert_eq!(status, 201, "{added}");
        assert_eq!((added["grace_ms"].as_u64(), added["cron"].as_str()), (Some(30_000), Some("0 9 * * MON-FRI")));
        assert!(added["next_at"].as_str().unwrap().ends_with("T09:00:00.000Z"), "{added}");
        let (status, _) = post(json!({"id": "weekdays", "blueprint": "hello_bp", "at": 0})).await;
        assert_eq!(status, 409);
        for wrong in [
            json!({"id": "x", "blueprint": "hello_bp", "cron": "every day"}),
            json!({"id": "x", "blueprint": "hello_bp"}),
            json!({"id": "x", "blueprint": "hello_bp", "cron": "* * * * *", "at": 0}),
            json!({"id": "x", "blueprint": "hello_bp", "at": "tomorrow"}),
            json!({"id": "x y", "blueprint": "hello_bp", "at": 0}),
            json!({"id": "x", "at": 0}),
            json!({"id": "x", "blueprint": "hello_bp", "at": 0, "missed": "later"}),
            json!({"id": "x", "blueprint": "hello_bp", "at": 0, "grace_seconds": -1}),
        ] {
            let (status, error) = post(wrong.clone()).await;
            assert_eq!(status, 400, "{wrong}: {error}");
        }
        let (status, _) = post(json!({"id": "x", "graph": "nope", "at": 0})).await;
        assert_eq!(status, 404);
        let listed: Value = client.get(served.url("/schedules")).send().await.unwrap().json().await.unwrap();
        let ids: Vec<&str> = listed["schedules"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["past", "weekdays"]);
        let deleted = client.delete(served.url("/schedules/weekdays")).send().await.unwrap();
        assert_eq!(deleted.status().as_u16(), 200);
        let gone = client.get(served.url("/schedules/weekdays")).send().await.unwrap();
        assert_eq!(gone.status().as_u16(), 404);
        let anonymous = support::anonymous().get(served.url("/schedules")).send().await.unwrap();
        assert_eq!(anonymous.status().as_u16(), 401);
    });
    served.stop("TERM");
}
