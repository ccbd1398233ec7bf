//! gRPC over TLS (`[tls]`): a client that trusts the CA gets answers; plain TCP and a client that
//! does not trust the certificate get none; with `client_ca_path`, only clients holding a
//! certificate of that CA get in (mutual TLS).
use std::path::PathBuf;
use std::time::{Duration, Instant};

use memex_client::Conn;
use memex_store::Access;
use memex_tests::TestServer;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/tls").join(name)
}

fn conn(srv: &TestServer, scheme: &str, token: &str, ca: Option<PathBuf>) -> Conn {
    let host = if scheme == "https" { "localhost" } else { "127.0.0.1" };
    Conn {
        endpoint: format!("{scheme}://{host}:{}", srv.addr.port()),
        namespace: "tls".into(),
        api_key: Some(token.into()),
        api_key_file: "/nonexistent".into(),
        tls_ca: ca,
    }
}

/// Whether a ListSessions through `conn` answers, trying for up to `patience`.
async fn answers(conn: &Conn, patience: Duration) -> bool {
    let started = Instant::now();
    loop {
        if let Ok(c) = conn.client().await
            && c.list_sessions(Default::default()).await.is_ok()
        {
            return true;
        }
        if started.elapsed() > patience {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn tls_on(c: &mut memex_server::Config) {
    c.tls.cert_path = fixture("server.pem").display().to_string();
    c.tls.key_path = fixture("server.key").display().to_string();
}

#[tokio::test]
async fn a_tls_port_answers_only_clients_that_trust_it() {
    let Some(srv) = TestServer::start_with(tls_on).await else { return };
    let (_, token) = srv.namespace_with_key("tls", Access::Read).await;
    assert!(answers(&conn(&srv, "https", &token, Some(fixture("ca.pem"))), Duration::from_secs(20)).await);
    assert!(!answers(&conn(&srv, "http", &token, None), Duration::ZERO).await, "plain TCP to a TLS port");
    assert!(
        !answers(&conn(&srv, "https", &token, None), Duration::ZERO).await,
        "a certificate the system does not trust"
    );
}

#[tokio::test]
async fn mutual_tls_lets_in_only_clients_with_a_certificate_of_the_ca() {
    let Some(srv) = TestServer::start_with(|c| {
        tls_on(c);
        c.tls.client_ca_path = fixture("ca.pem").display().to_string();
    })
    .await
    else {
        return;
    };
    let (_, token) = srv.namespace_with_key("tls", Access::Read).await;
    let ca = Certificate::from_pem(std::fs::read(fixture("ca.pem")).unwrap());
    let endpoint = format!("https://localhost:{}", srv.addr.port());
    let health = |tls: ClientTlsConfig, patience: Duration| {
        let endpoint = endpoint.clone();
        async move {
            let started = Instant::now();
            loop {
                let ch =
                    Channel::from_shared(endpoint.clone()).unwrap().tls_config(tls.clone()).unwrap().connect().await;
                if let Ok(ch) = ch {
                    let mut h = tonic_health::pb::health_client::HealthClient::new(ch);
                    if h.check(tonic_health::pb::HealthCheckRequest::default()).await.is_ok() {
                        return true;
                    }
                }
                if started.elapsed() > patience {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let identity = Identity::from_pem(
        std::fs::read(fixture("client.pem")).unwrap(),
        std::fs::read(fixture("client.key")).unwrap(),
    );
    let with_cert = ClientTlsConfig::new().ca_certificate(ca.clone()).identity(identity);
    assert!(health(with_cert, Duration::from_secs(20)).await);
    assert!(!health(ClientTlsConfig::new().ca_certificate(ca), Duration::ZERO).await, "no client certificate");
    // The CLI's connection has no client certificate: refused too.
    assert!(!answers(&conn(&srv, "https", &token, Some(fixture("ca.pem"))), Duration::ZERO).await);
}

#[test]
fn half_a_tls_configuration_is_refused_naming_the_keys() {
    let mut c = memex_server::Config::default();
    c.tls.cert_path = "server.pem".into();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("tls.cert_path and tls.key_path"), "{e}");
}
