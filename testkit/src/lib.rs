//! Test support for tollgate applications, agents and backends: model and
//! tool doubles, deterministic clocks and ids, event recorders, trajectory
//! assertions, replay fixtures, retrieval doubles and conformance suites.
//! Nothing here is needed at run time.
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use tollgate_checkpoint::MemoryStore;
//! use tollgate_engine::Executor;
//! use tollgate_nodes::Agent;
//! use tollgate_testkit::{assert_trajectory, deterministic_config, FakeTool, ScriptedModel};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = ScriptedModel::builder()
//!     .tool_call("lookup_user", json!({"id": 7}))
//!     .reply("That is Ann.")
//!     .build();
//! let lookup = FakeTool::new("lookup_user", json!({"name": "Ann"}));
//! let agent = Agent::new("support", Arc::new(model.clone())).tool(lookup.clone()).compile().unwrap();
//! let executor = Executor::new(MemoryStore::new());
//! let run = agent.run(&executor, "Who is user 7?", deterministic_config(1)).await.unwrap();
//!
//! assert_trajectory(run.events())
//!     .model_called("scripted")
//!     .tool_called_with("lookup_user", json!({"id": 7}))
//!     .model_called("scripted")
//!     .model_calls(2)
//!     .final_message("That is Ann.")
//!     .completed();
//! assert_eq!(lookup.calls(), [json!({"id": 7})]);
//! // Dropping `model` checks that every scripted reply was used.
//! # });
//! ```

#[cfg(feature = "browser")]
pub mod browser;
mod clock;
pub mod conformance;
#[cfg(feature = "provider-suite")]
pub mod fake_anthropic;
#[cfg(feature = "provider-suite")]
mod fake_http;
#[cfg(feature = "provider-suite")]
pub mod fake_openai;
mod hooked;
mod keywords;
mod models;
mod recorder;
mod replay;
mod retrieval;
mod services;
mod tasks;
mod tools;
mod trajectory;

pub use clock::{deterministic_config, DeterministicIds, ManualClock, StepClock, EPOCH_2026_MS};
pub use hooked::{HookedStore, StoreHooks};
pub use keywords::KeywordEmbedder;
pub use models::{
    args_from_schema, FailingModel, Failure, FakeChatModel, FakeStreamingModel, FlakyModel,
    SchemaDrivenModel, ScriptBuilder, ScriptedModel,
};
pub use recorder::{EventCollector, EventRecorder};
pub use replay::{from_ndjson, to_ndjson, ReplayFixture, Step};
pub use retrieval::{
    DeterministicFakeEmbedding, Document, Embedder, InMemoryVectorStore, IndexReport, RecordManager,
};
pub use services::postgres_url;
pub use tasks::ScriptedTasks;
pub use tollgate_checkpoint::InMemoryItemStore;
pub use tollgate_nodes::InMemoryShortTermMemory;
pub use tools::{FakeTool, FlakyTool, SlowTool};
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
