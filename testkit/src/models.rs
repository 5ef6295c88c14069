//! Model doubles: scripted with expectations, cycling, streaming, schema
//! driven, failing and flaky.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use tollgate_nodes::{
    ChatModel, DeltaSink, ErrorClass, HarnessError, Message, ModelRequest, ModelResponse,
    ScriptReply, ToolCall,
};

/// A provider failure a double reproduces, by class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// HTTP 429 (retryable).
    RateLimit,
    /// HTTP 500 (retryable).
    Server,
    /// A timeout (retryable).
    Timeout,
    /// A dropped connection (retryable).
    Network,
    /// HTTP 401 (never retried by default).
    Auth,
    /// HTTP 400 (never retried by default).
    InvalidRequest,
}

impl Failure {
    /// The error a provider would return.
    pub fn to_error(self) -> HarnessError {
        let provider = "testkit".to_owned();
        let message = format!("injected {self:?} failure");
        match self {
            Failure::RateLimit => {
                HarnessError::RateLimited { provider, retry_after: None, message }
            }
            Failure::Server => HarnessError::Server { provider, status: Some(500), message },
            Failure::Timeout => HarnessError::Timeout { what: provider, after: Duration::ZERO },
            Failure::Network => HarnessError::Network { provider, message },
            Failure::Auth => HarnessError::Auth { provider, status: Some(401), message },
            Failure::InvalidRequest => {
                HarnessError::InvalidRequest { provider, status: Some(400), message }
            }
        }
    }

    /// Its class.
    pub fn class(self) -> ErrorClass {
        self.to_error().class()
    }

    fn script_kind(self) -> &'static str {
        match self {
            Failure::RateLimit => "rate_limit",
            Failure::Server => "server",
            Failure::Timeout => "timeout",
            Failure::Network => "network",
            Failure::Auth => "auth",
            Failure::InvalidRequest => "invalid_request",
        }
    }
}

/// Builds a [`ScriptedModel`] step by step, like tokio-test's
/// `io::Builder`:
///
/// ```
/// use serde_json::json;
/// use tollgate_testkit::{Failure, ScriptedModel};
///
/// let model = ScriptedModel::builder()
///     .fail(Failure::RateLimit)
///     .tool_call("lookup_user", json!({"id": 7}))
///     .reply("Ann.")
///     .build();
/// # model.forget();
/// ```
#[derive(Debug, Default)]
pub struct ScriptBuilder {
    name: Option<String>,
    replies: Vec<ScriptReply>,
}

impl ScriptBuilder {
    /// The model's name (`scripted` by default).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The next call answers with text.
    pub fn reply(mut self, text: impl Into<String>) -> Self {
        self.replies.push(ScriptReply::Text(text.into()));
        self
    }

    /// The next call asks for one tool call.
    pub fn tool_call(self, name: impl Into<String>, args: Value) -> Self {
        self.tool_calls(vec![(name.into(), args)])
    }

    /// The next call asks for several tool calls at once.
    pub fn tool_calls(mut self, calls: Vec<(String, Value)>) -> Self {
        let calls = calls.into_iter().map(|(name, args)| (name, args, None)).collect();
        self.replies.push(ScriptReply::ToolCalls(calls));
        self
    }

    /// The next call answers with this structured value.
    pub fn structured(mut self, value: Value) -> Self {
        self.replies.push(ScriptReply::Structured(value));
        self
    }

    /// The next call streams these chunks.
    pub fn stream<T: Into<String>>(mut self, chunks: impl IntoIterator<Item = T>) -> Self {
        self.replies.push(ScriptReply::Stream(chunks.into_iter().map(Into::into).collect()));
        self
    }

    /// The next call fails like this.
    pub fn fail(mut self, failure: Failure) -> Self {
        self.replies.push(ScriptReply::Error {
            kind: failure.script_kind().to_owned(),
            message: format!("injected {failure:?} failure"),
            retry_after: None,
        });
        self
    }

    /// The model.
    pub fn build(self) -> ScriptedModel {
        let name = self.name.unwrap_or_else(|| "scripted".to_owned());
        ScriptedModel::from_replies(name, self.replies)
    }
}

#[derive(Debug, Default)]
struct Calls {
    used: Vec<bool>,
    unexpected: Vec<String>,
    requests: Vec<ModelRequest>,
    forgotten: bool,
}

/// The scripted mock provider with expectations: reply `n` answers the
/// agent's call `n` (the count lives in the run's state, so replies line up
/// across crashes and resumes), every request is recorded, and
///
/// - a call past the script panics with a readable message (inside a node
///   the engine turns the panic into a failed run; the drop check below
///   still fails the test);
/// - dropping the model with replies never asked for panics, listing them.
///
/// Clones share their record, so keep one clone for assertions.
#[derive(Clone)]
pub struct ScriptedModel {
    inner: tollgate_nodes::ScriptedModel,
    calls: Arc<Mutex<Calls>>,
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel").field("name", &self.inner.name()).finish_non_exhaustive()
    }
}

impl ScriptedModel {
    /// A builder.
    pub fn builder() -> ScriptBuilder {
        ScriptBuilder::default()
    }

    /// A model answering with `replies` (the JSON script format of
    /// blueprints is read by [`ScriptReply::parse_script`]).
    pub fn from_replies(name: impl Into<String>, replies: Vec<ScriptReply>) -> Self {
        let used = vec![false; replies.len()];
        Self {
            inner: tollgate_nodes::ScriptedModel::new(name, replies),
            calls: Arc::new(Mutex::new(Calls { used, ..Calls::default() })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.lock().requests.clone()
    }

    /// Calls received.
    pub fn calls(&self) -> usize {
        self.lock().requests.len()
    }

    /// Skips the drop check (for a test that stops early on purpose).
    pub fn forget(&self) {
        self.lock().forgotten = true;
    }

    fn record(&self, request: &ModelRequest) {
        let mut calls = self.lock();
        calls.requests.push(request.clone());
        let index = usize::try_from(request.call_index).unwrap_or(usize::MAX);
        match calls.used.get_mut(index) {
            Some(used) => *used = true,
            None => {
                let last = request.messages.last().map(Message::content).unwrap_or_default();
                let text = format!(
                    "scripted model `{}` got call {} but its script has {} replies (last message: {last:?})",
                    self.inner.name(),
                    request.call_index + 1,
                    calls.used.len()
                );
                calls.unexpected.push(text.clone());
                drop(calls);
                panic!("{text}");
            }
        }
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        // Only the last clone checks.
        if Arc::strong_count(&self.calls) > 1 || std::thread::panicking() {
            return;
        }
        let calls = self.lock();
        if calls.forgotten {
            return;
        }
        if let Some(first) = calls.unexpected.first() {
            panic!("{first}");
        }
        let unused: Vec<String> = calls
            .used
            .iter()
            .enumerate()
            .filter(|(_, used)| !**used)
            .map(|(index, _)| format!("#{index}: {:?}", self.inner.replies()[index]))
            .collect();
        if !unused.is_empty() {
            panic!(
                "scripted model `{}` dropped with {} unused replies:\n  {}",
                self.inner.name(),
                unused.len(),
                unused.join("\n  ")
            );
        }
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn invoke(&self, request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        self.record(request);
        self.inner.invoke(request).await
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        deltas: &mut (dyn DeltaSink + Send),
    ) -> Result<ModelResponse, HarnessError> {
        self.record(request);
        self.inner.stream(request, deltas).await
    }
}

/// Answers with its responses in turn, starting over after the last
/// (LangChain's `FakeMessagesListChatModel`). Never runs out.
#[derive(Debug, Clone)]
pub struct FakeChatModel {
    responses: Vec<ModelResponse>,
}

impl FakeChatModel {
    /// Cycles through `responses` by call count. Panics when empty.
    pub fn cycling(responses: Vec<ModelResponse>) -> Self {
        assert!(!responses.is_empty(), "FakeChatModel needs at least one response");
        Self { responses }
    }

    /// Always answers `text`.
    pub fn constant(text: impl Into<String>) -> Self {
        Self::cycling(vec![ModelResponse::text(text)])
    }
}

#[async_trait]
impl ChatModel for FakeChatModel {
    fn name(&self) -> &str {
        "fake"
    }

    async fn invoke(&self, request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        let index = (request.call_index % self.responses.len() as u64) as usize;
        Ok(self.responses[index].clone())
    }
}

/// Streams a text in chunks (split at whitespace, separators kept, so the
/// chunks join to exactly the text), optionally failing at chunk `n`
/// after streaming the chunks before it.
#[derive(Debug, Clone)]
pub struct FakeStreamingModel {
    text: String,
    fail_at: Option<(usize, Failure)>,
}

impl FakeStreamingModel {
    /// Streams `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self { text: text.into(), fail_at: None }
    }

    /// Fails with `failure` instead of sending chunk `chunk` (0-based).
    pub fn fail_at_chunk(mut self, chunk: usize, failure: Failure) -> Self {
        self.fail_at = Some((chunk, failure));
        self
    }

    /// The chunks of the text: words and the whitespace after them.
    pub fn chunks(&self) -> Vec<String> {
        split_keeping_whitespace(&self.text)
    }
}

/// Splits before each run of non-whitespace that follows whitespace.
pub(crate) fn split_keeping_whitespace(text: &str) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    let mut after_space = false;
    for ch in text.chars() {
        if after_space && !ch.is_whitespace() && !current.is_empty() {
            chunks.push(std::mem::take(&mut current));
        }
        after_space = ch.is_whitespace();
        current.push(ch);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

#[async_trait]
impl ChatModel for FakeStreamingModel {
    fn name(&self) -> &str {
        "fake-streaming"
    }

    async fn invoke(&self, _request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        match self.fail_at {
            Some((_, failure)) => Err(failure.to_error()),
            None => Ok(ModelResponse::text(self.text.clone())),
        }
    }

    async fn stream(
        &self,
        _request: &ModelRequest,
        deltas: &mut (dyn DeltaSink + Send),
    ) -> Result<ModelResponse, HarnessError> {
        for (index, chunk) in self.chunks().iter().enumerate() {
            if let Some((at, failure)) = self.fail_at {
                if index == at {
                    return Err(failure.to_error());
                }
            }
            deltas.text(chunk);
        }
        Ok(ModelResponse::text(self.text.clone()))
    }
}

/// Calls every tool the request declares, one per call, with arguments
/// generated from each tool's schema, then answers with its final text on
/// every later call. Adding a tool to an agent under test needs no script
/// change, and every tool's validation path really runs.
#[derive(Debug, Clone)]
pub struct SchemaDrivenModel {
    final_text: String,
}

impl SchemaDrivenModel {
    /// Ends with `text`.
    pub fn with_final_text(text: impl Into<String>) -> Self {
        Self { final_text: text.into() }
    }
}

#[async_trait]
impl ChatModel for SchemaDrivenModel {
    fn name(&self) -> &str {
        "schema-driven"
    }

    async fn invoke(&self, request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        let index = usize::try_from(request.call_index).unwrap_or(usize::MAX);
        Ok(match request.tools.get(index) {
            Some(tool) => {
                let args = args_from_schema(&tool.parameters);
                let id = format!("schema_call_{index}");
                ModelResponse::tool_calls(vec![ToolCall::new(id, tool.name.clone(), args)])
            }
            None => ModelResponse::text(self.final_text.clone()),
        })
    }
}

/// A value of the schema's shape: `"test"` for strings, 0 for numbers,
/// `false` for booleans, one element for arrays, every property of objects
/// (recursively), the first of an `enum`.
pub fn args_from_schema(schema: &Value) -> Value {
    if let Some(first) = schema.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    let kind = match &schema["type"] {
        Value::String(kind) => kind.as_str(),
        Value::Array(kinds) => {
            kinds.iter().filter_map(Value::as_str).find(|k| *k != "null").unwrap_or("null")
        }
        _ if schema.get("properties").is_some() => "object",
        _ => "null",
    };
    match kind {
        "string" => json!("test"),
        "integer" => json!(0),
        "number" => json!(0.0),
        "boolean" => json!(false),
        "array" => json!([args_from_schema(&schema["items"])]),
        "object" => {
            let mut object = Map::new();
            if let Some(properties) = schema["properties"].as_object() {
                for (name, property) in properties {
                    object.insert(name.clone(), args_from_schema(property));
                }
            }
            Value::Object(object)
        }
        _ => Value::Null,
    }
}

/// Fails its first `failures` calls, then answers like `inner`.
#[derive(Debug, Clone)]
pub struct FlakyModel<M> {
    failures: u64,
    failure: Failure,
    inner: M,
}

impl<M: ChatModel> FlakyModel<M> {
    /// Fails `failures` times with `failure`, then delegates to `inner`
    /// (which sees the same call count).
    pub fn new(failures: u64, failure: Failure, inner: M) -> Self {
        Self { failures, failure, inner }
    }
}

#[async_trait]
impl<M: ChatModel> ChatModel for FlakyModel<M> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn invoke(&self, request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        if request.call_index < self.failures {
            return Err(self.failure.to_error());
        }
        self.inner.invoke(request).await
    }
}

/// Always fails.
#[derive(Debug, Clone)]
pub struct FailingModel {
    failure: Failure,
}

impl FailingModel {
    /// Fails every call with `failure`.
    pub fn new(failure: Failure) -> Self {
        Self { failure }
    }
}

#[async_trait]
impl ChatModel for FailingModel {
    fn name(&self) -> &str {
        "failing"
    }

    async fn invoke(&self, _request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        Err(self.failure.to_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn stream_chunks_join_to_exactly_the_text(text in "[a-z \\n\\té日]{0,60}") {
            let chunks = split_keeping_whitespace(&text);
            prop_assert_eq!(chunks.concat(), text.clone());
            prop_assert!(chunks.iter().all(|chunk| !chunk.is_empty()));
            // No chunk starts a word in its middle.
            for pair in chunks.windows(2) {
                prop_assert!(pair[0].ends_with(char::is_whitespace), "{:?}", pair);
            }
        }
    }

    #[test]
    fn schema_driven_arguments_follow_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "s": {"type": "string"}, "i": {"type": "integer"}, "b": {"type": "boolean"},
            "a": {"type": "array", "items": {"type": "number"}},
            "o": {"type": "object", "properties": {"e": {"enum": ["x", "y"]}}},
            "n": {"type": ["null", "integer"]}
        }});
        assert_eq!(
            args_from_schema(&schema),
            json!({"s": "test", "i": 0, "b": false, "a": [0.0], "o": {"e": "x"}, "n": 0})
        );
    }
}
