//! Test support for tollgate applications and backends.
//!
//! Today it offers [`collect_events`], which drains an
//! [`EventStream`] into a list for assertions, ordered trajectory
//! assertions over a run's events ([`assert_trajectory`]), and the store
//! [`conformance`] suite. Scripted-model builders, fake tools and the other
//! conformance suites are still to come.

mod trajectory;

pub use trajectory::{assert_trajectory, render, Trajectory};

use tollgate_engine::{EventEnvelope, EventStream};

/// Receives every event until the stream closes (every run holding the
/// sink has ended and dropped it).
pub async fn collect_events(mut stream: EventStream) -> Vec<EventEnvelope> {
    let mut events = Vec::new();
    while let Some(event) = stream.recv().await {
        events.push(event);
    }
    events
}

/// The store conformance suite: `check_store(|| async { MyStore::new() })`
/// runs every case of the `Store` contract against a store.
pub use tollgate_checkpoint::conformance;
