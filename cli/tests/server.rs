//! `tollgate serve` over real sockets: every REST endpoint and its errors,
//! the token on every endpoint, the JSON error shape everywhere, the doors
//! (loopback, token sources, CORS, slow clients).

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

#[path = "server/idempotency.rs"]
mod idempotency;
#[path = "server/jwt.rs"]
mod jwt;
#[path = "server/lifecycle.rs"]
mod lifecycle;
#[path = "server/ownership.rs"]
mod ownership;
#[path = "server/retention.rs"]
mod retention;
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{anonymous, client, code, get_json, runtime, settled, Fixture, Served, TOKEN};

#[test]
fn rest_lists_shows_decides_and_types_its_errors() {
    for fx in [Some(Fixture::new()), Fixture::postgres()].into_iter().flatten() {
        let id = fx.paused();
        let server = Served::start(&fx, &[]);
        let client = client();
        runtime().block_on(async {
            let health: Value =
                anonymous().get(server.url("/healthz")).send().await.unwrap().json().await.unwrap();
            assert_eq!(
                health,
                json!({"ok": true, "status": "ok", "database": "ok"}),
                "/healthz needs no token"
            );

            let list = get_json(&client, &server.url("/runs?status=awaiting_hitl"), 200).await;
            assert_eq!(list["runs"][0]["id"], id.as_str());
            assert_eq!(list["next_cursor"], Value::Null);
            let show = get_json(&client, &server.url(&format!("/runs/{id}")), 200).await;
            assert_eq!(show["interrupts"][0]["kind"], "tool_approval");
            let history =
                get_json(&client, &server.url(&format!("/runs/{id}/history?limit=1")), 200).await;
            assert_eq!(history["checkpoints"].as_array().unwrap().len(), 1);
            assert!(history["next_before"].is_u64());

            // Typed errors with the CLI's meaning.
            let missing =
                get_json(&client, &server.url("/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV"), 404).await;
            assert_eq!(missing["error"]["kind"], "not_found");
            get_json(&client, &server.url("/runs/nope"), 400).await;
            get_json(&client, &server.url("/runs?status=sleepy"), 400).await;

            let resume = server.url(&format!("/runs/{id}/resume"));
            let approve = json!({"decision": "approve"});
            let bad =
                client.post(&resume).json(&json!({"decision": "maybe"})).send().await.unwrap();
            assert_eq!(bad.status(), 400);
            assert_eq!(client.post(&resume).json(&approve).send().await.unwrap().status(), 200);
            let again = client.post(&resume).json(&approve).send().await.unwrap();
            assert_eq!(again.status(), 409, "the second decision conflicts");
            let reject = server.url(&format!("/runs/{id}/reject"));
            assert_eq!(client.post(&reject).send().await.unwrap().status(), 409);

            // The blueprint run continues in the server.
            let done = settled(&client, &server.url(&format!("/runs/{id}"))).await;
            assert_eq!(done["status"], "completed");
        });
    }
}

/// Every endpoint answers 401 (in the JSON shape) without the token, with a
/// wrong one, or with another scheme; the right token in any case of
/// `Bearer` passes.
#[test]
fn every_endpoint_needs_the_token() {
    let fx = Fixture::new();
    let id = fx.paused();
    let server = Served::start(&fx, &[]);
    let endpoints: Vec<(&str, String)> = vec![
        ("GET", "/runs".into()),
        ("POST", "/runs".into()),
        ("GET", format!("/runs/{id}")),
        ("DELETE", format!("/runs/{id}")),
        ("GET", format!("/runs/{id}/state")),
        ("GET", format!("/runs/{id}/history")),
        ("POST", format!("/runs/{id}/resume")),
        ("POST", format!("/runs/{id}/reject")),
        ("POST", format!("/runs/{id}/cancel")),
        ("POST", format!("/runs/{id}/continue")),
        ("GET", format!("/runs/{id}/events")),
        ("GET", format!("/runs/{id}/ws")),
        ("GET", "/no/such/path".into()),
    ];
    let http = anonymous();
    runtime().block_on(async {
        for (method, path) in &endpoints {
            let send = |authorization: Option<String>| {
                let mut request =
                    http.request(method.parse().unwrap(), server.url(path)).body("{}");
                if let Some(value) = authorization {
                    request = request.header("authorization", value);
                }
                request.send()
            };
            for (case, authorization) in [
                ("no token", None),
                ("wrong token", Some("Bearer guess".to_owned())),
                ("wrong scheme", Some(format!("Basic {TOKEN}"))),
                ("no credentials", Some("Bearer".to_owned())),
            ] {
                let response = send(authorization).await.unwrap();
                assert_eq!(response.status(), 401, "{method} {path}: {case}");
                let body: Value = response.json().await.unwrap();
                assert_eq!(body["error"]["kind"], "unauthorized", "{method} {path}: {case}");
            }
            let right = send(Some(format!("bEaReR {TOKEN}"))).await.unwrap();
            assert_ne!(right.status(), 401, "{method} {path}: the token in a mixed-case scheme");
        }
    });
}

/// Unknown paths, wrong methods, bodies and targets too large, and query
/// strings that do not parse all answer in the JSON error shape.
#[test]
fn every_error_is_json() {
    let fx = Fixture::new();
    let id = fx.paused();
    let server = Served::start(&fx, &["--max-body", "1024"]);
    let client = client();
    runtime().block_on(async {
        let long = format!("/runs?graph={}", "g".repeat(9_000));
        let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
            (client.get(server.url("/nowhere")), 404, "not_found"),
            (client.put(server.url("/runs")), 405, "method_not_allowed"),
            (client.patch(server.url(&format!("/runs/{id}"))), 405, "method_not_allowed"),
            (client.get(server.url("/runs?limit=many")), 400, "invalid"),
            (client.get(server.url("/runs?color=red")), 400, "invalid"),
            (client.get(server.url(&format!("/runs/{id}/state?step=x"))), 400, "invalid"),
            (client.get(server.url(&long)), 414, "uri_too_long"),
            (
                client
                    .post(server.url("/runs"))
                    .body(format!("{{\"blueprint\": \"{}\"}}", "x".repeat(2_000))),
                413,
                "too_large",
            ),
            (client.post(server.url("/runs")).body("{not json"), 400, "invalid"),
            (client.get(server.url(&format!("/runs/{id}/ws"))), 400, "invalid"),
        ];
        for (request, status, kind) in cases {
            let response = request.send().await.unwrap();
            let what = format!("{} {}", response.status(), response.url().path());
            assert_eq!(response.status().as_u16(), status, "{what}");
            let content = response.headers()["content-type"].to_str().unwrap().to_owned();
            assert!(content.starts_with("application/json"), "{what}: {content}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["kind"], kind, "{what}: {body}");
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(!message.is_empty(), "{body}");
            assert!(!message.contains("--"), "an HTTP error quotes a CLI flag: {message}");
        }
    });
}

#[test]
fn post_runs_starts_inline_and_named_blueprints() {
    let fx = Fixture::new();
    let folder = fx.path("library");
    std::fs::create_dir_all(folder.join("greeter")).unwrap();
    std::fs::write(folder.join("hello.json"), r#"[{"text": "Hello!"}]"#).unwrap();
    let hello = json!({"name": "hello", "model": "scripted:hello.json"});
    std::fs::write(folder.join("greeter").join("greeter.json"), hello.to_string()).unwrap();
    std::fs::copy(fx.path("hello.json"), folder.join("greeter").join("hello.json")).unwrap();
    for file in ["replies.json", "refund.sh"] {
        std::fs::copy(fx.path(file), folder.join(file)).unwrap();
    }
    let library = folder.to_str().unwrap();
    let server = Served::start(&fx, &["--blueprints", library]);
    let client = client();
    runtime().block_on(async {
        let post = |body: Value, wait: bool| {
            let query = if wait { "?wait=true" } else { "" };
            client.post(server.url(&format!("/runs{query}"))).json(&body).send()
        };
        // Inline, waited for.
        let response =
            post(json!({"blueprint": hello, "input": "Hi", "thread": "t-1"}), true).await.unwrap();
        assert_eq!(response.status(), 201);
        let summary: Value = response.json().await.unwrap();
        assert_eq!(summary["status"], "completed");
        assert_eq!(summary["result"]["messages"][1]["content"], "Hello!");
        let threads = get_json(&client, &server.url("/runs?thread=t-1"), 200).await;
        assert_eq!(threads["runs"][0]["id"], summary["id"]);

        // By name, answered as soon as it is stored, then driven here.
        let response =
            post(json!({"blueprint": "greeter", "input": {"message": "Hi"}}), false).await.unwrap();
        assert_eq!(response.status(), 201);
        let summary: Value = response.json().await.unwrap();
        let id = summary["id"].as_str().unwrap();
        let done = settled(&client, &server.url(&format!("/runs/{id}"))).await;
        assert_eq!(done["status"], "completed");

        // A step budget of two stops an agent that needs three (model,
        // tool, model).
        std::fs::write(
            folder.join("look.json"),
            json!([{"tool_calls": [{"name": "look", "args": {}}]}, {"text": "seen"}]).to_string(),
        )
        .unwrap();
        let looker = json!({"name": "looker", "model": "scripted:look.json",
            "tools": [{"name": "look", "description": "", "parameters": {"type": "object"}, "fixture": {}}]});
        let response = post(json!({"blueprint": looker, "max_steps": 2}), true).await.unwrap();
        let summary: Value = response.json().await.unwrap();
        assert_eq!(
            (summary["status"].as_str(), summary["error"]["kind"].as_str()),
            (Some("failed"), Some("step_limit_exceeded"))
        );

        // Refused: command tools inline, unknown names, names that are paths, bad fields.
        let commands: Value =
            serde_json::from_str(&std::fs::read_to_string(fx.path("refunds.json")).unwrap())
                .unwrap();
        for (body, status, says) in [
            (json!({"blueprint": commands}), 400, "may not run programs"),
            (json!({"blueprint": "nobody"}), 404, "no blueprint `nobody`"),
            (json!({"blueprint": "../refunds"}), 400, "not a blueprint name"),
            (json!({"blueprint": 7}), 400, "blueprint"),
            (json!({"blueprint": hello, "max_steps": 0}), 400, "max_steps"),
            (json!({"blueprint": hello, "colour": "red"}), 400, "colour"),
            (json!({"blueprint": {"name": "x"}}), 400, "model"),
        ] {
            let response = post(body.clone(), false).await.unwrap();
            assert_eq!(response.status().as_u16(), status, "{body}");
            let error: Value = response.json().await.unwrap();
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{body}: {message}");
            assert!(!message.contains(" --"), "an HTTP error quotes a CLI flag: {message}");
        }
    });
    // With --allow-inline-commands the refunds blueprint runs to its gate.
    let open = Served::start(
        &fx,
        &["--allow-inline-commands", "--blueprints", fx.dir.path().to_str().unwrap()],
    );
    runtime().block_on(async {
        let commands: Value =
            serde_json::from_str(&std::fs::read_to_string(fx.path("refunds.json")).unwrap())
                .unwrap();
        let response = client
            .post(open.url("/runs?wait=true"))
            .json(&json!({"blueprint": commands, "input": "Refund order 7"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        let summary: Value = response.json().await.unwrap();
        assert_eq!(summary["status"], "awaiting_hitl");
    });
}

/// On Postgres, `POST /runs` queues the run; a worker of another process
/// drives it, and `?wait=true` answers when it ends.
#[test]
fn post_runs_on_postgres_queues_for_workers() {
    let Some(fx) = Fixture::postgres() else { return };
    let server = Served::start(&fx, &["--blueprints", fx.dir.path().to_str().unwrap()]);
    let client = client();
    runtime().block_on(async {
        let queued =
            support::post_json(&client, &server.url("/runs"), &json!({"blueprint": "hello_bp"}))
                .await;
        assert_eq!(queued["status"], "queued", "{queued}");
        let mut worker = support::start_worker(&fx);
        let waited = client
            .post(server.url("/runs?wait=true"))
            .json(&json!({"blueprint": "hello_bp"}))
            .send()
            .await
            .unwrap();
        assert_eq!(waited.status(), 201);
        let waited: Value = waited.json().await.unwrap();
        assert_eq!(waited["status"], "completed", "{waited}");
        let first =
            settled(&client, &server.url(&format!("/runs/{}", queued["id"].as_str().unwrap())))
                .await;
        assert_eq!(first["status"], "completed");
        support::signal(&worker, "TERM");
        let status = worker.wait().unwrap();
        let log = std::fs::read_to_string(fx.path("workers.log")).unwrap_or_default();
        assert!(status.success(), "{status}: {log}");
    });
}

/// Cancel from the API stops a run another process drives; `runs cancel`
/// does the same from the command line.
#[test]
fn cancel_stops_a_run_driven_elsewhere() {
    for fx in [Some(Fixture::new()), Fixture::postgres()].into_iter().flatten() {
        support::ticking_blueprint(&fx, "ticker", 30, 0.2);
        let server = Served::start(&fx, &[]);
        let client = client();
        let driver = fx
            .command(&["run", "ticker.json", "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(support::Reaped::new)
            .unwrap();
        runtime().block_on(async {
            let id = support::first_listed(&client, &server, "/runs").await;
            let cancelled =
                client.post(server.url(&format!("/runs/{id}/cancel"))).send().await.unwrap();
            assert_eq!(cancelled.status(), 200);
            let summary: Value = cancelled.json().await.unwrap();
            assert_eq!(summary["status"], "interrupted");
            let again: Value = client
                .post(server.url(&format!("/runs/{id}/cancel")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(again["status"], "interrupted", "cancelling twice is harmless");
        });
        // The driving process stops at its next write and reports the run.
        let started = Instant::now();
        let output = driver.wait_with_output().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(output.status.code(), Some(1), "an interrupted run exits 1");
        let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(summary["status"], "interrupted");
        support::assert_events_gap_free(&fx, summary["id"].as_str().unwrap());

        // A finished run cannot be cancelled; a queued one ends at once.
        let done = fx.json(&["run", "hello_bp.json", "--json"], 0);
        let refused = fx.run(&["runs", "cancel", done["id"].as_str().unwrap()]);
        assert_eq!(code(&refused), Some(4), "{}", String::from_utf8_lossy(&refused.stderr));
        let queued = fx.json(&["run", "hello_bp.json", "--queue", "--json"], 0);
        let cancelled = fx.json(&["runs", "cancel", queued["id"].as_str().unwrap(), "--json"], 0);
        assert_eq!(cancelled["status"], "interrupted");
        let paused = fx.paused();
        let refused = fx.run(&["runs", "cancel", &paused]);
        assert_eq!(code(&refused), Some(4));
        assert!(String::from_utf8_lossy(&refused.stderr).contains("decide it first"));
    }
}

/// Cancel from the API of a run this server drives stops its leg at once:
/// the tool's process is killed rather than left to run to its end (a leg
/// in another process learns of the cancel at its next lease renewal).
#[test]
fn cancel_kills_the_tool_of_a_leg_this_server_drives() {
    // SQLite: on Postgres the server queues its runs for workers.
    let fx = Fixture::new();
    let pid_file = support::pid_blueprint(&fx, "pid");
    let server = Served::start(&fx, &["--blueprints", fx.dir.path().to_str().unwrap()]);
    let client = client();
    runtime().block_on(async {
        let created =
            support::post_json(&client, &server.url("/runs"), &json!({"blueprint": "pid"})).await;
        let id = created["id"].as_str().unwrap().to_owned();
        let pid = support::written_pid(&pid_file);
        let seen = Instant::now();
        assert!(support::alive(pid), "the tool {pid} runs");
        let cancelled =
            client.post(server.url(&format!("/runs/{id}/cancel"))).send().await.unwrap();
        assert_eq!(cancelled.status(), 200);
        assert_eq!(cancelled.json::<Value>().await.unwrap()["status"], "interrupted");
        let answered = seen.elapsed();
        // Left alone, the tool would print for a minute; its leg would
        // learn of the cancel at its first lease renewal, 5 s (a third of
        // the default lease) after its step began. The server wakes it.
        while support::alive(pid) {
            assert!(
                seen.elapsed() < Duration::from_secs(4),
                "the tool {pid} still runs (the cancel answered after {answered:?})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let show = get_json(&client, &server.url(&format!("/runs/{id}")), 200).await;
        assert_eq!(show["status"], "interrupted");
        support::assert_events_gap_free(&fx, &id);
    });
}

#[test]
fn delete_and_prune_remove_runs_but_not_running_ones() {
    for fx in [Some(Fixture::new()), Fixture::postgres()].into_iter().flatten() {
        let server = Served::start(&fx, &[]);
        let client = client();
        let done = fx.json(&["run", "hello_bp.json", "--json"], 0);
        let paused = fx.paused();
        let id = done["id"].as_str().unwrap();
        runtime().block_on(async {
            let deleted = client.delete(server.url(&format!("/runs/{id}"))).send().await.unwrap();
            assert_eq!(deleted.status(), 200);
            get_json(&client, &server.url(&format!("/runs/{id}")), 404).await;
            let events =
                client.get(server.url(&format!("/runs/{id}/events"))).send().await.unwrap();
            assert_eq!(events.status(), 404);
            let twice = client.delete(server.url(&format!("/runs/{id}"))).send().await.unwrap();
            assert_eq!(twice.status(), 404);
        });
        // A running run: 409 (cancel it first).
        support::ticking_blueprint(&fx, "ticker", 30, 0.2);
        let mut driver = fx
            .command(&["run", "ticker.json"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(support::Reaped::new)
            .unwrap();
        runtime().block_on(async {
            let running = support::first_listed(&client, &server, "/runs?status=running").await;
            let refused =
                client.delete(server.url(&format!("/runs/{running}"))).send().await.unwrap();
            assert_eq!(refused.status(), 409);
            let body: Value = refused.json().await.unwrap();
            assert!(body["error"]["message"].as_str().unwrap().contains("runs cancel"), "{body}");
            client.post(server.url(&format!("/runs/{running}/cancel"))).send().await.unwrap();
        });
        let _ = driver.wait();
        // Prune: the paused and interrupted runs are older than 0 s; a
        // status filter keeps the others.
        let pruned = fx.json(
            &["runs", "prune", "--older-than", "0s", "--status", "awaiting_hitl", "--json"],
            0,
        );
        assert_eq!(pruned["deleted"], json!([paused]));
        let rest = fx.json(&["runs", "list", "--json"], 0);
        assert_eq!(rest["runs"].as_array().unwrap().len(), 1, "the interrupted one is left");
        let bad = fx.run(&["runs", "prune", "--older-than", "soon"]);
        assert_eq!(code(&bad), Some(2));
        let all = fx.json(&["runs", "prune", "--older-than", "0d", "--json"], 0);
        assert_eq!(all["deleted"].as_array().unwrap().len(), 1);
        assert_eq!(fx.json(&["runs", "list", "--json"], 0)["runs"], json!([]));
    }
}

#[test]
fn state_shows_values_next_nodes_and_the_interrupt_schema() {
    let fx = Fixture::new();
    let id = fx.paused();
    let server = Served::start(&fx, &[]);
    let client = client();
    runtime().block_on(async {
        let state = get_json(&client, &server.url(&format!("/runs/{id}/state")), 200).await;
        assert_eq!(state["status"], "awaiting_hitl");
        assert_eq!(state["next"], json!(["refunds.tools"]));
        let interrupt = &state["interrupts"][0];
        assert_eq!(interrupt["kind"], "tool_approval");
        assert_eq!(
            interrupt["schema"]["required"],
            json!(["id"]),
            "the form's schema: {interrupt}"
        );
        let messages = state["values"]["messages"].as_array().unwrap();
        assert_eq!(messages[0]["content"], "Refund order 7");
        let start = get_json(&client, &server.url(&format!("/runs/{id}/state?step=0")), 200).await;
        assert_eq!((start["step"].as_u64(), start["interrupts"].clone()), (Some(0), json!([])));
        assert_eq!(start["next"], json!(["refunds"]));
        get_json(&client, &server.url(&format!("/runs/{id}/state?step=99")), 404).await;

        // A rejected tool call is told to the model, which carries on.
        let reject = server.url(&format!("/runs/{id}/reject"));
        let rejected = support::post_json(&client, &reject, &json!({"reason": "too much"})).await;
        let status = rejected["status"].as_str().unwrap();
        assert!(matches!(status, "running" | "completed"), "continues: {rejected}");
        let done = settled(&client, &server.url(&format!("/runs/{id}"))).await;
        assert_eq!(done["status"], "completed");
        let after = get_json(&client, &server.url(&format!("/runs/{id}/state")), 200).await;
        let told =
            after["values"]["messages"].as_array().unwrap().iter().any(|m| {
                m["role"] == "tool" && m["content"].as_str().unwrap().contains("too much")
            });
        assert!(told, "{after}");
    });
}

#[test]
fn serve_guards_its_doors() {
    let fx = Fixture::new();
    // Not loopback without a token: refused; with --insecure-no-auth: served.
    let mut command = fx.command(&["serve", "--create", "--addr", "0.0.0.0:0"]);
    let refused = command.env_remove("TOLLGATE_TOKEN").output().unwrap();
    assert_eq!(code(&refused), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--insecure-no-auth"));
    let open = Served::start_with(&fx, &["--addr", "0.0.0.0:0", "--insecure-no-auth"], None);
    assert!(open.base.starts_with("http://0.0.0.0:"));
    drop(open);
    // A token on the command line is refused; from a file it works.
    let shown = fx.run(&["serve", "--token", "visible"]);
    assert_eq!(code(&shown), Some(2));
    assert!(String::from_utf8_lossy(&shown.stderr).contains("TOLLGATE_TOKEN"));
    std::fs::write(fx.path("token"), format!("{TOKEN}\n")).unwrap();
    let from_file =
        Served::start_with(&fx, &["--token-file", fx.path("token").to_str().unwrap()], None);
    runtime().block_on(async {
        get_json(&client(), &from_file.url("/runs"), 200).await;
        get_json(&anonymous(), &from_file.url("/runs"), 401).await;
    });
    // --help shows no secret from the environment.
    for args in [&["serve", "--help"][..], &["--help"], &["runs", "list", "--help"]] {
        let help = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(args)
            .env("TOLLGATE_TOKEN", "sekrit-in-env")
            .env("TOLLGATE_DB", "postgres://u:pw-in-env@db.example/runs")
            .output()
            .unwrap();
        assert!(help.status.success());
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(!text.contains("sekrit-in-env") && !text.contains("pw-in-env"), "{args:?}: {text}");
    }
    // CORS: off by default, on for the origins named.
    let origin = "http://review.example";
    let cors = Served::start(&fx, &["--allow-origin", origin]);
    runtime().block_on(async {
        let preflight = |server: &Served| {
            anonymous()
                .request(reqwest::Method::OPTIONS, server.url("/runs"))
                .header("origin", origin)
                .header("access-control-request-method", "GET")
                .header("access-control-request-headers", "authorization")
                .send()
        };
        let allowed = preflight(&cors).await.unwrap();
        assert_eq!(allowed.headers()["access-control-allow-origin"], origin);
        let plain = Served::start(&fx, &[]);
        let closed = preflight(&plain).await.unwrap();
        assert!(closed.headers().get("access-control-allow-origin").is_none());
    });
}
