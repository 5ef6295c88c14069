//! The server under slow clients and while it stops (the endpoints are in
//! `server.rs`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{self, client, get_json, runtime, Fixture, Served, TOKEN};

/// Many clients that send half a request and stall do not stop a normal
/// client from being served; the server drops them after the header
/// timeout. Past the connection cap, new clients wait for a free slot
/// rather than being refused.
#[test]
fn slow_clients_do_not_lock_others_out() {
    let fx = Fixture::new();
    let server = Served::start(&fx, &["--header-timeout", "3", "--max-connections", "300"]);
    let address = server.base.trim_start_matches("http://").to_owned();
    let stalled: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut stream = TcpStream::connect(&address).unwrap();
            stream.write_all(b"GET /runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer").unwrap();
            stream
        })
        .collect();
    let client = client();
    runtime().block_on(async {
        for _ in 0..20 {
            let started = Instant::now();
            get_json(&client, &server.url("/runs"), 200).await;
            // Well under the header timeout a locked-out client would wait.
            assert!(started.elapsed() < Duration::from_millis(1_500), "{:?}", started.elapsed());
        }
    });
    // After the header timeout the server closed them.
    std::thread::sleep(Duration::from_millis(3_500));
    for mut stream in stalled {
        stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buffer = [0_u8; 512];
        match stream.read(&mut buffer) {
            // Closed, or an error answer before closing.
            Ok(n) => {
                let text = String::from_utf8_lossy(&buffer[..n]).to_string();
                assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
            }
            Err(error) => {
                assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "still open: {error}")
            }
        }
    }
    // A kept-alive connection left idle past the header timeout is closed.
    let mut idle = TcpStream::connect(&address).unwrap();
    let request =
        format!("GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n");
    idle.write_all(request.as_bytes()).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buffer = [0_u8; 1024];
    let n = idle.read(&mut buffer).unwrap();
    assert!(String::from_utf8_lossy(&buffer[..n]).starts_with("HTTP/1.1 200"));
    let started = Instant::now();
    let closed = idle.read(&mut buffer);
    assert!(matches!(closed, Ok(0)), "{closed:?}");
    let waited = started.elapsed();
    assert!(waited > Duration::from_secs(2) && waited < Duration::from_secs(8), "{waited:?}");

    // Past the cap: a client waits for a slot, then is served.
    let small = Served::start(&fx, &["--header-timeout", "1", "--max-connections", "4"]);
    let address = small.base.trim_start_matches("http://").to_owned();
    let _idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(&address).unwrap()).collect();
    runtime().block_on(async {
        let started = Instant::now();
        get_json(&client, &small.url("/runs"), 200).await;
        let waited = started.elapsed();
        assert!(waited < Duration::from_secs(5), "served once idle clients timed out: {waited:?}");
    });
}

/// A server stopped by SIGTERM releases the runs it drives at their next
/// step boundary: they go back to `queued` (not `running` under an owner
/// that is gone), and `runs continue` finishes them.
#[test]
fn a_stopping_server_releases_its_runs() {
    let fx = Fixture::new();
    support::ticking_blueprint(&fx, "ticker", 3, 0.3);
    let server = Served::start(&fx, &["--blueprints", fx.dir.path().to_str().unwrap()]);
    let client = client();
    let id = runtime().block_on(async {
        let created =
            support::post_json(&client, &server.url("/runs"), &json!({"blueprint": "ticker"}))
                .await;
        let id = created["id"].as_str().unwrap().to_owned();
        // Wait until the tool's step is in flight.
        loop {
            let show = get_json(&client, &server.url(&format!("/runs/{id}")), 200).await;
            if show["step"].as_u64().is_some_and(|step| step >= 1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        id
    });
    let status = server.stop("TERM");
    assert!(status.success(), "{status}");
    let show = fx.json(&["runs", "show", &id, "--json"], 0);
    assert_eq!(show["status"], "queued", "released, not left running: {show}");
    let done = fx.json(&["runs", "continue", &id, "--json"], 0);
    assert_eq!(done["status"], "completed");
    support::assert_events_gap_free(&fx, &id);
}
