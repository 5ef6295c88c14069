//! Why a run failed.

use tollgate_checkpoint::{CodecError, GraphRef, RunFailure, RunId, RunStatus, StoreError};

use crate::node::NodeError;
use crate::state::StateError;

/// A run failed or could not be started or continued.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run needed more super-steps than its budget.
    #[error("step limit of {limit} exceeded: step {step} would run `{node}`; raise max_steps or make the cycle end")]
    StepLimitExceeded {
        /// The run's `max_steps`.
        limit: u64,
        /// The step that would have run.
        step: u64,
        /// The first node it would have run.
        node: String,
    },
    /// A node would run more often than its visit limit.
    #[error("node `{node}` would run more than its limit of {limit} visits")]
    VisitLimitExceeded {
        /// The node.
        node: String,
        /// Its `max_visits`.
        limit: u32,
    },
    /// A node failed and its retry policy, if any, is spent.
    #[error("node `{node}` failed at step {step} (node attempt {attempts}): {source}")]
    NodeFailed {
        /// The node.
        node: String,
        /// The step.
        step: u64,
        /// Attempts made.
        attempts: u32,
        /// The node's error.
        #[source]
        source: NodeError,
    },
    /// A node panicked.
    #[error("node `{node}` panicked at step {step}")]
    NodePanicked {
        /// The node.
        node: String,
        /// The step.
        step: u64,
    },
    /// A step's updates could not be merged (for example two writes to a
    /// last-value field: [`StateError::ConflictingUpdate`]).
    #[error("step {step}: {source}")]
    InvalidUpdate {
        /// The step.
        step: u64,
        /// What the reducers refused.
        #[source]
        source: StateError,
    },
    /// A route (`StateGraph::try_route`) failed; the run keeps its last
    /// checkpoint.
    #[error("the route after `{node}` failed: {source}")]
    RouteFailed {
        /// The routing node (or `__start__`).
        node: String,
        /// The route's error.
        #[source]
        source: NodeError,
    },
    /// A route or command returned a target it did not declare.
    #[error(
        "`{node}` routed to `{target}`, which it does not declare; add it to the route's targets"
    )]
    UndeclaredTarget {
        /// The routing node (or `__start__`).
        node: String,
        /// The returned target.
        target: String,
    },
    /// The run belongs to another graph or version.
    #[error("run {run} belongs to graph {stored}, not {graph}")]
    GraphMismatch {
        /// The run.
        run: RunId,
        /// What the run is pinned to.
        stored: GraphRef,
        /// The graph offered.
        graph: GraphRef,
    },
    /// A stored checkpoint names a node the graph does not have.
    #[error("run {run}: checkpoint at step {step} names node `{node}`, which graph is missing")]
    UnknownStoredNode {
        /// The run.
        run: RunId,
        /// The step.
        step: u64,
        /// The node.
        node: String,
    },
    /// A stored state, update or frontier no longer decodes (the types
    /// changed without a migration).
    #[error("run {run}: the checkpoint at step {step} does not decode: {source}")]
    StateDecode {
        /// The run.
        run: RunId,
        /// The step.
        step: u64,
        /// What the codec reported.
        #[source]
        source: CodecError,
    },
    /// A state, update, frontier or event could not be encoded.
    #[error("run {run}: could not encode the checkpoint of step {step}: {source}")]
    Encode {
        /// The run.
        run: RunId,
        /// The step.
        step: u64,
        /// What the codec reported.
        #[source]
        source: CodecError,
    },
    /// The run is `running` under a live owner; it is not this process's to
    /// continue.
    #[error(
        "run {run} is running under {owner}; wait for it, or recover it once its owner is gone"
    )]
    RunOwned {
        /// The run.
        run: RunId,
        /// Its owner.
        owner: String,
    },
    /// The run's codec wrote a blob it cannot read back (bincode and a type
    /// it cannot decode, such as `serde_json::Value`). Raised at the first
    /// write, never at resume.
    #[error("run {run}: the {codec} codec cannot read back the {what} it wrote at step {step} ({source}); use the JSON codec for this state")]
    CodecRoundTrip {
        /// The run.
        run: RunId,
        /// The step being written (0 for the input).
        step: u64,
        /// The codec.
        codec: tollgate_checkpoint::Codec,
        /// `state` or `update`.
        what: &'static str,
        /// Why decoding failed.
        #[source]
        source: CodecError,
    },
    /// The run waits for decisions on these interrupts; decide first.
    #[error("run {run} is waiting for decisions on {}", pending.join(", "))]
    AwaitingDecision {
        /// The run.
        run: RunId,
        /// The interrupts waiting.
        pending: Vec<String>,
    },
    /// The run was cancelled from another process
    /// ([`Executor::cancel_run`](crate::Executor::cancel_run)) while this
    /// leg drove it: the run is `interrupted`, and the step this leg had in
    /// flight was not stored.
    #[error("run {run} was cancelled by another process; it is interrupted (`runs continue` takes it up again)")]
    Cancelled {
        /// The run.
        run: RunId,
    },
    /// Only a running or queued run can be cancelled.
    #[error("run {run} is {status}: only a running or queued run can be cancelled")]
    NotCancellable {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// A breakpoint or an `as_node` names a node the graph does not have.
    #[error("the graph has no node `{node}`")]
    UnknownNode {
        /// The name.
        node: String,
    },
    /// `update_state` without `as_node` on a checkpoint whose step ran
    /// several nodes: which one writes is not clear.
    #[error("run {run}: step {step} ran {}; name the node the update is written as", nodes.join(", "))]
    AmbiguousWriter {
        /// The run.
        run: RunId,
        /// The checkpoint's step.
        step: u64,
        /// The nodes that ran in it.
        nodes: Vec<String>,
    },
    /// A decision was refused.
    #[error(transparent)]
    Decision(#[from] crate::hitl::DecisionError),
    /// The store refused or failed an operation.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A schedule could not be added or fired.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// The driver task itself died.
    #[error("run {run}: the driver task ended abnormally")]
    DriverLost {
        /// The run.
        run: RunId,
    },
    /// The run's stored attachment is not JSON.
    #[error("run {run}: its attachment is not valid JSON: {source}")]
    AttachmentDecode {
        /// The run.
        run: RunId,
        /// What the decoder reported.
        #[source]
        source: serde_json::Error,
    },
    /// A continued workflow asked, at a position, for another task than
    /// the one its run stored there: its code changed, or its path
    /// depends on something outside its tasks.
    #[error(
        "run {run}: the workflow asked for task `{asked}` as task {position}, where the run stored `{stored}`: a workflow that runs again must ask for the same tasks in the same order (start a new run, or give the changed workflow a new version)"
    )]
    TaskMismatch {
        /// The run.
        run: RunId,
        /// The task's position (0 is the first asked for).
        position: u32,
        /// The task the run stored there.
        stored: String,
        /// The task asked for.
        asked: String,
    },
}

impl RunError {
    /// Stable snake_case name of the variant, as stored in failures.
    pub fn kind(&self) -> &'static str {
        match self {
            RunError::StepLimitExceeded { .. } => "step_limit_exceeded",
            RunError::VisitLimitExceeded { .. } => "visit_limit_exceeded",
            RunError::NodeFailed { .. } => "node_failed",
            RunError::NodePanicked { .. } => "node_panicked",
            RunError::InvalidUpdate { .. } => "invalid_update",
            RunError::UndeclaredTarget { .. } => "undeclared_target",
            RunError::RouteFailed { .. } => "route_failed",
            RunError::GraphMismatch { .. } => "graph_mismatch",
            RunError::UnknownStoredNode { .. } => "unknown_stored_node",
            RunError::StateDecode { .. } => "state_decode",
            RunError::Encode { .. } => "encode",
            RunError::RunOwned { .. } => "run_owned",
            RunError::CodecRoundTrip { .. } => "codec_round_trip",
            RunError::AwaitingDecision { .. } => "awaiting_decision",
            RunError::UnknownNode { .. } => "unknown_node",
            RunError::AmbiguousWriter { .. } => "ambiguous_writer",
            RunError::Cancelled { .. } => "cancelled",
            RunError::NotCancellable { .. } => "not_cancellable",
            RunError::Decision(_) => "decision_refused",
            RunError::Store(_) => "store",
            RunError::Schedule(_) => "schedule",
            RunError::DriverLost { .. } => "driver_lost",
            RunError::AttachmentDecode { .. } => "attachment_decode",
            RunError::TaskMismatch { .. } => "task_mismatch",
        }
    }

    /// The node involved, if any.
    pub fn node(&self) -> Option<&str> {
        match self {
            RunError::StepLimitExceeded { node, .. }
            | RunError::VisitLimitExceeded { node, .. }
            | RunError::NodeFailed { node, .. }
            | RunError::NodePanicked { node, .. }
            | RunError::UndeclaredTarget { node, .. }
            | RunError::RouteFailed { node, .. }
            | RunError::UnknownStoredNode { node, .. } => Some(node),
            _ => None,
        }
    }

    /// The failure's class: for a node that failed, the class its error
    /// names ([`NodeError::with_class`]: the agent harness names `auth`,
    /// `rate_limited`, `timeout`, ...), else the same as [`RunError::kind`].
    pub fn class(&self) -> &str {
        match self {
            RunError::NodeFailed { source, .. } => source.class().unwrap_or("node_failed"),
            RunError::RouteFailed { source, .. } => source.class().unwrap_or("route_failed"),
            other => other.kind(),
        }
    }

    /// The stored form of this failure.
    pub fn to_failure(&self) -> RunFailure {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        RunFailure {
            kind: self.kind().to_owned(),
            class: Some(self.class().to_owned()),
            node: self.node().map(str::to_owned),
            message,
            tasks: Vec::new(),
        }
    }
}

/// A JSON encoding failure at `step` of `run`, as the run's error.
pub(crate) fn json_error(run: RunId, step: u64, source: serde_json::Error) -> RunError {
    RunError::Encode {
        run,
        step,
        source: CodecError::Encode {
            codec: tollgate_checkpoint::Codec::Json,
            source: Box::new(source),
        },
    }
}

/// A schedule could not be added or fired.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The id is empty, longer than 128 bytes, or has characters other
    /// than letters, digits, `-`, `_` and `.`.
    #[error("`{id}` is not a schedule id: use 1 to 128 letters, digits, `-`, `_` or `.`")]
    InvalidId {
        /// The id.
        id: String,
    },
    /// The cron expression does not parse.
    #[error("`{expression}` is not a cron expression: {source}")]
    InvalidCron {
        /// The expression.
        expression: String,
        /// The parser's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The cron expression has no tick after a time (`0 0 30 2 *`: the
    /// 30th of February).
    #[error("the cron expression `{expression}` has no tick after {after_ms} ms")]
    NoTick {
        /// The expression.
        expression: String,
        /// The time after which there is none.
        after_ms: i64,
    },
}
