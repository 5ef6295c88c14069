//! Building a blueprint's graph: its agents (models, tools, MCP servers'
//! tools, structured output) and, for a graph of agents, its edges and its
//! nested blueprints as subgraphs that share the conversation.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tollgate_engine::{MessageOp, NodeError, StateGraph, END, START};

use super::mcp::{self, Started};
use super::{AgentDoc, Blueprint, BlueprintError, Doc, EntryDoc};
use crate::agent::{Agent, AgentMemory, AgentState, AgentStateUpdate, CompiledAgent};
use crate::command::CommandTool;
use crate::error::HarnessError;
use crate::message::Message;
use crate::model::{ChatModel, ModelRegistry, OutputSchema, ResponseFormat};
use crate::scripted::{ScriptReply, ScriptedModel};
use crate::tool::{FixtureTool, ToolSpec};

impl Blueprint {
    /// Builds the graph. `scripted:PATH` models are served here; other
    /// specs come from `models` (`openai:` once its factory is registered).
    /// A blueprint with MCP servers is refused
    /// ([`BlueprintError::ServersNotStarted`]): use [`Blueprint::start`].
    pub fn compile(&self, models: &ModelRegistry) -> Result<CompiledAgent, BlueprintError> {
        let servers = self.mcp_server_names();
        if !servers.is_empty() {
            return Err(BlueprintError::ServersNotStarted { servers });
        }
        self.compile_with(models, &Started::default())
    }

    /// Starts the blueprint's MCP servers (if it has any: each is spawned,
    /// initialised and asked for its tools within its start timeout), then
    /// builds the graph with their tools. The servers run as long as the
    /// graph does: dropping its last clone (at the end of a leg) stops
    /// them.
    pub async fn start(&self, models: &ModelRegistry) -> Result<CompiledAgent, BlueprintError> {
        let started =
            self.start_servers().await.map_err(|source| BlueprintError::Mcp { source })?;
        self.compile_with(models, &started)
    }

    /// The graph without its MCP servers' tools (none is started): the
    /// same graph name, version and nodes, enough to store a run
    /// (`Executor::enqueue`) that a process with the servers drives. Never
    /// drive a run with it: its agents would miss those tools.
    pub fn compile_unstarted(
        &self,
        models: &ModelRegistry,
    ) -> Result<CompiledAgent, BlueprintError> {
        self.compile_with(models, &Started::default())
    }

    fn compile_with(
        &self,
        models: &ModelRegistry,
        started: &Started,
    ) -> Result<CompiledAgent, BlueprintError> {
        let compile = |source| match source {
            HarnessError::Mcp(source) => BlueprintError::Mcp { source },
            source => BlueprintError::Compile { source },
        };
        match &self.doc {
            Doc::Agent(doc) => self
                .agent(doc, models, started.agent(&doc.name))
                .and_then(Agent::compile)
                .map_err(compile),
            Doc::Graph(doc) => {
                let mut graph = StateGraph::<AgentState>::new(doc.name.clone(), doc.version);
                for (from, to) in &doc.edges {
                    if from == "START" {
                        graph = graph.edge(START, endpoint(to));
                    }
                }
                for entry in &doc.agents {
                    let then: Vec<&str> = doc
                        .edges
                        .iter()
                        .filter(|(from, _)| from == entry.name())
                        .map(|(_, to)| endpoint(to))
                        .collect();
                    match entry {
                        EntryDoc::Agent(agent) => {
                            let servers = started.agent(&agent.name);
                            let built = self.agent(agent, models, servers).map_err(compile)?;
                            graph = built.add_to(graph, &then).map_err(compile)?;
                        }
                        EntryDoc::Subgraph { name, .. } => {
                            let nested = &self.subgraphs[name];
                            let empty = Started::default();
                            let inner_started = started.subgraph(name).unwrap_or(&empty);
                            let inner = nested.compile_with(models, inner_started)?.graph().clone();
                            graph = graph.subgraph(name.clone(), inner, shared_in, shared_out);
                            for target in then {
                                graph = graph.edge(name.clone(), target);
                            }
                        }
                    }
                }
                let graph = graph.compile().map_err(|error| compile(HarnessError::Graph(error)))?;
                Ok(CompiledAgent::new(doc.name.clone(), graph))
            }
        }
    }

    fn agent(
        &self,
        doc: &AgentDoc,
        models: &ModelRegistry,
        servers: &[mcp::Server],
    ) -> Result<Agent, HarnessError> {
        let spec = self.model_override.as_deref().unwrap_or(&doc.model);
        let model = self.model(spec, models)?;
        let mut agent = Agent::new(doc.name.clone(), model).version(doc.version);
        if let Some(system) = &doc.system {
            agent = agent.system(system.clone());
        }
        if let Some(turns) = doc.max_turns {
            agent = agent.max_turns(turns);
        }
        agent = agent.streaming(doc.stream || self.stream_all);
        if let Doc::Graph(graph) = &self.doc {
            agent = agent.persona_stages(graph.agents.len() > 1);
        }
        let mut approval = Vec::new();
        for tool in doc.tools.iter().filter(|tool| tool.mcp.is_none()) {
            if tool.on_error.as_deref() == Some("fail_run") {
                agent = agent.fail_run_on_error([tool.name.clone()]);
            }
            let spec =
                ToolSpec::new(tool.name.clone(), tool.description.clone(), tool.parameters.clone());
            agent = match (&tool.fixture, &tool.command) {
                (Some(result), _) => agent.tool(FixtureTool::new(spec, result.clone())),
                (None, Some(command)) => {
                    let mut tool_impl = CommandTool::new(spec, &command[0], command[1..].to_vec())
                        .dir(&self.base_dir)
                        .inherit_env(&self.inherit_env)
                        .envs(tool.env.clone())
                        .envs(self.program_env.clone());
                    if let Some(ms) = tool.timeout_ms {
                        tool_impl = tool_impl.timeout(Duration::from_millis(ms));
                    }
                    agent.tool(tool_impl)
                }
                (None, None) => unreachable!("validated: a tool has a fixture or a command"),
            };
            if tool.approval.needed() {
                approval.push(tool.name.clone());
                if tool.on_reject.as_deref() == Some("end_run") {
                    agent = agent.end_run_on_reject([tool.name.clone()]);
                }
            }
        }
        agent = mcp::add_tools(agent, doc, servers)?;
        if let Some(memory) = &doc.memory {
            let mut config =
                AgentMemory::new(self.memory_shelf.iter().chain(&memory.namespace).cloned())
                    .recall_into_prompt(memory.prompt);
            if let Some(tools) = &memory.tools {
                config = config.tools(tools.clone());
            }
            agent = agent.memory(config);
        }
        if let Some(schema) = &doc.output_schema {
            let name = format!("{}_output", doc.name);
            agent = agent.response_format(ResponseFormat::JsonSchema(OutputSchema::new(
                name,
                schema.clone(),
            )));
        }
        Ok(agent.require_approval(approval))
    }

    fn model(
        &self,
        spec: &str,
        models: &ModelRegistry,
    ) -> Result<Arc<dyn ChatModel>, HarnessError> {
        match spec.strip_prefix("scripted:") {
            Some(path) => {
                let missing = || HarnessError::MissingModel { spec: spec.to_owned() };
                let (_, text) = self.reach.read(&self.base_dir, path);
                let text = text.map_err(|_| missing())?;
                let value: Value = serde_json::from_str(&text).map_err(|_| missing())?;
                let replies = ScriptReply::parse_script(&value).map_err(|_| missing())?;
                Ok(Arc::new(ScriptedModel::new(spec, replies)))
            }
            None => models.get(spec),
        }
    }
}

/// A subgraph blueprint starts from the parent's conversation...
fn shared_in(parent: &AgentState, _send: Option<&Value>) -> Result<AgentState, NodeError> {
    Ok(parent.clone())
}

/// ...and hands back what it added or changed: new and changed messages
/// (by id), structured answers and counters.
fn shared_out(parent: &AgentState, inner: AgentState) -> Result<AgentStateUpdate, NodeError> {
    let messages: Vec<MessageOp<Message>> = inner
        .messages
        .into_iter()
        .filter(|message| !parent.messages.contains(message))
        .map(MessageOp::Upsert)
        .collect();
    let structured = inner
        .structured
        .into_iter()
        .filter(|(name, value)| parent.structured.get(name) != Some(value))
        .collect();
    let progress = inner
        .progress
        .into_iter()
        .filter(|(name, value)| parent.progress.get(name) != Some(value))
        .collect();
    Ok(AgentStateUpdate::default().messages(messages).structured(structured).progress(progress))
}

fn endpoint(name: &str) -> &str {
    match name {
        "END" => END,
        "START" => START,
        other => other,
    }
}
