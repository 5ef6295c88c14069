//! Why telemetry could not be set up.

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`) names a
    /// protocol this build does not export with.
    #[error(
        "{variable}={value} is not supported: tollgate exports traces over http/protobuf or http/json"
    )]
    UnsupportedProtocol {
        /// The variable that names it.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// The OTLP exporter refused its settings (an endpoint that is not a
    /// URL, say).
    #[error("cannot build the OTLP exporter: {source}")]
    Exporter {
        /// The exporter's reason.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Another `tracing` subscriber is installed already.
    #[error("a tracing subscriber is installed already: {source}")]
    SubscriberTaken {
        /// `tracing`'s reason.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Another `metrics` recorder is installed already, or the
    /// Prometheus recorder refused its settings.
    #[error("cannot install the Prometheus recorder: {source}")]
    Recorder {
        /// The exporter's reason.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
