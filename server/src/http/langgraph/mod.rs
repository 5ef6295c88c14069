//! LangGraph's server API, spoken by `tollgate serve` under a prefix
//! (`/lg` by default), so that clients written for LangGraph's server (the
//! `langgraph-sdk` Python client, `@langchain/langgraph-sdk`, front-ends
//! built on them) drive tollgate's graphs, blueprints and stores
//! unchanged.
//!
//! What maps to what (docs/langgraph-api.md): an *assistant* is a
//! registered graph or a blueprint of the server's folder (its id is its
//! name, or a UUID derived from it); a *thread* is a tollgate thread,
//! with a record of its own once created (`ThreadStore::create_thread`); a
//! *run* is a tollgate run on it; `Command(resume=…)` is a decision on the
//! thread's paused run.
//!
//! - [`assistants`]: search, get, graph, schemas.
//! - [`threads`]: create, get, update, delete, search, state, history.
//! - [`runs`]: create, wait, stream; [`body`]: what a run is created
//!   with; [`thread_runs`]: join, get, list, cancel, delete.
//! - [`queue`]: runs that wait to start (`enqueue`, `after_seconds`),
//!   and [`dispatch`], which starts them and sends webhooks.
//! - [`resume`]: `Command(resume=…)` as decisions.
//! - [`store`]: long-term memory as LangGraph's store.
//! - [`stream`]: a run's events as LangGraph's stream modes, over SSE.
//! - [`webhook`]: a run's outcome POSTed once it settles.
//! - [`wire`]: the shapes the SDKs read (threads, runs, states, messages).

mod assistants;
mod body;
mod continued;
mod crons;
mod dispatch;
mod history;
mod outcome;
mod queue;
mod resume;
mod runs;
mod store;
mod stream;
mod thread_runs;
mod threads;
mod webhook;
mod wire;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::App;

pub(crate) use dispatch::spawn as spawn_dispatcher;

/// The LangGraph API's routes (mounted under a prefix by the server).
pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/ok", get(ok))
        .route("/info", get(info))
        .route("/assistants", post(assistants::refused))
        .route("/assistants/search", post(assistants::search))
        .route("/assistants/count", post(assistants::count))
        .route(
            "/assistants/{id}",
            get(assistants::get).patch(assistants::refused_id).delete(assistants::refused_id),
        )
        .route("/assistants/{id}/graph", get(assistants::graph))
        .route("/assistants/{id}/schemas", get(assistants::schemas))
        .route("/assistants/{id}/versions", post(assistants::refused_id))
        .route("/assistants/{id}/latest", post(assistants::refused_id))
        .route("/threads", post(threads::create))
        .route("/threads/search", post(threads::search))
        .route("/threads/count", post(threads::count))
        .route("/threads/prune", post(threads::prune))
        .route(
            "/threads/{thread}",
            get(threads::get).patch(threads::update).delete(threads::delete),
        )
        .route("/threads/{thread}/copy", post(threads::copy))
        .route("/threads/{thread}/storage", get(threads::storage))
        .route("/threads/{thread}/state", get(threads::state).post(threads::update_state))
        .route("/threads/{thread}/state/checkpoint", post(threads::state_checkpoint))
        .route("/threads/{thread}/state/{checkpoint}", get(threads::state_at))
        .route("/threads/{thread}/history", post(history::history).get(history::history_get))
        .route("/threads/{thread}/runs", post(runs::create).get(thread_runs::list))
        .route("/threads/{thread}/runs/wait", post(runs::wait))
        .route("/threads/{thread}/runs/stream", post(runs::stream))
        .route("/threads/{thread}/runs/{run}", get(thread_runs::get).delete(thread_runs::delete))
        .route("/threads/{thread}/runs/{run}/join", get(thread_runs::join))
        .route("/threads/{thread}/runs/{run}/stream", get(thread_runs::join_stream))
        .route("/threads/{thread}/runs/{run}/cancel", post(thread_runs::cancel))
        .route("/store/items", get(store::get).put(store::put).delete(store::delete))
        .route("/store/items/search", post(store::search))
        .route("/store/namespaces", post(store::namespaces))
        .route("/runs/crons", post(crons::create))
        .route("/runs/crons/search", post(crons::search))
        .route("/runs/crons/count", post(crons::count))
        .route("/runs/crons/{cron}", get(crons::get).delete(crons::delete).patch(crons::update))
        .route("/threads/{thread}/runs/crons", post(crons::for_thread))
        .route("/runs/cancel", post(thread_runs::cancel_many))
        .route("/runs/batch", post(runs::batch))
        .route("/runs", post(runs::create))
        .route("/runs/wait", post(runs::wait))
        .route("/runs/stream", post(runs::stream))
        .fallback(no_route)
        .layer(axum::middleware::map_response(invalid_is_unprocessable))
}

/// A path under the prefix that names no endpoint of this API.
async fn no_route() -> super::errors::ApiError {
    super::errors::ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint of tollgate's LangGraph API (see docs/langgraph-api.md)",
    )
}

/// `GET /ok`: the server is up.
async fn ok() -> Json<Value> {
    Json(json!({"ok": true}))
}

/// `GET /info`: what this server is, as the SDKs and front-ends probe it.
async fn info(State(_app): State<App>) -> Json<Value> {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "server": "tollgate",
        "langgraph_py_version": null,
        "flags": {"assistants": true, "crons": true, "langsmith": false, "store": true},
        "host": {"kind": "self-hosted", "project_id": null, "revision_id": null,
                 "tenant_id": null},
    }))
}

/// LangGraph's clients branch on 422 for input they sent wrong, where
/// tollgate's native API answers 400.
async fn invalid_is_unprocessable(mut response: Response) -> Response {
    if response.status() == StatusCode::BAD_REQUEST {
        *response.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
    }
    response
}

/// A 422 naming what this server does not do (yet): the docs list each.
pub(crate) fn unsupported(what: &str) -> Response {
    unsupported_error(what).into_response()
}

/// [`unsupported`] as an error.
pub(crate) fn unsupported_error(what: &str) -> super::errors::ApiError {
    super::errors::ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "unsupported",
        format!("{what} is not supported by tollgate's LangGraph API (see docs/langgraph-api.md)"),
    )
}
