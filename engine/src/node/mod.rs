//! Nodes: the functions a graph runs, what they see and how they fail.

//!
//! This file is what a node sees ([`NodeContext`]) and the erased
//! function types a compiled graph holds; `error.rs` is how a node fails,
//! `retry.rs` how it retries. The context reaches the executor only
//! through the data it carries (`exec/access.rs`, `exec/emit.rs`); what
//! it does with a nested graph ([`NodeContext::call`]) is written in
//! `exec/subgraph.rs`, beside the code that runs it.

mod error;
mod retry;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tollgate_checkpoint::RunId;

pub(crate) use self::error::Signal;
pub use self::error::{EmitError, InputError, NodeError, Paused};
pub(crate) use self::retry::splitmix64;
pub use self::retry::RetryPolicy;
use crate::event::Event;
use crate::exec::{node_id, CacheAccess, Emitter, Live, SubgraphAccess};
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
    pub(crate) cache: Option<Arc<CacheAccess>>,
    /// Inside a subgraph: where (prefixed to node ids and names).
    pub(crate) ns: Option<Arc<Namespace>>,
    /// For a subgraph node: what it needs to run its graph.
    pub(crate) subgraph: Option<Arc<SubgraphAccess>>,
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
