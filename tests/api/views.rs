//! ViewService: imports give the CLI's bytes, views of appended events, pointers that resolve.
use std::path::PathBuf;

use memex_proto::v1 as pb;
use memex_tests::server_or_skip;

use crate::{Fixture, assert_status, call, ev, fixture, result};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/vcc/tests/fixtures")
}

fn trace(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join("traces/claude-code").join(name)).unwrap()
}

fn golden(trace: &str, mode: &str, file: &str) -> Vec<u8> {
    std::fs::read(fixtures().join("golden").join(trace).join(mode).join(file)).unwrap()
}

async fn import(
    f: &mut crate::Fixture,
    file_name: &str,
    bytes: &[u8],
    strict: bool,
) -> Result<pb::ImportTraceResponse, tonic::Status> {
    // Uneven chunks, to show the upload is reassembled exactly.
    let mut msgs = vec![pb::ImportTraceRequest {
        namespace: f.ns.clone(),
        agent_id: "claude-code".into(),
        file_name: file_name.into(),
        strict,
        ..Default::default()
    }];
    for chunk in bytes.chunks(7_919) {
        msgs.push(pb::ImportTraceRequest { chunk: chunk.to_vec(), ..Default::default() });
    }
    let mut views = pb::view_service_client::ViewServiceClient::new(f.c.channel.clone());
    let mut req = tonic::Request::new(tokio_stream::iter(msgs));
    req.metadata_mut().insert("authorization", f.token.parse().unwrap());
    views.import_trace(req).await.map(|r| r.into_inner())
}

pub(crate) async fn view(
    f: &crate::Fixture,
    req: pb::CompileViewRequest,
) -> Result<(pb::ViewInfo, Vec<u8>), tonic::Status> {
    let mut views = pb::view_service_client::ViewServiceClient::new(f.c.channel.clone());
    let mut r = tonic::Request::new(req);
    r.metadata_mut().insert("authorization", f.token.parse().unwrap());
    let mut stream = views.compile_view(r).await?.into_inner();
    let mut info = None;
    let mut text = Vec::new();
    while let Some(chunk) = stream.message().await? {
        if chunk.info.is_some() {
            info = chunk.info;
        }
        text.extend_from_slice(&chunk.text);
    }
    Ok((info.expect("first chunk has the info"), text))
}

async fn read_lines(f: &crate::Fixture, req: pb::ReadLinesRequest) -> Result<pb::ReadLinesResponse, tonic::Status> {
    let mut views = pb::view_service_client::ViewServiceClient::new(f.c.channel.clone());
    let mut r = tonic::Request::new(req);
    r.metadata_mut().insert("authorization", f.token.parse().unwrap());
    views.read_lines(r).await.map(|r| r.into_inner())
}

pub(crate) fn req(f: &crate::Fixture, session: &str, view: pb::ViewKind) -> pb::CompileViewRequest {
    pb::CompileViewRequest {
        namespace: f.ns.clone(),
        session_id: session.into(),
        view: view as i32,
        ..Default::default()
    }
}

fn grep(pattern: &str) -> Option<pb::Predicate> {
    Some(pb::Predicate { regex: pattern.into(), ..Default::default() })
}

#[tokio::test]
async fn an_imported_trace_serves_the_same_bytes_as_memex_view() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "import").await;
    let name = "spotter__short";
    let raw = trace(&format!("{name}.jsonl"));
    let imported = import(&mut f, &format!("{name}.jsonl"), &raw, false).await.unwrap();
    assert_eq!(imported.format, "claude");
    assert!(imported.events > 5, "{} events", imported.events);
    assert_eq!(imported.chains, 1);
    let session = imported.session.unwrap();
    assert_eq!(session.source_format, "claude");
    assert_eq!(session.event_count, imported.events);
    // The raw file is kept byte for byte.
    let (_, bytes) = f.artifact(&imported.raw.unwrap().id).await.unwrap();
    assert!(bytes == raw);

    let (info, full) = view(&f, req(&f, &session.id, pb::ViewKind::Full)).await.unwrap();
    assert_eq!(info.file_name, format!("{name}.txt"));
    assert!(full == golden(name, "compile", &format!("{name}.txt")), "full view differs from the golden");
    let (_, ui) = view(&f, req(&f, &session.id, pb::ViewKind::Ui)).await.unwrap();
    assert!(ui == golden(name, "compile", &format!("{name}.min.txt")), "UI view differs");
    let mut adaptive = req(&f, &session.id, pb::ViewKind::Adaptive);
    adaptive.predicate = grep("error");
    let (_, text) = view(&f, adaptive.clone()).await.unwrap();
    assert!(text == golden(name, "grep-error", &format!("{name}.view.txt")), "adaptive view differs");
    adaptive.view = pb::ViewKind::Index as i32;
    let (_, text) = view(&f, adaptive).await.unwrap();
    assert!(
        text == golden(name, "grep-error", "stdout.txt"),
        "index view differs:\n{}",
        String::from_utf8_lossy(&text)
    );
    // Served again from the cache: identical.
    let (_, again) = view(&f, req(&f, &session.id, pb::ViewKind::Full)).await.unwrap();
    assert_eq!(again, full);

    // Every imported event with lines points at lines that hold its text (record granularity).
    let events = f.events_with_lines(&session.id).await;
    let full_text = String::from_utf8(full.clone()).unwrap();
    let full_lines: Vec<&str> = full_text.split('\n').collect();
    let mut checked = 0;
    for e in events.iter().filter(|e| e.kind == "user_message" || e.kind == "assistant_message") {
        let l = e.lines.unwrap_or_else(|| panic!("event {} ({}) has lines", e.seq, e.kind));
        let span = full_lines[(l.first_line - 1) as usize..l.last_line as usize].join("\n");
        let first = e.content.lines().find(|t| !t.trim().is_empty()).unwrap_or_default();
        assert!(span.contains(first.trim()), "event {} text {first:?} not in lines {l:?}", e.seq);
        checked += 1;
    }
    assert!(checked >= 3);

    // An imported trace takes no appends.
    let mut append = f.append_req(vec![ev("note", "late")], "");
    append.session_id = session.id.clone();
    assert_status(f.c.events.append_events(append).await, tonic::Code::FailedPrecondition, "imported");
}

#[tokio::test]
async fn every_chain_of_a_compacted_trace_is_served() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "chains").await;
    let name = "spotter__4d5611e5-241a-462a-8d15-5122611a9569";
    let imported = import(&mut f, &format!("{name}.jsonl"), &trace(&format!("{name}.jsonl")), false).await.unwrap();
    assert_eq!(imported.chains, 2);
    let session = imported.session.unwrap().id;
    for chain in 1..=2u32 {
        let mut r = req(&f, &session, pb::ViewKind::Full);
        r.chain = chain;
        let (info, text) = view(&f, r.clone()).await.unwrap();
        assert_eq!(info.chains, 2);
        assert!(text == golden(name, "compile", &format!("{name}_{chain}.txt")), "chain {chain} full view differs");
        r.view = pb::ViewKind::Ui as i32;
        let (_, text) = view(&f, r).await.unwrap();
        assert!(text == golden(name, "compile", &format!("{name}_{chain}.min.txt")), "chain {chain} UI differs");
    }
    let mut r = req(&f, &session, pb::ViewKind::Full);
    r.chain = 3;
    assert_status(view(&f, r).await, tonic::Code::InvalidArgument, "chain");
}

#[tokio::test]
async fn a_repaired_line_is_a_diagnostic_and_strict_refuses_it() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "malformed").await;
    let raw = trace("entire__37995ebed6e4-2.jsonl");
    let imported = import(&mut f, "entire__37995ebed6e4-2.jsonl", &raw, false).await.unwrap();
    assert!(imported.diagnostic_count >= 1);
    let d = &imported.diagnostics[0];
    assert_eq!(d.line, 128);
    assert!(d.message.contains("second record on the same line"), "{d:?}");
    assert!(imported.events > 100, "the rest of the file was imported");
    let strict = import(&mut f, "entire__37995ebed6e4-2.jsonl", &raw, true).await;
    assert_status(strict, tonic::Code::InvalidArgument, "128");
    let sessions =
        f.c.sessions
            .list_sessions(pb::ListSessionsRequest { namespace: f.ns.clone(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(sessions.sessions.len(), 2, "the fixture's session and the lenient import; the strict one left nothing");
}

/// The full view of `f`'s session compiled here from its events as `memex events` prints them.
async fn compiled_locally(f: &mut crate::Fixture) -> String {
    let jsonl: String = f
        .all_events()
        .await
        .into_iter()
        .map(|e| {
            let rec = memex_event::EventRecord {
                id: e.id,
                session_id: e.session_id,
                seq: e.seq,
                kind: e.kind,
                agent_id: Some(e.agent_id),
                task_id: (!e.task_id.is_empty()).then_some(e.task_id),
                tool_name: (!e.tool_name.is_empty()).then_some(e.tool_name),
                tool_call_id: (!e.tool_call_id.is_empty()).then_some(e.tool_call_id),
                event_time: e.event_time.and_then(|t| chrono::DateTime::from_timestamp(t.seconds, t.nanos as u32)),
                ingest_time: e.ingest_time.and_then(|t| chrono::DateTime::from_timestamp(t.seconds, t.nanos as u32)),
                content: e.content,
                artifact: None,
                metadata: None,
            };
            rec.to_json_line() + "\n"
        })
        .collect();
    let local = memex_vcc::compile_trace(jsonl.as_bytes(), &f.session, memex_vcc::CompileOptions::default()).unwrap();
    local.chains()[0].full_view()
}

#[tokio::test]
async fn appended_events_have_a_view_whose_earlier_lines_never_change() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "native").await;
    f.append(vec![
        ev("user_message", "Find the failing test"),
        call("c1"),
        result("c1", "test a ... FAILED\nerror: boom"),
    ])
    .await
    .unwrap();
    let (info1, v1) = view(&f, req(&f, &f.session, pb::ViewKind::Full)).await.unwrap();
    assert_eq!(info1.version, 3);
    assert_eq!(info1.file_name, format!("{}.txt", f.session));
    // The same bytes as compiling the session's events (what `memex events` prints).
    assert_eq!(String::from_utf8(v1.clone()).unwrap(), compiled_locally(&mut f).await);

    f.append(vec![ev("assistant_message", "Fixed it."), ev("decision", "Keep the retry")]).await.unwrap();
    let (info2, v2) = view(&f, req(&f, &f.session, pb::ViewKind::Full)).await.unwrap();
    assert_eq!(info2.version, 5);
    // Compiled from the export kept from version 3 plus the two new events: still the same bytes.
    assert_eq!(String::from_utf8(v2.clone()).unwrap(), compiled_locally(&mut f).await);
    let old: Vec<&str> = std::str::from_utf8(&v1).unwrap().lines().collect();
    let new: Vec<&str> = std::str::from_utf8(&v2).unwrap().lines().collect();
    // Every line before the last section of the old view is unchanged.
    let last_section = old.iter().rposition(|l| l.starts_with('[')).unwrap();
    assert_eq!(&new[..last_section], &old[..last_section]);
    assert!(new.len() > old.len());

    // Pointers resolve: the tool result's body, by pointer string, with context.
    let n = new.iter().position(|l| *l == "error: boom").unwrap() as u32 + 1;
    let lines = read_lines(
        &f,
        pb::ReadLinesRequest {
            namespace: f.ns.clone(),
            pointer: format!("{}:{n}-{n}", f.session),
            context: 1,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(lines.lines.len(), 3);
    assert_eq!(lines.lines[1].number, n);
    assert_eq!(lines.lines[1].text, "error: boom");
    assert_eq!(lines.lines[1].role, "tool");
    assert_eq!(lines.lines[1].kind, "body");
    assert!(lines.lines[1].block >= 0);
    // The reference joins lines with "\n", so the trailing newline ends an empty last line.
    assert_eq!(lines.full_lines as usize, std::str::from_utf8(&v2).unwrap().split('\n').count());
    // Each event knows its lines: the result's range holds its body.
    let with_lines = f.events_with_lines(&f.session).await;
    let result_lines = with_lines[2].lines.unwrap();
    assert!(result_lines.first_line <= n && n <= result_lines.last_line, "{result_lines:?} should hold line {n}");
    let mut previous_end = 0;
    for e in &with_lines {
        let l = e.lines.unwrap_or_else(|| panic!("event {} has lines", e.seq));
        assert!(l.first_line > previous_end, "events occupy increasing, disjoint ranges");
        previous_end = l.last_line;
    }
    for bad in ["nonsense", &format!("{}:5", f.session), &format!("{}:9-2", f.session)] {
        let r = read_lines(
            &f,
            pb::ReadLinesRequest { namespace: f.ns.clone(), pointer: bad.to_string(), ..Default::default() },
        )
        .await;
        assert_eq!(r.expect_err(bad).code(), tonic::Code::InvalidArgument);
    }
    let missing = read_lines(
        &f,
        pb::ReadLinesRequest {
            namespace: f.ns.clone(),
            pointer: format!("{}:1-2", uuid::Uuid::now_v7()),
            ..Default::default()
        },
    )
    .await;
    assert_status(missing, tonic::Code::NotFound, "session_id");
    let mut r = req(&f, &f.session, pb::ViewKind::Adaptive);
    assert_status(view(&f, r.clone()).await, tonic::Code::InvalidArgument, "predicate");
    r.predicate = Some(pb::Predicate { regex: "(?<=x)".into(), ..Default::default() });
    assert_status(view(&f, r).await, tonic::Code::InvalidArgument, "predicate");
}

/// A new session of namespace `name`, with its namespace's and its own id for `memex_views`.
async fn live_session(
    srv: &memex_tests::TestServer,
    name: &str,
) -> (Fixture, memex_event::NamespaceId, memex_event::SessionId) {
    let f = fixture(srv, name).await;
    let ns = memex_event::NamespaceId(srv.store.namespace(name).await.unwrap().id);
    let session = memex_event::SessionId(f.session.parse().unwrap());
    (f, ns, session)
}

/// Views with caches of their own: what a process that never saw the session compiles.
fn fresh_views(srv: &memex_tests::TestServer) -> memex_views::Views {
    memex_views::Views::new(srv.store.clone(), &memex_views::ViewsConfig::default())
}

/// An agent's turns, each a version of its session: calls, results, thinking, a decision.
fn agent_turns() -> Vec<Vec<pb::EventInput>> {
    vec![
        vec![ev("user_message", "fix the parser"), ev("assistant_message", "looking at it")],
        vec![call("c1")],
        vec![result("c1", "src/parser.rs\nsrc/lexer.rs")],
        vec![ev("assistant_message", "the lexer drops a bracket"), ev("thinking", "line 7 maybe")],
        vec![ev("assistant_message", "more of the same answer")],
        vec![ev("user_message", "and the tests?"), call("c2"), result("c2", "2 passed")],
        vec![ev("decision", "keep the old lexer")],
    ]
}

/// Packs place the events they cite through the views' block cache, kept per session: a new
/// version of a live session takes over the blocks an append cannot move (those before the
/// separator of the last section) and places the rest again. Every version's blocks, so placed,
/// are those a cache that never saw the earlier versions gives.
#[tokio::test]
async fn blocks_carried_to_a_new_version_are_those_placed_from_scratch() {
    use memex_event::Seq;
    use memex_pointer::FullView;
    let srv = server_or_skip!();
    let (mut f, ns, session) = live_session(&srv, "carried").await;
    let kept = fresh_views(&srv);
    let mut n = 0u64;
    for events in agent_turns() {
        n += events.len() as u64;
        f.append(events).await.unwrap();
        let seqs: Vec<Seq> = (1..=n).map(Seq).collect();
        let placed = kept.blocks(ns, session, Some(Seq(n)), &seqs).await.unwrap();
        let scratch = fresh_views(&srv);
        let want = scratch.blocks(ns, session, Some(Seq(n)), &seqs).await.unwrap();
        assert_eq!(placed, want, "version {n}");
    }
    assert!(kept.stats().blocks_carried() > 0, "later versions took over earlier blocks");
}

/// A live session's next version resumes the compiler its last version kept (taken out of the
/// cache, not copied): turn after turn, each version's full view is the one a server that never
/// saw the earlier versions compiles.
#[tokio::test]
async fn resumed_versions_compile_as_from_scratch() {
    let srv = server_or_skip!();
    let (mut f, ns, session) = live_session(&srv, "resumed").await;
    let kept = fresh_views(&srv);
    let full = |c: &memex_views::CompiledSession| c.full_view(0).expect("one chain");
    for (turn, events) in agent_turns().into_iter().enumerate() {
        f.append(events).await.unwrap();
        let resumed = kept.compiled(ns, session).await.unwrap();
        let scratch = fresh_views(&srv);
        let want = scratch.compiled(ns, session).await.unwrap();
        assert_eq!(resumed.version(), want.version(), "turn {turn}");
        assert_eq!(full(&resumed), full(&want), "turn {turn}");
    }
}

/// Waits (a bounded time) until `views` has stored `n` line maps in the background.
async fn maps_written(views: &memex_views::Views, n: u64) {
    for _ in 0..200 {
        if views.stats().line_maps_written() >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("{n} line maps were not stored: {}", views.stats().line_maps_written());
}

#[tokio::test]
async fn stored_line_maps_answer_as_a_compile_would() {
    use memex_event::{Seq, SessionId};
    use memex_pointer::{FullView, Stability::Current};
    let srv = server_or_skip!();
    let (mut f, ns, session) = live_session(&srv, "linemaps").await;
    let fresh = || fresh_views(&srv);
    // Two turns, so that the first lies before the last section (its lines never move).
    f.append(vec![ev("user_message", "fix the parser"), ev("assistant_message", "looking at it"), call("c1")])
        .await
        .unwrap();
    f.append(vec![result("c1", "src/parser.rs"), ev("user_message", "and the tests?"), ev("thinking", "hm")])
        .await
        .unwrap();
    let seqs: Vec<Seq> = (1..=6).map(Seq).collect();
    let first = fresh();
    let want = first.lines(ns, session, &seqs, Current).await.unwrap();
    assert!(want.iter().filter(|l| l.is_some()).count() >= 4, "{want:?}");
    assert_eq!(first.stats().misses(), 1);
    maps_written(&first, 1).await;

    // Another process (nothing compiled) answers from the stored map, without compiling.
    let second = fresh();
    assert_eq!(second.lines(ns, session, &seqs, Current).await.unwrap(), want);
    assert_eq!((second.stats().line_maps_used(), second.stats().misses()), (1, 0));

    // A later version: the stored map still answers for the first turn's events, which an append
    // cannot move; asked for the rest too, the session is compiled and its new map stored.
    f.append(vec![call("c2"), result("c2", "2 passed"), ev("decision", "keep the old lexer")]).await.unwrap();
    let all: Vec<Seq> = (1..=9).map(Seq).collect();
    let scratch = fresh();
    scratch.compiled(ns, session).await.unwrap();
    let want_all = scratch.lines(ns, session, &all, Current).await.unwrap();
    assert_eq!(scratch.stats().line_maps_used(), 0, "a compiled session is answered from its compile");
    let third = fresh();
    assert_eq!(third.lines(ns, session, &all[..3], Current).await.unwrap(), want_all[..3]);
    assert_eq!((third.stats().line_maps_used(), third.stats().misses()), (1, 0));
    let fourth = fresh();
    assert_eq!(fourth.lines(ns, session, &all, Current).await.unwrap(), want_all);
    assert_eq!((fourth.stats().line_maps_used(), fourth.stats().misses()), (0, 1));
    maps_written(&fourth, 1).await;
    let fifth = fresh();
    assert_eq!(fifth.lines(ns, session, &all, Current).await.unwrap(), want_all);
    assert_eq!((fifth.stats().line_maps_used(), fifth.stats().misses()), (1, 0));

    // A process keeps the maps it read: asked again, it reads none from the store.
    let keeper = fresh();
    let counts = |v: &memex_views::Views| (v.stats().line_maps_used(), v.stats().line_maps_kept(), v.stats().misses());
    assert_eq!(keeper.lines(ns, session, &all, Current).await.unwrap(), want_all);
    assert_eq!(keeper.lines(ns, session, &all, Current).await.unwrap(), want_all);
    assert_eq!(counts(&keeper), (2, 1, 0));
    // A later version its kept map cannot answer: the stored map is read again (as old here),
    // then the session is compiled, and its new map stored.
    f.append(vec![ev("user_message", "ship it")]).await.unwrap();
    let more: Vec<Seq> = (1..=10).map(Seq).collect();
    let scratch = fresh();
    scratch.compiled(ns, session).await.unwrap();
    let want_more = scratch.lines(ns, session, &more, Current).await.unwrap();
    assert_eq!(keeper.lines(ns, session, &more, Current).await.unwrap(), want_more);
    assert_eq!(counts(&keeper), (2, 1, 1));
    maps_written(&keeper, 1).await;
    // An erasure makes a process forget what it kept: the store is asked again.
    keeper.forget_all();
    assert_eq!(keeper.lines(ns, session, &more, Current).await.unwrap(), want_more);
    assert_eq!(counts(&keeper), (3, 1, 1));

    // An imported trace's map is of its only version.
    let name = "entire__fc99c919b212-0.jsonl";
    let imported = import(&mut f, name, &trace(name), false).await.unwrap();
    let trace_session = SessionId(imported.session.unwrap().id.parse().unwrap());
    let seqs: Vec<Seq> = (1..=20).map(Seq).collect();
    let sixth = fresh();
    let want = sixth.lines(ns, trace_session, &seqs, Current).await.unwrap();
    assert!(want.iter().any(|l| l.is_some()));
    maps_written(&sixth, 1).await;
    let seventh = fresh();
    assert_eq!(seventh.lines(ns, trace_session, &seqs, Current).await.unwrap(), want);
    assert_eq!((seventh.stats().line_maps_used(), seventh.stats().misses()), (1, 0));

    // Several sessions at once (their rows and maps in one round trip each): the same answers,
    // and a session that does not exist is its own error.
    let gone = SessionId(uuid::Uuid::now_v7());
    let asks = vec![(session, all.clone()), (gone, all.clone()), (trace_session, seqs.clone())];
    let eighth = fresh();
    let answers = eighth.lines_of_sessions(ns, &asks, Current).await;
    assert_eq!(answers[0].as_ref().unwrap(), &want_all);
    assert_eq!(answers[1], Err(memex_pointer::FullViewError::SessionNotFound(gone)));
    assert_eq!(answers[2].as_ref().unwrap(), &want);
    assert_eq!((eighth.stats().line_maps_used(), eighth.stats().misses()), (2, 0));
    // A live session's lines are never final; an import's are.
    let finals = eighth.lines_of_sessions(ns, &asks, memex_pointer::Stability::Final).await;
    assert!(finals[0].as_ref().unwrap().iter().all(Option::is_none));
    assert_eq!(finals[2].as_ref().unwrap(), &want);
}

/// `FullView::prepare` (what the memory worker calls for each session it has read): it stores
/// the map that a process which never compiled the session then answers from, and remakes a live
/// session's map only once it has fallen behind by half the session (or by `MAP_SLACK` events).
#[tokio::test]
async fn a_prepared_session_is_answered_from_its_map() {
    use memex_event::{Seq, SessionId};
    use memex_pointer::{FullView, Stability::Current};
    let srv = server_or_skip!();
    let (mut f, ns, session) = live_session(&srv, "prepared").await;
    let fresh = || fresh_views(&srv);
    let turns = agent_turns();
    let mut n = 0u64;
    for events in &turns[..3] {
        n += events.len() as u64;
        f.append(events.clone()).await.unwrap();
    }
    assert_eq!(n, 4);
    let worker = fresh();
    assert!(worker.prepare(ns, session).await.unwrap(), "no map yet: compiled");
    assert!(!worker.prepare(ns, session).await.unwrap(), "its map is of this version");
    assert_eq!(srv.store.line_map(ns.0, session.0).await.unwrap().map(|m| m.version), Some(4));
    let seqs = |n: u64| (1..=n).map(Seq).collect::<Vec<_>>();
    let want = fresh().lines(ns, session, &seqs(n), Current).await.unwrap();
    let reader = fresh();
    assert_eq!(reader.lines(ns, session, &seqs(n), Current).await.unwrap(), want);
    assert_eq!((reader.stats().line_maps_used(), reader.stats().misses()), (1, 0));

    // At 6 and 7 events the map of 4 stands (behind by less than its own 4); at 10, remade.
    for (events, remade) in [(&turns[3], false), (&turns[4], false), (&turns[5], true)] {
        n += events.len() as u64;
        f.append(events.clone()).await.unwrap();
        assert_eq!(fresh().prepare(ns, session).await.unwrap(), remade, "at {n} events");
    }
    assert_eq!(srv.store.line_map(ns.0, session.0).await.unwrap().map(|m| m.version), Some(n));
    let want = fresh().lines(ns, session, &seqs(n), Current).await.unwrap();
    let reader = fresh();
    assert_eq!(reader.lines(ns, session, &seqs(n), Current).await.unwrap(), want);
    assert_eq!((reader.stats().line_maps_used(), reader.stats().misses()), (1, 0));

    // An imported trace's map is of its only version: made once.
    let name = "entire__fc99c919b212-0.jsonl";
    let imported = import(&mut f, name, &trace(name), false).await.unwrap();
    let trace_session = SessionId(imported.session.unwrap().id.parse().unwrap());
    assert!(fresh().prepare(ns, trace_session).await.unwrap());
    assert!(!fresh().prepare(ns, trace_session).await.unwrap());
    let want = fresh().lines(ns, trace_session, &seqs(20), Current).await.unwrap();
    let reader = fresh();
    assert_eq!(reader.lines(ns, trace_session, &seqs(20), Current).await.unwrap(), want);
    assert_eq!((reader.stats().line_maps_used(), reader.stats().misses()), (1, 0));

    let gone = SessionId(uuid::Uuid::now_v7());
    assert_eq!(fresh().prepare(ns, gone).await, Err(memex_pointer::FullViewError::SessionNotFound(gone)));
}
