//! Readiness as an orchestrator sees it (Kubernetes' `grpc:` probes): the overall health entry
//! (`""`) is SERVING only once the schema is migrated and the text index has caught up; the
//! `liveness` entry is SERVING as soon as the process serves. A replica that does not migrate
//! (`database.migrate_on_start = false`) waits for someone else's migration before it serves.
use std::time::{Duration, Instant};

use memex_tests::server_or_skip;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::{ev, fixture};

/// The status of `service`, or None when the server does not answer within a short while.
async fn status(endpoint: &str, service: &str) -> Option<i32> {
    let probe = async {
        let channel = tonic::transport::Channel::from_shared(endpoint.to_owned()).ok()?.connect().await.ok()?;
        let req = tonic_health::pb::HealthCheckRequest { service: service.into() };
        HealthClient::new(channel).check(req).await.ok().map(|r| r.into_inner().status)
    };
    tokio::time::timeout(Duration::from_millis(500), probe).await.ok().flatten()
}

async fn wait_for(endpoint: &str, service: &str, want: ServingStatus, within: Duration) {
    let started = Instant::now();
    loop {
        let got = status(endpoint, service).await;
        if got == Some(want as i32) {
            return;
        }
        assert!(started.elapsed() < within, "{service:?}: {got:?} after {within:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn ready_only_after_migrations_and_index_catch_up() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "ready").await;
    f.append((0..20).map(|i| ev("note", &format!("replica warm-up note {i}"))).collect()).await.unwrap();
    let pool = srv.store.pool().clone();
    // The migration Job has not run yet: the newest migration is not applied.
    sqlx::query(
        "UPDATE _sqlx_migrations SET success = false WHERE version = (SELECT max(version) FROM _sqlx_migrations)",
    )
    .execute(&pool)
    .await
    .unwrap();

    let mut config = srv.config.clone();
    config.database.migrate_on_start = false;
    config.search.index_dir = format!("{}-fresh-replica", config.search.index_dir);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(memex_server::run_with_mcp(listener, None, config, async {
        let _ = stopped.await;
    }));

    // Waiting for the schema, it serves nothing: no probe passes, not even liveness.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(status(&endpoint, memex_server::LIVENESS).await, None, "serving before the migrations");
    assert!(!server.is_finished(), "a replica waits for the migrations instead of failing");

    // The index cannot catch up while the sessions (whose heads it reads) are locked: alive, not
    // ready.
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE").execute(&mut *lock).await.unwrap();
    sqlx::query("UPDATE _sqlx_migrations SET success = true").execute(&pool).await.unwrap();
    wait_for(&endpoint, memex_server::LIVENESS, ServingStatus::Serving, Duration::from_secs(10)).await;
    for _ in 0..10 {
        assert_eq!(status(&endpoint, "").await, Some(ServingStatus::NotServing as i32), "ready before the catch-up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Once it has caught up, it is ready.
    lock.rollback().await.unwrap();
    wait_for(&endpoint, "", ServingStatus::Serving, Duration::from_secs(20)).await;
    assert_eq!(status(&endpoint, memex_server::LIVENESS).await, Some(ServingStatus::Serving as i32));

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(15), server).await.unwrap().unwrap().unwrap();
}
