//! The scripted model: replies from a script, picked by the agent's call
//! count, which lives in the run's state.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::error::HarnessError;
use crate::message::{ToolCall, Usage};
use crate::model::{ChatModel, DeltaSink, ModelRequest, ModelResponse, ResponseFormat};

/// One reply of a script.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ScriptReply {
    /// Answer with text.
    Text(String),
    /// Answer with text delivered in these pieces when streamed.
    Stream(Vec<String>),
    /// Call tools: (name, arguments, optional call id).
    ToolCalls(Vec<(String, Value, Option<String>)>),
    /// Answer with this structured value: as the output tool's arguments
    /// under [`ResponseFormat::ToolStrategy`], else as JSON text.
    Structured(Value),
    /// Fail like a provider would.
    Error {
        /// `rate_limit`, `server`, `timeout`, `auth`, `network` or
        /// `invalid_request`.
        kind: String,
        /// The provider's message.
        message: String,
        /// For `rate_limit`: how long to wait.
        retry_after: Option<Duration>,
    },
}

const ERROR_KINDS: [&str; 6] =
    ["rate_limit", "server", "timeout", "auth", "network", "invalid_request"];

impl ScriptReply {
    /// Reads a script: a JSON array, one reply per model call, each one of
    /// `{"text": "..."}`, `{"stream": ["..", ".."]}`,
    /// `{"tool_calls": [{"name": "...", "args": {...}, "id"?: "..."}]}`,
    /// `{"structured": {...}}` or `{"error": KIND, "message": "...",
    /// "retry_after_ms"?: N}`. Returns every problem found, each naming the
    /// reply's index.
    pub fn parse_script(script: &Value) -> Result<Vec<ScriptReply>, Vec<String>> {
        let Some(items) = script.as_array() else {
            return Err(vec!["a script is a JSON array of replies".to_owned()]);
        };
        let mut replies = Vec::new();
        let mut problems = Vec::new();
        for (index, item) in items.iter().enumerate() {
            match parse_reply(item) {
                Ok(reply) => replies.push(reply),
                Err(problem) => problems.push(format!("reply {index}: {problem}")),
            }
        }
        if problems.is_empty() {
            Ok(replies)
        } else {
            Err(problems)
        }
    }
}

fn parse_reply(item: &Value) -> Result<ScriptReply, String> {
    let object = item.as_object().ok_or("a reply is an object")?;
    let known = ["text", "stream", "tool_calls", "structured", "error"];
    let kinds: Vec<&str> = known.iter().copied().filter(|key| object.contains_key(*key)).collect();
    let [kind] = kinds.as_slice() else {
        let found = if kinds.is_empty() { "none".to_owned() } else { kinds.join(", ") };
        return Err(format!("a reply has exactly one of {}; found {found}", known.join(", ")));
    };
    let allowed: &[&str] = match *kind {
        "error" => &["error", "message", "retry_after_ms"],
        other => std::slice::from_ref(known.iter().find(|k| **k == other).expect("known")),
    };
    if let Some(extra) = object.keys().find(|key| !allowed.contains(&key.as_str())) {
        return Err(format!("unknown field `{extra}` in a `{kind}` reply"));
    }
    let value = &object[*kind];
    match *kind {
        "text" => value
            .as_str()
            .map(|t| ScriptReply::Text(t.to_owned()))
            .ok_or("`text` is a string".into()),
        "stream" => value
            .as_array()
            .and_then(|chunks| chunks.iter().map(|c| c.as_str().map(str::to_owned)).collect())
            .map(ScriptReply::Stream)
            .ok_or_else(|| "`stream` is an array of strings".to_owned()),
        "structured" => Ok(ScriptReply::Structured(value.clone())),
        "tool_calls" => {
            let calls = value.as_array().ok_or("`tool_calls` is an array")?;
            calls
                .iter()
                .map(|call| {
                    let name = call["name"].as_str().ok_or("a tool call has a string `name`")?;
                    let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
                    let id = call.get("id").and_then(Value::as_str).map(str::to_owned);
                    Ok((name.to_owned(), args, id))
                })
                .collect::<Result<_, String>>()
                .map(ScriptReply::ToolCalls)
        }
        _ => {
            let kind = value.as_str().filter(|k| ERROR_KINDS.contains(k));
            let kind =
                kind.ok_or_else(|| format!("`error` is one of {}", ERROR_KINDS.join(", ")))?;
            let message =
                object.get("message").and_then(Value::as_str).unwrap_or("scripted failure");
            let retry_after = match object.get("retry_after_ms") {
                None => None,
                Some(ms) => Some(Duration::from_millis(
                    ms.as_u64().ok_or("`retry_after_ms` is a whole number")?,
                )),
            };
            Ok(ScriptReply::Error {
                kind: kind.to_owned(),
                message: message.to_owned(),
                retry_after,
            })
        }
    }
}

/// A model that answers from a script: call `n` of an agent (its
/// [`ModelRequest::call_index`]) gets reply `n`. The call count is part of
/// the run's state, so a run paused or crashed in one process and continued
/// in another gets the next reply, and a retried call gets the reply after
/// the one that failed. A call past the end is
/// [`HarnessError::ScriptExhausted`].
///
/// This is the mock provider behind blueprint specs `scripted:PATH`; the
/// testkit's `ScriptedModel` (with expectations checked at drop) builds on
/// it.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    name: String,
    replies: Arc<Vec<ScriptReply>>,
}

impl ScriptedModel {
    /// A model named `name` answering with `replies`.
    pub fn new(name: impl Into<String>, replies: Vec<ScriptReply>) -> Self {
        Self { name: name.into(), replies: Arc::new(replies) }
    }

    /// The script.
    pub fn replies(&self) -> &[ScriptReply] {
        &self.replies
    }

    fn reply(&self, request: &ModelRequest) -> Result<&ScriptReply, HarnessError> {
        usize::try_from(request.call_index).ok().and_then(|index| self.replies.get(index)).ok_or(
            HarnessError::ScriptExhausted {
                model: self.name.clone(),
                len: self.replies.len(),
                call: request.call_index + 1,
            },
        )
    }

    fn respond(
        &self,
        request: &ModelRequest,
        reply: &ScriptReply,
    ) -> Result<ModelResponse, HarnessError> {
        let provider = || "scripted".to_owned();
        let mut response = match reply {
            ScriptReply::Text(text) => ModelResponse::text(text.clone()),
            ScriptReply::Stream(chunks) => ModelResponse::text(chunks.concat()),
            ScriptReply::ToolCalls(calls) => ModelResponse::tool_calls(
                calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, args, id))| {
                        let id = id
                            .clone()
                            .unwrap_or_else(|| format!("call_{}_{i}", request.call_index));
                        ToolCall::new(id, name.clone(), args.clone())
                    })
                    .collect(),
            ),
            ScriptReply::Structured(value) => match &request.response_format {
                ResponseFormat::ToolStrategy { tool_name, .. } => {
                    let id = format!("call_{}_0", request.call_index);
                    ModelResponse::tool_calls(vec![ToolCall::new(
                        id,
                        tool_name.clone(),
                        value.clone(),
                    )])
                }
                _ => ModelResponse::text(value.to_string()),
            },
            ScriptReply::Error { kind, message, retry_after } => {
                let message = message.clone();
                return Err(match kind.as_str() {
                    "rate_limit" => HarnessError::RateLimited {
                        provider: provider(),
                        retry_after: *retry_after,
                        message,
                    },
                    "server" => {
                        HarnessError::Server { provider: provider(), status: Some(500), message }
                    }
                    "timeout" => HarnessError::Timeout {
                        what: "scripted model".into(),
                        after: Duration::ZERO,
                    },
                    "auth" => {
                        HarnessError::Auth { provider: provider(), status: Some(401), message }
                    }
                    "network" => HarnessError::Network { provider: provider(), message },
                    _ => HarnessError::InvalidRequest {
                        provider: provider(),
                        status: Some(400),
                        message,
                    },
                });
            }
        };
        response.usage = Some(usage(request, &response));
        Ok(response)
    }
}

/// A deterministic stand-in for token counts: four characters a token.
fn usage(request: &ModelRequest, response: &ModelResponse) -> Usage {
    let prompt: usize = request.messages.iter().map(|m| m.content().len()).sum::<usize>()
        + request.system.as_ref().map_or(0, String::len);
    let args: usize = response.tool_calls.iter().map(|c| c.args.to_string().len()).sum();
    Usage::new(prompt.div_ceil(4) as u64, (response.content.len() + args).div_ceil(4) as u64)
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        &self.name
    }

    async fn invoke(&self, request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        let reply = self.reply(request)?;
        self.respond(request, reply)
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        deltas: &mut (dyn DeltaSink + Send),
    ) -> Result<ModelResponse, HarnessError> {
        let reply = self.reply(request)?;
        let response = self.respond(request, reply)?;
        match reply {
            ScriptReply::Stream(chunks) => chunks.iter().for_each(|chunk| deltas.text(chunk)),
            _ if !response.content.is_empty() => deltas.text(&response.content),
            _ => {}
        }
        Ok(response)
    }
}
