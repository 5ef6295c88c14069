//! Tools: what a model may call, their argument schemas, and the registry.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context::RunContext;
use crate::error::HarnessError;

/// What the model is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments (an object).
    pub parameters: Value,
}

impl ToolSpec {
    /// A spec.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self { name: name.into(), description: description.into(), parameters }
    }
}

/// Reports a line of a tool's output: (stream, line).
pub(crate) type Progress = dyn Fn(&str, &str) + Send + Sync;

/// What a running tool call knows about itself.
#[derive(Clone)]
pub struct ToolContext {
    pub(crate) agent: String,
    pub(crate) call_id: String,
    pub(crate) idempotency_key: String,
    pub(crate) progress: Option<Arc<Progress>>,
    pub(crate) run: Option<RunContext>,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("agent", &self.agent)
            .field("call_id", &self.call_id)
            .field("idempotency_key", &self.idempotency_key)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context outside any run (for calling a tool directly, in tests).
    pub fn detached(call_id: impl Into<String>) -> Self {
        let call_id = call_id.into();
        Self {
            agent: String::new(),
            idempotency_key: call_id.clone(),
            call_id,
            progress: None,
            run: None,
        }
    }

    /// The agent calling.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The model's id for this call.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The same for every execution of this call (across retries, crashes
    /// and resumes): hand it to side effects that must not happen twice.
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }

    /// The run this call belongs to (none for a detached call).
    pub fn run(&self) -> Option<&RunContext> {
        self.run.as_ref()
    }

    /// Reports a line of progress (`stream` is `stdout` or `stderr`) as a
    /// `tool_delta` event.
    pub fn progress(&self, stream: &str, line: &str) {
        if let Some(progress) = &self.progress {
            progress(stream, line);
        }
    }
}

/// A tool a model can call.
///
/// The agent validates arguments against [`ToolSpec::parameters`] before
/// calling, so `call` sees only valid arguments. Cancellation is by drop
/// (a timeout drops the future; a command tool kills its process).
#[async_trait]
pub trait Tool: Send + Sync + fmt::Debug {
    /// Name, description and argument schema.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool. An error goes back to the model as the call's result.
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<Value, HarnessError>;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type ToolFn = dyn Fn(Value, ToolContext) -> BoxFuture<Result<Value, HarnessError>> + Send + Sync;

/// A tool from an async function of its JSON arguments.
#[derive(Clone)]
pub struct FnTool {
    spec: ToolSpec,
    run: Arc<ToolFn>,
}

impl fmt::Debug for FnTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool").field("spec", &self.spec).finish_non_exhaustive()
    }
}

impl FnTool {
    /// A tool described by `spec` that runs `run(args, ctx)`.
    pub fn new<F, Fut>(spec: ToolSpec, run: F) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, HarnessError>> + Send + 'static,
    {
        Self { spec, run: Arc::new(move |args, ctx| Box::pin(run(args, ctx))) }
    }

    /// A tool whose arguments are the Rust type `A`: its schema is
    /// generated from `A` (`schemars`) and the arguments are decoded into
    /// it before `run` sees them.
    pub fn typed<A, F, Fut>(name: &str, description: &str, run: F) -> Self
    where
        A: schemars::JsonSchema + DeserializeOwned + Send + 'static,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, HarnessError>> + Send + 'static,
    {
        let spec = ToolSpec::new(name, description, schemars::schema_for!(A).to_value());
        let tool = name.to_owned();
        let run = Arc::new(run);
        Self::new(spec, move |args, ctx| {
            let run = Arc::clone(&run);
            let tool = tool.clone();
            async move {
                let args = A::deserialize(args).map_err(|error| {
                    HarnessError::InvalidToolArguments { tool, errors: vec![error.to_string()] }
                })?;
                run(args, ctx).await
            }
        })
    }
}

#[async_trait]
impl Tool for FnTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<Value, HarnessError> {
        (self.run)(args, ctx.clone()).await
    }
}

/// A tool that always returns the same JSON (blueprint `fixture` tools).
#[derive(Debug, Clone)]
pub struct FixtureTool {
    spec: ToolSpec,
    result: Value,
}

impl FixtureTool {
    /// A tool that answers every call with `result`.
    pub fn new(spec: ToolSpec, result: Value) -> Self {
        Self { spec, result }
    }
}

#[async_trait]
impl Tool for FixtureTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<Value, HarnessError> {
        Ok(self.result.clone())
    }
}

/// Where agents find their tools, by name.
#[derive(Debug, Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `tool` under its spec's name (replacing one of that name).
    pub fn register(mut self, tool: impl Tool + 'static) -> Self {
        let tool: Arc<dyn Tool> = Arc::new(tool);
        self.tools.insert(tool.spec().name.clone(), tool);
        self
    }

    /// Registers a shared tool.
    pub fn register_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(tool.spec().name.clone(), tool);
        self
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Every tool's name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }
}

/// A compiled argument schema.
#[derive(Debug)]
pub(crate) struct ArgsValidator {
    validator: jsonschema::Validator,
}

impl ArgsValidator {
    pub(crate) fn new(tool: &str, schema: &Value) -> Result<Self, HarnessError> {
        jsonschema::validator_for(schema).map(|validator| Self { validator }).map_err(|error| {
            HarnessError::InvalidToolSchema { tool: tool.to_owned(), message: error.to_string() }
        })
    }

    /// Every violation, each with where it is (`/id: "x" is not of type
    /// "integer"`); empty when valid.
    pub(crate) fn errors(&self, args: &Value) -> Vec<String> {
        self.validator
            .iter_errors(args)
            .map(|error| {
                let path = error.instance_path().to_string();
                if path.is_empty() {
                    error.to_string()
                } else {
                    format!("{path}: {error}")
                }
            })
            .collect()
    }
}
