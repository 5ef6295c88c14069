//! Storage for tollgate: the [`Store`] trait the engine persists through,
//! the versioned record types that cross it, the [`Codec`]s that turn
//! payloads into checksummed [`Blob`]s, and the stores themselves.
//!
//! The engine hands a store one [`Transition`] per super-step (step record,
//! frontier, status, events) and [`TaskWrite`]s for finished tasks; a store
//! applies each atomically. [`MemoryStore`] keeps all of it in memory.
//!
//! [`Store`] is one trait per table ([`RunStore`], [`ThreadStore`],
//! [`ScheduleStore`], [`OutboxStore`], [`NodeCacheStore`],
//! [`IdempotencyStore`]): through an
//! `Arc<dyn Store>` or a `S: Store` bound every method is at hand; on a
//! concrete store, import the table's trait to call its methods.
//!
//! ```
//! use tollgate_checkpoint::{MemoryStore, PageRequest, RunFilter, RunStore};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let page = store.list_runs(&RunFilter::default(), &PageRequest::default()).await.unwrap();
//! assert!(page.runs.is_empty() && page.next.is_none());
//! # });
//! ```
//!
//! This crate knows nothing of graphs or nodes.

mod codec;
mod compact;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod error;
mod event;
mod failpoint;
mod frontier;
mod ids;
mod items;
mod keys;
mod listing;
mod memory;
mod outbox;
mod owner;
mod record;
mod schedule;
#[cfg(feature = "sqlite")]
mod sqlite;
mod status;
mod store;

pub use codec::{Blob, Codec, CodecError};
pub use error::StoreError;
pub use event::{restore_updates, EventRecord};
pub use failpoint::__failpoint;
pub use frontier::{frontier_reference, RecentFrontiers};
pub use ids::{InvalidRunId, RunId, TaskKey};
pub use items::{
    decode_vector, encode_vector, Condition, EmbedError, Embedder, Filter, FilterOp, GetOp,
    InMemoryItemStore, IndexConfig, Item, ItemError, ItemOp, ItemResult, ItemStore, Memory,
    Namespace, NamespaceQuery, PutOp, Ranked, Ranking, SearchOp, VectorCache, VectorChange,
    MAX_FILTER_CONDITIONS, MAX_IN_VALUES, MAX_KEY_BYTES, MAX_PARTS, MAX_PART_BYTES,
    MAX_SEARCH_LIMIT, MAX_VALUE_BYTES,
};
pub use keys::{claim_wins, Claimed, HeldKey, KeyClaim};
pub use listing::{
    Cursor, DamagedRun, Holder, PageRequest, RunFilter, RunPage, ThreadMatches, ThreadQuery,
    ThreadRecord, ThreadStatus, ThreadStorage, Waiting,
};
pub use memory::MemoryStore;
pub use outbox::{GateOpens, OutboxEntry, OutboxGate, OutboxQuery, OUTBOX_NEVER};
pub use owner::Owner;
pub use record::{
    Answer, CheckpointInfo, DecisionWrite, GraphRef, HistoryPage, InterruptRecord, NewRun,
    RunFailure, RunRecord, StepRecord, StoredCheckpoint, TaskFailure, TaskProgress, TaskUpdate,
    TaskWrite, ThreadTurn, Transition,
};
#[doc(hidden)]
pub use schedule::ScheduleRow as __ScheduleRow;
pub use schedule::{
    InvalidMissedTicks, MissedTicks, ScheduleFire, ScheduleRecord, ScheduleTiming, DEFAULT_GRACE_MS,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{Checkpointing, Durability, SqliteOptions, SqliteStore};
pub use status::{InvalidRunStatus, RunStatus};
pub use store::{
    IdempotencyStore, NodeCacheStore, OutboxStore, RunStore, ScheduleStore, Store, ThreadStore,
};
