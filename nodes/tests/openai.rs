//! The OpenAI-compatible adapter: the provider conformance suite on the
//! fake server (request bodies snapshotted) and an agent loop over it with
//! streaming (the key kept out of checkpoints, events, errors and logs is
//! `openai_secrets.rs`, a binary of its own). A live test runs only with
//! `TOLLGATE_LIVE_OPENAI=1`.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate_engine::{Event, Executor, RunConfig};
use tollgate_nodes::{Agent, ChatModel, FixtureTool, ModelRequest, OpenAiModel, ToolSpec};
use tollgate_testkit::assert_trajectory;
use tollgate_testkit::conformance::{check_openai_compatible, ProviderSetup};
use tollgate_testkit::fake_openai::{chunk, chunk_finish, usage_chunk, FakeOpenAi, Reply};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn adapter(setup: ProviderSetup<'_>) -> Arc<dyn ChatModel> {
    let key = setup.api_key.map(str::to_owned);
    Arc::new(OpenAiModel::with_timeout("gpt-test", setup.base_url, key, setup.timeout).unwrap())
}

#[test]
fn the_adapter_passes_the_provider_conformance_suite() {
    let bodies = runtime().block_on(check_openai_compatible(adapter));
    for (case, body) in bodies {
        insta::assert_json_snapshot!(case, body);
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
fn an_agent_streams_a_tool_round_trip_over_the_adapter() {
    let rt = runtime();
    rt.block_on(async {
        let server = FakeOpenAi::start().await;
        let call = vec![
            chunk(json!({"role": "assistant"})),
            chunk(json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": "{\"id\": 7}"}}]})),
            chunk_finish("tool_calls"),
            usage_chunk(),
        ];
        server.push(Reply::Sse { data: call, done: true, delay: Duration::ZERO });
        server.push(Reply::stream_text(&["Order 7 ", "is 20 EUR."]));
        let model = OpenAiModel::new("gpt-test", server.base_url(), Some("sk-test".into())).unwrap();
        let agent = Agent::new("orders", Arc::new(model)).tool(lookup()).streaming(true).compile().unwrap();
        let run = agent.run(&Executor::new(tollgate_checkpoint::MemoryStore::new()), "Order 7?", RunConfig::new()).await.unwrap();
        assert_eq!(run.final_text(), Some("Order 7 is 20 EUR."));
        assert_trajectory(run.events())
            .model_called("openai:gpt-test")
            .tool_called_with("lookup_order", json!({"id": 7}))
            .model_called("openai:gpt-test")
            .usage_records(2)
            .completed();
        let deltas: Vec<&str> = run.events().iter().filter_map(|e| match &e.event {
            Event::ModelDelta { text, .. } => Some(text.as_str()),
            _ => None,
        }).collect();
        assert_eq!(deltas, ["Order 7 ", "is 20 EUR."]);
        // The second request carried the tool result under the model's id.
        let body = &server.requests()[1].body;
        let tool = body["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
        assert_eq!(tool["tool_call_id"], "call_1");
    });
}

/// Runs against a real endpoint only when asked: `TOLLGATE_LIVE_OPENAI=1`
/// with `OPENAI_API_KEY` (and `OPENAI_BASE_URL`, `TOLLGATE_LIVE_OPENAI_MODEL`
/// if not the public API's `gpt-4o-mini`).
#[test]
fn live_endpoint_when_enabled() {
    if std::env::var("TOLLGATE_LIVE_OPENAI").as_deref() != Ok("1") {
        eprintln!("live OpenAI test not enabled (set TOLLGATE_LIVE_OPENAI=1)");
        return;
    }
    let name = std::env::var("TOLLGATE_LIVE_OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
    let model = OpenAiModel::from_env(name).unwrap();
    let request = ModelRequest {
        agent: "live".into(),
        system: Some("Answer with one word.".into()),
        messages: vec![tollgate_nodes::Message::user("u", "Say hello.")],
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

/// What a provider echoes of the key never survives in an error: the key
/// cut by the 500-character limit on error bodies, a prefix of it, and a
/// key configured with whitespace around it.
#[test]
fn echoed_keys_are_scrubbed_before_errors_are_cut() {
    const KEY: &str = "sk-echo-4b1d9e0c7a6f5e3d";
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let server = FakeOpenAi::start().await;
        // Not JSON with a message: the body itself is reported, cut to 500
        // characters, and the key sits across the cut.
        let straddling = format!("{}{KEY}{}", "x".repeat(490), "y".repeat(100));
        server.push(Reply::Json {
            status: 500,
            headers: Vec::new(),
            body: serde_json::Value::String(straddling),
        });
        server.push(Reply::error(401, &format!("Incorrect API key provided: {}…", &KEY[..14])));
        let model =
            OpenAiModel::new("gpt-test", server.base_url(), Some(format!("  {KEY}\n"))).unwrap();
        let request = ModelRequest {
            agent: "a".into(),
            system: None,
            messages: vec![tollgate_nodes::Message::user("u", "hi")],
            tools: Vec::new(),
            tool_choice: tollgate_nodes::ToolChoice::Auto,
            response_format: tollgate_nodes::ResponseFormat::Text,
            options: tollgate_nodes::ModelOptions::default(),
            call_index: 0,
        };
        for case in ["straddling the cut", "an echoed prefix"] {
            let error = model.invoke(&request).await.unwrap_err();
            let text = format!("{error} {error:?}");
            assert!(!text.contains(&KEY[..12]), "{case}: {text}");
            assert!(text.contains("[redacted"), "{case}: the key was there: {text}");
        }
        let sent = server.requests();
        assert_eq!(
            sent[0].authorization.as_deref(),
            Some(format!("Bearer {KEY}").as_str()),
            "the key is sent trimmed"
        );
    });
}
