//! Nodes: the functions a graph runs, what they see and how they fail.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tollgate_checkpoint::RunId;

use crate::event::Event;
use crate::exec::{node_id, Emitter, Live};
use crate::hitl::{Decision, Interrupt, Raised};
use crate::route::Command;
use crate::state::State;

/// What a node sees besides the state: where it runs and how much budget is
/// left.
#[derive(Debug)]
pub struct NodeContext {
    pub(crate) run_id: RunId,
    pub(crate) step: u64,
    pub(crate) task: u32,
    pub(crate) node: Arc<str>,
    pub(crate) max_steps: u64,
    pub(crate) attempt: u32,
    pub(crate) input: Option<Arc<Value>>,
    /// Decisions recorded for this task's interrupts, by ordinal.
    pub(crate) decisions: Arc<BTreeMap<u32, Decision>>,
    /// The next interrupt's ordinal in this attempt.
    pub(crate) ordinal: AtomicU32,
    /// The next graph call's number in this attempt ([`NodeContext::call`]).
    pub(crate) calls: AtomicU32,
    /// The leg's event numbering, shared with the driver.
    pub(crate) emitter: Arc<Emitter>,
    /// For a cached node: the store, and whether the output came from it.
    pub(crate) cache: Option<Arc<crate::exec::CacheAccess>>,
    /// Inside a subgraph: where (prefixed to node ids and names).
    pub(crate) ns: Option<Arc<Namespace>>,
    /// For a subgraph node: what it needs to run its graph.
    pub(crate) subgraph: Option<Arc<crate::exec::SubgraphAccess>>,
    /// Long-term memory, when the executor (or the run) has one.
    pub(crate) memory: Option<tollgate_checkpoint::Memory>,
}

/// Where a subgraph's nodes run, as their events name them: node ids
/// `review:3.0/draft:2.0`, node paths `review/draft`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Namespace {
    /// The enclosing task's id (`review:3.0`, or deeper).
    pub(crate) id: String,
    /// The enclosing node's path (`review`, or deeper).
    pub(crate) path: String,
}

impl Namespace {
    /// A node's (path, id) under this namespace.
    pub(crate) fn qualify(&self, name: &str, id: &str) -> (String, String) {
        (format!("{}/{name}", self.path), format!("{}/{id}", self.id))
    }
}

impl Clone for NodeContext {
    fn clone(&self) -> Self {
        Self {
            run_id: self.run_id,
            step: self.step,
            task: self.task,
            node: Arc::clone(&self.node),
            max_steps: self.max_steps,
            attempt: self.attempt,
            input: self.input.clone(),
            decisions: Arc::clone(&self.decisions),
            ordinal: AtomicU32::new(self.ordinal.load(Ordering::SeqCst)),
            calls: AtomicU32::new(self.calls.load(Ordering::SeqCst)),
            emitter: Arc::clone(&self.emitter),
            cache: self.cache.clone(),
            ns: self.ns.clone(),
            subgraph: self.subgraph.clone(),
            memory: self.memory.clone(),
        }
    }
}

impl NodeContext {
    /// Long-term memory shared across threads and runs, when the executor
    /// ([`Executor::with_memory`](crate::Executor::with_memory)) or the run
    /// ([`RunConfig::memory`](crate::RunConfig::memory)) has one.
    pub fn memory(&self) -> Option<&tollgate_checkpoint::Memory> {
        self.memory.as_ref()
    }

    /// The run.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// The super-step this task runs in (1 is the first).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The task's position in its step's frontier.
    pub fn task(&self) -> u32 {
        self.task
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Super-steps that may still run after this one before the run fails
    /// with `StepLimitExceeded`. At 0, routing anywhere but `END` fails.
    pub fn remaining_steps(&self) -> u64 {
        self.max_steps.saturating_sub(self.step)
    }

    /// 1 on the first attempt, 2 on the first retry, ...
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Key of this node execution, the same across retries, crashes and
    /// resumes: `run:step:node:task`; inside a subgraph
    /// `run:review:3.0/step:node:task` (the enclosing task's id first, so
    /// instances of one subgraph never share a key). Hand it to side
    /// effects that must not happen twice.
    pub fn idempotency_key(&self) -> String {
        match &self.ns {
            None => format!("{}:{}:{}:{}", self.run_id, self.step, self.node, self.task),
            Some(ns) => {
                format!("{}:{}/{}:{}:{}", self.run_id, ns.id, self.step, self.node, self.task)
            }
        }
    }

    /// The branch input of a task started by a `Send`, if any.
    pub fn send_input(&self) -> Option<&Value> {
        self.input.as_deref()
    }

    /// Asks a person, pausing the run: returns the decision once one is
    /// recorded, else an error the node returns with `?`, which pauses the
    /// run (`awaiting_hitl`). On resume the node runs again from its start;
    /// its interrupts are matched by order, so each earlier `interrupt`
    /// call returns its recorded decision and the first unanswered one
    /// pauses again.
    ///
    /// ```
    /// # use tollgate_engine::{Decision, Interrupt, NodeContext, NodeError};
    /// # fn node(ctx: &NodeContext) -> Result<bool, NodeError> {
    /// let decision = ctx.interrupt(Interrupt::new("approval", serde_json::json!({"refund": 20})))?;
    /// Ok(matches!(decision, Decision::Approve))
    /// # }
    /// ```
    pub fn interrupt(&self, request: Interrupt) -> Result<Decision, NodeError> {
        if request.kind == crate::hitl::BREAKPOINT {
            return Err(NodeError::fatal(format!(
                "node `{}` raised an interrupt of kind `{}`, which is the executor's breakpoints'; name it otherwise",
                self.node,
                crate::hitl::BREAKPOINT
            )));
        }
        let ordinal = self.ordinal.fetch_add(1, Ordering::SeqCst);
        match self.decisions.get(&ordinal) {
            Some(decision) => Ok(decision.clone()),
            None => Err(NodeError::paused(Raised { ordinal, request, origin: None })),
        }
    }

    /// Runs `graph` from `input` inside this node, durably, and returns its
    /// final state: its steps are checkpointed with this task (as a
    /// subgraph's are), so that
    ///
    /// - an interrupt inside `graph` pauses the run (return the error with
    ///   `?`, as with [`NodeContext::interrupt`]); once decided, this node
    ///   runs again from its start, and the same call continues the child
    ///   where it paused: its finished steps do not run again;
    /// - after a crash, a cancel or a retry of this node, a call whose
    ///   child already finished returns its stored final state at once.
    ///
    /// Calls are matched by order within the node, like interrupts: a node
    /// that runs again must make the same calls in the same order (a
    /// different graph at a position is refused as a fatal error). At most
    /// 4,094 calls per attempt. The child's events carry the namespace
    /// `NODE_ID~CALL` (`plan:2.0~0/search:1.0`), its state shows under
    /// this task in [`Executor::get_state`](crate::Executor::get_state).
    ///
    /// ```
    /// # use tollgate_engine::{CompiledGraph, DynState, NodeContext, NodeError};
    /// async fn plan(
    ///     research: CompiledGraph<DynState>,
    ///     ctx: NodeContext,
    /// ) -> Result<serde_json::Map<String, serde_json::Value>, NodeError> {
    ///     let found = ctx.call(&research, DynState::default()).await?;
    ///     let notes = found.get("notes").cloned().unwrap_or_default();
    ///     Ok(serde_json::Map::from_iter([("notes".to_owned(), notes)]))
    /// }
    /// ```
    pub async fn call<T: State>(
        &self,
        graph: &crate::CompiledGraph<T>,
        input: T,
    ) -> Result<T, NodeError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        crate::exec::call_graph(self, graph, input, call).await
    }

    /// Milliseconds since the Unix epoch, from the run's clock (see
    /// [`RunConfig::clock`](crate::RunConfig::clock)).
    pub fn now_ms(&self) -> i64 {
        self.emitter.clock().now_ms()
    }

    /// Records `event` in the run's event log (stored with the step's
    /// checkpoint, numbered in order with the executor's events) and sends
    /// it to the live sink at once. The envelope names this node instance.
    ///
    /// Only harness events may be emitted (see
    /// [`Event::is_node_emittable`]); anything else is refused with
    /// [`EmitError::Reserved`]. Events of an attempt that later fails or
    /// pauses stay in the log: they happened.
    pub fn emit(&self, event: Event) -> Result<(), EmitError> {
        if !event.is_node_emittable() {
            return Err(EmitError::Reserved { kind: event.kind() });
        }
        let id = node_id(&self.node, self.step, self.task);
        let (name, id) = match &self.ns {
            Some(ns) => ns.qualify(&self.node, &id),
            None => (self.node.to_string(), id),
        };
        self.emitter.tick();
        self.emitter
            .emit(Some((&name, &id)), event, Live::Now)
            .map_err(|source| EmitError::Encode { source })
    }

    /// The branch input decoded as `T`; a missing or malformed input is a
    /// (non-retryable) node error.
    pub fn input<T: DeserializeOwned>(&self) -> Result<T, NodeError> {
        let value = self
            .input
            .as_deref()
            .ok_or_else(|| NodeError::fatal(InputError::Missing { node: self.node.to_string() }))?;
        T::deserialize(value).map_err(|source| {
            NodeError::fatal(InputError::Malformed { node: self.node.to_string(), source })
        })
    }
}

/// [`NodeContext::emit`] refused an event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    /// Run, node, checkpoint and interrupt events are the executor's.
    #[error("nodes may not emit `{kind}` events; they belong to the executor")]
    Reserved {
        /// The refused event's kind.
        kind: &'static str,
    },
    /// The event did not serialize.
    #[error("could not encode the event: {source}")]
    Encode {
        /// What the encoder reported.
        #[source]
        source: serde_json::Error,
    },
}

impl From<EmitError> for NodeError {
    fn from(error: EmitError) -> Self {
        NodeError::fatal(error)
    }
}

/// A `Send` input was absent or had the wrong shape.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The task was not started by a `Send`.
    #[error("node `{node}` expected a Send input, but was reached by an edge")]
    Missing {
        /// The node.
        node: String,
    },
    /// The input did not decode into the requested type.
    #[error("node `{node}` got a Send input of the wrong shape: {source}")]
    Malformed {
        /// The node.
        node: String,
        /// What the decoder reported.
        #[source]
        source: serde_json::Error,
    },
}

/// A node's failure: its cause, and whether trying again may help. (Also
/// how [`NodeContext::interrupt`] pauses a node: return it with `?`.)
#[derive(Debug)]
pub struct NodeError {
    source: Box<dyn std::error::Error + Send + Sync>,
    retryable: bool,
    class: Option<String>,
    pub(crate) signal: Option<Box<Signal>>,
}

/// What a [`NodeError`] tells the driver besides a failure.
#[derive(Debug)]
pub(crate) enum Signal {
    /// The node paused for decisions (a subgraph may raise several).
    Paused(Vec<Raised>),
    /// A subgraph stopped at a step boundary because the run was asked to
    /// (cancel, release): the run stops too, its step unfinished.
    Stopped,
    /// A subgraph's leg ended on an error the run reports as its own (the
    /// store refused a write: fenced, gone).
    Halted(crate::exec::RunError),
    /// A workflow sleeps until this time (ms since the Unix epoch): the
    /// run goes back to the queue, its step unfinished, not to be claimed
    /// before then.
    Sleep(i64),
}

/// The cause of a [`NodeError`] that parked its run until a time.
#[derive(Debug, thiserror::Error)]
#[error("the workflow sleeps until {until_ms} ms")]
struct Sleeping {
    until_ms: i64,
}

/// The cause of a [`NodeError`] that stopped a subgraph with its run.
#[derive(Debug, thiserror::Error)]
#[error("the subgraph stopped with its run")]
struct Stopped;

/// The cause of a [`NodeError`] that paused its node for a decision.
#[derive(Debug, thiserror::Error)]
#[error("the node paused for a decision (interrupt {ordinal})")]
pub struct Paused {
    ordinal: u32,
}

impl NodeError {
    /// A failure that retrying will not fix.
    pub fn fatal(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self { source: source.into(), retryable: false, class: None, signal: None }
    }

    fn paused(raised: Raised) -> Self {
        Self::signal(Signal::Paused(vec![raised]))
    }

    /// An error that carries `signal` to the driver.
    pub(crate) fn signal(signal: Signal) -> Self {
        let source: Box<dyn std::error::Error + Send + Sync> = match &signal {
            Signal::Paused(raised) => {
                Box::new(Paused { ordinal: raised.first().map_or(0, |raised| raised.ordinal) })
            }
            Signal::Stopped => Box::new(Stopped),
            Signal::Halted(error) => error.to_string().into(),
            Signal::Sleep(until_ms) => Box::new(Sleeping { until_ms: *until_ms }),
        };
        Self { source, retryable: false, class: None, signal: Some(Box::new(signal)) }
    }

    /// Whether this is a pause for a decision rather than a failure.
    pub fn is_pause(&self) -> bool {
        matches!(self.signal.as_deref(), Some(Signal::Paused(_)))
    }

    /// A failure the node's [`RetryPolicy`] may retry (a timeout, a 503).
    pub fn retryable(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self { source: source.into(), retryable: true, class: None, signal: None }
    }

    /// Whether the retry policy may retry it.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The cause.
    pub fn cause(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }

    /// Names the failure's class (snake_case, such as `rate_limited` or
    /// `auth`), so that a run that fails of it says so as data
    /// ([`RunFailure::class`](tollgate_checkpoint::RunFailure::class))
    /// rather than only in its message. The agent harness sets it from its
    /// error classes.
    pub fn with_class(mut self, class: impl Into<String>) -> Self {
        self.class = Some(class.into());
        self
    }

    /// The failure's class, when one was named.
    pub fn class(&self) -> Option<&str> {
        self.class.as_deref()
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl std::error::Error for NodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}

/// How a node retries errors marked [`NodeError::retryable`].
///
/// Defaults: 3 attempts in all, 200 ms before the first retry, doubling,
/// capped at 10 s, with jitter that picks a delay between half and all of
/// the computed backoff. Nodes without a policy never retry.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// Delay before the first retry.
    pub initial_backoff: Duration,
    /// Factor applied to the delay after each retry.
    pub multiplier: f64,
    /// Upper bound of any delay.
    pub max_backoff: Duration,
    /// Randomise each delay within [delay / 2, delay].
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(200),
            multiplier: 2.0,
            max_backoff: Duration::from_secs(10),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempt + 1`, after `attempt` failed.
    /// `seed` picks the jitter deterministically.
    pub fn backoff(&self, attempt: u32, seed: u64) -> Duration {
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let raw = self.initial_backoff.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = raw.min(self.max_backoff.as_secs_f64()).max(0.0);
        let secs = if self.jitter {
            let unit = (splitmix64(seed ^ u64::from(attempt)) >> 11) as f64 / (1u64 << 53) as f64;
            capped * (0.5 + 0.5 * unit)
        } else {
            capped
        };
        Duration::from_secs_f64(secs)
    }
}

/// A small, well-mixed hash for jitter (no RNG crate needed).
pub(crate) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What a node task produced.
pub(crate) enum NodeOutput<U> {
    Update(U),
    Command(Command<U>),
}

pub(crate) type NodeFuture<U> =
    Pin<Box<dyn Future<Output = Result<NodeOutput<U>, NodeError>> + Send + 'static>>;

/// A node's function with its types erased.
pub(crate) type NodeFn<S> =
    Arc<dyn Fn(Arc<S>, NodeContext) -> NodeFuture<<S as State>::Update> + Send + Sync>;

/// A conditional route's function.
pub(crate) type RouteFn<S> =
    Arc<dyn Fn(&S) -> Result<crate::route::Route, NodeError> + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters_within_half() {
        let policy = RetryPolicy { jitter: false, ..RetryPolicy::default() };
        let delays: Vec<u128> = (1..=8).map(|a| policy.backoff(a, 7).as_millis()).collect();
        assert_eq!(delays, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        let jittered = RetryPolicy::default();
        for attempt in 1..=8 {
            for seed in 0..50 {
                let full = policy.backoff(attempt, seed);
                let got = jittered.backoff(attempt, seed);
                assert!(
                    got <= full && got >= full / 2,
                    "{got:?} outside [{:?}, {full:?}]",
                    full / 2
                );
            }
        }
    }
}
