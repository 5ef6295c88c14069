//! Typed Rust graphs served beside blueprints (`Graphs`): listed, started
//! over `POST /runs {"graph", "input"}`, shown and drawn, paused for a
//! decision and continued here when it is decided, on the version each run
//! started with; a run whose version is gone is a conflict in words.
//! Real sockets, a real SQLite database.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate_engine::{CompiledGraph, GraphState, Interrupt, NodeContext, StateGraph, END, START};
use tollgate_server::{Api, Graphs, Runs, ServeOptions};

/// An expense claim.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
#[graph_state(crate = tollgate_engine)]
struct Claim {
    amount: u32,
    #[reducer(append)]
    log: Vec<String>,
}

/// `expenses`: pauses for approval above `limit`, then pays.
fn expenses(version: u32, limit: u32) -> CompiledGraph<Claim> {
    StateGraph::<Claim>::new("expenses", version)
        .node("check", move |state: Arc<Claim>, ctx: NodeContext| async move {
            if state.amount > limit {
                ctx.interrupt(Interrupt::new("approval", json!({"amount": state.amount})))?;
            }
            Ok(ClaimUpdate::default().log(vec![format!("checked {}", state.amount)]))
        })
        .node("pay", |state: Arc<Claim>, _ctx| async move {
            Ok(ClaimUpdate::default().log(vec![format!("paid {}", state.amount)]))
        })
        .edge(START, "check")
        .edge("check", "pay")
        .edge("pay", END)
        .compile()
        .unwrap()
}

async fn serve(runs: Runs) -> (String, Api) {
    let api = Api::new(runs, ServeOptions::new(([127, 0, 0, 1], 0).into())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = Router::new().merge(api.router());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}"), api)
}

async fn settled(client: &reqwest::Client, url: &str) -> Value {
    let mut shown = Value::Null;
    for _ in 0..200 {
        shown = client.get(url).send().await.unwrap().json().await.unwrap();
        if !matches!(shown["status"].as_str(), Some("running" | "queued")) {
            return shown;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    shown
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_graph_is_started_shown_decided_and_continued_over_http() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let schema = json!({"type": "object", "properties": {"amount": {"type": "integer"}}});
    let graphs = Graphs::new().graph_with_input_schema(expenses(1, 100), schema.clone());
    let runs = Runs::open(&db, true).await.unwrap().with_graphs(graphs);
    let (base, api) = serve(runs).await;
    let client = reqwest::Client::new();

    // Listed with its versions and outline.
    let listed: Value =
        client.get(format!("{base}/graphs")).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["graphs"][0]["name"], "expenses");
    assert_eq!(listed["graphs"][0]["versions"], json!([1]));
    assert_eq!(listed["graphs"][0]["input_schema"], schema);
    let outline = &listed["graphs"][0]["outline"];
    let nodes: Vec<&str> =
        outline["nodes"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()).collect();
    assert!(nodes.contains(&"check") && nodes.contains(&"pay"), "{outline}");
    let missing = client.get(format!("{base}/graphs/nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);

    // A small claim runs through.
    let start = |input: Value| {
        client
            .post(format!("{base}/runs?wait=true"))
            .json(&json!({"graph": "expenses", "input": input}))
            .send()
    };
    let done: Value = start(json!({"amount": 50})).await.unwrap().json().await.unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["graph"], "expenses");
    assert_eq!(done["result"]["log"], json!(["checked 50", "paid 50"]));

    // Input that is not the state's update: 400, nothing stored.
    let refused = start(json!({"amount": "lots"})).await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("`expenses`"), "{body}");

    // A large claim pauses; its state and drawing are served; approving
    // continues it here.
    let paused: Value = start(json!({"amount": 500})).await.unwrap().json().await.unwrap();
    assert_eq!(paused["status"], "awaiting_hitl", "{paused}");
    assert_eq!(paused["interrupts"][0]["payload"], json!({"amount": 500}));
    let id = paused["id"].as_str().unwrap().to_owned();
    let state: Value =
        client.get(format!("{base}/runs/{id}/state")).send().await.unwrap().json().await.unwrap();
    assert_eq!(state["values"]["amount"], 500, "{state}");
    let drawn: Value =
        client.get(format!("{base}/runs/{id}/graph")).send().await.unwrap().json().await.unwrap();
    assert_eq!(drawn["name"], "expenses");
    let history: Value = client
        .get(format!("{base}/runs/{id}/history?values=true"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(history["checkpoints"][0]["values"]["amount"], 500, "{history}");
    // A state write of fields the state does not have changes nothing: it
    // is refused naming them, and the run still waits for its decision.
    let refused = client
        .post(format!("{base}/runs/{id}/state"))
        .json(&json!({"values": {"amount": 1, "amout": 2, "note": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("no fields `amout`, `note`"), "{body}");
    let shown: Value =
        client.get(format!("{base}/runs/{id}")).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        (shown["status"].as_str(), shown["step"].as_u64()),
        (Some("awaiting_hitl"), paused["step"].as_u64()),
        "{shown}"
    );
    let decided = client
        .post(format!("{base}/runs/{id}/resume"))
        .json(&json!({"decision": "approve", "by": "ana"}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 200);
    let done = settled(&client, &format!("{base}/runs/{id}")).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["log"], json!(["checked 500", "paid 500"]));
    // Its leg may still be unregistering: released or ended, none left.
    assert_eq!(api.release(Duration::from_secs(1)).await.1, 0, "no leg left in a step");

    // Another process with version 2 only: the paused version-1 run it
    // cannot continue is a conflict naming both versions.
    let paused: Value = start(json!({"amount": 700})).await.unwrap().json().await.unwrap();
    let id = paused["id"].as_str().unwrap().to_owned();
    let runs =
        Runs::open(&db, false).await.unwrap().with_graphs(Graphs::new().graph(expenses(2, 1000)));
    let (newer, _api) = serve(runs).await;
    let refused = client
        .post(format!("{newer}/runs/{id}/resume"))
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["kind"], "missing_version", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("version 1") && message.contains("has version 2"), "{message}");
    // New runs there start on version 2.
    let fresh: Value = client
        .post(format!("{newer}/runs?wait=true"))
        .json(&json!({"graph": "expenses", "input": {"amount": 700}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(fresh["status"], "completed", "version 2 pays 700 without asking: {fresh}");
}

/// A durable workflow served beside graphs: started over HTTP, paused at
/// its interrupt, approved, and continued here with its finished task not
/// run again; its task events in the run's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_is_started_decided_and_continued_over_http() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use tollgate_engine::{Decision, Workflow, WorkflowContext};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let looked_up = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&looked_up);
    let refund = Workflow::new("refund", 1, move |ctx: WorkflowContext, amount: u32| {
        let counted = Arc::clone(&counted);
        async move {
            let order = ctx
                .task("look_up", move || async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(format!("order for {amount}"))
                })
                .await?;
            let decision = ctx.interrupt(Interrupt::new("approval", json!({"refund": amount})))?;
            Ok(json!({"order": order, "approved": matches!(decision, Decision::Approve)}))
        }
    })
    .unwrap();
    let graphs = Graphs::new().graph(refund.into_graph());
    let runs = Runs::open(&dir.path().join("runs.db"), true).await.unwrap().with_graphs(graphs);
    let (base, _api) = serve(runs).await;
    let client = reqwest::Client::new();
    let paused: Value = client
        .post(format!("{base}/runs?wait=true"))
        .json(&json!({"graph": "refund", "input": {"input": 20}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(paused["status"], "awaiting_hitl", "{paused}");
    assert_eq!(paused["interrupts"][0]["payload"], json!({"refund": 20}));
    let id = paused["id"].as_str().unwrap().to_owned();
    let decided = client
        .post(format!("{base}/runs/{id}/resume"))
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 200);
    let done = settled(&client, &format!("{base}/runs/{id}")).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["output"], json!({"order": "order for 20", "approved": true}));
    assert_eq!(looked_up.load(Ordering::SeqCst), 1, "the task's stored result was used");
    let events = client.get(format!("{base}/runs/{id}/events")).send().await.unwrap();
    let text = events.text().await.unwrap();
    assert_eq!(text.matches("event: task_completed").count(), 1, "{text}");
}

/// A workflow that sleeps, served by the API alone (`Api::new(..).router()`
/// in a service's own app, no `serve`): the API's worker wakes it when
/// its timer is due, and it completes with no one asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_workflow_is_woken_by_the_embedded_api() {
    use tollgate_engine::{Workflow, WorkflowContext};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let nap = Workflow::new("nap", 1, |ctx: WorkflowContext, millis: u64| async move {
        let before = ctx.task("before", || async { Ok("rested".to_owned()) }).await?;
        ctx.sleep(Duration::from_millis(millis)).await?;
        Ok(json!({"before": before, "slept": millis}))
    })
    .unwrap();
    let graphs = Graphs::new().graph(nap.into_graph());
    let runs = Runs::open(&dir.path().join("runs.db"), true).await.unwrap().with_graphs(graphs);
    let (base, _api) = serve(runs).await;
    let client = reqwest::Client::new();
    let started = std::time::Instant::now();
    let asleep: Value = client
        .post(format!("{base}/runs?wait=true"))
        .json(&json!({"graph": "nap", "input": {"input": 1500}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = asleep["id"].as_str().unwrap().to_owned();
    assert_ne!(asleep["status"], "completed", "returned before its sleep ended: {asleep}");
    let url = format!("{base}/runs/{id}");
    let mut shown = Value::Null;
    while started.elapsed() < Duration::from_secs(15) {
        shown = client.get(&url).send().await.unwrap().json().await.unwrap();
        if shown["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(shown["status"], "completed", "never woken: {shown}");
    assert_eq!(shown["result"]["output"], json!({"before": "rested", "slept": 1500}));
    assert!(started.elapsed() >= Duration::from_millis(1500), "woke early");
}
