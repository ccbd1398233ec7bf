//! OpenTelemetry end to end: `memex serve`, as an operator runs it, exports over OTLP/gRPC to a
//! receiver in this test (the standard `OTEL_EXPORTER_OTLP_ENDPOINT`), and the test reads what
//! arrived: one server span per RPC (RPC semantic conventions, namespace, session, status) in the
//! trace of the caller's `traceparent`, with child spans for Postgres, the index and the VCC
//! compiler; and the metrics the dashboards and alerts in `deploy/` query, by the names
//! Prometheus gives them (`prom.rs`), which `deploy.rs` checks.
#![allow(clippy::unwrap_used)]

mod deploy;
mod prom;
mod receiver;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memex_proto::v1 as pb;
use memex_proto::v1::context_service_client::ContextServiceClient;
use memex_proto::v1::event_service_client::EventServiceClient;
use memex_proto::v1::search_service_client::SearchServiceClient;
use memex_proto::v1::session_service_client::SessionServiceClient;
use memex_proto::v1::view_service_client::ViewServiceClient;
use opentelemetry_proto::tonic::metrics::v1::{Metric, metric::Data, number_data_point};
use opentelemetry_proto::tonic::trace::v1::Span;
use receiver::{Receiver, attr, str_attr};

const NS: &str = "otel";
const EVENTS: usize = 24;
const MAX_CONNECTIONS: i64 = 7;
/// `background.rs`'s pool.
const BACKGROUND_CONNECTIONS: i64 = 4;
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

struct Served(Child, std::path::PathBuf);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// A W3C trace context the client sends, and what the server's span must carry.
struct Trace {
    trace_id: String,
    parent_id: String,
}

impl Trace {
    fn new() -> Trace {
        let (t, p) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        Trace { trace_id: t.simple().to_string(), parent_id: p.simple().to_string()[16..].to_owned() }
    }

    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        let header = format!("00-{}-{}-01", self.trace_id, self.parent_id);
        r.metadata_mut().insert("traceparent", header.parse().unwrap());
        r
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

async fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let started = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if started.elapsed() > Duration::from_secs(60) => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn spans_and_metrics_reach_an_otlp_receiver() {
    let Some(model_dir) = memex_embed::test_model_dir() else { return };
    let Some(db) = memex_tests::test_db().await else { return };
    let store = db.store().await;
    store.create_namespace(NS).await.unwrap();
    let (otlp, endpoint) = Receiver::start().await;
    let port = free_port();
    let index_dir = std::env::temp_dir().join(format!("memex-otel-index-{}", db.name));
    let _served = Served(
        Command::new(env!("CARGO_BIN_EXE_memex"))
            .args(["serve", "--insecure-disable-auth", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--database-url", &db.url])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .env_remove("OTEL_SERVICE_NAME")
            .env_remove("OTEL_SDK_DISABLED")
            .env("MEMEX_DATABASE__MAX_CONNECTIONS", MAX_CONNECTIONS.to_string())
            .env("MEMEX_SEARCH__INDEX_DIR", &index_dir)
            .env("MEMEX_EMBEDDING__PROVIDER", "minilm")
            .env("MEMEX_EMBEDDING__MODEL_DIR", &model_dir)
            // Spans are exported whatever the log level says.
            .env("MEMEX_LOG__FILTER", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        index_dir,
    );
    let channel = {
        let started = Instant::now();
        let url = format!("http://127.0.0.1:{port}");
        loop {
            if let Ok(c) = tonic::transport::Channel::from_shared(url.clone()).unwrap().connect().await {
                break c;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "the server did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };

    // The RPCs, each in a trace of the client's.
    let create = Trace::new();
    let session = SessionServiceClient::new(channel.clone())
        .create_session(create.request(pb::CreateSessionRequest {
            namespace: NS.into(),
            agent_id: "agent".into(),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
        .id;
    let append = Trace::new();
    let events = (0..EVENTS)
        .map(|i| pb::EventInput {
            kind: "note".into(),
            content: format!("deploy cache error number {i}: the build broke in module m{}", i % 5),
            ..Default::default()
        })
        .collect();
    EventServiceClient::new(channel.clone())
        .append_events(append.request(pb::AppendEventsRequest {
            namespace: NS.into(),
            session_id: session.clone(),
            events,
            ..Default::default()
        }))
        .await
        .unwrap();
    // First: nothing has compiled this version of the session yet.
    let view = Trace::new();
    let mut chunks = ViewServiceClient::new(channel.clone())
        .compile_view(view.request(pb::CompileViewRequest {
            namespace: NS.into(),
            session_id: session.clone(),
            view: pb::ViewKind::Full as i32,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    while chunks.message().await.unwrap().is_some() {}
    let search = Trace::new();
    SearchServiceClient::new(channel.clone())
        .search(search.request(pb::SearchRequest {
            namespace: NS.into(),
            query: "deploy cache error".into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    let pack = Trace::new();
    ContextServiceClient::new(channel.clone())
        .build_pack(pack.request(pb::BuildPackRequest {
            namespace: NS.into(),
            session_id: session.clone(),
            user_message: "which module broke the build?".into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    let refused = Trace::new();
    let status = SessionServiceClient::new(channel.clone())
        .get_session(refused.request(pb::GetSessionRequest { namespace: NS.into(), session_id: "nope".into() }))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);

    // Spans.
    let rpcs = [
        (&create, "memex.v1.SessionService", "CreateSession", 0, true),
        (&append, "memex.v1.EventService", "AppendEvents", 0, true),
        (&view, "memex.v1.ViewService", "CompileView", 0, true),
        (&search, "memex.v1.SearchService", "Search", 0, false),
        (&pack, "memex.v1.ContextService", "BuildPack", 0, true),
        (&refused, "memex.v1.SessionService", "GetSession", 3, false),
    ];
    let spans = eventually("a server span for every RPC", || {
        let spans = otlp.spans();
        let missing: Vec<&str> = rpcs
            .iter()
            .filter(|(t, ..)| !spans.iter().any(|s| hex(&s.trace_id) == t.trace_id && s.kind == SERVER))
            .map(|(_, _, m, ..)| *m)
            .collect();
        if missing.is_empty() { Ok(spans) } else { Err(format!("none yet for {missing:?}")) }
    })
    .await;
    for (trace, service, method, code, with_session) in rpcs {
        let server: Vec<&Span> =
            spans.iter().filter(|s| hex(&s.trace_id) == trace.trace_id && s.kind == SERVER).collect();
        assert_eq!(server.len(), 1, "{method}: one server span per RPC");
        let s = server[0];
        assert_eq!(s.name, format!("{service}/{method}"));
        assert_eq!(hex(&s.parent_span_id), trace.parent_id, "{method}: the caller's span is the parent");
        assert_eq!(str_attr(&s.attributes, "rpc.system").as_deref(), Some("grpc"));
        assert_eq!(str_attr(&s.attributes, "rpc.service").as_deref(), Some(service));
        assert_eq!(str_attr(&s.attributes, "rpc.method").as_deref(), Some(method));
        let status = attr(&s.attributes, "rpc.grpc.status_code").as_ref().and_then(receiver::as_int);
        assert_eq!(status, Some(code), "{method}: rpc.grpc.status_code");
        assert_eq!(str_attr(&s.attributes, "memex.namespace").as_deref(), Some(NS), "{method}");
        if with_session {
            assert_eq!(str_attr(&s.attributes, "memex.session_id").as_deref(), Some(session.as_str()), "{method}");
        }
        // A caller's mistake is no server error.
        assert_ne!(s.status.as_ref().map_or(0, |st| st.code), 2, "{method}: span status");
    }
    let below = |trace: &Trace| -> Vec<&Span> {
        let server = spans.iter().find(|s| hex(&s.trace_id) == trace.trace_id && s.kind == SERVER).unwrap();
        descendants(&spans, server)
    };
    let names = |spans: &[&Span]| spans.iter().map(|s| s.name.clone()).collect::<BTreeSet<_>>();
    let appended = below(&append);
    let pg = appended.iter().find(|s| s.name == "store.append").expect("a Postgres span under AppendEvents");
    assert_eq!(pg.kind, CLIENT);
    assert_eq!(str_attr(&pg.attributes, "db.system.name").as_deref(), Some("postgresql"));
    assert_eq!(str_attr(&pg.attributes, "db.operation.name").as_deref(), Some("append"));
    let viewed = names(&below(&view));
    assert!(viewed.contains("vcc.compile") && viewed.contains("store.session"), "CompileView: {viewed:?}");
    let searched = names(&below(&search));
    assert!(searched.contains("index.search") && searched.contains("index.catch_up"), "Search: {searched:?}");
    assert!(searched.iter().any(|n| n.starts_with("store.")), "Search: {searched:?}");
    let packed = names(&below(&pack));
    assert!(packed.contains("index.rank"), "BuildPack: {packed:?}");
    assert!(packed.iter().any(|n| n.starts_with("store.")), "BuildPack: {packed:?}");
    // The background loops (index catch-up, embedding workers) export no traces of their own:
    // every span is an RPC's or under one.
    for s in &spans {
        assert!(s.kind == SERVER || !s.parent_span_id.is_empty(), "a span outside any RPC: {}", s.name);
    }

    // Metrics.
    let exported = eventually("every metric, caught up", || check_metrics(&otlp, &session)).await;
    assert!(otlp.services().iter().all(|s| s == "memex"), "service.name: {:?}", otlp.services());
    deploy::check_names_against(&exported);
}

/// Every span below `root` in its trace.
fn descendants<'a>(spans: &'a [Span], root: &Span) -> Vec<&'a Span> {
    let mut ids = vec![root.span_id.clone()];
    let mut out: Vec<&Span> = Vec::new();
    while let Some(id) = ids.pop() {
        for s in spans.iter().filter(|s| s.trace_id == root.trace_id && s.parent_span_id == id) {
            ids.push(s.span_id.clone());
            out.push(s);
        }
    }
    out
}

/// (attributes, value) of a sum's or gauge's points.
fn points(m: &Metric) -> Vec<(Vec<opentelemetry_proto::tonic::common::v1::KeyValue>, f64)> {
    let nums = match &m.data {
        Some(Data::Sum(s)) => &s.data_points,
        Some(Data::Gauge(g)) => &g.data_points,
        _ => return Vec::new(),
    };
    nums.iter()
        .map(|p| {
            let v = match p.value {
                Some(number_data_point::Value::AsInt(i)) => i as f64,
                Some(number_data_point::Value::AsDouble(d)) => d,
                None => f64::NAN,
            };
            (p.attributes.clone(), v)
        })
        .collect()
}

fn value(r: &Receiver, name: &str, labels: &[(&str, &str)]) -> Result<f64, String> {
    let m = r.metric(name).ok_or(format!("no {name} yet"))?;
    points(&m)
        .into_iter()
        .find(|(a, _)| labels.iter().all(|(k, v)| str_attr(a, k).as_deref() == Some(*v)))
        .map(|(_, v)| v)
        .ok_or(format!("{name}: no point with {labels:?}"))
}

fn at_least(r: &Receiver, name: &str, labels: &[(&str, &str)], min: f64) -> Result<(), String> {
    let v = value(r, name, labels)?;
    if v >= min { Ok(()) } else { Err(format!("{name}{labels:?} = {v}, want >= {min}")) }
}

/// Checks the metrics memex must export; returns the Prometheus series names of all it did.
fn check_metrics(r: &Receiver, _session: &str) -> Result<BTreeSet<String>, String> {
    let duration = r.metric("rpc.server.duration").ok_or("no rpc.server.duration yet")?;
    let Some(Data::Histogram(h)) = &duration.data else { return Err("rpc.server.duration: not a histogram".into()) };
    assert_eq!(duration.unit, "s");
    for (service, method, code) in [
        ("memex.v1.EventService", "AppendEvents", 0),
        ("memex.v1.ViewService", "CompileView", 0),
        ("memex.v1.ContextService", "BuildPack", 0),
        ("memex.v1.SessionService", "GetSession", 3),
    ] {
        let p = h
            .data_points
            .iter()
            .find(|p| {
                str_attr(&p.attributes, "rpc.service").as_deref() == Some(service)
                    && str_attr(&p.attributes, "rpc.method").as_deref() == Some(method)
                    && str_attr(&p.attributes, "rpc.system").as_deref() == Some("grpc")
                    && attr(&p.attributes, "rpc.grpc.status_code").as_ref().and_then(receiver::as_int) == Some(code)
            })
            .ok_or(format!("rpc.server.duration: no point for {method} with status {code}"))?;
        assert!(p.count >= 1 && p.sum.is_some_and(|s| s > 0.0), "{method}: {p:?}");
        // Seconds, with bounds for seconds (the SDK's default bounds are for milliseconds).
        assert_eq!(p.explicit_bounds.first(), Some(&0.001), "{method}: bounds {:?}", p.explicit_bounds);
        assert!(p.explicit_bounds.contains(&1.0));
    }
    let n = EVENTS as f64;
    at_least(r, "memex.events.appended", &[], n)?;
    at_least(r, "memex.append.batches", &[], 1.0)?;
    at_least(r, "memex.index.events", &[], n)?;
    at_least(r, "memex.view_cache.misses", &[], 1.0)?;
    value(r, "memex.view_cache.hits", &[])?;
    value(r, "memex.query_vectors", &[("outcome", "cached")])?;
    at_least(r, "memex.embedding.events", &[("memex.embedding.model", "all-MiniLM-L6-v2")], n)?;
    // Lags: caught up, once the index and the worker have taken in every event.
    for (name, labels) in
        [("memex.index.lag", vec![]), ("memex.embedding.lag", vec![("memex.embedding.model", "all-MiniLM-L6-v2")])]
    {
        let lag = value(r, name, &labels)?;
        if lag != 0.0 {
            return Err(format!("{name} = {lag}, not caught up yet"));
        }
    }
    fn pool(name: &str) -> [(&str, &str); 1] {
        [("db.client.connection.pool.name", name)]
    }
    assert_eq!(value(r, "db.client.connection.max", &pool("requests"))?, MAX_CONNECTIONS as f64);
    assert_eq!(value(r, "db.client.connection.max", &pool("background"))?, BACKGROUND_CONNECTIONS as f64);
    for state in ["idle", "used"] {
        let v = value(
            r,
            "db.client.connection.count",
            &[("db.client.connection.pool.name", "requests"), ("db.client.connection.state", state)],
        )?;
        assert!((0.0..=MAX_CONNECTIONS as f64).contains(&v), "{state}: {v}");
    }
    at_least(r, "db.client.connection.count", &[("db.client.connection.state", "idle")], 1.0)?;
    assert_eq!(value(r, "memex.rpc.shed", &[])?, 0.0);
    value(r, "memex.rpc.expired_waiting", &[])?;
    value(r, "memex.admission.requests", &[("state", "waiting")])?;
    let budget = r.metric("memex.pack.budget.use").ok_or("no memex.pack.budget.use yet")?;
    let Some(Data::Histogram(b)) = &budget.data else { return Err("memex.pack.budget.use: not a histogram".into()) };
    let total = b
        .data_points
        .iter()
        .find(|p| str_attr(&p.attributes, "memex.pack.block").as_deref() == Some("total"))
        .ok_or("memex.pack.budget.use: no total")?;
    let share = total.sum.unwrap_or(0.0) / total.count as f64;
    assert!(share > 0.0 && share <= 1.0, "pack budget use {share}");
    assert!(b.data_points.iter().any(|p| str_attr(&p.attributes, "memex.pack.block").as_deref() == Some("tail")));
    Ok(r.metrics().iter().flat_map(prom::series_names).collect())
}
