//! Telemetry for processes that run tollgate: OpenTelemetry traces
//! exported over OTLP/HTTP (feature `otel`) and Prometheus metrics in the
//! text format (feature `prometheus`).
//!
//! The engine and the harness record spans through `tracing` and metrics
//! through the `metrics` facade whether or not anything listens; this crate
//! is what listens. Without it both cost next to nothing.
//!
//! ```no_run
//! # #[cfg(feature = "otel")]
//! # fn demo() -> Result<(), tollgate_telemetry::TelemetryError> {
//! // Exports when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set.
//! let otel = tollgate_telemetry::Otel::from_env()?;
//! let guard = otel.map(tollgate_telemetry::Otel::install).transpose()?;
//! // ... run graphs ...
//! drop(guard); // flushes the spans still buffered
//! # Ok(())
//! # }
//! ```

mod error;
#[cfg(feature = "otel")]
mod otel;
#[cfg(feature = "prometheus")]
mod prometheus;

pub use error::TelemetryError;
#[cfg(feature = "otel")]
pub use otel::{Otel, OtelGuard, Protocol};
#[cfg(feature = "prometheus")]
pub use prometheus::Metrics;
