//! An OTLP/gRPC receiver on 127.0.0.1:0, built on the `opentelemetry-proto` service definitions:
//! what a collector would be told, kept for the test to read.
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use tonic::{Request, Response, Status};

#[derive(Clone, Default)]
pub struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    /// Every export of every metric, in arrival order (cumulative: the last is the latest).
    metrics: Arc<Mutex<Vec<Metric>>>,
    /// `service.name` of every export's resource.
    services: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    /// Serves on a free loopback port; returns the receiver and its `http://` endpoint.
    pub async fn start() -> (Receiver, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let r = Receiver::default();
        let router = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(r.clone()))
            .add_service(MetricsServiceServer::new(r.clone()));
        tokio::spawn(router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)));
        (r, endpoint)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("lock").clone()
    }

    pub fn metrics(&self) -> Vec<Metric> {
        self.metrics.lock().expect("lock").clone()
    }

    /// The latest export of the metric `name`.
    pub fn metric(&self, name: &str) -> Option<Metric> {
        self.metrics.lock().expect("lock").iter().rev().find(|m| m.name == name).cloned()
    }

    pub fn services(&self) -> Vec<String> {
        self.services.lock().expect("lock").clone()
    }

    fn resource(&self, attributes: Option<&[KeyValue]>) {
        if let Some(name) = attributes.and_then(|a| attr(a, "service.name")).and_then(|v| as_str(&v)) {
            self.services.lock().expect("lock").push(name);
        }
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        for rs in request.into_inner().resource_spans {
            self.resource(rs.resource.as_ref().map(|r| &r.attributes[..]));
            let mut spans = self.spans.lock().expect("lock");
            spans.extend(rs.scope_spans.into_iter().flat_map(|s| s.spans));
        }
        Ok(Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        for rm in request.into_inner().resource_metrics {
            self.resource(rm.resource.as_ref().map(|r| &r.attributes[..]));
            let mut metrics = self.metrics.lock().expect("lock");
            metrics.extend(rm.scope_metrics.into_iter().flat_map(|s| s.metrics));
        }
        Ok(Response::new(ExportMetricsServiceResponse { partial_success: None }))
    }
}

/// The value of attribute `key`.
pub fn attr(attributes: &[KeyValue], key: &str) -> Option<AnyValue> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.clone())
}

pub fn as_str(v: &AnyValue) -> Option<String> {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

pub fn as_int(v: &AnyValue) -> Option<i64> {
    match &v.value {
        Some(any_value::Value::IntValue(i)) => Some(*i),
        _ => None,
    }
}

pub fn str_attr(attributes: &[KeyValue], key: &str) -> Option<String> {
    attr(attributes, key).as_ref().and_then(as_str)
}
