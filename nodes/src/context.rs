//! What middleware and tools know about the run they serve.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tollgate_checkpoint::RunId;
use tollgate_engine::{EmitError, Event, NodeContext};

/// The run, agent and node instance a model or tool call belongs to, handed
/// to middleware hooks (and to tools through
/// [`ToolContext::run`](crate::ToolContext::run)). It can record `custom`
/// events in the run's log.
#[derive(Debug, Clone)]
pub struct RunContext {
    node: NodeContext,
    agent: String,
    values: Arc<BTreeMap<String, Value>>,
}

impl RunContext {
    pub(crate) fn new(node: &NodeContext, agent: &str, values: &BTreeMap<String, Value>) -> Self {
        let values = Arc::new(values.clone());
        Self { node: node.clone(), agent: agent.to_owned(), values }
    }

    /// A value the run was started with ([`AgentState::context`](crate::AgentState::context)).
    pub fn value(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    /// The run.
    pub fn run_id(&self) -> RunId {
        self.node.run_id()
    }

    /// Long-term memory, when the run has one
    /// ([`NodeContext::memory`]).
    pub fn memory(&self) -> Option<&tollgate_checkpoint::Memory> {
        self.node.memory()
    }

    /// The agent.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The node (`NAME` for model calls, `NAME.tools` for tool calls).
    pub fn node(&self) -> &str {
        self.node.node()
    }

    /// The super-step.
    pub fn step(&self) -> u64 {
        self.node.step()
    }

    /// The task's position in its step.
    pub fn task(&self) -> u32 {
        self.node.task()
    }

    /// The same for every execution of this node instance (retries,
    /// crashes, resumes).
    pub fn idempotency_key(&self) -> String {
        self.node.idempotency_key()
    }

    /// Milliseconds since the Unix epoch, from the run's clock.
    pub fn now_ms(&self) -> i64 {
        self.node.now_ms()
    }

    /// Records a `custom` event in the run's log.
    pub fn emit_custom(&self, name: impl Into<String>, payload: Value) -> Result<(), EmitError> {
        self.node.emit(Event::Custom { name: name.into(), payload })
    }
}
