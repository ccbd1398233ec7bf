//! Erasure (EraseSubject): a data subject's sessions leave nothing behind — not in any table,
//! not in the stored packs or artifacts, not in any replica's index or caches, not in memory —
//! while every pointer still resolves (to a tombstone) and everyone else's data stays.
use std::time::Duration;

use memex_client::Client;
use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::{TestServer, memory_on};
use tonic::Code;

use crate::compaction::{call, output};
use crate::{client, ev};

const SECRET: &str = "quetzalcoatl-4471";

/// A session of `agent` in task "t": a pack for one session of a task retrieves from all of them.
async fn session(c: &Client, agent: &str) -> String {
    let req = pb::CreateSessionRequest { agent_id: agent.into(), task_id: "t".into(), ..Default::default() };
    c.create_session(req).await.unwrap().id
}

async fn hits(c: &Client, query: &str) -> Vec<pb::SearchHit> {
    c.search(pb::SearchRequest { query: query.into(), limit: 50, with_text: true, ..Default::default() })
        .await
        .unwrap()
        .hits
}

/// Rows of every table in the public schema whose text form contains `needle`.
async fn rows_containing(store: &memex_store::Store, needle: &str) -> Vec<String> {
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
            .fetch_all(store.pool())
            .await
            .unwrap();
    let mut found = Vec::new();
    for t in tables {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM \"{t}\" r WHERE strpos(r::text, $1) > 0"
        )))
        .bind(needle)
        .fetch_one(store.pool())
        .await
        .unwrap();
        if n > 0 {
            found.push(format!("{t}: {n}"));
        }
    }
    found
}

#[tokio::test]
async fn an_erased_subject_leaves_nothing_behind_and_pointers_still_resolve() {
    let Some(srv) = TestServer::start_with(memory_on).await else { return };
    let (ns, token) = srv.namespace_with_key("erase", Access::Admin).await;
    let c = client(&srv, "erase", &token).await;
    let other = srv.replica().await;
    let (_, other_token) = other.namespace_with_key("erase", Access::Read).await;
    let co = client(&other, "erase", &other_token).await;

    // The subject: a live session and an imported trace, both of agent "subject".
    let s1 = session(&c, "subject").await;
    let bulky: String = (0..300).map(|i| format!("{SECRET} appears in build log line {i}\n")).collect();
    c.append_events(
        &s1,
        vec![
            ev("user_message", &format!("My account name is {SECRET}; deploy the billing service.")),
            ev("assistant_message", &format!("Deploying billing for {SECRET}.")),
            call("c1", "cargo build --release"),
            output("c1", &bulky),
            ev("decision", &format!("We decided to name the release after {SECRET}.")),
        ],
        None,
    )
    .await
    .unwrap();
    let trace = format!(
        "{}\n",
        serde_json::json!({"type":"user","message":{"role":"user","content":format!("remember {SECRET} please")},
                           "uuid":"u1","timestamp":"2026-01-01T00:00:00Z","sessionId":"t1"})
    );
    let imported = c
        .import_trace(
            pb::ImportTraceRequest { agent_id: "subject".into(), file_name: "t.jsonl".into(), ..Default::default() },
            trace.into_bytes(),
            |_| {},
        )
        .await
        .unwrap()
        .session
        .unwrap()
        .id;
    // Someone else, whose data must stay; one of its packs quotes the subject.
    let keeper = session(&c, "keeper").await;
    c.append_events(
        &keeper,
        vec![ev("user_message", "keeper asks about the billing deploy and its release name")],
        None,
    )
    .await
    .unwrap();

    // Everything derived: a report, packs, a manifest, memory, an embedding, warm caches.
    c.update_task_state(pb::UpdateTaskStateRequest {
        task_id: "t".into(),
        state: Some(crate::task_state::state("ship")),
        ..Default::default()
    })
    .await
    .unwrap();
    let first = c.get_events(pb::GetEventsRequest { session_id: s1.clone(), ..Default::default() }).await.unwrap();
    let pointer = pb::Pointer { target: Some(pb::pointer::Target::EventId(first.events[0].id.clone())) };
    c.report(pb::ReportRequest {
        task_id: "t".into(),
        session_id: s1.clone(),
        status: "succeeded".into(),
        summary: format!("deployed for {SECRET}"),
        pointers: vec![pointer.clone()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut packs = Vec::new();
    for (s, q) in [
        (&s1, format!("what about {SECRET}?")),
        (&keeper, "what was the release named after? the billing deploy decision".to_owned()),
    ] {
        let p = c
            .build_pack(pb::BuildPackRequest {
                session_id: s.clone(),
                user_message: q,
                budgets: Some(crate::packs::budgets(2000, 800)),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(p.text.contains(SECRET), "the pack quotes the subject");
        packs.push(p.pack_id);
    }
    let compacted = c
        .compact(pb::CompactRequest {
            session_id: s1.clone(),
            window_budget: 300,
            headroom: 50,
            protected_turns: Some(0),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(compacted.compacted);
    sqlx::query(
        "INSERT INTO embeddings (event_id, model, dim, namespace_id, session_id, seq, kind, role, agent_id, event_time, embedding)
         SELECT id, 'test', 3, namespace_id, session_id, seq, kind, 'user', agent_id, event_time, '[1,2,3]'
         FROM events WHERE session_id = $1::uuid AND seq = 1",
    )
    .bind(&s1)
    .execute(srv.store.pool())
    .await
    .unwrap();
    let mut facts = 0;
    for _ in 0..500 {
        let q = c.query_facts(pb::QueryFactsRequest { session_ids: vec![s1.clone()], ..Default::default() }).await;
        facts = q.map(|r| r.facts.len()).unwrap_or(0);
        if facts > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(facts > 0, "memory read the subject's session");
    let view = |c: Client, s: String| async move {
        let v = c.compile_view(pb::CompileViewRequest {
            session_id: s,
            view: pb::ViewKind::Full as i32,
            ..Default::default()
        });
        String::from_utf8(v.await.unwrap().text).unwrap()
    };
    assert!(view(c.clone(), s1.clone()).await.contains(SECRET));
    assert!(view(co.clone(), imported.clone()).await.contains(SECRET));
    assert!(!hits(&c, SECRET).await.is_empty() && !hits(&co, SECRET).await.is_empty(), "both replicas indexed it");
    assert!(!rows_containing(&srv.store, SECRET).await.is_empty());
    // The subject's sessions have line maps (the searches above may have stored some already).
    let subject_ids: Vec<uuid::Uuid> = [&s1, &imported].iter().map(|s| s.parse().unwrap()).collect();
    let map = |id: uuid::Uuid| memex_store::LineMapRow { session_id: id, version: 1, stable_before: 0, map: vec![] };
    let maps: Vec<_> = subject_ids.iter().copied().map(map).collect();
    srv.store.put_line_maps(ns.id, &maps).await.unwrap();
    let line_maps = || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM view_line_maps WHERE session_id = ANY($1)")
            .bind(&subject_ids)
            .fetch_one(srv.store.pool())
            .await
            .unwrap();
        n
    };
    assert_eq!(line_maps().await, 2);

    // A dry run counts and changes nothing.
    let erase = |dry_run: bool| pb::EraseSubjectRequest {
        agent_id: "subject".into(),
        reason: "GDPR art. 17 request 2026-118".into(),
        dry_run,
        ..Default::default()
    };
    let dry = c.erase_subject(erase(true)).await.unwrap();
    assert!(dry.dry_run && dry.events == 7 && dry.artifacts >= 2 && dry.packs >= 1, "{dry:?}");
    assert!(!hits(&c, SECRET).await.is_empty(), "a dry run erases nothing");
    // Only an admin may erase, and only with a reason.
    let (_, writer) = srv.namespace_with_key("erase", Access::Write).await;
    let denied = client(&srv, "erase", &writer).await.erase_subject(erase(false)).await;
    assert_eq!(denied.unwrap_err().code(), Code::PermissionDenied);
    let no_reason = c.erase_subject(pb::EraseSubjectRequest { agent_id: "subject".into(), ..Default::default() }).await;
    assert!(no_reason.unwrap_err().to_string().contains("reason"));

    let done = c.erase_subject(erase(false)).await.unwrap();
    let mut erased = done.session_ids.clone();
    erased.sort();
    let mut subject = vec![s1.clone(), imported.clone()];
    subject.sort();
    assert_eq!(erased, subject);
    assert_eq!(done.events, 7, "six of the live session (its report's too) and one imported");
    assert!(done.packs >= 2, "the subject's pack and the keeper's that quotes it: {done:?}");
    assert!(done.embeddings == 1 && done.manifests >= 1 && done.memory_facts > 0, "{done:?}");

    // Not a row of any table holds it, and no stored artifact or pack either.
    assert_eq!(rows_containing(&srv.store, SECRET).await, Vec::<String>::new());
    // The line maps of the erased sessions are gone, and a map compiled from before the erasure
    // is not stored after it.
    assert_eq!(line_maps().await, 0);
    let late: Vec<_> =
        subject_ids.iter().copied().map(|id| memex_store::LineMapRow { version: 2, ..map(id) }).collect();
    assert_eq!(srv.store.put_line_maps(ns.id, &late).await.unwrap(), 0);
    assert_eq!(line_maps().await, 0);
    let artifacts: Vec<Vec<u8>> = sqlx::query_scalar("SELECT id FROM artifacts WHERE namespace_id = $1")
        .bind(ns.id)
        .fetch_all(srv.store.pool())
        .await
        .unwrap();
    for id in artifacts {
        let id = format!("blake3:{}", id.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let mut bytes = Vec::new();
        c.get_artifact(&id, &mut bytes).await.unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(SECRET), "artifact {id}");
    }
    let stored: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM context_packs WHERE namespace_id = $1")
        .bind(ns.id)
        .fetch_all(srv.store.pool())
        .await
        .unwrap();
    for id in stored {
        let p = c.get_pack(&id.to_string(), pb::PackView::Full).await.unwrap();
        assert!(!format!("{p:?}").contains(SECRET), "pack {id}");
    }
    for id in &packs {
        assert_eq!(c.get_pack(id, pb::PackView::Full).await.unwrap_err().code(), Code::NotFound);
    }

    // Neither replica's index nor caches: the other learns of it by notification.
    assert!(hits(&c, SECRET).await.is_empty());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !hits(&co, SECRET).await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "the other replica still finds it");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (cl, s) in [(&c, &s1), (&co, &s1), (&c, &imported), (&co, &imported)] {
        let text = view(cl.clone(), s.clone()).await;
        assert!(!text.contains(SECRET) && text.contains("[erased: erasure"), "{text}");
    }
    // Pointers still resolve, to tombstones.
    let events = c.get_events(pb::GetEventsRequest { session_id: s1.clone(), ..Default::default() }).await.unwrap();
    assert_eq!(events.events.len(), 6, "five events and the report's, in place");
    assert!(events.events.iter().all(|e| e.content.starts_with("[erased: erasure") && e.artifact.is_none()));
    let read = c.read_lines(pb::ReadLinesRequest { pointer: format!("{s1}:1-3"), ..Default::default() }).await.unwrap();
    assert!(!format!("{read:?}").contains(SECRET));

    // Memory: nothing of it, once the worker has rebuilt the topics (a rebuild that read the
    // segments before the erasure writes nothing, and the namespace stays due).
    let mut current = false;
    for _ in 0..3000 {
        let status = c.memory_status().await.unwrap();
        if status.topics_current && status.lag_events == 0 {
            current = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(current, "the memory worker did not rebuild the topics within 60 s of the erasure");
    let memory = format!(
        "{:?} {:?} {:?} {:?}",
        c.query_facts(pb::QueryFactsRequest { question: SECRET.into(), ..Default::default() }).await,
        c.find_quote(pb::FindQuoteRequest { query: SECRET.into(), ..Default::default() }).await,
        c.recall_all(8000).await,
        c.remember_when(pb::RememberWhenRequest { query: SECRET.into(), ..Default::default() }).await,
    );
    assert!(!memory.contains(SECRET), "{memory}");
    assert_eq!(rows_containing(&srv.store, SECRET).await, Vec::<String>::new(), "not rebuilt from anywhere");

    // The subject's sessions take nothing more; everyone else's data stays.
    let append = c.append_events(&s1, vec![ev("note", "more")], None).await;
    assert_eq!(append.unwrap_err().code(), Code::FailedPrecondition);
    let kept = c.get_events(pb::GetEventsRequest { session_id: keeper.clone(), ..Default::default() }).await.unwrap();
    assert!(kept.events[0].content.contains("keeper asks"));
    assert!(hits(&c, "keeper").await.iter().any(|h| h.session_id == keeper));

    // The audit says who, why and what.
    let (by, reason, sessions): (String, String, Vec<uuid::Uuid>) =
        sqlx::query_as("SELECT requested_by, reason, sessions FROM erasures WHERE id = $1::uuid")
            .bind(&done.erasure_id)
            .fetch_one(srv.store.pool())
            .await
            .unwrap();
    assert!(by.starts_with("api key "), "{by}");
    assert_eq!(reason, "GDPR art. 17 request 2026-118");
    assert_eq!(sessions.len(), 2);
}

/// Backdates rows (through the privileged path, as only a test may).
async fn backdate(store: &memex_store::Store, sql: &str, id: &str) {
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query("SELECT set_config('memex.erasure', 'test', true)").execute(&mut *tx).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).bind(id).execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn retention_drops_old_packs_and_erases_old_sessions_and_keeps_the_rest() {
    let Some(srv) = TestServer::start_with(|c| c.retention.interval_secs = 1).await else { return };
    let (_, token) = srv.namespace_with_key("erase", Access::Admin).await;
    let c = client(&srv, "erase", &token).await;
    // Two sessions of no common task, so that neither's pack quotes the other.
    let mut ids = Vec::new();
    for agent in ["a", "b"] {
        let req = pb::CreateSessionRequest { agent_id: agent.into(), ..Default::default() };
        ids.push(c.create_session(req).await.unwrap().id);
    }
    let (old, new) = (ids[0].clone(), ids[1].clone());
    for s in [&old, &new] {
        c.append_events(s, vec![ev("user_message", &format!("status of {s}? {SECRET}"))], None).await.unwrap();
    }
    let mut packs = Vec::new();
    for s in [&old, &new] {
        let req = pb::BuildPackRequest { session_id: s.clone(), user_message: "status?".into(), ..Default::default() };
        packs.push(c.build_pack(req).await.unwrap().pack_id);
    }
    backdate(
        &srv.store,
        "UPDATE context_packs SET created_at = now() - interval '40 days' WHERE id = $1::uuid",
        &packs[0],
    )
    .await;
    backdate(
        &srv.store,
        "UPDATE events SET ingest_time = now() - interval '400 days' WHERE session_id = $1::uuid",
        &old,
    )
    .await;
    let policy = srv
        .store
        .set_retention(
            "erase",
            memex_store::RetentionChange { packs_days: Some(Some(30)), events_days: Some(Some(365)) },
        )
        .await
        .unwrap();
    assert_eq!(policy, memex_store::Retention { packs_days: Some(30), events_days: Some(365) });

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let pack_gone = c.get_pack(&packs[0], pb::PackView::Basic).await.is_err();
        let events =
            c.get_events(pb::GetEventsRequest { session_id: old.clone(), ..Default::default() }).await.unwrap();
        if pack_gone && events.events[0].content.starts_with("[erased: erasure") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "retention did not run");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The young pack and session stay.
    c.get_pack(&packs[1], pb::PackView::Full).await.unwrap();
    let kept = c.get_events(pb::GetEventsRequest { session_id: new.clone(), ..Default::default() }).await.unwrap();
    assert!(kept.events[0].content.contains(SECRET));
    let by: String = sqlx::query_scalar("SELECT requested_by FROM erasures WHERE $1::uuid = ANY(sessions)")
        .bind(&old)
        .fetch_one(srv.store.pool())
        .await
        .unwrap();
    assert_eq!(by, "retention policy");
    // Forever again: nothing more goes.
    let forever = srv
        .store
        .set_retention("erase", memex_store::RetentionChange { packs_days: Some(None), events_days: Some(None) })
        .await
        .unwrap();
    assert_eq!(forever, memex_store::Retention::default());
    let zero =
        srv.store.set_retention("erase", memex_store::RetentionChange { packs_days: Some(Some(0)), events_days: None });
    assert!(zero.await.unwrap_err().to_string().contains("packs_days"));
}
