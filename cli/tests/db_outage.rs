//! The database going away under a running `tollgate serve` (Postgres):
//! the API answers 503 with `Retry-After` at once (not a hang, not a
//! crash), `/healthz` says the server is degraded, and once the database
//! is back every answer is as before, without a restart. The database is
//! taken away by cutting a TCP proxy in front of it (its connections
//! dropped, new ones refused), which no other test shares.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{client, runtime, Fixture, Served};

/// A TCP proxy to `upstream` that can be cut (every connection dropped,
/// new ones closed at once) and restored.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Proxy {
    fn start(upstream: String) -> Self {
        let runtime = runtime();
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cutting, tasks) = (Arc::clone(&cut), Arc::clone(&open));
        runtime.spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else { continue };
                if cutting.load(Ordering::SeqCst) {
                    continue; // dropped: the connection closes at once
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(task.abort_handle());
            }
        });
        Self { port, cut, open, _runtime: runtime }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for task in self.open.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

#[test]
fn the_api_answers_503_while_the_database_is_away_and_recovers_without_a_restart() {
    let Some(mut fx) = Fixture::postgres() else { return };
    // postgres://user:password@HOST:PORT/db?…: the proxy in front of HOST:PORT.
    let url = fx.db.to_str().unwrap().to_owned();
    let (head, rest) = url.split_once('@').unwrap();
    let (address, tail) = rest.split_once('/').unwrap();
    let proxy = Proxy::start(address.to_owned());
    fx.db = format!("{head}@127.0.0.1:{}/{tail}", proxy.port).into();
    let server = Served::start(&fx, &[]);
    let client = client();
    runtime().block_on(async {
        let get = |path: &str| {
            let (client, url) = (client.clone(), server.url(path));
            async move { client.get(url).send().await.unwrap() }
        };
        let health: Value = get("/healthz").await.json().await.unwrap();
        assert_eq!(
            (&health["ok"], &health["status"]),
            (&Value::Bool(true), &Value::from("ok")),
            "{health}"
        );
        assert_eq!(get("/runs").await.status(), 200);

        proxy.cut();
        let started = Instant::now();
        let refused = get("/runs").await;
        let waited = started.elapsed();
        assert_eq!(refused.status(), 503, "{:?}", refused.text().await);
        assert!(waited < Duration::from_secs(5), "answered in {waited:?}, not a hang");
        let retry =
            refused.headers().get("retry-after").map(|value| value.to_str().unwrap().to_owned());
        assert_eq!(retry.as_deref(), Some("1"));
        let error: Value = refused.json().await.unwrap();
        assert_eq!(error["error"]["kind"], "unavailable", "{error}");
        let health = get("/healthz").await;
        assert_eq!(health.status(), 200, "alive: a database away needs no restart");
        let health: Value = health.json().await.unwrap();
        assert_eq!(
            (&health["ok"], &health["status"]),
            (&Value::Bool(true), &Value::from("degraded")),
            "{health}"
        );
        assert!(health["database"].as_str().unwrap().starts_with("unavailable"), "{health}");

        proxy.restore();
        let mut answered = 0;
        for _ in 0..100 {
            answered = get("/runs").await.status().as_u16();
            if answered == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(answered, 200, "back without a restart");
        let health: Value = get("/healthz").await.json().await.unwrap();
        assert_eq!(health["status"], "ok", "{health}");
    });
    drop(server);
}
