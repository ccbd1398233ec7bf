//! The OpenAI-compatible provider against a real HTTP/1.1 server (hyper) that answers
//! `/v1/embeddings` with the real local model: a protocol peer, not a mock of our own client.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use memex_embed::{EmbedError, Embedder, MiniLm, MiniLmOptions, OpenAiEmbedder, OpenAiOptions};
use memex_rank::cosine;

/// Serves the embeddings API on 127.0.0.1:0 with `model`; `mode` bends the answers for error tests.
async fn serve(model: Arc<MiniLm>, mode: &'static str) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let model = model.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let model = model.clone();
                    async move {
                        assert_eq!(req.uri().path(), "/v1/embeddings");
                        assert_eq!(req.method(), hyper::Method::POST);
                        let auth = req.headers().get("authorization").map(|v| v.to_str().unwrap().to_owned());
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        let (status, answer) = if auth.as_deref() != Some("Bearer sk-test") {
                            (401, serde_json::json!({"error": {"message": "bad key"}}))
                        } else {
                            let inputs: Vec<String> =
                                v["input"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect();
                            let vecs = model.embed(inputs).await.unwrap();
                            // Answer out of order: clients must use `index`.
                            let mut data: Vec<serde_json::Value> = vecs
                                .into_iter()
                                .enumerate()
                                .map(|(i, e)| {
                                    let e = if mode == "short" { e[..10].to_vec() } else { e };
                                    serde_json::json!({"object": "embedding", "index": i, "embedding": e})
                                })
                                .collect();
                            data.reverse();
                            (200, serde_json::json!({"object": "list", "model": v["model"], "data": data}))
                        };
                        let resp = hyper::Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(answer.to_string())))
                            .unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    addr
}

fn opts(addr: std::net::SocketAddr, key: &str) -> OpenAiOptions {
    OpenAiOptions {
        base_url: format!("http://{addr}/v1"),
        model: "all-MiniLM-L6-v2".into(),
        dim: 384,
        api_key: Some(key.into()),
        timeout: Duration::from_secs(30),
    }
}

#[tokio::test]
async fn remote_vectors_equal_local_ones_in_input_order() {
    let Some(dir) = memex_embed::test_model_dir() else { return };
    let local = Arc::new(MiniLm::load(&dir, MiniLmOptions::default()).unwrap());
    let addr = serve(local.clone(), "ok").await;
    let remote = OpenAiEmbedder::new(opts(addr, "sk-test")).unwrap();
    assert_eq!(remote.info().dim, 384);
    let texts = vec!["the cat sat".to_owned(), "stock prices fell".to_owned(), "a cat was sitting".to_owned()];
    let r = remote.embed(texts.clone()).await.unwrap();
    let l = local.embed(texts).await.unwrap();
    assert_eq!(r.len(), 3);
    for (a, b) in r.iter().zip(&l) {
        assert!(cosine(a, b) > 0.9999);
    }
    assert!(cosine(&r[0], &r[2]) > 0.8 && cosine(&r[0], &r[1]) < 0.2);
    assert!(remote.embed(Vec::new()).await.unwrap().is_empty());
}

#[tokio::test]
async fn errors_are_reported_not_swallowed() {
    let Some(dir) = memex_embed::test_model_dir() else { return };
    let local = Arc::new(MiniLm::load(&dir, MiniLmOptions::default()).unwrap());
    let addr = serve(local.clone(), "ok").await;
    let bad_key = OpenAiEmbedder::new(opts(addr, "wrong")).unwrap();
    let e = bad_key.embed(vec!["x".into()]).await.unwrap_err();
    assert!(matches!(&e, EmbedError::Unavailable(m) if m.contains("401")), "{e}");
    let addr = serve(local, "short").await;
    let e = OpenAiEmbedder::new(opts(addr, "sk-test")).unwrap().embed(vec!["x".into()]).await.unwrap_err();
    assert!(matches!(&e, EmbedError::Protocol(m) if m.contains("dimension 10")), "{e}");
    // Nobody listening.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let e = OpenAiEmbedder::new(opts(closed, "sk-test")).unwrap().embed(vec!["x".into()]).await.unwrap_err();
    assert!(matches!(e, EmbedError::Unavailable(_)), "{e}");
    let e = OpenAiEmbedder::new(OpenAiOptions { base_url: "https://example.invalid/v1".into(), ..opts(closed, "k") });
    assert!(matches!(e, Err(EmbedError::Config(m)) if m.contains("https")));
}
