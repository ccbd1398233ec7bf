//! API keys and namespace isolation.
use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::server_or_skip;

use crate::{assert_status, ev, fixture};

#[tokio::test]
async fn a_key_of_one_namespace_can_never_touch_another() {
    let srv = server_or_skip!();
    let mut a = fixture(&srv, "tenant-a").await;
    let b = fixture(&srv, "tenant-b").await;
    a.append(vec![ev("note", "secret of a")]).await.unwrap();
    let a_event = a.all_events().await[0].id.clone();

    // b's key, naming namespace a: refused whatever the call.
    let mut bc = b.c.clone();
    let read = bc
        .events
        .get_events(pb::GetEventsRequest {
            namespace: "tenant-a".into(),
            session_id: a.session.clone(),
            ..Default::default()
        })
        .await;
    assert_status(read, tonic::Code::PermissionDenied, "tenant-b");
    let write = bc
        .events
        .append_events(pb::AppendEventsRequest {
            namespace: "tenant-a".into(),
            session_id: a.session.clone(),
            events: vec![ev("note", "intrusion")],
            idempotency_key: String::new(),
        })
        .await;
    assert_status(write, tonic::Code::PermissionDenied, "namespace");
    // b's key in its own namespace cannot see a's objects either: they do not exist there.
    let cross_session = bc
        .events
        .append_events(pb::AppendEventsRequest {
            namespace: "tenant-b".into(),
            session_id: a.session.clone(),
            events: vec![ev("note", "intrusion")],
            idempotency_key: String::new(),
        })
        .await;
    assert_status(cross_session, tonic::Code::NotFound, "session_id");
    let cross_event = bc
        .events
        .get_events(pb::GetEventsRequest {
            namespace: "tenant-b".into(),
            event_ids: vec![a_event],
            ..Default::default()
        })
        .await;
    assert_status(cross_event, tonic::Code::NotFound, "event_ids[0]");
    let cross_get = bc
        .sessions
        .get_session(pb::GetSessionRequest { namespace: "tenant-b".into(), session_id: a.session.clone() })
        .await;
    assert_status(cross_get, tonic::Code::NotFound, "session_id");
    let listed = bc
        .sessions
        .list_sessions(pb::ListSessionsRequest { namespace: "tenant-b".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.iter().all(|s| s.id != a.session));
    assert_eq!(a.event_count().await, 1, "nothing was written to a");
}

#[tokio::test]
async fn missing_bad_and_weak_keys_are_refused() {
    let srv = server_or_skip!();
    let f = fixture(&srv, "keys").await;
    let req = |ns: &str| pb::GetSessionRequest { namespace: ns.into(), session_id: f.session.clone() };
    let mut anon = srv.clients(None).await;
    assert_status(anon.sessions.get_session(req("keys")).await, tonic::Code::Unauthenticated, "authorization");
    let mut bogus = srv.clients(Some("mx_not_a_real_key")).await;
    assert_status(bogus.sessions.get_session(req("keys")).await, tonic::Code::Unauthenticated, "not valid");
    let (_, read_token) = srv.namespace_with_key("keys", Access::Read).await;
    let mut reader = srv.clients(Some(&read_token)).await;
    reader.sessions.get_session(req("keys")).await.unwrap();
    let write = reader
        .events
        .append_events(pb::AppendEventsRequest {
            namespace: "keys".into(),
            session_id: f.session.clone(),
            events: vec![ev("note", "x")],
            idempotency_key: String::new(),
        })
        .await;
    assert_status(write, tonic::Code::PermissionDenied, "needs write");
    let (_, write_token) = srv.namespace_with_key("keys", Access::Write).await;
    let mut writer = srv.clients(Some(&write_token)).await;
    let admin_call = writer.admin.list_api_keys(pb::ListApiKeysRequest { namespace: "keys".into() }).await;
    assert_status(admin_call, tonic::Code::PermissionDenied, "needs admin");
    // The namespace is required.
    assert_status(writer.sessions.get_session(req("")).await, tonic::Code::InvalidArgument, "namespace");
}

#[tokio::test]
async fn admin_keys_manage_keys_and_revocation_takes_effect() {
    let srv = server_or_skip!(|c: &mut memex_server::Config| c.auth.key_cache_ttl_secs = 0);
    let mut f = fixture(&srv, "adm").await;
    let created =
        f.c.admin
            .create_api_key(pb::CreateApiKeyRequest {
                namespace: "adm".into(),
                name: "ci".into(),
                right: pb::Right::Write as i32,
            })
            .await
            .unwrap()
            .into_inner();
    let key = created.key.unwrap();
    assert!(created.token.starts_with("mx_"));
    let mut ci = srv.clients(Some(&created.token)).await;
    ci.events
        .append_events(pb::AppendEventsRequest {
            namespace: "adm".into(),
            session_id: f.session.clone(),
            events: vec![ev("note", "from ci")],
            idempotency_key: String::new(),
        })
        .await
        .unwrap();
    let keys = f.c.admin.list_api_keys(pb::ListApiKeysRequest { namespace: "adm".into() }).await.unwrap().into_inner();
    assert!(keys.keys.iter().any(|k| k.id == key.id && k.right == pb::Right::Write as i32));
    let revoked =
        f.c.admin
            .revoke_api_key(pb::RevokeApiKeyRequest { namespace: "adm".into(), key_id: key.id.clone() })
            .await
            .unwrap()
            .into_inner();
    assert!(revoked.revoked_at.is_some());
    let after =
        ci.sessions.get_session(pb::GetSessionRequest { namespace: "adm".into(), session_id: f.session.clone() }).await;
    assert_status(after, tonic::Code::Unauthenticated, "revoked");
    let bad_right =
        f.c.admin.create_api_key(pb::CreateApiKeyRequest { namespace: "adm".into(), name: "x".into(), right: 0 }).await;
    assert_status(bad_right, tonic::Code::InvalidArgument, "right");
    // Only the token's hash is stored.
    let stored: Vec<u8> = sqlx::query_scalar("SELECT token_hash FROM api_keys WHERE id = $1::uuid")
        .bind(&key.id)
        .fetch_one(srv.store.pool())
        .await
        .unwrap();
    assert_eq!(stored, memex_store::token_hash(&created.token).to_vec());
}

#[tokio::test]
async fn with_auth_off_namespaces_are_open_but_must_exist() {
    let srv = server_or_skip!(|c: &mut memex_server::Config| c.auth.enabled = false);
    srv.store.create_namespace("open").await.unwrap();
    let mut anon = srv.clients(None).await;
    let s = anon
        .sessions
        .create_session(pb::CreateSessionRequest {
            namespace: "open".into(),
            agent_id: "a".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.namespace, "open");
    let missing = anon
        .sessions
        .create_session(pb::CreateSessionRequest {
            namespace: "nope".into(),
            agent_id: "a".into(),
            ..Default::default()
        })
        .await;
    assert_status(missing, tonic::Code::NotFound, "namespace");
}

/// The id of the key whose token this is.
async fn key_id(srv: &memex_tests::TestServer, token: &str) -> uuid::Uuid {
    sqlx::query_scalar("SELECT id FROM api_keys WHERE token_hash = $1")
        .bind(&memex_store::token_hash(token)[..])
        .fetch_one(srv.store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_revocation_takes_effect_at_once_on_every_replica() {
    // The default cache lifetime (30 s): only the revocation notice can make this pass in time.
    let srv = server_or_skip!();
    let other = srv.replica().await;
    let f = fixture(&srv, "revoke").await;
    let mut keys = Vec::new();
    for name in ["by-rpc", "by-admin"] {
        let (_, token) = srv.namespace_with_key("revoke", Access::Read).await;
        keys.push((name, key_id(&srv, &token).await, token));
    }
    let get = |ns: &str| pb::GetSessionRequest { namespace: ns.into(), session_id: f.session.clone() };
    for (name, id, token) in &keys {
        // Verified, so cached, on both replicas.
        let mut here = srv.clients(Some(token)).await;
        let mut there = other.clients(Some(token)).await;
        here.sessions.get_session(get("revoke")).await.unwrap();
        there.sessions.get_session(get("revoke")).await.unwrap();
        if *name == "by-rpc" {
            f.c.admin
                .clone()
                .revoke_api_key(pb::RevokeApiKeyRequest { namespace: "revoke".into(), key_id: id.to_string() })
                .await
                .unwrap();
        } else {
            // `memex admin revoke-key`: straight to the database, no server involved.
            let ns = srv.store.namespace("revoke").await.unwrap();
            srv.store.revoke_api_key(&ns, *id).await.unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        for c in [&mut here, &mut there] {
            loop {
                match c.sessions.get_session(get("revoke")).await {
                    Err(s) if s.code() == tonic::Code::Unauthenticated => break,
                    r => assert!(std::time::Instant::now() < deadline, "{name}: still accepted after 3 s: {r:?}"),
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_rotated_key_works_through_the_overlap_and_then_stops_everywhere() {
    let srv = server_or_skip!();
    let other = srv.replica().await;
    let f = fixture(&srv, "rotate").await;
    let (_, old_token) = srv.namespace_with_key("rotate", Access::Write).await;
    let old_id = key_id(&srv, &old_token).await;
    let get = || pb::GetSessionRequest { namespace: "rotate".into(), session_id: f.session.clone() };
    let mut here = srv.clients(Some(&old_token)).await;
    let mut there = other.clients(Some(&old_token)).await;
    here.sessions.get_session(get()).await.unwrap();
    there.sessions.get_session(get()).await.unwrap();

    let rotate = |key_id: String, overlap_secs: u32| pb::RotateApiKeyRequest {
        namespace: "rotate".into(),
        key_id,
        overlap_secs,
    };
    let r = f.c.admin.clone().rotate_api_key(rotate(old_id.to_string(), 2)).await.unwrap().into_inner();
    let (new, rotated) = (r.key.unwrap(), r.rotated.unwrap());
    assert_eq!((new.name.as_str(), new.right), ("test", pb::Right::Write as i32));
    assert!(rotated.expires_at.is_some());
    // Both work through the overlap …
    let mut fresh = other.clients(Some(&r.token)).await;
    fresh.sessions.get_session(get()).await.unwrap();
    here.sessions.get_session(get()).await.unwrap();
    there.sessions.get_session(get()).await.unwrap();
    // … then the old one stops on both replicas, cached or not; the new one goes on.
    tokio::time::sleep(std::time::Duration::from_millis(2_300)).await;
    assert_status(here.sessions.get_session(get()).await, tonic::Code::Unauthenticated, "expired");
    assert_status(there.sessions.get_session(get()).await, tonic::Code::Unauthenticated, "expired");
    fresh.sessions.get_session(get()).await.unwrap();

    // An expired key cannot be rotated again; an overlap of 0 stops the old key at once.
    let again = f.c.admin.clone().rotate_api_key(rotate(old_id.to_string(), 0)).await;
    assert_status(again, tonic::Code::InvalidArgument, "key_id");
    let r2 = f.c.admin.clone().rotate_api_key(rotate(new.id.clone(), 0)).await.unwrap().into_inner();
    // (The other replica hears of it by notification: a moment.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while fresh.sessions.get_session(get()).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "the rotated-away key still works on the other replica");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_status(fresh.sessions.get_session(get()).await, tonic::Code::Unauthenticated, "expired");
    srv.clients(Some(&r2.token)).await.sessions.get_session(get()).await.unwrap();
    let too_long = f.c.admin.clone().rotate_api_key(rotate(r2.key.unwrap().id, 31 * 24 * 3600)).await;
    assert_status(too_long, tonic::Code::InvalidArgument, "overlap_secs");
}
