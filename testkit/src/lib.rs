//! Test support for tollgate applications and backends.
//!
//! Today it offers [`collect_events`], which drains an
//! [`EventStream`] into a list for
//! assertions, and the store [`conformance`] suite. Scripted models, fake
//! tools, trajectory assertions and the other conformance suites arrive
//! with the harness.

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
