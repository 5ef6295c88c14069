//! The tollgate agent harness: messages, chat models, tools, registries,
//! agents compiled into graphs, middleware, structured output, retries,
//! memory, the scripted mock provider and blueprints.
//!
//! An [`Agent`] (a [`ChatModel`], [`Tool`]s, settings) compiles into a
//! [`CompiledAgent`]: a graph of two nodes on [`AgentState`], the model
//! node `NAME` and the tools node `NAME.tools`, routed on tool calls. The
//! engine's executor runs it like any graph, so every model turn and every
//! tool round is a checkpointed transition: a run survives a crash between
//! turns, pauses for tool approvals, and continues in another process.
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use tollgate_checkpoint::{MemoryStore, RunStatus};
//! use tollgate_engine::{Executor, RunConfig};
//! use tollgate_nodes::{Agent, FixtureTool, ScriptReply, ScriptedModel, ToolSpec};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = ScriptedModel::new("scripted", vec![
//!     ScriptReply::ToolCalls(vec![("lookup_order".into(), json!({"id": 7}), None)]),
//!     ScriptReply::Text("Order 7 is 20 EUR.".into()),
//! ]);
//! let lookup = FixtureTool::new(
//!     ToolSpec::new("lookup_order", "Find an order", json!({
//!         "type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]
//!     })),
//!     json!({"id": 7, "amount": 20}),
//! );
//! let agent = Agent::new("orders", Arc::new(model)).tool(lookup).compile().unwrap();
//! let run = agent.run(&Executor::new(MemoryStore::new()), "How much was order 7?", RunConfig::new())
//!     .await
//!     .unwrap();
//! assert_eq!(run.status, RunStatus::Completed);
//! assert_eq!(run.final_text(), Some("Order 7 is 20 EUR."));
//! # });
//! ```

mod agent;
#[cfg(feature = "anthropic")]
mod anthropic;
mod blueprint;
mod child_env;
mod command;
mod context;
#[cfg(feature = "openai")]
mod embeddings;
mod error;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod http;
mod mcp;
mod memory;
mod message;
mod middleware;
mod model;
#[cfg(feature = "openai")]
mod openai;
mod retry;
mod scripted;
mod structured;
mod telemetry;
#[cfg(any(feature = "openai", feature = "anthropic", feature = "mcp"))]
mod tls;
mod tool;

pub use agent::{
    Agent, AgentMemory, AgentProgress, AgentRun, AgentState, AgentStateUpdate, CompiledAgent,
    ToolApproval, DEFAULT_MAX_REASKS, DEFAULT_MAX_TURNS, MEMORY_TOOLS, TOOL_APPROVAL,
};
#[cfg(feature = "anthropic")]
pub use anthropic::{
    anthropic_request_body, AnthropicModel, ANTHROPIC_VERSION, DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_ANTHROPIC_MAX_TOKENS, DEFAULT_ANTHROPIC_TIMEOUT,
};
pub use blueprint::{Blueprint, BlueprintError, BlueprintProblem, PackProvenance, MAX_FILE_BYTES};
pub use child_env::BASE_CHILD_ENV;
pub use command::{CommandTool, DEFAULT_COMMAND_TIMEOUT};
pub use context::RunContext;
#[cfg(feature = "openai")]
pub use embeddings::OpenAiEmbedder;
pub use error::{ErrorClass, HarnessError};
pub use mcp::{McpError, McpServerConfig, DEFAULT_MCP_CALL_TIMEOUT, DEFAULT_MCP_START_TIMEOUT};
#[cfg(feature = "mcp")]
pub use mcp::{McpServer, McpTool};
pub use memory::{InMemoryShortTermMemory, ShortTermMemory};
pub use message::{Message, ToolCall, Usage};
pub use middleware::{Middleware, ModelFallback, ModelNext, ToolNext};
pub use model::{
    ChatModel, DeltaSink, ModelOptions, ModelRegistry, ModelRequest, ModelResponse, OutputSchema,
    ResponseFormat, ToolChoice,
};
#[cfg(feature = "openai")]
pub use openai::{
    request_body as openai_request_body, strict_schema, OpenAiModel, DEFAULT_OPENAI_BASE_URL,
    DEFAULT_OPENAI_TIMEOUT,
};
pub use retry::{ModelRetry, MAX_RETRY_AFTER};
pub use scripted::{ScriptReply, ScriptedModel};
pub use telemetry::describe_harness_metrics;
pub use tool::{FixtureTool, FnTool, Tool, ToolContext, ToolRegistry, ToolSpec};
