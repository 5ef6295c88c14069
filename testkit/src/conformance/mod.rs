//! Conformance suites: run them against your implementation.
//!
//! - [`check_store`]: the `Store` contract (every store).
//! - [`check_engine`]: the state-graph and agent cases of the testkit
//!   spec, run by the executor on a store you supply.

mod graph;

pub use graph::check_engine;
pub use tollgate_checkpoint::conformance::check_store;
