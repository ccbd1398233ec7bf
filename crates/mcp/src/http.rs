//! MCP's streamable-HTTP transport, as `memex serve` runs it on its own port: `POST /mcp`.
//!
//! The HTTP server is a gRPC client of the memex server over loopback: each tool call is made with
//! the HTTP request's own `Authorization` header, so keys are checked, and namespaces scoped, by
//! the gRPC server alone. With auth on, a request without a bearer is refused here (401) and a
//! request with one is checked once against the server (a cheap `ListSessions` in the request's
//! namespace), remembered for `key_ttl`, so a wrong key is refused (401/403) before any MCP
//! exchange rather than only at its first tool call.
//!
//! Stateless: no MCP session is kept between requests (rmcp serves protocol `2026-07-28`
//! statelessly anyway; older clients are served the same way), and simple calls are answered as
//! one JSON body, so every request stands alone, as a gRPC call does.
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use memex_proto::v1::session_service_client::SessionServiceClient;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use crate::status::status_text;
use crate::tools::NAMESPACE_HEADER;
use crate::{Authorize, Caller, McpError, Memex};

/// How the HTTP front reaches its gRPC server and whom it lets in.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// The memex gRPC endpoint (over loopback: `http://127.0.0.1:50051`).
    pub endpoint: String,
    /// The namespace of requests that send no `X-Memex-Namespace` header.
    pub namespace: String,
    /// Whether the gRPC server requires API keys: then so does this front.
    pub auth: bool,
    /// How long a key found good is remembered before it is checked again.
    pub key_ttl: Duration,
    /// `Host` header values accepted (DNS-rebinding protection); `*` accepts any.
    pub allowed_hosts: Vec<String>,
}

#[derive(Clone)]
struct Gate {
    channel: Channel,
    opts: Arc<HttpOptions>,
    /// blake3(authorization, namespace) of keys the server accepted.
    good: moka::future::Cache<[u8; 32], ()>,
}

/// Serves MCP on `listener` at `/mcp` until `shutdown` completes; requests in flight then finish.
pub async fn serve(
    listener: TcpListener,
    opts: HttpOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), McpError> {
    let channel = crate::lazy_channel(&opts.endpoint)?;
    let cancel = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_cancellation_token(cancel.clone());
    config = if opts.allowed_hosts.iter().any(|h| h == "*") {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(opts.allowed_hosts.clone())
    };
    let default = Caller { authorization: None, namespace: opts.namespace.clone() };
    let memex = Memex::new(channel.clone(), default);
    let mcp = StreamableHttpService::new(move || Ok(memex.clone()), Arc::new(NeverSessionManager::default()), config);
    let gate = Gate {
        channel,
        good: moka::future::Cache::builder().max_capacity(10_000).time_to_live(opts.key_ttl).build(),
        opts: Arc::new(opts),
    };
    let app =
        axum::Router::new().route_service("/mcp", mcp).layer(axum::middleware::from_fn_with_state(gate, check_key));
    tracing::info!(address = ?listener.local_addr().ok(), "MCP (streamable HTTP) listening at /mcp");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            cancel.cancel();
        })
        .await?;
    Ok(())
}

fn refuse(code: StatusCode, text: String) -> Response {
    let mut r = (code, text).into_response();
    if code == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    }
    r
}

/// Refuses a request whose key the gRPC server would refuse; lets the rest through.
async fn check_key(State(gate): State<Gate>, headers: HeaderMap, req: Request, next: Next) -> Response {
    if !gate.opts.auth {
        return next.run(req).await;
    }
    let Some(auth) = headers.get(header::AUTHORIZATION) else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED: missing API key: send the header \"Authorization: Bearer <key>\"".into(),
        );
    };
    let namespace = headers
        .get(NAMESPACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .unwrap_or(&gate.opts.namespace)
        .to_owned();
    let mut hasher = blake3::Hasher::new();
    hasher.update(auth.as_bytes()).update(&[0]).update(namespace.as_bytes());
    let key = *hasher.finalize().as_bytes();
    if gate.good.get(&key).await.is_some() {
        return next.run(req).await;
    }
    let Ok(value) = MetadataValue::try_from(auth.as_bytes()) else {
        return refuse(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED: the Authorization header is not ASCII".into());
    };
    let mut sessions = SessionServiceClient::with_interceptor(gate.channel.clone(), Authorize(Some(value)));
    let probe = memex_proto::v1::ListSessionsRequest { namespace, page_size: 1, ..Default::default() };
    match sessions.list_sessions(probe).await {
        Ok(_) => {
            gate.good.insert(key, ()).await;
            next.run(req).await
        }
        Err(s) if s.code() == tonic::Code::Unauthenticated => refuse(StatusCode::UNAUTHORIZED, status_text(&s)),
        Err(s) if s.code() == tonic::Code::PermissionDenied => refuse(StatusCode::FORBIDDEN, status_text(&s)),
        Err(s) if s.code() == tonic::Code::NotFound => refuse(StatusCode::NOT_FOUND, status_text(&s)),
        // The key could not be checked (the server is busy or down): let the call try, and fail
        // as a tool error the agent can read.
        Err(_) => next.run(req).await,
    }
}
