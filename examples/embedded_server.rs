//! A small service of its own that embeds tollgate: its own routes, its
//! own API-key check, a Rust graph with an approval interrupt, and the
//! tollgate API and review page nested under `/tollgate`.
//!
//! ```sh
//! SERVICE_API_KEY=secret cargo run --example embedded_server -- --addr 127.0.0.1:8080 --db service.db
//! curl -H 'x-api-key: secret' -H 'content-type: application/json' \
//!      -d '{"graph": "expenses", "input": {"amount": 500}}' http://127.0.0.1:8080/tollgate/runs
//! ```
//!
//! The graph `expenses` takes `{"amount": N}` and pauses for approval when
//! N > 100; `slow` takes three steps of 300 ms. Every path under
//! `/tollgate` needs the key (`SERVICE_API_KEY`) as tollgate's clients send
//! it: in `x-api-key`, or, from the review page in a browser, which cannot
//! set that header, as its sign-in token (`Authorization: Bearer KEY`, and
//! the WebSocket subprotocol `tollgate.token.HEX` for live updates); the
//! page's own files hold no data and are served without it. It prints `listening on
//! http://ADDR` and serves until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use serde_json::json;
use tollgate_server::{credential, nest_under, Api, Auth, Graphs, Runs, ServeOptions};

#[path = "shared/expenses.rs"]
mod expenses;

#[path = "shared/stop.rs"]
mod stop;
use stop::stopped;

/// Serves the expenses service.
#[derive(Parser)]
struct Args {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// The SQLite database (created when missing), or a `postgres://` URL.
    #[arg(long, default_value = "service.db")]
    db: PathBuf,
}

/// The service's own check on every path under `/tollgate`: the key as
/// tollgate's clients send it (`x-api-key`, a bearer header, or from the
/// review page's live updates the WebSocket subprotocol a browser can
/// set: `tollgate_server::credential` reads all three); the page's own
/// files (no data) are open.
async fn api_key(key: Arc<String>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == "/" || path.starts_with("/ui/") {
        return next.run(request).await;
    }
    if credential(request.headers()).as_deref() == Some(key.as_str()) {
        next.run(request).await
    } else {
        let body = json!({"error": {"kind": "unauthorized", "message": "this service needs its API key (SERVICE_API_KEY) in `x-api-key`"}});
        (StatusCode::UNAUTHORIZED, Json(body)).into_response()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let key = std::env::var("SERVICE_API_KEY")
        .ok()
        .filter(|key| !key.trim().is_empty())
        .ok_or("set SERVICE_API_KEY: the key every /tollgate path needs")?;
    let key = Arc::new(key.trim().to_owned());
    let graphs = Graphs::new()
        .graph_with_input_schema(expenses::expenses(), expenses::input_schema())
        .graph(expenses::slow());
    let runs = Runs::open(&args.db, true).await?.with_graphs(graphs);
    // [docs/embedding.md: the API as a router]
    let mut options = ServeOptions::new(args.addr);
    options.auth = Auth::External;
    // The review page's sign-in form names this service's key.
    options.sign_in_hint = Some("This service needs its API key (SERVICE_API_KEY).".into());
    // On SQLite the API also runs a worker in this process (`options.worker`,
    // on by default): runs queued or decided from another process, sleeping
    // workflows, runs of a process that died and schedules are driven here.
    let api = Api::new(runs, options)?;
    let check = {
        let key = Arc::clone(&key);
        middleware::from_fn(move |request, next| api_key(Arc::clone(&key), request, next))
    };
    let app = Router::new()
        .route("/", get(|| async { "expenses service: the API and review page are at /tollgate" }))
        // The API and the page at `/tollgate` (and `/tollgate/`), behind the check.
        .merge(nest_under("/tollgate", api.router().layer(check)));
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    // Webhooks are never sent to where this service listens.
    api.listening_on(listener.local_addr()?);
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).with_graceful_shutdown(stopped()).await?;
    // Runs this service was driving go back to `queued` for the next start.
    api.release(Duration::from_secs(30)).await;
    // [end]
    Ok(())
}
