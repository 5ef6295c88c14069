//! The processes a front-end test runs: the front-end's production build
//! (`next start`), the `bench_server` example serving the graphs, the
//! testkit's fake OpenAI server its blueprint agent talks to, and
//! Chromium. Every child is ended when its guard drops (on success,
//! failure and panic).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tollgate_testkit::fake_openai::{chunk, chunk_finish, usage_chunk, Reply};

/// The token the server requires; both UIs send it as `x-api-key`.
pub(crate) const TOKEN: &str = "front-end-token";

/// The folder of both production builds (`scripts/frontends` prints it),
/// from `TOLLGATE_FRONTENDS`; `None` (the test skipped with a note)
/// outside CI, a failure under `CI=true`.
pub(crate) fn builds() -> Option<PathBuf> {
    match std::env::var_os("TOLLGATE_FRONTENDS").filter(|dir| !dir.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            assert!(
                std::env::var("CI").is_err(),
                "CI needs the front-ends: TOLLGATE_FRONTENDS=$(bash scripts/frontends)"
            );
            eprintln!("skipped: set TOLLGATE_FRONTENDS=$(bash scripts/frontends)");
            None
        }
    }
}

/// A child process leading a process group of its own, killed with its
/// group when dropped (`next start` starts a worker of its own).
pub(crate) struct Group {
    child: Child,
}

impl Group {
    /// Spawns `command` in a group of its own, its stdout piped; returns it
    /// with the first line of its output that `wanted` maps to something.
    fn spawn<T: Send + 'static>(
        mut command: Command,
        what: &str,
        wanted: impl Fn(&str) -> Option<T> + Send + 'static,
    ) -> (Self, T) {
        let mut child = command
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|error| panic!("{what} starts: {error}"));
        let stdout = child.stdout.take().expect("piped");
        let group = Self { child };
        let (told, heard) = mpsc::channel();
        // Reads its output until it exits, so that the pipe never fills.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(found) = wanted(&line) {
                    let _ = told.send(found);
                }
            }
        });
        let found = heard
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{what} did not say where it listens"));
        (group, found)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A front-end's production build served by `next start` on a free
/// loopback port.
pub(crate) struct Next {
    _group: Group,
    /// `http://127.0.0.1:PORT`, the origin the server must allow.
    pub(crate) origin: String,
}

impl Next {
    /// Serves `builds/NAME` (`agent-chat-ui` or `agent-inbox`).
    pub(crate) async fn start(builds: &Path, name: &str) -> Self {
        let dir = builds.join(name);
        // Port 0: the system picks a free one; Next says which.
        let mut command = Command::new("node");
        command
            .args(["node_modules/next/dist/bin/next", "start", "-H", "127.0.0.1", "-p", "0"])
            .current_dir(&dir)
            .env("NEXT_TELEMETRY_DISABLED", "1");
        let (group, origin) = Group::spawn(command, name, |line| {
            let at = line.find("http://")?;
            Some(line[at..].trim().trim_end_matches('/').to_owned())
        });
        let next = Self { _group: group, origin };
        wait_until_up(&next.origin, name).await;
        next
    }
}

/// The `bench_server` example (Rust graphs, and the blueprints of a
/// folder) with a token, allowing `origins`, its blueprint agents talking
/// to `openai` (the fake server's base URL).
pub(crate) struct Server {
    _group: Group,
    /// Where LangGraph's API is: `http://127.0.0.1:PORT/lg`.
    pub(crate) api: String,
    _dir: tempfile::TempDir,
}

impl Server {
    pub(crate) fn start(openai: &str, origins: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let blueprints = dir.path().join("blueprints");
        std::fs::create_dir(&blueprints).unwrap();
        std::fs::write(blueprints.join("shop.json"), shop_blueprint().to_string()).unwrap();
        let mut command = Command::new(bench_server());
        command
            .args(["--addr", "127.0.0.1:0", "--token", TOKEN, "--db"])
            .arg(dir.path().join("runs.db"))
            .arg("--blueprints")
            .arg(&blueprints)
            .env("OPENAI_BASE_URL", openai)
            .env("OPENAI_API_KEY", "sk-front-ends");
        for origin in origins {
            command.args(["--allow-origin", origin]);
        }
        let (group, base) = Group::spawn(command, "bench_server", |line| {
            line.strip_prefix("listening on ").map(str::to_owned)
        });
        Self { _group: group, api: format!("{base}/lg"), _dir: dir }
    }
}

/// The `bench_server` example, built beside this test by `cargo test`
/// (target/debug/examples/bench_server).
fn bench_server() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).expect("target/debug/deps/THIS");
    let server = profile.join("examples").join("bench_server");
    assert!(
        server.is_file(),
        "{} is missing: `cargo test` builds it (or `cargo build --example bench_server`)",
        server.display()
    );
    server
}

/// The blueprint agent both UIs drive: a streaming OpenAI model and one
/// tool whose calls need approval, with an integer parameter. The tool
/// (`/bin/cat`) answers with the arguments it was given, so the model's
/// next request shows what the tool received.
fn shop_blueprint() -> Value {
    json!({
        "name": "shop", "version": 1, "system": "You handle refunds.",
        "model": "openai:gpt-test", "stream": true, "max_steps": 20,
        "tools": [{
            "name": "issue_refund", "description": "Refund an order",
            "parameters": {"type": "object", "properties": {"order": {"type": "integer"}},
                           "required": ["order"]},
            "command": ["/bin/cat"], "approval": true
        }]
    })
}

/// Waits until `origin` answers a page.
async fn wait_until_up(origin: &str, what: &str) {
    let started = Instant::now();
    let url = format!("{origin}/");
    let client = api();
    loop {
        if let Ok(response) = client.get(&url).send().await {
            if response.status() == 200 {
                return;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{what} never answered at {url}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A streamed reply, a piece every `gap`: the UI shows it growing.
pub(crate) fn streamed_text(pieces: &[&str], gap: Duration) -> Reply {
    let mut data = vec![chunk(json!({"role": "assistant", "content": ""}))];
    data.extend(pieces.iter().map(|piece| chunk(json!({"content": piece}))));
    data.push(chunk_finish("stop"));
    data.push(usage_chunk());
    Reply::Sse { data, done: true, delay: gap }
}

/// A streamed call of `issue_refund` for `order`.
pub(crate) fn refund_call(call: &str, order: u64) -> Reply {
    let arguments = json!({"order": order}).to_string();
    let data = vec![
        chunk(json!({"role": "assistant", "content": null, "tool_calls": [{
            "index": 0, "id": call, "type": "function",
            "function": {"name": "issue_refund", "arguments": ""}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]})),
        chunk_finish("tool_calls"),
        usage_chunk(),
    ];
    Reply::Sse { data, done: true, delay: Duration::from_millis(20) }
}

/// A client of the server's API with the token.
pub(crate) fn api() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-api-key", TOKEN.parse().unwrap());
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}

/// `GET url` as JSON (200 expected).
pub(crate) async fn get(client: &reqwest::Client, url: &str) -> Value {
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200, "GET {url}");
    response.json().await.unwrap()
}

/// `POST url` with `body` as JSON (200 expected).
pub(crate) async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Value {
    let response = client.post(url).json(body).send().await.unwrap();
    let status = response.status();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "POST {url}: {answer}");
    answer
}

/// Waits until the thread's status is `status`; returns the thread.
pub(crate) async fn thread_becomes(
    client: &reqwest::Client,
    api: &str,
    thread: &str,
    status: &str,
) -> Value {
    let started = Instant::now();
    loop {
        let view = get(client, &format!("{api}/threads/{thread}")).await;
        if view["status"] == status {
            return view;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "thread {thread} stayed {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The thread's runs, newest first.
pub(crate) async fn runs(client: &reqwest::Client, api: &str, thread: &str) -> Vec<Value> {
    get(client, &format!("{api}/threads/{thread}/runs")).await.as_array().unwrap().clone()
}
