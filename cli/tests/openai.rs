//! `tollgate run BLUEPRINT --model openai:MODEL` end to end against a fake
//! OpenAI-compatible server, with a tool round trip.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::process::Command;

use serde_json::{json, Value};
use tollgate_testkit::fake_openai::{FakeOpenAi, Reply};

#[test]
fn run_with_an_openai_model_does_a_tool_round_trip() {
    const KEY: &str = "sk-cli-canary-42";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("never.json"), "[]").unwrap();
    let blueprint = json!({
        "name": "orders", "model": "scripted:never.json", "system": "You answer about orders.",
        "tools": [{"name": "lookup_order", "description": "Find an order",
                   "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
                   "fixture": {"id": 7, "amount": 20}}]
    });
    std::fs::write(dir.path().join("orders.json"), blueprint.to_string()).unwrap();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let server = FakeOpenAi::start().await;
        server.push(Reply::tool_calls(&[("call_9", "lookup_order", r#"{"id": 7}"#)]));
        server.push(Reply::text("Order 7 is 20 EUR."));
        let base = server.base_url().to_owned();
        let path = dir.path().to_owned();
        let output = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args([
                    "--db",
                    "runs.db",
                    "run",
                    "orders.json",
                    "--model",
                    "openai:gpt-test",
                    "--input",
                    "Order 7?",
                    "--json",
                ])
                .current_dir(&path)
                .env("OPENAI_BASE_URL", base)
                .env("OPENAI_API_KEY", KEY)
                .env_remove("TOLLGATE_DB")
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(summary["status"], "completed");
        let messages = summary["result"]["messages"].as_array().unwrap();
        assert_eq!(messages.last().unwrap()["content"], "Order 7 is 20 EUR.");
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].body["model"], "gpt-test");
        assert_eq!(requests[0].authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
        let tool = requests[1].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .unwrap()
            .clone();
        assert_eq!(
            (tool["tool_call_id"].clone(), tool["content"].clone()),
            (json!("call_9"), json!(r#"{"amount":20,"id":7}"#))
        );
    });
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(!bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "the key reached a file");
    }
}
