//! Long-term memory through blueprint agents: what an agent remembers in
//! one thread, another recalls in another thread (semantic search with the
//! testkit's deterministic embedder, the memory also recalled into the
//! system prompt), per user as the run's context says; on SQLite and on
//! PostgreSQL (`TOLLGATE_PG_URL`).

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};
use tollgate_checkpoint::{IndexConfig, Namespace, SearchOp};
use tollgate_server::{Runs, UserInput};
use tollgate_testkit::KeywordEmbedder;

fn blueprint(dir: &Path, name: &str, script: Value) -> tollgate_nodes::Blueprint {
    let script_file = format!("{name}.script.json");
    std::fs::write(dir.join(&script_file), script.to_string()).unwrap();
    let doc = json!({
        "name": "assistant",
        "model": format!("scripted:{script_file}"),
        "memory": {"namespace": ["users", "{user_id}", "memories"], "tools": ["remember", "recall"], "prompt": 2}
    });
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, doc.to_string()).unwrap();
    tollgate_nodes::Blueprint::load(&path).unwrap()
}

fn input(message: &str, user: &str) -> UserInput {
    UserInput::from_json(&json!({"message": message, "context": {"user_id": user}}))
}

/// The contents of the tool messages of a run's final state.
fn tool_results(result: &Value) -> Vec<String> {
    result["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| message["content"].as_str().unwrap().to_owned())
        .collect()
}

async fn remembered_in_one_thread_recalled_in_another(runs: Runs, dir: &Path) {
    let embedder = Arc::new(KeywordEmbedder::new(64));
    let runs = runs.with_embedder(IndexConfig::new(64).fields(["text"]), embedder.clone());
    // Users apart, and apart from other tests sharing the database.
    let ann = format!("ann-{}", ulid::Ulid::new());
    let bob = format!("bob-{}", ulid::Ulid::new());
    let remember = blueprint(
        dir,
        "remember",
        json!([
            {"tool_calls": [{"name": "remember", "args": {"text": "The user prefers French for every answer", "kind": "pref"}}]},
            {"text": "Noted."}
        ]),
    );
    let first = runs
        .start(
            &remember,
            input("Please answer in French from now on.", &ann),
            Some("thread-a"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(first.status.as_str(), "completed", "{:?}", first.error);
    assert!(tool_results(&first.result)[0].contains("saved"), "{:?}", first.result);

    let recall = blueprint(
        dir,
        "recall",
        json!([
            {"tool_calls": [{"name": "recall", "args": {"query": "which language does the user prefer"}}]},
            {"text": "You prefer French."}
        ]),
    );
    let second = runs
        .start(&recall, input("Which language do I prefer?", &ann), Some("thread-b"), None)
        .await
        .unwrap();
    assert_eq!(second.status.as_str(), "completed", "{:?}", second.error);
    let recalled: Value = serde_json::from_str(&tool_results(&second.result)[0]).unwrap();
    let memories = recalled["memories"].as_array().unwrap();
    assert_eq!(memories.len(), 1, "{recalled}");
    assert_eq!(memories[0]["memory"]["text"], "The user prefers French for every answer");
    assert!(memories[0]["score"].as_f64().unwrap() > 0.2, "ranked by similarity: {recalled}");

    // Another user's memory is another namespace.
    let other = runs
        .start(&recall, input("Which language do I prefer?", &bob), Some("thread-c"), None)
        .await
        .unwrap();
    let recalled: Value = serde_json::from_str(&tool_results(&other.result)[0]).unwrap();
    assert_eq!(recalled["memories"], json!([]), "bob has no memories");

    // The item itself, where the namespace template put it.
    let namespace = Namespace::new(["users", ann.as_str(), "memories"]).unwrap();
    let items = runs.memory().search(SearchOp::new(namespace).query("French")).await.unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].value["kind"], "pref");
    assert!(embedder.embedded() >= 4, "puts and queries were embedded");

    // Without the context value the namespace needs, the tool says so.
    let missing = runs
        .start(&recall, UserInput::from("Which language?"), Some("thread-d"), None)
        .await
        .unwrap();
    let text = missing.error.map(|error| error.message).unwrap_or_default();
    assert!(text.contains("user_id"), "the failure names the missing value: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_recalls_in_one_thread_what_it_remembered_in_another_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let runs = Runs::open(&dir.path().join("runs.db"), true).await.unwrap();
    remembered_in_one_thread_recalled_in_another(runs, dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_recalls_in_one_thread_what_it_remembered_in_another_on_postgres() {
    let Some(url) = tollgate_testkit::postgres_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let runs = Runs::open(Path::new(&url), false).await.unwrap();
    remembered_in_one_thread_recalled_in_another(runs, dir.path()).await;
}
