//! What the engine tells tracing and metrics systems: the trace context a
//! run keeps (so that every leg, in any process, joins one trace) and the
//! metrics it records through the `metrics` facade.
//!
//! Both cost next to nothing until a process installs something: spans are
//! disabled without a subscriber, [`set_trace_propagation`] has nothing to
//! call, and the `metrics` macros go to a recorder that drops them.

use std::sync::OnceLock;
use std::time::Duration;

use tracing::Span;

/// Turns a span's trace context into text kept with a run, and back.
///
/// The engine stores [`inject`](TracePropagation::inject)'s text when it
/// creates a run (`NewRun::trace`), and every later leg, in whatever
/// process continues it, [`extract`](TracePropagation::extract)s it into
/// its `run` span: one trace for the whole run, however many legs and days
/// it takes. An OpenTelemetry layer implements this with the W3C
/// `traceparent` form.
pub trait TracePropagation: Send + Sync + 'static {
    /// The trace context of `span` as text, or `None` when it is not traced.
    fn inject(&self, span: &Span) -> Option<String>;

    /// Makes `span` a child of the stored `context` (the same trace).
    fn extract(&self, span: &Span, context: &str);
}

static PROPAGATION: OnceLock<Box<dyn TracePropagation>> = OnceLock::new();

/// Installs the process's trace propagation (once; `false` when one was
/// installed already, which stays).
pub fn set_trace_propagation(propagation: impl TracePropagation) -> bool {
    PROPAGATION.set(Box::new(propagation)).is_ok()
}

/// The context to store with a new run whose first span is `span`.
pub(crate) fn inject(span: &Span) -> Option<String> {
    PROPAGATION.get()?.inject(span)
}

/// Puts a continuing leg's `span` into the run's stored trace.
pub(crate) fn join(span: &Span, context: Option<&str>) {
    if let (Some(propagation), Some(context)) = (PROPAGATION.get(), context) {
        propagation.extract(span, context);
    }
}

/// Marks `span` failed (OpenTelemetry status `ERROR`) with `error`. The
/// span must declare `otel.status_code` and `otel.status_description`.
pub(crate) fn span_failed(span: &Span, error: &dyn std::fmt::Display) {
    if !span.is_disabled() {
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_description", tracing::field::display(error));
    }
}

// Metric names (Prometheus conventions: `_total` counters, base units).
pub(crate) const RUNS_STARTED: &str = "tollgate_runs_started_total";
pub(crate) const RUNS_FINISHED: &str = "tollgate_runs_finished_total";
pub(crate) const RUNS_PAUSED: &str = "tollgate_runs_paused_total";
pub(crate) const STEP_DURATION: &str = "tollgate_step_duration_seconds";
pub(crate) const COMMIT_DURATION: &str = "tollgate_commit_duration_seconds";
pub(crate) const STORE_ERRORS: &str = "tollgate_store_errors_total";
pub(crate) const LEASES_HELD: &str = "tollgate_worker_leases_held";
pub(crate) const LEASES_LOST: &str = "tollgate_worker_leases_lost_total";

/// Registers the help text of the engine's metrics with the installed
/// recorder (call it after installing one; metrics recorded before are
/// kept either way).
pub fn describe_engine_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(RUNS_STARTED, "Runs created by this process (started or queued), by graph.");
    describe_counter!(
        RUNS_FINISHED,
        "Runs this process ended completed, failed, interrupted (cancelled) or rejected, by graph and status."
    );
    describe_counter!(RUNS_PAUSED, "Legs that paused a run for a decision, by graph.");
    describe_histogram!(
        STEP_DURATION,
        Unit::Seconds,
        "Super-steps of this process's legs, from the tasks' start to the step's commit."
    );
    describe_histogram!(COMMIT_DURATION, Unit::Seconds, "Store commits of one transition.");
    describe_counter!(STORE_ERRORS, "Store operations that failed, by operation and error kind.");
    describe_gauge!(LEASES_HELD, "Legs a worker of this process drives now (leases it holds).");
    describe_counter!(
        LEASES_LOST,
        "Legs of this process fenced off because another process took their run over."
    );
}

/// Counts a failed store operation in `tollgate_store_errors_total`, by
/// operation and [`StoreError::kind`](tollgate_checkpoint::StoreError::kind).
/// Losing a run to another process (`Fenced`, `RunTerminal`) is not a store
/// error: `tollgate_worker_leases_lost_total` counts it.
pub fn count_store_error(operation: &'static str, error: &tollgate_checkpoint::StoreError) {
    use tollgate_checkpoint::StoreError;
    if matches!(error, StoreError::Fenced { .. } | StoreError::RunTerminal { .. }) {
        return;
    }
    metrics::counter!(STORE_ERRORS, "operation" => operation, "error" => error.kind()).increment(1);
}

/// Records a duration in seconds.
pub(crate) fn seconds(name: &'static str, elapsed: Duration) {
    metrics::histogram!(name).record(elapsed.as_secs_f64());
}
