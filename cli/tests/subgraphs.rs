//! Subgraphs through the CLI: the review-pipeline example (a graph
//! blueprint whose entries are other blueprints, one in its own file, one
//! inline) pauses inside its nested blueprint, is decided from another
//! process and finishes; on Postgres a worker drives it to its pause. Problems of a
//! nested blueprint are reported before anything runs.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use serde_json::{json, Value};
use support::{assert_events_gap_free, code, Fixture};

fn events(fx: &Fixture, run: &str) -> Vec<Value> {
    let output = fx.run(&["runs", "events", run, "--json"]);
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn pauses_inside_and_finishes(fx: &Fixture, by_worker: bool) {
    support::review_pipeline(fx);
    let input = ["--input", "My order 7 arrived broken.", "--json"];
    let paused = if by_worker {
        // Queued, driven to its pause by a worker.
        let args = [&["run", "pipeline/pipeline.json", "--queue"][..], &input].concat();
        let queued = fx.json(&args, 0);
        let run = queued["id"].as_str().unwrap().to_owned();
        let worker = support::start_worker(fx);
        support::wait_for(fx, std::slice::from_ref(&run), |s| s[0] == "awaiting_hitl");
        support::signal(&worker, "TERM");
        support::stopped_report(worker);
        fx.json(&["runs", "show", &run, "--json"], 0)
    } else {
        fx.json(&[&["run", "pipeline/pipeline.json"][..], &input].concat(), 10)
    };
    let run = paused["id"].as_str().unwrap().to_owned();
    let asked = &paused["interrupts"][0];
    assert_eq!(asked["payload"]["tool"], "issue_refund");
    assert!(asked["node"].as_str().unwrap().starts_with("review/checker"), "{asked}");
    assert_eq!(asked["id"], format!("{run}.2.0.0"), "an id of the parent's step 2");

    // Decided by another process, which continues the run inside.
    let done = fx.json(&["runs", "resume", &run, "--approve", "--json"], 0);
    assert_eq!(done["status"], "completed");
    let shown = fx.json(&["runs", "show", &run, "--json"], 0);
    assert_eq!(shown["status"], "completed");
    let said: Vec<&str> = shown["result"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant" && m["content"] != "")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        said,
        [
            "Order 7, 20 EUR, damaged on arrival.",
            "Order 7 checked: 20 EUR refunded.",
            "Your refund of 20 EUR for order 7 is on its way."
        ]
    );
    let events = events(fx, &run);
    let inner: Vec<&str> = events
        .iter()
        .filter(|e| e["event_type"] == "tool_completed")
        .map(|e| e["node_id"].as_str().unwrap())
        .collect();
    assert_eq!(inner.len(), 2, "lookup_order and issue_refund");
    assert!(inner.iter().all(|id| id.starts_with("review:2.0/checker")), "{inner:?}");
    let summary = events.iter().find(|e| e["node"] == "summary/summarizer").unwrap();
    assert!(summary["node_id"].as_str().unwrap().starts_with("summary:3.0/summarizer:"));
    assert_events_gap_free(fx, &run);
}

#[test]
fn a_nested_blueprint_pauses_inside_and_finishes() {
    pauses_inside_and_finishes(&Fixture::new(), false);
}

#[test]
fn a_nested_blueprint_paused_by_a_worker_is_finished_by_another_process_on_postgres() {
    if let Some(fx) = Fixture::postgres() {
        pauses_inside_and_finishes(&fx, true);
    }
}

#[test]
fn problems_of_a_nested_blueprint_stop_the_run_before_it_starts() {
    let fx = Fixture::new();
    support::review_pipeline(&fx);
    let broken = json!({"name": "review", "agents": [{"name": "checker", "model": "nonsense"}],
                        "edges": [["START", "checker"], ["checker", "END"]]});
    std::fs::write(fx.path("pipeline/review/review.json"), broken.to_string()).unwrap();
    let output = fx.run(&["run", "pipeline/pipeline.json", "--input", "Hi"]);
    assert_eq!(code(&output), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/agents/1/blueprint: in "), "{stderr}");
    assert!(stderr.contains("review.json at /agents/0/model"), "{stderr}");
    assert!(!fx.db().exists(), "nothing was run, no database made");
}
