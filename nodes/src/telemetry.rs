//! Spans and metrics of agents: the OpenTelemetry GenAI conventions on
//! tracing spans (`invoke_agent`, `chat`, `execute_tool`), and model and
//! tool counters through the `metrics` facade.

use std::sync::OnceLock;

use tollgate_engine::NodeContext;
use tracing::field::Empty;
use tracing::Span;

use crate::model::{ModelRequest, ModelResponse};

const MODEL_CALLS: &str = "tollgate_model_calls_total";
const INPUT_TOKENS: &str = "tollgate_model_input_tokens_total";
const OUTPUT_TOKENS: &str = "tollgate_model_output_tokens_total";
const TOOL_CALLS: &str = "tollgate_tool_calls_total";

/// Registers the help text of the harness's metrics with the installed
/// recorder.
pub fn describe_harness_metrics() {
    use metrics::describe_counter;
    describe_counter!(
        MODEL_CALLS,
        "Model calls, by model and outcome: a call counts once, however often it was retried."
    );
    describe_counter!(INPUT_TOKENS, "Prompt tokens the models reported, by model.");
    describe_counter!(OUTPUT_TOKENS, "Completion tokens the models reported, by model.");
    describe_counter!(TOOL_CALLS, "Tool calls, by tool and outcome (ok, error, timeout).");
}

/// Whether spans carry message contents
/// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
fn capture_content() -> bool {
    static CAPTURE: OnceLock<bool> = OnceLock::new();
    *CAPTURE.get_or_init(|| {
        std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_ok_and(|value| value.eq_ignore_ascii_case("true"))
    })
}

/// The span of one agent turn.
pub(crate) fn agent_span(agent: &str, ctx: &NodeContext) -> Span {
    tracing::info_span!(
        "agent",
        otel.name = %format_args!("invoke_agent {agent}"),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = %agent,
        tollgate.run_id = %ctx.run_id(),
        tollgate.step = ctx.step(),
        tollgate.node = %ctx.node(),
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// The span of one model call (its middleware and retries included).
pub(crate) fn chat_span(agent: &str, model: &str, ctx: &NodeContext) -> Span {
    tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {model}"),
        gen_ai.operation.name = "chat",
        gen_ai.request.model = %model,
        gen_ai.agent.name = %agent,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        tollgate.run_id = %ctx.run_id(),
        tollgate.step = ctx.step(),
        tollgate.node = %ctx.node(),
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// Records a model call's outcome on its span and in the metrics.
pub(crate) fn model_called(
    span: &Span,
    model: &str,
    request: &ModelRequest,
    result: Result<&ModelResponse, &dyn std::fmt::Display>,
) {
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!(MODEL_CALLS, "model" => model.to_owned(), "outcome" => outcome).increment(1);
    let response = match result {
        Ok(response) => response,
        Err(error) => {
            failed(span, error);
            return;
        }
    };
    if let Some(usage) = &response.usage {
        metrics::counter!(INPUT_TOKENS, "model" => model.to_owned()).increment(usage.input_tokens);
        metrics::counter!(OUTPUT_TOKENS, "model" => model.to_owned())
            .increment(usage.output_tokens);
    }
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.response.model", response.model.as_deref().unwrap_or(model));
    // A provider that does not say why it stopped: a call of tools, or the
    // end of its answer.
    let reason = match &response.finish_reason {
        Some(reason) => reason.as_str(),
        None if response.tool_calls.is_empty() => "stop",
        None => "tool_calls",
    };
    span.record("gen_ai.response.finish_reasons", reason);
    if let Some(usage) = &response.usage {
        span.record("gen_ai.usage.input_tokens", usage.input_tokens);
        span.record("gen_ai.usage.output_tokens", usage.output_tokens);
    }
    if capture_content() {
        let input = serde_json::to_string(&request.messages).unwrap_or_default();
        span.record("gen_ai.input.messages", input);
        let output = serde_json::json!([{
            "role": "assistant",
            "content": response.content,
            "tool_calls": response.tool_calls,
        }]);
        span.record("gen_ai.output.messages", output.to_string());
    }
}

/// The span of one tool call.
pub(crate) fn tool_span(agent: &str, tool: &str, call_id: &str, ctx: &NodeContext) -> Span {
    tracing::info_span!(
        "tool",
        otel.name = %format_args!("execute_tool {tool}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %tool,
        gen_ai.tool.call.id = %call_id,
        gen_ai.agent.name = %agent,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        tollgate.run_id = %ctx.run_id(),
        tollgate.step = ctx.step(),
        tollgate.node = %ctx.node(),
        otel.status_code = Empty,
        otel.status_description = Empty,
    )
}

/// Records a tool call's outcome (`ok`, `error`, `timeout`).
pub(crate) fn tool_called(
    span: &Span,
    tool: &str,
    outcome: &'static str,
    args: &serde_json::Value,
    content: &str,
) {
    metrics::counter!(TOOL_CALLS, "tool" => tool.to_owned(), "outcome" => outcome).increment(1);
    if span.is_disabled() {
        return;
    }
    if outcome != "ok" {
        failed(span, &content);
    }
    if capture_content() {
        span.record("gen_ai.tool.call.arguments", args.to_string());
        span.record("gen_ai.tool.call.result", content);
    }
}

/// Marks `span` failed (OpenTelemetry status `ERROR`).
pub(crate) fn failed(span: &Span, error: &dyn std::fmt::Display) {
    if !span.is_disabled() {
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_description", tracing::field::display(error));
    }
}
