//! `GET /metrics`: Prometheus's text format, on `serve`'s address (behind
//! its token) and on `worker --metrics-addr` (a listener of its own).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tollgate_checkpoint::Store;
use tollgate_engine::{Clock, SystemClock};
use tollgate_telemetry::Metrics;

use super::App;
use crate::error::ServiceError;

/// The content type of Prometheus's text format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The process's recorder (installed on first use).
pub(crate) fn recorder() -> Result<Metrics, ServiceError> {
    Metrics::install().map_err(|error| {
        ServiceError::failed(format!("cannot record metrics: {error}")).with_source(error)
    })
}

async fn render(metrics: &Metrics, store: &dyn Store) -> Response {
    let text = metrics.render(store, SystemClock.now_ms()).await;
    ([(header::CONTENT_TYPE, TEXT_FORMAT)], text).into_response()
}

/// `GET /metrics` on `serve`.
pub(crate) async fn scrape(State(app): State<App>) -> Response {
    let text = app.runs.metrics_text(&app.settings.metrics).await;
    ([(header::CONTENT_TYPE, TEXT_FORMAT)], text).into_response()
}

/// Serves `GET /metrics` alone on `addr`, in the background, for a worker.
/// Prints `metrics on http://ADDR/metrics` to stderr once it listens.
pub async fn serve_metrics(store: Arc<dyn Store>, addr: SocketAddr) -> Result<(), ServiceError> {
    let metrics = recorder()?;
    let listener = TcpListener::bind(addr).await.map_err(|error| {
        ServiceError::failed(format!("cannot listen on {addr} for metrics: {error}"))
            .with_source(error)
    })?;
    let local = listener.local_addr().map_err(|error| {
        ServiceError::failed(format!("cannot read the bound metrics address: {error}"))
            .with_source(error)
    })?;
    let router = Router::new().route(
        "/metrics",
        get(move || {
            let (metrics, store) = (metrics.clone(), Arc::clone(&store));
            async move { render(&metrics, store.as_ref()).await }
        }),
    );
    eprintln!("tollgate: metrics on http://{local}/metrics");
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::warn!(%error, "the metrics listener stopped");
        }
    });
    Ok(())
}
