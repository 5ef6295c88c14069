//! Middleware: code around every model and tool call of an agent.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::context::RunContext;
use crate::error::HarnessError;
use crate::message::ToolCall;
use crate::model::{ModelRequest, ModelResponse};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Hooks around an agent's model and tool calls. Every hook has a default
/// that does nothing, so a middleware implements only what it needs.
///
/// Order: the first registered is the outermost. `before_model` hooks run
/// in registration order, `after_model` hooks in reverse; `wrap_*` hooks
/// nest like an onion (the first registered sees the call first and the
/// result last) and may call `next` zero times (a cache, a guard) or
/// several times (a fallback). Each hook's run is reported as
/// `middleware_started` / `middleware_completed` events.
///
/// Middleware keeps no state of its own across calls that matters to the
/// run: a run continued in another process gets fresh middleware.
#[async_trait]
pub trait Middleware: Send + Sync + fmt::Debug {
    /// The name events report.
    fn name(&self) -> &str;

    /// Before each model call: may change the request.
    async fn before_model(
        &self,
        _request: &mut ModelRequest,
        _cx: &RunContext,
    ) -> Result<(), HarnessError> {
        Ok(())
    }

    /// After each model call: may change the response.
    async fn after_model(
        &self,
        _request: &ModelRequest,
        _response: &mut ModelResponse,
        _cx: &RunContext,
    ) -> Result<(), HarnessError> {
        Ok(())
    }

    /// Around each model call (retries included). `next.context()` is the
    /// run.
    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: ModelNext<'_>,
    ) -> Result<ModelResponse, HarnessError> {
        next.call(request).await
    }

    /// Around each tool call (after validation and approval).
    /// `next.context()` is the run.
    async fn wrap_tool_call(
        &self,
        call: ToolCall,
        next: ToolNext<'_>,
    ) -> Result<Value, HarnessError> {
        next.call(call).await
    }
}

/// Reports hook runs as events.
pub(crate) trait HookEvents: Send + Sync {
    fn started(&self, middleware: &str, hook: &'static str);
    fn completed(&self, middleware: &str, hook: &'static str, ok: bool);
}

/// The innermost model call.
pub(crate) trait ModelHandler: Send + Sync {
    fn handle(&self, request: ModelRequest) -> BoxFuture<'_, Result<ModelResponse, HarnessError>>;
}

/// The innermost tool call.
pub(crate) trait ToolHandler: Send + Sync {
    fn handle(&self, call: ToolCall) -> BoxFuture<'_, Result<Value, HarnessError>>;
}

/// The rest of the model-call chain, handed to
/// [`Middleware::wrap_model_call`].
pub struct ModelNext<'a> {
    pub(crate) rest: &'a [Arc<dyn Middleware>],
    pub(crate) inner: &'a dyn ModelHandler,
    pub(crate) events: &'a dyn HookEvents,
    pub(crate) cx: &'a RunContext,
}

impl fmt::Debug for ModelNext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelNext").field("rest", &self.rest.len()).finish_non_exhaustive()
    }
}

impl<'a> ModelNext<'a> {
    /// The run this call belongs to.
    pub fn context(&self) -> &'a RunContext {
        self.cx
    }

    /// Calls the next middleware, or the model.
    pub fn call(self, request: ModelRequest) -> BoxFuture<'a, Result<ModelResponse, HarnessError>> {
        Box::pin(async move {
            match self.rest.split_first() {
                None => self.inner.handle(request).await,
                Some((first, rest)) => {
                    let next =
                        ModelNext { rest, inner: self.inner, events: self.events, cx: self.cx };
                    self.events.started(first.name(), "wrap_model_call");
                    let result = first.wrap_model_call(request, next).await;
                    self.events.completed(first.name(), "wrap_model_call", result.is_ok());
                    result
                }
            }
        })
    }
}

/// The rest of the tool-call chain, handed to
/// [`Middleware::wrap_tool_call`].
pub struct ToolNext<'a> {
    pub(crate) rest: &'a [Arc<dyn Middleware>],
    pub(crate) inner: &'a dyn ToolHandler,
    pub(crate) events: &'a dyn HookEvents,
    pub(crate) cx: &'a RunContext,
}

impl fmt::Debug for ToolNext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolNext").field("rest", &self.rest.len()).finish_non_exhaustive()
    }
}

impl<'a> ToolNext<'a> {
    /// The run this call belongs to.
    pub fn context(&self) -> &'a RunContext {
        self.cx
    }

    /// Calls the next middleware, or the tool.
    pub fn call(self, call: ToolCall) -> BoxFuture<'a, Result<Value, HarnessError>> {
        Box::pin(async move {
            match self.rest.split_first() {
                None => self.inner.handle(call).await,
                Some((first, rest)) => {
                    let next =
                        ToolNext { rest, inner: self.inner, events: self.events, cx: self.cx };
                    self.events.started(first.name(), "wrap_tool_call");
                    let result = first.wrap_tool_call(call, next).await;
                    self.events.completed(first.name(), "wrap_tool_call", result.is_ok());
                    result
                }
            }
        })
    }
}

/// Falls back to another model when the agent's model fails for good (after
/// its retries): the fallback answers the same request, and a `custom`
/// event `fallback_selected` records it (`{"model", "error"}`).
#[derive(Debug, Clone)]
pub struct ModelFallback {
    fallback: Arc<dyn crate::model::ChatModel>,
}

impl ModelFallback {
    /// Falls back to `fallback`.
    pub fn new(fallback: Arc<dyn crate::model::ChatModel>) -> Self {
        Self { fallback }
    }
}

#[async_trait]
impl Middleware for ModelFallback {
    fn name(&self) -> &str {
        "model_fallback"
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        next: ModelNext<'_>,
    ) -> Result<ModelResponse, HarnessError> {
        let cx = next.context();
        match next.call(request.clone()).await {
            Ok(response) => Ok(response),
            Err(error) => {
                let payload = serde_json::json!({
                    "model": self.fallback.name(),
                    "error": error.to_string(),
                    "class": error.class().as_str(),
                });
                cx.emit_custom("fallback_selected", payload)?;
                self.fallback.invoke(&request).await
            }
        }
    }
}
