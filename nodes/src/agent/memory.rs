//! Long-term memory for agents: `remember` and `recall` tools, and
//! memories recalled into the system prompt before each model call.

use std::collections::BTreeSet;

use async_trait::async_trait;
use serde_json::{json, Value};
use tollgate_checkpoint::{Filter, Memory, Namespace, PutOp, SearchOp};

use crate::context::RunContext;
use crate::error::HarnessError;
use crate::message::Message;
use crate::middleware::Middleware;
use crate::model::ModelRequest;
use crate::tool::{Tool, ToolContext, ToolSpec};

/// The built-in memory tools.
pub const MEMORY_TOOLS: [&str; 2] = ["remember", "recall"];

/// An agent's long-term memory: where its memories live (a namespace whose
/// parts may name values of the run's context, `{user_id}`), which
/// built-in tools it gets, and how many memories are recalled into its
/// system prompt before each model call.
///
/// ```
/// use tollgate_nodes::AgentMemory;
///
/// let memory = AgentMemory::new(["users", "{user_id}", "memories"]).recall_into_prompt(3);
/// assert_eq!(memory.namespace(), ["users", "{user_id}", "memories"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMemory {
    namespace: Vec<String>,
    tools: BTreeSet<String>,
    prompt: usize,
}

impl AgentMemory {
    /// Memories under `namespace` (parts written `{name}` are filled from
    /// the run's context), with both tools and nothing recalled into the
    /// prompt.
    pub fn new<T: Into<String>>(namespace: impl IntoIterator<Item = T>) -> Self {
        Self {
            namespace: namespace.into_iter().map(Into::into).collect(),
            tools: MEMORY_TOOLS.iter().map(|tool| (*tool).to_owned()).collect(),
            prompt: 0,
        }
    }

    /// Only these of the built-in tools ([`MEMORY_TOOLS`]).
    pub fn tools<T: Into<String>>(mut self, tools: impl IntoIterator<Item = T>) -> Self {
        self.tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Before each model call, the `top` memories best matching the last
    /// user message (the newest, without an index) are added to the system
    /// prompt.
    pub fn recall_into_prompt(mut self, top: usize) -> Self {
        self.prompt = top;
        self
    }

    /// The namespace as written.
    pub fn namespace(&self) -> &[String] {
        &self.namespace
    }

    /// The namespace for one run: every `{name}` part filled from its
    /// context (strings as they are, numbers as written).
    pub fn resolve(&self, cx: &RunContext) -> Result<Namespace, HarnessError> {
        let mut parts = Vec::with_capacity(self.namespace.len());
        for part in &self.namespace {
            let filled = match part.strip_prefix('{').and_then(|rest| rest.strip_suffix('}')) {
                Some(name) => match cx.value(name) {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Number(number)) => number.to_string(),
                    _ => {
                        return Err(HarnessError::MemoryTemplate {
                            template: part.clone(),
                            name: name.to_owned(),
                        })
                    }
                },
                None => part.clone(),
            };
            parts.push(filled);
        }
        Namespace::new(parts).map_err(|error| HarnessError::Memory { source: Box::new(error) })
    }

    /// The tools and middleware the agent gets.
    pub(crate) fn parts(&self) -> (Vec<MemoryTool>, Option<RecallIntoPrompt>) {
        let tools = self
            .tools
            .iter()
            .filter_map(|name| match name.as_str() {
                "remember" => Some(MemoryTool::remember(self.clone())),
                "recall" => Some(MemoryTool::recall(self.clone())),
                _ => None,
            })
            .collect();
        let prompt = (self.prompt > 0).then(|| RecallIntoPrompt { memory: self.clone() });
        (tools, prompt)
    }

    /// Names in `tools` that are not built-in memory tools.
    pub fn unknown_tools(&self) -> Vec<String> {
        self.tools.iter().filter(|tool| !MEMORY_TOOLS.contains(&tool.as_str())).cloned().collect()
    }
}

fn memory(cx: &RunContext) -> Result<&Memory, HarnessError> {
    cx.memory().ok_or_else(|| HarnessError::NoMemory { agent: cx.agent().to_owned() })
}

fn failed(error: tollgate_checkpoint::ItemError) -> HarnessError {
    HarnessError::Memory { source: Box::new(error) }
}

/// `remember` or `recall`.
#[derive(Debug)]
pub(crate) struct MemoryTool {
    spec: ToolSpec,
    memory: AgentMemory,
}

impl MemoryTool {
    fn remember(memory: AgentMemory) -> Self {
        let spec = ToolSpec::new(
            "remember",
            "Save a fact worth remembering across conversations (a preference, a \
             decision, something learned). Saving under an existing key replaces it.",
            json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "The fact, in one sentence."},
                    "kind": {"type": "string", "description": "Optional category, such as pref or fact."},
                    "key": {"type": "string", "description": "Optional key, to replace a memory saved before."}
                },
                "required": ["text"]
            }),
        );
        Self { spec, memory }
    }

    fn recall(memory: AgentMemory) -> Self {
        let spec = ToolSpec::new(
            "recall",
            "Search what was remembered in earlier conversations.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for."},
                    "kind": {"type": "string", "description": "Only memories of this category."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50}
                }
            }),
        );
        Self { spec, memory }
    }
}

#[async_trait]
impl Tool for MemoryTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<Value, HarnessError> {
        let Some(cx) = ctx.run() else {
            return Err(HarnessError::NoMemory { agent: ctx.agent().to_owned() });
        };
        let memory_store = memory(cx)?;
        let namespace = self.memory.resolve(cx)?;
        match self.spec.name.as_str() {
            "remember" => {
                // The call's idempotency key: a retried or replayed call
                // writes the same item again, not a second one.
                let key = match args["key"].as_str() {
                    Some(key) => key.to_owned(),
                    None => format!("m-{}", ctx.idempotency_key().replace(':', "-")),
                };
                let mut value = json!({"text": args["text"]});
                if let Some(kind) = args["kind"].as_str() {
                    value["kind"] = json!(kind);
                }
                memory_store
                    .put_op(PutOp::new(namespace, key.clone(), value))
                    .await
                    .map_err(failed)?;
                Ok(json!({"saved": key}))
            }
            _ => {
                let limit = args["limit"].as_u64().unwrap_or(5).clamp(1, 50) as usize;
                let mut search = SearchOp::new(namespace).limit(limit);
                if let Some(kind) = args["kind"].as_str() {
                    let filter = Filter::from_json(&json!({"kind": kind})).map_err(failed)?;
                    search = search.filter(filter);
                }
                if let Some(query) =
                    args["query"].as_str().filter(|_| memory_store.index().is_some())
                {
                    search = search.query(query);
                }
                let items = memory_store.search(search).await.map_err(failed)?;
                let found: Vec<Value> = items
                    .into_iter()
                    .map(|item| {
                        let mut found = json!({"key": item.key, "memory": item.value});
                        if let Some(score) = item.score {
                            found["score"] = json!((score * 1000.0).round() / 1000.0);
                        }
                        found
                    })
                    .collect();
                Ok(json!({"memories": found}))
            }
        }
    }
}

/// Adds the memories best matching the last user message to the system
/// prompt before each model call.
#[derive(Debug)]
pub(crate) struct RecallIntoPrompt {
    memory: AgentMemory,
}

#[async_trait]
impl Middleware for RecallIntoPrompt {
    fn name(&self) -> &str {
        "memory"
    }

    async fn before_model(
        &self,
        request: &mut ModelRequest,
        cx: &RunContext,
    ) -> Result<(), HarnessError> {
        let memory_store = memory(cx)?;
        let namespace = self.memory.resolve(cx)?;
        let mut search = SearchOp::new(namespace).limit(self.memory.prompt);
        let asked = request.messages.iter().rev().find_map(|message| match message {
            Message::User { content, .. } => Some(content.clone()),
            _ => None,
        });
        if let Some(asked) = asked.filter(|_| memory_store.index().is_some()) {
            search = search.query(asked);
        }
        let items = memory_store.search(search).await.map_err(failed)?;
        if items.is_empty() {
            return Ok(());
        }
        let lines: Vec<String> = items
            .iter()
            .map(|item| match &item.value["text"] {
                Value::String(text) => format!("- {text}"),
                _ => format!("- {}", item.value),
            })
            .collect();
        let recalled =
            format!("What you remember from earlier conversations:\n{}", lines.join("\n"));
        request.system = Some(match request.system.take() {
            Some(system) => format!("{system}\n\n{recalled}"),
            None => recalled,
        });
        Ok(())
    }
}
