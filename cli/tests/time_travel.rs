//! Time travel outside Rust: a blueprint run's state edited on its latest
//! checkpoint (`runs update-state`, `POST /runs/{id}/state`) and new runs
//! forked from any checkpoint, with an edit (`runs fork`,
//! `POST /runs/{id}/fork`); the source run stays as it was.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use serde_json::{json, Value};
use support::{client, get_json, runtime, send_json, Fixture, Served};

/// The run's state values, through the CLI.
fn values(fx: &Fixture, run: &str) -> Value {
    let page = fx.json(&["runs", "history", run, "--values", "--limit", "1", "--json"], 0);
    page["checkpoints"][0]["values"].clone()
}

#[test]
fn the_cli_edits_a_paused_run_and_forks_from_a_past_checkpoint() {
    let fx = Fixture::new();
    let run = fx.paused();
    let before = fx.json(&["runs", "show", &run, "--json"], 0);
    // A fork from step 1 with an edit: a new run, paused at the same
    // approval, carrying the edit; the source is untouched.
    let forked = fx.json(
        &[
            "runs",
            "fork",
            &run,
            "--step",
            "1",
            "--values",
            r#"{"context": {"ticket": "T-1"}}"#,
            "--by",
            "alice",
            "--json",
        ],
        10,
    );
    let new = forked["id"].as_str().unwrap();
    assert_ne!(new, run);
    assert_eq!(forked["status"], "awaiting_hitl", "{forked}");
    assert_eq!(values(&fx, new)["context"]["ticket"], "T-1");
    let first = fx.json(&["runs", "history", new, "--values", "--json"], 0);
    let first = first["checkpoints"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((&first["source"], &first["by"]), (&json!("fork"), &json!("alice")), "{first}");
    // The fork's own summary says where it came from and what changed.
    let origin = json!({"run": run, "step": 1, "by": "alice", "changed": ["context"]});
    assert_eq!(forked["forked_from"], origin, "{forked}");
    assert_eq!(fx.json(&["runs", "show", new, "--json"], 0)["forked_from"], origin);
    assert!(before.get("forked_from").is_none(), "the source is no fork: {before}");
    assert_eq!(
        fx.json(&["runs", "show", &run, "--json"], 0),
        before,
        "the source run is unchanged"
    );
    // An edit of the paused run: a new checkpoint, the run interrupted
    // until continued, the message appended through the reducer.
    let message = json!({"messages": [{"upsert": {"id": "review.1", "role": "user", "content": "It is order 7, yes."}}]});
    let message = message.to_string();
    let updated =
        fx.json(&["runs", "update-state", &run, "--values", &message, "--by", "bob", "--json"], 0);
    assert_eq!(updated["step"], before["step"].as_u64().unwrap() + 1, "{updated}");
    let latest = fx.json(&["runs", "history", &run, "--values", "--limit", "1", "--json"], 0);
    let latest = &latest["checkpoints"][0];
    assert_eq!((&latest["source"], &latest["by"]), (&json!("update"), &json!("bob")), "{latest}");
    assert_eq!(updated["run"]["status"], "interrupted");
    let said = values(&fx, &run)["messages"].to_string();
    assert!(said.contains("Refund order 7") && said.contains("It is order 7, yes."), "{said}");
    // Continued, it asks again; approved, it completes.
    let continued = fx.json(&["runs", "continue", &run, "--json"], 10);
    assert_eq!(continued["status"], "awaiting_hitl");
    let interrupt = continued["interrupts"][0]["id"].as_str().unwrap().to_owned();
    let done =
        fx.json(&["runs", "resume", &run, "--interrupt", &interrupt, "--approve", "--json"], 0);
    assert_eq!(done["status"], "completed", "{done}");
    // Usage errors say what is wrong; nothing is written.
    for bad in ["[1]", "not json"] {
        let refused = fx.run(&["runs", "update-state", &run, "--values", bad]);
        assert_eq!(support::code(&refused), Some(2), "{bad}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("--values"), "{said}");
    }
    // A finished run takes no edit.
    let finished = fx.run(&["runs", "update-state", &run, "--values", "{}"]);
    assert_eq!(support::code(&finished), Some(4), "{}", String::from_utf8_lossy(&finished.stderr));
}

#[test]
fn the_api_edits_a_paused_run_and_forks_it() {
    let fx = Fixture::new();
    let run = fx.paused();
    let server = Served::start(&fx, &[]);
    runtime().block_on(async {
        let http = client();
        let url = |path: &str| server.url(&format!("/runs/{run}{path}"));
        let before = get_json(&http, &url(""), 200).await;
        // Fork from the latest checkpoint with an edit, waiting for the leg.
        let body = json!({"values": {"context": {"ticket": "T-2"}}, "by": "carol"});
        let forked = send_json(http.post(url("/fork?wait=true")).json(&body), 201).await;
        let new = forked["id"].as_str().unwrap();
        assert_ne!(new, run);
        assert_eq!(forked["status"], "awaiting_hitl", "{forked}");
        let state = get_json(&http, &server.url(&format!("/runs/{new}/state")), 200).await;
        assert_eq!(state["values"]["context"]["ticket"], "T-2", "{state}");
        let forked_from =
            get_json(&http, &server.url(&format!("/runs/{new}/state?step=0")), 200).await;
        assert_eq!((&forked_from["source"], &forked_from["by"]), (&json!("fork"), &json!("carol")));
        // Where it came from, in its summary and in every state view.
        let step = before["step"].as_u64().unwrap();
        let origin = json!({"run": run, "step": step, "by": "carol", "changed": ["context"]});
        assert_eq!(forked["forked_from"], origin, "{forked}");
        assert_eq!(
            get_json(&http, &server.url(&format!("/runs/{new}")), 200).await["forked_from"],
            origin
        );
        assert_eq!(state["forked_from"], origin, "{state}");
        assert_eq!(forked_from["forked_from"], origin);
        assert_eq!(get_json(&http, &url(""), 200).await, before, "the source run is unchanged");
        // Edit the source's state.
        let body = json!({"values": {"context": {"reviewed": "yes"}}, "by": "dan"});
        let updated = send_json(http.post(url("/state")).json(&body), 200).await;
        assert_eq!(updated["step"], before["step"].as_u64().unwrap() + 1, "{updated}");
        assert_eq!(updated["run"]["status"], "interrupted");
        let state = get_json(&http, &url("/state"), 200).await;
        assert_eq!(state["values"]["context"]["reviewed"], "yes", "{state}");
        assert_eq!((&state["source"], &state["by"]), (&json!("update"), &json!("dan")), "{state}");
        // Refusals: not an object, a value that does not fit the state, an
        // unknown run, a checkpoint that does not exist.
        send_json(http.post(url("/state")).json(&json!({"values": [1]})), 400).await;
        let misfit = json!({"values": {"messages": "not a list"}});
        send_json(http.post(url("/state")).json(&misfit), 400).await;
        let unknown = server.url("/runs/01M8Z3Z79JWJ59CG71Z7DG7YQE/fork");
        send_json(http.post(unknown).json(&json!({})), 404).await;
        send_json(http.post(url("/fork")).json(&json!({"step": 999})), 404).await;
    });
}
