//! `--role`: API and worker processes over one database. A worker embeds what the API processes
//! store and serves only gRPC health; an API process serves the RPCs and leaves embedding to the
//! workers.
use std::time::Duration;

use memex_proto::v1 as pb;
use memex_server::config::{EmbeddingProvider, Role};
use memex_tests::server_or_skip;

use crate::{ev, fixture};

#[tokio::test]
async fn api_and_worker_processes_split_the_work() {
    let Some(model_dir) = memex_embed::test_model_dir() else { return };
    let model_dir = model_dir.display().to_string();
    let md = model_dir.clone();
    let api = server_or_skip!(move |c| {
        c.role = Role::Api;
        c.embedding.provider = EmbeddingProvider::Minilm;
        c.embedding.model_dir = md;
    });
    let mut f = fixture(&api, "roles").await;
    f.append((0..12).map(|i| ev("note", &format!("the cache warmed in {i} seconds"))).collect()).await.unwrap();
    let ns = api.store.namespace("roles").await.unwrap();
    let model = memex_embed::ModelInfo { name: "all-MiniLM-L6-v2".into(), dim: 384 };
    let vectors = || memex_search::vector_count(api.store.pool(), ns.id, &model);
    // The API process searches (its vectors are the query's) but embeds no event.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(vectors().await.unwrap(), 0, "an API process runs no embedding worker");

    // A worker process over the same database embeds them, and answers only health.
    let url = api.config.database.url.clone();
    let worker = memex_tests::TestServer::start_with(move |c| {
        c.database.url = url;
        c.role = Role::Worker;
        c.embedding.provider = EmbeddingProvider::Minilm;
        c.embedding.model_dir = model_dir;
    })
    .await
    .expect("a database");
    let channel = tonic::transport::Channel::from_shared(worker.endpoint()).unwrap().connect().await.unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel.clone())
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);
    let rpc = memex_proto::v1::session_service_client::SessionServiceClient::new(channel)
        .list_sessions(pb::ListSessionsRequest { namespace: "roles".into(), ..Default::default() })
        .await;
    assert_eq!(rpc.map(|_| ()).unwrap_err().code(), tonic::Code::Unimplemented);
    let mut embedded = 0;
    for _ in 0..300 {
        embedded = vectors().await.unwrap();
        if embedded == 12 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(embedded, 12, "the worker embeds what the API process stored");
    worker.stop().await;
}
