//! The per-RPC tower layer: one server span per RPC (OTel RPC semantic conventions, parented on the
//! caller's `traceparent`) and `rpc.server.duration`, both closed with the RPC's gRPC status; and
//! the RPC's tenant scope (`memex_store::tenant`), `Deny` until `Auth::scope` names the caller's
//! namespace, entered for the handler and for every poll of the response body (a streaming
//! handler's messages are made there, after the handler returned).
//!
//! A failed unary RPC is a trailers-only response (the status in the headers); any other response
//! carries its status in the trailers, after the body, so the span and the measurement end when
//! the body does: a streaming RPC is measured to its last message.
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame, SizeHint};
use memex_store::tenant::{Tenant, TenantScope};
use opentelemetry::KeyValue;
use opentelemetry::metrics::Histogram;
use tonic::codegen::http;
use tracing::Span;
use tracing::field::Empty;

/// Bucket bounds of `rpc.server.duration`, in seconds (the SDK's default bounds are for
/// milliseconds: every RPC would land in the first bucket).
const DURATION_BOUNDS: [f64; 15] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0];

/// gRPC status codes (`rpc.grpc.status_code`).
const UNKNOWN: i64 = 2;
const CANCELLED: i64 = 1;
const UNIMPLEMENTED: i64 = 12;

#[derive(Clone)]
pub struct RpcLayer {
    duration: Histogram<f64>,
}

impl RpcLayer {
    pub fn new() -> RpcLayer {
        let meter = opentelemetry::global::meter("memex");
        RpcLayer {
            duration: meter
                .f64_histogram("rpc.server.duration")
                .with_description("Duration of each inbound RPC, to its last response message")
                .with_unit("s")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
        }
    }
}

impl Default for RpcLayer {
    fn default() -> Self {
        RpcLayer::new()
    }
}

impl<S> tower::Layer<S> for RpcLayer {
    type Service = Rpc<S>;
    fn layer(&self, inner: S) -> Rpc<S> {
        Rpc { inner, duration: self.duration.clone() }
    }
}

#[derive(Clone)]
pub struct Rpc<S> {
    inner: S,
    duration: Histogram<f64>,
}

/// Records the RPC's namespace on its server span (called where the namespace is resolved).
pub fn record_namespace(name: &str) {
    Span::current().record("memex.namespace", name);
}

/// Records the session an RPC acts on, on its server span (formatted only if the span is kept).
pub fn record_session(id: impl std::fmt::Display) {
    Span::current().record("memex.session_id", tracing::field::display(id));
}

/// `/memex.v1.EventService/AppendEvents` → (`memex.v1.EventService`, `AppendEvents`).
fn split_path(path: &str) -> (&str, &str) {
    let p = path.strip_prefix('/').unwrap_or(path);
    p.rsplit_once('/').unwrap_or((p, ""))
}

fn server_span<B>(req: &http::Request<B>) -> Span {
    let path = req.uri().path();
    let (service, method) = split_path(path);
    let span = tracing::info_span!(
        "rpc",
        otel.name = path.strip_prefix('/').unwrap_or(path),
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
        memex.namespace = Empty,
        memex.session_id = Empty,
    );
    if crate::telemetry::tracing_on() && req.headers().contains_key("traceparent") {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(req.headers())));
        // Fails only when the span is disabled (filtered out): then there is nothing to parent.
        let _ = span.set_parent(parent);
    }
    span
}

struct Headers<'a>(&'a http::HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// What closes an RPC's span and measurement once its status is known.
struct Finish {
    span: Span,
    start: Instant,
    service: String,
    method: String,
    duration: Histogram<f64>,
    done: bool,
}

impl Finish {
    fn finish(&mut self, code: i64) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        self.span.record("rpc.grpc.status_code", code);
        // Server errors, per the conventions; a caller's mistake leaves the span unset.
        if matches!(code, 2 | 4 | 12 | 13 | 14 | 15) {
            self.span.record("otel.status_code", "ERROR");
        }
        // A path no service serves says nothing worth a series of its own.
        let (service, method) = match code {
            UNIMPLEMENTED => ("_OTHER".to_owned(), "_OTHER".to_owned()),
            _ => (std::mem::take(&mut self.service), std::mem::take(&mut self.method)),
        };
        self.duration.record(
            self.start.elapsed().as_secs_f64(),
            &[
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", service),
                KeyValue::new("rpc.method", method),
                KeyValue::new("rpc.grpc.status_code", code),
            ],
        );
    }
}

impl Drop for Finish {
    /// A body dropped before its trailers: the client went away.
    fn drop(&mut self) {
        self.finish(CANCELLED);
    }
}

fn status_in(headers: &http::HeaderMap) -> Option<i64> {
    headers.get("grpc-status").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok())
}

impl<S, B, R> tower::Service<http::Request<B>> for Rpc<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    R: Body,
{
    type Response = http::Response<Observed<R>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let span = server_span(&req);
        let (service, method) = split_path(req.uri().path());
        let mut finish = Finish {
            span: span.clone(),
            start: Instant::now(),
            service: service.to_owned(),
            method: method.to_owned(),
            duration: self.duration.clone(),
            done: false,
        };
        let tenant = TenantScope::new(Tenant::Deny);
        let fut = {
            let _entered = span.enter();
            tenant.run_sync(|| self.inner.call(req))
        };
        Box::pin(tracing::Instrument::instrument(
            async move {
                match tenant.clone().run(fut).await {
                    Ok(res) => {
                        if let Some(code) = status_in(res.headers()) {
                            finish.finish(code);
                        }
                        let span = finish.span.clone();
                        Ok(res.map(|inner| Observed { inner: Box::pin(inner), span, finish, tenant }))
                    }
                    Err(e) => {
                        finish.finish(UNKNOWN);
                        Err(e)
                    }
                }
            },
            span,
        ))
    }
}

/// A response body that ends its RPC's span and measurement at its trailers.
pub struct Observed<B> {
    inner: Pin<Box<B>>,
    span: Span,
    finish: Finish,
    tenant: TenantScope,
}

impl<B: Body> Body for Observed<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        // Streaming handlers produce their messages here: inside the RPC's span and tenant.
        let _entered = this.span.enter();
        let inner = &mut this.inner;
        let polled = this.tenant.run_sync(|| inner.as_mut().poll_frame(cx));
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(status_in) {
                    this.finish.finish(code);
                }
            }
            Poll::Ready(Some(Err(_))) => this.finish.finish(UNKNOWN),
            Poll::Ready(None) => this.finish.finish(0),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_service_and_method() {
        assert_eq!(split_path("/memex.v1.EventService/AppendEvents"), ("memex.v1.EventService", "AppendEvents"));
        assert_eq!(split_path("/grpc.health.v1.Health/Check"), ("grpc.health.v1.Health", "Check"));
        assert_eq!(split_path("/nonsense"), ("nonsense", ""));
    }
}
