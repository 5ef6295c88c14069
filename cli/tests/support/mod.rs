//! What the CLI's test binaries share: a fixture of blueprint files with a
//! database (SQLite or Postgres), and the queue and worker helpers.

#![allow(dead_code)] // Each binary uses a part.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tokio_postgres::NoTls;

pub(crate) use tollgate_testkit::postgres_url;

pub(crate) mod outage;

/// Each case once on SQLite and once on Postgres (a test binary that
/// uses it says `#[macro_use] mod support;`).
#[allow(unused_macros)]
macro_rules! on_both_stores {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $case() {
                super::$case(super::Fixture::new());
            })*
        }
        mod postgres {
            $(#[test]
            fn $case() {
                if let Some(fx) = super::Fixture::postgres() {
                    super::$case(fx);
                }
            })*
        }
    };
}

pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    /// What `--db` names: a SQLite file in `dir`, or a Postgres URL.
    pub(crate) db: OsString,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let refund = "read args\necho \"refunding $args\" >&2\necho '{\"refunded\": true}'\n";
        std::fs::write(dir.path().join("refund.sh"), refund).unwrap();
        let replies = json!([
            {"tool_calls": [{"name": "lookup_order", "args": {"id": 7}}]},
            {"tool_calls": [{"name": "issue_refund", "args": {"id": 7}}]},
            {"text": "Refunded 20 EUR for order 7."}
        ]);
        std::fs::write(dir.path().join("replies.json"), replies.to_string()).unwrap();
        let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]});
        let blueprint = json!({
            "name": "refunds", "version": 1, "system": "You handle refund requests.",
            "model": "scripted:replies.json", "max_steps": 40,
            "tools": [
                {"name": "lookup_order", "description": "Find an order", "parameters": schema,
                 "fixture": {"id": 7, "amount": 20}},
                {"name": "issue_refund", "description": "Refund an order", "parameters": schema,
                 "command": ["/bin/sh", "refund.sh"], "approval": true}
            ]
        });
        std::fs::write(dir.path().join("refunds.json"), blueprint.to_string()).unwrap();
        std::fs::write(dir.path().join("hello.json"), r#"[{"text": "Hello!"}]"#).unwrap();
        let hello = json!({"name": "hello", "model": "scripted:hello.json"});
        std::fs::write(dir.path().join("hello_bp.json"), hello.to_string()).unwrap();
        std::fs::write(
            dir.path().join("down.json"),
            r#"[{"error": "auth", "message": "bad key"}]"#,
        )
        .unwrap();
        let down = json!({"name": "down", "model": "scripted:down.json"});
        std::fs::write(dir.path().join("down_bp.json"), down.to_string()).unwrap();
        let db = dir.path().join("runs.db").into_os_string();
        Self { dir, db }
    }

    /// The same files, with runs in a new, empty Postgres database on the
    /// server of `TOLLGATE_PG_URL`; `None` (the test skipped, with a note)
    /// without one, except under `CI=true`, where that fails the test.
    pub(crate) fn postgres() -> Option<Self> {
        Some(Self::postgres_on(&postgres_url()?))
    }

    /// The same files, with runs in a new, empty database on the server
    /// (or servers: a URL may name several hosts) of `url`.
    pub(crate) fn postgres_on(url: &str) -> Self {
        let name = format!("tg_{}", tollgate_checkpoint::RunId::new().to_string().to_lowercase());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
            tokio::spawn(connection);
            client.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
        });
        // postgres://user:password@host:port/DATABASE?options
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let (server, _) = base.rsplit_once('/').unwrap();
        let query = if query.is_empty() { String::new() } else { format!("?{query}") };
        Self { db: format!("{server}/{name}{query}").into(), ..Self::new() }
    }

    pub(crate) fn db(&self) -> PathBuf {
        PathBuf::from(&self.db)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        command.arg("--db").arg(self.db()).args(args).current_dir(self.dir.path());
        command.env_remove("TOLLGATE_DB");
        command
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    pub(crate) fn json(&self, args: &[&str], code: i32) -> Value {
        let output = self.run(args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
            panic!("{args:?}: not JSON ({error}): {}", String::from_utf8_lossy(&output.stdout))
        })
    }

    /// Starts the refunds blueprint; returns the paused run's id.
    pub(crate) fn paused(&self) -> String {
        let summary =
            self.json(&["run", "refunds.json", "--input", "Refund order 7", "--json"], 10);
        summary["id"].as_str().unwrap().to_owned()
    }
}

pub(crate) fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

/// A blueprint of 11 steps: five turns that each call the `note` command
/// tool (which appends its arguments to `effects.log`), then an answer.
pub(crate) fn queue_blueprint(fx: &Fixture, tool_seconds: f64) {
    let effects = fx.path("effects.log");
    let note = format!(
        "read args\necho \"$args\" >> '{}'\nsleep {tool_seconds}\necho '{{}}'\n",
        effects.display()
    );
    std::fs::write(fx.path("note.sh"), note).unwrap();
    let mut replies: Vec<Value> =
        (1..=5).map(|n| json!({"tool_calls": [{"name": "note", "args": {"n": n}}]})).collect();
    replies.push(json!({"text": "noted"}));
    std::fs::write(fx.path("steps_replies.json"), Value::from(replies).to_string()).unwrap();
    let blueprint = json!({"name": "steps", "model": "scripted:steps_replies.json", "max_steps": 40,
        "tools": [{"name": "note", "description": "", "parameters": {"type": "object"},
                   "command": ["/bin/sh", "note.sh"]}]});
    std::fs::write(fx.path("steps.json"), blueprint.to_string()).unwrap();
}

pub(crate) fn queue_runs(fx: &Fixture, count: usize) -> Vec<String> {
    (0..count)
        .map(|_| {
            let queued = fx.json(&["run", "steps.json", "--input", "go", "--queue", "--json"], 0);
            assert_eq!(queued["status"], "queued", "{queued}");
            queued["id"].as_str().unwrap().to_owned()
        })
        .collect()
}

pub(crate) fn start_worker(fx: &Fixture) -> std::process::Child {
    start_worker_with(fx, &[])
}

pub(crate) fn start_worker_with(fx: &Fixture, extra: &[&str]) -> std::process::Child {
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(fx.path("workers.log")).unwrap();
    fx.command(&["worker", "--concurrency", "3", "--json"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// A child process that is killed and reaped when dropped: a test that
/// starts one ends it on success, failure and panic alike.
#[derive(Debug)]
pub(crate) struct Reaped(Option<std::process::Child>);

impl Reaped {
    pub(crate) fn new(child: std::process::Child) -> Self {
        Self(Some(child))
    }

    /// Waits for it to end, with what it printed.
    pub(crate) fn wait_with_output(mut self) -> std::io::Result<std::process::Output> {
        self.0.take().expect("a child until dropped").wait_with_output()
    }
}

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;

    fn deref(&self) -> &std::process::Child {
        self.0.as_ref().expect("a child until dropped")
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("a child until dropped")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub(crate) fn signal(child: &std::process::Child, name: &str) {
    let status = Command::new("kill").args(["-s", name, &child.id().to_string()]).status();
    assert!(status.unwrap().success(), "kill -s {name}");
}

/// Statuses of `runs`, from one listing.
pub(crate) fn statuses(fx: &Fixture, runs: &[String]) -> Vec<String> {
    let list = fx.json(&["runs", "list", "--limit", "1000", "--json"], 0);
    runs.iter()
        .map(|id| {
            let found = list["runs"].as_array().unwrap().iter().find(|r| r["id"] == **id);
            found.map_or("missing".to_owned(), |r| r["status"].as_str().unwrap().to_owned())
        })
        .collect()
}

pub(crate) fn wait_for(fx: &Fixture, runs: &[String], done: impl Fn(&[String]) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let now = statuses(fx, runs);
        if done(&now) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "timed out: {now:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The report a stopped worker printed.
pub(crate) fn stopped_report(child: std::process::Child) -> Value {
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "a worker stopped by a signal exits 0");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The run's stored event log numbers 1..=n: no gap, no duplicate, so no
/// step or transition was stored twice or lost.
pub(crate) fn assert_events_gap_free(fx: &Fixture, run: &str) {
    let output = fx.run(&["runs", "events", run, "--json"]);
    let seqs: Vec<u64> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["seq"].as_u64().unwrap())
        .collect();
    assert!(!seqs.is_empty(), "run {run} has events");
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "run {run}: gap-free, no duplicate"
    );
}

/// The token the test servers require.
pub(crate) const TOKEN: &str = "s3cret-token";

/// A `tollgate serve` child on the fixture's database, on a free port.
pub(crate) struct Served {
    child: std::process::Child,
    pub(crate) base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// `serve --addr 127.0.0.1:0 EXTRA` with `TOLLGATE_TOKEN` set.
    pub(crate) fn start(fx: &Fixture, extra: &[&str]) -> Self {
        Self::start_with(fx, extra, Some(TOKEN))
    }

    pub(crate) fn start_with(fx: &Fixture, extra: &[&str], token: Option<&str>) -> Self {
        use std::io::BufRead;
        let mut command = fx.command(&["serve", "--create"]);
        if !extra.contains(&"--addr") {
            command.args(["--addr", "127.0.0.1:0"]);
        }
        command.args(extra).stdout(Stdio::piped()).stderr(Stdio::inherit());
        match token {
            Some(token) => command.env("TOLLGATE_TOKEN", token),
            None => command.env_remove("TOLLGATE_TOKEN"),
        };
        let mut child = command.spawn().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("serve said {line:?}"))
            .to_owned();
        Self { child, base }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends `signal` to the server and waits for it to exit.
    pub(crate) fn stop(mut self, signal_name: &str) -> std::process::ExitStatus {
        signal(&self.child, signal_name);
        self.child.wait().unwrap()
    }
}

/// An HTTP client sending the test token. reqwest is built without a
/// bundled crypto provider (the workspace picks ring), so install it first.
pub(crate) fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    let value = format!("Bearer {TOKEN}");
    headers.insert(reqwest::header::AUTHORIZATION, value.parse().unwrap());
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}

/// An HTTP client without credentials.
pub(crate) fn anonymous() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// GET `url` as JSON, asserting the status.
pub(crate) async fn get_json(client: &reqwest::Client, url: &str, status: u16) -> Value {
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), status, "GET {url}");
    response.json().await.unwrap()
}

/// Sends `request` and reads its JSON body, asserting the status.
pub(crate) async fn send_json(request: reqwest::RequestBuilder, status: u16) -> Value {
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), status, "{}", response.url());
    response.json().await.unwrap()
}

/// The run's status once it is no longer queued or running (10 s at most).
pub(crate) async fn settled(client: &reqwest::Client, run_url: &str) -> Value {
    let mut show = Value::Null;
    for _ in 0..200 {
        show = get_json(client, run_url, 200).await;
        if !matches!(show["status"].as_str(), Some("queued" | "running")) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    show
}

/// SSE events of `url` until the stream ends: (id, event, data), with
/// `orphaned` and `error` frames (no id) given id 0.
pub(crate) async fn sse(
    client: &reqwest::Client,
    url: &str,
    last: Option<u64>,
) -> Vec<(u64, String, Value)> {
    use eventsource_stream::Eventsource;
    use futures_util::StreamExt;
    let mut request = client.get(url);
    if let Some(last) = last {
        request = request.header("Last-Event-ID", last.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200, "GET {url}");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.bytes_stream().eventsource();
    let mut events = Vec::new();
    while let Some(event) =
        tokio::time::timeout(std::time::Duration::from_secs(30), stream.next()).await.unwrap()
    {
        let event = event.unwrap();
        events.push((
            event.id.parse().unwrap_or(0),
            event.event,
            serde_json::from_str(&event.data).unwrap(),
        ));
    }
    events
}

/// A blueprint whose command tool prints `lines` lines `gap` seconds
/// apart, then a result; written as `NAME.json` in the fixture.
pub(crate) fn ticking_blueprint(fx: &Fixture, name: &str, lines: u32, gap: f64) {
    let script = format!(
        "for i in $(seq 1 {lines}); do echo \"tick $i\"; sleep {gap}; done; echo '{{\"ok\": true}}'"
    );
    tick_blueprint(fx, name, &script, false);
}

/// A blueprint `name` like [`ticking_blueprint`]'s, whose tool prints a
/// line every 0.2 s until the file this returns exists (two minutes at
/// most): a step held open until the test lets it end. `stream` has the
/// model stream its replies.
pub(crate) fn held_blueprint(fx: &Fixture, name: &str, stream: bool) -> PathBuf {
    let release = fx.path(&format!("{name}_release"));
    let script = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 600 ]; do i=$((i+1)); echo \"tick $i\"; \
         sleep 0.2; done; echo '{{\"ok\": true}}'",
        release.display()
    );
    tick_blueprint(fx, name, &script, stream);
    release
}

/// A blueprint `name` like [`held_blueprint`]'s, whose tool first writes
/// its process id to the file this returns (whole: written aside, then
/// renamed), then prints a line every 0.1 s for a minute.
pub(crate) fn pid_blueprint(fx: &Fixture, name: &str) -> PathBuf {
    let pid = fx.path(&format!("{name}_pid"));
    let script = format!(
        "echo $$ > '{pid}.new' && mv '{pid}.new' '{pid}'; i=0; while [ $i -lt 600 ]; \
         do i=$((i+1)); echo \"tick $i\"; sleep 0.1; done; echo '{{\"ok\": true}}'",
        pid = pid.display()
    );
    tick_blueprint(fx, name, &script, false);
    pid
}

/// The process id a [`pid_blueprint`]'s tool wrote (20 s at most).
pub(crate) fn written_pid(file: &Path) -> u32 {
    let started = std::time::Instant::now();
    loop {
        let written = std::fs::read_to_string(file).unwrap_or_default();
        if let Ok(pid) = written.trim().parse::<u32>() {
            return pid;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the tool never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` runs (a killed child not yet reaped is a zombie:
/// it does not).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// Writes `NAME.json`, an agent whose scripted model calls the command
/// tool `tick` (`script`, run by `/bin/sh`) once and then answers
/// `ticked`, and its replies.
fn tick_blueprint(fx: &Fixture, name: &str, script: &str, stream: bool) {
    std::fs::write(
        fx.path(&format!("{name}_replies.json")),
        json!([
            {"tool_calls": [{"name": "tick", "args": {}}]}, {"text": "ticked"}
        ])
        .to_string(),
    )
    .unwrap();
    let blueprint = json!({
        "name": name, "model": format!("scripted:{name}_replies.json"), "stream": stream,
        "tools": [{"name": "tick", "description": "Ticks", "parameters": {"type": "object"},
                   "command": ["/bin/sh", "-c", script]}]
    });
    std::fs::write(fx.path(&format!("{name}.json")), blueprint.to_string()).unwrap();
}

/// (seq, event_type) of the run's stored log, as `tollgate runs events`
/// reads it from the database.
pub(crate) fn stored_log(fx: &Fixture, id: &str) -> Vec<(u64, String)> {
    let output = fx.run(&["runs", "events", id, "--json"]);
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let event: Value = serde_json::from_str(line).unwrap();
            (event["seq"].as_u64().unwrap(), event["event_type"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// The newest run listed at `path` (`/runs`, `/runs?status=running`), once
/// there is one.
pub(crate) async fn first_listed(client: &reqwest::Client, server: &Served, path: &str) -> String {
    loop {
        let list = get_json(client, &server.url(path), 200).await;
        if let Some(id) = list["runs"][0]["id"].as_str() {
            return id.to_owned();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// POST `body` to `url`; the answer as JSON.
pub(crate) async fn post_json(client: &reqwest::Client, url: &str, body: &Value) -> Value {
    client.post(url).json(body).send().await.unwrap().json().await.unwrap()
}

/// Copies `examples/blueprints/review-pipeline` (a graph blueprint whose
/// entries are other blueprints) into the fixture's folder `pipeline/`.
pub(crate) fn review_pipeline(fx: &Fixture) {
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/blueprints/review-pipeline");
    let to = fx.path("pipeline");
    std::fs::create_dir_all(to.join("review")).unwrap();
    for file in [
        "pipeline.json",
        "intake_replies.json",
        "summary_replies.json",
        "review/review.json",
        "review/checker_replies.json",
    ] {
        std::fs::copy(from.join(file), to.join(file)).unwrap();
    }
}

/// The SHA-256 of `text` in hex, as a tokens file names a token.
pub(crate) fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The secret the tests' servers verify JWTs with (`serve
/// --jwt-secret-file`, written by [`jwt_secret`]).
pub(crate) const JWT_SECRET: &str = "the secret of the ownership tests, 40 b!!";

/// Writes [`JWT_SECRET`] as `jwt-secret` in the fixture; its path.
pub(crate) fn jwt_secret(fx: &Fixture) -> PathBuf {
    std::fs::write(fx.path("jwt-secret"), JWT_SECRET).unwrap();
    fx.path("jwt-secret")
}

/// A JWT (HS256, [`JWT_SECRET`]) of `sub` with `roles`, in `groups`, of
/// `tenant`, valid for ten minutes.
pub(crate) fn jwt(sub: &str, roles: &[&str], groups: &[&str], tenant: Option<&str>) -> String {
    use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let claims = json!({"sub": sub, "roles": roles, "groups": groups, "tenant": tenant,
                        "exp": now.as_secs() + 600});
    let key = EncodingKey::from_secret(JWT_SECRET.as_bytes());
    encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
}

/// An HTTP client whose every request carries `token` as its bearer.
pub(crate) fn client_with(token: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    let value = format!("Bearer {token}");
    headers.insert(reqwest::header::AUTHORIZATION, value.parse().unwrap());
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}

/// The fixture's `refunds` with its refund's approval assigned to group
/// `finance`, written as `reviewed.json`.
pub(crate) fn reviewed_blueprint(fx: &Fixture) {
    let text = std::fs::read_to_string(fx.path("refunds.json")).unwrap();
    let mut blueprint: Value = serde_json::from_str(&text).unwrap();
    blueprint["name"] = json!("reviewed");
    blueprint["tools"][1]["approval"] = json!({"reviewers": ["finance"]});
    std::fs::write(fx.path("reviewed.json"), blueprint.to_string()).unwrap();
}
