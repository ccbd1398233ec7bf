//! OpenTelemetry instruments. They are no-ops until `telemetry::init` installs an OTLP meter
//! provider (when `OTEL_EXPORTER_OTLP_*` is set), so tests and plain runs pay nothing.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, ObservableCounter};
use tonic::codegen::http;

pub struct Metrics {
    pub events_appended: Counter<u64>,
    pub append_batches: Counter<u64>,
    pub artifact_bytes: Counter<u64>,
    /// Compiled sessions served from the cache, and compiled on demand (read from the cache's
    /// own counts when collected).
    _view_cache: [ObservableCounter<u64>; 2],
    /// Expensive RPCs refused at capacity, and given up at their deadline while waiting.
    _admission: [ObservableCounter<u64>; 2],
}

impl Metrics {
    pub fn new(views: Arc<memex_views::CacheStats>, admission: Arc<crate::admission::Admission>) -> Metrics {
        let meter = opentelemetry::global::meter("memex");
        let hits = views.clone();
        let shed = admission.clone();
        Metrics {
            _admission: [
                meter
                    .u64_observable_counter("memex.rpc.shed")
                    .with_description("Expensive RPCs refused with RESOURCE_EXHAUSTED at capacity")
                    .with_callback(move |o| o.observe(shed.shed.load(std::sync::atomic::Ordering::Relaxed), &[]))
                    .build(),
                meter
                    .u64_observable_counter("memex.rpc.expired_waiting")
                    .with_description("Expensive RPCs whose deadline passed while they waited for a turn")
                    .with_callback(move |o| {
                        o.observe(admission.expired.load(std::sync::atomic::Ordering::Relaxed), &[])
                    })
                    .build(),
            ],
            _view_cache: [
                meter
                    .u64_observable_counter("memex.view_cache.hits")
                    .with_description("Compiled sessions served from cache")
                    .with_callback(move |o| o.observe(hits.hits(), &[]))
                    .build(),
                meter
                    .u64_observable_counter("memex.view_cache.misses")
                    .with_description("Sessions compiled on demand")
                    .with_callback(move |o| o.observe(views.misses(), &[]))
                    .build(),
            ],
            events_appended: meter
                .u64_counter("memex.events.appended")
                .with_description("Events committed to the store")
                .build(),
            append_batches: meter
                .u64_counter("memex.append.batches")
                .with_description("Append batches committed (replays excluded)")
                .build(),
            artifact_bytes: meter
                .u64_counter("memex.artifacts.bytes")
                .with_description("Uncompressed bytes of artifactized tool outputs received")
                .with_unit("By")
                .build(),
        }
    }
}

/// A tower layer recording `rpc.server.duration` (seconds) per method and gRPC status code.
#[derive(Clone)]
pub struct RpcMetricsLayer {
    duration: Histogram<f64>,
}

impl RpcMetricsLayer {
    pub fn new() -> RpcMetricsLayer {
        let meter = opentelemetry::global::meter("memex");
        RpcMetricsLayer {
            duration: meter
                .f64_histogram("rpc.server.duration")
                .with_description("Time to the response headers of each RPC")
                .with_unit("s")
                .build(),
        }
    }
}

impl Default for RpcMetricsLayer {
    fn default() -> Self {
        RpcMetricsLayer::new()
    }
}

impl<S> tower::Layer<S> for RpcMetricsLayer {
    type Service = RpcMetrics<S>;
    fn layer(&self, inner: S) -> RpcMetrics<S> {
        RpcMetrics { inner, duration: self.duration.clone() }
    }
}

#[derive(Clone)]
pub struct RpcMetrics<S> {
    inner: S,
    duration: Histogram<f64>,
}

impl<S, B, R> tower::Service<http::Request<B>> for RpcMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.uri().path().to_owned();
        let start = Instant::now();
        let fut = self.inner.call(req);
        let duration = self.duration.clone();
        Box::pin(async move {
            let res = fut.await;
            // Errors are usually trailers-only responses with grpc-status in the headers; a
            // success carries its status in the trailers, which a layer cannot wait for.
            let code = match &res {
                Ok(r) => r
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i64>().ok())
                    .unwrap_or(0),
                Err(_) => 2,
            };
            duration.record(
                start.elapsed().as_secs_f64(),
                &[KeyValue::new("rpc.method", method), KeyValue::new("rpc.grpc.status_code", code)],
            );
            res
        })
    }
}
