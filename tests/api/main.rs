//! Integration tests of the event store API: a real server, real Postgres, real gRPC.
#![allow(clippy::unwrap_used)]

mod auth;
mod bad_input;
mod compaction;
mod concurrency;
mod erasure;
mod events;
mod faults;
mod handoff;
mod mcp;
mod mcp_inspector;
mod memory;
mod packs;
mod planning;
mod quotas;
mod readiness;
mod rls;
mod roles;
mod schema;
mod search;
mod search_index;
mod server;
mod sessions;
mod standby;
mod stream;
mod task_state;
mod tenancy;
mod tls;
mod views;
mod views_ranked;

use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::{Clients, TestServer};

/// A namespace, a write (or given) key's clients, and one session in it.
pub struct Fixture {
    pub ns: String,
    pub c: Clients,
    pub session: String,
    /// `Bearer <token>` of the fixture's key.
    pub token: String,
}

pub async fn fixture(srv: &TestServer, ns: &str) -> Fixture {
    fixture_with(srv, ns, Access::Admin).await
}

pub async fn fixture_with(srv: &TestServer, ns: &str, access: Access) -> Fixture {
    let (_, token) = srv.namespace_with_key(ns, access).await;
    let c = srv.clients(Some(&token)).await;
    let (_, admin) = srv.namespace_with_key(ns, Access::Admin).await;
    let mut sessions = srv.clients(Some(&admin)).await.sessions;
    let session = sessions
        .create_session(pb::CreateSessionRequest {
            namespace: ns.into(),
            agent_id: "agent-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    Fixture { ns: ns.into(), c, session, token: format!("Bearer {token}") }
}

/// A `memex_client::Client` of namespace `ns` on `srv`, sending `token`.
pub async fn client(srv: &TestServer, ns: &str, token: &str) -> memex_client::Client {
    let conn = memex_client::Conn {
        endpoint: srv.endpoint(),
        namespace: ns.into(),
        api_key: Some(token.into()),
        api_key_file: "/nonexistent".into(),
        tls_ca: None,
    };
    conn.client().await.unwrap()
}

pub fn ev(kind: &str, content: &str) -> pb::EventInput {
    pb::EventInput { kind: kind.into(), content: content.into(), ..Default::default() }
}

pub fn call(id: &str) -> pb::EventInput {
    pb::EventInput { tool_name: "Bash".into(), tool_call_id: id.into(), ..ev("tool_call", r#"{"command":"ls"}"#) }
}

/// A call of `tool` with `input` (JSON or a command line).
pub fn tool_call(id: &str, tool: &str, input: &str) -> pb::EventInput {
    pb::EventInput { tool_name: tool.into(), tool_call_id: id.into(), ..ev("tool_call", input) }
}

pub fn result(id: &str, content: &str) -> pb::EventInput {
    pb::EventInput { tool_call_id: id.into(), ..ev("tool_result", content) }
}

impl Fixture {
    /// A session's events with their full-view lines (`GetEvents` with `with_lines`).
    pub async fn events_with_lines(&self, session: &str) -> Vec<pb::Event> {
        self.c
            .events
            .clone()
            .get_events(pb::GetEventsRequest {
                namespace: self.ns.clone(),
                session_id: session.to_owned(),
                with_lines: true,
                ..Default::default()
            })
            .await
            .expect("GetEvents with lines")
            .into_inner()
            .events
    }

    pub fn append_req(&self, events: Vec<pb::EventInput>, key: &str) -> pb::AppendEventsRequest {
        pb::AppendEventsRequest {
            namespace: self.ns.clone(),
            session_id: self.session.clone(),
            events,
            idempotency_key: key.into(),
        }
    }

    pub async fn append(&mut self, events: Vec<pb::EventInput>) -> Result<pb::AppendEventsResponse, tonic::Status> {
        let req = self.append_req(events, "");
        self.c.events.append_events(req).await.map(|r| r.into_inner())
    }

    pub async fn all_events(&mut self) -> Vec<pb::Event> {
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .c
                .events
                .get_events(pb::GetEventsRequest {
                    namespace: self.ns.clone(),
                    session_id: self.session.clone(),
                    page_token: std::mem::take(&mut token),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            out.extend(page.events);
            if page.next_page_token.is_empty() {
                return out;
            }
            token = page.next_page_token;
        }
    }

    pub async fn event_count(&mut self) -> u64 {
        self.c
            .sessions
            .get_session(pb::GetSessionRequest { namespace: self.ns.clone(), session_id: self.session.clone() })
            .await
            .unwrap()
            .into_inner()
            .event_count
    }

    pub async fn artifact(&mut self, id: &str) -> Result<(pb::ArtifactRef, Vec<u8>), tonic::Status> {
        let mut stream = self
            .c
            .events
            .get_artifact(pb::GetArtifactRequest { namespace: self.ns.clone(), artifact_id: id.into() })
            .await?
            .into_inner();
        let mut info = None;
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.message().await? {
            assert_eq!(chunk.offset as usize, bytes.len(), "chunks arrive in order");
            if let Some(a) = chunk.artifact {
                assert!(info.is_none(), "metadata only on the first chunk");
                info = Some(a);
            }
            bytes.extend_from_slice(&chunk.data);
        }
        Ok((info.expect("first chunk carries metadata"), bytes))
    }
}

/// Asserts a status code and that the message mentions `needle`.
#[track_caller]
pub fn assert_status<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: tonic::Code, needle: &str) {
    match r {
        Ok(v) => {
            let shown: String = format!("{v:?}").chars().take(300).collect();
            panic!("expected {code:?} mentioning {needle:?}, got Ok({shown})")
        }
        Err(s) => {
            assert_eq!(s.code(), code, "status {s:?}");
            assert!(s.message().contains(needle), "message {:?} should mention {needle:?}", s.message());
        }
    }
}
