//! MCP tools through the real CLI: the example blueprint
//! (examples/blueprints/mcp-notes) paused, approved and finished in two
//! processes with the server's stderr as `tool_delta` events; servers
//! stopped when their leg ends; servers that do not start, tools that fail
//! and blueprints that name what does not exist.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{client, code, runtime, Fixture, Served};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The test MCP server (nodes/tests/fixtures/mcp_server.py), copied next
/// to the fixture's blueprints.
fn with_test_server(fx: &Fixture) {
    let script = repo().join("nodes/tests/fixtures/mcp_server.py");
    std::fs::copy(script, fx.path("mcp_server.py")).unwrap();
}

/// The tool messages of a run's final conversation.
fn tool_messages(summary: &Value) -> Vec<Value> {
    let messages = summary["result"]["messages"].as_array().unwrap();
    messages.iter().filter(|m| m["role"] == "tool").cloned().collect()
}

fn events(fx: &Fixture, run: &str) -> Vec<Value> {
    let output = fx.run(&["runs", "events", run, "--json"]);
    assert_eq!(code(&output), Some(0));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn the_example_blueprint_calls_mcp_tools_across_a_pause() {
    let fx = Fixture::new();
    let example = repo().join("examples/blueprints/mcp-notes");
    for file in ["notes.json", "notes_server.py", "replies.json"] {
        std::fs::copy(example.join(file), fx.path(file)).unwrap();
    }
    // `add_note` needs approval: the run pauses before it.
    let paused = fx.json(&["run", "notes.json", "--input", "Note: buy milk", "--json"], 10);
    let run = paused["id"].as_str().unwrap().to_owned();
    assert_eq!(paused["interrupts"][0]["payload"]["tool"], "add_note");
    assert!(!fx.path("saved-notes.json").exists(), "nothing ran before the approval");
    // Another process approves: the server is started again there.
    let done = fx.json(&["runs", "resume", &run, "--approve", "--json"], 0);
    assert_eq!(done["status"], "completed");
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(fx.path("saved-notes.json")).unwrap())
            .unwrap();
    assert_eq!(saved, json!(["Buy milk"]), "the server's env and working directory");

    let events = events(&fx, &run);
    let of =
        |kind: &str| -> Vec<&Value> { events.iter().filter(|e| e["event_type"] == kind).collect() };
    let deltas: Vec<(String, String)> = of("tool_delta")
        .iter()
        .map(|e| (e["stream"].as_str().unwrap().to_owned(), e["line"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        deltas,
        [
            ("stderr".to_owned(), "saving note 1".to_owned()),
            ("stderr".to_owned(), "listing 1 notes".to_owned())
        ]
    );
    let completed = of("tool_completed");
    assert_eq!(completed.len(), 2);
    assert!(completed.iter().all(|e| e["ok"] == true));
    let answer = done["result"]["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(answer["content"], "Saved. Your notes: Buy milk.");
    // The tool result the model saw: the server's structured content.
    assert_eq!(tool_messages(&done)[1]["content"], r#"{"notes":["Buy milk"]}"#);
}

fn test_blueprint(fx: &Fixture, name: &str, mode: &str, replies: Value, extra: Value) {
    std::fs::write(fx.path(&format!("{name}_replies.json")), replies.to_string()).unwrap();
    let mut server = json!({
        "name": "test", "command": ["python3", "mcp_server.py", "--mode", mode],
        "env": {"MCP_PIDFILE": format!("{name}.pid")},
        "start_timeout_ms": 3000, "timeout_ms": 1000
    });
    if let Some(on_error) = extra.get("server_on_error") {
        server["on_error"] = on_error.clone();
    }
    let blueprint = json!({
        "name": name, "model": format!("scripted:{name}_replies.json"), "max_steps": 20,
        "mcp_servers": [server],
        "tools": extra.get("tools").cloned().unwrap_or(json!([]))
    });
    std::fs::write(fx.path(&format!("{name}.json")), blueprint.to_string()).unwrap();
}

fn call(tool: &str, args: Value) -> Value {
    json!({"tool_calls": [{"name": tool, "args": args}]})
}

#[test]
fn tool_failures_are_told_to_the_model_or_fail_the_run_as_the_blueprint_says() {
    let fx = Fixture::new();
    with_test_server(&fx);
    let replies = json!([
        call("add", json!({"a": "two", "b": 3})),
        call("fail", json!({})),
        call("crash", json!({})),
        {"text": "Sorry."}
    ]);
    test_blueprint(&fx, "told", "ok", replies, json!({}));
    let done = fx.json(&["run", "told.json", "--input", "Go", "--json"], 0);
    let tools = tool_messages(&done);
    assert_eq!(tools.len(), 3);
    // Arguments are checked against the server's input schema first.
    let refused = tools[0]["content"].as_str().unwrap();
    assert!(
        refused.starts_with("Error: arguments for tool `add` do not match its schema"),
        "{refused}"
    );
    assert_eq!(tools[1]["is_error"], true);
    assert_eq!(tools[1]["content"], "Error: the disk is full");
    assert_eq!(tools[2]["is_error"], true);
    let crashed = tools[2]["content"].as_str().unwrap();
    assert!(crashed.contains("failed during the call of `crash`"), "{crashed}");
    assert!(crashed.contains("going down"), "its stderr: {crashed}");

    // `on_error: fail_run` on the server: the failed call fails the run.
    let replies = json!([call("hang", json!({})), {"text": "unreachable"}]);
    test_blueprint(&fx, "strict", "ok", replies, json!({"server_on_error": "fail_run"}));
    let started = Instant::now();
    let output = fx.run(&["run", "strict.json", "--input", "Go", "--json"]);
    assert_eq!(code(&output), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(started.elapsed() < Duration::from_secs(10), "the hung call timed out");
    let failed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(failed["status"], "failed");
    let error = failed["error"]["message"].as_str().unwrap();
    assert!(error.contains("timed out after 1000 ms"), "{error}");

    // A tools entry overrides the server: the garbage `garbage` answers
    // (a timeout of 300 ms) is told to the model, though the server says
    // fail_run.
    let replies = json!([call("garbage", json!({})), {"text": "ok"}]);
    let tools =
        json!([{"name": "garbage", "mcp": "test", "timeout_ms": 300, "on_error": "tell_model"}]);
    test_blueprint(
        &fx,
        "mixed",
        "ok",
        replies,
        json!({"server_on_error": "fail_run", "tools": tools}),
    );
    let done = fx.json(&["run", "mixed.json", "--input", "Go", "--json"], 0);
    let tool = tool_messages(&done)[0].clone();
    assert_eq!(tool["is_error"], true);
}

#[test]
fn servers_that_do_not_start_fail_before_a_run_is_stored() {
    let fx = Fixture::new();
    with_test_server(&fx);
    for (mode, expect) in
        [("exit", "no config"), ("refuse", "not today"), ("silent", "did not start within 3000 ms")]
    {
        let name = format!("bad_{mode}");
        test_blueprint(&fx, &name, mode, json!([{"text": "hi"}]), json!({}));
        let started = Instant::now();
        let output = fx.run(&["run", &format!("{name}.json"), "--input", "Go"]);
        assert_eq!(code(&output), Some(1), "{mode}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("MCP server `test`") && stderr.contains(expect),
            "{mode}: {stderr}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{mode}: never a hang");
    }
    let listed = fx.json(&["runs", "list", "--json"], 0);
    assert_eq!(listed["runs"], json!([]), "no run was stored");

    // Blueprints that name what does not exist: invalid input (2).
    let replies = json!([{"text": "hi"}]);
    let tools = json!([{"name": "add", "mcp": "elsewhere"}]);
    test_blueprint(&fx, "unknown_server", "ok", replies.clone(), json!({"tools": tools}));
    let output = fx.run(&["run", "unknown_server.json", "--input", "Go"]);
    assert_eq!(code(&output), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/tools/0/mcp: no MCP server `elsewhere`"), "{stderr}");
    let tools = json!([{"name": "multiply", "mcp": "test", "approval": true}]);
    test_blueprint(&fx, "unknown_tool", "ok", replies, json!({"tools": tools}));
    let output = fx.run(&["run", "unknown_tool.json", "--input", "Go"]);
    assert_eq!(code(&output), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("has no tool `multiply` (it has: add, echo"), "{stderr}");
    std::fs::write(fx.path("x.json"), "[]").unwrap();
    for (server, expect) in [
        (
            json!({"name": "web", "url": "ftp://localhost/mcp"}),
            "/mcp_servers/0/url: `ftp://localhost/mcp` is not an http",
        ),
        (
            json!({"name": "web", "url": "http://localhost:1/mcp", "command": ["x"]}),
            "/mcp_servers/0: an MCP server is started (`command`) or reached (`url`), not both",
        ),
        (json!({"name": "web"}), "/mcp_servers/0: an MCP server needs its `command`"),
    ] {
        let blueprint = json!({"name": "u", "model": "scripted:x.json", "mcp_servers": [server]});
        std::fs::write(fx.path("url.json"), blueprint.to_string()).unwrap();
        let output = fx.run(&["run", "url.json", "--input", "Go"]);
        assert_eq!(code(&output), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expect), "{expect}: {stderr}");
    }
}

#[test]
fn a_server_over_streamable_http_serves_a_blueprint() {
    let fx = Fixture::new();
    with_test_server(&fx);
    let portfile = fx.path("port");
    let server = std::process::Command::new("python3")
        .arg(fx.path("mcp_server.py"))
        .arg("--http")
        .arg(&portfile)
        .spawn()
        .unwrap();
    // Killed however the test ends.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let server = Killed(server);
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = loop {
        match std::fs::read_to_string(&portfile) {
            Ok(port) if !port.is_empty() => break port,
            _ => assert!(Instant::now() < deadline, "the HTTP test server did not start"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::fs::write(
        fx.path("web_replies.json"),
        json!([call("add", json!({"a": 1, "b": 2})), {"text": "3"}]).to_string(),
    )
    .unwrap();
    let blueprint = json!({
        "name": "web", "model": "scripted:web_replies.json",
        "mcp_servers": [{"name": "calc", "url": format!("http://127.0.0.1:{port}/mcp")}]
    });
    std::fs::write(fx.path("web.json"), blueprint.to_string()).unwrap();
    let done = fx.json(&["run", "web.json", "--input", "1+2?", "--json"], 0);
    drop(server);
    assert_eq!(tool_messages(&done)[0]["content"], r#"{"sum":3}"#);
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.split(' ').nth(2).is_none_or(|state| state != "Z"))
}

fn pid(path: &Path) -> u32 {
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

#[test]
fn a_server_lives_as_long_as_its_leg_in_a_long_running_process() {
    let fx = Fixture::new();
    with_test_server(&fx);
    let replies = json!([call("add", json!({"a": 2, "b": 3})), {"text": "5"}]);
    test_blueprint(&fx, "adder", "ok", replies, json!({}));
    let library = fx.dir.path().to_str().unwrap().to_owned();
    let server = Served::start(&fx, &["--blueprints", &library]);
    let client = client();
    runtime().block_on(async {
        let body = json!({"blueprint": "adder", "input": "2+3?"});
        let response = client.post(server.url("/runs?wait=true")).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 201);
        let summary: Value = response.json().await.unwrap();
        assert_eq!(summary["status"], "completed");
        let tool = tool_messages(&summary)[0].clone();
        assert_eq!(tool["content"], r#"{"sum":5}"#);
    });
    // The leg is over and the server still runs: the MCP server is gone.
    let pid = pid(&fx.path("adder.pid"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(pid), "MCP server {pid} outlived its leg");
    drop(server);
}

#[test]
fn queuing_starts_no_server_and_the_worker_starts_its_own() {
    let fx = Fixture::new();
    with_test_server(&fx);
    let replies = json!([call("add", json!({"a": 20, "b": 22})), {"text": "42"}]);
    test_blueprint(&fx, "queued_adder", "ok", replies, json!({}));
    let queued =
        fx.json(&["run", "queued_adder.json", "--input", "20+22?", "--queue", "--json"], 0);
    assert_eq!(queued["status"], "queued");
    assert!(!fx.path("queued_adder.pid").exists(), "queuing started no MCP server");
    let run = queued["id"].as_str().unwrap().to_owned();

    let worker = support::start_worker(&fx);
    support::wait_for(&fx, std::slice::from_ref(&run), |s| s[0] == "completed");
    support::signal(&worker, "TERM");
    support::stopped_report(worker);
    let pid = pid(&fx.path("queued_adder.pid"));
    let done = fx.json(&["runs", "show", &run, "--json"], 0);
    assert_eq!(tool_messages(&done)[0]["content"], r#"{"sum":42}"#);
    assert!(!alive(pid), "the worker's leg stopped its server");
}
