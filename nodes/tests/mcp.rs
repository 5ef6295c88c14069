//! The MCP client against a real server process (a small Python MCP server
//! written for these tests): tools listed and called, and every way a
//! server can misbehave ending in a typed error, never a hang.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tollgate_nodes::{HarnessError, McpError, McpServer, McpServerConfig, Tool, ToolContext};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_server.py")
}

fn config(mode: &str) -> McpServerConfig {
    let command = vec![
        "python3".to_owned(),
        script().to_string_lossy().into_owned(),
        "--mode".to_owned(),
        mode.to_owned(),
    ];
    let mut config = McpServerConfig::new("test", command);
    config.start_timeout = Duration::from_secs(5);
    config.call_timeout = Duration::from_secs(2);
    config
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn mcp(error: HarnessError) -> McpError {
    match error {
        HarnessError::Mcp(error) => error,
        other => panic!("not an MCP error: {other:?}"),
    }
}

#[test]
fn tools_are_listed_and_called_and_failures_are_typed() {
    runtime().block_on(async {
        let server = McpServer::start(config("ok")).await.unwrap();
        let names: Vec<String> = server.specs().into_iter().map(|spec| spec.name).collect();
        assert_eq!(names, ["add", "echo", "fail", "crash", "garbage", "hang"]);
        let add = server.tool("add").unwrap();
        assert_eq!(add.spec().parameters["required"], json!(["a", "b"]));
        let ctx = ToolContext::detached("call-1");
        assert_eq!(add.call(json!({"a": 2, "b": 3}), &ctx).await.unwrap(), json!({"sum": 5}));
        let echo = server.tool("echo").unwrap();
        assert_eq!(echo.call(json!({"text": "hi"}), &ctx).await.unwrap(), json!("hi"));

        let error = mcp(server.tool("fail").unwrap().call(json!({}), &ctx).await.unwrap_err());
        assert!(
            matches!(&error, McpError::ToolError { message, .. } if message == "the disk is full"),
            "{error:?}"
        );
        assert!(!error.is_start_failure());

        // Garbage on its output is not an answer: the call times out.
        let garbage = server.tool("garbage").unwrap().timeout(Duration::from_millis(500));
        let error = mcp(garbage.call(json!({}), &ctx).await.unwrap_err());
        assert!(
            matches!(error, McpError::CallTimeout { .. } | McpError::Connection { .. }),
            "{error:?}"
        );

        // A crash mid-call: the call fails with its stderr, and so does
        // every later call, at once.
        let error = mcp(server.tool("crash").unwrap().call(json!({}), &ctx).await.unwrap_err());
        match &error {
            McpError::Connection { stderr, .. } => {
                assert!(stderr.iter().any(|l| l.contains("going down")), "{stderr:?}")
            }
            other => panic!("{other:?}"),
        }
        let started = Instant::now();
        let error = mcp(add.call(json!({"a": 1, "b": 1}), &ctx).await.unwrap_err());
        assert!(matches!(error, McpError::Connection { .. }), "{error:?}");
        assert!(started.elapsed() < Duration::from_secs(1), "no wait on a dead server");

        assert!(matches!(server.tool("nope"), Err(McpError::UnknownTool { .. })));

        // A server that hangs in a call: the call times out, no sooner
        // than asked and not much later.
        let server = McpServer::start(config("ok")).await.unwrap();
        let started = Instant::now();
        let hang = server.tool("hang").unwrap().timeout(Duration::from_millis(300));
        let error = mcp(hang.call(json!({}), &ctx).await.unwrap_err());
        assert!(matches!(error, McpError::CallTimeout { .. }), "{error:?}");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(2));
    });
}

#[test]
fn servers_that_do_not_start_are_typed_errors_within_the_timeout() {
    runtime().block_on(async {
        let error = McpServer::start(config("exit")).await.unwrap_err();
        match &error {
            McpError::Initialize { stderr, .. } => {
                assert!(stderr.iter().any(|l| l.contains("no config")), "{error}")
            }
            other => panic!("{other:?}"),
        }
        assert!(error.is_start_failure());

        let error = McpServer::start(config("refuse")).await.unwrap_err();
        assert!(matches!(error, McpError::Initialize { .. }), "{error:?}");
        assert!(error.to_string().contains("not today"), "{error}");

        let mut silent = config("silent");
        silent.start_timeout = Duration::from_millis(500);
        let started = Instant::now();
        let error = McpServer::start(silent).await.unwrap_err();
        assert!(matches!(error, McpError::StartTimeout { .. }), "{error:?}");
        assert!(started.elapsed() < Duration::from_secs(3));

        let missing = McpServerConfig::new("ghost", vec!["/nonexistent/mcp-server".into()]);
        let error = McpServer::start(missing).await.unwrap_err();
        assert!(matches!(error, McpError::Spawn { .. }), "{error:?}");
    });
}

#[test]
fn dropping_the_server_kills_its_process_even_mid_call() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let rt = runtime();
    let pid: u32 = rt.block_on(async {
        let mut config = config("ok");
        config.env.insert("MCP_PIDFILE".into(), pidfile.to_string_lossy().into_owned());
        let server: Arc<McpServer> = McpServer::start(config).await.unwrap();
        let pid = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        assert!(PathBuf::from(format!("/proc/{pid}")).exists());
        // Stuck in a call (it sleeps for an hour): only a kill stops it.
        let hang = server.tool("hang").unwrap().timeout(Duration::from_millis(200));
        let ctx = ToolContext::detached("call-1");
        assert!(hang.call(json!({}), &ctx).await.is_err());
        drop((hang, server));
        pid
    });
    // The runtime goes at once, as a process's does when it exits: the
    // SDK's kill task never runs.
    drop(rt);
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.split(' ').nth(2).is_none_or(|state| state != "Z"))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(), "the server process {pid} outlived its session");
}

/// The test server over streamable HTTP, killed when dropped.
struct HttpServer(std::process::Child);

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The test server over streamable HTTP on a free port, and its URL.
fn http_server(dir: &std::path::Path) -> (HttpServer, String) {
    let portfile = dir.join("port");
    let child = std::process::Command::new("python3")
        .arg(script())
        .arg("--http")
        .arg(&portfile)
        .spawn()
        .unwrap();
    let server = HttpServer(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(port) = std::fs::read_to_string(&portfile) {
            if !port.is_empty() {
                return (server, format!("http://127.0.0.1:{port}/mcp"));
            }
        }
        assert!(Instant::now() < deadline, "the HTTP test server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn servers_over_streamable_http_are_listed_and_called() {
    let dir = tempfile::tempdir().unwrap();
    let (server_process, url) = http_server(dir.path());
    runtime().block_on(async {
        let mut config = McpServerConfig::http("web", &url);
        config.call_timeout = Duration::from_secs(2);
        let server = McpServer::start(config).await.unwrap();
        assert_eq!(server.specs().len(), 6);
        let ctx = ToolContext::detached("call-1");
        let add = server.tool("add").unwrap();
        assert_eq!(add.call(json!({"a": 40, "b": 2}), &ctx).await.unwrap(), json!({"sum": 42}));
        let error = mcp(server.tool("fail").unwrap().call(json!({}), &ctx).await.unwrap_err());
        assert!(matches!(error, McpError::ToolError { .. }), "{error:?}");
    });
    drop(server_process);
    // Nobody listens there any more: a start failure, not a hang.
    runtime().block_on(async {
        let mut config = McpServerConfig::http("gone", &url);
        config.start_timeout = Duration::from_secs(3);
        let error = McpServer::start(config).await.unwrap_err();
        assert!(error.is_start_failure(), "{error:?}");
    });
}
