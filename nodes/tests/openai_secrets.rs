//! The OpenAI key kept out of checkpoints, events, errors and logs. A test
//! binary of its own: the log capture is a subscriber of this thread, and
//! tests on other threads registering the same callsites (the HTTP
//! client's) without one could leave them disabled for it.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tollgate_checkpoint::{RunStatus, SqliteStore};
use tollgate_engine::{Executor, RunConfig};
use tollgate_nodes::{Agent, FixtureTool, OpenAiModel, ToolSpec};
use tollgate_testkit::fake_openai::{FakeOpenAi, Reply};

fn lookup() -> FixtureTool {
    let schema =
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]});
    FixtureTool::new(
        ToolSpec::new("lookup_order", "Find an order", schema),
        json!({"id": 7, "amount": 20}),
    )
}

/// Collects log output.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_key_never_reaches_the_database_the_events_the_errors_or_the_logs() {
    const CANARY: &str = "sk-canary-7f3a9c2e1b";
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("canary.db");
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let errors = tracing::subscriber::with_default(subscriber, || {
        // One line of our own: an empty capture means a broken capture.
        tracing::info!("log capture on");
        rt.block_on(async {
            let server = FakeOpenAi::start().await;
            server.push(Reply::tool_calls(&[("call_1", "lookup_order", r#"{"id": 7}"#)]));
            // A provider that echoes the key, less its first characters, in
            // the `model` field spans and events carry.
            server.push(Reply::Json {
                status: 200,
                headers: Vec::new(),
                body: json!({
                    "id": "x", "object": "chat.completion", "model": format!("m-{}", &CANARY[3..]),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "done"}}]
                }),
            });
            // A server that echoes the key back in its error, without its
            // first characters.
            server.push(Reply::error(
                401,
                &format!("Incorrect API key provided: ...{}", &CANARY[3..]),
            ));
            let model =
                OpenAiModel::new("gpt-test", server.base_url(), Some(CANARY.into())).unwrap();
            assert!(!format!("{model:?}").contains(CANARY), "Debug redacts the key");
            let model = Arc::new(model);
            let executor = Executor::new(SqliteStore::open(&db).unwrap());
            let agent = Agent::new("a", model.clone()).tool(lookup()).compile().unwrap();
            let run = agent.run(&executor, "go", RunConfig::new()).await.unwrap();
            assert_eq!(run.status, RunStatus::Completed);
            let failed = agent.run(&executor, "again", RunConfig::new()).await.unwrap_err();
            let auths = server
                .requests()
                .iter()
                .filter(|r| r.authorization.as_deref() == Some(&format!("Bearer {CANARY}")))
                .count();
            assert_eq!(auths, 3, "the key went out as a bearer header every time");
            let events: Vec<String> =
                run.events().iter().map(|e| serde_json::to_string(e).unwrap()).collect();
            vec![failed.to_string(), format!("{failed:?}"), events.join("\n")]
        })
    });
    let fragment = &CANARY[3..];
    for text in &errors {
        assert!(!text.contains(fragment), "leaked: {text}");
    }
    assert!(errors[0].contains("[redacted]"), "the echoed key was scrubbed: {}", errors[0]);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let found = bytes.windows(fragment.len()).any(|w| w == fragment.as_bytes());
        assert!(!found, "the key is in {}", path.display());
    }
    let logs = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(logs.contains("log capture on"), "the log capture works");
    assert!(logs.contains("hyper_util"), "the HTTP client's own lines were captured: {logs}");
    assert!(!logs.contains(fragment), "the key is in the logs");
}
