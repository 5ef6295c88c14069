//! Threads through the CLI and the server: a second run continues the
//! first's conversation, a thread runs one leg at a time, its runs and its
//! state are readable by its name. On SQLite and on Postgres.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod support;

use serde_json::{json, Value};
use support::{client, get_json, runtime, Fixture, Served};

fn chat(fx: &Fixture) {
    std::fs::write(fx.path("chat_replies.json"), r#"[{"text": "Noted."}]"#).unwrap();
    let blueprint = json!({"name": "chat", "model": "scripted:chat_replies.json"});
    std::fs::write(fx.path("chat.json"), blueprint.to_string()).unwrap();
}

fn contents(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{}: {}", m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

fn continues_the_conversation(fx: &Fixture) {
    chat(fx);
    let first =
        fx.json(&["run", "chat.json", "--thread", "ann", "--input", "I am Ann.", "--json"], 0);
    let second =
        fx.json(&["run", "chat.json", "--thread", "ann", "--input", "Who am I?", "--json"], 0);
    assert_eq!(
        contents(&second["result"]["messages"]),
        ["user: I am Ann.", "assistant: Noted.", "user: Who am I?", "assistant: Noted."],
        "the second run sees the first's messages"
    );
    assert_eq!(second["thread"], "ann");
    // Another thread is another conversation.
    let other = fx.json(&["run", "chat.json", "--thread", "bob", "--input", "Hi.", "--json"], 0);
    assert_eq!(contents(&other["result"]["messages"]), ["user: Hi.", "assistant: Noted."]);
    let listed = fx.json(&["runs", "list", "--thread", "ann", "--json"], 0);
    let ids: Vec<&str> =
        listed["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [second["id"].as_str().unwrap(), first["id"].as_str().unwrap()]);
    let shown = fx.json(&["threads", "show", "ann", "--json"], 0);
    assert_eq!(shown["latest"]["id"], second["id"]);
    assert_eq!(contents(&shown["values"]["messages"]).len(), 4);
    let text = String::from_utf8(fx.run(&["threads", "show", "ann"]).stdout).unwrap();
    assert!(text.contains("Who am I?") && text.contains(second["id"].as_str().unwrap()), "{text}");
    let missing = fx.run(&["threads", "show", "nobody"]);
    assert_eq!(missing.status.code(), Some(3));

    // A new version of the blueprint moves the thread to it, from the
    // conversation so far; a blueprint of another name is refused.
    let v2 = json!({"name": "chat", "version": 2, "model": "scripted:chat_replies.json"});
    std::fs::write(fx.path("chat_v2.json"), v2.to_string()).unwrap();
    let moved =
        fx.json(&["run", "chat_v2.json", "--thread", "ann", "--input", "Still me.", "--json"], 0);
    assert_eq!(contents(&moved["result"]["messages"]).len(), 6, "{moved}");
    let other = json!({"name": "helpdesk", "model": "scripted:chat_replies.json"});
    std::fs::write(fx.path("helpdesk.json"), other.to_string()).unwrap();
    let refused = fx.run(&["run", "helpdesk.json", "--thread", "ann", "--input", "Hi"]);
    assert_eq!(refused.status.code(), Some(4), "{}", String::from_utf8_lossy(&refused.stderr));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("`chat` version 2") && !stderr.contains("GraphRef"), "{stderr}");

    // The thread's history: every checkpoint of its three runs (two of
    // version 1, read with version 2's state), numbered continuously.
    let runs = [&first, &second, &moved];
    let steps: Vec<u64> = runs
        .iter()
        .map(|run| {
            fx.json(&["runs", "show", run["id"].as_str().unwrap(), "--json"], 0)["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let total: u64 = steps.iter().map(|step| step + 1).sum();
    let mut entries = Vec::new();
    let mut before: Option<u64> = None;
    loop {
        let mut args = vec!["runs", "history", "--thread", "ann", "--limit", "3", "--json"];
        let before_text = before.map(|b| b.to_string());
        if let Some(text) = &before_text {
            args.extend(["--before", text.as_str()]);
        }
        let page = fx.json(&args, 0);
        assert_eq!(page["total"], total, "{page}");
        entries.extend(page["checkpoints"].as_array().unwrap().clone());
        match page["next_before"].as_u64() {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    let numbers: Vec<u64> = entries.iter().map(|e| e["number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (0..total).rev().collect::<Vec<_>>(), "continuous, newest first");
    let mut expected = Vec::new();
    for (run, last) in runs.iter().zip(&steps) {
        for step in 0..=*last {
            let source = if step == 0 { "input" } else { "loop" };
            expected.push((run["id"].as_str().unwrap().to_owned(), step, source.to_owned()));
        }
    }
    expected.reverse();
    let seen: Vec<(String, u64, String)> = entries
        .iter()
        .map(|e| {
            let run = e["run"].as_str().unwrap().to_owned();
            (run, e["step"].as_u64().unwrap(), e["source"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(seen, expected, "each entry's run, step and source");
    assert_eq!(contents(&entries[0]["values"]["messages"]).len(), 6, "the state at the newest");
    let oldest = entries.last().unwrap();
    assert_eq!(contents(&oldest["values"]["messages"]), ["user: I am Ann."], "the first input");
    let text =
        String::from_utf8(fx.run(&["runs", "history", "--thread", "ann", "--limit", "2"]).stdout)
            .unwrap();
    assert!(
        text.contains(&format!("#{:<4} run {}", total - 1, moved["id"].as_str().unwrap())),
        "{text}"
    );
    assert_eq!(fx.run(&["runs", "history", "--thread", "nobody"]).status.code(), Some(3));

    // A paused run holds its thread: another start is refused, nothing created.
    let paused =
        fx.json(&["run", "refunds.json", "--thread", "r", "--input", "Refund 7", "--json"], 10);
    let refused = fx.run(&["run", "refunds.json", "--thread", "r", "--input", "again"]);
    assert_eq!(refused.status.code(), Some(4), "{}", String::from_utf8_lossy(&refused.stderr));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("busy") && stderr.contains(paused["id"].as_str().unwrap()), "{stderr}");
    let listed = fx.json(&["runs", "list", "--thread", "r", "--json"], 0);
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1);
    // Once decided and finished, the thread goes on from there.
    fx.json(&["runs", "resume", paused["id"].as_str().unwrap(), "--approve", "--json"], 0);
    let next =
        fx.json(&["run", "refunds.json", "--thread", "r", "--input", "Thanks", "--json"], 10);
    let state = fx.json(&["threads", "show", "r", "--json"], 0);
    assert_eq!(state["latest"]["id"], next["id"]);
    let messages = contents(&state["values"]["messages"]);
    assert_eq!(messages[0], "user: Refund 7");
    assert!(
        messages.contains(&"assistant: Refunded 20 EUR for order 7.".to_owned()),
        "{messages:?}"
    );
    assert!(messages.contains(&"user: Thanks".to_owned()), "{messages:?}");
}

#[test]
fn a_thread_continues_its_conversation_one_run_at_a_time() {
    continues_the_conversation(&Fixture::new());
}

#[test]
fn a_thread_continues_its_conversation_one_run_at_a_time_on_postgres() {
    if let Some(fx) = Fixture::postgres() {
        continues_the_conversation(&fx);
    }
}

#[test]
fn threads_over_the_api() {
    let fx = Fixture::new();
    chat(&fx);
    let folder = fx.dir.path().to_str().unwrap().to_owned();
    let server = Served::start(&fx, &["--blueprints", &folder]);
    runtime().block_on(async {
        let client = client();
        for input in ["One.", "Two."] {
            let body = json!({"blueprint": "chat", "input": input, "thread": "api"});
            let created =
                client.post(server.url("/runs?wait=true")).json(&body).send().await.unwrap();
            assert_eq!(created.status(), 201);
        }
        let thread = get_json(&client, &server.url("/threads/api"), 200).await;
        assert_eq!(
            contents(&thread["values"]["messages"]),
            ["user: One.", "assistant: Noted.", "user: Two.", "assistant: Noted."]
        );
        let listed = get_json(&client, &server.url("/runs?thread=api"), 200).await;
        assert_eq!(listed["runs"].as_array().unwrap().len(), 2);
        get_json(&client, &server.url("/threads/none"), 404).await;
        let history = get_json(&client, &server.url("/threads/api/history?limit=2"), 200).await;
        let page = history["checkpoints"].as_array().unwrap();
        assert_eq!(page.len(), 2, "{history}");
        let total = history["total"].as_u64().unwrap();
        assert_eq!(page[0]["number"], total - 1);
        assert_eq!(page[1]["number"], total - 2);
        assert_eq!(history["next_before"], total - 2);
        assert_eq!(page[0]["values"], thread["values"], "the newest entry is the thread's state");
        let runs: Vec<&str> =
            listed["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
        assert_eq!(page[0]["run"], runs[0], "the newest entry is of the latest run");
        let oldest = get_json(&client, &server.url("/threads/api/history?before=1"), 200).await;
        let oldest = &oldest["checkpoints"][0];
        assert_eq!((oldest["number"].as_u64(), oldest["run"].as_str()), (Some(0), Some(runs[1])));
        assert_eq!(oldest["source"], "input");
        assert_eq!(contents(&oldest["values"]["messages"]), ["user: One."]);
        get_json(&client, &server.url("/threads/none/history"), 404).await;
        // Busy: a paused run on the thread.
        let body = json!({"blueprint": "refunds", "input": "Refund 7", "thread": "busy"});
        let paused = client.post(server.url("/runs?wait=true")).json(&body).send().await.unwrap();
        assert_eq!(paused.json::<Value>().await.unwrap()["status"], "awaiting_hitl");
        let refused = client.post(server.url("/runs")).json(&body).send().await.unwrap();
        assert_eq!(refused.status(), 409);
    });
}

/// `POST /runs/{id}/resume` with `answers`: both interrupts of a pause in
/// one call, all or none.
#[test]
fn one_call_answers_several_interrupts_over_the_api() {
    let fx = Fixture::new();
    let schema =
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]});
    let agent = |name: &str| {
        std::fs::write(
            fx.path(&format!("{name}_replies.json")),
            json!([{"tool_calls": [{"name": "issue_refund", "args": {"id": 7}}]}, {"text": "done"}]).to_string(),
        )
        .unwrap();
        json!({"name": name, "model": format!("scripted:{name}_replies.json"),
               "tools": [{"name": "issue_refund", "description": "Refund", "parameters": schema,
                          "fixture": {"refunded": true}, "approval": true}]})
    };
    let blueprint = json!({
        "name": "pair", "agents": [agent("left"), agent("right")],
        "edges": [["START", "left"], ["START", "right"], ["left", "END"], ["right", "END"]]
    });
    std::fs::write(fx.path("pair.json"), blueprint.to_string()).unwrap();
    let paused = fx.json(&["run", "pair.json", "--input", "go", "--json"], 10);
    let run = paused["id"].as_str().unwrap().to_owned();
    let ids: Vec<String> = paused["interrupts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2, "{paused}");
    let server = Served::start(&fx, &[]);
    runtime().block_on(async {
        let client = client();
        let url = server.url(&format!("/runs/{run}/resume"));
        // An invalid edit of one refuses both.
        let bad = json!({"answers": {
            ids[0].clone(): {"decision": "approve"},
            ids[1].clone(): {"decision": "edit", "value": {"id": "eight"}}
        }});
        let refused = client.post(&url).json(&bad).send().await.unwrap();
        assert_eq!(refused.status(), 400);
        let still = get_json(&client, &server.url(&format!("/runs/{run}")), 200).await;
        assert_eq!(still["interrupts"].as_array().unwrap().len(), 2, "nothing recorded");
        let both = json!({"by": "sam", "answers": {
            ids[0].clone(): {"decision": "approve"},
            ids[1].clone(): {"decision": "reject", "reason": "no"}
        }});
        let answered = client.post(&url).json(&both).send().await.unwrap();
        assert_eq!(answered.status(), 200);
        let done = support::settled(&client, &server.url(&format!("/runs/{run}"))).await;
        assert_eq!(done["status"], "completed", "{done}");
    });
    let resumed: Vec<Value> = String::from_utf8(fx.run(&["runs", "events", &run, "--json"]).stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["event_type"] == "run_resumed")
        .collect();
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0]["decisions"].as_array().unwrap().len(), 2);
}

/// `threads storage` and `threads prune` (`--keep-latest`, or whole), and
/// the native API's `POST /threads/{thread}/prune` and storage.
fn pruned_and_measured(fx: &Fixture) {
    chat(fx);
    let mut ids = Vec::new();
    for input in ["One.", "Two.", "Three."] {
        let run = fx.json(&["run", "chat.json", "--thread", "ann", "--input", input, "--json"], 0);
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    let storage = fx.json(&["threads", "storage", "ann", "--json"], 0);
    assert_eq!(storage["runs"], 3, "{storage}");
    let bytes = storage["bytes"].as_u64().unwrap();
    assert!(bytes > 0 && storage["event_bytes"].as_u64().unwrap() > 0, "{storage}");
    let before = fx.json(&["threads", "show", "ann", "--json"], 0);

    let pruned = fx.json(&["threads", "prune", "ann", "--keep-latest", "--json"], 0);
    assert_eq!(pruned["pruned"], json!(["ann"]));
    let listed = fx.json(&["runs", "list", "--thread", "ann", "--json"], 0);
    let left: Vec<&str> =
        listed["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(left, [ids[2].as_str()], "the latest run alone");
    let after = fx.json(&["threads", "show", "ann", "--json"], 0);
    assert_eq!(after["values"], before["values"], "the state is unchanged");
    let smaller = fx.json(&["threads", "storage", "ann", "--json"], 0);
    assert!(smaller["bytes"].as_u64().unwrap() < bytes, "{smaller} after {storage}");
    let next = fx.json(&["run", "chat.json", "--thread", "ann", "--input", "Four.", "--json"], 0);
    assert_eq!(contents(&next["result"]["messages"]).len(), 8, "it goes on from the state kept");

    // Deleted whole; a thread that is not there is said (exit 3).
    let output = fx.run(&["threads", "prune", "ann", "nobody"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&output.stderr).contains("nobody"));
    assert_eq!(fx.run(&["threads", "show", "ann"]).status.code(), Some(3), "ann was deleted");
    assert_eq!(fx.run(&["threads", "storage", "ann"]).status.code(), Some(3));

    // The same through the native API.
    fx.json(&["run", "chat.json", "--thread", "bob", "--input", "Hi.", "--json"], 0);
    fx.json(&["run", "chat.json", "--thread", "bob", "--input", "Again.", "--json"], 0);
    let server = Served::start(fx, &[]);
    runtime().block_on(async {
        let client = client();
        let prune = |thread: &str, body: Value| {
            client.post(server.url(&format!("/threads/{thread}/prune"))).json(&body).send()
        };
        let kept = prune("bob", json!({"strategy": "keep_latest"})).await.unwrap();
        assert_eq!(kept.status(), 200);
        let storage = get_json(&client, &server.url("/threads/bob/storage"), 200).await;
        assert_eq!(storage["runs"], 1, "{storage}");
        assert_eq!(prune("nobody", json!({})).await.unwrap().status(), 404);
        assert_eq!(prune("bob", json!({"strategy": "archive"})).await.unwrap().status(), 400);
        assert_eq!(prune("bob", json!({})).await.unwrap().status(), 200);
        get_json(&client, &server.url("/threads/bob/storage"), 404).await;
    });
}

#[test]
fn threads_are_pruned_and_measured() {
    pruned_and_measured(&Fixture::new());
}

#[test]
fn threads_are_pruned_and_measured_on_postgres() {
    if let Some(fx) = Fixture::postgres() {
        pruned_and_measured(&fx);
    }
}
