//! `memex-bench mcp`: what MCP costs over gRPC. One in-process server (auth on) serving gRPC and
//! MCP over streamable HTTP, a small corpus in one session, then the same `search` and
//! `build_pack` requests made N times each, one at a time, directly over gRPC and as MCP tool calls
//! (the rmcp client; the server forwards each to gRPC over loopback). Prints p50/p99 per path,
//! then one JSON line.
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use memex_proto::v1 as pb;
use memex_proto::v1::context_service_client::ContextServiceClient;
use memex_proto::v1::search_service_client::SearchServiceClient;
use memex_server::flags::ConfigArgs;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

#[derive(clap::Args, Debug)]
pub struct McpBenchArgs {
    /// Calls of each tool on each path (after 20 warm-up calls).
    #[arg(long, default_value_t = 300)]
    pub calls: usize,
    /// Events in the corpus (one session).
    #[arg(long, default_value_t = 300)]
    pub events: usize,
    #[command(flatten)]
    pub config: ConfigArgs,
}

const WORDS: &[&str] = &[
    "parser",
    "header",
    "panic",
    "index",
    "bounds",
    "config",
    "figment",
    "tokio",
    "runtime",
    "deadlock",
    "retry",
    "timeout",
    "schema",
    "migration",
    "postgres",
    "vector",
    "cache",
    "eviction",
    "manifest",
    "pointer",
];

fn corpus(n: usize) -> Vec<pb::EventInput> {
    (0..n)
        .map(|i| {
            let words: Vec<&str> = (0..40).map(|j| WORDS[(i * 7 + j * 3 + j * j) % WORDS.len()]).collect();
            let text = format!("step {i}: {}", words.join(" "));
            let (kind, tool, call, content) = match i % 3 {
                0 => ("user_message", "", String::new(), text),
                1 => ("tool_call", "Bash", format!("c{i}"), json!({ "command": text }).to_string()),
                _ => ("tool_result", "", format!("c{}", i - 1), text),
            };
            pb::EventInput {
                kind: kind.into(),
                content,
                tool_name: tool.into(),
                tool_call_id: call,
                ..Default::default()
            }
        })
        .collect()
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Times `calls` runs of `f` (after a warm-up); microseconds.
async fn time<F, Fut>(calls: usize, mut f: F) -> anyhow::Result<Histogram<u64>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    for _ in 0..20 {
        f().await?;
    }
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for _ in 0..calls {
        let t = Instant::now();
        f().await?;
        h.record(t.elapsed().as_micros().max(1) as u64)?;
    }
    Ok(h)
}

pub async fn run(args: McpBenchArgs) -> anyhow::Result<()> {
    let mut config = args.config.load()?;
    config.auth.enabled = true;
    config.log.filter = "warn".into();
    config.embedding.provider = memex_server::config::EmbeddingProvider::None;
    config.search.index_dir = std::env::temp_dir()
        .join(format!("memex-bench-mcp-{}", ulid::Ulid::generate().to_string().to_lowercase()))
        .display()
        .to_string();
    let index_dir = config.search.index_dir.clone();
    let store = memex_server::connect_store_as(&config, memex_store::Tenant::All)
        .await
        .context("bench needs the database (make run sets it up)")?;
    store.migrate().await?;
    let ns_name = format!("bench-mcp-{}", ulid::Ulid::generate().to_string().to_lowercase());
    let ns = store.create_namespace(&ns_name).await?;
    let key = store.create_api_key(&ns, "bench", memex_store::Access::Write).await?.token;
    let grpc_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mcp_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let (grpc_addr, mcp_addr) = (grpc_listener.local_addr()?, mcp_listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(memex_server::run_with_mcp(grpc_listener, Some(mcp_listener), config, async {
        let _ = stopped.await;
    }));

    let conn = memex_client::Conn {
        endpoint: format!("http://{grpc_addr}"),
        namespace: ns_name.clone(),
        api_key: Some(key.clone()),
        api_key_file: "/nonexistent".into(),
        tls_ca: None,
    };
    let mut clients = None;
    for _ in 0..250 {
        if let Ok(c) = conn.connect().await {
            clients = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut clients = clients.context("the in-process server did not start")?;
    let session = clients
        .sessions
        .create_session(pb::CreateSessionRequest {
            namespace: ns_name.clone(),
            agent_id: "bench".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .id;
    clients
        .events
        .append_events(pb::AppendEventsRequest {
            namespace: ns_name.clone(),
            session_id: session.clone(),
            events: corpus(args.events),
            idempotency_key: String::new(),
        })
        .await?;
    let channel = conn.channel().await?;
    let bearer = conn.bearer()?;
    let search = SearchServiceClient::with_interceptor(channel.clone(), bearer.clone());
    let context = ContextServiceClient::with_interceptor(channel, bearer).max_decoding_message_size(usize::MAX);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{mcp_addr}/mcp"))
            .auth_header(key)
            .custom_headers([(http::HeaderName::from_static("x-memex-namespace"), ns_name.parse()?)].into()),
    );
    let mcp = ().serve(transport).await.context("MCP client")?;

    let query = "deadlock in the tokio runtime after a retry timeout";
    let search_req = pb::SearchRequest {
        namespace: ns_name.clone(),
        query: query.into(),
        limit: 10,
        with_text: true,
        ..Default::default()
    };
    let pack_req = pb::BuildPackRequest {
        namespace: ns_name.clone(),
        session_id: session.clone(),
        user_message: query.into(),
        ..Default::default()
    };
    let mcp_args = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
    let search_args = mcp_args(json!({ "query": query, "limit": 10, "namespace": ns_name }));
    let pack_args = mcp_args(json!({ "session_id": session, "user_message": query, "namespace": ns_name }));
    let n = args.calls;

    let grpc_search = time(n, || {
        let (mut c, r) = (search.clone(), search_req.clone());
        async move { c.search(r).await.map(drop).map_err(anyhow::Error::from) }
    })
    .await?;
    let mcp_search = time(n, || {
        let call = mcp.call_tool(CallToolRequestParams::new("search").with_arguments(search_args.clone()));
        async move { checked(call.await?) }
    })
    .await?;
    let grpc_pack = time(n, || {
        let (mut c, r) = (context.clone(), pack_req.clone());
        async move { c.build_pack(r).await.map(drop).map_err(anyhow::Error::from) }
    })
    .await?;
    let mcp_pack = time(n, || {
        let call = mcp.call_tool(CallToolRequestParams::new("build_pack").with_arguments(pack_args.clone()));
        async move { checked(call.await?) }
    })
    .await?;
    let _ = mcp.cancel().await;

    println!("{} calls each, one at a time; {} events in one session; BM25 only; auth on", n, args.events);
    let mut figures = serde_json::Map::new();
    for (name, h) in
        [("search_grpc", &grpc_search), ("search_mcp", &mcp_search), ("pack_grpc", &grpc_pack), ("pack_mcp", &mcp_pack)]
    {
        println!("{name:<12} p50 {:>7.2} ms   p99 {:>7.2} ms", ms(h, 0.5), ms(h, 0.99));
        figures.insert(name.into(), json!({ "p50_ms": ms(h, 0.5), "p99_ms": ms(h, 0.99) }));
    }
    figures.insert("calls".into(), json!(n));
    figures.insert("events".into(), json!(args.events));
    println!("{}", serde_json::Value::Object(figures));
    let _ = stop.send(());
    let _ = server.await;
    let _ = std::fs::remove_dir_all(index_dir);
    Ok(())
}

/// A tool error is a failed benchmark, not a fast answer.
fn checked(r: rmcp::model::CallToolResult) -> anyhow::Result<()> {
    if r.is_error == Some(true) {
        let text = r.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
        anyhow::bail!("MCP tool error: {text}");
    }
    Ok(())
}
