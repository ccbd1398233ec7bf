//! A typed client of a running memex server, shared by the `memex` CLI, `memex-bench`, the tests
//! and (later) the MCP server, so that each reaches the server, authenticates, sizes its messages
//! and reports failures the same way.
//!
//! [`Conn`] says how to reach a server (clap flags and `MEMEX_*` variables); [`Conn::client`]
//! opens a [`Client`] with one typed method per RPC, returning the `memex.v1` messages; a failure
//! is a [`ClientError`] carrying the gRPC code and the server's message.
//!
//! It knows how to reach a server, nothing about how one is configured or run, and nothing about
//! how an answer is shown.
mod client;
mod context;
mod error;
mod memory;
mod pointer;
mod retry;

use std::path::PathBuf;

use memex_proto::v1::event_service_client::EventServiceClient;
use memex_proto::v1::session_service_client::SessionServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub use client::{Client, CompiledView};
pub use context::Reports;
pub use error::{ClientError, code_name};
pub use pointer::{format_pointer, line_pointer, parse_pointer};
pub use retry::{SHED_RETRIES, pushback, shed_retry};

/// How to reach the server.
#[derive(clap::Args, Debug, Clone)]
pub struct Conn {
    /// Server address.
    #[arg(long, env = "MEMEX_ENDPOINT", default_value = "http://127.0.0.1:50051")]
    pub endpoint: String,
    /// Namespace to act in.
    #[arg(long, short = 'n', env = "MEMEX_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// API key (bearer token).
    #[arg(long, env = "MEMEX_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// File holding the API key, used when --api-key is not given.
    #[arg(long, default_value = ".memex/dev.key")]
    pub api_key_file: PathBuf,
    /// For an https:// endpoint: the CA certificate (PEM) to trust; without it, the system's
    /// roots.
    #[arg(long, env = "MEMEX_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
}

/// Attaches `authorization: Bearer <key>` to every request (nothing when there is no key, for a
/// server with auth off).
#[derive(Clone)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    /// No token: for a server with auth off.
    pub fn none() -> Self {
        Bearer(None)
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A channel with the bearer token attached: what every service client here runs on.
pub type Authed = InterceptedService<Channel, Bearer>;

/// Clients with the bearer token attached, and generous message limits.
pub struct Clients {
    pub events: EventServiceClient<Authed>,
    pub sessions: SessionServiceClient<Authed>,
}

impl Conn {
    pub fn bearer(&self) -> Result<Bearer, ClientError> {
        let token = match &self.api_key {
            Some(k) => Some(k.clone()),
            None => std::fs::read_to_string(&self.api_key_file).ok().map(|s| s.trim().to_owned()),
        };
        let value = token.map(|t| format!("Bearer {t}").parse().map_err(ClientError::ApiKey)).transpose()?;
        Ok(Bearer(value))
    }

    /// A connection to the endpoint, for any service's client.
    pub async fn channel(&self) -> Result<Channel, ClientError> {
        let mut endpoint = Channel::from_shared(self.endpoint.clone()).map_err(ClientError::Endpoint)?;
        if self.endpoint.starts_with("https://") {
            let tls = match &self.tls_ca {
                Some(path) => {
                    let pem = std::fs::read(path)
                        .map_err(|e| ClientError::Input(format!("--tls-ca {}: {e}", path.display())))?;
                    tonic::transport::ClientTlsConfig::new()
                        .ca_certificate(tonic::transport::Certificate::from_pem(pem))
                }
                None => tonic::transport::ClientTlsConfig::new().with_native_roots(),
            };
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|source| ClientError::Connect { endpoint: self.endpoint.clone(), source })?;
        }
        endpoint.connect().await.map_err(|source| ClientError::Connect { endpoint: self.endpoint.clone(), source })
    }

    /// A [`Client`] of this namespace.
    pub async fn client(&self) -> Result<Client, ClientError> {
        Ok(Client::new(self.channel().await?, self.bearer()?, self.namespace.clone()))
    }

    pub async fn connect(&self) -> Result<Clients, ClientError> {
        let channel = self.channel().await?;
        let bearer = self.bearer()?;
        Ok(Clients {
            events: EventServiceClient::with_interceptor(channel.clone(), bearer.clone())
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
            sessions: SessionServiceClient::with_interceptor(channel, bearer).max_decoding_message_size(usize::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use tonic::service::Interceptor;

    use super::*;

    fn conn(api_key: Option<&str>, api_key_file: &str) -> Conn {
        Conn {
            endpoint: "http://127.0.0.1:1".into(),
            namespace: "default".into(),
            api_key: api_key.map(str::to_owned),
            api_key_file: api_key_file.into(),
            tls_ca: None,
        }
    }

    fn authorization(bearer: Result<Bearer, ClientError>) -> Option<String> {
        let mut bearer = bearer.expect("a bearer");
        let req = bearer.call(tonic::Request::new(())).expect("the interceptor never refuses");
        req.metadata().get("authorization").map(|v| v.to_str().expect("ascii").to_owned())
    }

    #[test]
    fn the_key_comes_from_the_flag_then_the_file_else_none() {
        let file = std::env::temp_dir().join(format!("memex-client-key-{}", std::process::id()));
        std::fs::write(&file, "from-file\n").expect("write key file");
        let path = file.display().to_string();
        assert_eq!(authorization(conn(Some("k1"), &path).bearer()).as_deref(), Some("Bearer k1"));
        assert_eq!(authorization(conn(None, &path).bearer()).as_deref(), Some("Bearer from-file"));
        assert_eq!(authorization(conn(None, "/nonexistent").bearer()), None);
        let _ = std::fs::remove_file(file);
    }

    #[test]
    fn a_key_that_cannot_be_a_header_is_refused() {
        let Err(err) = conn(Some("bad\nkey"), "/nonexistent").bearer() else {
            panic!("a key with a newline was taken")
        };
        assert_eq!(err.to_string(), "the API key is not printable ASCII");
    }

    #[tokio::test]
    async fn a_bad_endpoint_names_the_flag() {
        let mut c = conn(None, "/nonexistent");
        c.endpoint = "not a uri".into();
        let err = c.channel().await.expect_err("an endpoint that is no URI was taken");
        assert_eq!(err.to_string(), "bad --endpoint");
    }
}
