//! Store searches with filters of every size, depth and type, through
//! both APIs (`/store/search`, `/lg/store/items/search`), on SQLite and
//! PostgreSQL (`TOLLGATE_PG_URL`): each answers with items or a 4xx that
//! says what is wrong, never a 5xx; a `$in` of 1,000 values and more finds
//! what it names, up to the limit, past which it is refused naming it
//! (400 on the native API, 422 on LangGraph's).

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use std::path::Path;

use axum::Router;
use serde_json::{json, Value};
use tollgate_server::{Api, Runs, ServeOptions};

/// A deterministic generator (xorshift64*): the same bodies every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A JSON value of every type, nested up to `depth`.
fn value(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth == 0 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.below(100) as i64 - 50),
        3 => json!(rng.below(1000) as f64 / 7.0),
        4 => json!(format!("s{}", rng.below(20))),
        5 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth - 1)).collect()),
        _ => {
            let fields = (0..rng.below(4)).map(|i| (format!("k{i}"), value(rng, depth - 1)));
            Value::Object(fields.collect())
        }
    }
}

/// A filter: fields (dotted paths among them) with plain values or
/// operators, some unknown, some with operands of the wrong type, some
/// `$in` lists of any length up to past the limit.
fn filter(rng: &mut Rng) -> Value {
    let operators = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nope"];
    let fields = match rng.below(10) {
        0 => 150,
        1 => 101,
        _ => rng.below(8),
    };
    let mut filter = serde_json::Map::new();
    for i in 0..fields {
        let field = match rng.below(4) {
            0 => format!("f{i}.k0.k1"),
            1 => format!("f{i}.\"odd\\"),
            _ => format!("f{i}"),
        };
        let condition = match rng.below(4) {
            0 => value(rng, 3),
            1 => {
                let count = match rng.below(6) {
                    0 => 10_001,
                    1 => 2_000,
                    2 => 1_000,
                    _ => rng.below(70),
                };
                json!({"$in": (0..count).map(|n| json!(n)).collect::<Vec<_>>()})
            }
            _ => {
                let op = operators[rng.below(operators.len() as u64) as usize];
                json!({op: value(rng, 2)})
            }
        };
        filter.insert(field, condition);
    }
    match rng.below(12) {
        0 => json!([1, 2]),
        1 => json!("text"),
        _ => Value::Object(filter),
    }
}

/// JSON nested `depth` arrays deep, as text.
fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

async fn serve(db: &Path) -> String {
    let runs = Runs::open(db, true).await.unwrap();
    let api = Api::new(runs, ServeOptions::new(([127, 0, 0, 1], 0).into())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = Router::new().merge(api.router());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

/// Posts `body` (text) to `url`; its status and body.
async fn post(client: &reqwest::Client, url: &str, body: String) -> (u16, String) {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn no_filter_is_a_server_error(db: &Path) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = serve(db).await;
    let client = reqwest::Client::new();
    for n in 0..30 {
        let item = json!({"namespace": ["docs"], "key": format!("k{n}"),
                          "value": {"f0": n, "f1": format!("s{}", n % 20), "f2": {"k0": {"k1": n}}}});
        let response =
            client.put(format!("{base}/lg/store/items")).json(&item).send().await.unwrap();
        assert!(response.status().is_success(), "{}", response.text().await.unwrap());
    }
    let native = format!("{base}/store/search");
    let langgraph = format!("{base}/lg/store/items/search");

    // A long `$in`: found, up to the limit; past it, a 422 naming it.
    let values = |count: usize| (0..count).map(|n| json!(n)).collect::<Vec<_>>();
    for count in [990, 1_000, 5_000, 10_000] {
        let body = json!({"namespace_prefix": ["docs"], "filter": {"f0": {"$in": values(count)}},
                          "limit": 100});
        let (status, text) = post(&client, &langgraph, body.to_string()).await;
        assert_eq!(status, 200, "{count} values: {text}");
        let found: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(found["items"].as_array().unwrap().len(), 30, "{count} values");
    }
    // (The native API answers bad input with 400, LangGraph's with 422.)
    let body = json!({"prefix": "docs", "filter": {"f0": {"$in": values(10_001)}}});
    let (status, text) = post(&client, &native, body.to_string()).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("at most 10000"), "{text}");
    let body = json!({"namespace_prefix": ["docs"], "filter": {"f0": {"$in": values(10_001)}}});
    let (status, text) = post(&client, &langgraph, body.to_string()).await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("at most 10000"), "{text}");

    // Bodies of every shape: an answer or a 4xx, never a 5xx.
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut refused = 0;
    for round in 0..300 {
        let filter = filter(&mut rng);
        let (url, body) = if round % 2 == 0 {
            (&native, json!({"prefix": "docs", "filter": filter, "limit": 20}).to_string())
        } else {
            let body = json!({"namespace_prefix": ["docs"], "filter": filter, "limit": 20});
            (&langgraph, body.to_string())
        };
        let (status, text) = post(&client, url, body.clone()).await;
        assert!(status < 500, "{status} for {}: {text}", &body[..body.len().min(300)]);
        if status >= 400 {
            refused += 1;
            assert!(text.contains("\"message\""), "a refusal says why: {text}");
        }
    }
    assert!((30..270).contains(&refused), "both answers and refusals were tried: {refused}");
    // Nested past what a parser takes, in the filter and around it.
    for depth in [100, 127, 129, 1_000, 100_000] {
        let body = format!("{{\"prefix\": \"docs\", \"filter\": {{\"f0\": {}}}}}", nested(depth));
        let (status, text) = post(&client, &native, body).await;
        assert!(status < 500, "{status} for depth {depth}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_filter_is_a_server_error_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    no_filter_is_a_server_error(&dir.path().join("runs.db")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_filter_is_a_server_error_on_postgres() {
    let Some(url) = support::postgres_database().await else { return };
    no_filter_is_a_server_error(Path::new(&url)).await;
}
