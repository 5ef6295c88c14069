//! The model node: one turn of an agent (a model call, with retries,
//! middleware and structured-output re-asks).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use serde_json::Value;
use tollgate_engine::{Event, MessageOp, NodeContext};
use tracing::Instrument;

use super::{AgentCore, AgentProgress, AgentState, AgentStateUpdate};
use crate::context::RunContext;
use crate::error::HarnessError;
use crate::message::Message;
use crate::middleware::{HookEvents, ModelHandler, ModelNext};
use crate::model::{DeltaSink, ModelRequest, ModelResponse, ResponseFormat, ToolChoice};
use crate::structured;
use crate::telemetry;

/// Ids of the messages and calls one node execution creates: unique across
/// runs (a thread's memory or a fork carries messages into another run),
/// and the same when the node runs again.
pub(crate) struct Ids {
    prefix: String,
    next: AtomicU32,
}

impl Ids {
    pub(crate) fn new(agent: &str, ctx: &NodeContext) -> Self {
        let prefix = format!("{agent}.{}.{}.{}", ctx.run_id(), ctx.step(), ctx.task());
        Self { prefix, next: AtomicU32::new(0) }
    }

    pub(crate) fn next(&self) -> String {
        format!("{}.{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// Emits middleware events through the node's context.
pub(crate) struct NodeHooks<'a> {
    pub(crate) agent: &'a str,
    pub(crate) ctx: &'a NodeContext,
}

impl HookEvents for NodeHooks<'_> {
    fn started(&self, middleware: &str, hook: &'static str) {
        emit(
            self.ctx,
            Event::MiddlewareStarted {
                agent: self.agent.to_owned(),
                middleware: middleware.to_owned(),
                hook: hook.to_owned(),
            },
        );
    }

    fn completed(&self, middleware: &str, hook: &'static str, ok: bool) {
        emit(
            self.ctx,
            Event::MiddlewareCompleted {
                agent: self.agent.to_owned(),
                middleware: middleware.to_owned(),
                hook: hook.to_owned(),
                ok,
            },
        );
    }
}

/// Emits a harness event; they are all node-emittable, so only an encoding
/// failure (impossible for these JSON values) could refuse it.
pub(crate) fn emit(ctx: &NodeContext, event: Event) {
    if let Err(error) = ctx.emit(event) {
        tracing::warn!(%error, "could not record a harness event");
    }
}

/// Runs one turn and returns the node's update.
pub(crate) async fn model_turn(
    core: &AgentCore,
    state: &AgentState,
    ctx: &NodeContext,
) -> Result<AgentStateUpdate, HarnessError> {
    let progress = state.progress.get(&core.name).cloned().unwrap_or_default();
    if progress.turns >= core.max_turns {
        return Err(HarnessError::TurnLimitExceeded {
            agent: core.name.clone(),
            limit: core.max_turns,
        });
    }
    let span = telemetry::agent_span(&core.name, ctx);
    let turn = async {
        if core.persona_stages {
            announce_takeover(core, state, ctx);
        }
        let ids = Ids::new(&core.name, ctx);
        let calls = AtomicU64::new(progress.model_calls);
        let (added, structured) = answers(core, state, ctx, &ids, &calls).await?;
        if core.persona_stages
            && added
                .iter()
                .rev()
                .find(|m| matches!(m, Message::Assistant { .. }))
                .is_some_and(|m| m.tool_calls().is_empty())
        {
            emit(ctx, persona(core, ctx.node(), "completed"));
        }
        let progress =
            AgentProgress { model_calls: calls.load(Ordering::SeqCst), turns: progress.turns + 1 };
        let mut update = AgentStateUpdate::default()
            .messages(added.into_iter().map(MessageOp::Upsert).collect())
            .progress([(core.name.clone(), progress)].into());
        if let Some(value) = structured {
            update = update.structured([(core.name.clone(), value)].into());
        }
        Ok(update)
    };
    let result = turn.instrument(span.clone()).await;
    if let Err(error) = &result {
        telemetry::failed(&span, error);
    }
    result
}

/// The messages one turn adds: the model's answer, asked again (up to
/// `max_reasks` times) while a structured answer does not match its
/// schema, with the corrections between; and the structured value, once
/// valid.
async fn answers(
    core: &AgentCore,
    state: &AgentState,
    ctx: &NodeContext,
    ids: &Ids,
    calls: &AtomicU64,
) -> Result<(Vec<Message>, Option<Value>), HarnessError> {
    let seen: Vec<Message> =
        state.messages.iter().filter(|m| m.visible_to(&core.name)).cloned().collect();
    let mut added: Vec<Message> = Vec::new();
    let mut reasks = 0;
    loop {
        let mut messages = seen.clone();
        messages.extend(added.iter().cloned());
        let response = call_model(core, ctx, &state.context, ids, calls, messages).await?;
        if let (true, Some(call)) = (core.specs.is_empty(), response.tool_calls.first()) {
            return Err(HarnessError::ToolCallWithoutTools {
                agent: core.name.clone(),
                tool: call.name.clone(),
            });
        }
        let message = Message::Assistant {
            id: ids.next(),
            agent: Some(core.name.clone()),
            content: response.content,
            tool_calls: response.tool_calls,
            usage: response.usage,
            reasoning: response.reasoning,
        };
        let verdict = structured::check(core, &message, ids);
        added.push(message);
        match verdict {
            structured::Verdict::Done { value, extra } => {
                added.extend(extra);
                return Ok((added, value));
            }
            structured::Verdict::Retry { errors, correction } => {
                if reasks >= core.max_reasks {
                    return Err(HarnessError::StructuredOutputInvalid {
                        agent: core.name.clone(),
                        attempts: reasks + 1,
                        errors,
                    });
                }
                reasks += 1;
                added.extend(correction);
            }
        }
    }
}

fn persona(core: &AgentCore, stage: &str, transition: &str) -> Event {
    Event::PersonaStage {
        persona: core.name.clone(),
        stage: stage.to_owned(),
        transition: transition.to_owned(),
    }
}

/// `handoff` (by the agent that held the work) and `started`, when the
/// conversation's last assistant message is not this agent's.
fn announce_takeover(core: &AgentCore, state: &AgentState, ctx: &NodeContext) {
    let holder = state
        .messages
        .iter()
        .rev()
        .find(|m| matches!(m, Message::Assistant { .. }))
        .and_then(Message::agent);
    if holder == Some(core.name.as_str()) {
        return;
    }
    if let Some(previous) = holder {
        emit(
            ctx,
            Event::PersonaStage {
                persona: previous.to_owned(),
                stage: ctx.node().to_owned(),
                transition: "handoff".into(),
            },
        );
    }
    emit(ctx, persona(core, ctx.node(), "started"));
}

/// One model call through the middleware stack, with retries innermost,
/// reported as `model_started` (per attempt) and `model_completed`.
async fn call_model(
    core: &AgentCore,
    ctx: &NodeContext,
    values: &BTreeMap<String, Value>,
    ids: &Ids,
    calls: &AtomicU64,
    messages: Vec<Message>,
) -> Result<ModelResponse, HarnessError> {
    let call_id = ids.next();
    let hooks = NodeHooks { agent: &core.name, ctx };
    let tool_choice = match &core.response_format {
        ResponseFormat::ToolStrategy { .. } => ToolChoice::Required,
        _ => ToolChoice::Auto,
    };
    let mut request = ModelRequest {
        agent: core.name.clone(),
        system: core.system.clone(),
        messages,
        tools: core.specs.clone(),
        tool_choice,
        response_format: core.response_format.clone(),
        options: core.options.clone(),
        call_index: calls.load(Ordering::SeqCst),
    };
    // The run's clock, so a fixed clock gives reproducible logs.
    let started = ctx.now_ms();
    let cx = RunContext::new(ctx, &core.name, values);
    for middleware in &core.middleware {
        hooks.started(middleware.name(), "before_model");
        let result = middleware.before_model(&mut request, &cx).await;
        hooks.completed(middleware.name(), "before_model", result.is_ok());
        result?;
    }
    let inner = Attempts { core, ctx, call_id: &call_id, calls };
    let next = ModelNext { rest: &core.middleware, inner: &inner, events: &hooks, cx: &cx };
    let model = core.model.name();
    let span = telemetry::chat_span(&core.name, model, ctx);
    let called = async {
        let mut response = next.call(request.clone()).await?;
        for middleware in core.middleware.iter().rev() {
            hooks.started(middleware.name(), "after_model");
            let result = middleware.after_model(&request, &mut response, &cx).await;
            hooks.completed(middleware.name(), "after_model", result.is_ok());
            result?;
        }
        Ok::<_, HarnessError>(response)
    }
    .instrument(span.clone())
    .await;
    let outcome = called.as_ref().map_err(|error| error as &dyn std::fmt::Display);
    telemetry::model_called(&span, model, &request, outcome);
    let response = called?;
    let message = serde_json::json!({
        "content": response.content,
        "tool_calls": response.tool_calls,
    });
    emit(
        ctx,
        Event::ModelCompleted {
            agent: core.name.clone(),
            call_id,
            model: core.model.name().to_owned(),
            message,
            usage: response.usage.map(|usage| serde_json::to_value(usage).unwrap_or(Value::Null)),
            duration_ms: ctx.now_ms().saturating_sub(started).max(0) as u64,
        },
    );
    Ok(response)
}

/// The innermost model call: attempts under the retry policy.
struct Attempts<'a> {
    core: &'a AgentCore,
    ctx: &'a NodeContext,
    call_id: &'a str,
    calls: &'a AtomicU64,
}

/// Forwards streamed text as `model_delta` events.
struct Deltas<'a> {
    agent: &'a str,
    call_id: &'a str,
    attempt: u32,
    ctx: &'a NodeContext,
}

impl DeltaSink for Deltas<'_> {
    fn text(&mut self, text: &str) {
        emit(
            self.ctx,
            Event::ModelDelta {
                agent: self.agent.to_owned(),
                call_id: self.call_id.to_owned(),
                attempt: self.attempt,
                text: text.to_owned(),
            },
        );
    }
}

impl ModelHandler for Attempts<'_> {
    fn handle(
        &self,
        mut request: ModelRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ModelResponse, HarnessError>> + Send + '_>> {
        Box::pin(async move {
            let core = self.core;
            let max = core.retry.backoff.max_attempts.max(1);
            let mut attempt = 1;
            loop {
                request.call_index = self.calls.fetch_add(1, Ordering::SeqCst);
                emit(
                    self.ctx,
                    Event::ModelStarted {
                        agent: core.name.clone(),
                        call_id: self.call_id.to_owned(),
                        model: core.model.name().to_owned(),
                        attempt,
                    },
                );
                let result = if core.streaming {
                    let mut deltas =
                        Deltas { agent: &core.name, call_id: self.call_id, attempt, ctx: self.ctx };
                    core.model.stream(&request, &mut deltas).await
                } else {
                    core.model.invoke(&request).await
                };
                let error = match result {
                    Ok(response) => return Ok(response),
                    Err(error) => error,
                };
                if !core.retry.retries(&error) {
                    return Err(error);
                }
                if attempt >= max {
                    return Err(HarnessError::RetryExhausted {
                        attempts: attempt,
                        last: Box::new(error),
                    });
                }
                let seed =
                    self.ctx.run_id().timestamp_ms() ^ (self.ctx.step() << 20) ^ request.call_index;
                let delay = core.retry.delay(attempt, seed, &error);
                emit(
                    self.ctx,
                    Event::RetryScheduled {
                        step: self.ctx.step(),
                        task: self.ctx.task(),
                        attempt,
                        delay_ms: delay.as_millis() as u64,
                        error: error.to_string(),
                        call_id: Some(self.call_id.to_owned()),
                    },
                );
                tracing::debug!(attempt, ?delay, %error, "retrying model call");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        })
    }
}
