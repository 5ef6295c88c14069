//! Threads that expire: a thread with a time to live (its own, LangGraph's
//! `ttl` in minutes, or the server's `--thread-ttl`) is removed with its
//! runs once idle that long; one whose run waits for a decision is kept;
//! what a thread's runs occupy is shown on both APIs (SQLite, Postgres).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{self, client, get_json, runtime, send_json, Fixture, Served};

#[test]
fn idle_threads_past_their_ttl_are_removed_with_their_runs() {
    for fx in [Some(Fixture::new()), Fixture::postgres()].into_iter().flatten() {
        let postgres = fx.db().to_string_lossy().starts_with("postgres");
        let library = fx.dir.path().to_str().unwrap().to_owned();
        let args = ["--blueprints", &library, "--thread-ttl", "1.5", "--sweep-every", "0.2"];
        let server = Served::start(&fx, &args);
        let worker = postgres.then(|| support::Reaped::new(support::start_worker(&fx)));
        let client = client();
        runtime().block_on(async {
            let lg = |path: &str| server.url(&format!("/lg{path}"));
            let create = |body: Value| send_json(client.post(lg("/threads")).json(&body), 200);
            // 0.03 minutes: 1.8 s.
            let ttl = json!({"strategy": "delete", "ttl": 0.03});
            let quiet = create(json!({"ttl": ttl})).await["thread_id"].clone();
            let done = create(json!({"ttl": ttl})).await["thread_id"].clone();
            let paused = create(json!({"ttl": ttl})).await["thread_id"].clone();
            let defaulted = create(json!({})).await["thread_id"].clone();
            let input = json!({"messages": [{"role": "user", "content": "Refund order 7"}]});
            for (thread, assistant) in [(&done, "hello_bp"), (&paused, "refunds")] {
                let url = lg(&format!("/threads/{}/runs/wait", thread.as_str().unwrap()));
                let body = json!({"assistant_id": assistant, "input": input});
                send_json(client.post(url).json(&body), 200).await;
            }
            let thread = |id: &Value| lg(&format!("/threads/{}", id.as_str().unwrap()));
            let shown = get_json(&client, &thread(&paused), 200).await;
            assert_eq!(shown["status"], "interrupted", "{shown}");
            // What the finished thread's run occupies, on both APIs.
            let storage = get_json(&client, &format!("{}/storage", thread(&done)), 200).await;
            assert_eq!(storage["runs"], 1, "{storage}");
            assert!(storage["checkpoint_bytes"].as_u64().unwrap() > 0, "{storage}");
            assert!(storage["event_bytes"].as_u64().unwrap() > 0, "{storage}");
            let native = server.url(&format!("/threads/{}/storage", done.as_str().unwrap()));
            let same = get_json(&client, &native, 200).await;
            assert_eq!(same["bytes"], storage["bytes"], "{same}");
            let unknown = server.url("/lg/threads/no-such-thread/storage");
            get_json(&client, &unknown, 404).await;
            let run = get_json(&client, &format!("{}/runs", thread(&done)), 200).await[0]["run_id"]
                .clone();

            // Idle ones go, the paused one stays.
            let deadline = Instant::now() + Duration::from_secs(20);
            let gone = |id: &Value| {
                let url = thread(id);
                let client = &client;
                async move { client.get(url).send().await.unwrap().status() == 404 }
            };
            while !(gone(&quiet).await && gone(&done).await && gone(&defaulted).await) {
                assert!(Instant::now() < deadline, "expired threads not removed in 20 s");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let native_run = server.url(&format!("/runs/{}", run.as_str().unwrap()));
            get_json(&client, &native_run, 404).await;
            let kept = get_json(&client, &thread(&paused), 200).await;
            assert_eq!(kept["status"], "interrupted", "a paused thread is kept: {kept}");

            // Refused (422, input that does not fit, as LangGraph's clients
            // expect): `keep_latest`, a bad ttl, a ttl changed later.
            for (body, status) in [
                (json!({"ttl": {"strategy": "keep_latest", "ttl": 5}}), 422),
                (json!({"ttl": 0}), 422),
                (json!({"ttl": "soon"}), 422),
            ] {
                let response = client.post(lg("/threads")).json(&body).send().await.unwrap();
                assert_eq!(response.status().as_u16(), status, "{body}");
            }
            let patch = client.patch(thread(&paused)).json(&json!({"ttl": 5})).send().await;
            assert_eq!(patch.unwrap().status(), 422);
        });
        if let Some(mut worker) = worker {
            support::signal(&worker, "TERM");
            assert!(worker.wait().unwrap().success(), "the worker stops cleanly");
        }
    }
}
