//! Running graphs: the pure planner, the async driver and the executor.

mod access;
mod barrier;
mod cache;
mod cancel;
mod config;
mod continuing;
mod copy;
mod driver;
mod emit;
mod error;
mod execute;
mod executor;
mod handle;
mod history;
mod load;
mod plan;
mod record;
mod resume;
mod setup;
mod state_view;
mod subgraph;
mod task;
mod thread;
mod token;
mod worker;
pub(crate) mod workflow;

pub(crate) use access::{CacheAccess, SubgraphAccess};
pub(crate) use cache::cached;
pub use config::{RunConfig, SnapshotPolicy, TaskScript, DEFAULT_LEASE, DEFAULT_MAX_STEPS};
pub use continuing::WriteContinued;
pub use emit::DEFAULT_EVENT_CAP;
pub(crate) use emit::{node_id, Emitter, Live};
pub use error::{RunError, ScheduleError};
pub(crate) use executor::encode_queued;
pub use executor::Executor;
pub use handle::{RunHandle, RunOutcome};
pub(crate) use plan::Frontier;
pub use record::{CheckpointSource, ForkOrigin};
pub use resume::{DecisionOutcome, Resumed};
pub(crate) use setup::graph_ref;
pub use state_view::{
    NestedState, StatePage, StateSnapshot, TaskError, TaskState, ThreadCheckpoint,
    ThreadHistoryPage,
};
pub(crate) use subgraph::subgraph_node;
pub use thread::INPUT_NODE;
pub use token::CancelToken;
pub use worker::{drive_leg, Worker, WorkerReport, Workload, DEFAULT_MAX_LEASE_LOSSES};
