//! A blueprint agent with `"model": "anthropic:MODEL"` end to end through
//! the CLI against a fake Anthropic server: a tool call paused at its
//! approval gate, decided by another process, the tool result and the
//! model's thinking sent back; and a refused key failing the run with its
//! class.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};
use tollgate_testkit::fake_anthropic::{FakeAnthropic, Reply};

const KEY: &str = "sk-ant-cli-canary-7d3e9f";

fn tollgate(dir: &Path, base: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["--db", "runs.db"])
        .args(args)
        .current_dir(dir)
        .env("ANTHROPIC_BASE_URL", base)
        .env("ANTHROPIC_API_KEY", KEY)
        .env_remove("TOLLGATE_DB")
        .output()
        .unwrap()
}

#[test]
fn a_blueprint_agent_on_anthropic_pauses_for_approval_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let schema =
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]});
    let blueprint = json!({
        "name": "refunds", "model": "anthropic:claude-test", "system": "You handle refunds.",
        "tools": [{"name": "issue_refund", "description": "Refund an order", "parameters": schema,
                   "fixture": {"refunded": true}, "approval": true}]
    });
    std::fs::write(dir.path().join("refunds.json"), blueprint.to_string()).unwrap();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let server = FakeAnthropic::start().await;
        let thinking = json!({"type": "thinking", "thinking": "Refund 7.", "signature": "sig-7"});
        server.push(Reply::message(
            json!([thinking, {"type": "tool_use", "id": "toolu_7", "name": "issue_refund",
                              "input": {"id": 7}}]),
            "tool_use",
        ));
        server.push(Reply::text("Refunded order 7."));
        let base = server.base_url().to_owned();
        let path = dir.path().to_owned();
        let run = |args: Vec<&'static str>| {
            let (path, base) = (path.clone(), base.clone());
            tokio::task::spawn_blocking(move || tollgate(&path, &base, &args))
        };
        let paused =
            run(vec!["run", "refunds.json", "--input", "Refund order 7", "--json"]).await.unwrap();
        assert_eq!(paused.status.code(), Some(10), "{}", String::from_utf8_lossy(&paused.stderr));
        let summary: Value = serde_json::from_slice(&paused.stdout).unwrap();
        assert_eq!(summary["status"], "awaiting_hitl");
        assert_eq!(summary["interrupts"][0]["payload"]["tool"], "issue_refund");
        let id: &'static str =
            Box::leak(summary["id"].as_str().unwrap().to_owned().into_boxed_str());
        let done = run(vec!["runs", "resume", id, "--approve", "--json"]).await.unwrap();
        assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
        let summary: Value = serde_json::from_slice(&done.stdout).unwrap();
        assert_eq!(summary["status"], "completed");
        let messages = summary["result"]["messages"].as_array().unwrap();
        assert_eq!(messages.last().unwrap()["content"], "Refunded order 7.");
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        assert!(requests.iter().all(|r| r.header("x-api-key") == Some(KEY)));
        assert_eq!(requests[0].body["model"], "claude-test");
        assert_eq!(requests[0].body["system"], "You handle refunds.");
        // The continued leg (another process) sent the thinking back from
        // the checkpoint, with the tool's result under the call's id.
        let sent = &requests[1].body["messages"];
        assert_eq!(sent[1]["content"][0], thinking);
        assert_eq!(sent[2]["content"][0]["tool_use_id"], "toolu_7");
        assert_eq!(sent[2]["content"][0]["content"], r#"{"refunded":true}"#);

        // A refused key fails the run with its class, the key scrubbed.
        server.push(Reply::error(401, "authentication_error", &format!("bad key {KEY}")));
        let failed =
            run(vec!["run", "refunds.json", "--input", "Refund order 8", "--json"]).await.unwrap();
        assert_eq!(failed.status.code(), Some(1));
        let summary: Value = serde_json::from_slice(&failed.stdout).unwrap();
        assert_eq!(summary["error"]["class"], "auth", "{summary}");
        assert!(!summary.to_string().contains(KEY), "{summary}");
    });
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(!bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "the key reached a file");
    }
}
