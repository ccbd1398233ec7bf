//! A client of the OpenAI-compatible embeddings API (`POST {base_url}/embeddings`), which
//! text-embeddings-inference, vLLM, llama.cpp's server, Ollama and LocalAI all speak — for
//! deployments that run an embedding server (a GPU box, a bigger model).
//!
//! Plain HTTP/1.1 over hyper, which is already in the tree through tonic. No TLS: the embedding
//! server is expected on the local network or behind a sidecar; adding rustls would add a crypto
//! stack to the whole binary for one optional client, so an `https://` URL is refused with that
//! explanation rather than silently downgraded.

use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};

use crate::{EmbedError, Embedder, ModelInfo};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiOptions {
    /// e.g. `http://127.0.0.1:8080/v1`; `/embeddings` is appended.
    pub base_url: String,
    /// The `model` field sent, and the name vectors are tagged with.
    pub model: String,
    /// The vector dimension the model produces; answers of another dimension are refused.
    pub dim: usize,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    pub timeout: Duration,
}

pub struct OpenAiEmbedder {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: http::Uri,
    opts: OpenAiOptions,
    info: ModelInfo,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [String],
    encoding_format: &'static str,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Datum>,
}

#[derive(Deserialize)]
struct Datum {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    pub fn new(opts: OpenAiOptions) -> Result<OpenAiEmbedder, EmbedError> {
        let base = opts.base_url.trim_end_matches('/');
        if base.starts_with("https://") {
            return Err(EmbedError::Config(format!(
                "{base}: https is not supported by the built-in client (no TLS stack in memex); use http:// on a trusted network or a TLS-terminating sidecar"
            )));
        }
        let uri: http::Uri = format!("{base}/embeddings")
            .parse()
            .map_err(|e| EmbedError::Config(format!("embedding.base_url {base:?}: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(EmbedError::Config(format!("embedding.base_url {base:?}: expected http://host[:port]/path")));
        }
        if opts.dim == 0 {
            return Err(EmbedError::Config("embedding.dim must be > 0 for the openai provider".into()));
        }
        let client = Client::builder(TokioExecutor::new()).build_http();
        let info = ModelInfo { name: opts.model.clone(), dim: opts.dim };
        Ok(OpenAiEmbedder { client, uri, opts, info })
    }

    async fn call(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let body = serde_json::to_vec(&Request { model: &self.opts.model, input: &texts, encoding_format: "float" })
            .map_err(|e| EmbedError::Inference(e.to_string()))?;
        let mut req = http::Request::post(self.uri.clone()).header(http::header::CONTENT_TYPE, "application/json");
        if let Some(key) = &self.opts.api_key {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| EmbedError::Config(e.to_string()))?;
        let exchange = async {
            let resp =
                self.client.request(req).await.map_err(|e| EmbedError::Unavailable(format!("{}: {e}", self.uri)))?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| EmbedError::Unavailable(format!("{}: {e}", self.uri)))?
                .to_bytes();
            Ok::<_, EmbedError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.opts.timeout, exchange).await.map_err(|_| {
            EmbedError::Unavailable(format!("{}: no answer within {:?}", self.uri, self.opts.timeout))
        })??;
        if !status.is_success() {
            let text: String = String::from_utf8_lossy(&bytes).chars().take(300).collect();
            return Err(EmbedError::Unavailable(format!("{} answered {status}: {text}", self.uri)));
        }
        let parsed: Response = serde_json::from_slice(&bytes).map_err(|e| EmbedError::Protocol(e.to_string()))?;
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for d in parsed.data {
            if d.embedding.len() != self.opts.dim {
                return Err(EmbedError::Protocol(format!(
                    "a vector of dimension {}, but embedding.dim is {}",
                    d.embedding.len(),
                    self.opts.dim
                )));
            }
            let slot =
                out.get_mut(d.index).ok_or_else(|| EmbedError::Protocol(format!("index {} out of range", d.index)))?;
            let mut v = d.embedding;
            crate::normalize(&mut v);
            *slot = Some(v);
        }
        out.into_iter()
            .enumerate()
            .map(|(i, v)| v.ok_or_else(|| EmbedError::Protocol(format!("no vector for input {i}"))))
            .collect()
    }
}

impl Embedder for OpenAiEmbedder {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(self.call(texts))
    }
}
