//! The Anthropic adapter: the provider conformance suite on the fake server
//! (request bodies snapshotted), an agent loop over it with streaming and
//! thinking, retries that wait as long as the server asks, and the key
//! kept out of the database, the events and the errors. A live test runs
//! only with `TOLLGATE_LIVE_ANTHROPIC=1`.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tollgate_checkpoint::{RunStatus, SqliteStore};
use tollgate_engine::{Event, Executor, RunConfig};
use tollgate_nodes::{
    Agent, AnthropicModel, ChatModel, FixtureTool, Message, ModelRequest, ToolSpec,
};
use tollgate_testkit::assert_trajectory;
use tollgate_testkit::conformance::{check_anthropic_compatible, ProviderSetup};
use tollgate_testkit::fake_anthropic::{
    block_start, block_stop, delta, input_delta, start, stop, stop_delta, FakeAnthropic, Reply,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn adapter(setup: ProviderSetup<'_>) -> Arc<dyn ChatModel> {
    let key = setup.api_key.map(str::to_owned);
    Arc::new(
        AnthropicModel::with_timeout("claude-test", setup.base_url, key, setup.timeout).unwrap(),
    )
}

#[test]
fn the_adapter_passes_the_provider_conformance_suite() {
    let bodies = runtime().block_on(check_anthropic_compatible(adapter));
    for (case, body) in bodies {
        insta::assert_json_snapshot!(format!("anthropic_{case}"), body);
    }
}

fn lookup() -> FixtureTool {
    let schema =
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]});
    FixtureTool::new(
        ToolSpec::new("lookup_order", "Find an order", schema),
        json!({"id": 7, "amount": 20}),
    )
}

#[test]
fn an_agent_streams_a_tool_round_trip_with_thinking_and_waits_when_overloaded() {
    const KEY: &str = "sk-ant-canary-5e1f0c9d8b7a";
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    rt.block_on(async {
        let server = FakeAnthropic::start().await;
        // Overloaded first, asking for 800 ms (the default backoff's first
        // wait is about 200 ms): the agent's retry waits as asked.
        let mut overloaded = Reply::error(529, "overloaded_error", &format!("busy (key {KEY})"));
        if let Reply::Json { headers, .. } = &mut overloaded {
            headers.push(("retry-after".into(), "0.8".into()));
        }
        server.push(overloaded);
        server.push(Reply::events(vec![
            start(),
            block_start(0, json!({"type": "thinking", "thinking": ""})),
            delta(0, json!({"type": "thinking_delta", "thinking": "Look it up."})),
            delta(0, json!({"type": "signature_delta", "signature": "sig"})),
            block_stop(0),
            block_start(
                1,
                json!({"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {}}),
            ),
            input_delta(1, "{\"id\""),
            input_delta(1, ": 7}"),
            block_stop(1),
            stop_delta("tool_use"),
            stop(),
        ]));
        server.push(Reply::stream_text(&["Order 7 ", "is 20 EUR."]));
        let model =
            AnthropicModel::new("claude-test", server.base_url(), Some(KEY.into())).unwrap();
        assert!(!format!("{model:?}").contains(KEY), "Debug redacts the key");
        let agent =
            Agent::new("orders", Arc::new(model)).tool(lookup()).streaming(true).compile().unwrap();
        let executor = Executor::new(SqliteStore::open(dir.path().join("runs.db")).unwrap());
        let started = Instant::now();
        let run = agent.run(&executor, "Order 7?", RunConfig::new()).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed);
        assert!(started.elapsed() >= Duration::from_millis(800), "the retry waited as asked");
        assert_eq!(run.final_text(), Some("Order 7 is 20 EUR."));
        assert_trajectory(run.events())
            .model_called("anthropic:claude-test")
            .tool_called_with("lookup_order", json!({"id": 7}))
            .model_called("anthropic:claude-test")
            .completed();
        let deltas: Vec<&str> = run
            .events()
            .iter()
            .filter_map(|e| match &e.event {
                Event::ModelDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, ["Order 7 ", "is 20 EUR."], "thinking is never streamed as text");
        // The thinking block went back with the tool result, as the API
        // requires, and stayed out of the answer.
        let requests = server.requests();
        let last = &requests.last().unwrap().body;
        assert_eq!(last["messages"][1]["content"][0]["type"], "thinking");
        assert_eq!(last["messages"][1]["content"][0]["signature"], "sig");
        assert_eq!(last["messages"][2]["content"][0]["tool_use_id"], "toolu_1");
        assert!(run.messages.iter().all(|m| !m.content().contains("Look it up.")));
        let kept = run.messages.iter().find_map(|m| match m {
            Message::Assistant { reasoning, .. } if !reasoning.is_empty() => {
                Some(reasoning.clone())
            }
            _ => None,
        });
        assert_eq!(
            kept,
            Some(vec![json!({"type": "thinking", "thinking": "Look it up.", "signature": "sig"})]),
            "the thinking is kept in the checkpointed message"
        );
        // The key: only in the header, never in the file or the events.
        assert!(requests.iter().all(|r| r.header("x-api-key") == Some(KEY)));
        let events: Vec<String> =
            run.events().iter().map(|e| serde_json::to_string(e).unwrap()).collect();
        assert!(!events.join("\n").contains(&KEY[7..]), "the key is in the events");
    });
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(
            !bytes.windows(KEY.len() - 7).any(|w| w == &KEY.as_bytes()[7..]),
            "key in the database"
        );
    }
}

/// Runs against the real API only when asked: `TOLLGATE_LIVE_ANTHROPIC=1`
/// with `ANTHROPIC_API_KEY` (and `TOLLGATE_LIVE_ANTHROPIC_MODEL` if not
/// `claude-3-5-haiku-latest`).
#[test]
fn live_endpoint_when_enabled() {
    if std::env::var("TOLLGATE_LIVE_ANTHROPIC").as_deref() != Ok("1") {
        eprintln!("live Anthropic test not enabled (set TOLLGATE_LIVE_ANTHROPIC=1)");
        return;
    }
    let name = std::env::var("TOLLGATE_LIVE_ANTHROPIC_MODEL")
        .unwrap_or_else(|_| "claude-3-5-haiku-latest".into());
    let model = AnthropicModel::from_env(name).unwrap();
    let request = ModelRequest {
        agent: "live".into(),
        system: Some("Answer with one word.".into()),
        messages: vec![Message::user("u", "Say hello.")],
        tools: Vec::new(),
        tool_choice: Default::default(),
        response_format: Default::default(),
        options: Default::default(),
        call_index: 0,
    };
    let rt = runtime();
    let response = rt.block_on(model.invoke(&request)).unwrap();
    assert!(!response.content.is_empty());
    let mut joined = String::new();
    let streamed = rt.block_on(model.stream(&request, &mut joined)).unwrap();
    assert_eq!(joined, streamed.content);
}

#[test]
fn a_stream_answered_with_json_says_what_came_back() {
    runtime().block_on(async {
        let server = FakeAnthropic::start().await;
        let model = AnthropicModel::new("claude-test", server.base_url(), Some("k".into())).unwrap();
        let request = ModelRequest {
            agent: "a".into(),
            system: None,
            messages: vec![Message::user("u", "hi")],
            tools: Vec::new(),
            tool_choice: Default::default(),
            response_format: Default::default(),
            options: Default::default(),
            call_index: 0,
        };
        // A JSON body where an event stream was asked for (a proxy, say).
        server.push(tollgate_testkit::fake_anthropic::Reply::Json {
            status: 200,
            headers: Vec::new(),
            body: json!({"id": "msg_1", "note": "buffered"}),
        });
        let mut deltas = String::new();
        let error = model.stream(&request, &mut deltas).await.unwrap_err().to_string();
        assert!(error.contains("got application/json, not an event stream"), "{error}");
        assert!(error.contains("buffered"), "what came back is shown: {error}");
        // An error the API sent as JSON is that error.
        server.push(tollgate_testkit::fake_anthropic::Reply::Json {
            status: 200,
            headers: Vec::new(),
            body: json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
        });
        let error = model.stream(&request, &mut deltas).await.unwrap_err().to_string();
        assert!(error.contains("busy"), "{error}");
    });
}
