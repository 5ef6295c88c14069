//! Conversation messages, tool calls and token usage.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tollgate_engine::HasId;

/// One message of a conversation. Every message carries an id, so the
/// `messages` reducer can replace or remove it; `agent` names the agent
/// that wrote it (none for input), so agents sharing a graph keep their
/// own tool traffic apart (see [`Message::visible_to`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// Id, unique in the run.
        id: String,
        /// The instructions.
        content: String,
    },
    /// What a person said.
    User {
        /// Id, unique in the run.
        id: String,
        /// The text.
        content: String,
    },
    /// What a model answered: text, tool calls, or both.
    Assistant {
        /// Id, unique in the run.
        id: String,
        /// The agent whose model wrote it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// The text (may be empty when the model only calls tools).
        #[serde(default)]
        content: String,
        /// Tools the model asked to call.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Tokens the call used, when the provider reports them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// The model's reasoning as the provider returned it (Anthropic's
        /// `thinking` and `redacted_thinking` blocks, signatures included),
        /// kept so that it can be sent back on the next turn, as the
        /// provider requires; never shown as the answer.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<Value>,
    },
    /// A tool's result, answering one tool call.
    Tool {
        /// Id, unique in the run.
        id: String,
        /// The agent that ran the tool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// The tool call this answers (the model's id for it).
        call_id: String,
        /// The tool's name.
        name: String,
        /// The result (JSON text), or the error the model should read.
        content: String,
        /// Whether `content` is an error.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

impl Message {
    /// A system message.
    pub fn system(id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::System { id: id.into(), content: content.into() }
    }

    /// A user message.
    pub fn user(id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::User { id: id.into(), content: content.into() }
    }

    /// An assistant message with text only.
    pub fn assistant(id: impl Into<String>, content: impl Into<String>) -> Self {
        Message::Assistant {
            id: id.into(),
            agent: None,
            content: content.into(),
            tool_calls: Vec::new(),
            usage: None,
            reasoning: Vec::new(),
        }
    }

    /// The message's id.
    pub fn id(&self) -> &str {
        match self {
            Message::System { id, .. }
            | Message::User { id, .. }
            | Message::Assistant { id, .. }
            | Message::Tool { id, .. } => id,
        }
    }

    /// The text of the message.
    pub fn content(&self) -> &str {
        match self {
            Message::System { content, .. }
            | Message::User { content, .. }
            | Message::Assistant { content, .. }
            | Message::Tool { content, .. } => content,
        }
    }

    /// The agent that wrote it, if any.
    pub fn agent(&self) -> Option<&str> {
        match self {
            Message::Assistant { agent, .. } | Message::Tool { agent, .. } => agent.as_deref(),
            _ => None,
        }
    }

    /// The tool calls of an assistant message (empty otherwise).
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Message::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }

    /// Whether `agent`'s model sees this message: input and its own
    /// messages always; of other agents, only their answers (assistant
    /// messages without tool calls), never their tool traffic.
    pub fn visible_to(&self, agent: &str) -> bool {
        match self.agent() {
            None => true,
            Some(author) if author == agent => true,
            Some(_) => {
                matches!(self, Message::Assistant { tool_calls, .. } if tool_calls.is_empty())
            }
        }
    }
}

impl HasId for Message {
    fn id(&self) -> Option<&str> {
        Some(Message::id(self))
    }
}

/// A model's request to call a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for the call; the tool result answers it.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments, a JSON object.
    pub args: Value,
}

impl ToolCall {
    /// A call of `name` with `args`.
    pub fn new(id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        Self { id: id.into(), name: name.into(), args }
    }
}

/// Tokens one model call used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Both.
    pub total_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache (Anthropic's
    /// `cache_read_input_tokens`), besides `input_tokens`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache (Anthropic's
    /// `cache_creation_input_tokens`), besides `input_tokens`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_creation_tokens: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl Usage {
    /// Usage of `input` prompt and `output` completion tokens.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            total_tokens: input_tokens + output_tokens,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_serialize_with_a_role_tag_and_round_trip() {
        let messages = [
            Message::system("s", "be brief"),
            Message::user("u", "日本語 ok?"),
            Message::Assistant {
                id: "a".into(),
                agent: Some("refunds".into()),
                content: String::new(),
                tool_calls: vec![ToolCall::new("call_1", "lookup", serde_json::json!({"id": 7}))],
                usage: Some(Usage::new(3, 4)),
                reasoning: Vec::new(),
            },
            Message::Tool {
                id: "t".into(),
                agent: Some("refunds".into()),
                call_id: "call_1".into(),
                name: "lookup".into(),
                content: "{}".into(),
                is_error: true,
            },
        ];
        let json = serde_json::to_value(&messages).unwrap();
        assert_eq!(json[0]["role"], "system");
        assert_eq!(json[2]["tool_calls"][0]["args"]["id"], 7);
        assert_eq!(json[3]["is_error"], true);
        let back: Vec<Message> = serde_json::from_value(json).unwrap();
        assert_eq!(back, messages);
    }

    #[test]
    fn agents_see_input_their_own_traffic_and_others_answers_only() {
        let call = ToolCall::new("c", "t", serde_json::json!({}));
        let mine = Message::Assistant {
            id: "1".into(),
            agent: Some("a".into()),
            content: String::new(),
            tool_calls: vec![call.clone()],
            usage: None,
            reasoning: Vec::new(),
        };
        let theirs_calling = Message::Assistant {
            id: "2".into(),
            agent: Some("b".into()),
            content: String::new(),
            tool_calls: vec![call],
            usage: None,
            reasoning: Vec::new(),
        };
        let theirs_answer = Message::Assistant {
            id: "3".into(),
            agent: Some("b".into()),
            content: "done".into(),
            tool_calls: Vec::new(),
            usage: None,
            reasoning: Vec::new(),
        };
        assert!(Message::user("0", "hi").visible_to("a"));
        assert!(mine.visible_to("a"));
        assert!(!theirs_calling.visible_to("a"));
        assert!(theirs_answer.visible_to("a"));
    }
}
