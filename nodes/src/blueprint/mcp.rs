//! A blueprint's MCP servers (`mcp_servers` of an agent): started before
//! its graph is built, their tools added to the agent, the `tools` entries
//! that name them applied (approval, timeout, what an error does).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{AgentDoc, Blueprint, McpServerDoc};
use crate::agent::Agent;
use crate::mcp::{McpError, McpServerConfig, DEFAULT_MCP_CALL_TIMEOUT, DEFAULT_MCP_START_TIMEOUT};

#[cfg(feature = "mcp")]
pub(super) type Server = std::sync::Arc<crate::mcp::McpServer>;
#[cfg(not(feature = "mcp"))]
pub(super) type Server = std::convert::Infallible;

/// The started servers of a blueprint: per agent, and per subgraph entry.
#[derive(Default)]
pub(super) struct Started {
    agents: BTreeMap<String, Vec<Server>>,
    subgraphs: BTreeMap<String, Started>,
}

impl Started {
    pub(super) fn agent(&self, name: &str) -> &[Server] {
        self.agents.get(name).map_or(&[], Vec::as_slice)
    }

    pub(super) fn subgraph(&self, name: &str) -> Option<&Started> {
        self.subgraphs.get(name)
    }
}

impl Blueprint {
    /// The names of the MCP servers its agents (nested ones included)
    /// name, as `agent/server`.
    pub(super) fn mcp_server_names(&self) -> Vec<String> {
        self.mcp_servers_where(|_| true)
    }

    /// Everything it would start as a program: command tools as
    /// `agent.tool` and MCP servers started from a command as
    /// `agent/server`, nested blueprints' included under their entry's
    /// name (`review/checker.run_tests`). A server that accepts blueprints
    /// from clients refuses these unless its operator allows them.
    pub fn programs(&self) -> Vec<String> {
        let mut programs = self.command_tools();
        programs.extend(self.mcp_servers_where(|server| !server.command.is_empty()));
        programs
    }

    /// The MCP servers it reaches over HTTP, as `(agent/server, url)`,
    /// nested blueprints' included.
    pub fn mcp_urls(&self) -> Vec<(String, String)> {
        let mut urls: Vec<(String, String)> = self
            .own_agents()
            .into_iter()
            .flat_map(|agent| {
                agent.mcp_servers.iter().filter_map(move |server| {
                    let url = server.url.clone()?;
                    Some((format!("{}/{}", agent.name, server.name), url))
                })
            })
            .collect();
        for (name, nested) in &self.subgraphs {
            urls.extend(
                nested
                    .mcp_urls()
                    .into_iter()
                    .map(|(server, url)| (format!("{name}/{server}"), url)),
            );
        }
        urls
    }

    /// The MCP servers (nested ones included) that `keep` selects, as
    /// `agent/server`.
    pub(super) fn mcp_servers_where(&self, keep: fn(&McpServerDoc) -> bool) -> Vec<String> {
        let mut names: Vec<String> = self
            .own_agents()
            .into_iter()
            .flat_map(|agent| {
                agent
                    .mcp_servers
                    .iter()
                    .filter(move |server| keep(server))
                    .map(move |server| format!("{}/{}", agent.name, server.name))
            })
            .collect();
        for (name, nested) in &self.subgraphs {
            names.extend(
                nested.mcp_servers_where(keep).into_iter().map(|inner| format!("{name}/{inner}")),
            );
        }
        names
    }

    /// Starts every MCP server of the blueprint (nested ones included), one
    /// after another; the first that fails stops the others.
    pub(super) fn start_servers(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Started, McpError>> + Send + '_>>
    {
        Box::pin(async move {
            let mut started = Started::default();
            let agents = self.own_agents();
            for agent in agents {
                let mut servers = Vec::new();
                for doc in &agent.mcp_servers {
                    servers.push(start(self.config(doc)).await?);
                }
                started.agents.insert(agent.name.clone(), servers);
            }
            for (name, nested) in &self.subgraphs {
                started.subgraphs.insert(name.clone(), nested.start_servers().await?);
            }
            Ok(started)
        })
    }

    fn config(&self, doc: &McpServerDoc) -> McpServerConfig {
        let millis = |ms: Option<u64>, default| ms.map_or(default, Duration::from_millis);
        McpServerConfig {
            name: doc.name.clone(),
            command: doc.command.clone(),
            url: doc.url.clone(),
            env: doc
                .env
                .iter()
                .chain(&self.program_env)
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
            inherit_env: self.inherit_env.clone(),
            dir: self.base_dir.clone(),
            start_timeout: millis(doc.start_timeout_ms, DEFAULT_MCP_START_TIMEOUT),
            call_timeout: millis(doc.timeout_ms, DEFAULT_MCP_CALL_TIMEOUT),
        }
    }
}

#[cfg(feature = "mcp")]
async fn start(config: McpServerConfig) -> Result<Server, McpError> {
    crate::mcp::McpServer::start(config).await
}

#[cfg(not(feature = "mcp"))]
async fn start(config: McpServerConfig) -> Result<Server, McpError> {
    Err(McpError::NotBuilt { server: config.name })
}

/// Adds the tools of `servers` (the agent's started servers, in the order
/// of its `mcp_servers`) to `agent`, with what its `tools` entries say of
/// them.
#[cfg(feature = "mcp")]
pub(super) fn add_tools(
    mut agent: Agent,
    doc: &AgentDoc,
    servers: &[Server],
) -> Result<Agent, McpError> {
    // Where each tool name comes from: the blueprint's own tools first.
    let mut offered: BTreeMap<String, String> = doc
        .tools
        .iter()
        .filter(|tool| tool.mcp.is_none())
        .map(|tool| (tool.name.clone(), "the blueprint's `tools`".to_owned()))
        .collect();
    for (server, server_doc) in servers.iter().zip(&doc.mcp_servers) {
        let entries: Vec<_> =
            doc.tools.iter().filter(|t| t.mcp.as_deref() == Some(server.name())).collect();
        for entry in &entries {
            server.tool(&entry.name)?;
        }
        for spec in server.specs() {
            let from = format!("MCP server `{}`", server.name());
            if let Some(first) = offered.insert(spec.name.clone(), from.clone()) {
                return Err(McpError::DuplicateTool {
                    agent: doc.name.clone(),
                    tool: spec.name,
                    first,
                    second: from,
                });
            }
            let mut tool = server.tool(&spec.name)?;
            let entry = entries.iter().find(|entry| entry.name == spec.name);
            if let Some(ms) = entry.and_then(|entry| entry.timeout_ms) {
                tool = tool.timeout(Duration::from_millis(ms));
            }
            let on_error =
                entry.and_then(|e| e.on_error.as_deref()).or(server_doc.on_error.as_deref());
            if on_error == Some("fail_run") {
                agent = agent.fail_run_on_error([spec.name.clone()]);
            }
            if let Some(entry) = entry.filter(|entry| entry.approval.needed()) {
                agent = match entry.on_reject.as_deref() {
                    Some("end_run") => agent.end_run_on_reject([spec.name.clone()]),
                    _ => agent.require_approval([spec.name.clone()]),
                };
            }
            agent = agent.tool(tool);
        }
    }
    Ok(agent)
}

#[cfg(not(feature = "mcp"))]
pub(super) fn add_tools(
    agent: Agent,
    _doc: &AgentDoc,
    servers: &[Server],
) -> Result<Agent, McpError> {
    match servers.first() {
        Some(never) => match *never {},
        None => Ok(agent),
    }
}
