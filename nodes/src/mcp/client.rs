//! The MCP client: a server process started through `rmcp`'s child
//! process transport, its session, and its tools as [`Tool`]s.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{McpError, McpServerConfig};
use crate::error::HarnessError;
use crate::tool::{Tool, ToolContext, ToolSpec};

/// Stderr lines kept for error messages.
const KEPT_STDERR: usize = 5;

/// Calls in flight, by number: where the server's stderr lines go.
type InFlight = BTreeMap<u64, ToolContext>;

/// What the server wrote to stderr: routed to the calls in flight, and
/// the last lines kept for errors.
#[derive(Default)]
struct Stderr {
    in_flight: Mutex<InFlight>,
    last: Mutex<VecDeque<String>>,
}

impl Stderr {
    fn line(&self, line: &str) {
        let calls: Vec<ToolContext> = lock(&self.in_flight).values().cloned().collect();
        if calls.is_empty() {
            tracing::debug!(line, "MCP server stderr, no call in flight");
        }
        for call in calls {
            call.progress("stderr", line);
        }
        let mut last = lock(&self.last);
        if last.len() == KEPT_STDERR {
            last.pop_front();
        }
        last.push_back(line.to_owned());
    }

    fn last(&self) -> Vec<String> {
        lock(&self.last).iter().cloned().collect()
    }
}

/// Removes a call from the in-flight set when it ends, however it ends.
struct InFlightGuard<'a> {
    stderr: &'a Stderr,
    number: u64,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        lock(&self.stderr.in_flight).remove(&self.number);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running MCP server: its process, its session and the tools it listed.
/// Dropping the last handle ends the session and stops the process.
pub struct McpServer {
    config: McpServerConfig,
    session: RunningService<RoleClient, ()>,
    tools: Vec<rmcp::model::Tool>,
    stderr: Arc<Stderr>,
    next_call: AtomicU64,
    stderr_done: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.config.name)
            .field("command", &self.config.command)
            .field("tools", &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        // Ends the session; the transport then stops the process.
        self.session.cancellation_token().cancel();
        if let Some(task) = lock(&self.stderr_done).take() {
            task.abort();
        }
    }
}

impl McpServer {
    /// Starts the server, completes the `initialize` handshake and lists
    /// its tools, all within `config.start_timeout`. Needs a tokio runtime.
    pub async fn start(config: McpServerConfig) -> Result<Arc<Self>, McpError> {
        if let Some(url) = config.url.clone() {
            crate::tls::install_crypto();
            let transport = StreamableHttpClientTransport::from_uri(url);
            return Self::open(config, transport, Arc::new(Stderr::default()), None).await;
        }
        let server = config.name.clone();
        let program = config.command.first().cloned().unwrap_or_default();
        let mut command = tokio::process::Command::new(&program);
        crate::child_env::clean_env(&mut command, &config.inherit_env, &config.env);
        command.args(config.command.iter().skip(1)).current_dir(&config.dir);
        // Killed when its handle is dropped, wherever that happens (a
        // runtime shutting down never runs the SDK's own kill task), so a
        // server stuck in a call never outlives its session.
        command.kill_on_drop(true);
        let spawned = TokioChildProcess::builder(command).stderr(Stdio::piped()).spawn();
        let (transport, stderr_pipe) = spawned.map_err(|source| McpError::Spawn {
            server: server.clone(),
            program: program.clone(),
            source,
        })?;
        let stderr = Arc::new(Stderr::default());
        let reader = stderr_pipe.map(|pipe| {
            let stderr = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut lines = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    stderr.line(&line);
                }
            })
        });
        Self::open(config, transport, stderr, reader).await
    }

    /// Opens the session over `transport` and lists the tools.
    async fn open<T, E, A>(
        config: McpServerConfig,
        transport: T,
        stderr: Arc<Stderr>,
        reader: Option<tokio::task::JoinHandle<()>>,
    ) -> Result<Arc<Self>, McpError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let server = config.name.clone();
        let remote = config.url.is_some();
        let started = async {
            let session = ().serve(transport).await.map_err(|error| McpError::Initialize {
                server: server.clone(),
                message: initialize_words(&error, remote),
                stderr: Vec::new(),
            })?;
            let tools =
                session.peer().list_all_tools().await.map_err(|error| McpError::ListTools {
                    server: server.clone(),
                    message: service_words(&error, remote).to_owned(),
                })?;
            Ok::<_, McpError>((session, tools))
        };
        let (session, tools) = match tokio::time::timeout(config.start_timeout, started).await {
            Ok(Ok(started)) => started,
            Ok(Err(mut error)) => {
                // A server that exited: its last words, once it is gone.
                if let Some(reader) = reader {
                    let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
                }
                if let McpError::Initialize { stderr: lines, .. } = &mut error {
                    *lines = stderr.last();
                }
                return Err(error);
            }
            Err(_) => {
                if let Some(reader) = reader {
                    reader.abort();
                }
                let after = config.start_timeout;
                return Err(McpError::StartTimeout { server, after, stderr: stderr.last() });
            }
        };
        tracing::debug!(server, tools = tools.len(), "MCP server started");
        Ok(Arc::new(Self {
            config,
            session,
            tools,
            stderr,
            next_call: AtomicU64::new(0),
            stderr_done: Mutex::new(reader),
        }))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The specs of the tools it listed, in its order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|tool| {
                let description = tool.description.as_deref().unwrap_or_default().to_owned();
                let parameters = Value::Object((*tool.input_schema).clone());
                ToolSpec::new(tool.name.to_string(), description, parameters)
            })
            .collect()
    }

    /// Its tool `name` as a [`Tool`] with the server's call timeout, or
    /// [`McpError::UnknownTool`].
    pub fn tool(self: &Arc<Self>, name: &str) -> Result<McpTool, McpError> {
        let spec = self.specs().into_iter().find(|spec| spec.name == name).ok_or_else(|| {
            McpError::UnknownTool {
                server: self.config.name.clone(),
                tool: name.to_owned(),
                available: self.tools.iter().map(|t| t.name.to_string()).collect(),
            }
        })?;
        Ok(McpTool { server: Arc::clone(self), spec, timeout: self.config.call_timeout })
    }

    async fn call(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<Value, McpError> {
        let number = self.next_call.fetch_add(1, Ordering::SeqCst);
        lock(&self.stderr.in_flight).insert(number, ctx.clone());
        // Out of the in-flight set when done or dropped (a timeout).
        let _in_flight = InFlightGuard { stderr: &self.stderr, number };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Value::Object(arguments) = args {
            params = params.with_arguments(arguments);
        }
        let result = self.session.peer().call_tool(params).await;
        // Lines the server wrote to stderr before its answer are usually
        // read by now; give the reader its turn before the call ends.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        let (server, tool) = (self.config.name.clone(), tool.to_owned());
        match result {
            Ok(result) if result.is_error == Some(true) => {
                Err(McpError::ToolError { server, tool, message: text_of(&result) })
            }
            Ok(result) => Ok(value_of(result)),
            Err(ServiceError::McpError(error)) => {
                Err(McpError::Refused { server, tool, message: error.message.to_string() })
            }
            Err(error) => Err(McpError::Connection {
                server,
                tool,
                message: service_words(&error, self.config.url.is_some()).to_owned(),
                stderr: self.stderr.last(),
            }),
        }
    }
}

/// Why the `initialize` handshake failed, in words of our own: the SDK's
/// messages carry Rust type names and, for a server over HTTP, what the
/// remote answered, which is never repeated (a blueprint could point the
/// server at any address and read the answer back from the error).
fn initialize_words(error: &rmcp::service::ClientInitializeError, remote: bool) -> String {
    use rmcp::service::ClientInitializeError as Init;
    let words = match error {
        Init::ConnectionClosed(_) if remote => "the connection closed before it answered",
        Init::ConnectionClosed(_) => "it exited or closed its output before it answered",
        Init::TransportError { .. } if remote => {
            "the request failed: no MCP server answered there (refused, unreachable, an HTTP error, or not MCP)"
        }
        Init::TransportError { .. } => "writing to it or reading from it failed",
        Init::JsonRpcError(_) if remote => "it refused the handshake with a JSON-RPC error",
        // A program the operator allowed: its own words are no leak.
        Init::JsonRpcError(error) => return format!("it refused the handshake: {}", error.message),
        Init::NoCompatibleProtocolVersion { .. } => "it speaks no protocol version this client does",
        Init::ExpectedInitResponse(_)
        | Init::ExpectedInitResult(_)
        | Init::ConflictInitResponseId(..)
        | Init::UncorrelatedErrorResponse { .. } => {
            "it answered the handshake with something other than an MCP initialize result"
        }
        _ => "the handshake failed",
    };
    words.to_owned()
}

/// Why a request to a started server failed, likewise in words of our own.
fn service_words(error: &ServiceError, remote: bool) -> &'static str {
    match error {
        ServiceError::McpError(_) => "it answered with a JSON-RPC error",
        ServiceError::TransportSend(_) if remote => {
            "the request failed (an HTTP error or no answer)"
        }
        ServiceError::TransportSend(_) => "writing to it failed",
        ServiceError::TransportClosed if remote => "the connection closed",
        ServiceError::TransportClosed => "it exited or closed its output",
        ServiceError::UnexpectedResponse => "it answered with something unexpected",
        ServiceError::Timeout { .. } => "it did not answer in time",
        ServiceError::Cancelled { .. } => "the request was cancelled",
        _ => "the request failed",
    }
}

/// The text blocks of a result, one per line.
fn text_of(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

/// What the model sees of a result: its structured content; else its text
/// (as JSON when it is JSON); else its content blocks as JSON.
fn value_of(result: CallToolResult) -> Value {
    if let Some(structured) = result.structured_content {
        return structured;
    }
    if result.content.iter().all(|block| matches!(block, ContentBlock::Text(_))) {
        let text = text_of(&result);
        return serde_json::from_str(&text).unwrap_or(Value::String(text));
    }
    serde_json::to_value(&result.content).unwrap_or(Value::Null)
}

/// One tool of an MCP server. Calls go out as `tools/call`; the call
/// fails with [`McpError`] (as a [`HarnessError::Mcp`]) when the tool
/// answers with an error, the server refuses, crashes or goes silent past
/// the timeout.
#[derive(Debug, Clone)]
pub struct McpTool {
    server: Arc<McpServer>,
    spec: ToolSpec,
    timeout: Duration,
}

impl McpTool {
    /// Calls time out after `timeout` (instead of the server's).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The server it belongs to.
    pub fn server(&self) -> &Arc<McpServer> {
        &self.server
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<Value, HarnessError> {
        let call = self.server.call(&self.spec.name, args, ctx);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(HarnessError::from),
            Err(_) => Err(HarnessError::from(McpError::CallTimeout {
                server: self.server.config.name.clone(),
                tool: self.spec.name.clone(),
                after: self.timeout,
            })),
        }
    }
}
