//! memex as an MCP server: an agent that speaks the Model Context Protocol (Claude Code, Codex CLI,
//! Gemini CLI, any MCP client) calls memex's RPCs as tools — `search`, `read_lines`, `build_pack`,
//! `get_task_state`, `update_task_state`, `report`, `compact`, `expand_manifest`, and memory's
//! `find_quote`, `query_facts`, `expand_topic`, `remember_when`, `recall_all`, `list_topics`,
//! `get_fact`, `memory_status` — without a gRPC client of its own.
//!
//! The server here is a *front*: every tool call becomes one gRPC call to a running memex server,
//! through the same clients the CLI uses. Two transports:
//! - stdio ([`serve_stdio`]), for a local agent that spawns `memex mcp`, with the connection's
//!   API key and namespace (`--api-key`, `--namespace`);
//! - streamable HTTP ([`http::serve`]), which `memex serve` runs on its own port, forwarding each
//!   HTTP request's `Authorization: Bearer` to its gRPC call over loopback.
//!
//! **Architecture invariant:** no validation, authorization or decision of its own. Arguments map
//! onto the proto requests field by field; the gRPC server validates them and checks the key, so
//! MCP and gRPC callers get the same answers and the same field-naming errors through one path.
//! A failed call is an MCP tool error (`isError`) carrying the gRPC code name and the server's
//! message (`INVALID_ARGUMENT: limit: …`), never a protocol error or a crash.

pub mod args;
pub mod http;
mod render;
mod status;
mod tools;

use memex_proto::v1::context_service_client::ContextServiceClient;
use memex_proto::v1::memory_service_client::MemoryServiceClient;
use memex_proto::v1::search_service_client::SearchServiceClient;
use memex_proto::v1::task_service_client::TaskServiceClient;
use memex_proto::v1::view_service_client::ViewServiceClient;
use rmcp::ServiceExt;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub use status::status_text;
pub use tools::Memex;

/// Why the MCP server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("bad --endpoint {0:?}")]
    Endpoint(String),
    #[error(transparent)]
    Client(#[from] memex_client::ClientError),
    #[error("MCP over stdio: {0}")]
    Stdio(String),
    #[error("MCP over HTTP: {0}")]
    Http(#[from] std::io::Error),
}

/// Who a call is made as: the bearer sent to gRPC and the namespace used when a tool's arguments
/// name none.
#[derive(Clone, Debug)]
pub struct Caller {
    pub authorization: Option<MetadataValue<Ascii>>,
    pub namespace: String,
}

/// Attaches the caller's `authorization` to a gRPC request.
#[derive(Clone)]
pub struct Authorize(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Authorize {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

type Authed = InterceptedService<Channel, Authorize>;

/// The gRPC clients of one call, as one caller.
pub(crate) struct Clients {
    pub search: SearchServiceClient<Authed>,
    pub views: ViewServiceClient<Authed>,
    pub context: ContextServiceClient<Authed>,
    pub tasks: TaskServiceClient<Authed>,
    pub memory: MemoryServiceClient<Authed>,
}

impl Clients {
    pub(crate) fn new(channel: &Channel, caller: &Caller) -> Clients {
        let auth = Authorize(caller.authorization.clone());
        Clients {
            search: SearchServiceClient::with_interceptor(channel.clone(), auth.clone()),
            views: ViewServiceClient::with_interceptor(channel.clone(), auth.clone())
                .max_decoding_message_size(usize::MAX),
            context: ContextServiceClient::with_interceptor(channel.clone(), auth.clone())
                .max_decoding_message_size(usize::MAX),
            tasks: TaskServiceClient::with_interceptor(channel.clone(), auth.clone()),
            memory: MemoryServiceClient::with_interceptor(channel.clone(), auth).max_decoding_message_size(usize::MAX),
        }
    }
}

/// A channel to `endpoint` that connects on first use, so an MCP server starts (and answers
/// `UNAVAILABLE` tool errors) while the memex server is still down.
pub fn lazy_channel(endpoint: &str) -> Result<Channel, McpError> {
    Ok(Channel::from_shared(endpoint.to_owned()).map_err(|_| McpError::Endpoint(endpoint.to_owned()))?.connect_lazy())
}

/// The caller a `memex mcp` process acts as: the connection's key (flag, environment or key
/// file) and namespace.
pub fn stdio_caller(conn: &memex_client::Conn) -> Result<Caller, McpError> {
    use tonic::service::Interceptor;
    // memex-client keeps the key inside its interceptor: read it back from a request it decorated.
    let mut bearer = conn.bearer()?;
    let decorated = bearer.call(tonic::Request::new(())).map_err(|s| McpError::Stdio(s.message().to_owned()))?;
    let authorization = decorated.metadata().get("authorization").cloned();
    Ok(Caller { authorization, namespace: conn.namespace.clone() })
}

/// Serves the tools over stdin/stdout until the client closes them (`memex mcp`).
pub async fn serve_stdio(conn: &memex_client::Conn) -> Result<(), McpError> {
    let memex = Memex::new(lazy_channel(&conn.endpoint)?, stdio_caller(conn)?);
    let running = memex.serve(rmcp::transport::stdio()).await.map_err(|e| McpError::Stdio(e.to_string()))?;
    running.waiting().await.map_err(|e| McpError::Stdio(e.to_string()))?;
    Ok(())
}
