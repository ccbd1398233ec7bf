//! A hostile tenant: every RPC, called with another namespace's ids (sessions, events, artifacts
//! by hash, packs, manifests, tasks, reports, facts, keys, pointers), answers `NOT_FOUND` or
//! `PERMISSION_DENIED` and never a byte of the other tenant's data; and no id the other tenant
//! chose makes a difference to what this one may create.
use std::time::Duration;

use memex_client::{Client, ClientError};
use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::{TestServer, memory_on};
use tonic::Code;

use crate::compaction::{call, output};
use crate::task_state::state;
use crate::{client, ev};

/// What tenant A holds; every string here must stay invisible to tenant B.
struct Victim {
    session: String,
    event: String,
    artifact: String,
    pack: String,
    manifest: String,
    task: String,
    report: String,
    fact: String,
    key: String,
}

const SECRET: &str = "zanzibar-7731";

async fn victim(srv: &TestServer, a: &Client) -> Victim {
    let session = a
        .create_session(pb::CreateSessionRequest {
            agent_id: "victim-agent".into(),
            task_id: "victim-task".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    let bulky: String = (0..400).map(|i| format!("{SECRET} line {i} of the build log\n")).collect();
    let appended = a
        .append_events(
            &session,
            vec![
                ev("user_message", &format!("The deploy password hint is {SECRET}. Never print it.")),
                ev("assistant_message", &format!("Understood: {SECRET} stays private.")),
                call("c1", "cargo build"),
                output("c1", &bulky),
                ev("decision", &format!("We decided to rotate {SECRET} weekly.")),
            ],
            Some("victim-batch".into()),
        )
        .await
        .unwrap();
    let artifact = appended.artifacts.first().expect("the bulky output is an artifact").id.clone();
    a.update_task_state(put("victim-task", state(&format!("ship {SECRET}")))).await.unwrap();
    let report = a
        .report(pb::ReportRequest {
            task_id: "victim-task".into(),
            session_id: session.clone(),
            status: "succeeded".into(),
            summary: format!("built {SECRET}"),
            pointers: vec![event_pointer(&appended.event_ids[2])],
            report_id: uuid::Uuid::now_v7().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .report_id;
    let pack = a.build_pack(pack_request(&session, format!("what about {SECRET}?"))).await.unwrap().pack_id;
    let manifest = a
        .compact(pb::CompactRequest {
            session_id: session.clone(),
            window_budget: 300,
            headroom: 50,
            protected_turns: Some(0),
            ..Default::default()
        })
        .await
        .unwrap()
        .manifest
        .expect("a manifest")
        .id;
    let fact = settled_fact(a).await;
    let key = a.list_api_keys().await.unwrap()[0].id.clone();
    let _ = srv;
    Victim {
        session,
        event: appended.event_ids[0].clone(),
        artifact,
        pack,
        manifest,
        task: "victim-task".into(),
        report,
        fact,
        key,
    }
}

/// The id of one of A's facts, once the memory worker has read A's session.
async fn settled_fact(a: &Client) -> String {
    for _ in 0..1_500 {
        let facts = a.query_facts(pb::QueryFactsRequest { limit: 50, ..Default::default() }).await.unwrap();
        if let Some(f) = facts.facts.first() {
            return f.id.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the memory worker made no fact");
}

/// A refusal that carries none of A's data.
#[track_caller]
fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, ClientError>, codes: &[Code]) {
    match r {
        Ok(v) => panic!("{what}: expected one of {codes:?}, got Ok({v:?})"),
        Err(e) => {
            assert!(codes.contains(&e.code()), "{what}: expected one of {codes:?}, got {e}");
            assert!(!e.to_string().contains(SECRET), "{what}: the error leaks data: {e}");
        }
    }
}

/// An answer (or a refusal) that carries none of A's data and none of A's ids but `allowed`.
#[track_caller]
fn clean<T: std::fmt::Debug>(what: &str, r: &Result<T, ClientError>, v: &Victim) {
    let shown = match r {
        Ok(x) => format!("{x:?}"),
        Err(e) => e.to_string(),
    };
    assert!(!shown.contains(SECRET), "{what}: leaks A's text: {shown}");
    for id in [&v.event, &v.pack, &v.manifest, &v.fact] {
        assert!(!shown.contains(id.as_str()), "{what}: leaks A's id {id}: {shown}");
    }
}

/// A session's full view, as text.
async fn full_view(c: &Client, session: &str) -> Result<String, ClientError> {
    let req =
        pb::CompileViewRequest { session_id: session.into(), view: pb::ViewKind::Full as i32, ..Default::default() };
    c.compile_view(req).await.map(|view| String::from_utf8_lossy(&view.text).into_owned())
}

/// A pack for `question` on `session`, with small retrieval and tail budgets.
fn pack_request(session: &str, question: String) -> pb::BuildPackRequest {
    pb::BuildPackRequest {
        session_id: session.into(),
        user_message: question,
        budgets: Some(crate::packs::budgets(800, 800)),
        ..Default::default()
    }
}

fn event_pointer(id: &str) -> pb::Pointer {
    pb::Pointer { target: Some(pb::pointer::Target::EventId(id.into())) }
}

fn put(task: &str, state: pb::TaskState) -> pb::UpdateTaskStateRequest {
    pb::UpdateTaskStateRequest {
        task_id: task.into(),
        state: Some(state),
        author: "planner".into(),
        ..Default::default()
    }
}

const GONE: &[Code] = &[Code::NotFound];
/// A reference inside a request's body (a parent, a pointer) to what is not in the namespace.
const REF_GONE: &[Code] = &[Code::NotFound, Code::InvalidArgument];

#[tokio::test]
async fn a_hostile_tenant_gets_nothing_of_another_through_any_rpc() {
    let Some(srv) = TestServer::start_with(memory_on).await else { return };
    let (_, ta) = srv.namespace_with_key("victim", Access::Admin).await;
    let (_, tb) = srv.namespace_with_key("hostile", Access::Admin).await;
    let a = client(&srv, "victim", &ta).await;
    let v = victim(&srv, &a).await;
    let b = client(&srv, "hostile", &tb).await;
    let own =
        b.create_session(pb::CreateSessionRequest { agent_id: "b".into(), ..Default::default() }).await.unwrap().id;
    let own_event = b.append_events(&own, vec![ev("note", "b's first")], None).await.unwrap().event_ids[0].clone();
    let mine = || vec![event_pointer(&own_event)];

    // B's key naming A's namespace: refused before anything is read, whatever the call.
    let b_in_a = client(&srv, "victim", &tb).await;
    refused("GetSession in A", b_in_a.get_session(&v.session).await, &[Code::PermissionDenied]);
    refused(
        "Search in A",
        b_in_a.search(pb::SearchRequest { query: SECRET.into(), ..Default::default() }).await,
        &[Code::PermissionDenied],
    );
    refused("RecallAll in A", b_in_a.recall_all(1000).await, &[Code::PermissionDenied]);
    refused("GetPack in A", b_in_a.get_pack(&v.pack, pb::PackView::Full).await, &[Code::PermissionDenied]);
    refused("ListApiKeys in A", b_in_a.list_api_keys().await, &[Code::PermissionDenied]);

    // B in its own namespace, with A's ids.
    let s = || v.session.clone();
    refused("GetSession", b.get_session(&s()).await, GONE);
    refused(
        "GetEvents by session",
        b.get_events(pb::GetEventsRequest { session_id: s(), ..Default::default() }).await,
        GONE,
    );
    refused(
        "GetEvents by id",
        b.get_events(pb::GetEventsRequest { event_ids: vec![v.event.clone()], ..Default::default() }).await,
        GONE,
    );
    refused("GetArtifact", b.get_artifact(&v.artifact, &mut Vec::new()).await, GONE);
    refused("AppendEvents", b.append_events(&s(), vec![ev("note", "intrusion")], None).await, GONE);
    refused("StreamEvents", b.stream_events(&s(), vec![vec![ev("note", "intrusion")]]).await, GONE);
    refused(
        "CreateSession with A's session as parent",
        b.create_session(pb::CreateSessionRequest {
            agent_id: "b".into(),
            parent_session_id: s(),
            ..Default::default()
        })
        .await,
        REF_GONE,
    );
    refused(
        "ImportTrace with A's session as parent",
        b.import_trace(
            pb::ImportTraceRequest {
                agent_id: "b".into(),
                file_name: "t.jsonl".into(),
                parent_session_id: s(),
                ..Default::default()
            },
            br#"{"type":"user","message":{"role":"user","content":"hi"},"uuid":"u1","timestamp":"2026-01-01T00:00:00Z","sessionId":"x"}"#.to_vec(),
            |_| {},
        )
        .await,
        REF_GONE,
    );
    refused(
        "CompileView",
        b.compile_view(pb::CompileViewRequest {
            session_id: s(),
            view: pb::ViewKind::Full as i32,
            ..Default::default()
        })
        .await,
        GONE,
    );
    refused(
        "ReadLines by session",
        b.read_lines(pb::ReadLinesRequest { session_id: s(), first_line: 1, last_line: 3, ..Default::default() }).await,
        GONE,
    );
    refused(
        "ReadLines by pointer",
        b.read_lines(pb::ReadLinesRequest { pointer: format!("{}:1-3", v.session), ..Default::default() }).await,
        GONE,
    );
    refused("GetTaskState", b.get_task_state(&v.task, 0).await, GONE);
    refused("ListTaskStateVersions", b.task_history(&v.task, 10).await, GONE);
    refused(
        "Delegate under A's task",
        b.delegate(pb::DelegateRequest {
            parent_task_id: v.task.clone(),
            objective: "x".into(),
            pointers: mine(),
            ..Default::default()
        })
        .await,
        GONE,
    );
    refused(
        "Report on A's task and session",
        b.report(pb::ReportRequest {
            task_id: v.task.clone(),
            session_id: s(),
            status: "succeeded".into(),
            summary: "x".into(),
            pointers: mine(),
            ..Default::default()
        })
        .await,
        GONE,
    );
    refused(
        "Compact",
        b.compact(pb::CompactRequest { session_id: s(), window_budget: 300, ..Default::default() }).await,
        GONE,
    );
    refused("ExpandManifest", b.expand_manifest_all(&v.manifest).await, GONE);
    refused("GetWindow", b.get_window(&s(), "").await, GONE);
    refused(
        "BuildPack",
        b.build_pack(pb::BuildPackRequest { session_id: s(), user_message: "x".into(), ..Default::default() }).await,
        GONE,
    );
    refused("GetPack", b.get_pack(&v.pack, pb::PackView::Full).await, GONE);
    refused(
        "BuildSnapshot by session",
        b.build_snapshot(pb::BuildSnapshotRequest { session_id: s(), ..Default::default() }).await,
        GONE,
    );
    refused(
        "BuildSnapshot by task",
        b.build_snapshot(pb::BuildSnapshotRequest { task_id: v.task.clone(), ..Default::default() }).await,
        GONE,
    );
    refused(
        "BuildSnapshot by agent",
        b.build_snapshot(pb::BuildSnapshotRequest { agent_id: "victim-agent".into(), ..Default::default() }).await,
        GONE,
    );
    refused("GetFact", b.get_fact(&v.fact).await, GONE);
    refused("RevokeApiKey", b.revoke_api_key(&v.key).await, GONE);

    // Pointers into A's session, inside B's own writes.
    let pointers = vec![
        pb::Pointer { target: Some(pb::pointer::Target::EventId(v.event.clone())) },
        pb::Pointer { target: Some(pb::pointer::Target::ArtifactId(v.artifact.clone())) },
        pb::Pointer {
            target: Some(pb::pointer::Target::Span(pb::Span { session_id: s(), first_seq: 1, last_seq: 2 })),
        },
    ];
    b.update_task_state(put("b-task", state("own"))).await.unwrap();
    for p in pointers {
        let shown = format!("{p:?}");
        refused(
            &format!("Report citing {shown}"),
            b.report(pb::ReportRequest {
                task_id: "b-task".into(),
                session_id: own.clone(),
                status: "succeeded".into(),
                summary: "x".into(),
                pointers: vec![p.clone()],
                ..Default::default()
            })
            .await,
            REF_GONE,
        );
        refused(
            &format!("Delegate citing {shown}"),
            b.delegate(pb::DelegateRequest {
                parent_task_id: "b-task".into(),
                objective: "x".into(),
                pointers: vec![p],
                ..Default::default()
            })
            .await,
            REF_GONE,
        );
    }

    // Reading RPCs over B's namespace: answers, with nothing of A in them.
    let search = b.search(pb::SearchRequest { query: SECRET.into(), with_text: true, ..Default::default() }).await;
    clean("Search", &search, &v);
    let filtered = b
        .search(pb::SearchRequest {
            query: SECRET.into(),
            filter: Some(pb::SearchFilter { session_ids: vec![s()], ..Default::default() }),
            ..Default::default()
        })
        .await;
    clean("Search filtered on A's session", &filtered, &v);
    clean("ListSessions", &b.list_sessions(pb::ListSessionsRequest::default()).await, &v);
    let listed = b.list_sessions(pb::ListSessionsRequest::default()).await.unwrap();
    assert!(listed.sessions.iter().all(|x| x.id != v.session), "ListSessions shows A's session");
    clean("ListApiKeys", &b.list_api_keys().await, &v);
    let keys = b.list_api_keys().await.unwrap();
    assert!(keys.iter().all(|k| k.id != v.key), "ListApiKeys shows A's key");
    for (what, r) in [
        (
            "FindQuote",
            format!("{:?}", b.find_quote(pb::FindQuoteRequest { query: SECRET.into(), ..Default::default() }).await),
        ),
        (
            "FindQuote in A's session",
            format!(
                "{:?}",
                b.find_quote(pb::FindQuoteRequest {
                    query: SECRET.into(),
                    session_ids: vec![s()],
                    ..Default::default()
                })
                .await
            ),
        ),
        (
            "QueryFacts",
            format!(
                "{:?}",
                b.query_facts(pb::QueryFactsRequest { question: SECRET.into(), ..Default::default() }).await
            ),
        ),
        (
            "QueryFacts in A's session",
            format!(
                "{:?}",
                b.query_facts(pb::QueryFactsRequest { session_ids: vec![s()], ..Default::default() }).await
            ),
        ),
        (
            "RememberWhen",
            format!(
                "{:?}",
                b.remember_when(pb::RememberWhenRequest { query: SECRET.into(), ..Default::default() }).await
            ),
        ),
        ("RecallAll", format!("{:?}", b.recall_all(4000).await)),
        ("ListTopics", format!("{:?}", b.list_topics(pb::ListTopicsRequest::default()).await)),
        (
            "ExpandTopic",
            format!(
                "{:?}",
                b.expand_topic(pb::ExpandTopicRequest { tag: "deploy".into(), ..Default::default() }).await
            ),
        ),
        ("GetMemoryStatus", format!("{:?}", b.memory_status().await)),
    ] {
        assert!(!r.contains(SECRET), "{what}: leaks A's text: {r}");
        assert!(!r.contains(&v.fact) && !r.contains(&v.event), "{what}: leaks A's ids: {r}");
    }
    let mut reports = b.watch_reports(&v.task, 0).await.unwrap();
    let next = tokio::time::timeout(Duration::from_millis(500), reports.next()).await;
    assert!(!matches!(next, Ok(Ok(Some(_)))), "WatchReports shows A's report: {next:?}");

    // Ids A chose do not constrain B: B may use them for its own objects, and A's stay A's.
    let same_report = b
        .report(pb::ReportRequest {
            task_id: "b-task".into(),
            session_id: own.clone(),
            status: "succeeded".into(),
            summary: "b's own".into(),
            pointers: mine(),
            report_id: v.report.clone(),
            ..Default::default()
        })
        .await;
    assert!(same_report.is_ok(), "B's report under an id A used: {same_report:?}");
    let appended = b.append_events(&own, vec![ev("note", "b's own")], Some("victim-batch".into())).await;
    assert!(appended.is_ok(), "B's batch under A's idempotency key: {appended:?}");
    assert!(!appended.unwrap().replayed, "B's batch is not A's replay");

    // Session ids are per namespace: B may create a session under the id A chose, and every
    // path (store, caches of compiled views and their blocks, index, memory, packs) keeps the
    // two apart. A's compile of its version 6 is cached first, and B's session is brought to
    // version 6 too, so a cache keyed by session and version alone would hand B A's view.
    assert!(full_view(&a, &s()).await.unwrap().contains(SECRET), "A's own view");
    let same_id = b
        .create_session(pb::CreateSessionRequest { agent_id: "b".into(), session_id: s(), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(same_id.id, v.session);
    assert_eq!(same_id.event_count, 0, "B's session is new, not A's");
    let b_text = "b-owns-this-marmot";
    let b_events: Vec<_> = (0..6).map(|i| ev("user_message", &format!("{b_text} turn {i}"))).collect();
    let appended = b.append_events(&s(), b_events, None).await.unwrap();
    assert_eq!((appended.first_seq, appended.last_seq), (1, 6), "B's seqs start at 1 in B's session");
    let b_view = full_view(&b, &s()).await;
    clean("CompileView of B's session under A's id", &b_view, &v);
    assert!(b_view.as_ref().is_ok_and(|t| t.contains(b_text)), "B sees its own view: {b_view:?}");
    let b_lines =
        b.read_lines(pb::ReadLinesRequest { pointer: format!("{}:1-40", v.session), ..Default::default() }).await;
    clean("ReadLines of B's session under A's id", &b_lines, &v);
    assert!(format!("{b_lines:?}").contains(b_text), "{b_lines:?}");
    let b_events = b.get_events(pb::GetEventsRequest { session_id: s(), ..Default::default() }).await;
    clean("GetEvents of B's session under A's id", &b_events, &v);
    assert_eq!(b_events.unwrap().events.len(), 6);
    let b_pack = b.build_pack(pack_request(&s(), format!("what about {b_text} and the deploy password hint?"))).await;
    clean("BuildPack on B's session under A's id", &b_pack, &v);
    assert!(format!("{b_pack:?}").contains(b_text), "{b_pack:?}");
    let b_snapshot = b.build_snapshot(pb::BuildSnapshotRequest { session_id: s(), ..Default::default() }).await;
    clean("BuildSnapshot of B's session under A's id", &b_snapshot, &v);
    let b_search = b.search(pb::SearchRequest { query: format!("{SECRET} marmot"), ..Default::default() }).await;
    clean("Search with B's session under A's id", &b_search, &v);
    assert!(!b_search.unwrap().hits.is_empty(), "B finds its own events");
    let b_window =
        b.compact(pb::CompactRequest { session_id: s(), window_budget: 300, headroom: 50, ..Default::default() }).await;
    clean("Compact of B's session under A's id", &b_window, &v);
    // The same request again is B's own session back; other attributes are B's conflict alone.
    let again = b
        .create_session(pb::CreateSessionRequest { agent_id: "b".into(), session_id: s(), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(again.event_count, 6);
    let other = b
        .create_session(pb::CreateSessionRequest { agent_id: "not-b".into(), session_id: s(), ..Default::default() })
        .await;
    refused("CreateSession again with other attributes", other, &[Code::AlreadyExists]);

    // Nothing B did reached A.
    let a_session = a.get_session(&v.session).await.unwrap();
    assert_eq!(a_session.event_count, 6, "A's five events and its report");
    assert_eq!(a_session.agent_id, "victim-agent");
    let a_view = full_view(&a, &s()).await.unwrap();
    assert!(a_view.contains(SECRET) && !a_view.contains(b_text), "A's view is A's: {a_view}");
    let a_events = a.get_events(pb::GetEventsRequest { session_id: s(), ..Default::default() }).await.unwrap();
    assert!(a_events.events.iter().all(|e| !e.content.contains(b_text)), "A's events are A's");
    let a_pack = a.build_pack(pack_request(&s(), format!("what about {SECRET} and the marmot?"))).await.unwrap();
    assert!(!format!("{a_pack:?}").contains(b_text), "A's pack has nothing of B's: {a_pack:?}");
    assert!(a.get_task_state(&v.task, 0).await.unwrap().state.unwrap().goals[0].contains(SECRET));
}

/// Two tenants append to sessions under the same id at the same time: the group committer puts
/// both tenants' appends into one statement, and each session still gets gapless seqs and only
/// its own tenant's events.
#[tokio::test]
async fn sessions_under_one_id_in_two_namespaces_stay_apart_under_concurrent_appends() {
    let Some(srv) = TestServer::start().await else { return };
    let (_, ta) = srv.namespace_with_key("same-id-a", Access::Write).await;
    let (_, tb) = srv.namespace_with_key("same-id-b", Access::Write).await;
    let (a, b) = (client(&srv, "same-id-a", &ta).await, client(&srv, "same-id-b", &tb).await);
    let id = uuid::Uuid::now_v7().to_string();
    for c in [&a, &b] {
        let made = c
            .create_session(pb::CreateSessionRequest {
                agent_id: "w".into(),
                session_id: id.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(made.id, id);
    }
    const N: usize = 60;
    let one = |c: &'static str, i: usize| {
        let (client, id) = (if c == "a" { &a } else { &b }, &id);
        async move { client.append_events(id, vec![ev("note", &format!("from-{c} {i}"))], None).await }
    };
    let appends = (0..N).flat_map(|i| [one("a", i), one("b", i)]);
    for r in futures::future::join_all(appends).await {
        r.unwrap();
    }
    for (c, mine, theirs) in [(&a, "from-a", "from-b"), (&b, "from-b", "from-a")] {
        assert_eq!(c.get_session(&id).await.unwrap().event_count, N as u64, "{mine}");
        let events =
            c.get_events(pb::GetEventsRequest { session_id: id.clone(), ..Default::default() }).await.unwrap().events;
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=N as u64).collect::<Vec<_>>(), "{mine}: gapless seqs from 1");
        assert!(events.iter().all(|e| e.content.starts_with(mine) && !e.content.contains(theirs)), "{mine}");
        let mut texts: Vec<&str> = events.iter().map(|e| e.content.as_str()).collect();
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), N, "{mine}: every append once");
    }
}
