//! The tollgate engine: typed state with per-field reducers, a graph
//! builder that compiles into a validated petgraph, and a super-step
//! executor that checkpoints every transition through a
//! [`Store`](tollgate_checkpoint::Store).
//!
//! Three types carry the flow: a [`StateGraph`] is built and compiled into
//! a [`CompiledGraph`]; an [`Executor`] runs it on a store and hands back a
//! [`RunHandle`]; every step the executor runs the frontier's tasks
//! concurrently, merges their updates through the state's reducers in task
//! order, asks the planner what runs next and commits one transition.
//!
//! ```
//! use std::sync::Arc;
//! use serde::{Deserialize, Serialize};
//! use tollgate_checkpoint::{MemoryStore, RunStatus};
//! use tollgate_engine::{Executor, GraphState, Route, RunConfig, StateGraph, END, START};
//!
//! #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
//! #[graph_state(crate = tollgate_engine)]
//! struct Counter {
//!     #[reducer(sum)]
//!     count: u32,
//!     #[reducer(append)]
//!     log: Vec<String>,
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let graph = StateGraph::<Counter>::new("counter", 1)
//!     .node("tick", |state: Arc<Counter>, _ctx| async move {
//!         Ok(CounterUpdate::default().count(1).log(vec![format!("tick {}", state.count)]))
//!     })
//!     .edge(START, "tick")
//!     .route("tick", ["tick", END], |s: &Counter| {
//!         if s.count < 3 { Route::to("tick") } else { Route::end() }
//!     })
//!     .compile()
//!     .unwrap();
//! let executor = Executor::new(MemoryStore::new());
//! let outcome = executor.run(&graph, Counter::default(), RunConfig::new()).await.unwrap();
//! assert_eq!(outcome.status, RunStatus::Completed);
//! assert_eq!(outcome.state.log, ["tick 0", "tick 1", "tick 2"]);
//! # });
//! ```

// Lets the derive's `::tollgate::...` paths work inside this crate's docs.
extern crate self as tollgate_engine;

mod event;
mod exec;
mod graph;
mod hitl;
mod node;
mod route;
mod schedule;
mod state;
mod telemetry;
mod workflow;

pub use event::{
    format_rfc3339, Clock, Event, EventEnvelope, EventSink, EventStream, StreamMode, SystemClock,
    EVENT_VERSION,
};
pub use exec::{
    drive_leg, CancelToken, CheckpointSource, DecisionOutcome, Executor, ForkOrigin, NestedState,
    Resumed, RunConfig, RunError, RunHandle, RunOutcome, ScheduleError, SnapshotPolicy, StatePage,
    StateSnapshot, TaskError, TaskScript, TaskState, ThreadCheckpoint, ThreadHistoryPage, Worker,
    WorkerReport, Workload, WriteContinued, DEFAULT_EVENT_CAP, DEFAULT_LEASE,
    DEFAULT_MAX_LEASE_LOSSES, DEFAULT_MAX_STEPS, INPUT_NODE,
};
pub use graph::{
    CompileError, CompiledGraph, EdgeKind, GraphNode, GraphProblem, GraphShape, ShapeEdge,
    ShapeNode, StateGraph,
};
pub use hitl::{
    Breakpoint, BreakpointSide, Decision, DecisionError, DecisionKind, DecisionRequest, Interrupt,
    PendingInterrupt, BREAKPOINT,
};
pub use node::{EmitError, InputError, NodeContext, NodeError, Paused, RetryPolicy};
pub use route::{Command, Goto, Route, Send, END, START};
pub use schedule::{next_tick, parse_rfc3339, Schedule};
pub use state::{
    Append, CustomReducer, DynReducer, DynSchema, DynState, HasId, LastValue, Max, MergeMap,
    MessageOp, Messages, Min, Reducer, State, StateError, Sum, Write,
};
pub use telemetry::{
    count_store_error, describe_engine_metrics, set_trace_propagation, TracePropagation,
};
pub use tollgate_macros::GraphState;
pub use workflow::{
    TaskOptions, Workflow, WorkflowContext, WorkflowError, WORKFLOW_INPUT, WORKFLOW_OUTPUT,
};

#[doc(hidden)]
pub use state::__check_exclusive;

/// Re-exports the derive's generated code relies on. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use serde;
}
