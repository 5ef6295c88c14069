//! Tools served by MCP (Model Context Protocol) servers, over stdio (a
//! program started for the purpose) or streamable HTTP (a server that
//! runs already), through the official Rust SDK (`rmcp`): the session is
//! opened, the tools listed, and each becomes a [`Tool`] whose calls go
//! out as `tools/call`.
//!
//! The server lives as long as its tools: a blueprint starts its servers
//! when a leg's graph is built, and the process is stopped when the last
//! tool is dropped, with the graph, at the end of the leg. What the server
//! writes to stderr while a call is in flight becomes that call's
//! `tool_delta` events (stream `stderr`).

mod error;

pub use error::McpError;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Default time a server has to start and list its tools.
pub const DEFAULT_MCP_START_TIMEOUT: Duration = Duration::from_secs(10);

/// Default time a call has to finish.
pub const DEFAULT_MCP_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How to start an MCP server over stdio.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Its name (in errors, and in the blueprint).
    pub name: String,
    /// The program and its arguments (stdio).
    pub command: Vec<String>,
    /// The server's endpoint, for a server reached over streamable HTTP
    /// instead of started: `command`, `env` and `dir` are then unused.
    pub url: Option<String>,
    /// Variables set in the server's environment, which is otherwise
    /// cleared down to [`BASE_CHILD_ENV`](crate::BASE_CHILD_ENV) and
    /// `inherit_env`.
    pub env: BTreeMap<String, String>,
    /// Variables of this process's environment the server also sees.
    pub inherit_env: Vec<String>,
    /// Its working directory.
    pub dir: PathBuf,
    /// Time to start, initialize and list its tools.
    pub start_timeout: Duration,
    /// Time each call has (a tool may have its own).
    pub call_timeout: Duration,
}

impl McpServerConfig {
    /// A server reached over streamable HTTP at `url` (`http://` or
    /// `https://`), with the default timeouts.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self { url: Some(url.into()), ..Self::new(name, Vec::new()) }
    }

    /// A server started with `command` (program first), with the default
    /// timeouts, in the current directory.
    pub fn new(name: impl Into<String>, command: Vec<String>) -> Self {
        Self {
            name: name.into(),
            command,
            url: None,
            env: BTreeMap::new(),
            inherit_env: Vec::new(),
            dir: PathBuf::from("."),
            start_timeout: DEFAULT_MCP_START_TIMEOUT,
            call_timeout: DEFAULT_MCP_CALL_TIMEOUT,
        }
    }
}

#[cfg(feature = "mcp")]
mod client;

#[cfg(feature = "mcp")]
pub use client::{McpServer, McpTool};
