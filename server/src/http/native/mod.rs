//! tollgate's own REST API (docs/openapi.yaml), one file per resource:
//! runs, threads and graphs (`runs.rs`), live streams (`streams.rs`),
//! the memory store (`store.rs`) and schedules (`schedules.rs`); the JSON
//! of what the service returns in `wire.rs`.

pub(crate) mod runs;
mod schedules;
mod store;
mod streams;
pub(crate) mod wire;

use axum::routing::{get, post};
use axum::Router;

use super::App;

/// The native API's routes (the caller adds `/metrics`, the page, the
/// LangGraph API and the layers).
pub(super) fn routes() -> Router<App> {
    Router::new()
        .route("/healthz", get(runs::health))
        .route("/me", get(runs::me))
        .route("/runs", get(runs::list).post(runs::create))
        .route("/runs/{id}", get(runs::show).delete(runs::delete))
        .route("/runs/{id}/state", get(runs::state).post(runs::update_state))
        .route("/runs/{id}/fork", post(runs::fork))
        .route("/runs/{id}/history", get(runs::history))
        .route("/runs/{id}/resume", post(runs::resume))
        .route("/runs/{id}/reject", post(runs::reject))
        .route("/runs/{id}/cancel", post(runs::cancel))
        .route("/runs/{id}/continue", post(runs::resume_leg))
        .route("/runs/{id}/events", get(streams::sse))
        .route("/runs/{id}/ws", get(streams::ws))
        .route("/runs/{id}/graph", get(runs::graph))
        .route("/changes", get(streams::changes))
        .route("/threads/{thread}", get(runs::thread))
        .route("/threads/{thread}/history", get(runs::thread_history))
        .route("/threads/{thread}/storage", get(runs::thread_storage))
        .route("/threads/{thread}/prune", post(runs::prune_thread))
        .route("/store/items", get(store::get).put(store::put).delete(store::delete))
        .route("/store/search", post(store::search))
        .route("/store/namespaces", get(store::namespaces))
        .route("/schedules", get(schedules::list).post(schedules::add))
        .route("/schedules/{id}", get(schedules::show).delete(schedules::delete))
        .route("/graphs", get(runs::graphs))
        .route("/graphs/{name}", get(runs::graph_named))
}
