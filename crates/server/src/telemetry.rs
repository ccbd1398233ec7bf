//! Logs and OpenTelemetry. Logs go to stderr (text or JSON); traces and metrics are exported over
//! OTLP/gRPC only when the standard `OTEL_EXPORTER_OTLP_*` variables ask for it, and never when
//! `OTEL_SDK_DISABLED=true`.
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::{Level, Metadata};
use tracing_subscriber::filter::{FilterExt, Targets, dynamic_filter_fn};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogConfig, LogFormat};

/// Flushes and shuts the exporters down when dropped (at the end of `main`).
pub struct TelemetryGuard {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(t) = self.tracer.take() {
            let _ = t.shutdown();
        }
        if let Some(m) = self.meter.take() {
            let _ = m.shutdown();
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    #[error("logging: {0}")]
    Subscriber(String),
}

/// True once spans are exported: the RPC layer reads a caller's `traceparent` only then.
static TRACING_ON: AtomicBool = AtomicBool::new(false);

pub fn tracing_on() -> bool {
    TRACING_ON.load(Ordering::Relaxed)
}

/// What the OTLP span exporter sees, whatever `log.filter` says: memex's spans (its child spans
/// are DEBUG, so a plain run at INFO never creates them), and only inside an RPC's trace (a
/// store call of a background loop is no trace of its own); of the log events, INFO and above.
fn otel_filter<S>() -> impl Filter<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let ours = Targets::new().with_target("memex", Level::DEBUG);
    let in_trace = dynamic_filter_fn(|meta: &Metadata<'_>, cx: &Context<'_, S>| {
        if meta.is_span() {
            meta.name() == "rpc" || cx.lookup_current().is_some()
        } else {
            *meta.level() <= Level::INFO
        }
    });
    ours.and(in_trace)
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Installs the global subscriber (and OTLP providers when configured). Call once per process.
pub fn init(log: &LogConfig) -> Result<TelemetryGuard, TelemetryError> {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    let any = env_set("OTEL_EXPORTER_OTLP_ENDPOINT");
    let want_traces = !disabled && (any || env_set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
    let want_metrics = !disabled && (any || env_set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"));
    let resource = || {
        let b = Resource::builder();
        if env_set("OTEL_SERVICE_NAME") { b.build() } else { b.with_service_name("memex").build() }
    };

    let tracer = if want_traces {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
        Some(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource()).build())
    } else {
        None
    };
    let meter = if want_metrics {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let provider = SdkMeterProvider::builder().with_periodic_exporter(exporter).with_resource(resource()).build();
        opentelemetry::global::set_meter_provider(provider.clone());
        Some(provider)
    } else {
        None
    };

    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.filter))
        .map_err(|e| TelemetryError::Subscriber(format!("log.filter {:?}: {e}", log.filter)))?;
    let fmt = match log.format {
        LogFormat::Text => tracing_subscriber::fmt::layer().with_writer(std::io::stderr).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr).boxed(),
    };
    let otel = tracer
        .as_ref()
        .map(|t| tracing_opentelemetry::layer().with_tracer(t.tracer("memex")).with_filter(otel_filter()));
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .try_init()
        .map_err(|e| TelemetryError::Subscriber(e.to_string()))?;
    TRACING_ON.store(tracer.is_some(), Ordering::Relaxed);
    if want_traces || want_metrics {
        tracing::info!(traces = want_traces, metrics = want_metrics, "OpenTelemetry OTLP export on");
    }
    Ok(TelemetryGuard { tracer, meter })
}
