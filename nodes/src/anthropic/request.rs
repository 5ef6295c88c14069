//! The Messages API request body of a model request: system prompts,
//! alternating turns, tools (and the one a provider-native structured
//! answer is forced through), options.

use serde_json::{json, Map, Value};

use super::DEFAULT_ANTHROPIC_MAX_TOKENS;
use crate::message::Message;
use crate::model::{ModelRequest, ResponseFormat, ToolChoice};

/// The name of the tool a provider-native structured answer is forced
/// through.
pub(super) fn forced_tool(request: &ModelRequest) -> Option<String> {
    match &request.response_format {
        ResponseFormat::ProviderNative(schema) => Some(tool_name(&schema.name)),
        _ => None,
    }
}

/// A tool name the API accepts: `[a-zA-Z0-9_-]{1,64}`.
fn tool_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "response".into()
    } else {
        cleaned
    }
}

/// The request body of `request` for `model`. System prompts (the
/// request's and system messages) become the top-level `system`; user and
/// tool results are `user` turns (tool results as `tool_result` blocks),
/// assistant messages `assistant` turns (their reasoning blocks first,
/// then text, then `tool_use` blocks); consecutive turns of one role are
/// merged, as the API wants them alternating. `cache` marks the system
/// prompt and the last tool for the prompt cache.
pub fn anthropic_request_body(
    model: &str,
    request: &ModelRequest,
    stream: bool,
    cache: bool,
) -> Value {
    let (system, messages) = turns(request);
    let options = &request.options;
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "max_tokens".into(),
        json!(options.max_tokens.unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS)),
    );
    if !system.is_empty() {
        let text = system.join("\n\n");
        body.insert(
            "system".into(),
            if cache {
                json!([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}])
            } else {
                json!(text)
            },
        );
    }
    body.insert("messages".into(), Value::Array(messages));
    let (tools, choice) = tools(request, cache);
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), choice);
    }
    if let Some(temperature) = options.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if !options.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(options.stop));
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    for (key, value) in &options.extra {
        body.insert(key.clone(), value.clone());
    }
    Value::Object(body)
}

/// The system prompts, and the messages as alternating turns.
fn turns(request: &ModelRequest) -> (Vec<&str>, Vec<Value>) {
    let mut system: Vec<&str> = request.system.iter().map(String::as_str).collect();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, blocks: Vec<Value>| match turns.last_mut() {
        Some((last, existing)) if *last == role => existing.extend(blocks),
        _ => turns.push((role, blocks)),
    };
    for message in &request.messages {
        match message {
            Message::System { content, .. } => system.push(content),
            Message::User { content, .. } => {
                push("user", vec![json!({"type": "text", "text": content})]);
            }
            Message::Assistant { content, tool_calls, reasoning, .. } => {
                let mut blocks: Vec<Value> = reasoning.clone();
                if !content.is_empty() {
                    blocks.push(json!({"type": "text", "text": content}));
                }
                for call in tool_calls {
                    let input = if call.args.is_object() { call.args.clone() } else { json!({}) };
                    blocks.push(
                        json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}),
                    );
                }
                if blocks.is_empty() {
                    blocks.push(json!({"type": "text", "text": ""}));
                }
                push("assistant", blocks);
            }
            Message::Tool { call_id, content, is_error, .. } => {
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                if *is_error {
                    block["is_error"] = json!(true);
                }
                push("user", vec![block]);
            }
        }
    }
    let messages =
        turns.into_iter().map(|(role, blocks)| json!({"role": role, "content": blocks})).collect();
    (system, messages)
}

/// The tools (with the forced answer's, if any) and the tool choice; with
/// `cache`, the last tool marked for the prompt cache.
fn tools(request: &ModelRequest, cache: bool) -> (Vec<Value>, Value) {
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| {
            let schema = match &tool.parameters {
                Value::Object(_) => tool.parameters.clone(),
                _ => json!({"type": "object"}),
            };
            json!({"name": tool.name, "description": tool.description, "input_schema": schema})
        })
        .collect();
    let mut choice = match &request.tool_choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Named(name) => json!({"type": "tool", "name": name}),
    };
    if let ResponseFormat::ProviderNative(schema) = &request.response_format {
        let name = tool_name(&schema.name);
        tools.push(json!({
            "name": name,
            "description": "Give the final answer: its input is the answer, in the required shape.",
            "input_schema": schema.schema,
        }));
        choice = json!({"type": "tool", "name": name});
    }
    if cache {
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
    }
    (tools, choice)
}
