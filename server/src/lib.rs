//! tollgate's run service, HTTP API, live streams, review page and signed
//! packs, as a library: what the `tollgate` binary is made of, for a
//! service that wants the same over its own database.
//!
//! - [`Runs`]: the runs of one database (a SQLite file or a Postgres URL):
//!   start, queue, decide, continue, cancel, delete, prune, list and show
//!   blueprint runs; drive them as a worker ([`Runs::work`]). Errors are
//!   [`ServiceError`]s, each with its exit code and HTTP status.
//! - [`serve`]: the REST API (docs/openapi.yaml), SSE and WebSocket
//!   streams, `/metrics` and the review page over [`Runs`], with the
//!   limits of [`ServeOptions`].
//! - Packs: [`load_pack`] verifies and extracts a signed blueprint pack
//!   before anything runs; [`build_pack`], [`inspect_pack`],
//!   [`verify_pack`] and [`keygen`] are the `tollgate pack` commands.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tollgate_server::ServiceError> {
//! use tollgate_server::{Runs, RunSummary};
//! let runs = Runs::open(std::path::Path::new("runs.db"), true).await?;
//! let blueprint = tollgate_nodes::Blueprint::load("refunds/refunds.json")?;
//! let summary: RunSummary = runs.start(&blueprint, "Refund order 7", None, None).await?;
//! println!("{} is {}", summary.id, summary.status);
//! # Ok(()) }
//! ```

mod error;
mod hex;
mod http;
mod identity;
mod pack;
mod printable;
mod service;

pub use error::{code, ErrorSource, ServiceError};
pub use http::{
    check_exposure, credential, listing_json, nest_under, router, run_history_json, schedule_json,
    serve, serve_metrics, state_json, thread_history_json, thread_json, thread_storage_json, Api,
    Auth, Authenticate, ClaimNames, Jwt, JwtError, Limits, Refusal, ServeOptions, Tokens,
    DEFAULT_LANGGRAPH_PREFIX,
};
pub use identity::{
    Caller, Holder, Policy, PolicyError, Principal, Reach, Role, RolePolicy, Scope,
};
pub use pack::{build_pack, inspect_pack, is_pack, keygen, load_pack, verify_pack, Loaded};
pub use printable::printable;
pub use service::{
    decision_request, embedder, parse_event, user_message, DamagedRun, Decided, FailureView,
    Graphs, InterruptView, InvalidBlueprint, Leg, Listing, PruneStrategy, RunHistory, RunSummary,
    Runs, ThreadView, UserInput, DEFAULT_KEY_TTL, MAX_SCHEDULES_LISTED,
};
