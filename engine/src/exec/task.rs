//! One task of a super-step: breakpoints, the node call with its retry
//! policy and panic guard, interrupts, and the encoded output.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::json;
use tollgate_checkpoint::{__failpoint, Blob, Codec, RunId};

use crate::graph::CompiledGraph;
use crate::hitl::{Decision, DecisionKind, Interrupt, Raised, AFTER, BEFORE};
use crate::node::{splitmix64, NodeContext, NodeError, NodeFuture, NodeOutput, Signal};
use crate::route::Goto;
use crate::state::State;

use super::error::RunError;
use super::record::{TaskOutputRecord, TaskOutputRef, STATE_VERSION, TASK_OUTPUT_VERSION};

/// What a task came to.
pub(crate) enum Outcome<U> {
    /// It produced an output (encoded).
    Output(TaskOutputRecord<U>, Blob),
    /// It asked a person (a subgraph may ask several at once). A
    /// breakpoint after the node keeps the output it produced, to be
    /// stored and reused on resume.
    Paused { raised: Vec<Raised>, output: Option<(TaskOutputRecord<U>, Blob)> },
    /// It failed for good.
    Failed(RunError),
    /// Its subgraph stopped at a step boundary with the run (cancel,
    /// release); the step stays unfinished.
    Stopped,
    /// Its workflow sleeps until this time: the run goes back to the
    /// queue until then, the step unfinished.
    Sleeping(i64),
}

/// A finished task.
pub(crate) struct TaskDone<U> {
    pub(crate) index: u32,
    pub(crate) node: usize,
    pub(crate) attempts: u32,
    /// (attempt, delay, error) of each scheduled retry.
    pub(crate) retries: Vec<(u32, std::time::Duration, String)>,
    pub(crate) outcome: Outcome<U>,
    pub(crate) reused: bool,
    /// The output came from the node's cache.
    pub(crate) cached: bool,
    /// A rejected interrupt routed elsewhere: only its goto applies.
    pub(crate) rejected: bool,
}

/// Everything one task needs, owned, so it can run on another thread.
pub(crate) struct TaskRunner<S: State> {
    pub(crate) graph: CompiledGraph<S>,
    pub(crate) node: usize,
    pub(crate) state: Arc<S>,
    pub(crate) ctx: NodeContext,
    pub(crate) codec: Codec,
    pub(crate) break_before: bool,
    pub(crate) break_after: bool,
}

fn breakpoint(node: &str, when: &str, ordinal: u32) -> Raised {
    let request = Interrupt::new(crate::hitl::BREAKPOINT, json!({ "node": node, "when": when }))
        .allow([DecisionKind::Approve, DecisionKind::Reject]);
    Raised { ordinal, request, origin: None }
}

impl<S: State> TaskRunner<S> {
    pub(crate) async fn run(self) -> TaskDone<S::Update> {
        let node = self.graph.node(self.node);
        let mut ctx = self.ctx.clone();
        let (step, index) = (ctx.step, ctx.task);
        let cache = ctx.cache.clone();
        let done = |attempts, retries, outcome| TaskDone {
            index,
            node: self.node,
            attempts,
            retries,
            outcome,
            reused: false,
            cached: cache.as_ref().is_some_and(|cache| cache.hit()),
            rejected: false,
        };
        if self.break_before && !ctx.decisions.contains_key(&BEFORE) {
            let raised = vec![breakpoint(&node.name, "before", BEFORE)];
            return done(0, Vec::new(), Outcome::Paused { raised, output: None });
        }
        let max_attempts = node.retry.as_ref().map_or(1, |policy| policy.max_attempts);
        let mut retries = Vec::new();
        let result = loop {
            ctx.ordinal = AtomicU32::new(0);
            ctx.calls = AtomicU32::new(0);
            __failpoint("node:before");
            let future = (node.run)(Arc::clone(&self.state), ctx.clone());
            let result = CatchUnwind(future).await;
            __failpoint("node:after");
            match result {
                Ok(Ok(output)) => break Ok(output),
                Ok(Err(NodeError { signal: Some(signal), .. })) => {
                    let outcome = match *signal {
                        Signal::Paused(raised) => Outcome::Paused { raised, output: None },
                        Signal::Stopped => Outcome::Stopped,
                        Signal::Halted(error) => Outcome::Failed(error),
                        Signal::Sleep(until) => Outcome::Sleeping(until),
                    };
                    return done(ctx.attempt, retries, outcome);
                }
                Ok(Err(error)) if error.is_retryable() && ctx.attempt < max_attempts => {
                    let policy = node.retry.as_ref().expect("max_attempts > 1 implies a policy");
                    let seed =
                        splitmix64(ctx.run_id.timestamp_ms() ^ (step << 20) ^ u64::from(index));
                    let delay = policy.backoff(ctx.attempt, seed);
                    tracing::debug!(attempt = ctx.attempt, ?delay, %error, "retrying node");
                    retries.push((ctx.attempt, delay, error.to_string()));
                    tokio::time::sleep(delay).await;
                    ctx.attempt += 1;
                }
                Ok(Err(source)) => {
                    let name = node.name.to_string();
                    break Err(RunError::NodeFailed {
                        node: name,
                        step,
                        attempts: ctx.attempt,
                        source,
                    });
                }
                Err(()) => break Err(RunError::NodePanicked { node: node.name.to_string(), step }),
            }
        };
        let outcome = match result.and_then(|output| self.record(output, step, ctx.run_id)) {
            Err(error) => Outcome::Failed(error),
            Ok(output) if self.break_after && !ctx.decisions.contains_key(&AFTER) => {
                let raised = vec![breakpoint(&node.name, "after", AFTER)];
                Outcome::Paused { raised, output: Some(output) }
            }
            Ok((output, blob)) => Outcome::Output(output, blob),
        };
        done(ctx.attempt, retries, outcome)
    }

    fn record(
        &self,
        output: NodeOutput<S::Update>,
        step: u64,
        run: RunId,
    ) -> Result<(TaskOutputRecord<S::Update>, Blob), RunError> {
        let output = match output {
            NodeOutput::Update(update) => {
                TaskOutputRecord { update: Some(update), goto: Vec::<Goto>::new() }
            }
            NodeOutput::Command(command) => {
                TaskOutputRecord { update: command.update, goto: command.goto }
            }
        };
        encode_output(self.codec, output, run, step)
    }
}

/// Encodes a task's output (checked, see [`encode_checked`]).
pub(crate) fn encode_output<U: serde::Serialize + serde::de::DeserializeOwned>(
    codec: Codec,
    output: TaskOutputRecord<U>,
    run: RunId,
    step: u64,
) -> Result<(TaskOutputRecord<U>, Blob), RunError> {
    let borrowed = TaskOutputRef { update: output.update.as_ref(), goto: &output.goto };
    let blob = encode_checked::<_, TaskOutputRecord<U>>(codec, &borrowed, "update", run, step)?;
    Ok((output, blob))
}

/// The output of a task whose interrupt was rejected, when the graph routes
/// rejections of its node: no update, and on to the rejection target.
pub(crate) fn rejected<U: serde::Serialize + serde::de::DeserializeOwned>(
    codec: Codec,
    target: &str,
    run: RunId,
    step: u64,
) -> Result<(TaskOutputRecord<U>, Blob), RunError> {
    let goto = vec![Goto::Node(target.to_owned().into())];
    encode_output(codec, TaskOutputRecord { update: None, goto }, run, step)
}

/// Whether a task's decisions include a rejection.
pub(crate) fn is_rejected(decisions: &BTreeMap<u32, Decision>) -> bool {
    decisions.values().any(|decision| matches!(decision, Decision::Reject { .. }))
}

/// Encodes `value`; with a codec that is not self-describing, also decodes
/// the blob as `R` so a type the codec cannot read back fails now, at the
/// write, not at a resume days later.
pub(crate) fn encode_checked<T: serde::Serialize, R: serde::de::DeserializeOwned>(
    codec: Codec,
    value: &T,
    what: &'static str,
    run: RunId,
    step: u64,
) -> Result<Blob, RunError> {
    let version = if what == "state" { STATE_VERSION } else { TASK_OUTPUT_VERSION };
    let blob =
        codec.encode(value, version).map_err(|source| RunError::Encode { run, step, source })?;
    if !codec.is_self_describing() {
        if let Err(source) = blob.decode::<R>() {
            return Err(RunError::CodecRoundTrip { run, step, codec, what, source });
        }
    }
    Ok(blob)
}

/// Turns a panic inside a node's future into an error for that task.
struct CatchUnwind<U>(NodeFuture<U>);

impl<U> Future for CatchUnwind<U> {
    type Output = Result<Result<NodeOutput<U>, NodeError>, ()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(())),
        }
    }
}
