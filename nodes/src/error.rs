//! The harness's one error taxonomy and its retry classes.

use std::time::Duration;

use tollgate_checkpoint::RunId;
use tollgate_engine::{CompileError, EmitError, NodeError, RunError};

use crate::mcp::McpError;

/// What kind of failure an error is, for retry decisions
/// ([`ModelRetry`](crate::ModelRetry)) and for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// The request was malformed or refused as such (HTTP 400/404/413).
    InvalidRequest,
    /// Credentials missing or refused (HTTP 401/403).
    Auth,
    /// The provider asked to slow down (HTTP 429).
    RateLimit,
    /// The provider failed (HTTP 5xx).
    Server,
    /// The call took too long.
    Timeout,
    /// The connection failed or dropped.
    Network,
    /// The provider's answer did not follow its wire format.
    Protocol,
    /// A tool was missing, refused its arguments, or failed.
    Tool,
    /// Structured output never matched its schema.
    StructuredOutput,
    /// The agent's configuration is wrong (missing model, bad schema).
    Config,
    /// A middleware failed.
    Middleware,
    /// Short-term memory or the key-value store failed.
    Memory,
    /// A limit was reached (turns, script length).
    Limit,
    /// The run itself failed (store, engine).
    Run,
}

impl ErrorClass {
    /// Stable snake_case name, as failures store it (`RunFailure::class`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::InvalidRequest => "invalid_request",
            ErrorClass::Auth => "auth",
            ErrorClass::RateLimit => "rate_limited",
            ErrorClass::Server => "server",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Network => "network",
            ErrorClass::Protocol => "protocol",
            ErrorClass::Tool => "tool",
            ErrorClass::StructuredOutput => "structured_output",
            ErrorClass::Config => "config",
            ErrorClass::Middleware => "middleware",
            ErrorClass::Memory => "memory",
            ErrorClass::Limit => "limit",
            ErrorClass::Run => "run",
        }
    }

    /// Whether the default retry policy retries this class: network,
    /// timeout, rate limit and server errors only.
    pub fn retryable_by_default(self) -> bool {
        matches!(
            self,
            ErrorClass::Network | ErrorClass::Timeout | ErrorClass::RateLimit | ErrorClass::Server
        )
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a model call, tool call or agent run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The provider refused the request as malformed.
    #[error("{provider}: invalid request{}: {message}", status_suffix(*status))]
    InvalidRequest {
        /// The provider.
        provider: String,
        /// HTTP status, if any.
        status: Option<u16>,
        /// What the provider said.
        message: String,
    },
    /// No model is registered under this spec or name.
    #[error("no model `{spec}`: register it in the ModelRegistry or fix the spec (`scripted:PATH`, `openai:MODEL`)")]
    MissingModel {
        /// The spec or name asked for.
        spec: String,
    },
    /// An agent names a tool no registry holds.
    #[error("agent `{agent}` allows tool `{tool}`, which is not registered")]
    MissingTool {
        /// The agent.
        agent: String,
        /// The tool.
        tool: String,
    },
    /// A tool's argument schema is not a valid JSON Schema.
    #[error("tool `{tool}` has an invalid argument schema: {message}")]
    InvalidToolSchema {
        /// The tool.
        tool: String,
        /// What the schema compiler said.
        message: String,
    },
    /// The model of an agent with no tools called one (it was shown
    /// none; the agent has no tools node to answer it).
    #[error("agent `{agent}` has no tools, but its model called `{tool}`")]
    ToolCallWithoutTools {
        /// The agent.
        agent: String,
        /// The tool the model named.
        tool: String,
    },
    /// A tool call's arguments do not match the tool's schema.
    #[error("arguments for tool `{tool}` do not match its schema: {}", errors.join("; "))]
    InvalidToolArguments {
        /// The tool.
        tool: String,
        /// Every violation found.
        errors: Vec<String>,
    },
    /// A tool failed.
    #[error("tool `{tool}` failed: {message}")]
    ToolFailed {
        /// The tool.
        tool: String,
        /// What went wrong.
        message: String,
    },
    /// A command tool exited with a failure status.
    #[error("command `{program}` exited with status {status}: {stderr}")]
    CommandFailed {
        /// The program.
        program: String,
        /// Its exit status (-1 when killed by a signal).
        status: i32,
        /// The end of its standard error.
        stderr: String,
    },
    /// A command tool did not print one JSON value.
    #[error("command `{program}` printed no JSON result: {message}")]
    CommandOutputInvalid {
        /// The program.
        program: String,
        /// What the parser said.
        message: String,
    },
    /// A command tool could not be started or talked to.
    #[error("command `{program}` could not run: {source}")]
    CommandIo {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The provider refused the credentials. Never retried by default.
    #[error("{provider}: authentication failed{}: {message}", status_suffix(*status))]
    Auth {
        /// The provider.
        provider: String,
        /// HTTP status, if any.
        status: Option<u16>,
        /// What the provider said.
        message: String,
    },
    /// The provider asked to slow down.
    #[error("{provider}: rate limited{}: {message}", retry_after.map(|d| format!(" (retry after {} ms)", d.as_millis())).unwrap_or_default())]
    RateLimited {
        /// The provider.
        provider: String,
        /// How long the provider asked to wait.
        retry_after: Option<Duration>,
        /// What the provider said.
        message: String,
    },
    /// The provider failed on its side.
    #[error("{provider}: server error{}: {message}", status_suffix(*status))]
    Server {
        /// The provider.
        provider: String,
        /// HTTP status, if any.
        status: Option<u16>,
        /// What the provider said.
        message: String,
    },
    /// The provider is overloaded (Anthropic's 529 `overloaded_error`):
    /// retried like a server error, after the wait it asks for.
    #[error("{provider}: overloaded (HTTP {status}){}: {message}", retry_after.map(|d| format!(", retry after {} ms", d.as_millis())).unwrap_or_default())]
    Overloaded {
        /// The provider.
        provider: String,
        /// HTTP status (529, or the status an error inside a stream
        /// stands for).
        status: u16,
        /// How long the provider asked to wait.
        retry_after: Option<Duration>,
        /// What the provider said.
        message: String,
    },
    /// A call took longer than allowed.
    #[error("{what} timed out after {} ms", after.as_millis())]
    Timeout {
        /// What timed out (a provider, a tool).
        what: String,
        /// The limit.
        after: Duration,
    },
    /// The provider answered that it gave up waiting (HTTP 408).
    #[error("{provider}: the server timed out (HTTP {status}): {message}")]
    ProviderTimeout {
        /// The provider.
        provider: String,
        /// HTTP status.
        status: u16,
        /// What the provider said.
        message: String,
    },
    /// The connection failed or dropped.
    #[error("{provider}: network error: {message}")]
    Network {
        /// The provider.
        provider: String,
        /// What failed.
        message: String,
    },
    /// The provider's answer broke its wire format.
    #[error("{provider}: malformed response: {message}")]
    Protocol {
        /// The provider.
        provider: String,
        /// What was wrong.
        message: String,
    },
    /// Retryable failures continued past the retry policy's attempts.
    #[error("the call gave up after {attempts} attempts: {last}")]
    RetryExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        #[source]
        last: Box<HarnessError>,
    },
    /// The model's structured output never matched the schema.
    #[error("agent `{agent}`: structured output still invalid after {attempts} attempt(s): {}", errors.join("; "))]
    StructuredOutputInvalid {
        /// The agent.
        agent: String,
        /// Model answers checked.
        attempts: u32,
        /// What was wrong with the last answer.
        errors: Vec<String>,
    },
    /// A middleware failed.
    #[error("middleware `{middleware}` failed in {hook}: {source}")]
    Middleware {
        /// The middleware.
        middleware: String,
        /// The hook.
        hook: &'static str,
        /// Its error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Short-term or long-term memory failed.
    #[error("memory failed: {source}")]
    Memory {
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An agent's memory namespace names a value the run was not started
    /// with.
    #[error("memory namespace part `{template}` needs `{name}` in the run's context (start it with {{\"context\": {{\"{name}\": ...}}}})")]
    MemoryTemplate {
        /// The part as written (`{user_id}`).
        template: String,
        /// The value it names.
        name: String,
    },
    /// An agent with long-term memory ran where there is none.
    #[error("agent `{agent}` uses long-term memory, but its run has none (Executor::with_memory)")]
    NoMemory {
        /// The agent.
        agent: String,
    },
    /// A scripted model was called more often than its script has replies.
    #[error("scripted model `{model}` has {len} replies; call {call} asked for one more")]
    ScriptExhausted {
        /// The model.
        model: String,
        /// Replies in the script.
        len: usize,
        /// The call (1-based).
        call: u64,
    },
    /// An agent wanted another model turn past its limit.
    #[error("agent `{agent}` reached its limit of {limit} model turns")]
    TurnLimitExceeded {
        /// The agent.
        agent: String,
        /// The limit.
        limit: u32,
    },
    /// A graph built from agents did not compile.
    #[error(transparent)]
    Graph(#[from] CompileError),
    /// A stored event is not valid JSON.
    #[error("run {run}: stored event {seq} is not valid JSON: {source}")]
    EventDecode {
        /// The run.
        run: RunId,
        /// The event.
        seq: u64,
        /// What the decoder reported.
        #[source]
        source: serde_json::Error,
    },
    /// An event could not be recorded.
    #[error(transparent)]
    Emit(#[from] EmitError),
    /// The run failed in the engine or the store.
    #[error(transparent)]
    Run(#[from] RunError),
    /// An MCP server could not be started, or one of its calls failed.
    #[error(transparent)]
    Mcp(#[from] McpError),
}

fn status_suffix(status: Option<u16>) -> String {
    status.map(|status| format!(" (HTTP {status})")).unwrap_or_default()
}

impl HarnessError {
    /// The error's class.
    pub fn class(&self) -> ErrorClass {
        match self {
            HarnessError::InvalidRequest { .. } => ErrorClass::InvalidRequest,
            HarnessError::Auth { .. } => ErrorClass::Auth,
            HarnessError::RateLimited { .. } => ErrorClass::RateLimit,
            HarnessError::Server { .. } | HarnessError::Overloaded { .. } => ErrorClass::Server,
            HarnessError::Timeout { .. } | HarnessError::ProviderTimeout { .. } => {
                ErrorClass::Timeout
            }
            HarnessError::Network { .. } => ErrorClass::Network,
            HarnessError::Protocol { .. } => ErrorClass::Protocol,
            HarnessError::MissingTool { .. }
            | HarnessError::ToolCallWithoutTools { .. }
            | HarnessError::InvalidToolArguments { .. }
            | HarnessError::ToolFailed { .. }
            | HarnessError::CommandFailed { .. }
            | HarnessError::CommandOutputInvalid { .. }
            | HarnessError::CommandIo { .. } => ErrorClass::Tool,
            HarnessError::Mcp(error) if error.is_start_failure() => ErrorClass::Config,
            HarnessError::Mcp(_) => ErrorClass::Tool,
            HarnessError::MissingModel { .. } | HarnessError::InvalidToolSchema { .. } => {
                ErrorClass::Config
            }
            HarnessError::RetryExhausted { last, .. } => last.class(),
            HarnessError::StructuredOutputInvalid { .. } => ErrorClass::StructuredOutput,
            HarnessError::Middleware { .. } => ErrorClass::Middleware,
            HarnessError::Memory { .. } => ErrorClass::Memory,
            HarnessError::MemoryTemplate { .. } | HarnessError::NoMemory { .. } => {
                ErrorClass::Config
            }
            HarnessError::ScriptExhausted { .. } | HarnessError::TurnLimitExceeded { .. } => {
                ErrorClass::Limit
            }
            HarnessError::Graph(_) => ErrorClass::Config,
            HarnessError::Run(_) | HarnessError::EventDecode { .. } | HarnessError::Emit(_) => {
                ErrorClass::Run
            }
        }
    }

    /// How long the provider asked to wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            HarnessError::RateLimited { retry_after, .. }
            | HarnessError::Overloaded { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Stable snake_case name of the variant.
    pub fn kind(&self) -> &'static str {
        match self {
            HarnessError::InvalidRequest { .. } => "invalid_request",
            HarnessError::MissingModel { .. } => "missing_model",
            HarnessError::MissingTool { .. } => "missing_tool",
            HarnessError::InvalidToolSchema { .. } => "invalid_tool_schema",
            HarnessError::ToolCallWithoutTools { .. } => "tool_call_without_tools",
            HarnessError::InvalidToolArguments { .. } => "invalid_tool_arguments",
            HarnessError::ToolFailed { .. } => "tool_failed",
            HarnessError::CommandFailed { .. } => "command_failed",
            HarnessError::CommandOutputInvalid { .. } => "command_output_invalid",
            HarnessError::CommandIo { .. } => "command_io",
            HarnessError::Auth { .. } => "auth",
            HarnessError::RateLimited { .. } => "rate_limited",
            HarnessError::Server { .. } => "server",
            HarnessError::Overloaded { .. } => "overloaded",
            HarnessError::Timeout { .. } => "timeout",
            HarnessError::ProviderTimeout { .. } => "provider_timeout",
            HarnessError::Network { .. } => "network",
            HarnessError::Protocol { .. } => "protocol",
            HarnessError::RetryExhausted { .. } => "retry_exhausted",
            HarnessError::StructuredOutputInvalid { .. } => "structured_output_invalid",
            HarnessError::Middleware { .. } => "middleware",
            HarnessError::Memory { .. } => "memory",
            HarnessError::MemoryTemplate { .. } => "memory_template",
            HarnessError::NoMemory { .. } => "no_memory",
            HarnessError::ScriptExhausted { .. } => "script_exhausted",
            HarnessError::TurnLimitExceeded { .. } => "turn_limit_exceeded",
            HarnessError::Graph(_) => "invalid_graph",
            HarnessError::EventDecode { .. } => "event_decode",
            HarnessError::Emit(_) => "emit",
            HarnessError::Run(_) => "run",
            HarnessError::Mcp(error) => error.kind(),
        }
    }
}

impl From<HarnessError> for NodeError {
    /// Harness errors inside a node are final for the node: the harness
    /// has already retried what its policy retries.
    fn from(error: HarnessError) -> Self {
        let class = error.class();
        NodeError::fatal(error).with_class(class.as_str())
    }
}
