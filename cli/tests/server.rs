//! `tollgate serve` over real sockets: REST, SSE replay / follow /
//! Last-Event-ID, WebSocket `full_state` then live events, the token.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{json, Value};

const TOKEN: &str = "s3cret";

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tollgate(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .arg("--db")
        .arg(dir.join("runs.db"))
        .args(args)
        .current_dir(dir)
        .env_remove("TOLLGATE_DB");
    command.env_remove("TOLLGATE_TOKEN");
    command
}

fn serve(dir: &Path) -> Server {
    let mut child = tollgate(dir, &["serve", "--addr", "127.0.0.1:0", "--token", TOKEN])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap().to_owned();
    Server { child, base }
}

fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write =
        |name: &str, body: Value| std::fs::write(dir.path().join(name), body.to_string()).unwrap();
    let any = json!({"type": "object"});
    write("approve.json", json!([{"tool_calls": [{"name": "pay", "args": {}}]}, {"text": "paid"}]));
    write(
        "pay.json",
        json!({"name": "pay", "model": "scripted:approve.json",
               "tools": [{"name": "pay", "description": "", "parameters": any, "fixture": {"ok": true}, "approval": true}]}),
    );
    write(
        "slow_replies.json",
        json!([{"tool_calls": [{"name": "wait", "args": {}}]}, {"text": "waited"}]),
    );
    write(
        "slow.json",
        json!({"name": "slow", "model": "scripted:slow_replies.json",
               "tools": [{"name": "wait", "description": "", "parameters": any,
                          "command": ["/bin/sh", "-c", "sleep 1; echo working; echo '{}'"]}]}),
    );
    dir
}

/// An HTTP client. reqwest is built without a bundled crypto provider (the
/// workspace picks ring), so install it first.
fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Starts the approval blueprint; returns the paused run's id.
fn paused(dir: &Path) -> String {
    let output = tollgate(dir, &["run", "pay.json", "--json"]).output().unwrap();
    assert_eq!(output.status.code(), Some(10));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    summary["id"].as_str().unwrap().to_owned()
}

#[test]
fn rest_lists_shows_decides_and_types_its_errors() {
    let dir = fixture();
    let id = paused(dir.path());
    let server = serve(dir.path());
    let client = client();
    runtime().block_on(async {
        let url = |path: &str| format!("{}{path}", server.base);
        let health: Value = client.get(url("/healthz")).send().await.unwrap().json().await.unwrap();
        assert_eq!(health, json!({"ok": true}));

        let list: Value = client
            .get(url("/runs?status=awaiting_hitl"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(list["runs"][0]["id"], id.as_str());
        assert_eq!(list["next_cursor"], Value::Null);
        let show: Value =
            client.get(url(&format!("/runs/{id}"))).send().await.unwrap().json().await.unwrap();
        assert_eq!(show["interrupts"][0]["kind"], "tool_approval");
        let history: Value = client
            .get(url(&format!("/runs/{id}/history?limit=1")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(history["checkpoints"].as_array().unwrap().len(), 1);
        assert!(history["next_before"].is_u64());

        // Typed errors with the CLI's meaning.
        let missing = client.get(url("/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV")).send().await.unwrap();
        assert_eq!(missing.status(), 404);
        assert_eq!(missing.json::<Value>().await.unwrap()["error"]["kind"], "not_found");
        assert_eq!(client.get(url("/runs/nope")).send().await.unwrap().status(), 400);
        assert_eq!(client.get(url("/runs?status=sleepy")).send().await.unwrap().status(), 400);

        // Mutations need the token.
        let resume = url(&format!("/runs/{id}/resume"));
        let body = json!({"decision": "approve"});
        assert_eq!(client.post(&resume).json(&body).send().await.unwrap().status(), 401);
        let wrong = client.post(&resume).bearer_auth("guess").json(&body).send().await.unwrap();
        assert_eq!(wrong.status(), 401);
        let bad = client
            .post(&resume)
            .bearer_auth(TOKEN)
            .json(&json!({"decision": "maybe"}))
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 400);
        let ok = client.post(&resume).bearer_auth(TOKEN).json(&body).send().await.unwrap();
        assert_eq!(ok.status(), 200);
        let again = client.post(&resume).bearer_auth(TOKEN).json(&body).send().await.unwrap();
        assert_eq!(again.status(), 409, "the second decision conflicts");
        let reject = url(&format!("/runs/{id}/reject"));
        assert_eq!(client.post(&reject).bearer_auth(TOKEN).send().await.unwrap().status(), 409);

        // The blueprint run continues in the server.
        assert_eq!(settled_status(&client, &url(&format!("/runs/{id}"))).await, "completed");
    });
}

async fn sse(client: &reqwest::Client, url: &str, last: Option<u64>) -> Vec<(u64, String, Value)> {
    let mut request = client.get(url);
    if let Some(last) = last {
        request = request.header("Last-Event-ID", last.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.bytes_stream().eventsource();
    let mut events = Vec::new();
    while let Some(event) =
        tokio::time::timeout(Duration::from_secs(20), stream.next()).await.unwrap()
    {
        let event = event.unwrap();
        events.push((
            event.id.parse().unwrap(),
            event.event,
            serde_json::from_str(&event.data).unwrap(),
        ));
    }
    events
}

/// Starts the slow blueprint (its tool sleeps a second) in the background.
fn start_slow(dir: &Path) -> Child {
    tollgate(dir, &["run", "slow.json", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The id of the first run to appear in the listing.
/// The run's status once it stops changing to `completed` (polled for 5 s).
async fn settled_status(client: &reqwest::Client, run_url: &str) -> Value {
    let mut status = Value::Null;
    for _ in 0..50 {
        let show: Value = client.get(run_url).send().await.unwrap().json().await.unwrap();
        status = show["status"].clone();
        if status == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    status
}

async fn first_run(client: &reqwest::Client, server: &Server) -> String {
    loop {
        let list: Value =
            client.get(format!("{}/runs", server.base)).send().await.unwrap().json().await.unwrap();
        if let Some(id) = list["runs"][0]["id"].as_str() {
            return id.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn sse_replays_follows_resumes_from_last_event_id_and_ends_with_the_run() {
    let dir = fixture();
    let server = serve(dir.path());
    let client = client();
    let mut run = start_slow(dir.path());
    runtime().block_on(async {
        // Connect while the run is in flight (its tool sleeps a second).
        let id = first_run(&client, &server).await;
        let url = format!("{}/runs/{id}/events", server.base);
        let live = sse(&client, &url, None).await;
        let seqs: Vec<u64> = live.iter().map(|(seq, ..)| *seq).collect();
        assert_eq!(seqs, (1..=live.len() as u64).collect::<Vec<_>>(), "replay then live, gap-free");
        let (_, kind, last) = live.last().unwrap();
        assert_eq!(
            (kind.as_str(), &last["status"]),
            ("run_ended", &json!("completed")),
            "ends after the closing event"
        );
        assert!(live.iter().any(|(_, kind, e)| kind == "tool_delta" && e["line"] == "working"));

        // Last-Event-ID resumes after that event; a mode filters.
        let rest = sse(&client, &url, Some(5)).await;
        assert_eq!(rest.first().unwrap().0, 6);
        assert_eq!(rest.len(), live.len() - 5);
        let finals = sse(&client, &format!("{url}?mode=final"), None).await;
        assert_eq!(
            finals.iter().map(|(_, kind, _)| kind.as_str()).collect::<Vec<_>>(),
            ["run_ended"]
        );
    });
    assert!(run.wait().unwrap().success());
}

#[test]
fn websocket_sends_full_state_then_live_events_in_the_ui_shape() {
    let dir = fixture();
    let server = serve(dir.path());
    let client = client();
    let mut run = start_slow(dir.path());
    runtime().block_on(async {
        let id = first_run(&client, &server).await;
        let ws_url = format!("{}/runs/{id}/ws", server.base.replace("http://", "ws://"));
        let (mut socket, _) = tokio_tungstenite::connect_async(ws_url.as_str()).await.unwrap();
        let first = socket.next().await.unwrap().unwrap();
        let full: Value = serde_json::from_str(first.to_text().unwrap()).unwrap();
        assert_eq!(full["type"], "full_state");
        let mut seen: Vec<Value> = full["events"].as_array().unwrap().clone();
        assert_eq!(seen[0]["executionType"], "run");
        assert_eq!(seen[0]["nodeStatus"], "started");
        while let Some(message) =
            tokio::time::timeout(Duration::from_secs(20), socket.next()).await.unwrap()
        {
            match message.unwrap() {
                tokio_tungstenite::tungstenite::Message::Text(text) => {
                    seen.push(serde_json::from_str(&text).unwrap())
                }
                tokio_tungstenite::tungstenite::Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = socket.close(None).await;
        let last = seen.last().unwrap();
        assert_eq!(
            (&last["executionType"], &last["nodeStatus"], &last["runStatus"]),
            (&json!("run"), &json!("ended"), &json!("completed"))
        );
        assert!(last["result"]["messages"].is_array(), "the closing event carries the result");
        let tool = seen
            .iter()
            .find(|e| e["executionType"] == "tool" && e["nodeStatus"] == "ended")
            .unwrap();
        assert_eq!(tool["toolName"], "wait");
        assert_eq!(tool["nodeId"], "slow.tools:2.0", "tool events sit on their node instance");
        assert_eq!(tool["agentId"], "slow");
        for event in &seen {
            for key in [
                "nodeId",
                "currentNode",
                "nodeStatus",
                "executionType",
                "toolName",
                "plainTextMessage",
            ] {
                assert!(event.get(key).is_some(), "`{key}` missing in {event}");
            }
        }
        let seqs: Vec<u64> = seen.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order, no duplicates: {seqs:?}");
    });
    assert!(run.wait().unwrap().success());
}

#[test]
fn a_postgres_database_is_served_the_same_way() {
    let Some(fx) = support::Fixture::postgres() else { return };
    let id = fx.paused();
    let mut child = fx
        .command(&["serve", "--addr", "127.0.0.1:0", "--token", TOKEN])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let server =
        Server { child, base: line.trim().strip_prefix("listening on ").unwrap().to_owned() };
    let client = client();
    runtime().block_on(async {
        let url = |path: &str| format!("{}{path}", server.base);
        let list: Value = client
            .get(url("/runs?status=awaiting_hitl"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(list["runs"][0]["id"], id.as_str());
        let resume = url(&format!("/runs/{id}/resume"));
        let body = json!({"decision": "approve"});
        let ok = client.post(&resume).bearer_auth(TOKEN).json(&body).send().await.unwrap();
        assert_eq!(ok.status(), 200);
        let again = client.post(&resume).bearer_auth(TOKEN).json(&body).send().await.unwrap();
        assert_eq!(again.status(), 409, "the second decision conflicts");
        assert_eq!(settled_status(&client, &url(&format!("/runs/{id}"))).await, "completed");
        // The events the server streams come from the same database.
        let events = sse(&client, &url(&format!("/runs/{id}/events")), None).await;
        assert_eq!(events.last().unwrap().1, "run_ended");
        let seqs: Vec<u64> = events.iter().map(|(seq, _, _)| *seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    });
}
