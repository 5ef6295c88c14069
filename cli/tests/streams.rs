//! `tollgate serve`'s live streams over real sockets: SSE replay, follow,
//! `Last-Event-ID` and modes; lines of a tool arriving while it runs; the
//! WebSocket across a pause, the decision and the resumed leg; a run whose
//! owner died; Postgres notifications.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{json, Value};
use support::{client, runtime, settled, sse, Fixture, Served};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// Starts `blueprint` in a `tollgate run` process of its own.
fn start(fx: &Fixture, blueprint: &str) -> support::Reaped {
    fx.command(&["run", blueprint, "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(support::Reaped::new)
        .unwrap()
}

#[test]
fn sse_replays_follows_resumes_from_last_event_id_and_ends_with_the_run() {
    for fx in [Some(Fixture::new()), Fixture::postgres()].into_iter().flatten() {
        support::ticking_blueprint(&fx, "ticker", 3, 0.3);
        let server = Served::start(&fx, &[]);
        let client = client();
        let mut run = start(&fx, "ticker.json");
        runtime().block_on(async {
            // Connect while the run is in flight, driven by another process.
            let id = support::first_listed(&client, &server, "/runs").await;
            let url = server.url(&format!("/runs/{id}/events"));
            let live = sse(&client, &url, None).await;
            let seqs: Vec<u64> = live.iter().map(|(seq, ..)| *seq).collect();
            assert_eq!(
                seqs,
                (1..=live.len() as u64).collect::<Vec<_>>(),
                "replay then live, gap-free"
            );
            let (_, kind, last) = live.last().unwrap();
            assert_eq!((kind.as_str(), &last["status"]), ("run_ended", &json!("completed")));
            assert!(live.iter().any(|(_, kind, e)| kind == "tool_delta" && e["line"] == "tick 3"));

            // Last-Event-ID resumes after that event; a mode filters.
            let rest = sse(&client, &url, Some(5)).await;
            assert_eq!(rest.first().unwrap().0, 6);
            assert_eq!(rest.len(), live.len() - 5);
            let finals = sse(&client, &format!("{url}?mode=final"), None).await;
            let kinds: Vec<&str> = finals.iter().map(|(_, kind, _)| kind.as_str()).collect();
            assert_eq!(kinds, ["run_ended"]);
            // `values`: the state after each step.
            let values = sse(&client, &format!("{url}?mode=values"), None).await;
            let states: Vec<&Value> =
                values.iter().filter(|(_, kind, _)| kind == "values").map(|(_, _, v)| v).collect();
            assert!(states.len() >= 3, "{values:?}");
            let last = states.last().unwrap();
            assert_eq!(
                last["values"]["messages"].as_array().unwrap().last().unwrap()["content"],
                "ticked"
            );
            let refused = client.get(format!("{url}?mode=colour")).send().await.unwrap();
            assert_eq!(refused.status(), 400);
            let refused: Value = refused.json().await.unwrap();
            let message = refused["error"]["message"].as_str().unwrap();
            assert!(message.contains("values") && message.contains("final"), "{message}");
        });
        assert!(run.wait().unwrap().success());
    }
}

/// A run this server drives: each line its tool prints reaches an SSE
/// client while the tool runs, a line at a time, not in one lump when the
/// step commits.
#[test]
fn tool_lines_arrive_while_the_tool_runs() {
    let fx = Fixture::new();
    ticker_lines_arrive_apart(&fx);
}

/// On Postgres a run started over the API goes to a worker process: each
/// line its tool prints still reaches an SSE client of the server while
/// the tool runs (published by the worker, relayed by the server), not in
/// one lump when the step commits.
#[test]
fn tool_lines_from_a_worker_arrive_while_the_tool_runs_on_postgres() {
    let Some(fx) = Fixture::postgres() else { return };
    let mut worker = support::start_worker(&fx);
    ticker_lines_arrive_apart(&fx);
    support::signal(&worker, "TERM");
    worker.wait().unwrap();
}

/// Starts a ticker (three lines a second apart) over the API of a new
/// server and follows its tool lines over SSE: they arrive apart, and
/// every event once, in order.
fn ticker_lines_arrive_apart(fx: &Fixture) {
    support::ticking_blueprint(fx, "ticker", 3, 1.0);
    let server = Served::start(fx, &["--blueprints", fx.dir.path().to_str().unwrap()]);
    let client = client();
    runtime().block_on(async {
        let created =
            support::post_json(&client, &server.url("/runs"), &json!({"blueprint": "ticker"}))
                .await;
        let id = created["id"].as_str().unwrap();
        let response =
            client.get(server.url(&format!("/runs/{id}/events?mode=tools"))).send().await.unwrap();
        let mut stream = response.bytes_stream().eventsource();
        let mut arrivals = Vec::new();
        let mut seqs = Vec::new();
        while let Some(event) =
            tokio::time::timeout(Duration::from_secs(30), stream.next()).await.unwrap()
        {
            let event = event.unwrap();
            let data: Value = serde_json::from_str(&event.data).unwrap();
            seqs.push(data["seq"].as_u64().unwrap());
            if event.event == "tool_delta"
                && data["line"].as_str().is_some_and(|l| l.starts_with("tick"))
            {
                arrivals.push(Instant::now());
            }
        }
        assert_eq!(arrivals.len(), 3, "three lines");
        for pair in arrivals.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap > Duration::from_millis(500), "the lines arrived together: {gap:?}");
        }
        assert!(
            seqs.windows(2).all(|pair| pair[0] < pair[1]),
            "each event once, in order: {seqs:?}"
        );
    });
}

/// The WebSocket stays open across a pause: the decision comes from
/// another client, the resumed leg streams on, and it closes once the run
/// is completed.
#[test]
fn websocket_follows_a_run_through_pause_decision_and_completion() {
    let fx = Fixture::new();
    let id = fx.paused();
    let server = Served::start(&fx, &[]);
    let client = client();
    runtime().block_on(async {
        let mut socket = websocket(&server, &format!("/runs/{id}/ws")).await;
        let first = socket.next().await.unwrap().unwrap();
        let full: Value = serde_json::from_str(first.to_text().unwrap()).unwrap();
        assert_eq!(full["type"], "full_state");
        let paused = full["events"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(paused["runStatus"], "awaiting_hitl");
        // Still open while paused.
        let quiet = tokio::time::timeout(Duration::from_millis(500), socket.next()).await;
        assert!(quiet.is_err(), "nothing is sent, nothing closes: {quiet:?}");

        let resume = server.url(&format!("/runs/{id}/resume"));
        let ok = client.post(&resume).json(&json!({"decision": "approve"})).send().await.unwrap();
        assert_eq!(ok.status(), 200);
        let mut seen = Vec::new();
        let mut closed = false;
        while let Some(message) =
            tokio::time::timeout(Duration::from_secs(20), socket.next()).await.unwrap()
        {
            match message.unwrap() {
                WsMessage::Text(text) => seen.push(serde_json::from_str::<Value>(&text).unwrap()),
                WsMessage::Close(frame) => {
                    // A normal closure (1000), not "no status" (1005).
                    let code = frame.map(|frame| u16::from(frame.code));
                    assert_eq!(code, Some(1000), "the close frame's code");
                    closed = true;
                    break;
                }
                _ => {}
            }
        }
        assert!(closed, "closes after the final status");
        let last = seen.last().unwrap();
        assert_eq!(
            (&last["eventType"], &last["runStatus"]),
            (&json!("run_ended"), &json!("completed"))
        );
        assert!(seen.iter().any(|e| e["eventType"] == "run_resumed"), "the resumed leg: {seen:?}");
        let seqs: Vec<u64> = seen.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order, no duplicates: {seqs:?}");
        assert_eq!(seqs[0], paused["seq"].as_u64().unwrap() + 1, "no gap after the pause");
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
    });
}

/// A stream on a run whose owner died says so, with the command that
/// continues it, instead of waiting in silence.
#[test]
fn a_stream_on_an_orphaned_run_says_so() {
    let fx = Fixture::new();
    support::ticking_blueprint(&fx, "ticker", 20, 0.1);
    let server = Served::start(&fx, &[]);
    let client = client();
    let mut driver = start(&fx, "ticker.json");
    runtime().block_on(async {
        let id = support::first_listed(&client, &server, "/runs").await;
        // The step is in flight; the driving process dies.
        tokio::time::sleep(Duration::from_millis(300)).await;
        support::signal(&driver, "KILL");
        let _ = driver.wait();
        let response = client.get(server.url(&format!("/runs/{id}/events"))).send().await.unwrap();
        let mut stream = response.bytes_stream().eventsource();
        let notice = loop {
            let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if event.event == "orphaned" {
                break serde_json::from_str::<Value>(&event.data).unwrap();
            }
        };
        assert_eq!(notice["run"], id.as_str());
        assert_eq!(notice["continue"], format!("tollgate runs continue {id}"));
        // Continued over the API, it completes (the ticks run again).
        let continued =
            client.post(server.url(&format!("/runs/{id}/continue"))).send().await.unwrap();
        assert_eq!(continued.status(), 200);
        let done = tokio::time::timeout(
            Duration::from_secs(30),
            settled(&client, &server.url(&format!("/runs/{id}"))),
        )
        .await
        .unwrap();
        assert_eq!(done["status"], "completed");
    });
}

/// A step that never commits (its leg cancelled while its tool prints)
/// leaves events a follower got live that the store does not hold, and
/// the next events take their numbers. The follower is told so (`rewind`,
/// with the number it goes back to as its id) before it gets them: what
/// it keeps, rewinds applied, is the stored log. Then the same over a
/// WebSocket that stays open while the run is continued.
#[test]
fn live_events_of_a_step_that_never_commits_are_taken_back() {
    let fx = Fixture::new();
    let release = support::held_blueprint(&fx, "held", false);
    let server = Served::start(&fx, &["--blueprints", fx.dir.path().to_str().unwrap()]);
    let client = client();
    runtime().block_on(async {
        let created =
            support::post_json(&client, &server.url("/runs"), &json!({"blueprint": "held"})).await;
        let id = created["id"].as_str().unwrap().to_owned();
        let url = server.url(&format!("/runs/{id}/events"));
        let response = client.get(url).send().await.unwrap();
        let mut stream = response.bytes_stream().eventsource();
        let mut frames = Vec::new();
        let mut cancelled = false;
        while let Some(frame) =
            tokio::time::timeout(Duration::from_secs(20), stream.next()).await.unwrap()
        {
            let frame = frame.unwrap();
            let data: Value = serde_json::from_str(&frame.data).unwrap();
            frames.push((frame.id.parse::<u64>().unwrap(), frame.event.clone(), data));
            if !cancelled && frame.event == "tool_delta" && frames.len() > 6 {
                let answer =
                    client.post(server.url(&format!("/runs/{id}/cancel"))).send().await.unwrap();
                assert_eq!(answer.status(), 200);
                cancelled = true;
            }
        }
        assert!(cancelled, "{frames:?}");
        let stored = support::stored_log(&fx, &id);
        let rewinds: Vec<&(u64, String, Value)> =
            frames.iter().filter(|(_, kind, _)| kind == "rewind").collect();
        assert_eq!(rewinds.len(), 1, "{frames:?}");
        let (to, _, data) = rewinds[0];
        assert_eq!(data["after"], json!(to), "the rewind's id is where it goes back to");
        assert!(frames.iter().any(|(seq, kind, _)| kind == "tool_delta" && seq > to));
        assert_eq!(kept(&frames), stored, "rewinds applied, the stream is the stored log");
        let (last, kind) = stored.last().unwrap();
        assert_eq!((*last, kind.as_str()), (to + 1, "run_ended"), "the leg's end took the number");

        // A WebSocket open across the cancel and the continue. The lines
        // the cancelled leg's tool printed live before the cancel stopped
        // it reached followers too, until the store contradicts them.
        let continued = client.post(server.url(&format!("/runs/{id}/continue"))).send().await;
        assert_eq!(continued.unwrap().status(), 200);
        let mut socket = websocket(&server, &format!("/runs/{id}/ws?format=events")).await;
        let mut frames = Vec::new();
        let mut cancelled = false;
        while let Some(message) =
            tokio::time::timeout(Duration::from_secs(20), socket.next()).await.unwrap()
        {
            let WsMessage::Text(text) = message.unwrap() else { continue };
            let message: Value = serde_json::from_str(&text).unwrap();
            match message["type"].as_str().unwrap() {
                "log" => {
                    for event in message["events"].as_array().unwrap() {
                        frames.push(ws_frame(event));
                    }
                }
                "event" => frames.push(ws_frame(&message["event"])),
                "rewind" => {
                    let after = message["after"].as_u64().unwrap();
                    frames.push((after, "rewind".to_owned(), json!({"after": after})));
                }
                other => panic!("unexpected {other}: {message}"),
            }
            let deltas = frames.iter().filter(|(_, kind, _)| kind == "tool_delta").count();
            if !cancelled && deltas > 3 && frames.last().unwrap().1 == "tool_delta" {
                let answer =
                    client.post(server.url(&format!("/runs/{id}/cancel"))).send().await.unwrap();
                assert_eq!(answer.status(), 200);
                cancelled = true;
            }
        }
        assert!(cancelled, "{frames:?}");
        assert!(frames.iter().any(|(_, kind, _)| kind == "rewind"), "{frames:?}");
        assert_eq!(kept(&frames), support::stored_log(&fx, &id), "over the WebSocket too");
        std::fs::write(&release, "").unwrap();
    });
}

/// A WebSocket on `path`, with the token.
async fn websocket(
    server: &Served,
    path: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let url = server.url(path).replace("http://", "ws://");
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
            url.as_str(),
        )
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {}", support::TOKEN).parse().unwrap());
    tokio_tungstenite::connect_async(request).await.unwrap().0
}

/// (seq, event_type) of a WebSocket's event envelope.
fn ws_frame(event: &Value) -> (u64, String, Value) {
    let kind = event["event_type"].as_str().unwrap().to_owned();
    (event["seq"].as_u64().unwrap(), kind, event.clone())
}

/// The events a follower keeps of `frames`: each rewind drops those past
/// the number it goes back to.
fn kept(frames: &[(u64, String, Value)]) -> Vec<(u64, String)> {
    let mut kept: Vec<(u64, String)> = Vec::new();
    for (seq, kind, data) in frames {
        if kind == "rewind" {
            let after = data["after"].as_u64().unwrap();
            kept.retain(|(seq, _)| *seq <= after);
        } else {
            kept.push((*seq, kind.clone()));
        }
    }
    kept
}
