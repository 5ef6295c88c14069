//! Anthropic's Messages API (feature `anthropic`): `POST /v1/messages`
//! over HTTPS (reqwest + rustls), invoke and SSE streaming, natively:
//! content blocks, tool use, extended thinking kept and sent back, prompt
//! caching, Anthropic's stop reasons and error types.
//!
//! As the OpenAI adapter, it never retries (the agent's `ModelRetry`
//! does) and never shows the key: it travels only in the `x-api-key`
//! header; `Debug` redacts it and any text leaving the adapter (errors,
//! the model's name) is scrubbed of it.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{json, Value};

mod request;
mod stream;

pub use request::anthropic_request_body;
use request::forced_tool;
use stream::Streamed;

use crate::error::HarnessError;
use crate::http::{client_parts, error_chain, redact_key, retry_after};
use crate::message::{ToolCall, Usage};
use crate::model::{ChatModel, DeltaSink, ModelRegistry, ModelRequest, ModelResponse};

/// The public API, used when `ANTHROPIC_BASE_URL` is not set.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Default limit of one request (the whole stream included).
pub const DEFAULT_ANTHROPIC_TIMEOUT: Duration = Duration::from_secs(300);

/// `max_tokens` when the request sets none (the API requires one).
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u32 = 4096;

const PROVIDER: &str = "anthropic";

/// A model of Anthropic's Messages API.
#[derive(Clone)]
pub struct AnthropicModel {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    name: String,
    timeout: Duration,
    cache_prompt: bool,
    thinking_budget: Option<u32>,
}

impl fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicModel")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("cache_prompt", &self.cache_prompt)
            .field("thinking_budget", &self.thinking_budget)
            .finish()
    }
}

impl AnthropicModel {
    /// `model` at `ANTHROPIC_BASE_URL` (default
    /// [`DEFAULT_ANTHROPIC_BASE_URL`]) with the key in `ANTHROPIC_API_KEY`.
    pub fn from_env(model: impl Into<String>) -> Result<Self, HarnessError> {
        let base = std::env::var("ANTHROPIC_BASE_URL")
            .ok()
            .filter(|base| !base.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ANTHROPIC_BASE_URL.into());
        let key = std::env::var("ANTHROPIC_API_KEY").ok().filter(|key| !key.is_empty());
        Self::new(model, base, key)
    }

    /// `model` at `base_url` (the API's root: requests go to
    /// `BASE/v1/messages`; a base ending in `/v1` is taken as it is) with
    /// `api_key`.
    pub fn new(
        model: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
    ) -> Result<Self, HarnessError> {
        Self::with_timeout(model, base_url, api_key, DEFAULT_ANTHROPIC_TIMEOUT)
    }

    /// Like [`AnthropicModel::new`], with a request timeout.
    pub fn with_timeout(
        model: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, HarnessError> {
        let model = model.into();
        let (client, base_url, api_key) =
            client_parts(PROVIDER, timeout, base_url.into(), api_key)?;
        let base_url = base_url.strip_suffix("/v1").map(str::to_owned).unwrap_or(base_url);
        Ok(Self {
            client,
            base_url,
            api_key,
            name: format!("anthropic:{model}"),
            model,
            timeout,
            cache_prompt: false,
            thinking_budget: None,
        })
    }

    /// Marks the system prompt and the tool definitions for Anthropic's
    /// prompt cache (`cache_control: ephemeral`): later calls with the same
    /// prefix read it from the cache (`Usage::cache_read_tokens`).
    pub fn cache_prompt(mut self, on: bool) -> Self {
        self.cache_prompt = on;
        self
    }

    /// Turns extended thinking on with this budget of tokens. The
    /// model's thinking blocks are kept in its message and sent back on
    /// the next turn, as the API requires; they are never the answer.
    pub fn thinking(mut self, budget_tokens: u32) -> Self {
        self.thinking_budget = Some(budget_tokens);
        self
    }

    fn scrub(&self, text: &str) -> String {
        match &self.api_key {
            Some(key) => redact_key(text, key),
            None => text.to_owned(),
        }
    }

    async fn send(&self, body: &Value) -> Result<reqwest::Response, HarnessError> {
        let mut request = self
            .client
            .post(format!("{}/v1/messages", self.base_url))
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(body);
        if let Some(key) = &self.api_key {
            request = request.header("x-api-key", key);
        }
        let response = request.send().await.map_err(|error| self.transport(&error))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let text = response.text().await.unwrap_or_default();
        let parsed: Option<Value> = serde_json::from_str(&text).ok();
        let (kind, message) = match &parsed {
            Some(body) => (
                body["error"]["type"].as_str().map(str::to_owned),
                body["error"]["message"].as_str().map(|message| self.scrub(message)),
            ),
            None => (None, None),
        };
        // Scrubbed before it is cut, so no part of the key survives a cut.
        let message = message.unwrap_or_else(|| self.scrub(&text).chars().take(500).collect());
        Err(self.failure(status, kind.as_deref(), retry_after, message))
    }

    fn transport(&self, error: &reqwest::Error) -> HarnessError {
        if error.is_timeout() {
            HarnessError::Timeout {
                what: format!("{PROVIDER} ({})", self.model),
                after: self.timeout,
            }
        } else {
            HarnessError::Network {
                provider: PROVIDER.into(),
                message: self.scrub(&error_chain(error)),
            }
        }
    }

    /// The error of an HTTP `status` (or of an `error` event inside a
    /// stream, whose `kind` says what it stands for).
    fn failure(
        &self,
        status: u16,
        kind: Option<&str>,
        retry_after: Option<Duration>,
        message: String,
    ) -> HarnessError {
        let status = kind.and_then(status_of_type).unwrap_or(status);
        let provider = PROVIDER.to_owned();
        let message = match kind {
            Some(kind) => format!("{kind}: {message}"),
            None => message,
        };
        match status {
            401 | 403 => HarnessError::Auth { provider, status: Some(status), message },
            429 => HarnessError::RateLimited { provider, retry_after, message },
            529 => HarnessError::Overloaded { provider, status, retry_after, message },
            408 => HarnessError::ProviderTimeout { provider, status, message },
            504 if kind == Some("timeout_error") => {
                HarnessError::ProviderTimeout { provider, status, message }
            }
            500..=599 => HarnessError::Server { provider, status: Some(status), message },
            _ => HarnessError::InvalidRequest { provider, status: Some(status), message },
        }
    }

    fn protocol(&self, message: impl Into<String>) -> HarnessError {
        HarnessError::Protocol { provider: PROVIDER.into(), message: self.scrub(&message.into()) }
    }

    fn body(&self, request: &ModelRequest, stream: bool) -> Value {
        let mut body = anthropic_request_body(&self.model, request, stream, self.cache_prompt);
        if let Some(budget) = self.thinking_budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        body
    }

    /// The reply of a complete message (`invoke`, or a stream's parts put
    /// together).
    fn reply(&self, message: &Value, forced: Option<&str>) -> Result<ModelResponse, HarnessError> {
        let blocks = message["content"]
            .as_array()
            .ok_or_else(|| self.protocol("the message has no content"))?;
        let mut content = String::new();
        let mut tool_calls = Vec::new();
        let mut reasoning = Vec::new();
        for block in blocks {
            match block["type"].as_str() {
                Some("text") => content.push_str(block["text"].as_str().unwrap_or_default()),
                Some("tool_use") => {
                    let id = block["id"].as_str().unwrap_or_default().to_owned();
                    let name = block["name"].as_str().unwrap_or_default().to_owned();
                    let input = match &block["input"] {
                        Value::Null => json!({}),
                        input => input.clone(),
                    };
                    tool_calls.push(ToolCall::new(id, name, input));
                }
                Some("thinking" | "redacted_thinking") => reasoning.push(block.clone()),
                // Block types of later API versions are not ours to show.
                _ => {}
            }
        }
        // Structured output through a forced tool: its input is the answer.
        if let Some(tool) = forced {
            if let Some(at) = tool_calls.iter().position(|call| call.name == tool) {
                let call = tool_calls.remove(at);
                content = call.args.to_string();
            }
        }
        Ok(ModelResponse {
            content,
            tool_calls,
            usage: parse_usage(&message["usage"]),
            model: message["model"].as_str().map(|model| self.scrub(model)),
            finish_reason: message["stop_reason"].as_str().map(|reason| self.scrub(reason)),
            reasoning,
        })
    }
}

/// The status an Anthropic error type stands for.
fn status_of_type(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => return None,
    })
}

fn parse_usage(value: &Value) -> Option<Usage> {
    if !value.is_object() {
        return None;
    }
    let input = value["input_tokens"].as_u64().unwrap_or(0);
    let output = value["output_tokens"].as_u64().unwrap_or(0);
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        cache_read_tokens: value["cache_read_input_tokens"].as_u64().unwrap_or(0),
        cache_creation_tokens: value["cache_creation_input_tokens"].as_u64().unwrap_or(0),
    })
}

#[async_trait]
impl ChatModel for AnthropicModel {
    fn name(&self) -> &str {
        &self.name
    }

    async fn invoke(&self, request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        let response = self.send(&self.body(request, false)).await?;
        let text = response.text().await.map_err(|error| self.transport(&error))?;
        let message: Value = serde_json::from_str(&text)
            .map_err(|error| self.protocol(format!("response is not JSON: {error}")))?;
        if message["type"] == "error" {
            let error = &message["error"];
            let message_text = self.scrub(error["message"].as_str().unwrap_or_default());
            return Err(self.failure(500, error["type"].as_str(), None, message_text));
        }
        self.reply(&message, forced_tool(request).as_deref())
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        deltas: &mut (dyn DeltaSink + Send),
    ) -> Result<ModelResponse, HarnessError> {
        let response = self.send(&self.body(request, true)).await?;
        let kind = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("no content type")
            .to_owned();
        if !kind.starts_with("text/event-stream") {
            // Said what came back, an error the API sent in JSON included.
            let text = response.text().await.map_err(|error| self.transport(&error))?;
            let message: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            if message["type"] == "error" {
                let error = &message["error"];
                let message_text = self.scrub(error["message"].as_str().unwrap_or_default());
                return Err(self.failure(500, error["type"].as_str(), None, message_text));
            }
            let start: String = self.scrub(&text).chars().take(200).collect();
            return Err(self.protocol(format!(
                "a streamed reply was asked for; got {kind}, not an event stream: {start}"
            )));
        }
        let mut events = response.bytes_stream().eventsource();
        let mut streamed = Streamed::default();
        // A forced structured answer arrives as tool input, not as text:
        // nothing to hand out while it streams.
        let forced = forced_tool(request);
        let mut quiet = String::new();
        let sink: &mut (dyn DeltaSink + Send) = if forced.is_some() { &mut quiet } else { deltas };
        while let Some(event) = events.next().await {
            let event = event.map_err(|error| match error {
                eventsource_stream::EventStreamError::Transport(error) => self.transport(&error),
                other => self.protocol(format!("malformed event stream: {other}")),
            })?;
            let data: Value = match serde_json::from_str(&event.data) {
                Ok(data) => data,
                Err(error) => {
                    return Err(self.protocol(format!(
                        "malformed `{}` event ({error}): {}",
                        event.event, event.data
                    )))
                }
            };
            // The event's name, else its `type` (both are sent).
            let kind = if event.event.is_empty() || event.event == "message" {
                data["type"].as_str().unwrap_or_default().to_owned()
            } else {
                event.event.clone()
            };
            if kind == "error" {
                let error = &data["error"];
                let message = self.scrub(error["message"].as_str().unwrap_or_default());
                return Err(self.failure(500, error["type"].as_str(), None, message));
            }
            streamed.take(&kind, &data, sink).map_err(|message| self.protocol(message))?;
            if streamed.stopped {
                break;
            }
        }
        let message = streamed.finish().map_err(|message| self.protocol(message))?;
        self.reply(&message, forced.as_deref())
    }
}

impl ModelRegistry {
    /// Serves `anthropic:MODEL` specs with [`AnthropicModel::from_env`].
    pub fn with_anthropic(self) -> Self {
        self.factory("anthropic", |model| {
            let model = AnthropicModel::from_env(model)?;
            Ok(std::sync::Arc::new(model) as std::sync::Arc<dyn ChatModel>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::model::{ModelOptions, OutputSchema, ResponseFormat, ToolChoice};

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            agent: "t".into(),
            system: Some("Be brief.".into()),
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            response_format: ResponseFormat::Text,
            options: ModelOptions::default(),
            call_index: 0,
        }
    }

    #[test]
    fn turns_alternate_and_tool_results_are_user_blocks() {
        let messages = vec![
            Message::system("s", "Use tools."),
            Message::user("1", "a"),
            Message::user("2", "b"),
            Message::Assistant {
                id: "3".into(),
                agent: None,
                content: "looking".into(),
                tool_calls: vec![
                    ToolCall::new("t1", "f", json!({"x": 1})),
                    ToolCall::new("t2", "g", json!({})),
                ],
                usage: None,
                reasoning: vec![json!({"type": "thinking", "thinking": "hm", "signature": "s"})],
            },
            Message::Tool {
                id: "4".into(),
                agent: None,
                call_id: "t1".into(),
                name: "f".into(),
                content: "1".into(),
                is_error: false,
            },
            Message::Tool {
                id: "5".into(),
                agent: None,
                call_id: "t2".into(),
                name: "g".into(),
                content: "boom".into(),
                is_error: true,
            },
        ];
        let body = anthropic_request_body("m", &request(messages), false, false);
        assert_eq!(body["system"], "Be brief.\n\nUse tools.");
        assert_eq!(body["max_tokens"], DEFAULT_ANTHROPIC_MAX_TOKENS);
        let roles: Vec<&str> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["role"].as_str())
            .collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        let assistant = &body["messages"][1]["content"];
        let kinds: Vec<&str> =
            assistant.as_array().unwrap().iter().filter_map(|b| b["type"].as_str()).collect();
        assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"]);
        let results = &body["messages"][2]["content"];
        assert_eq!(results[0]["tool_use_id"], "t1");
        assert_eq!(results[1]["is_error"], true);
    }

    #[test]
    fn structured_answers_go_through_a_forced_tool_and_caching_marks_the_prefix() {
        let mut asked = request(vec![Message::user("1", "decide")]);
        asked.response_format = ResponseFormat::ProviderNative(OutputSchema::new(
            "verdict",
            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
        ));
        let body = anthropic_request_body("m", &asked, false, true);
        assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "verdict"}));
        assert_eq!(body["tools"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    }

    #[test]
    fn error_types_decide_the_class() {
        assert_eq!(status_of_type("overloaded_error"), Some(529));
        assert_eq!(status_of_type("request_too_large"), Some(413));
        assert_eq!(status_of_type("something_new"), None);
    }
}
