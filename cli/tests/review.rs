//! What the review page stands on, over real sockets: its files served
//! without the token and without data, the WebSocket token as a
//! subprotocol, the `/changes` feed, the graph endpoint, and decisions
//! recorded with who made them.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::{anonymous, client, get_json, runtime, Fixture, Served, TOKEN};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// Opens a WebSocket at `path` offering `protocols`; the upgrade's answer
/// or the HTTP status it was refused with.
async fn open(
    server: &Served,
    path: &str,
    protocols: &str,
) -> Result<
    (
        tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
        Option<String>,
    ),
    u16,
> {
    let url = server.url(path).replace("http://", "ws://");
    let mut request = url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("sec-websocket-protocol", protocols.parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, response)) => {
            let chosen = response
                .headers()
                .get("sec-websocket-protocol")
                .map(|value| value.to_str().unwrap().to_owned());
            Ok((socket, chosen))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(error) => panic!("{error}"),
    }
}

/// The import statements of a module, each joined onto one line (an
/// import may span several).
fn imports(module: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut open: Option<String> = None;
    for line in module.lines() {
        let statement = match open.take() {
            Some(start) => start + " " + line.trim(),
            None if line.starts_with("import ") => line.to_owned(),
            None => continue,
        };
        if statement.contains(" from ") || statement.trim_end().ends_with(';') {
            found.push(statement);
        } else {
            open = Some(statement);
        }
    }
    assert!(open.is_none(), "an import that never ends: {open:?}");
    found
}

async fn next_json(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a message within 10 s")
            .unwrap()
            .unwrap();
        if let WsMessage::Text(text) = message {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

#[test]
fn the_page_is_served_without_the_token_and_holds_no_data() {
    let fx = Fixture::new();
    let run = fx.paused();
    let server = Served::start(&fx, &[]);
    runtime().block_on(async {
        let page = anonymous().get(server.url("/")).send().await.unwrap();
        assert_eq!(page.status(), 200);
        let headers = page.headers().clone();
        assert!(headers["content-type"].to_str().unwrap().starts_with("text/html"));
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(
            policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"),
            "{policy}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        let html = page.text().await.unwrap();
        assert!(html.contains("/ui/app.js") && !html.contains(&run));
        for file in [
            "app.js",
            "api.js",
            "dom.js",
            "form.js",
            "graph.js",
            "history.js",
            "list.js",
            "run.js",
            "words.js",
        ] {
            let script = anonymous().get(server.url(&format!("/ui/{file}"))).send().await.unwrap();
            assert_eq!(script.status(), 200, "{file}");
            assert!(script.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/javascript"));
            // Nothing from another origin.
            let text = script.text().await.unwrap().replace("http://www.w3.org/2000/svg", "");
            assert!(
                !text.contains("http://") && !text.contains("https://"),
                "{file} names another origin"
            );
            for import in imports(&text) {
                assert!(import.contains(" from './"), "{file}: {import}");
            }
        }
        let style = anonymous().get(server.url("/ui/app.css")).send().await.unwrap();
        assert!(style.headers()["content-type"].to_str().unwrap().starts_with("text/css"));
        for missing in ["/ui/nope.js", "/ui/../runs"] {
            let answer = anonymous().get(server.url(missing)).send().await.unwrap();
            assert!(
                matches!(answer.status().as_u16(), 401 | 404),
                "{missing}: {}",
                answer.status()
            );
        }
        // The data still needs the token.
        let runs = anonymous().get(server.url("/runs")).send().await.unwrap();
        assert_eq!(runs.status(), 401);
    });
}

#[test]
fn websockets_take_the_token_as_a_subprotocol() {
    let fx = Fixture::new();
    let run = fx.paused();
    let server = Served::start(&fx, &[]);
    runtime().block_on(async {
        let path = format!("/runs/{run}/ws?format=events");
        let good = format!("tollgate, tollgate.token.{}", hex(TOKEN));
        let (mut socket, chosen) = open(&server, &path, &good).await.unwrap();
        assert_eq!(chosen.as_deref(), Some("tollgate"));
        let log = next_json(&mut socket).await;
        assert_eq!(log["type"], "log");
        let events = log["events"].as_array().unwrap();
        assert_eq!(events[0]["event_type"], "run_started");
        assert_eq!(events.last().unwrap()["status"], "awaiting_hitl");
        // Envelopes as stored: gap-free seq from 1.
        for (index, event) in events.iter().enumerate() {
            assert_eq!(event["seq"], json!(index + 1));
        }
        for refused in [
            format!("tollgate, tollgate.token.{}", hex("wrong")),
            "tollgate, tollgate.token.zz".to_owned(),
            "tollgate".to_owned(),
        ] {
            assert_eq!(open(&server, &path, &refused).await.err(), Some(401), "{refused}");
        }
        let bad_format = format!("/runs/{run}/ws?format=xml");
        assert_eq!(open(&server, &bad_format, &good).await.err(), Some(400));
    });
}

#[test]
fn changes_says_when_another_process_pauses_a_run() {
    changes_on(&Fixture::new());
}

#[test]
fn changes_says_when_another_process_pauses_a_run_on_postgres() {
    if let Some(fx) = Fixture::postgres() {
        changes_on(&fx);
    }
}

fn changes_on(fx: &Fixture) {
    let server = Served::start(fx, &[]);
    runtime().block_on(async {
        let good = format!("tollgate, tollgate.token.{}", hex(TOKEN));
        let (mut socket, _) = open(&server, "/changes", &good).await.unwrap();
        assert_eq!(next_json(&mut socket).await["type"], "ready");
        // Nothing happens, nothing is said (but on Postgres, once when the
        // server's listening connection is first up: notifications before
        // it would be lost).
        let mut spurious = 0;
        while let Ok(message) =
            tokio::time::timeout(Duration::from_millis(600), socket.next()).await
        {
            assert!(message.is_some(), "the socket closed");
            spurious += 1;
        }
        let allowed = if fx.db.to_string_lossy().starts_with("postgres") { 1 } else { 0 };
        assert!(spurious <= allowed, "{spurious} messages while nothing happened");
        let run = fx.paused();
        assert_eq!(next_json(&mut socket).await["type"], "runs_changed");
        let listed = get_json(&client(), &server.url("/runs?status=awaiting_hitl"), 200).await;
        assert_eq!(listed["runs"][0]["id"], json!(run));
        assert_eq!(open(&server, "/changes", "tollgate").await.err(), Some(401));
    });
}

#[test]
fn the_graph_of_a_blueprint_run_is_served_for_drawing() {
    let fx = Fixture::new();
    let run = fx.paused();
    let server = Served::start(&fx, &[]);
    runtime().block_on(async {
        let graph = get_json(&client(), &server.url(&format!("/runs/{run}/graph")), 200).await;
        assert_eq!(graph["name"], "refunds");
        let nodes: Vec<(String, String)> = graph["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                (n["name"].as_str().unwrap().to_owned(), n["kind"].as_str().unwrap().to_owned())
            })
            .collect();
        for expected in [
            ("__start__", "start"),
            ("__end__", "end"),
            ("refunds", "node"),
            ("refunds.tools", "node"),
        ] {
            assert!(nodes.contains(&(expected.0.to_owned(), expected.1.to_owned())), "{nodes:?}");
        }
        let edges = graph["edges"].as_array().unwrap();
        assert!(
            edges.contains(&json!({"from": "__start__", "to": "refunds", "kind": "static"})),
            "{edges:?}"
        );
        assert!(
            edges.iter().any(|e| e["from"] == "refunds"
                && e["to"] == "refunds.tools"
                && e["kind"] == "conditional"),
            "{edges:?}"
        );
        let missing = client()
            .get(server.url("/runs/01M8Q0AT0J0T9K2YGCMMQ9RFZ5/graph"))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 404);
    });
}

#[test]
fn a_decision_records_who_made_it() {
    let fx = Fixture::new();
    let by_api = fx.paused();
    let by_cli = fx.paused();
    let server = Served::start(&fx, &[]);
    runtime().block_on(async {
        let url = server.url(&format!("/runs/{by_api}/resume"));
        let answer = client()
            .post(&url)
            .json(&json!({"decision": "approve", "by": " carol "}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        support::settled(&client(), &server.url(&format!("/runs/{by_api}"))).await;
    });
    let rejected =
        fx.json(&["runs", "reject", &by_cli, "--reason", "no", "--by", "dave", "--json"], 0);
    assert_ne!(rejected["status"], "awaiting_hitl");
    for (run, who, kind) in [(&by_api, "carol", "approve"), (&by_cli, "dave", "reject")] {
        let output = fx.run(&["runs", "events", run, "--json"]);
        let resumed: Vec<Value> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|event| event["event_type"] == "run_resumed")
            .collect();
        assert_eq!(resumed.len(), 1, "{run}");
        let decision = &resumed[0]["decisions"][0];
        assert_eq!(decision["decided_by"], who, "{decision}");
        assert_eq!(decision["decision"]["decision"], kind, "{decision}");
    }
}
