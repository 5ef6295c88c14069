//! Why an MCP server or one of its calls failed.

use std::time::Duration;

/// Why an MCP server could not be used, or one of its calls failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// This build has no MCP client (the `mcp` feature is off).
    #[error(
        "MCP server `{server}`: this build has no MCP support (feature `mcp` of tollgate-nodes)"
    )]
    NotBuilt {
        /// The server.
        server: String,
    },
    /// The server's program could not be started.
    #[error("MCP server `{server}` could not start (`{program}`): {source}")]
    Spawn {
        /// The server.
        server: String,
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The server did not complete the `initialize` handshake: it exited,
    /// closed its output, answered with an error or with something else.
    #[error("MCP server `{server}` did not initialize: {message}{}", stderr_suffix(stderr))]
    Initialize {
        /// The server.
        server: String,
        /// What the client saw.
        message: String,
        /// The last lines the server wrote to stderr.
        stderr: Vec<String>,
    },
    /// The server did not list its tools.
    #[error("MCP server `{server}` did not list its tools: {message}")]
    ListTools {
        /// The server.
        server: String,
        /// What the client saw.
        message: String,
    },
    /// The server did not answer `initialize` or `tools/list` in time.
    #[error("MCP server `{server}` did not start within {} ms{}", after.as_millis(), stderr_suffix(stderr))]
    StartTimeout {
        /// The server.
        server: String,
        /// The limit.
        after: Duration,
        /// The last lines the server wrote to stderr.
        stderr: Vec<String>,
    },
    /// A blueprint's `tools` entry names a tool the server does not list.
    #[error("MCP server `{server}` has no tool `{tool}` (it has: {})", available.join(", "))]
    UnknownTool {
        /// The server.
        server: String,
        /// The tool asked for.
        tool: String,
        /// The tools it lists.
        available: Vec<String>,
    },
    /// Two tools of one agent have the same name.
    #[error("tool `{tool}` is offered twice to agent `{agent}` (by {first} and by {second})")]
    DuplicateTool {
        /// The agent.
        agent: String,
        /// The tool's name.
        tool: String,
        /// Where the first comes from.
        first: String,
        /// Where the second comes from.
        second: String,
    },
    /// The tool answered with an error (`isError`).
    #[error("{message}")]
    ToolError {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The error's text.
        message: String,
    },
    /// The server refused the call (a JSON-RPC error).
    #[error("MCP server `{server}` refused the call of `{tool}`: {message}")]
    Refused {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The server's error.
        message: String,
    },
    /// The connection failed during the call: the server exited (crashed)
    /// or closed its output.
    #[error(
        "MCP server `{server}` failed during the call of `{tool}`: {message}{}",
        stderr_suffix(stderr)
    )]
    Connection {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// What the client saw.
        message: String,
        /// The last lines the server wrote to stderr.
        stderr: Vec<String>,
    },
    /// The call did not finish in time (a server that hangs, or answers
    /// with lines that are not JSON-RPC).
    #[error("MCP tool `{tool}` of server `{server}` timed out after {} ms", after.as_millis())]
    CallTimeout {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// The limit.
        after: Duration,
    },
}

impl McpError {
    /// Whether the server could not be started (as opposed to one call
    /// failing).
    pub fn is_start_failure(&self) -> bool {
        matches!(
            self,
            McpError::NotBuilt { .. }
                | McpError::Spawn { .. }
                | McpError::Initialize { .. }
                | McpError::ListTools { .. }
                | McpError::StartTimeout { .. }
                | McpError::UnknownTool { .. }
                | McpError::DuplicateTool { .. }
        )
    }
}

impl McpError {
    /// Stable snake_case name of the variant, prefixed `mcp_`.
    pub fn kind(&self) -> &'static str {
        match self {
            McpError::NotBuilt { .. } => "mcp_not_built",
            McpError::Spawn { .. } => "mcp_spawn",
            McpError::Initialize { .. } => "mcp_initialize",
            McpError::ListTools { .. } => "mcp_list_tools",
            McpError::StartTimeout { .. } => "mcp_start_timeout",
            McpError::UnknownTool { .. } => "mcp_unknown_tool",
            McpError::DuplicateTool { .. } => "mcp_duplicate_tool",
            McpError::ToolError { .. } => "mcp_tool_error",
            McpError::Refused { .. } => "mcp_refused",
            McpError::Connection { .. } => "mcp_connection",
            McpError::CallTimeout { .. } => "mcp_call_timeout",
        }
    }
}

fn stderr_suffix(lines: &[String]) -> String {
    match lines.is_empty() {
        true => String::new(),
        false => format!(" (its stderr: {})", lines.join(" | ")),
    }
}
