//! tollgate: a durable state-graph workflow engine for LLM agents.
//!
//! This facade re-exports the engine ([`StateGraph`], [`Executor`],
//! reducers, routes, events) and the storage layer ([`Store`],
//! [`MemoryStore`], records) so an application needs one dependency.
//!
//! See the README's quick start and `examples/quickstart.rs`.

pub use tollgate_checkpoint::{
    Blob, CheckpointInfo, Claimed, Codec, CodecError, Condition, Cursor, EmbedError, Embedder,
    EventRecord, Filter, FilterOp, GetOp, GraphRef, HeldKey, HistoryPage, IdempotencyStore,
    InMemoryItemStore, IndexConfig, Item, ItemError, ItemOp, ItemResult, ItemStore, KeyClaim,
    Memory, MemoryStore, MissedTicks, Namespace, NamespaceQuery, NodeCacheStore, OutboxEntry,
    OutboxGate, OutboxQuery, OutboxStore, Owner, PageRequest, PutOp, RunFailure, RunFilter, RunId,
    RunPage, RunRecord, RunStatus, RunStore, ScheduleRecord, ScheduleStore, ScheduleTiming,
    SearchOp, Store, StoreError, TaskFailure, ThreadStore, Waiting,
};
#[cfg(feature = "sqlite")]
pub use tollgate_checkpoint::{Checkpointing, Durability, SqliteOptions, SqliteStore};
pub use tollgate_engine::*;
pub use tollgate_nodes::*;
#[cfg(feature = "postgres")]
pub use tollgate_postgres::{PostgresOptions, PostgresStore};
/// OpenTelemetry traces and Prometheus metrics (features `otel`,
/// `prometheus`).
#[cfg(any(feature = "otel", feature = "prometheus"))]
pub use tollgate_telemetry as telemetry;

/// The run service, HTTP API, live streams, review page and signed packs
/// (feature `server`).
#[cfg(feature = "server")]
pub use tollgate_server as server;
/// Test doubles and conformance suites (feature `testkit`).
#[cfg(feature = "testkit")]
pub use tollgate_testkit as testkit;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
