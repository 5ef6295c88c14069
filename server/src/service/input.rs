//! What a blueprint run starts with: the user's message and the run's
//! values, read from an API body or `--input`.

use std::collections::BTreeMap;

use serde_json::Value;
use tollgate_nodes::{AgentState, Message};

/// The user's message from `--input` or an API body's `input`: a JSON
/// string is its text; a JSON object gives its `message` field, else the
/// whole object as JSON text; anything else is taken as it is.
pub fn user_message(input: &Value) -> String {
    match input {
        Value::String(text) => text.clone(),
        Value::Object(object) => match object.get("message").and_then(Value::as_str) {
            Some(text) => text.to_owned(),
            None => input.to_string(),
        },
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What a blueprint run starts with: the user's message, and values its
/// agents' memory namespaces and tools read ([`AgentState::context`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserInput {
    /// The user's message.
    pub message: String,
    /// Values for the run (`{"user_id": "42"}`).
    pub context: BTreeMap<String, Value>,
}

impl UserInput {
    /// An input of `input` as an API body or `--input` gives it: its text
    /// as [`user_message`] reads it, and the object's `context` (an
    /// object) as the run's values.
    pub fn from_json(input: &Value) -> Self {
        let context = match &input["context"] {
            Value::Object(values) => values.clone().into_iter().collect(),
            _ => BTreeMap::new(),
        };
        Self { message: user_message(input), context }
    }

    /// With these values too (taking precedence over those it has).
    pub fn with_context(mut self, values: impl IntoIterator<Item = (String, Value)>) -> Self {
        self.context.extend(values);
        self
    }
}

impl From<&str> for UserInput {
    fn from(message: &str) -> Self {
        Self { message: message.to_owned(), context: BTreeMap::new() }
    }
}

impl From<String> for UserInput {
    fn from(message: String) -> Self {
        Self { message, context: BTreeMap::new() }
    }
}

/// A blueprint run's input: the user's message and the run's values.
pub(super) fn input_state(input: &UserInput) -> AgentState {
    AgentState {
        messages: vec![Message::user("input.0", &input.message)],
        context: input.context.clone(),
        ..AgentState::default()
    }
}
