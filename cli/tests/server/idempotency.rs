//! `Idempotency-Key` on the requests that start runs: a retry answers the
//! first run, another request under the key is refused, one key from
//! two callers is two keys, and requests at once across two servers
//! start one run (on SQLite and Postgres).

use std::io::{Read, Write};

use serde_json::{json, Value};

use crate::support::{
    self, anonymous, client, runtime, settled, sha256_hex, Fixture, Served, TOKEN,
};

const KEY: &str = "idempotency-key";

/// Sends `body` to `POST /runs?wait=true` with `key` over a connection it
/// closes as soon as the answer begins (a client that lost the rest of
/// the response): what it read of the answer.
fn post_and_hang_up(server: &Served, body: &Value, key: &str) -> String {
    let base = server.url("");
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    let request = format!(
        "POST /runs?wait=true HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nIdempotency-Key: {key}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = [0_u8; 12];
    stream.read_exact(&mut head).unwrap();
    drop(stream);
    String::from_utf8_lossy(&head).into_owned()
}

#[test]
fn a_retried_post_runs_answers_the_first_run() {
    let fx = Fixture::new();
    let library = fx.dir.path().to_str().unwrap().to_owned();
    let server = Served::start(&fx, &["--blueprints", &library]);
    let client = client();
    let body = json!({"blueprint": "hello_bp", "input": "Hi", "thread": "t-keyed"});
    // The first answer is cut after its status line.
    assert_eq!(post_and_hang_up(&server, &body, "order-7-refund"), "HTTP/1.1 201");
    runtime().block_on(async {
        let post = |body: &Value, key: &str| {
            client.post(server.url("/runs?wait=true")).header(KEY, key).json(body).send()
        };
        let retried = post(&body, "order-7-refund").await.unwrap();
        assert_eq!(retried.status(), 201);
        assert_eq!(retried.headers()["idempotent-replayed"], "true");
        let retried: Value = retried.json().await.unwrap();
        assert_eq!(retried["status"], "completed", "{retried}");
        let listed = support::get_json(&client, &server.url("/runs?thread=t-keyed"), 200).await;
        let ids: Vec<&Value> =
            listed["runs"].as_array().unwrap().iter().map(|r| &r["id"]).collect();
        assert_eq!(ids, [&retried["id"]], "one run, however often the request came");

        // Another body under the key: refused, naming the key and the run.
        let other = json!({"blueprint": "hello_bp", "input": "Bye", "thread": "t-keyed"});
        let refused = post(&other, "order-7-refund").await.unwrap();
        assert_eq!(refused.status(), 422);
        let error: Value = refused.json().await.unwrap();
        assert_eq!(error["error"]["kind"], "key_reused", "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("order-7-refund") && message.contains(retried["id"].as_str().unwrap()),
            "{message}"
        );

        // The same body in another field order and spacing is the same body.
        let reordered = r#"{"thread": "t-keyed",  "input": "Hi", "blueprint": "hello_bp"}"#;
        let same = client
            .post(server.url("/runs"))
            .header(KEY, "order-7-refund")
            .header("content-type", "application/json")
            .body(reordered)
            .send()
            .await
            .unwrap();
        assert_eq!(same.status(), 201);
        assert_eq!(same.json::<Value>().await.unwrap()["id"], retried["id"]);

        // A bad key is a 400; a request without one starts a run each time.
        let bad = post(&body, "with space").await.unwrap();
        assert_eq!(bad.status(), 400);
        for _ in 0..2 {
            let fresh = client.post(server.url("/runs?wait=true")).json(&body).send().await;
            assert_eq!(fresh.unwrap().status(), 201);
        }
        let listed = support::get_json(&client, &server.url("/runs?thread=t-keyed"), 200).await;
        assert_eq!(listed["runs"].as_array().unwrap().len(), 3);

        // A fork retried is the same fork.
        let source = retried["id"].as_str().unwrap();
        let fork = |key: &'static str| {
            client.post(server.url(&format!("/runs/{source}/fork"))).header(KEY, key).send()
        };
        let first: Value = fork("fork-1").await.unwrap().json().await.unwrap();
        let again = fork("fork-1").await.unwrap();
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.json::<Value>().await.unwrap()["id"], first["id"]);
    });
}

#[test]
fn one_key_from_two_callers_is_two_keys() {
    let fx = Fixture::new();
    let tokens =
        format!("ann admin {}\nbob admin {}\n", sha256_hex("ann-token"), sha256_hex("bob-token"));
    std::fs::write(fx.path("tokens"), tokens).unwrap();
    let (library, tokens) = (fx.dir.path().to_str().unwrap(), fx.path("tokens"));
    let args = ["--tokens-file", tokens.to_str().unwrap(), "--blueprints", library];
    let server = Served::start_with(&fx, &args, None);
    let client = anonymous();
    runtime().block_on(async {
        let body = json!({"blueprint": "hello_bp", "input": "Hi"});
        let mut made = Vec::new();
        for token in ["ann-token", "bob-token", "ann-token"] {
            let response = client
                .post(server.url("/runs"))
                .bearer_auth(token)
                .header(KEY, "same-key")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 201);
            made.push(response.json::<Value>().await.unwrap()["id"].clone());
        }
        assert_ne!(made[0], made[1], "bob's key is not ann's");
        assert_eq!(made[0], made[2], "ann's retry is ann's first run");
    });
}

/// 50 requests with one key at once, half to each of two servers on one
/// database: every answer names the same run, and there is one run.
#[test]
fn requests_at_once_across_two_servers_start_one_run() {
    let sqlite = Fixture::new();
    let postgres = Fixture::postgres();
    for fx in [Some(sqlite), postgres].into_iter().flatten() {
        let library = fx.dir.path().to_str().unwrap().to_owned();
        let servers = [
            Served::start(&fx, &["--blueprints", &library]),
            Served::start(&fx, &["--blueprints", &library]),
        ];
        let client = client();
        runtime().block_on(async {
            let body = json!({"blueprint": "hello_bp", "input": "Hi", "thread": "t-race"});
            let sends = (0..50).map(|i| {
                let request = client
                    .post(servers[i % 2].url("/runs"))
                    .header(KEY, "race-1")
                    .json(&body)
                    .send();
                async move {
                    let response = request.await.unwrap();
                    let status = response.status();
                    let answer: Value = response.json().await.unwrap();
                    assert_eq!(status, 201, "{answer}");
                    answer["id"].as_str().unwrap().to_owned()
                }
            });
            let ids = futures_util::future::join_all(sends).await;
            assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
            let listed =
                support::get_json(&client, &servers[0].url("/runs?thread=t-race"), 200).await;
            assert_eq!(listed["runs"].as_array().unwrap().len(), 1, "{listed}");
            if !fx.db().to_string_lossy().starts_with("postgres") {
                let done = settled(&client, &servers[0].url(&format!("/runs/{}", ids[0]))).await;
                assert_eq!(done["status"], "completed");
            }
        });
    }
}
