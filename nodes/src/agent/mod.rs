//! Agents: a model node and a tools node in a graph, with their settings.

mod memory;
mod run;
mod tools;
mod turn;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tollgate_engine::{GraphState, NodeContext, Route, StateGraph, END, START};

use crate::error::HarnessError;
use crate::message::Message;
use crate::middleware::Middleware;
use crate::model::{ChatModel, ModelOptions, ResponseFormat};
use crate::retry::ModelRetry;
use crate::tool::{ArgsValidator, Tool, ToolRegistry, ToolSpec};

pub use memory::{AgentMemory, MEMORY_TOOLS};
pub use run::{AgentRun, CompiledAgent};
pub use tools::{ToolApproval, TOOL_APPROVAL};
pub(crate) use turn::Ids;

/// Default limit of model turns per agent and run.
pub const DEFAULT_MAX_TURNS: u32 = 25;
/// Default number of times an agent asks again for structured output that
/// did not match its schema.
pub const DEFAULT_MAX_REASKS: u32 = 2;

/// The state agents run on. Several agents can share one graph: each keeps
/// its own counters and structured answer under its name, and sees the
/// input, its own messages and the other agents' answers
/// ([`Message::visible_to`]).
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[graph_state(crate = tollgate_engine)]
pub struct AgentState {
    /// The conversation (replace or remove messages by id).
    #[reducer(messages)]
    pub messages: Vec<Message>,
    /// Each agent's validated structured answer, by agent.
    #[reducer(merge)]
    pub structured: BTreeMap<String, Value>,
    /// Each agent's counters, by agent.
    #[reducer(merge)]
    pub progress: BTreeMap<String, AgentProgress>,
    /// Values the run was started with (a blueprint input's `context`:
    /// `{"user_id": "42"}`): memory namespace templates are filled from
    /// them, and tools read them ([`RunContext::value`](crate::RunContext::value)).
    #[reducer(merge)]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context: BTreeMap<String, Value>,
}

/// An agent's counters, part of the run's state (so a scripted model's
/// position survives crashes and moves between processes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentProgress {
    /// Model calls made, failed attempts and re-asks included.
    pub model_calls: u64,
    /// Model turns taken (one per run of the model node).
    pub turns: u32,
}

/// An agent, built up before it is compiled into a graph.
///
/// ```
/// use std::sync::Arc;
/// use tollgate_nodes::{Agent, ScriptReply, ScriptedModel};
///
/// let model = ScriptedModel::new("m", vec![ScriptReply::Text("hello".into())]);
/// let agent = Agent::new("greeter", Arc::new(model)).system("Greet people.").compile().unwrap();
/// assert_eq!(agent.graph().name(), "greeter");
/// ```
pub struct Agent {
    pub(crate) name: String,
    pub(crate) version: u32,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) system: Option<String>,
    pub(crate) tools: ToolRegistry,
    pub(crate) allow: Option<BTreeSet<String>>,
    pub(crate) approval: BTreeSet<String>,
    /// Tools whose rejection ends the run (`rejected`) instead of telling
    /// the model.
    pub(crate) ends_on_reject: BTreeSet<String>,
    /// Tools whose failure fails the run instead of telling the model.
    pub(crate) fails_run: BTreeSet<String>,
    pub(crate) middleware: Vec<Arc<dyn Middleware>>,
    pub(crate) response_format: ResponseFormat,
    pub(crate) max_turns: u32,
    pub(crate) max_reasks: u32,
    pub(crate) retry: ModelRetry,
    pub(crate) options: ModelOptions,
    pub(crate) streaming: bool,
    pub(crate) tool_timeout: Option<Duration>,
    pub(crate) persona_stages: bool,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.name)
            .field("model", &self.model.name())
            .field("tools", &self.tools.names().collect::<Vec<_>>())
            .field("approval", &self.approval)
            .field("response_format", &self.response_format)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent named `name` (graph name, node name, event `agent` field)
    /// answering with `model`.
    pub fn new(name: impl Into<String>, model: Arc<dyn ChatModel>) -> Self {
        Self {
            name: name.into(),
            version: 1,
            model,
            system: None,
            tools: ToolRegistry::new(),
            allow: None,
            approval: BTreeSet::new(),
            ends_on_reject: BTreeSet::new(),
            fails_run: BTreeSet::new(),
            middleware: Vec::new(),
            response_format: ResponseFormat::Text,
            max_turns: DEFAULT_MAX_TURNS,
            max_reasks: DEFAULT_MAX_REASKS,
            retry: ModelRetry::default(),
            options: ModelOptions::default(),
            streaming: false,
            tool_timeout: None,
            persona_stages: false,
        }
    }

    /// The graph version runs are pinned to (1 by default).
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// The system prompt.
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools = self.tools.register(tool);
        self
    }

    /// Uses the tools of `registry` (all of them, unless [`Agent::allow`]
    /// narrows them).
    pub fn tools(mut self, registry: ToolRegistry) -> Self {
        self.tools = registry;
        self
    }

    /// The allowlist: only these tools are shown to the model and only
    /// these are ever called. Each must be registered.
    pub fn allow<T: Into<String>>(mut self, tools: impl IntoIterator<Item = T>) -> Self {
        self.allow = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Tools that need a person's approval before each call (an interrupt
    /// of kind `tool_approval`: approve, edit the arguments, or reject, in
    /// which case the model is told).
    pub fn require_approval<T: Into<String>>(mut self, tools: impl IntoIterator<Item = T>) -> Self {
        self.approval.extend(tools.into_iter().map(Into::into));
        self
    }

    /// Tools whose calls need approval (as [`Agent::require_approval`]) and
    /// whose rejection ends the run: it becomes `rejected`, with the
    /// reason, and the model is not called again (by default a rejection
    /// is told to the model, which carries on).
    pub fn end_run_on_reject<T: Into<String>>(
        mut self,
        tools: impl IntoIterator<Item = T>,
    ) -> Self {
        for tool in tools {
            let tool = tool.into();
            self.approval.insert(tool.clone());
            self.ends_on_reject.insert(tool);
        }
        self
    }

    /// Adds a middleware; the first added is the outermost.
    pub fn middleware(mut self, middleware: impl Middleware + 'static) -> Self {
        self.middleware.push(Arc::new(middleware));
        self
    }

    /// Long-term memory: the `remember` and `recall` tools it names, and
    /// memories recalled into the system prompt, under its namespace. The
    /// memory itself is the run's ([`NodeContext::memory`]).
    pub fn memory(mut self, memory: AgentMemory) -> Self {
        let (tools, prompt) = memory.parts();
        for tool in tools {
            self.tools = self.tools.register(tool);
        }
        if let Some(prompt) = prompt {
            self.middleware.push(Arc::new(prompt));
        }
        self
    }

    /// The shape of the final answer.
    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        self.response_format = format;
        self
    }

    /// Model turns allowed per run ([`DEFAULT_MAX_TURNS`]).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.max_turns = turns;
        self
    }

    /// Re-asks for invalid structured output ([`DEFAULT_MAX_REASKS`]).
    pub fn max_reasks(mut self, reasks: u32) -> Self {
        self.max_reasks = reasks;
        self
    }

    /// The retry policy of model calls.
    pub fn retry(mut self, retry: ModelRetry) -> Self {
        self.retry = retry;
        self
    }

    /// Sampling settings passed to the provider.
    pub fn options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// Streams model replies, reporting `model_delta` events.
    pub fn streaming(mut self, streaming: bool) -> Self {
        self.streaming = streaming;
        self
    }

    /// Reports who holds the work as `persona_stage` events (off by
    /// default; graph blueprints with several agents turn it on): when
    /// this agent takes the work over from another agent (`handoff`, by
    /// the agent that held it, then `started`), and when it gives its final
    /// answer (`completed`). Taking over is seen from the conversation: the
    /// last assistant message was another agent's (or none).
    pub fn persona_stages(mut self, on: bool) -> Self {
        self.persona_stages = on;
        self
    }

    /// Tools whose failure (an error, a timeout) fails the run, the error
    /// recorded, instead of being told to the model as the call's result
    /// (the default).
    pub fn fail_run_on_error<T: Into<String>>(
        mut self,
        tools: impl IntoIterator<Item = T>,
    ) -> Self {
        self.fails_run.extend(tools.into_iter().map(Into::into));
        self
    }

    /// Limit of each tool call (none by default; command tools have their
    /// own).
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.tool_timeout = Some(timeout);
        self
    }

    /// Checks the agent and adds its nodes to `graph`: `NAME` (the model)
    /// and `NAME.tools`, with a route from the model to the tools when it
    /// calls any (labelled `calls tools`) and to `then` (other nodes, or
    /// [`END`]) when it answers (`answers`). Edges into the agent go to
    /// `NAME`. An agent with no tools (and no output tool) has no
    /// `NAME.tools`: the model leads straight to `then`, and a model that
    /// calls a tool anyway fails the node with
    /// [`HarnessError::ToolCallWithoutTools`].
    pub fn add_to(
        self,
        graph: StateGraph<AgentState>,
        then: &[&str],
    ) -> Result<StateGraph<AgentState>, HarnessError> {
        let core = Arc::new(self.check()?);
        let name = core.name.clone();
        let model_core = Arc::clone(&core);
        let graph = graph.node(name.clone(), move |state: Arc<AgentState>, ctx: NodeContext| {
            let core = Arc::clone(&model_core);
            async move { Ok(turn::model_turn(&core, &state, &ctx).await?) }
        });
        if core.specs.is_empty() {
            return Ok(then.iter().fold(graph, |graph, target| graph.edge(name.clone(), *target)));
        }
        let tools_node = core.tools_node.clone();
        let (tools_core, route_core) = (Arc::clone(&core), core);
        let mut targets = vec![tools_node.clone()];
        targets.extend(then.iter().map(|target| (*target).to_owned()));
        let answered: Vec<String> = then.iter().map(|target| (*target).to_owned()).collect();
        let graph = graph
            .node(tools_node.clone(), move |state: Arc<AgentState>, ctx: NodeContext| {
                let core = Arc::clone(&tools_core);
                async move { tools::tools_turn(&core, &state, &ctx).await }
            })
            .edge(tools_node.clone(), name.clone())
            .label(name.clone(), tools_node, "calls tools")
            .route(name.clone(), targets, move |state: &AgentState| {
                if route_core.wants_tools(state) {
                    Route::to(route_core.tools_node.clone())
                } else {
                    Route::all(answered.iter().cloned())
                }
            });
        Ok(then.iter().fold(graph, |graph, target| graph.label(name.clone(), *target, "answers")))
    }

    /// Compiles the agent alone into a graph named after it: `START ->
    /// NAME <-> NAME.tools`, `NAME -> END` (without `NAME.tools` for an
    /// agent with no tools).
    pub fn compile(self) -> Result<CompiledAgent, HarnessError> {
        let name = self.name.clone();
        let graph =
            StateGraph::<AgentState>::new(name.clone(), self.version).edge(START, name.clone());
        let graph = self.add_to(graph, &[END])?.compile()?;
        Ok(CompiledAgent::new(name, graph))
    }

    /// Validates the configuration into what the nodes share.
    fn check(self) -> Result<AgentCore, HarnessError> {
        let mut tools = BTreeMap::new();
        let names: Vec<String> = match &self.allow {
            Some(allow) => allow.iter().cloned().collect(),
            None => self.tools.names().map(str::to_owned).collect(),
        };
        for name in names {
            let tool = self.tools.get(&name).ok_or_else(|| HarnessError::MissingTool {
                agent: self.name.clone(),
                tool: name.clone(),
            })?;
            let validator = ArgsValidator::new(&name, &tool.spec().parameters)?;
            tools.insert(name, (Arc::clone(tool), validator));
        }
        for name in &self.approval {
            if !tools.contains_key(name) {
                return Err(HarnessError::MissingTool {
                    agent: self.name.clone(),
                    tool: name.clone(),
                });
            }
        }
        let output = match &self.response_format {
            ResponseFormat::Text => None,
            ResponseFormat::ToolStrategy { tool_name, schema } => {
                if tools.contains_key(tool_name) {
                    return Err(HarnessError::InvalidToolSchema {
                        tool: tool_name.clone(),
                        message: "the output tool's name is taken by a real tool".into(),
                    });
                }
                Some(ArgsValidator::new(tool_name, &schema.schema)?)
            }
            ResponseFormat::JsonSchema(schema) | ResponseFormat::ProviderNative(schema) => {
                Some(ArgsValidator::new(&schema.name, &schema.schema)?)
            }
        };
        let mut specs: Vec<ToolSpec> =
            tools.values().map(|(tool, _)| tool.spec().clone()).collect();
        if let ResponseFormat::ToolStrategy { tool_name, schema } = &self.response_format {
            specs.push(ToolSpec::new(
                tool_name.clone(),
                "Give your final answer by calling this tool with it.",
                schema.schema.clone(),
            ));
        }
        Ok(AgentCore {
            tools_node: format!("{}.tools", self.name),
            name: self.name,
            model: self.model,
            system: self.system,
            tools,
            specs,
            approval: self.approval,
            ends_on_reject: self.ends_on_reject,
            fails_run: self.fails_run,
            middleware: self.middleware,
            response_format: self.response_format,
            output,
            max_turns: self.max_turns,
            max_reasks: self.max_reasks,
            retry: self.retry,
            options: self.options,
            streaming: self.streaming,
            tool_timeout: self.tool_timeout,
            persona_stages: self.persona_stages,
        })
    }
}

/// What an agent's nodes share, checked.
pub(crate) struct AgentCore {
    pub(crate) name: String,
    pub(crate) tools_node: String,
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) system: Option<String>,
    /// Allowed tools with their argument validators.
    pub(crate) tools: BTreeMap<String, (Arc<dyn Tool>, ArgsValidator)>,
    /// What the model is shown (allowed tools, then the output tool).
    pub(crate) specs: Vec<ToolSpec>,
    pub(crate) approval: BTreeSet<String>,
    pub(crate) ends_on_reject: BTreeSet<String>,
    pub(crate) fails_run: BTreeSet<String>,
    pub(crate) middleware: Vec<Arc<dyn Middleware>>,
    pub(crate) response_format: ResponseFormat,
    pub(crate) output: Option<ArgsValidator>,
    pub(crate) max_turns: u32,
    pub(crate) max_reasks: u32,
    pub(crate) retry: ModelRetry,
    pub(crate) options: ModelOptions,
    pub(crate) streaming: bool,
    pub(crate) tool_timeout: Option<Duration>,
    pub(crate) persona_stages: bool,
}

impl AgentCore {
    /// The agent's last message, if it is an assistant message calling
    /// tools that have no results yet.
    pub(crate) fn pending_calls<'s>(&self, state: &'s AgentState) -> Option<&'s Message> {
        let last = state.messages.iter().rev().find(|m| m.agent() == Some(self.name.as_str()))?;
        (matches!(last, Message::Assistant { .. }) && !last.tool_calls().is_empty()).then_some(last)
    }

    fn wants_tools(&self, state: &AgentState) -> bool {
        self.pending_calls(state).is_some()
    }
}
