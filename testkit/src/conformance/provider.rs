//! Provider conformance: an OpenAI-compatible adapter against the fake
//! server, streaming included (feature `provider-suite`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tollgate_nodes::{
    ChatModel, ErrorClass, HarnessError, Message, ModelOptions, ModelRequest, OutputSchema,
    ResponseFormat, ToolCall, ToolChoice, ToolSpec,
};

use crate::fake_openai::{chunk, chunk_finish, usage_chunk, FakeOpenAi, Reply};

/// What the suite hands the adapter under test.
#[derive(Debug, Clone, Copy)]
pub struct ProviderSetup<'a> {
    /// The fake server's base URL (`http://127.0.0.1:PORT/v1`).
    pub base_url: &'a str,
    /// The key to send.
    pub api_key: Option<&'a str>,
    /// The request timeout to use.
    pub timeout: Duration,
}

/// The key the suite gives adapters: it must appear only in the
/// `Authorization` header.
pub const SUITE_KEY: &str = "sk-suite-0123456789abcdef";

pub(super) fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        agent: "suite".into(),
        system: None,
        messages,
        tools: Vec::new(),
        tool_choice: ToolChoice::Auto,
        response_format: ResponseFormat::Text,
        options: ModelOptions::default(),
        call_index: 0,
    }
}

pub(super) fn lookup_tool() -> ToolSpec {
    ToolSpec::new(
        "lookup_order",
        "Find an order",
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}),
    )
}

pub(super) fn class(
    result: &Result<tollgate_nodes::ModelResponse, HarnessError>,
) -> Option<ErrorClass> {
    result.as_ref().err().map(HarnessError::class)
}

/// Runs every case against the adapter `make` builds; panics, naming the
/// case, on the first failure. Returns each case's request body (for
/// snapshots).
///
/// Cases: text invoke and stream, system messages, multi-turn (two in a row
/// of one role), Unicode, tool binding, tool-call id preservation, tool
/// calls without arguments, streamed tool-call fragments (split arguments,
/// interleaved calls, an index reused with a new id), structured output
/// (provider-native strict schema, tool strategy), usage (invoke and the
/// final stream chunk), cancellation (a dropped stream closes the
/// connection), timeout, rate limits with `retry-after-ms` and
/// `retry-after`, every error status (408 with the server's message),
/// connection refused, malformed chunks, errors inside a stream (numeric
/// and string `code`s, a `type` only, code words), a stream cut before
/// `[DONE]`, and the key sent only as a bearer header.
pub async fn check_openai_compatible<F>(make: F) -> Vec<(&'static str, Value)>
where
    F: Fn(ProviderSetup<'_>) -> Arc<dyn ChatModel>,
{
    let server = FakeOpenAi::start().await;
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
    call_without_arguments(&mut suite).await;
    streamed_tool_calls(&mut suite).await;
    structured_native(&mut suite).await;
    structured_tool(&mut suite).await;
    rate_limits(&mut suite).await;
    error_statuses(&mut suite).await;
    stream_errors(&mut suite).await;

    let dropped = || server.dropped_streams();
    transport_cases(&make, setup, || server.push(Reply::Hang), dropped, "/v1").await;
    suite.bodies
}

/// The schema of the structured-output cases.
fn verdict_schema() -> Value {
    json!({"type": "object", "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}}, "required": ["approved"]})
}

/// What a provider suite's cases share: the fake server `S`, the adapter
/// under test and the request bodies kept.
pub(super) struct Suite<'a, S> {
    pub(super) server: &'a S,
    pub(super) model: Arc<dyn ChatModel>,
    pub(super) bodies: Vec<(&'static str, Value)>,
}

/// Text invoke, with a system prompt and a system message.
async fn invoke_text(suite: &mut Suite<'_, FakeOpenAi>) {
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
    let usage = response.usage.expect("invoke_text: usage");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.total_tokens),
        (11, 7, 18),
        "invoke_text: usage"
    );
    let body = server.last_body();
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["system", "system", "user"], "system_messages: the prompt first");
    assert_eq!(
        (body["temperature"].clone(), body["max_tokens"].clone(), body["stop"].clone()),
        (json!(0.0), json!(32), json!(["END"])),
        "options"
    );
    let auth = server.requests().last().and_then(|r| r.authorization.clone());
    assert_eq!(auth.as_deref(), Some(format!("Bearer {SUITE_KEY}").as_str()), "key: bearer header");
    assert!(!body.to_string().contains(SUITE_KEY), "key: never in the body");
    suite.bodies.push(("invoke_text", body));
}

/// Text stream: deltas join to the text; usage from the final chunk.
async fn stream_text(suite: &mut Suite<'_, FakeOpenAi>) {
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
    assert_eq!(
        response.usage.map(|u| u.total_tokens),
        Some(18),
        "stream_usage: from the final chunk"
    );
    let body = server.last_body();
    assert_eq!(
        (body["stream"].clone(), body["stream_options"]["include_usage"].clone()),
        (json!(true), json!(true)),
        "stream_text: stream options"
    );
    suite.bodies.push(("stream_text", body));
}

/// Multi-turn, two user messages in a row, Unicode.
async fn multi_turn(suite: &mut Suite<'_, FakeOpenAi>) {
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
    let contents: Vec<&str> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(contents, ["こんにちは", "Hi", "again", "and again ✓"], "multi_turn");
    suite.bodies.push(("multi_turn", body));
}

/// Tool binding and a tool call: name, parsed args, id kept.
async fn tool_binding(suite: &mut Suite<'_, FakeOpenAi>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::tool_calls(&[("call_abc", "lookup_order", r#"{"id": 7, "note": "é"}"#)]));
    let mut with_tools = request(vec![Message::user("u", "Order 7?")]);
    with_tools.tools = vec![lookup_tool()];
    with_tools.tool_choice = ToolChoice::Named("lookup_order".into());
    let response = model.invoke(&with_tools).await.expect("tool_call");
    assert_eq!(
        response.tool_calls,
        [ToolCall::new("call_abc", "lookup_order", json!({"id": 7, "note": "é"}))],
        "tool_call"
    );
    let body = server.last_body();
    assert_eq!(body["tools"][0]["type"], "function", "tool_binding");
    assert_eq!(
        body["tools"][0]["function"]["parameters"],
        lookup_tool().parameters,
        "tool_binding: schema"
    );
    assert_eq!(body["tool_choice"]["function"]["name"], "lookup_order", "tool_choice");
    suite.bodies.push(("tool_binding", body));
}

/// The tool result answers the same id in the next request.
async fn tool_result_history(suite: &mut Suite<'_, FakeOpenAi>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::text("Order 7 is 20 EUR."));
    let history = vec![
        Message::user("u", "Order 7?"),
        Message::Assistant {
            id: "a".into(),
            agent: None,
            content: String::new(),
            tool_calls: vec![ToolCall::new("call_abc", "lookup_order", json!({"id": 7}))],
            usage: None,
            reasoning: Vec::new(),
        },
        Message::Tool {
            id: "t".into(),
            agent: None,
            call_id: "call_abc".into(),
            name: "lookup_order".into(),
            content: r#"{"amount":20}"#.into(),
            is_error: false,
        },
    ];
    model.invoke(&request(history)).await.expect("tool_result_history");
    let body = server.last_body();
    assert_eq!(
        body["messages"][1]["tool_calls"][0]["id"], "call_abc",
        "tool_id_preservation: assistant"
    );
    assert_eq!(
        body["messages"][1]["tool_calls"][0]["function"]["arguments"], r#"{"id":7}"#,
        "arguments as a JSON string"
    );
    assert_eq!(
        body["messages"][2]["tool_call_id"], "call_abc",
        "tool_id_preservation: tool result"
    );
    suite.bodies.push(("tool_result_history", body));
}

/// A call without arguments.
async fn call_without_arguments(suite: &mut Suite<'_, FakeOpenAi>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::tool_calls(&[("call_0", "ping", "")]));
    let response =
        model.invoke(&request(vec![Message::user("u", "ping")])).await.expect("tool_no_args");
    assert_eq!(response.tool_calls[0].args, json!({}), "tool_no_args: \"\" is {{}}");
}

/// Streamed tool-call fragments.
async fn streamed_tool_calls(suite: &mut Suite<'_, FakeOpenAi>) {
    let (server, model) = (suite.server, suite.model.clone());
    let fragments = vec![
        chunk(json!({"role": "assistant", "content": null})),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "lookup_order", "arguments": ""}}]}),
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "ping", "arguments": "{\"q\": \"日"}}]}),
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"id\""}}]})),
        chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": "本\\\"\"}"}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": ": 7}"}}]})),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_c", "type": "function", "function": {"name": "ping", "arguments": ""}}]}),
        ),
        chunk_finish("tool_calls"),
        usage_chunk(),
    ];
    server.push(Reply::Sse { data: fragments, done: true, delay: Duration::ZERO });
    let mut ignored = String::new();
    let response = model
        .stream(&request(vec![Message::user("u", "go")]), &mut ignored)
        .await
        .expect("stream_tool_calls");
    let calls: Vec<(&str, &str, Value)> = response
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.args.clone()))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_a", "lookup_order", json!({"id": 7})),
            ("call_b", "ping", json!({"q": "日本\""})),
            ("call_c", "ping", json!({}))
        ],
        "stream_tool_calls: accumulated by index and id"
    );
}

/// Structured output, provider-native: a strict, closed schema.
async fn structured_native(suite: &mut Suite<'_, FakeOpenAi>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::text(r#"{"approved": true, "note": null}"#));
    let mut native = request(vec![Message::user("u", "decide")]);
    let schema = verdict_schema();
    native.response_format =
        ResponseFormat::ProviderNative(OutputSchema::new("verdict", schema.clone()));
    let response = model.invoke(&native).await.expect("structured_native");
    assert_eq!(
        serde_json::from_str::<Value>(&response.content).ok(),
        Some(json!({"approved": true, "note": null})),
        "structured_native"
    );
    let body = server.last_body();
    let format = &body["response_format"];
    assert_eq!(
        (
            format["type"].clone(),
            format["json_schema"]["name"].clone(),
            format["json_schema"]["strict"].clone()
        ),
        (json!("json_schema"), json!("verdict"), json!(true)),
        "structured_native: request"
    );
    assert_eq!(
        format["json_schema"]["schema"]["additionalProperties"], false,
        "strict: closed objects"
    );
    assert_eq!(
        format["json_schema"]["schema"]["required"],
        json!(["approved", "note"]),
        "strict: every property required"
    );
    suite.bodies.push(("structured_native", body));
}

/// Structured output, tool strategy: the output tool is required.
async fn structured_tool(suite: &mut Suite<'_, FakeOpenAi>) {
    let (server, model) = (suite.server, suite.model.clone());
    server.push(Reply::tool_calls(&[("call_v", "give_verdict", r#"{"approved": false}"#)]));
    let mut tool_mode = request(vec![Message::user("u", "decide")]);
    tool_mode.tools = vec![ToolSpec::new("give_verdict", "Final answer", verdict_schema())];
    tool_mode.tool_choice = ToolChoice::Required;
    tool_mode.response_format = ResponseFormat::ToolStrategy {
        tool_name: "give_verdict".into(),
        schema: OutputSchema::new("verdict", json!({})),
    };
    let response = model.invoke(&tool_mode).await.expect("structured_tool");
    assert_eq!(response.tool_calls[0].args, json!({"approved": false}), "structured_tool");
    let body = server.last_body();
    assert_eq!(body["tool_choice"], "required", "structured_tool: tool_choice");
    assert!(body.get("response_format").is_none(), "structured_tool: no response_format");
    suite.bodies.push(("structured_tool", body));
}

/// Rate limits: retry-after-ms and retry-after.
async fn rate_limits(suite: &mut Suite<'_, FakeOpenAi>) {
    let (server, model) = (suite.server, suite.model.clone());
    for (header, value, expected) in [("retry-after-ms", "1500", 1500), ("retry-after", "2", 2000)]
    {
        server.push(Reply::Json {
            status: 429,
            headers: vec![(header.into(), value.into())],
            body: json!({"error": {"message": "slow down"}}),
        });
        let result = model.invoke(&request(vec![Message::user("u", "x")])).await;
        let error = result.expect_err("rate_limit");
        assert_eq!(error.class(), ErrorClass::RateLimit, "rate_limit: class");
        assert_eq!(
            error.retry_after(),
            Some(Duration::from_millis(expected)),
            "rate_limit: {header}"
        );
    }
}

/// Every error status maps to its class.
async fn error_statuses(suite: &mut Suite<'_, FakeOpenAi>) {
    let (server, model) = (suite.server, suite.model.clone());
    for (status, expected) in [
        (400, ErrorClass::InvalidRequest),
        (404, ErrorClass::InvalidRequest),
        (413, ErrorClass::InvalidRequest),
        (401, ErrorClass::Auth),
        (403, ErrorClass::Auth),
        (500, ErrorClass::Server),
        (502, ErrorClass::Server),
        (503, ErrorClass::Server),
        (408, ErrorClass::Timeout),
    ] {
        server.push(Reply::error(status, &format!("status {status} (key {SUITE_KEY})")));
        let result = model.invoke(&request(vec![Message::user("u", "x")])).await;
        assert_eq!(class(&result), Some(expected), "status {status}");
        let text = result.expect_err("an error").to_string();
        assert!(
            text.contains(&format!("status {status}")) && text.contains(&status.to_string()),
            "status {status}: the server's status and message are reported: {text}"
        );
        assert!(
            !text.contains(SUITE_KEY),
            "status {status}: the key is scrubbed from errors: {text}"
        );
    }
}

/// Malformed chunks, an error inside a stream, a stream cut short.
async fn stream_errors(suite: &mut Suite<'_, FakeOpenAi>) {
    let (server, model) = (suite.server, suite.model.clone());
    let user = || request(vec![Message::user("u", "x")]);
    server.push(Reply::Sse {
        data: vec![chunk(json!({"content": "a"})), "{not json".into()],
        done: true,
        delay: Duration::ZERO,
    });
    let mut sink = String::new();
    assert_eq!(
        class(&model.stream(&user(), &mut sink).await),
        Some(ErrorClass::Protocol),
        "malformed_chunk"
    );
    server.push(Reply::Sse {
        data: vec![
            chunk(json!({"content": "a"})),
            json!({"error": {"message": "overloaded", "code": 503}}).to_string(),
        ],
        done: false,
        delay: Duration::ZERO,
    });
    assert_eq!(
        class(&model.stream(&user(), &mut sink).await),
        Some(ErrorClass::Server),
        "midstream_error"
    );
    // Errors inside a stream as OpenAI-compatible servers send them: a
    // string `code`, a `type` only, or a known code word.
    for (error, expected, case) in [
        (
            json!({"message": "RateLimitError: slow down", "type": "throttling_error", "param": null, "code": "429"}),
            ErrorClass::RateLimit,
            "midstream_string_code_429",
        ),
        (
            json!({"message": "BadRequestError: too long", "type": null, "param": null, "code": "400"}),
            ErrorClass::InvalidRequest,
            "midstream_string_code_400",
        ),
        (
            json!({"message": "slow down", "type": "throttling_error", "param": null, "code": null}),
            ErrorClass::RateLimit,
            "midstream_type_only",
        ),
        (
            json!({"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}),
            ErrorClass::InvalidRequest,
            "midstream_code_word_context",
        ),
        (
            json!({"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key"}),
            ErrorClass::Auth,
            "midstream_code_word_key",
        ),
        (
            json!({"message": "wait", "code": "rate_limit_exceeded"}),
            ErrorClass::RateLimit,
            "midstream_code_word_rate",
        ),
    ] {
        let message = error["message"].as_str().unwrap_or_default().to_owned();
        server.push(Reply::stream_error("partial ", error));
        let result = model.stream(&user(), &mut sink).await;
        assert_eq!(class(&result), Some(expected), "{case}");
        let text = result.expect_err(case).to_string();
        assert!(text.contains(&message), "{case}: the server's message is kept: {text}");
    }
    server.push(Reply::Sse {
        data: vec![chunk(json!({"content": "partial"}))],
        done: false,
        delay: Duration::ZERO,
    });
    assert_eq!(
        class(&model.stream(&user(), &mut sink).await),
        Some(ErrorClass::Protocol),
        "stream_cut_before_done"
    );
}

/// The cases every HTTP adapter shares: a dropped call closes its
/// connection (`hang` scripts a reply that never comes; `dropped` counts
/// streams the server saw abandoned), a timeout, a refused connection (at
/// a closed port, base URL path `base_path`).
pub(super) async fn transport_cases<F>(
    make: &F,
    setup: ProviderSetup<'_>,
    hang: impl Fn(),
    dropped: impl Fn() -> u32,
    base_path: &str,
) where
    F: Fn(ProviderSetup<'_>) -> Arc<dyn ChatModel>,
{
    let model = make(setup);
    let user = || request(vec![Message::user("u", "x")]);
    // Cancellation: dropping the call closes the connection.
    hang();
    let dropped_before = dropped();
    let mut sink = String::new();
    let cancelled =
        tokio::time::timeout(Duration::from_millis(200), model.stream(&user(), &mut sink)).await;
    assert!(cancelled.is_err(), "cancel: the call was still waiting");
    let mut closed = false;
    for _ in 0..100 {
        if dropped() > dropped_before {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(closed, "cancel: the server saw the connection close");

    // Timeout.
    let quick = make(ProviderSetup { timeout: Duration::from_millis(200), ..setup });
    hang();
    assert_eq!(class(&quick.invoke(&user()).await), Some(ErrorClass::Timeout), "timeout");

    // Connection refused.
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        listener.local_addr().expect("an address").port()
    };
    let url = format!("http://127.0.0.1:{closed_port}{base_path}");
    let refused = make(ProviderSetup { base_url: &url, ..setup });
    let result = refused.invoke(&user()).await;
    assert_eq!(class(&result), Some(ErrorClass::Network), "connection_refused");
}
