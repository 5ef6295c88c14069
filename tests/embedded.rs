//! The embedding examples as a user runs them (real processes, real
//! sockets): `embedded_server` serves its own routes and its `expenses`
//! graph under `/tollgate` behind its own API key; `expense_tool`, a
//! team's own command line built with `tollgate_cli::main_with`, starts,
//! decides and continues runs of its Rust graphs from separate processes,
//! also after the process driving one was killed. The review page, nested
//! in the service, decides a Rust graph's run in headless Chromium.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[allow(dead_code)] // The review page's helpers; this binary uses a few.
#[path = "../cli/tests/browser/mod.rs"]
mod browser;

/// `target/<profile>/examples/NAME`, built by `cargo test` with the tests.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = profile.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(path.exists(), "{} is missing: `cargo test` builds the examples", path.display());
    path
}

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

fn start_server(db: &Path) -> Server {
    let mut child = Command::new(example("embedded_server"))
        .args(["--addr", "127.0.0.1:0", "--db"])
        .arg(db)
        .env("SERVICE_API_KEY", "key-42")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line}"));
    Server { base: base.to_owned(), child }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_server_serves_its_graph_behind_its_own_key() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(&dir.path().join("service.db"));
    let base = server.base.clone();
    let client = reqwest::Client::new();
    let keyed = |request: reqwest::RequestBuilder| request.header("x-api-key", "key-42");

    // Its own route; every tollgate path behind its key.
    let own = client.get(format!("{base}/")).send().await.unwrap().text().await.unwrap();
    assert!(own.contains("expenses service"), "{own}");
    for path in ["/tollgate/runs", "/tollgate/graphs", "/tollgate/healthz"] {
        let refused = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(refused.status(), 401, "{path}");
        let wrong = client.get(format!("{base}{path}")).header("x-api-key", "nope").send().await;
        assert_eq!(wrong.unwrap().status(), 401, "{path} with a wrong key");
    }
    let graphs: Value = keyed(client.get(format!("{base}/tollgate/graphs")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(graphs["graphs"][0]["name"], "expenses");

    // A claim over 100 pauses for approval; its live stream shows it.
    let paused: Value = keyed(client.post(format!("{base}/tollgate/runs?wait=true")))
        .json(&json!({"graph": "expenses", "input": {"amount": 500}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(paused["status"], "awaiting_hitl", "{paused}");
    let id = paused["id"].as_str().unwrap().to_owned();
    let events = keyed(client.get(format!("{base}/tollgate/runs/{id}/events")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(events.contains("event: run_ended") && events.contains("awaiting_hitl"), "{events}");

    // Approved over the API (the page's call): the service pays it.
    let approved = keyed(client.post(format!("{base}/tollgate/runs/{id}/resume")))
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200);
    let done = completed(&client, &base, &id).await;
    assert_eq!(done["result"]["log"], json!(["checked 500", "paid 500"]), "{done}");

    // The page and its files, under the prefix (`/tollgate/` leads there).
    let page = client.get(format!("{base}/tollgate/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("/tollgate/ui/app.js"));
}

/// Run `id` as the embedded server shows it.
async fn shown(client: &reqwest::Client, base: &str, id: &str) -> Value {
    let url = format!("{base}/tollgate/runs/{id}");
    let response = client.get(url).header("x-api-key", "key-42").send().await.unwrap();
    response.json().await.unwrap()
}

/// Polls the embedded server until run `id` is `completed` (or 20 s).
async fn completed(client: &reqwest::Client, base: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let shown = shown(client, base, id).await;
        if shown["status"] == "completed" || Instant::now() > deadline {
            return shown;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_server_drives_runs_queued_elsewhere_and_recovers_its_own() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("service.db");
    let mut server = start_server(&db);
    let client = reqwest::Client::new();

    // Queued by another process (the team's tool): the service drives it.
    let queued = tool(
        db.as_os_str(),
        &["run", "--graph", "expenses", "--input", r#"{"amount": 50}"#, "--queue", "--json"],
    );
    assert_eq!(queued.status.code(), Some(0), "{}", String::from_utf8_lossy(&queued.stderr));
    let id = json_of(&queued)["id"].as_str().unwrap().to_owned();
    let done = completed(&client, &server.base, &id).await;
    assert_eq!(done["result"]["log"], json!(["checked 50", "paid 50"]), "{done}");

    // Killed in the middle of a run it drives: restarted, it goes on from
    // the last step it committed.
    let slow = tool(db.as_os_str(), &["run", "--graph", "slow", "--queue", "--json"]);
    let id = json_of(&slow)["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let shown = shown(&client, &server.base, &id).await;
        if shown["step"].as_u64().is_some_and(|step| step >= 1) {
            break;
        }
        assert!(Instant::now() < deadline, "the slow run never took a step: {shown}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    server = start_server(&db);
    let done = completed(&client, &server.base, &id).await;
    let log: Vec<String> = serde_json::from_value(done["result"]["log"].clone()).unwrap();
    assert_eq!(log.iter().filter(|name| *name == "a").count(), 1, "{log:?}");
    assert_eq!(log.last().map(String::as_str), Some("c"), "{done}");
}

fn tool(db: &std::ffi::OsStr, args: &[&str]) -> Output {
    Command::new(example("expense_tool")).arg("--db").arg(db).args(args).output().unwrap()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)))
}

/// A new, empty Postgres database on the server of `TOLLGATE_PG_URL`, as
/// a URL; `None` (skipped, said) without one, except under `CI=true`.
fn postgres_database() -> Option<String> {
    let url = tollgate_testkit::postgres_url()?;
    let name = format!("tg_{}", tollgate::RunId::new().to_string().to_lowercase());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (client, connection) =
            tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    });
    let (base, query) = url.split_once('?').map_or((url.as_str(), ""), |(b, q)| (b, q));
    let (server, _) = base.rsplit_once('/').unwrap();
    let query = if query.is_empty() { String::new() } else { format!("?{query}") };
    Some(format!("{server}/{name}{query}"))
}

#[test]
fn a_team_tool_starts_decides_and_continues_its_rust_graphs_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    team_tool_across_processes(dir.path().join("team.db").as_os_str());
}

#[test]
fn a_team_tool_starts_decides_and_continues_its_rust_graphs_across_processes_on_postgres() {
    let Some(url) = postgres_database() else { return };
    team_tool_across_processes(std::ffi::OsStr::new(&url));
}

fn team_tool_across_processes(db: &std::ffi::OsStr) {
    // Started by one process, paused; approved by another, which continues it.
    let paused =
        tool(db, &["run", "--graph", "expenses", "--input", r#"{"amount": 500}"#, "--json"]);
    assert_eq!(paused.status.code(), Some(10), "{}", String::from_utf8_lossy(&paused.stderr));
    let id = json_of(&paused)["id"].as_str().unwrap().to_owned();
    let done = tool(db, &["runs", "resume", &id, "--approve", "--json"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(json_of(&done)["result"]["log"], json!(["checked 500", "paid 500"]));

    // Killed in the middle of a run; another process continues it from its
    // last step: every step runs, the ones committed before the kill once.
    let mut child = Command::new(example("expense_tool"))
        .arg("--db")
        .arg(db)
        .args(["run", "--graph", "slow", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        let listed = tool(db, &["runs", "list", "--graph", "slow", "--json"]);
        let listed: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        if listed["runs"][0]["step"].as_u64().is_some_and(|step| step >= 1) {
            break listed["runs"][0]["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "the slow run never took a step");
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let continued = tool(db, &["runs", "continue", &id, "--json"]);
    assert_eq!(continued.status.code(), Some(0), "{}", String::from_utf8_lossy(&continued.stderr));
    let summary = json_of(&continued);
    assert_eq!(summary["status"], "completed");
    let log: Vec<String> = serde_json::from_value(summary["result"]["log"].clone()).unwrap();
    assert_eq!(log.first().map(String::as_str), Some("a"), "{log:?}");
    assert_eq!(
        log.iter().filter(|name| *name == "a").count(),
        1,
        "a committed step ran once: {log:?}"
    );
    assert_eq!(log.last().map(String::as_str), Some("c"), "{log:?}");

    // A graph the tool does not serve: not found.
    let missing = tool(db, &["run", "--graph", "nope"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no graph `nope`"));
}

#[test]
fn the_nested_review_page_approves_a_rust_graph_s_run_by_clicking() {
    let Some(browser) = browser::Browser::start() else { return };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(&dir.path().join("service.db"));
    let base = server.base.clone();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let paused: Value = client
            .post(format!("{base}/tollgate/runs?wait=true"))
            .header("x-api-key", "key-42")
            .json(&json!({"graph": "expenses", "input": {"amount": 250}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(paused["status"], "awaiting_hitl", "{paused}");
        let run = paused["id"].as_str().unwrap().to_owned();
        let page = browser.session().await;
        // The page asks for the service's key in the service's words; its
        // inbox then goes live over the WebSocket, whose key the service's
        // own check reads from the subprotocol (`credential`).
        page.goto(&format!("{base}/tollgate")).await.unwrap();
        let help = browser::text_where(&page, "#token-help", |text| !text.is_empty()).await;
        assert!(help.contains("SERVICE_API_KEY") && !help.contains("TOLLGATE_TOKEN"), "{help}");
        browser::open_signed_in(&page, &format!("{base}/tollgate"), "key-42").await;
        browser::text_where(&page, "#live-state", |text| text == "live").await;
        // The run's question.
        browser::open_signed_in(&page, &format!("{base}/tollgate#/run/{run}"), "key-42").await;
        browser::element(&page, &format!("[data-interrupt^=\"{run}\"]")).await;
        browser::text_where(&page, "#main", |text| text.contains("250")).await;
        // The drawing of the Rust graph: its nodes, `check` waiting, every
        // edge drawn and none through a node.
        browser::element(&page, "g.node[data-node=\"check\"]").await;
        let graph: Value = client
            .get(format!("{base}/tollgate/runs/{run}/graph"))
            .header("x-api-key", "key-42")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let edges = graph["edges"].as_array().unwrap().len();
        assert_eq!(browser::check_drawing(&page, &graph).await, edges, "{graph}");
        browser::click(&page, "button[data-kind=approve]").await;
        browser::click(&page, "button[data-send=approve]").await;
        browser::text_where(&page, "#run-status", |text| text == "Done").await;
        // From History, a fork of the input checkpoint edited with the form
        // the graph's input schema makes: only the amount changes.
        page.goto(&format!("{base}/tollgate#/run/{run}/history?step=0")).await.unwrap();
        let amount = browser::element(&page, "#travel-editor input[name=\"/amount\"]").await;
        assert_eq!(amount.prop("value").await.unwrap().as_deref(), Some("250"));
        amount.clear().await.unwrap();
        amount.send_keys("50").await.unwrap();
        browser::element(&page, "#travel #reviewer").await.send_keys("Ines").await.unwrap();
        browser::click(&page, "#fork").await;
        // The page opens the new run.
        let started = Instant::now();
        let forked = loop {
            let url = page.current_url().await.unwrap().to_string();
            match url.split("#/run/").nth(1) {
                Some(id) if !id.contains('/') && id != run => break id.to_owned(),
                _ => assert!(started.elapsed() < browser::PATIENCE, "the fork never opened"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        browser::text_where(&page, "#run-status", |text| text == "Done").await;
        let state: Value = client
            .get(format!("{base}/tollgate/runs/{forked}/state?step=0"))
            .header("x-api-key", "key-42")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(state["values"]["amount"], 50, "{state}");
        assert_eq!(state["values"]["log"], json!([]), "the list was not written again: {state}");
        assert_eq!((&state["source"], &state["by"]), (&json!("fork"), &json!("Ines")), "{state}");
        let done: Value = client
            .get(format!("{base}/tollgate/runs/{run}"))
            .header("x-api-key", "key-42")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(done["result"]["log"], json!(["checked 250", "paid 250"]), "{done}");
    });
}

/// docs/embedding.md shows the example's own lines, not a copy that can
/// drift: the block after "The example's own lines" is the region of
/// `examples/embedded_server.rs` between its `[docs/embedding.md: …]` and
/// `[end]` markers (unindented).
#[test]
fn the_embedding_doc_shows_the_example_s_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("examples/embedded_server.rs")).unwrap();
    let start = example.find("// [docs/embedding.md: the API as a router]\n").unwrap();
    let region = &example[start..];
    let region = &region[region.find('\n').unwrap() + 1..region.find("    // [end]\n").unwrap()];
    let lines: Vec<&str> =
        region.lines().map(|line| line.strip_prefix("    ").unwrap_or(line)).collect();
    let doc = std::fs::read_to_string(root.join("docs/embedding.md")).unwrap();
    let after = &doc[doc.find("The example's own lines").unwrap()..];
    let block = &after[after.find("```rust\n").unwrap() + 8..];
    let block = &block[..block.find("```").unwrap()];
    assert_eq!(
        block.lines().collect::<Vec<_>>(),
        lines,
        "docs/embedding.md drifted from the example"
    );
}
