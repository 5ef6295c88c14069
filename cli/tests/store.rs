//! `tollgate store …` and the native `/store` endpoints: put, get, search
//! with filters, namespaces, delete, TTLs; exit codes (a missing item is 3,
//! bad input 2); on SQLite and on Postgres. Items outlive the process.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use serde_json::{json, Value};
use support::{client, code, get_json, runtime, send_json, Fixture, Served};

fn store_round_trip(fx: &Fixture) {
    let put = |ns: &str, key: &str, value: Value| {
        fx.json(&["store", "put", ns, key, &value.to_string(), "--json"], 0)
    };
    assert_eq!(
        put("users/42/memories", "lang", json!({"text": "French", "kind": "pref", "n": 1}))
            ["stored"],
        true
    );
    put("users/42/memories", "food", json!({"text": "vegetarian", "kind": "fact", "n": 2}));
    put("users/42/memories", "tz", json!({"text": "Paris", "kind": "pref", "n": 3}));
    put("users/7/memories", "lang", json!({"text": "English", "kind": "pref", "n": 4}));
    fx.json(&["store", "put", "users/42/scratch", "tmp", "{}", "--ttl", "1s", "--json"], 0);

    let item = fx.json(&["store", "get", "users/42/memories", "lang", "--json"], 0);
    assert_eq!(item["value"]["text"], "French");
    assert_eq!(item["namespace"], json!(["users", "42", "memories"]));
    let plain = fx.run(&["store", "get", "users/42/memories", "lang"]);
    assert_eq!(String::from_utf8(plain.stdout).unwrap().trim(), item["value"].to_string());

    let found =
        fx.json(&["store", "search", "users/42", "--filter", r#"{"kind": "pref"}"#, "--json"], 0);
    let keys: Vec<&str> =
        found["items"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["tz", "lang"], "newest first, only the prefix's");
    let compared = fx.json(
        &[
            "store",
            "search",
            "users",
            "--filter",
            r#"{"n": {"$gte": 3}}"#,
            "--limit",
            "1",
            "--json",
        ],
        0,
    );
    assert_eq!(compared["items"].as_array().unwrap().len(), 1);
    assert_eq!(compared["items"][0]["value"]["n"], 4);
    // Nothing matched: said (on stderr), exit 0, stdout empty.
    let none = fx.run(&["store", "search", "users", "--filter", r#"{"kind": "nope"}"#]);
    assert_eq!(none.status.code(), Some(0));
    assert!(none.stdout.is_empty());
    assert!(String::from_utf8_lossy(&none.stderr).contains("nothing under users matched"));

    let names = fx.json(&["store", "namespaces", "--prefix", "users", "--json"], 0);
    assert_eq!(
        names["namespaces"],
        json!(["users/42/memories", "users/42/scratch", "users/7/memories"])
    );
    let wild = fx.json(
        &["store", "namespaces", "--prefix", "users/*/memories", "--max-depth", "2", "--json"],
        0,
    );
    assert_eq!(wild["namespaces"], json!(["users/42", "users/7"]));

    // The TTL: gone a second later, for every read.
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    assert_eq!(code(&fx.run(&["store", "get", "users/42/scratch", "tmp"])), Some(3));

    assert_eq!(
        fx.json(&["store", "delete", "users/42/memories", "food", "--json"], 0)["deleted"],
        true
    );
    let missing = fx.run(&["store", "get", "users/42/memories", "food"]);
    assert_eq!(code(&missing), Some(3), "a missing item is exit 3");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no item `food`"));
    assert_eq!(code(&fx.run(&["store", "delete", "users/42/memories", "food"])), Some(3));

    // Bad input is exit 2, with what is wrong.
    let bad = fx.run(&["store", "put", "users//x", "k", "1"]);
    assert_eq!(code(&bad), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is empty"), "{bad:?}");
    assert_eq!(code(&fx.run(&["store", "put", "a", "k", "not json"])), Some(2));
    let filter = fx.run(&["store", "search", "a", "--filter", r#"{"n": {"$near": 1}}"#]);
    assert_eq!(code(&filter), Some(2));
    assert!(String::from_utf8_lossy(&filter.stderr).contains("$near"));
    let query = fx.run(&["store", "search", "a", "--query", "anything"]);
    assert_eq!(code(&query), Some(2), "a query needs an embedder");
    assert!(String::from_utf8_lossy(&query.stderr).contains("index"));
}

#[test]
fn items_are_stored_read_searched_and_deleted_from_the_command_line() {
    store_round_trip(&Fixture::new());
}

#[test]
fn items_are_stored_read_searched_and_deleted_from_the_command_line_on_postgres() {
    if let Some(fx) = Fixture::postgres() {
        store_round_trip(&fx);
    }
}

#[test]
fn the_store_endpoints_read_and_write_the_items_the_cli_sees() {
    let fx = Fixture::new();
    fx.json(&["store", "put", "docs", "a", r#"{"text": "first"}"#, "--json"], 0);
    let server = Served::start(&fx, &[]);
    runtime().block_on(async {
        let client = client();
        let put = client.put(server.url("/store/items")).json(
            &json!({"namespace": ["docs", "x"], "key": "b", "value": {"text": "second", "n": 2}, "ttl_ms": 60000}),
        );
        let stored = send_json(put, 200).await;
        assert_eq!(stored["key"], "b");
        assert!(stored["expires_at_ms"].as_i64().unwrap() > stored["updated_at_ms"].as_i64().unwrap());
        let got = get_json(&client, &server.url("/store/items?namespace=docs&key=a"), 200).await;
        assert_eq!(got["value"]["text"], "first", "what the CLI put");
        let search = |filter: Value| {
            client.post(server.url("/store/search")).json(&json!({"prefix": "docs", "filter": filter}))
        };
        let found = send_json(search(json!({"n": 2})), 200).await;
        assert_eq!(found["items"].as_array().unwrap().len(), 1);
        assert_eq!(found["items"][0]["namespace"], json!(["docs", "x"]));
        let names = get_json(&client, &server.url("/store/namespaces?prefix=docs"), 200).await;
        assert_eq!(names["namespaces"], json!(["docs", "docs/x"]));
        get_json(&client, &server.url("/store/items?namespace=docs&key=zzz"), 404).await;
        send_json(search(json!({"n": {"$near": 1}})), 400).await;
        let deleted =
            send_json(client.delete(server.url("/store/items?namespace=docs/x&key=b")), 200).await;
        assert_eq!(deleted["deleted"], true);
    });
    drop(server);
}

/// A semantic search says what it could not match: items stored without an
/// embedder are counted (stderr, and `unindexed` in JSON); a query of
/// other dimensions than the stored vectors is exit 2 naming both sizes.
#[test]
fn a_semantic_search_tells_what_it_could_not_match() {
    use tollgate_testkit::fake_openai::{FakeOpenAi, Reply};
    let fx = Fixture::new();
    let embedding = |vector: Value| Reply::Json {
        status: 200,
        headers: Vec::new(),
        body: json!({"object": "list", "model": "m", "data": [{"object": "embedding", "index": 0, "embedding": vector}],
                     "usage": {"prompt_tokens": 1, "total_tokens": 1}}),
    };
    runtime().block_on(async {
        let server = FakeOpenAi::start_embeddings().await;
        let base = server.base_url().to_owned();
        let run = |args: &[&str], dims: &str| {
            let mut command = fx.command(&["--embedder", "openai:m", "--embed-dims", dims]);
            command.args(args).env("OPENAI_BASE_URL", &base).env("OPENAI_API_KEY", "sk-test");
            command.output().unwrap()
        };
        // One item stored without an embedder, one with (two dimensions).
        let plain = fx.run(&["store", "put", "notes", "plain", r#"{"text": "no vector"}"#]);
        assert_eq!(code(&plain), Some(0));
        server.push(embedding(json!([1.0, 0.0])));
        let put = run(&["store", "put", "notes", "embedded", r#"{"text": "a vector"}"#], "2");
        assert_eq!(code(&put), Some(0), "{}", String::from_utf8_lossy(&put.stderr));
        // The search finds the embedded one and counts the other.
        server.push(embedding(json!([1.0, 0.0])));
        let found = run(&["store", "search", "notes", "--query", "vector"], "2");
        assert_eq!(code(&found), Some(0), "{}", String::from_utf8_lossy(&found.stderr));
        assert!(String::from_utf8_lossy(&found.stdout).contains("embedded"));
        let said = String::from_utf8_lossy(&found.stderr);
        assert!(said.contains("1 item(s) under notes have no vector"), "{said}");
        server.push(embedding(json!([1.0, 0.0])));
        let found = run(&["store", "search", "notes", "--query", "vector", "--json"], "2");
        let shown: Value = serde_json::from_slice(&found.stdout).unwrap();
        assert_eq!((shown["items"].as_array().unwrap().len(), &shown["unindexed"]), (1, &json!(1)));
        // A query embedded with three dimensions over vectors of two.
        server.push(embedding(json!([1.0, 0.0, 0.0])));
        let other = run(&["store", "search", "notes", "--query", "vector"], "3");
        assert_eq!(code(&other), Some(2));
        let said = String::from_utf8_lossy(&other.stderr);
        assert!(said.contains("with 3 dimensions") && said.contains("embedded with 2"), "{said}");
    });
}
