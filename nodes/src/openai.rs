//! The OpenAI-compatible chat provider (feature `openai`): Chat Completions
//! over HTTPS (reqwest + rustls), invoke and SSE streaming. Works with
//! OpenAI and with servers speaking the same format (vLLM, Ollama,
//! llama.cpp, OpenRouter).
//!
//! The adapter never retries (the agent's `ModelRetry` does) and never
//! shows the key: it travels only in the `Authorization` header; `Debug`
//! redacts it and any error text that would contain it is scrubbed.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use crate::error::HarnessError;
use crate::http::{client_parts, error_chain, parse_args, redact_key, retry_after};
use crate::message::{Message, ToolCall, Usage};
use crate::model::{
    ChatModel, DeltaSink, ModelRegistry, ModelRequest, ModelResponse, ResponseFormat, ToolChoice,
};

/// The public API, used when `OPENAI_BASE_URL` is not set.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// Default limit of one request (the whole stream included).
pub const DEFAULT_OPENAI_TIMEOUT: Duration = Duration::from_secs(120);

const PROVIDER: &str = "openai";

/// A Chat Completions model.
#[derive(Clone)]
pub struct OpenAiModel {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    name: String,
    timeout: Duration,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

impl OpenAiModel {
    /// `model` at `OPENAI_BASE_URL` (default [`DEFAULT_OPENAI_BASE_URL`])
    /// with the key in `OPENAI_API_KEY` (none: requests go without one, as
    /// local servers accept).
    pub fn from_env(model: impl Into<String>) -> Result<Self, HarnessError> {
        let base =
            std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| DEFAULT_OPENAI_BASE_URL.into());
        let key = std::env::var("OPENAI_API_KEY").ok().filter(|key| !key.is_empty());
        Self::new(model, base, key)
    }

    /// `model` at `base_url` (up to and including `/v1`) with `api_key`.
    pub fn new(
        model: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
    ) -> Result<Self, HarnessError> {
        Self::with_timeout(model, base_url, api_key, DEFAULT_OPENAI_TIMEOUT)
    }

    /// Like [`OpenAiModel::new`], with a request timeout.
    pub fn with_timeout(
        model: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, HarnessError> {
        let model = model.into();
        let (client, base_url, api_key) =
            client_parts(PROVIDER, timeout, base_url.into(), api_key)?;
        Ok(Self { client, base_url, api_key, name: format!("openai:{model}"), model, timeout })
    }

    /// Removes the key from text that is about to leave the adapter: the
    /// whole key, and any piece of it long enough to matter (see
    /// [`redact_key`]).
    fn scrub(&self, text: &str) -> String {
        match &self.api_key {
            Some(key) => redact_key(text, key),
            None => text.to_owned(),
        }
    }

    async fn send(&self, body: &Value) -> Result<reqwest::Response, HarnessError> {
        let mut request =
            self.client.post(format!("{}/chat/completions", self.base_url)).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|error| self.transport(&error))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let text = response.text().await.unwrap_or_default();
        Err(self.status_error(status, retry_after, &text))
    }

    fn transport(&self, error: &reqwest::Error) -> HarnessError {
        let message = self.scrub(&error_chain(error));
        if error.is_timeout() {
            HarnessError::Timeout {
                what: format!("{PROVIDER} ({})", self.model),
                after: self.timeout,
            }
        } else {
            HarnessError::Network { provider: PROVIDER.into(), message }
        }
    }

    fn status_error(&self, status: u16, retry_after: Option<Duration>, body: &str) -> HarnessError {
        let parsed: Option<Value> = serde_json::from_str(body).ok();
        // Scrubbed before it is cut, so no part of the key survives a cut
        // through it.
        let message = match parsed.as_ref().and_then(|v| v["error"]["message"].as_str()) {
            Some(message) => self.scrub(message),
            None => self.scrub(body).chars().take(500).collect(),
        };
        let provider = PROVIDER.to_owned();
        match status {
            401 | 403 => HarnessError::Auth { provider, status: Some(status), message },
            429 => HarnessError::RateLimited { provider, retry_after, message },
            408 => HarnessError::ProviderTimeout { provider, status, message },
            500..=599 => HarnessError::Server { provider, status: Some(status), message },
            _ => HarnessError::InvalidRequest { provider, status: Some(status), message },
        }
    }

    fn protocol(&self, message: impl Into<String>) -> HarnessError {
        HarnessError::Protocol { provider: PROVIDER.into(), message: self.scrub(&message.into()) }
    }
}

/// The HTTP status an error sent inside a stream stands for (the stream's
/// own status was 200): its `code` as a number or a numeric string
/// (`"429"`), else a known `code` word (`rate_limit_exceeded`), else its
/// `type` (`throttling_error`); 500 when none of them says.
fn midstream_status(error: &Value) -> u16 {
    let code = &error["code"];
    let number = code.as_u64().or_else(|| code.as_str().and_then(|c| c.trim().parse().ok()));
    if let Some(status) = number.and_then(|n| u16::try_from(n).ok()) {
        if (400..=599).contains(&status) {
            return status;
        }
    }
    [code, &error["type"]]
        .into_iter()
        .filter_map(Value::as_str)
        .find_map(|word| status_of_word(&word.trim().to_ascii_lowercase()))
        .unwrap_or(500)
}

/// The status an error word of OpenAI-compatible servers stands for.
fn status_of_word(word: &str) -> Option<u16> {
    Some(match word {
        "rate_limit_exceeded"
        | "rate_limit_error"
        | "rate_limited"
        | "throttling_error"
        | "too_many_requests"
        | "tokens"
        | "requests" => 429,
        "invalid_api_key" | "authentication_error" | "invalid_authentication" | "unauthorized" => {
            401
        }
        "permission_error" | "permission_denied" | "forbidden" => 403,
        "context_length_exceeded"
        | "invalid_request_error"
        | "invalid_request"
        | "bad_request"
        | "string_above_max_length" => 400,
        "model_not_found" | "not_found_error" | "not_found" => 404,
        "timeout" | "timeout_error" | "request_timeout" => 408,
        "server_error" | "api_error" | "internal_error" | "internal_server_error" => 500,
        "overloaded_error" | "service_unavailable" | "engine_overloaded" => 503,
        _ => return None,
    })
}

/// The request body for `request` (`stream` adds `stream_options` so the
/// final chunk carries usage).
pub fn request_body(model: &str, request: &ModelRequest, stream: bool) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        messages.push(match message {
            Message::System { content, .. } => json!({"role": "system", "content": content}),
            Message::User { content, .. } => json!({"role": "user", "content": content}),
            Message::Assistant { content, tool_calls, .. } => {
                let mut out = json!({"role": "assistant", "content": if content.is_empty() && !tool_calls.is_empty() { Value::Null } else { json!(content) }});
                if !tool_calls.is_empty() {
                    out["tool_calls"] = tool_calls
                        .iter()
                        .map(|call| json!({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.args.to_string()}}))
                        .collect();
                }
                out
            }
            Message::Tool { call_id, content, .. } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
        });
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| json!({"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters}}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), choice);
    }
    if let ResponseFormat::ProviderNative(schema) = &request.response_format {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": schema_name(&schema.name), "schema": strict_schema(&schema.schema), "strict": true}}),
        );
    }
    let options = &request.options;
    if let Some(temperature) = options.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(max_tokens) = options.max_tokens {
        body.insert("max_tokens".into(), json!(max_tokens));
    }
    if !options.stop.is_empty() {
        body.insert("stop".into(), json!(options.stop));
    }
    if stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    for (key, value) in &options.extra {
        body.insert(key.clone(), value.clone());
    }
    Value::Object(body)
}

/// A schema name OpenAI accepts: `[a-zA-Z0-9_-]`, at most 64 characters.
fn schema_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "response".into()
    } else {
        cleaned
    }
}

/// The strict-mode form of a schema: every object closed
/// (`additionalProperties: false`) with every property required; a
/// property that was optional may also be `null`.
pub fn strict_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(object) => {
            let mut out: Map<String, Value> =
                object.iter().map(|(k, v)| (k.clone(), strict_schema(v))).collect();
            let is_object =
                object.get("type") == Some(&json!("object")) || object.contains_key("properties");
            if is_object {
                let required: Vec<String> = object
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                    .unwrap_or_default();
                if let Some(Value::Object(properties)) = out.get_mut("properties") {
                    for (name, property) in properties.iter_mut() {
                        if !required.contains(name) {
                            *property = nullable(property.clone());
                        }
                    }
                    let all: Vec<Value> = properties.keys().map(|k| json!(k)).collect();
                    out.insert("required".into(), Value::Array(all));
                }
                out.insert("additionalProperties".into(), json!(false));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strict_schema).collect()),
        other => other.clone(),
    }
}

fn nullable(mut property: Value) -> Value {
    match property.get_mut("type") {
        Some(Value::String(kind)) if kind != "null" => {
            let kind = kind.clone();
            property["type"] = json!([kind, "null"]);
            property
        }
        Some(Value::Array(kinds)) => {
            if !kinds.contains(&json!("null")) {
                kinds.push(json!("null"));
            }
            property
        }
        _ => json!({"anyOf": [property, {"type": "null"}]}),
    }
}

fn parse_usage(value: &Value) -> Option<Usage> {
    let input = value["prompt_tokens"].as_u64()?;
    let output = value["completion_tokens"].as_u64().unwrap_or(0);
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: value["total_tokens"].as_u64().unwrap_or(input + output),
        ..Usage::default()
    })
}

/// Tool-call fragments of a stream, accumulated by index (a new id at a
/// used index starts a new call: some servers send every parallel call at
/// index 0).
#[derive(Default)]
struct Calls {
    calls: Vec<(String, String, String)>,
    by_index: BTreeMap<u64, usize>,
}

impl Calls {
    fn add(&mut self, fragment: &Value) {
        let index = fragment["index"].as_u64().unwrap_or(0);
        let id = fragment["id"].as_str().filter(|id| !id.is_empty());
        let slot = match (self.by_index.get(&index), id) {
            (Some(&slot), Some(id))
                if !self.calls[slot].0.is_empty() && self.calls[slot].0 != id =>
            {
                None
            }
            (Some(&slot), _) => Some(slot),
            (None, _) => None,
        };
        let slot = slot.unwrap_or_else(|| {
            self.calls.push((String::new(), String::new(), String::new()));
            self.by_index.insert(index, self.calls.len() - 1);
            self.calls.len() - 1
        });
        let call = &mut self.calls[slot];
        if let Some(id) = id {
            call.0 = id.to_owned();
        }
        if let Some(name) = fragment["function"]["name"].as_str() {
            call.1.push_str(name);
        }
        if let Some(arguments) = fragment["function"]["arguments"].as_str() {
            call.2.push_str(arguments);
        }
    }

    fn finish(self) -> Result<Vec<ToolCall>, String> {
        self.calls
            .into_iter()
            .enumerate()
            .map(|(n, (id, name, args))| {
                let id = if id.is_empty() { format!("call_{n}") } else { id };
                Ok(ToolCall::new(id, name, parse_args(&args)?))
            })
            .collect()
    }
}

#[async_trait]
impl ChatModel for OpenAiModel {
    fn name(&self) -> &str {
        &self.name
    }

    async fn invoke(&self, request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        let body = request_body(&self.model, request, false);
        let response = self.send(&body).await?;
        let text = response.text().await.map_err(|error| self.transport(&error))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|error| self.protocol(format!("response is not JSON: {error}")))?;
        let message = &value["choices"][0]["message"];
        if !message.is_object() {
            return Err(self.protocol("response has no choices[0].message"));
        }
        let mut tool_calls = Vec::new();
        if let Some(calls) = message["tool_calls"].as_array() {
            for call in calls {
                let args = parse_args(call["function"]["arguments"].as_str().unwrap_or(""))
                    .map_err(|m| self.protocol(m))?;
                let id = call["id"].as_str().unwrap_or_default().to_owned();
                let name = call["function"]["name"].as_str().unwrap_or_default().to_owned();
                tool_calls.push(ToolCall::new(id, name, args));
            }
        }
        let content = message["content"]
            .as_str()
            .or_else(|| message["refusal"].as_str())
            .unwrap_or_default()
            .to_owned();
        Ok(ModelResponse {
            content,
            tool_calls,
            usage: parse_usage(&value["usage"]),
            // What the provider echoes goes to events and spans: scrubbed.
            model: value["model"].as_str().map(|model| self.scrub(model)),
            finish_reason: value["choices"][0]["finish_reason"]
                .as_str()
                .map(|reason| self.scrub(reason)),
            reasoning: Vec::new(),
        })
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        deltas: &mut (dyn DeltaSink + Send),
    ) -> Result<ModelResponse, HarnessError> {
        let body = request_body(&self.model, request, true);
        let response = self.send(&body).await?;
        let mut events = response.bytes_stream().eventsource();
        let (mut content, mut calls, mut usage, mut done) =
            (String::new(), Calls::default(), None, false);
        let (mut model, mut finish_reason) = (None, None);
        while let Some(event) = events.next().await {
            let event = event.map_err(|error| match error {
                eventsource_stream::EventStreamError::Transport(error) => self.transport(&error),
                other => self.protocol(format!("malformed event stream: {other}")),
            })?;
            let data = event.data.trim();
            if data == "[DONE]" {
                done = true;
                break;
            }
            if data.is_empty() {
                continue;
            }
            let chunk: Value = serde_json::from_str(data)
                .map_err(|error| self.protocol(format!("malformed chunk ({error}): {data}")))?;
            if chunk.get("error").is_some_and(|e| !e.is_null()) {
                return Err(self.status_error(midstream_status(&chunk["error"]), None, data));
            }
            if let Some(found) = parse_usage(&chunk["usage"]) {
                usage = Some(found);
            }
            // Kept as sent and scrubbed once, at the end: every chunk
            // repeats the model's name.
            if let Some(name) = chunk["model"].as_str() {
                model = Some(name.to_owned());
            }
            if let Some(reason) = chunk["choices"][0]["finish_reason"].as_str() {
                finish_reason = Some(reason.to_owned());
            }
            let delta = &chunk["choices"][0]["delta"];
            if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                content.push_str(text);
                deltas.text(text);
            }
            if let Some(fragments) = delta["tool_calls"].as_array() {
                fragments.iter().for_each(|fragment| calls.add(fragment));
            }
        }
        if !done {
            return Err(self.protocol("the stream ended before [DONE]"));
        }
        let tool_calls = calls.finish().map_err(|m| self.protocol(m))?;
        Ok(ModelResponse {
            content,
            tool_calls,
            usage,
            model: model.map(|name| self.scrub(&name)),
            finish_reason: finish_reason.map(|reason| self.scrub(&reason)),
            reasoning: Vec::new(),
        })
    }
}

impl ModelRegistry {
    /// Serves `openai:MODEL` specs with [`OpenAiModel::from_env`].
    pub fn with_openai(self) -> Self {
        self.factory("openai", |model| {
            let model = OpenAiModel::from_env(model)?;
            Ok(std::sync::Arc::new(model) as std::sync::Arc<dyn ChatModel>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_schemas_close_objects_and_require_every_property() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "integer"},
            "c": {"type": "object", "properties": {"d": {"type": "boolean"}}}
        }, "required": ["a"]});
        assert_eq!(
            strict_schema(&schema),
            json!({"type": "object", "additionalProperties": false, "required": ["a", "b", "c"], "properties": {
                "a": {"type": "string"},
                "b": {"type": ["integer", "null"]},
                "c": {"type": ["object", "null"], "additionalProperties": false, "required": ["d"],
                      "properties": {"d": {"type": ["boolean", "null"]}}}
            }})
        );
    }

    #[test]
    fn errors_inside_a_stream_keep_their_class() {
        let cases = [
            (json!({"code": 503}), 503),
            (json!({"code": "429", "type": "throttling_error"}), 429),
            (json!({"code": "400", "type": null}), 400),
            (json!({"code": " 401 "}), 401),
            (json!({"code": "rate_limit_exceeded"}), 429),
            (json!({"code": "invalid_api_key", "type": "invalid_request_error"}), 401),
            (json!({"code": "context_length_exceeded"}), 400),
            (json!({"code": null, "type": "throttling_error"}), 429),
            (json!({"code": "E42", "type": "server_error"}), 500),
            (json!({"code": "200", "type": "overloaded_error"}), 503),
            (json!({"code": 70000}), 500),
            (json!({"message": "who knows"}), 500),
        ];
        for (error, status) in cases {
            assert_eq!(midstream_status(&error), status, "{error}");
        }
    }

    #[test]
    fn streamed_tool_calls_accumulate_by_index_and_by_id() {
        let mut calls = Calls::default();
        for fragment in [
            json!({"index": 0, "id": "a", "function": {"name": "look", "arguments": ""}}),
            json!({"index": 1, "id": "b", "function": {"name": "ping", "arguments": "{\"x\""}}),
            json!({"index": 0, "function": {"arguments": "{\"q\": \"日"}}),
            json!({"index": 1, "function": {"arguments": ": 1}"}}),
            json!({"index": 0, "function": {"arguments": "本\"}"}}),
            // Ollama style: a new id at index 0 is another call.
            json!({"index": 0, "id": "c", "function": {"name": "noargs", "arguments": ""}}),
        ] {
            calls.add(&fragment);
        }
        let calls = calls.finish().unwrap();
        let flat: Vec<(&str, &str, Value)> =
            calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.args.clone())).collect();
        assert_eq!(
            flat,
            [
                ("a", "look", json!({"q": "日本"})),
                ("b", "ping", json!({"x": 1})),
                ("c", "noargs", json!({}))
            ]
        );
    }
}
