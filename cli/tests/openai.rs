//! `tollgate run BLUEPRINT --model openai:MODEL` end to end against a fake
//! OpenAI-compatible server: a tool round trip, streaming from blueprints
//! and `--stream`, errors inside a stream, and failure classes.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::path::Path;
use std::process::{Command, Output};

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

/// Runs `tollgate --db runs.db ARGS` in `dir` against the fake server, off
/// the runtime's workers (the server answers on them).
async fn tollgate(dir: &Path, server: &FakeOpenAi, args: &[&str]) -> Output {
    let base = server.base_url().to_owned();
    let (dir, args): (_, Vec<String>) =
        (dir.to_owned(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["--db", "runs.db"])
            .args(&args)
            .current_dir(&dir)
            .env("OPENAI_BASE_URL", base)
            .env("OPENAI_API_KEY", "sk-test")
            .env_remove("TOLLGATE_DB")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// The stored events of `run`, as JSON.
async fn events(dir: &Path, server: &FakeOpenAi, run: &str) -> Vec<Value> {
    let output = tollgate(dir, server, &["runs", "events", run, "--json"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event_type"] == kind).collect()
}

fn writer_blueprint(dir: &Path, stream: Option<bool>) {
    std::fs::write(dir.join("never.json"), "[]").unwrap();
    let mut blueprint =
        json!({"name": "writer", "model": "openai:gpt-test", "system": "You write."});
    if let Some(stream) = stream {
        blueprint["stream"] = json!(stream);
    }
    std::fs::write(dir.join("writer.json"), blueprint.to_string()).unwrap();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn blueprints_stream_with_the_stream_field_or_flag() {
    runtime().block_on(async {
        let server = FakeOpenAi::start().await;
        for (field, flag) in [(Some(true), false), (None, true)] {
            let dir = tempfile::tempdir().unwrap();
            writer_blueprint(dir.path(), field);
            server.push(Reply::stream_text(&["Dur", "able ", "agents."]));
            let mut args = vec!["run", "writer.json", "--input", "Write.", "--json"];
            if flag {
                args.push("--stream");
            }
            let output = tollgate(dir.path(), &server, &args).await;
            let case = format!("field {field:?}, flag {flag}");
            assert_eq!(
                output.status.code(),
                Some(0),
                "{case}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
            let run = summary["id"].as_str().unwrap();
            let log = events(dir.path(), &server, run).await;
            let deltas = of_type(&log, "model_delta");
            let text: String = deltas.iter().map(|d| d["text"].as_str().unwrap()).collect();
            assert_eq!(text, "Durable agents.", "{case}");
            assert!(deltas.iter().all(|d| d["attempt"] == 1), "{case}: {deltas:?}");
            let request = server.requests().last().unwrap().body.clone();
            assert_eq!(request["stream"], true, "{case}: the provider was asked to stream");
        }
        // Without the field or the flag, nothing streams.
        let dir = tempfile::tempdir().unwrap();
        writer_blueprint(dir.path(), Some(false));
        server.push(Reply::text("Plain."));
        let output = tollgate(dir.path(), &server, &["run", "writer.json", "--json"]).await;
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
        let log = events(dir.path(), &server, summary["id"].as_str().unwrap()).await;
        assert!(of_type(&log, "model_delta").is_empty());
        assert_eq!(server.requests().last().unwrap().body.get("stream"), None);
    });
}

#[test]
fn a_rate_limit_inside_a_stream_is_retried_and_its_deltas_carry_their_attempt() {
    runtime().block_on(async {
        let server = FakeOpenAi::start().await;
        let dir = tempfile::tempdir().unwrap();
        writer_blueprint(dir.path(), Some(true));
        server.push(Reply::stream_error(
            "Half a sen",
            json!({"message": "RateLimitError: slow down", "type": "throttling_error", "param": null, "code": "429"}),
        ));
        server.push(Reply::stream_text(&["Whole ", "sentence."]));
        let output = tollgate(dir.path(), &server, &["run", "writer.json", "--json"]).await;
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
        let messages = summary["result"]["messages"].as_array().unwrap();
        assert_eq!(messages.last().unwrap()["content"], "Whole sentence.");
        assert_eq!(server.requests().len(), 2, "retried once");

        let log = events(dir.path(), &server, summary["id"].as_str().unwrap()).await;
        let retry = of_type(&log, "retry_scheduled");
        assert_eq!(retry.len(), 1);
        assert!(retry[0]["error"].as_str().unwrap().contains("rate limited"), "{}", retry[0]);
        let by_attempt = |attempt: u64| -> String {
            of_type(&log, "model_delta")
                .iter()
                .filter(|d| d["attempt"] == attempt)
                .map(|d| d["text"].as_str().unwrap())
                .collect()
        };
        assert_eq!((by_attempt(1), by_attempt(2)), ("Half a sen".to_owned(), "Whole sentence.".to_owned()));
        let started: Vec<&Value> = of_type(&log, "model_started");
        let attempts: Vec<&Value> = started.iter().map(|e| &e["attempt"]).collect();
        assert_eq!(attempts, [&json!(1), &json!(2)]);
    });
}

#[test]
fn failed_runs_name_their_class_as_data() {
    runtime().block_on(async {
        let server = FakeOpenAi::start().await;
        let cases = [
            (
                Reply::stream_error(
                    "Par",
                    json!({"message": "BadRequestError: too long", "type": null, "param": null, "code": "400"}),
                ),
                "invalid_request",
                1,
            ),
            (Reply::error(401, "bad key"), "auth", 1),
        ];
        for (reply, class, requests) in cases {
            let dir = tempfile::tempdir().unwrap();
            writer_blueprint(dir.path(), Some(true));
            let before = server.requests().len();
            server.push(reply);
            let output = tollgate(dir.path(), &server, &["run", "writer.json", "--json"]).await;
            assert_eq!(output.status.code(), Some(1), "{class}: {}", String::from_utf8_lossy(&output.stderr));
            let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(summary["status"], "failed");
            assert_eq!(summary["error"]["kind"], "node_failed", "{class}");
            assert_eq!(summary["error"]["class"], class, "{class}: {}", summary["error"]);
            assert_eq!(server.requests().len() - before, requests, "{class}: not retried");

            // The same class in the closing event and in `runs show`.
            let run = summary["id"].as_str().unwrap();
            let log = events(dir.path(), &server, run).await;
            assert_eq!(log.last().unwrap()["error"]["class"], class);
            let shown = tollgate(dir.path(), &server, &["runs", "show", run, "--json"]).await;
            let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
            assert_eq!(shown["error"]["class"], class);
        }
    });
}
