//! BuildSnapshot over gRPC: a coding session's handoff snapshot, every pointer dereferenced; the
//! same bytes before and after the memory worker read the session (and with memory off); the
//! task's card leading; the budget; an agent's latest session; field errors.
use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::{TestServer, memory_on};
use tonic::Code;

use crate::{Fixture, ev, result, tool_call as call};

fn session_events() -> Vec<pb::EventInput> {
    vec![
        ev(
            "user_message",
            "The `parse_header` function rejects valid headers. Fix it, and never change the public API.",
        ),
        ev("assistant_message", "I'll read the parser first."),
        call("c1", "Read", r#"{"file_path":"src/parser.rs"}"#),
        result("c1", "fn parse_header(h: &str) -> Result<Header, Error> { todo!() }"),
        call("c2", "Edit", r#"{"file_path":"src/parser.rs","old_string":"a","new_string":"b"}"#),
        result("c2", "The file src/parser.rs has been updated."),
        call("c3", "Bash", r#"{"command":"cargo test parser"}"#),
        result("c3", "error[E0308]: mismatched types in src/parser.rs\ntest result: FAILED. 4 passed; 1 failed"),
        ev("user_message", "No, use the `httparse` crate instead of hand-written parsing."),
        call("c4", "Bash", r#"{"command":"cargo build --release"}"#),
        result("c4", "error: linker `cc` not found\nexit code: 101"),
        ev("assistant_message", "Next: install a C toolchain, then build again."),
    ]
}

async fn append(f: &Fixture, events: Vec<pb::EventInput>) {
    f.c.events
        .clone()
        .append_events(pb::AppendEventsRequest {
            namespace: f.ns.clone(),
            session_id: f.session.clone(),
            events,
            ..Default::default()
        })
        .await
        .unwrap();
}

fn request(f: &Fixture) -> pb::BuildSnapshotRequest {
    pb::BuildSnapshotRequest { namespace: f.ns.clone(), session_id: f.session.clone(), ..Default::default() }
}

async fn snapshot(f: &Fixture, req: pb::BuildSnapshotRequest) -> Result<pb::Snapshot, tonic::Status> {
    f.c.context.clone().build_snapshot(req).await.map(|r| r.into_inner())
}

async fn read_lines(f: &Fixture, pointer: &str) -> String {
    let mut views = pb::view_service_client::ViewServiceClient::new(f.c.channel.clone());
    let mut req = tonic::Request::new(pb::ReadLinesRequest {
        namespace: f.ns.clone(),
        pointer: pointer.into(),
        ..Default::default()
    });
    req.metadata_mut().insert("authorization", f.token.parse().unwrap());
    let r = views.read_lines(req).await.unwrap().into_inner();
    r.lines.into_iter().map(|l| l.text).collect::<Vec<_>>().join("\n")
}

async fn memory_read_all(f: &Fixture) {
    for _ in 0..1_000 {
        let s =
            f.c.memory
                .clone()
                .get_memory_status(pb::GetMemoryStatusRequest { namespace: f.ns.clone() })
                .await
                .unwrap()
                .into_inner();
        if s.lag_events == 0 && s.facts > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the memory worker did not read the session");
}

#[tokio::test]
async fn a_snapshot_cites_every_line_and_does_not_depend_on_how_far_memory_read() {
    let Some(srv) = TestServer::start_with(memory_on).await else { return };
    let f = crate::fixture(&srv, "handoff").await;
    append(&f, session_events()).await;
    let early = snapshot(&f, request(&f)).await.unwrap();
    memory_read_all(&f).await;
    let late = snapshot(&f, request(&f)).await.unwrap();
    assert_eq!(late.memory_seq, 12, "the worker's facts are used once it has read the session");
    assert_eq!(early.text, late.text, "the same store state gives the same bytes, read by memory or not");
    assert_eq!(late.head_seq, 12);
    let t = &late.text;
    assert!(t.starts_with("<state_snapshot>\nsessions: s1="), "{t}");
    assert!(t.contains("never change the public API"), "{t}");
    assert!(t.contains("[correction]") && t.contains("use the `httparse` crate"), "{t}");
    assert!(t.contains("src/parser.rs: modified"), "{t}");
    assert!(t.contains("[unresolved]") && t.contains("error: linker `cc` not found"), "{t}");
    assert!(t.contains("[failed attempt]") && t.contains("`cargo build --release` failed"), "{t}");
    assert!(t.contains("[next]") && t.contains("install a C toolchain"), "{t}");
    assert!(late.tokens as usize <= 4_000 && late.omitted.is_empty());
    // Every pointer dereferences to lines that hold what the item is about.
    let mut checked = 0;
    for item in &late.items {
        assert!(!item.pointer.is_empty(), "{item:?}");
        let lines = read_lines(&f, &item.pointer).await;
        assert!(!lines.is_empty(), "{item:?}");
        let probe = match item.section.as_str() {
            "file_system_state" => Some("src/parser.rs"),
            "errors" if item.label == "unresolved" => Some("error"),
            "overall_goal" if item.label == "request" => Some("parse_header"),
            _ => None,
        };
        if let Some(p) = probe {
            assert!(lines.contains(p), "{} -> {lines}", item.pointer);
            checked += 1;
        }
    }
    assert!(checked >= 3, "{:?}", late.items);
    // Markdown holds the same entries.
    let md = snapshot(&f, pb::BuildSnapshotRequest { format: pb::SnapshotFormat::Markdown as i32, ..request(&f) })
        .await
        .unwrap();
    assert!(md.text.starts_with("# State snapshot\n") && md.text.contains("## Task state\n"), "{}", md.text);
    assert_eq!(md.items.len(), late.items.len());
}

#[tokio::test]
async fn memory_off_gives_the_same_snapshot_from_the_events() {
    let Some(on) = TestServer::start_with(memory_on).await else { return };
    let Some(off) = TestServer::start_with(|c| c.memory.enabled = false).await else { return };
    let (a, b) = (crate::fixture(&on, "handoff-on").await, crate::fixture(&off, "handoff-off").await);
    append(&a, session_events()).await;
    append(&b, session_events()).await;
    memory_read_all(&a).await;
    let (sa, sb) = (snapshot(&a, request(&a)).await.unwrap(), snapshot(&b, request(&b)).await.unwrap());
    assert_eq!(sb.memory_seq, 0);
    // Only the legend's session id differs.
    assert_eq!(sa.text.replace(&a.session, "S"), sb.text.replace(&b.session, "S"));
}

#[tokio::test]
async fn the_task_card_leads_the_budget_holds_and_an_agent_names_its_latest_session() {
    let Some(srv) = TestServer::start().await else { return };
    let f = crate::fixture(&srv, "handoff-task").await;
    append(&f, session_events()).await;
    f.c.tasks
        .clone()
        .update_task_state(pb::UpdateTaskStateRequest {
            namespace: f.ns.clone(),
            task_id: "T-1".into(),
            expected_version: 0,
            state: Some(pb::TaskState {
                goals: vec!["Accept every RFC 9110 header".into()],
                open_loops: vec!["The release build lacks a linker".into()],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let s = snapshot(&f, pb::BuildSnapshotRequest { task_id: "T-1".into(), ..request(&f) }).await.unwrap();
    assert_eq!((s.task_id.as_str(), s.task_state_version), ("T-1", 1));
    assert!(s.text.contains("<overall_goal>\n- (task T-1 v1) Accept every RFC 9110 header\n"), "{}", s.text);
    assert!(s.text.contains("- [pending] (task T-1 v1) The release build lacks a linker\n"), "{}", s.text);

    let short = snapshot(&f, pb::BuildSnapshotRequest { budget_tokens: 150, ..request(&f) }).await.unwrap();
    assert!(short.tokens <= 150 && !short.omitted.is_empty(), "{short:?}");
    assert!(short.text.contains("error: linker `cc` not found"), "{}", short.text);
    assert!(short.omitted.iter().all(|i| !i.priority.is_empty()));

    // The fixture's session is agent-1's latest.
    let by_agent = snapshot(
        &f,
        pb::BuildSnapshotRequest { namespace: f.ns.clone(), agent_id: "agent-1".into(), ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(by_agent.session_id, f.session);
    // A read key may ask.
    let reader = crate::fixture_with(&srv, "handoff-task", Access::Read).await;
    let r = snapshot(&reader, pb::BuildSnapshotRequest { session_id: f.session.clone(), ..request(&reader) }).await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test]
async fn bad_requests_name_the_field() {
    let Some(srv) = TestServer::start().await else { return };
    let f = crate::fixture(&srv, "handoff-bad").await;
    let cases: Vec<(pb::BuildSnapshotRequest, Code, &str)> = vec![
        (
            pb::BuildSnapshotRequest { namespace: f.ns.clone(), ..Default::default() },
            Code::InvalidArgument,
            "session_id",
        ),
        (pb::BuildSnapshotRequest { session_id: "nope".into(), ..request(&f) }, Code::InvalidArgument, "session_id"),
        (pb::BuildSnapshotRequest { budget_tokens: 50, ..request(&f) }, Code::InvalidArgument, "budget_tokens"),
        (pb::BuildSnapshotRequest { budget_tokens: 1_000_000, ..request(&f) }, Code::InvalidArgument, "budget_tokens"),
        (pb::BuildSnapshotRequest { format: 9, ..request(&f) }, Code::InvalidArgument, "format"),
        (pb::BuildSnapshotRequest { tokenizer: "gpt2".into(), ..request(&f) }, Code::InvalidArgument, "tokenizer"),
        (pb::BuildSnapshotRequest { tail_events: Some(51), ..request(&f) }, Code::InvalidArgument, "tail_events"),
        (pb::BuildSnapshotRequest { session_id: uuid::Uuid::nil().to_string(), ..request(&f) }, Code::NotFound, ""),
        (
            pb::BuildSnapshotRequest { namespace: f.ns.clone(), agent_id: "nobody".into(), ..Default::default() },
            Code::NotFound,
            "agent_id",
        ),
    ];
    for (req, code, field) in cases {
        let e = snapshot(&f, req.clone()).await.expect_err("an error");
        assert_eq!(e.code(), code, "{req:?}: {e:?}");
        assert!(e.message().contains(field), "{req:?}: {}", e.message());
    }
    // An empty session has an empty snapshot, not an error.
    let empty = snapshot(&f, request(&f)).await.unwrap();
    assert_eq!(empty.head_seq, 0);
    assert!(empty.items.is_empty());
}
