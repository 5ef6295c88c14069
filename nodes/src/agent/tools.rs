//! The tools node: runs the tool calls of the agent's last model turn.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate_engine::{
    format_rfc3339, Decision, DecisionKind, Event, Interrupt, MessageOp, NodeContext, NodeError,
};
use tracing::Instrument;

use super::turn::{emit, Ids, NodeHooks};
use super::{AgentCore, AgentState, AgentStateUpdate};
use crate::command::shorten;
use crate::context::RunContext;
use crate::error::HarnessError;
use crate::message::{Message, ToolCall};
use crate::middleware::{ToolHandler, ToolNext};
use crate::telemetry;
use crate::tool::{Tool, ToolContext};

/// The interrupt kind of a tool call waiting for approval.
pub const TOOL_APPROVAL: &str = "tool_approval";

/// What a [`TOOL_APPROVAL`] interrupt shows the person deciding (its
/// payload): `{"agent", "tool", "call_id", "args", "description"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolApproval {
    /// The agent whose model asked for the call.
    pub agent: String,
    /// The tool.
    pub tool: String,
    /// The model's id for the call.
    pub call_id: String,
    /// The arguments the model gave.
    pub args: Value,
    /// What the tool does, in its own words (absent when it says
    /// nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// What becomes of one call.
enum Plan {
    /// Run it with these arguments.
    Run(Value),
    /// Run it with arguments a person edited (the model's call is
    /// rewritten to show them).
    Edited(Value),
    /// Do not run it; tell the model this.
    Refuse(String),
}

pub(crate) async fn tools_turn(
    core: &AgentCore,
    state: &AgentState,
    ctx: &NodeContext,
) -> Result<AgentStateUpdate, NodeError> {
    let Some(message) = core.pending_calls(state) else {
        return Ok(AgentStateUpdate::default());
    };
    let calls = message.tool_calls().to_vec();
    // 1. Refuse what is not allowed or malformed; ask about the rest that
    //    needs approval, in call order, before anything runs (a pause then
    //    re-runs this node from the start with nothing done twice).
    let mut plans = Vec::with_capacity(calls.len());
    for call in &calls {
        let plan = match core.tools.get(&call.name) {
            None => Plan::Refuse(format!(
                "Error: tool `{}` is not available to this agent. Available: {}.",
                call.name,
                core.tools.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            Some((_, validator)) => match validator.errors(&call.args) {
                errors if !errors.is_empty() => Plan::Refuse(format!(
                    "Error: {}",
                    HarnessError::InvalidToolArguments { tool: call.name.clone(), errors }
                )),
                _ if core.approval.contains(&call.name) => approve(core, ctx, call)?,
                _ => Plan::Run(call.args.clone()),
            },
        };
        plans.push(plan);
    }
    // An edited call shows in the model's message with the arguments it
    // ran with (as LangChain's human-in-the-loop middleware rewrites it).
    let rewritten = rewrite_edited(message, &plans);
    // 2. Run the approved calls concurrently; results in call order.
    let ids = Ids::new(&core.name, ctx);
    let runs = calls.iter().zip(plans).map(|(call, plan)| async move {
        match plan {
            Plan::Refuse(reason) => {
                emit(
                    ctx,
                    Event::Custom {
                        name: "tool_refused".into(),
                        payload: json!({"agent": core.name, "call_id": call.id, "tool": call.name, "reason": reason}),
                    },
                );
                (reason, true, false)
            }
            Plan::Run(args) | Plan::Edited(args) => {
                let call = ToolCall::new(call.id.clone(), call.name.clone(), args);
                let (content, failed) = run_call(core, ctx, &state.context, call).await;
                (content, failed, failed)
            }
        }
    });
    let results = join_all(runs.collect()).await;
    // A failed call of a tool that fails the run: the run fails with it
    // (refusals before the call are told to the model either way).
    for (call, (content, _, failed)) in calls.iter().zip(&results) {
        if *failed && core.fails_run.contains(&call.name) {
            let message = content.strip_prefix("Error: ").unwrap_or(content).to_owned();
            return Err(HarnessError::ToolFailed { tool: call.name.clone(), message }.into());
        }
    }
    let tool_messages = calls.iter().zip(results).map(|(call, (content, is_error, _))| {
        MessageOp::Upsert(Message::Tool {
            id: ids.next(),
            agent: Some(core.name.clone()),
            call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error,
        })
    });
    let messages = rewritten.map(MessageOp::Upsert).into_iter().chain(tool_messages).collect();
    Ok(AgentStateUpdate::default().messages(messages))
}

/// The model's `message` with each call a person edited carrying the
/// edited arguments, or `None` when no call was edited.
fn rewrite_edited(message: &Message, plans: &[Plan]) -> Option<Message> {
    if !plans.iter().any(|plan| matches!(plan, Plan::Edited(_))) {
        return None;
    }
    let mut message = message.clone();
    if let Message::Assistant { tool_calls, .. } = &mut message {
        for (call, plan) in tool_calls.iter_mut().zip(plans) {
            if let Plan::Edited(args) = plan {
                call.args = args.clone();
            }
        }
    }
    Some(message)
}

/// Asks a person about `call` (or reads the recorded answer).
fn approve(core: &AgentCore, ctx: &NodeContext, call: &ToolCall) -> Result<Plan, NodeError> {
    let (tool, validator) = &core.tools[&call.name];
    let spec = tool.spec();
    let payload = json!(ToolApproval {
        agent: core.name.clone(),
        tool: call.name.clone(),
        call_id: call.id.clone(),
        args: call.args.clone(),
        // What the tool does, in its own words, for the person deciding.
        description: Some(spec.description.clone()).filter(|text| !text.is_empty()),
    });
    let mut request = Interrupt::new(TOOL_APPROVAL, payload)
        .allow([DecisionKind::Approve, DecisionKind::Edit, DecisionKind::Reject])
        .schema(spec.parameters.clone());
    // A rejection comes back here to be told to the model, unless it ends
    // the run.
    if !core.ends_on_reject.contains(&call.name) {
        request = request.handle_rejection();
    }
    Ok(match ctx.interrupt(request)? {
        Decision::Edit { value } => match validator.errors(&value) {
            errors if errors.is_empty() => Plan::Edited(value),
            errors => Plan::Refuse(format!(
                "Error: the edited arguments are invalid: {}",
                errors.join("; ")
            )),
        },
        Decision::Reject { reason } => Plan::Refuse(match reason {
            Some(reason) => format!("A person rejected this call: {reason}"),
            None => "A person rejected this call.".to_owned(),
        }),
        // Approve (and `respond`, which the interrupt does not accept).
        _ => Plan::Run(call.args.clone()),
    })
}

/// Runs one call through the middleware, reporting `tool_started` and
/// `tool_completed`; returns the result text and whether it is an error.
async fn run_call(
    core: &AgentCore,
    ctx: &NodeContext,
    values: &BTreeMap<String, Value>,
    call: ToolCall,
) -> (String, bool) {
    let (tool, _) = &core.tools[&call.name];
    let span = telemetry::tool_span(&core.name, &call.name, &call.id, ctx);
    async {
        emit(
            ctx,
            Event::ToolStarted {
                agent: core.name.clone(),
                call_id: call.id.clone(),
                tool: call.name.clone(),
                args: call.args.clone(),
                started_at: format_rfc3339(ctx.now_ms()),
            },
        );
        // The run's clock, so a fixed clock gives reproducible logs.
        let started = ctx.now_ms();
        let hooks = NodeHooks { agent: &core.name, ctx };
        let cx = RunContext::new(ctx, &core.name, values);
        let inner = Call { core, ctx, tool: Arc::clone(tool), cx: cx.clone() };
        let next = ToolNext { rest: &core.middleware, inner: &inner, events: &hooks, cx: &cx };
        let (id, name, args) = (call.id.clone(), call.name.clone(), call.args.clone());
        let result = next.call(call).await;
        let (content, outcome) = match result {
            Ok(value) => (value.to_string(), "ok"),
            Err(error @ HarnessError::Timeout { .. }) => (format!("Error: {error}"), "timeout"),
            Err(error) => (format!("Error: {error}"), "error"),
        };
        telemetry::tool_called(&tracing::Span::current(), &name, outcome, &args, &content);
        let ok = outcome == "ok";
        emit(
            ctx,
            Event::ToolCompleted {
                agent: core.name.clone(),
                call_id: id,
                tool: name,
                ok,
                summary: shorten(&content, 200),
                duration_ms: ctx.now_ms().saturating_sub(started).max(0) as u64,
            },
        );
        (content, !ok)
    }
    .instrument(span)
    .await
}

/// The innermost tool call.
struct Call<'a> {
    core: &'a AgentCore,
    ctx: &'a NodeContext,
    tool: Arc<dyn Tool>,
    cx: RunContext,
}

impl ToolHandler for Call<'_> {
    fn handle(
        &self,
        call: ToolCall,
    ) -> Pin<Box<dyn Future<Output = Result<Value, HarnessError>> + Send + '_>> {
        Box::pin(async move {
            let progress_ctx = self.ctx.clone();
            let (agent, call_id) = (self.core.name.clone(), call.id.clone());
            let progress = Arc::new(move |stream: &str, line: &str| {
                emit(
                    &progress_ctx,
                    Event::ToolDelta {
                        agent: agent.clone(),
                        call_id: call_id.clone(),
                        stream: stream.to_owned(),
                        line: line.to_owned(),
                    },
                );
            });
            let context = ToolContext {
                agent: self.core.name.clone(),
                idempotency_key: format!("{}:{}", self.ctx.idempotency_key(), call.id),
                call_id: call.id,
                progress: Some(progress),
                run: Some(self.cx.clone()),
            };
            let work = self.tool.call(call.args, &context);
            match self.core.tool_timeout {
                None => work.await,
                Some(limit) => tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
                    Err(HarnessError::Timeout {
                        what: format!("tool `{}`", call.name),
                        after: limit,
                    })
                }),
            }
        })
    }
}

/// Awaits futures concurrently, results in input order (tool calls of one
/// turn run at the same time).
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(results.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(output) => *slot = Some(output),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().map(|slot| slot.expect("every future finished")).collect()
}
