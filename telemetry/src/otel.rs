//! OpenTelemetry traces: an OTLP/HTTP exporter set up from the standard
//! `OTEL_*` variables, a `tracing` layer that turns the engine's and the
//! harness's spans into OpenTelemetry spans, and the W3C trace context a
//! run keeps so that its later legs join its trace.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tollgate_engine::TracePropagation;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

use crate::TelemetryError;

/// How spans are sent (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// `http/protobuf` (the default).
    HttpProtobuf,
    /// `http/json`.
    HttpJson,
}

impl Protocol {
    /// The protocol the environment names: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`,
    /// else `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`. `grpc`
    /// and anything else are refused.
    pub fn from_env() -> Result<Self, TelemetryError> {
        for variable in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
            let Ok(value) = std::env::var(variable) else { continue };
            return match value.trim() {
                "http/protobuf" => Ok(Self::HttpProtobuf),
                "http/json" => Ok(Self::HttpJson),
                _ => Err(TelemetryError::UnsupportedProtocol { variable, value }),
            };
        }
        Ok(Self::HttpProtobuf)
    }
}

/// An OTLP trace pipeline, ready to be installed.
#[derive(Debug)]
pub struct Otel {
    provider: SdkTracerProvider,
}

/// Keeps the pipeline running; dropping it sends the spans still buffered
/// (waiting for the exporter up to its timeout).
#[derive(Debug)]
#[must_use = "dropping the guard stops the export"]
pub struct OtelGuard {
    provider: SdkTracerProvider,
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            eprintln!("tollgate: could not send the last spans: {error}");
        }
    }
}

impl Otel {
    /// The pipeline the environment asks for, or `None` when neither
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` nor `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
    /// is set (nothing is exported, nothing is set up).
    ///
    /// The exporter reads the standard variables itself (endpoints,
    /// headers, timeout, compression); the service is `OTEL_SERVICE_NAME`,
    /// else `tollgate`. Also installs the engine's trace propagation (runs
    /// keep a W3C `traceparent`). Build it outside an async runtime: the
    /// exporter runs on a thread of its own with a blocking HTTP client.
    pub fn from_env() -> Result<Option<Self>, TelemetryError> {
        let set = |name| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
        if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            return Ok(None);
        }
        let protocol = match Protocol::from_env()? {
            Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
            Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
        };
        // The HTTP client's TLS (an https endpoint) uses ring, as the
        // OpenAI provider does; a provider installed earlier stays.
        // ring rather than aws-lc-rs: a smaller build that needs no CMake. rustls
        // 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
        // choice stands, so a newer rustls does not warn in a dependent's build.
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .build()
            .map_err(|error| TelemetryError::Exporter { source: Box::new(error) })?;
        let mut resource = Resource::builder();
        if !set("OTEL_SERVICE_NAME") {
            resource = resource.with_service_name("tollgate");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        tollgate_engine::set_trace_propagation(W3cTraceContext);
        Ok(Some(Self { provider }))
    }

    /// A `tracing` layer that exports spans through this pipeline, for a
    /// process that composes its own subscriber. Keep [`Otel::guard`]'s
    /// guard alive as long as it is used.
    pub fn layer<S>(&self) -> tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("tollgate"))
    }

    /// The guard that flushes this pipeline when dropped.
    pub fn guard(self) -> OtelGuard {
        OtelGuard { provider: self.provider }
    }

    /// Installs the process's `tracing` subscriber: this pipeline's layer,
    /// spans and events at level INFO and above.
    pub fn install(self) -> Result<OtelGuard, TelemetryError> {
        let subscriber = tracing_subscriber::registry()
            .with(self.layer())
            .with(tracing_subscriber::filter::LevelFilter::INFO);
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|error| TelemetryError::SubscriberTaken { source: Box::new(error) })?;
        Ok(self.guard())
    }
}

/// A run's trace context as a W3C `traceparent`.
struct W3cTraceContext;

impl TracePropagation for W3cTraceContext {
    fn inject(&self, span: &Span) -> Option<String> {
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        carrier.remove("traceparent")
    }

    fn extract(&self, span: &Span, context: &str) {
        let carrier = HashMap::from([("traceparent".to_owned(), context.to_owned())]);
        let parent = TraceContextPropagator::new().extract(&carrier);
        if parent.span().span_context().is_valid() {
            // Refused only for a span already started or not traced.
            let _ = span.set_parent(parent);
        }
    }
}
