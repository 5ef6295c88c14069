//! The process's `tracing` subscriber: spans to OpenTelemetry when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` says so, and, for the long-running
//! commands (`serve`, `worker`), warnings on stderr (the database away, a
//! listening connection lost, a schedule that could not fire), at the
//! level `TOLLGATE_LOG` names (`warn` by default; `off` for none).

use tollgate_telemetry::{Otel, OtelGuard};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

/// Installs the subscriber; `long_running` adds the stderr log. The guard
/// flushes the spans when dropped. An error is a usage error's message.
pub(crate) fn install(long_running: bool) -> Result<Option<OtelGuard>, String> {
    let otel = Otel::from_env().map_err(|error| error.to_string())?;
    let level = match std::env::var("TOLLGATE_LOG") {
        Err(_) => LevelFilter::WARN,
        Ok(text) => text.parse::<LevelFilter>().map_err(|_| {
            format!("TOLLGATE_LOG={text} is not a level (off, error, warn, info, debug, trace)")
        })?,
    };
    if !long_running || level == LevelFilter::OFF {
        return otel.map(Otel::install).transpose().map_err(|error| error.to_string());
    }
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(level);
    let spans = otel.as_ref().map(|otel| otel.layer().with_filter(LevelFilter::INFO));
    let subscriber = tracing_subscriber::registry().with(spans).with(log);
    tracing::subscriber::set_global_default(subscriber).map_err(|error| error.to_string())?;
    Ok(otel.map(Otel::guard))
}
