//! What a token holder can reach, tried as an attacker would, through the
//! real server: starting programs, reading files, sending requests from
//! the server, freezing it, reading its secrets; and the everyday
//! operations that used to lose work (pruning, packs, a refused start,
//! files that are not ours).

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{client, code, get_json, runtime, settled, sha256_hex, Fixture, Served};

/// Text that shows Rust's debug notation or type paths.
fn debug_text(message: &str) -> bool {
    ["GraphRef", "Some(", "rmcp::", "::transport", "{ name:", "Error {", "Os {"]
        .iter()
        .any(|marker| message.contains(marker))
}

/// POSTs `body` to `/runs` and returns the status and the JSON answer.
async fn post_run(client: &reqwest::Client, server: &Served, body: &Value) -> (u16, Value) {
    let response = client.post(server.url("/runs?wait=true")).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap();
    if status >= 400 {
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(!debug_text(message), "debug text in an error: {message}");
    }
    (status, answer)
}

fn message(answer: &Value) -> String {
    answer["error"]["message"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn inline_blueprints_start_no_program_at_any_depth() {
    let fx = Fixture::new();
    let library = fx.path("library");
    std::fs::create_dir_all(&library).unwrap();
    std::fs::write(library.join("hello.json"), r#"[{"text": "Hello!"}]"#).unwrap();
    let server = Served::start(&fx, &["--blueprints", library.to_str().unwrap()]);
    let client = client();
    let touched = fx.path("touched");
    let touch = json!(["sh", "-c", format!("touch {}", touched.display())]);
    let mcp_agent = json!({"name": "a", "model": "scripted:hello.json",
        "mcp_servers": [{"name": "evil", "command": touch}]});
    let tool_agent = json!({"name": "b", "model": "scripted:hello.json",
        "tools": [{"name": "t", "description": "", "parameters": {"type": "object"},
                   "command": touch}]});
    // A graph nesting them inline, two levels down.
    let nested = json!({"name": "outer", "agents": [
        {"name": "inner", "blueprint": {"name": "middle", "agents": [
            {"name": "deep", "blueprint": mcp_agent}], "edges": [["START", "deep"], ["deep", "END"]]}}
    ], "edges": [["START", "inner"], ["inner", "END"]]});
    runtime().block_on(async {
        for blueprint in [&mcp_agent, &tool_agent, &nested] {
            let (status, answer) =
                post_run(&client, &server, &json!({"blueprint": blueprint})).await;
            assert_eq!(status, 400, "{blueprint}: {answer}");
            assert!(message(&answer).contains("may not run programs"), "{answer}");
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!touched.exists(), "a program ran on the server");
}

#[test]
fn inline_blueprints_read_no_file_outside_the_folder_and_say_nothing_of_it() {
    let fx = Fixture::new();
    let library = fx.path("library");
    std::fs::create_dir_all(&library).unwrap();
    std::fs::write(library.join("hello.json"), r#"[{"text": "Hello!"}]"#).unwrap();
    // A planted secret outside the folder: as replies, and as an object.
    let secret = fx.path("secret.json");
    std::fs::write(&secret, r#"["the-planted-secret"]"#).unwrap();
    let keys = fx.path("keys.json");
    std::fs::write(&keys, r#"{"aws_secret_key_name": 1}"#).unwrap();
    std::os::unix::fs::symlink(&secret, library.join("link.json")).unwrap();
    let server = Served::start(&fx, &["--blueprints", library.to_str().unwrap()]);
    let bare = Served::start(&fx, &[]);
    let client = client();
    let agent = |model: String| json!({"name": "a", "model": model});
    runtime().block_on(async {
        let mut answers = Vec::new();
        for named in [
            secret.display().to_string(),
            keys.display().to_string(),
            format!("{}/missing.json", fx.dir.path().display()),
            "../secret.json".to_owned(),
            "link.json".to_owned(),
        ] {
            let body = json!({"blueprint": agent(format!("scripted:{named}")), "input": "hi"});
            let (status, answer) = post_run(&client, &server, &body).await;
            assert_eq!(status, 400, "{named}: {answer}");
            let text = message(&answer);
            assert!(!text.contains("the-planted-secret") && !text.contains("aws_secret"), "{text}");
            // One answer whatever the file: present, missing, a link.
            answers.push(text.replace(&named, "NAME"));
            // Nested blueprints named by path likewise.
            let graph = json!({"name": "g", "agents": [{"name": "x", "blueprint": named}],
                               "edges": [["START", "x"], ["x", "END"]]});
            let (status, answer) = post_run(&client, &server, &json!({"blueprint": graph})).await;
            assert_eq!(status, 400, "{answer}");
            assert!(!message(&answer).contains("the-planted-secret"));
            assert!(!message(&answer).contains("not valid JSON"), "{answer}");
        }
        answers.dedup();
        assert_eq!(answers.len(), 1, "the answers tell files apart: {answers:?}");
        assert!(answers[0].contains("only files inside"), "{answers:?}");
        // Inside the folder: served.
        let body = json!({"blueprint": agent("scripted:hello.json".into()), "input": "hi"});
        let (status, answer) = post_run(&client, &server, &body).await;
        assert_eq!((status, answer["status"].as_str()), (201, Some("completed")), "{answer}");
        // A server without a folder lets inline blueprints name no file.
        let (status, answer) = post_run(&client, &bare, &body).await;
        assert_eq!(status, 400, "{answer}");
    });
}

#[test]
fn fifos_and_devices_named_by_blueprints_cannot_freeze_the_server() {
    let fx = Fixture::new();
    let library = fx.path("library");
    std::fs::create_dir_all(&library).unwrap();
    let fifo = library.join("fifo.json");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    std::os::unix::fs::symlink("/dev/zero", library.join("zero.json")).unwrap();
    let server = Served::start(&fx, &["--blueprints", library.to_str().unwrap()]);
    let client = client();
    runtime().block_on(async {
        let started = Instant::now();
        for _ in 0..4 {
            for name in ["fifo.json", "zero.json"] {
                let body = json!({"blueprint": {"name": "a", "model": format!("scripted:{name}")}});
                let (status, answer) = post_run(&client, &server, &body).await;
                assert_eq!(status, 400, "{answer}");
                // The FIFO is inside the folder; the device is not.
                let says = if name == "fifo.json" { "not a regular file" } else { "only files" };
                assert!(message(&answer).contains(says), "{answer}");
            }
        }
        assert!(started.elapsed() < Duration::from_secs(5), "refused at once");
        get_json(&client, &server.url("/healthz"), 200).await;
    });
    // The operator's own blueprints are read the same way by the CLI.
    for script in [fifo.display().to_string(), "/dev/zero".to_owned()] {
        let blueprint = json!({"name": "a", "model": format!("scripted:{script}")});
        std::fs::write(fx.path("device_bp.json"), blueprint.to_string()).unwrap();
        let started = Instant::now();
        let output = fx.run(&["run", "device_bp.json"]);
        assert_eq!(code(&output), Some(2), "{script}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("not a regular file"), "{script}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(5), "{script}: refused at once");
    }
}

/// Accepts connections on a local port, answering each with an HTTP error
/// whose body is `body`; counts them.
fn listener(body: &'static str) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&count);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buffer = [0u8; 4096];
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = stream.read(&mut buffer);
            let answer = format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (port, count)
}

#[test]
fn inline_mcp_urls_send_nothing_unless_the_host_is_allowed_and_echo_no_body() {
    let fx = Fixture::new();
    let (port, requests) = listener("INTERNAL-ONLY-BODY");
    std::fs::write(fx.path("hello.json"), r#"[{"text": "Hello!"}]"#).unwrap();
    let library = fx.dir.path().to_str().unwrap().to_owned();
    let closed = Served::start(&fx, &["--blueprints", &library]);
    let allowed = format!("127.0.0.1:{port}");
    let open = Served::start(&fx, &["--blueprints", &library, "--allow-mcp-host", &allowed]);
    let client = client();
    let body = json!({"blueprint": {"name": "a", "model": "scripted:hello.json",
        "mcp_servers": [{"name": "web", "url": format!("http://127.0.0.1:{port}/mcp")}]}});
    runtime().block_on(async {
        let (status, answer) = post_run(&client, &closed, &body).await;
        assert_eq!(status, 400, "{answer}");
        assert!(message(&answer).contains("only on hosts"), "{answer}");
        // The server's own address is not a way around it.
        let own = json!({"blueprint": {"name": "a", "model": "scripted:hello.json",
            "mcp_servers": [{"name": "web", "url": closed.url("/healthz")}]}});
        assert_eq!(post_run(&client, &closed, &own).await.0, 400);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 0, "a request went out");

        // Allowed: the request goes, the failure is a 422 in our words.
        let (status, answer) = post_run(&client, &open, &body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["kind"], "unusable");
        let text = message(&answer);
        assert!(!text.contains("INTERNAL-ONLY-BODY"), "the remote body was echoed: {text}");
        assert!(text.contains("MCP server `web`"), "{text}");
        assert!(
            requests.load(std::sync::atomic::Ordering::SeqCst) > 0,
            "the allowed host was asked"
        );
    });
}

/// A blueprint whose command tool prints its environment.
fn env_blueprint(fx: &Fixture) {
    std::fs::write(fx.path("env.sh"), "read args\nenv >&2\necho '{\"ok\": true}'\n").unwrap();
    let replies = json!([{"tool_calls": [{"name": "show_env", "args": {}}]}, {"text": "done"}]);
    std::fs::write(fx.path("env_replies.json"), replies.to_string()).unwrap();
    let blueprint = json!({"name": "envy", "model": "scripted:env_replies.json",
        "tools": [{"name": "show_env", "description": "", "parameters": {"type": "object"},
                   "command": ["/bin/sh", "env.sh"], "env": {"GIVEN": "by-the-blueprint"}}]});
    std::fs::write(fx.path("envy.json"), blueprint.to_string()).unwrap();
}

#[test]
fn programs_get_a_clean_environment_unless_the_operator_passes_names() {
    let fx = Fixture::new();
    env_blueprint(&fx);
    let run = |extra: &[&str]| {
        let mut command = fx.command(&[&["run", "envy.json", "--json"], extra].concat());
        command
            .env("OPENAI_API_KEY", "sk-canary-env-1234567890")
            .env("TOLLGATE_TOKEN", "tok-canary");
        let output = command.output().unwrap();
        assert_eq!(code(&output), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
        let id = summary["id"].as_str().unwrap().to_owned();
        String::from_utf8(fx.command(&["runs", "events", &id, "--json"]).output().unwrap().stdout)
            .unwrap()
    };
    let events = run(&[]);
    assert!(events.contains("GIVEN=by-the-blueprint"), "the blueprint's env: {events}");
    assert!(events.contains("PATH="), "PATH is kept");
    assert!(!events.contains("sk-canary-env"), "the API key reached a program");
    assert!(!events.contains("tok-canary"), "the token reached a program");
    let events = run(&["--pass-env", "OPENAI_API_KEY"]);
    assert!(events.contains("sk-canary-env"), "passed by the operator: {events}");
    assert!(!events.contains("tok-canary"));
}

#[test]
fn errors_of_bad_requests_are_4xx_in_words() {
    let fx = Fixture::new();
    let library = fx.dir.path().to_str().unwrap().to_owned();
    let server = Served::start(&fx, &["--blueprints", &library]);
    let client = client();
    runtime().block_on(async {
        let hello = json!({"name": "hello", "model": "scripted:hello.json"});
        let (status, _) =
            post_run(&client, &server, &json!({"blueprint": hello, "thread": "t"})).await;
        assert_eq!(status, 201);
        // The same thread, another graph: a conflict, named in words.
        let other = json!({"name": "other", "model": "scripted:hello.json"});
        let (status, answer) =
            post_run(&client, &server, &json!({"blueprint": other, "thread": "t"})).await;
        assert_eq!(status, 409, "{answer}");
        assert!(message(&answer).contains("`hello` version 1"), "{answer}");
        // An MCP server that does not start: 422, in words.
        std::fs::write(fx.path("fails.sh"), "echo 'cannot start' >&2\nexit 3\n").unwrap();
        let failing = json!({"name": "f", "model": "scripted:hello.json",
            "mcp_servers": [{"name": "broken", "command": ["/bin/sh", "fails.sh"]}]});
        let open = Served::start(&fx, &["--blueprints", &library, "--allow-inline-commands"]);
        let (status, answer) = post_run(&client, &open, &json!({"blueprint": failing})).await;
        assert_eq!(status, 422, "{answer}");
        assert!(message(&answer).contains("MCP server `broken`"), "{answer}");
    });
}

/// Sends raw bytes, returns the status and body of the answer.
fn raw(server: &Served, request: &[u8]) -> (u16, Value) {
    let address = server.url("").trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may answer and close before all is sent.
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn answers_of_the_http_layer_are_json_too() {
    let fx = Fixture::new();
    let server = Served::start(&fx, &[]);
    let long = format!("GET /runs?x={} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70_000));
    let (status, body) = raw(&server, long.as_bytes());
    assert_eq!((status, body["error"]["kind"].as_str()), (414, Some("uri_too_long")), "{body}");
    let mut many = "GET /healthz HTTP/1.1\r\nhost: x\r\n".to_owned();
    for n in 0..120 {
        many.push_str(&format!("x-h{n}: v\r\n"));
    }
    many.push_str("\r\n");
    let (status, body) = raw(&server, many.as_bytes());
    assert_eq!((status, body["error"]["kind"].as_str()), (431, Some("headers_too_large")));
    let huge =
        format!("GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "b".repeat(1 << 20));
    let (status, body) = raw(&server, huge.as_bytes());
    assert_eq!((status, body["error"]["kind"].as_str()), (431, Some("headers_too_large")));
    let twice =
        "POST /runs HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 5\r\n\r\n{}";
    let (status, body) = raw(&server, twice.as_bytes());
    assert_eq!((status, body["error"]["kind"].as_str()), (400, Some("invalid")), "{body}");
    // The server is still fine.
    let (status, body) =
        raw(&server, b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert_eq!((status, &body), (200, &json!({"ok": true, "status": "ok", "database": "ok"})));
}

#[test]
fn prune_keeps_work_that_waits_unless_told() {
    let fx = Fixture::new();
    let paused = fx.paused();
    let queued = fx.json(&["run", "hello_bp.json", "--queue", "--json"], 0)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = fx.json(&["run", "hello_bp.json", "--json"], 0)["id"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_millis(20));
    let dry = fx.json(&["runs", "prune", "--older-than", "0s", "--dry-run", "--json"], 0);
    assert_eq!(dry["would_delete"], json!([{"id": done, "status": "completed"}]), "{dry}");
    assert_eq!(fx.json(&["runs", "show", &done, "--json"], 0)["status"], "completed");
    let pruned = fx.json(&["runs", "prune", "--older-than", "0s", "--json"], 0);
    assert_eq!(pruned["deleted"], json!([done]));
    for run in [&paused, &queued] {
        assert_eq!(code(&fx.run(&["runs", "show", run])), Some(0), "{run} was pruned");
    }
    let pruned =
        fx.json(&["runs", "prune", "--older-than", "0s", "--status", "awaiting_hitl", "--json"], 0);
    assert_eq!(pruned["deleted"], json!([paused]));
    assert_eq!(code(&fx.run(&["runs", "show", &queued])), Some(0));
    let refused = fx.run(&["runs", "prune", "--older-than", "0s", "--status", "running"]);
    assert_eq!(code(&refused), Some(2));
}

#[test]
fn a_refused_serve_creates_no_database() {
    let fx = Fixture::new();
    let db = fx.path("never.db");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("--db")
        .arg(&db)
        .args(["serve", "--create", "--addr", "0.0.0.0:0"])
        .env_remove("TOLLGATE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(code(&output), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(!db.exists(), "the refused start created the database");
}

#[test]
fn keygen_makes_the_folder_it_writes_into() {
    let fx = Fixture::new();
    let key = fx.path("keys/release");
    let output = fx.run(&["pack", "keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(code(&output), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(key.exists() && fx.path("keys/release.pub").exists());
}

#[test]
fn the_api_description_has_the_binary_s_version() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.yaml"),
    )
    .unwrap();
    let version = text.lines().find_map(|line| line.strip_prefix("  version: ")).unwrap().trim();
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
}

#[test]
fn inline_runs_keep_their_limits_on_later_legs() {
    // A paused inline run continued by a decision rebuilds its blueprint
    // from the stored attachment, still confined to the folder.
    let fx = Fixture::new();
    let library = fx.path("library");
    std::fs::create_dir_all(&library).unwrap();
    let replies = json!([{"tool_calls": [{"name": "ask", "args": {}}]}, {"text": "done"}]);
    std::fs::write(library.join("asks.json"), replies.to_string()).unwrap();
    let server = Served::start(&fx, &["--blueprints", library.to_str().unwrap()]);
    let client = client();
    let blueprint = json!({"name": "asker", "model": "scripted:asks.json",
        "tools": [{"name": "ask", "description": "", "parameters": {"type": "object"},
                   "fixture": {"ok": true}, "approval": true}]});
    runtime().block_on(async {
        let (status, paused) =
            post_run(&client, &server, &json!({"blueprint": blueprint, "input": "go"})).await;
        assert_eq!((status, paused["status"].as_str()), (201, Some("awaiting_hitl")), "{paused}");
        let id = paused["id"].as_str().unwrap();
        let resume = server.url(&format!("/runs/{id}/resume"));
        // The replies become a link to a file outside the folder: the next
        // leg's blueprint is refused, the run still waits.
        let outside = fx.path("asks-outside.json");
        std::fs::rename(library.join("asks.json"), &outside).unwrap();
        std::os::unix::fs::symlink(&outside, library.join("asks.json")).unwrap();
        let response =
            client.post(&resume).json(&json!({"decision": "approve"})).send().await.unwrap();
        assert_eq!(response.status(), 400);
        let refused: Value = response.json().await.unwrap();
        assert!(message(&refused).contains("only files inside"), "{refused}");
        let still = get_json(&client, &server.url(&format!("/runs/{id}")), 200).await;
        assert_eq!(still["status"], "awaiting_hitl");
        // Back inside: the decision goes through.
        std::fs::remove_file(library.join("asks.json")).unwrap();
        std::fs::rename(&outside, library.join("asks.json")).unwrap();
        let response =
            client.post(&resume).json(&json!({"decision": "approve"})).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let done = settled(&client, &server.url(&format!("/runs/{id}"))).await;
        assert_eq!(done["status"], "completed", "{done}");
    });
}

#[test]
fn named_tokens_have_roles_and_decisions_record_who_made_them() {
    let fx = Fixture::new();
    let run = fx.paused();
    let tokens = format!(
        "# who may do what\nrita read {}\ndan decide {}\nada admin {}\n",
        sha256_hex("rita-token"),
        sha256_hex("dan-token"),
        sha256_hex("ada-token")
    );
    std::fs::write(fx.path("tokens"), tokens).unwrap();
    let library = fx.dir.path().to_str().unwrap().to_owned();
    let tokens = fx.path("tokens").to_str().unwrap().to_owned();
    let server =
        Served::start_with(&fx, &["--tokens-file", &tokens, "--blueprints", &library], None);
    let client = support::anonymous();
    let call = |method: reqwest::Method, path: &str, token: &str| {
        client.request(method, server.url(path)).bearer_auth(token)
    };
    runtime().block_on(async {
        // Who am I.
        let me: Value = call(reqwest::Method::GET, "/me", "dan-token")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(me, json!({"name": "dan", "role": "decide"}));
        let stranger = call(reqwest::Method::GET, "/runs", "nobody").send().await.unwrap();
        assert_eq!(stranger.status(), 401);
        // A reader reads but does not decide; a decider does not start.
        let listed = call(reqwest::Method::GET, "/runs", "rita-token").send().await.unwrap();
        assert_eq!(listed.status(), 200);
        let resume = format!("/runs/{run}/resume");
        let refused = call(reqwest::Method::POST, &resume, "rita-token")
            .json(&json!({"decision": "approve"}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 403);
        let start = json!({"blueprint": "hello_bp", "input": "Hi"});
        let refused =
            call(reqwest::Method::POST, "/runs", "dan-token").json(&start).send().await.unwrap();
        assert_eq!(refused.status(), 403);
        let started =
            call(reqwest::Method::POST, "/runs", "ada-token").json(&start).send().await.unwrap();
        assert_eq!(started.status(), 201);
        // The decision records the caller; what they typed is a note.
        let decided = call(reqwest::Method::POST, &resume, "dan-token")
            .json(&json!({"decision": "approve", "by": "Dan from support"}))
            .send()
            .await
            .unwrap();
        assert_eq!(decided.status(), 200);
        // The server continues the run; wait for its leg to end.
        for _ in 0..200 {
            let shown: Value = call(reqwest::Method::GET, &format!("/runs/{run}"), "rita-token")
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if shown["status"] == "completed" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    drop(server);
    let events = String::from_utf8(fx.run(&["runs", "events", &run, "--json"]).stdout).unwrap();
    let resumed: Value = events
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|event| event["event_type"] == "run_resumed")
        .expect("a run_resumed event");
    let decision = &resumed["decisions"][0];
    assert_eq!(
        (decision["decided_by"].as_str(), decision["decision_note"].as_str()),
        (Some("dan"), Some("Dan from support")),
        "{resumed}"
    );
}
