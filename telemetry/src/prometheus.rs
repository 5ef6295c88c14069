//! Prometheus metrics: the process's `metrics` recorder, and the scrape
//! (`GET /metrics`) that renders it with the store's view of waiting runs.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tollgate_checkpoint::Store;

use crate::TelemetryError;

/// Buckets of the duration histograms, in seconds: 50 µs to 10 s.
const BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

const RUNS_WAITING: &str = "tollgate_runs_waiting";
const OLDEST_WAIT: &str = "tollgate_runs_waiting_oldest_seconds";

/// The process's Prometheus recorder.
#[derive(Debug, Clone)]
pub struct Metrics {
    handle: PrometheusHandle,
}

static INSTALLED: OnceLock<PrometheusHandle> = OnceLock::new();

impl Metrics {
    /// Installs the Prometheus recorder as the process's `metrics`
    /// recorder (once: later calls share it) and describes tollgate's
    /// metrics. Fails when another recorder is installed.
    pub fn install() -> Result<Self, TelemetryError> {
        if let Some(handle) = INSTALLED.get() {
            return Ok(Self { handle: handle.clone() });
        }
        // One installation at a time: a call racing another (two servers
        // embedded in one process, say) waits for it and shares its
        // recorder, rather than finding the global recorder set and no
        // handle kept yet.
        static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _installing = INSTALLING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(handle) = INSTALLED.get() {
            return Ok(Self { handle: handle.clone() });
        }
        let recorder = |error| TelemetryError::Recorder { source: Box::new(error) };
        let handle = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .map_err(recorder)?
            .install_recorder()
            .map_err(recorder)?;
        let handle = INSTALLED.get_or_init(|| handle).clone();
        tollgate_engine::describe_engine_metrics();
        tollgate_nodes::describe_harness_metrics();
        metrics::describe_gauge!(RUNS_WAITING, "Runs waiting for a decision (the whole store).");
        metrics::describe_gauge!(
            OLDEST_WAIT,
            metrics::Unit::Seconds,
            "How long the run that waited longest for a decision has waited (0 when none)."
        );
        Ok(Self { handle })
    }

    /// The text exposition of every metric, after reading from `store`
    /// how many runs wait for a decision and since when (a store that
    /// cannot answer counts a store error; the rest still renders).
    pub async fn render(&self, store: &dyn Store, now_ms: i64) -> String {
        match store.waiting().await {
            Ok(waiting) => {
                metrics::gauge!(RUNS_WAITING).set(waiting.runs as f64);
                let oldest = waiting.oldest_since_ms.map_or(0, |since| (now_ms - since).max(0));
                metrics::gauge!(OLDEST_WAIT).set(oldest as f64 / 1000.0);
            }
            Err(error) => {
                tracing::warn!(%error, "metrics: cannot count the waiting runs");
                tollgate_engine::count_store_error("waiting", &error);
            }
        }
        self.handle.run_upkeep();
        self.handle.render()
    }
}
