//! Conformance suites: run them against your implementation.
//!
//! - [`check_store`]: the `Store` contract (every store).
//! - [`check_item_store`]: the long-term memory contract (every
//!   `ItemStore`: in memory, SQLite, PostgreSQL).
//! - [`check_engine`]: the state-graph and agent cases of the testkit
//!   spec, run by the executor on a store you supply.
//! - `check_openai_compatible` (feature `provider-suite`): a chat adapter
//!   against a fake OpenAI-compatible server, streaming included.
//! - `check_anthropic_compatible` (feature `provider-suite`): the same
//!   cases in Anthropic's Messages format against a fake Anthropic server,
//!   with thinking blocks, cache usage and Anthropic's error types.

#[cfg(feature = "provider-suite")]
mod anthropic;
mod graph;
#[cfg(feature = "provider-suite")]
mod provider;
mod state;
mod subgraphs;
mod track;

#[cfg(feature = "provider-suite")]
pub use anthropic::check_anthropic_compatible;
pub use graph::check_engine;
#[cfg(feature = "provider-suite")]
pub use provider::{check_openai_compatible, ProviderSetup, SUITE_KEY};
pub use tollgate_checkpoint::conformance::{
    check_item_store, check_node_cache_store, check_outbox_store, check_run_store,
    check_schedule_store, check_store, check_thread_store,
};
