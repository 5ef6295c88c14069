//! Provider conformance for Anthropic's Messages API: an adapter against
//! the fake server ([`FakeAnthropic`]), streaming included (feature
//! `provider-suite`). The cases are those of the OpenAI-compatible suite,
//! in this wire format, and what only this format has (thinking blocks,
//! cache usage, `overloaded_error`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tollgate_nodes::{
    ChatModel, ErrorClass, Message, ModelOptions, OutputSchema, ResponseFormat, ToolCall,
    ToolChoice,
};

use super::provider::{
    class, lookup_tool, request, transport_cases, ProviderSetup, Suite, SUITE_KEY,
};
use crate::fake_anthropic::{
    block_start, block_stop, delta, error_event, input_delta, ping, start, stop, stop_delta,
    text_delta, FakeAnthropic, Reply,
};

fn assistant(content: &str, calls: Vec<ToolCall>, reasoning: Vec<Value>) -> Message {
    Message::Assistant {
        id: "a".into(),
        agent: None,
        content: content.into(),
        tool_calls: calls,
        usage: None,
        reasoning,
    }
}

fn tool_result(call: &str, content: &str, is_error: bool) -> Message {
    Message::Tool {
        id: format!("t-{call}"),
        agent: None,
        call_id: call.into(),
        name: "lookup_order".into(),
        content: content.into(),
        is_error,
    }
}

/// Runs every case against the adapter `make` builds (given the fake
/// server's base URL, [`SUITE_KEY`] and a timeout); panics, naming the
/// case, on the first failure. Returns each case's request body.
///
/// Cases: text invoke with a system prompt, system messages and options
/// (`max_tokens`, `temperature`, `stop_sequences`); the key only in
/// `x-api-key` with `anthropic-version`; usage with cache reads and
/// writes; text streaming (deltas joined, `ping` ignored, usage from
/// `message_start` and `message_delta`); multi-turn with Unicode and turns
/// of one role merged; tool binding and a forced tool; parallel tool
/// calls; tool results (errors flagged) answering their ids; streamed tool
/// input split at awkward places and a tool without input; structured
/// output through a forced tool, invoked and streamed; thinking blocks
/// kept apart from the answer and sent back, invoked and streamed; every
/// error type (`invalid_request_error`, `authentication_error`,
/// `permission_error`, `not_found_error`, `request_too_large`,
/// `rate_limit_error` and `overloaded_error` with `retry-after`,
/// `api_error`); an `error` event mid-stream; a malformed event; a stream
/// ended before `message_stop`; a connection dropped mid-stream;
/// cancellation; a timeout; a refused connection; the key scrubbed from
/// every error.
pub async fn check_anthropic_compatible<F>(make: F) -> Vec<(&'static str, Value)>
where
    F: Fn(ProviderSetup<'_>) -> Arc<dyn ChatModel>,
{
    let server = FakeAnthropic::start().await;
    let setup = ProviderSetup {
        base_url: server.base_url(),
        api_key: Some(SUITE_KEY),
        timeout: Duration::from_secs(10),
    };
    let model = make(setup);
    let mut suite = Suite { server: &server, model, bodies: Vec::new() };
    invoke_text(&mut suite).await;
    stream_text(&mut suite).await;
    multi_turn(&mut suite).await;
    tool_binding(&mut suite).await;
    tool_result_history(&mut suite).await;
    streamed_tool_input(&mut suite).await;
    structured_output(&mut suite).await;
    thinking_round_trip(&mut suite).await;
    error_types(&mut suite).await;
    retry_after(&mut suite).await;
    stream_errors(&mut suite).await;

    let dropped = || server.dropped_streams();
    transport_cases(&make, setup, || server.push(Reply::Hang), dropped, "").await;
    suite.bodies
}

/// Text invoke, with a system prompt, a system message and options.
async fn invoke_text(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::text("Hello!"));
    let mut hello = request(vec![Message::system("s", "Be brief."), Message::user("u", "Hi")]);
    hello.system = Some("You are a test.".into());
    hello.options = ModelOptions {
        temperature: Some(0.0),
        max_tokens: Some(32),
        stop: vec!["END".into()],
        ..ModelOptions::default()
    };
    let response = model.invoke(&hello).await.expect("invoke_text");
    assert_eq!(response.content, "Hello!", "invoke_text");
    assert_eq!(response.finish_reason.as_deref(), Some("end_turn"), "invoke_text: stop reason");
    let usage = response.usage.expect("invoke_text: usage");
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.total_tokens,
            usage.cache_read_tokens,
            usage.cache_creation_tokens
        ),
        (11, 7, 18, 5, 3),
        "invoke_text: usage with the cache"
    );
    let body = server.last_body();
    assert_eq!(body["system"], "You are a test.\n\nBe brief.", "system: prompt and messages");
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}])
    );
    assert_eq!(
        (body["temperature"].clone(), body["max_tokens"].clone(), body["stop_sequences"].clone()),
        (json!(0.0), json!(32), json!(["END"])),
        "options"
    );
    let sent = server.requests().pop().expect("a request");
    assert_eq!(sent.header("x-api-key"), Some(SUITE_KEY), "key: x-api-key header");
    assert!(sent.header("anthropic-version").is_some(), "anthropic-version header");
    assert_eq!(sent.authorization, None, "key: no Authorization header");
    assert!(!body.to_string().contains(SUITE_KEY), "key: never in the body");
    suite.bodies.push(("invoke_text", body));
}

/// Text stream: deltas join to the text; pings ignored; usage from
/// the start and the final delta.
async fn stream_text(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::stream_text(&["Hel", "lo, ", "wörld 🚀"]));
    let mut joined = String::new();
    let response = model
        .stream(&request(vec![Message::user("u", "Hi")]), &mut joined)
        .await
        .expect("stream_text");
    assert_eq!(
        (joined.as_str(), response.content.as_str()),
        ("Hello, wörld 🚀", "Hello, wörld 🚀"),
        "stream_text"
    );
    let usage = response.usage.expect("stream_text: usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (11, 7), "stream_text: usage");
    assert_eq!(server.last_body()["stream"], true, "stream_text: stream");
    suite.bodies.push(("stream_text", server.last_body()));
}

/// Multi-turn, two user messages in a row (one turn), Unicode.
async fn multi_turn(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::text("日本語でどうぞ"));
    let turns = vec![
        Message::user("1", "こんにちは"),
        Message::assistant("2", "Hi"),
        Message::user("3", "again"),
        Message::user("4", "and again ✓"),
    ];
    let response = model.invoke(&request(turns)).await.expect("multi_turn");
    assert_eq!(response.content, "日本語でどうぞ", "unicode");
    let body = server.last_body();
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"], "multi_turn: alternating turns");
    assert_eq!(body["messages"][2]["content"][1]["text"], "and again ✓", "multi_turn: merged");
    suite.bodies.push(("multi_turn", body));
}

/// Tool binding, a named tool, two calls in one turn.
async fn tool_binding(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::tool_uses(&[
        ("toolu_1", "lookup_order", json!({"id": 7, "note": "é"})),
        ("toolu_2", "lookup_order", json!({"id": 8})),
    ]));
    let mut with_tools = request(vec![Message::user("u", "Orders 7 and 8?")]);
    with_tools.tools = vec![lookup_tool()];
    with_tools.tool_choice = ToolChoice::Named("lookup_order".into());
    let response = model.invoke(&with_tools).await.expect("tool_calls");
    assert_eq!(
        response.tool_calls,
        [
            ToolCall::new("toolu_1", "lookup_order", json!({"id": 7, "note": "é"})),
            ToolCall::new("toolu_2", "lookup_order", json!({"id": 8}))
        ],
        "parallel_tool_calls"
    );
    assert_eq!(response.finish_reason.as_deref(), Some("tool_use"));
    let body = server.last_body();
    assert_eq!(body["tools"][0]["input_schema"], lookup_tool().parameters, "tool_binding");
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "lookup_order"}), "tool_choice");
    suite.bodies.push(("tool_binding", body));
}

/// Tool results answer their ids, an error flagged, in one user turn.
async fn tool_result_history(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::text("Order 7 is 20 EUR; 8 failed."));
    let history = vec![
        Message::user("u", "Orders 7 and 8?"),
        assistant(
            "",
            vec![
                ToolCall::new("toolu_1", "lookup_order", json!({"id": 7})),
                ToolCall::new("toolu_2", "lookup_order", json!({"id": 8})),
            ],
            Vec::new(),
        ),
        tool_result("toolu_1", r#"{"amount":20}"#, false),
        tool_result("toolu_2", "not found", true),
    ];
    model.invoke(&request(history)).await.expect("tool_result_history");
    let body = server.last_body();
    let calls = &body["messages"][1]["content"];
    assert_eq!(
        (calls[0]["type"].clone(), calls[0]["id"].clone(), calls[0]["input"].clone()),
        (json!("tool_use"), json!("toolu_1"), json!({"id": 7})),
        "tool_id_preservation: tool_use"
    );
    let results = &body["messages"][2];
    assert_eq!(results["role"], "user", "tool results are a user turn");
    assert_eq!(
        (results["content"][0]["tool_use_id"].clone(), results["content"][1]["is_error"].clone()),
        (json!("toolu_1"), json!(true)),
        "tool_result: ids and is_error"
    );
    suite.bodies.push(("tool_result_history", body));
}

/// Streamed tool input, split inside a key, after a backslash and in a
/// number; a tool with no input at all.
async fn streamed_tool_input(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    let events = vec![
        start(),
        block_start(0, json!({"type": "text", "text": ""})),
        text_delta(0, "Checking."),
        block_stop(0),
        block_start(
            1,
            json!({"type": "tool_use", "id": "toolu_a", "name": "lookup_order", "input": {}}),
        ),
        input_delta(1, ""),
        input_delta(1, "{\"i"),
        input_delta(1, "d\": 7"),
        input_delta(1, "1, \"q\": \"a\\"),
        input_delta(1, "\"b日本\"}"),
        block_stop(1),
        ping(),
        block_start(2, json!({"type": "tool_use", "id": "toolu_b", "name": "ping", "input": {}})),
        block_stop(2),
        stop_delta("tool_use"),
        stop(),
    ];
    server.push(Reply::events(events));
    let mut text = String::new();
    let response = model
        .stream(&request(vec![Message::user("u", "go")]), &mut text)
        .await
        .expect("stream_tool_calls");
    assert_eq!(text, "Checking.", "stream_tool_calls: the text streamed");
    let calls: Vec<(&str, &str, Value)> = response
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.args.clone()))
        .collect();
    assert_eq!(
        calls,
        [
            ("toolu_a", "lookup_order", json!({"id": 71, "q": "a\"b日本"})),
            ("toolu_b", "ping", json!({}))
        ],
        "stream_tool_calls: input assembled across deltas"
    );
}

/// Structured output through a forced tool, invoked and streamed.
async fn structured_output(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    let schema = json!({"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]});
    let mut native = request(vec![Message::user("u", "decide")]);
    native.response_format =
        ResponseFormat::ProviderNative(OutputSchema::new("verdict", schema.clone()));
    server.push(Reply::tool_uses(&[("toolu_v", "verdict", json!({"approved": true}))]));
    let response = model.invoke(&native).await.expect("structured_native");
    assert_eq!(
        serde_json::from_str::<Value>(&response.content).ok(),
        Some(json!({"approved": true})),
        "structured_native: the tool's input is the answer"
    );
    assert!(response.tool_calls.is_empty(), "structured_native: not a tool call");
    let body = server.last_body();
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "verdict"}), "forced tool");
    let forced =
        body["tools"].as_array().and_then(|tools| tools.last()).cloned().unwrap_or_default();
    assert_eq!(forced["input_schema"], schema, "structured_native: schema");
    suite.bodies.push(("structured_native", body));
    server.push(Reply::events(vec![
        start(),
        block_start(
            0,
            json!({"type": "tool_use", "id": "toolu_v", "name": "verdict", "input": {}}),
        ),
        input_delta(0, "{\"approved\": "),
        input_delta(0, "false}"),
        block_stop(0),
        stop_delta("tool_use"),
        stop(),
    ]));
    let mut quiet = String::new();
    let response = model.stream(&native, &mut quiet).await.expect("structured_streamed");
    assert_eq!(
        serde_json::from_str::<Value>(&response.content).ok(),
        Some(json!({"approved": false})),
        "structured_streamed"
    );
}

/// Thinking: kept apart from the answer, sent back first next turn.
async fn thinking_round_trip(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    let thinking =
        json!({"type": "thinking", "thinking": "Order 7 is small.", "signature": "sig-1"});
    let redacted = json!({"type": "redacted_thinking", "data": "opaque"});
    server.push(Reply::message(
        json!([thinking, redacted, {"type": "text", "text": "Approve it."}]),
        "end_turn",
    ));
    let response = model.invoke(&request(vec![Message::user("u", "7?")])).await.expect("thinking");
    assert_eq!(response.content, "Approve it.", "thinking: not in the answer");
    assert_eq!(response.reasoning, [thinking.clone(), redacted.clone()], "thinking: kept");
    server.push(Reply::text("ok"));
    let next = vec![
        Message::user("u", "7?"),
        assistant("Approve it.", Vec::new(), response.reasoning.clone()),
        Message::user("v", "and 8?"),
    ];
    model.invoke(&request(next)).await.expect("thinking_sent_back");
    let body = server.last_body();
    assert_eq!(
        body["messages"][1]["content"],
        json!([thinking, redacted, {"type": "text", "text": "Approve it."}]),
        "thinking: sent back as received, before the text"
    );
    suite.bodies.push(("thinking_round_trip", body));
    server.push(Reply::events(vec![
        start(),
        block_start(0, json!({"type": "thinking", "thinking": ""})),
        delta(0, json!({"type": "thinking_delta", "thinking": "Order 7 "})),
        delta(0, json!({"type": "thinking_delta", "thinking": "is small."})),
        delta(0, json!({"type": "signature_delta", "signature": "sig-1"})),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        text_delta(1, "Approve it."),
        block_stop(1),
        stop_delta("end_turn"),
        stop(),
    ]));
    let mut shown = String::new();
    let response = model
        .stream(&request(vec![Message::user("u", "7?")]), &mut shown)
        .await
        .expect("thinking_streamed");
    assert_eq!(shown, "Approve it.", "thinking_streamed: thinking never streamed as text");
    assert_eq!(response.reasoning, [thinking], "thinking_streamed: assembled with its signature");
}

/// Every error type maps to its class, the server's words kept, the
/// key scrubbed.
async fn error_types(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    for (status, kind, expected) in [
        (400, "invalid_request_error", ErrorClass::InvalidRequest),
        (401, "authentication_error", ErrorClass::Auth),
        (403, "permission_error", ErrorClass::Auth),
        (404, "not_found_error", ErrorClass::InvalidRequest),
        (413, "request_too_large", ErrorClass::InvalidRequest),
        (500, "api_error", ErrorClass::Server),
        (529, "overloaded_error", ErrorClass::Server),
        (429, "rate_limit_error", ErrorClass::RateLimit),
    ] {
        server.push(Reply::error(
            status,
            kind,
            &format!("status {status} (key ...{})", &SUITE_KEY[3..]),
        ));
        let result = model.invoke(&request(vec![Message::user("u", "x")])).await;
        assert_eq!(class(&result), Some(expected), "{kind}");
        let text = result.expect_err("an error").to_string();
        assert!(
            text.contains(&format!("status {status}")) && text.contains(kind),
            "{kind}: {text}"
        );
        assert!(!text.contains(&SUITE_KEY[3..]), "{kind}: the key is scrubbed: {text}");
    }
}

/// Retry-after on the two retryable ones.
async fn retry_after(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    for (status, kind, expected) in [
        (429, "rate_limit_error", ErrorClass::RateLimit),
        (529, "overloaded_error", ErrorClass::Server),
    ] {
        let mut reply = Reply::error(status, kind, "later");
        if let Reply::Json { headers, .. } = &mut reply {
            headers.push(("retry-after".into(), "2".into()));
        }
        server.push(reply);
        let error = model.invoke(&request(vec![Message::user("u", "x")])).await.expect_err(kind);
        assert_eq!(error.class(), expected, "{kind}");
        assert!(error.class().retryable_by_default(), "{kind}: retryable");
        assert_eq!(error.retry_after(), Some(Duration::from_secs(2)), "{kind}: retry-after");
    }
}

/// Errors inside a stream, a malformed event, a stream that stops too
/// early, a connection cut mid-stream.
async fn stream_errors(suite: &mut Suite<'_, FakeAnthropic>) {
    let (server, model) = (suite.server, suite.model.clone());
    let user = || request(vec![Message::user("u", "x")]);
    for (kind, expected) in [
        ("overloaded_error", ErrorClass::Server),
        ("rate_limit_error", ErrorClass::RateLimit),
        ("invalid_request_error", ErrorClass::InvalidRequest),
    ] {
        server.push(Reply::events(vec![
            start(),
            block_start(0, json!({"type": "text", "text": ""})),
            text_delta(0, "partial "),
            error_event(kind, "mid-stream trouble"),
        ]));
        let mut sink = String::new();
        let result = model.stream(&user(), &mut sink).await;
        assert_eq!(class(&result), Some(expected), "midstream {kind}");
        let text = result.expect_err(kind).to_string();
        assert!(text.contains("mid-stream trouble"), "midstream {kind}: {text}");
    }
    let mut sink = String::new();
    server.push(Reply::Events {
        events: vec![("message_start".into(), "{not json".into())],
        delay: Duration::ZERO,
        cut: false,
    });
    assert_eq!(
        class(&model.stream(&user(), &mut sink).await),
        Some(ErrorClass::Protocol),
        "malformed"
    );
    server.push(Reply::events(vec![
        start(),
        block_start(0, json!({"type": "text", "text": ""})),
        text_delta(0, "half"),
    ]));
    assert_eq!(
        class(&model.stream(&user(), &mut sink).await),
        Some(ErrorClass::Protocol),
        "stream_ended_before_message_stop"
    );
    server.push(Reply::cut(vec![
        start(),
        block_start(0, json!({"type": "text", "text": ""})),
        text_delta(0, "x"),
    ]));
    assert_eq!(
        class(&model.stream(&user(), &mut sink).await),
        Some(ErrorClass::Network),
        "connection_dropped_mid_stream"
    );
}
