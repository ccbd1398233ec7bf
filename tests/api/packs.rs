//! Retrieval packs over gRPC: blocks within budgets, provenance, decisions, replay.
use memex_proto::v1 as pb;
use memex_tests::server_or_skip;
use memex_tokens::Tokenizer;

use crate::compaction::{agent_loop, call, output};
use crate::task_state::state;
use crate::{Fixture, assert_status, ev, fixture};

pub fn budgets(retrieval: u32, tail: u32) -> pb::Budgets {
    pb::Budgets {
        context: Some(16_000),
        system: Some(500),
        task_state: Some(800),
        tail: Some(tail),
        retrieval: Some(retrieval),
        user: Some(500),
        headroom: Some(2_000),
        memory: None,
    }
}

impl Fixture {
    pub async fn pack(&mut self, session: &str, message: &str, b: pb::Budgets) -> Result<pb::Pack, tonic::Status> {
        self.c
            .context
            .build_pack(pb::BuildPackRequest {
                namespace: self.ns.clone(),
                session_id: session.into(),
                user_message: message.into(),
                system_prompt: "Answer from evidence; cite pointers.".into(),
                budgets: Some(b),
                view: pb::PackView::Full as i32,
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner())
    }
}

/// Checks the budget invariant on a pack as the wire carries it.
pub fn assert_within_budget(p: &pb::Pack) {
    let t: Tokenizer = p.tokenizer.parse().unwrap();
    assert_eq!(p.tokens as usize, t.count(&p.text));
    let b = p.budgets.as_ref().unwrap();
    assert!(p.tokens + b.headroom.unwrap() <= b.context.unwrap(), "{} + {:?} > {:?}", p.tokens, b.headroom, b.context);
    for block in &p.blocks {
        assert_eq!(block.tokens as usize, t.count(&block.text));
        assert!(block.tokens <= block.budget, "{}: {} > {}", block.kind, block.tokens, block.budget);
    }
}

#[tokio::test]
async fn a_pack_is_task_conditioned_bounded_recorded_and_replayable() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pk").await;
    let s = f.task_session("fix", "exec").await;
    let first = f.append_to(&s, vec![ev("note", "the release checksum is in dist/SHA256SUMS")], "").await;
    let mut st = state("fix separability_matrix");
    st.key_pointers = vec![pb::Pointer { target: Some(pb::pointer::Target::EventId(first.event_ids[0].clone())) }];
    f.put_state("fix", 0, st).await.unwrap();
    f.append_to(&s, agent_loop(3), "").await;
    let mut pinned = ev("note", "pinned: the CI runs on python 3.9 only");
    pinned.metadata_json = r#"{"pin": true}"#.into();
    let old_goal = f.append_to(&s, vec![ev("decision", "use approach A for _cstack"), pinned], "").await;
    let mut newer = ev("decision", "use approach B for _cstack (A breaks nesting)");
    newer.metadata_json = format!(r#"{{"supersedes": "{}"}}"#, old_goal.event_ids[0]);
    f.append_to(&s, vec![ev("constraint", "never edit files under astropy/extern"), newer], "").await;
    // Another task's decision, in another session: not this pack's business.
    let other = f.task_session("other", "exec2").await;
    f.append_to(&other, vec![ev("decision", "unrelated: bump numpy")], "").await;

    let p = f.pack(&s, "what approach did we settle on for _cstack?", budgets(1500, 1200)).await.unwrap();
    assert_within_budget(&p);
    assert_eq!((p.task_id.as_str(), p.task_state_version, p.tokenizer.as_str()), ("fix", 1, "o200k_base"));
    assert!(
        p.text.starts_with("## system\nAnswer from evidence; cite pointers.\nYou are a coding agent.\n"),
        "{}",
        p.text
    );
    assert!(p.text.contains("## task state fix v1 · phase execution"));
    assert!(p.text.ends_with("## user\nwhat approach did we settle on for _cstack?\n"));
    let kinds: Vec<&str> = p.blocks.iter().map(|b| b.kind.as_str()).collect();
    assert_eq!(kinds, vec!["system", "task_state", "retrieval", "tail", "turn_retrieval", "user"]);
    // Every candidate has a decision; the reasons are the packer's.
    let d = |content_seq: u64| p.decisions.iter().find(|d| d.seq == content_seq && d.session_id == s).cloned();
    let pointer = d(1).expect("the key pointer is a candidate");
    assert!(pointer.sources.as_ref().unwrap().pointer);
    let constraint = p.decisions.iter().find(|d| d.kind == "constraint").expect("constraint");
    assert!(constraint.parts.as_ref().unwrap().modifier >= 3.0);
    assert!(p.decisions.iter().any(|d| d.sources.as_ref().unwrap().pinned && d.kind == "note"));
    let superseded = p.decisions.iter().find(|d| d.event_id == old_goal.event_ids[0]).expect("old decision");
    assert_eq!(superseded.parts.as_ref().unwrap().superseded, 0.1);
    assert!(p.decisions.iter().all(|d| d.session_id != other), "another task's session is out of scope");
    for d in &p.decisions {
        assert!(d.included || !d.reason.is_empty(), "{d:?}");
    }
    // Provenance: every item names a stored event of the session, tail items in seq order.
    let events = f.events_of(&s).await;
    for item in &p.items {
        let e = events.iter().find(|e| e.id == item.event_id).expect("item names a stored event");
        assert_eq!((e.seq, e.kind.as_str()), (item.seq, item.kind.as_str()));
        // The full view is plugged in: items cite their full-view lines.
        let l = item.lines.as_ref().unwrap_or_else(|| panic!("{item:?} has full-view lines"));
        assert!(p.text.contains(&format!("(s1:{}-{}) [{}]", l.first, l.last, item.kind)), "{item:?}");
    }
    let tail: Vec<u64> = p.items.iter().filter(|i| i.block == "tail").map(|i| i.seq).collect();
    assert!(
        !tail.is_empty() && tail.windows(2).all(|w| w[0] < w[1]) && *tail.last().unwrap() == events.last().unwrap().seq
    );
    assert!(p.text.contains(&format!("sessions: s1={s}")));

    // Stored exactly: GetPack replays it.
    let again =
        f.c.context
            .get_pack(pb::GetPackRequest { namespace: "pk".into(), pack_id: p.pack_id.clone(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(again, p);
    // The basic view: the same pack without the blocks' texts and the decisions.
    let basic =
        f.c.context
            .get_pack(pb::GetPackRequest {
                namespace: "pk".into(),
                pack_id: p.pack_id.clone(),
                view: pb::PackView::Basic as i32,
            })
            .await
            .unwrap()
            .into_inner();
    let mut expected = p.clone();
    expected.decisions.clear();
    for b in &mut expected.blocks {
        b.text.clear();
    }
    assert_eq!(basic, expected);
    let bad =
        f.c.context.get_pack(pb::GetPackRequest { namespace: "pk".into(), pack_id: p.pack_id.clone(), view: 7 }).await;
    assert_status(bad, tonic::Code::InvalidArgument, "view");

    // The same inputs give the same pack.
    let p2 = f.pack(&s, "what approach did we settle on for _cstack?", budgets(1500, 1200)).await.unwrap();
    assert_eq!((p2.text.as_str(), &p2.items, &p2.decisions), (p.text.as_str(), &p.items, &p.decisions));
    assert_ne!(p2.pack_id, p.pack_id);

    // cl100k_base is selectable.
    let c =
        f.c.context
            .build_pack(pb::BuildPackRequest {
                namespace: "pk".into(),
                session_id: s.clone(),
                user_message: "status?".into(),
                tokenizer: "cl100k_base".into(),
                budgets: Some(budgets(800, 800)),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(c.tokenizer, "cl100k_base");
    // BuildPack answers the basic view unless asked for the full one.
    assert!(c.decisions.is_empty() && !c.blocks.is_empty() && c.blocks.iter().all(|b| b.text.is_empty()));
    let c =
        f.c.context.get_pack(pb::GetPackRequest { namespace: "pk".into(), pack_id: c.pack_id, ..Default::default() });
    let c = c.await.unwrap().into_inner();
    assert!(!c.decisions.is_empty());
    assert_within_budget(&c);
}

#[tokio::test]
async fn compaction_anchors_and_manifests_reach_the_pack() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pkc").await;
    let s = f.session.clone();
    f.append_to(&s, agent_loop(8), "").await;
    let r = f.compact(&s, 6000, 1000).await.unwrap();
    let m = r.manifest.unwrap();
    let p = f.pack(&s, "what was the import error?", budgets(2000, 3000)).await.unwrap();
    assert_within_budget(&p);
    let anchor =
        p.decisions.iter().find(|d| d.sources.as_ref().unwrap().anchor).expect("a manifest anchor is a candidate");
    assert!(anchor.included, "{anchor:?}");
    assert!(p.text.contains("ModuleNotFoundError: No module named 'erfa'"));
    // The window's manifest stands in the tail where the evicted events were.
    let tail = p.blocks.iter().find(|b| b.kind == "tail").unwrap();
    assert!(tail.text.contains(&m.rendered) || !tail.text.contains("[pointer manifest"), "{}", tail.text);
}

/// With no search index plugged in, the pack's store scan finds an evicted tool result by what
/// its call and the reasoning before it said (the query never names the result's text).
#[tokio::test]
async fn the_store_scan_finds_an_evicted_result_by_its_context() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pks").await;
    let s = f.session.clone();
    let hash = "3f786850e387550fdab836ed7e6dc881de23001b58d2b6f1a3b3c6f2b1e0d9a7";
    f.append_to(
        &s,
        vec![
            ev("assistant_message", "Before changing anything, record the checksum of the release tarball."),
            call("k1", "sha256sum dist/astropy-4.3.1.tar.gz"),
            output("k1", &format!("{hash}  dist/astropy-4.3.1.tar.gz")),
        ],
        "",
    )
    .await;
    f.append_to(&s, agent_loop(8), "").await;
    f.compact(&s, 6000, 1000).await.unwrap();
    let p =
        f.pack(&s, "Which checksum did sha256sum print for the release tarball?", budgets(2000, 1000)).await.unwrap();
    assert_within_budget(&p);
    let retrieval = p.blocks.iter().find(|b| b.kind == "retrieval").unwrap();
    assert!(retrieval.text.contains(hash), "{}", retrieval.text);
    let found = p.decisions.iter().find(|d| d.seq == 3).expect("the result is a candidate");
    assert!(found.included && found.sources.as_ref().unwrap().lexical.is_some(), "{found:?}");
}

/// A failing test deep inside a large output: the event keeps only its head and tail, Search
/// finds the failing chunk in the artifact, and the pack carries that chunk (with the event's
/// pointer and the artifact's lines), not the head.
#[tokio::test]
async fn a_pack_carries_the_part_of_a_large_output_that_matched() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pkart").await;
    let s = f.session.clone();
    let mut body = String::new();
    for i in 0..3000 {
        body.push_str(&format!("tests/test_io.py::test_case_{i} PASSED\n"));
    }
    let mid = body[body.len() / 2..].find('\n').map(|i| body.len() / 2 + i + 1).unwrap();
    body.insert_str(
        mid,
        "tests/test_io.py::test_checksum_roundtrip FAILED - AssertionError: crc32 mismatch 0x1f != 0x2e\n",
    );
    let failing_line = body[..mid].matches('\n').count() as u32 + 1;
    let r = f
        .append_to(&s, vec![ev("user_message", "run the test suite"), call("c1", "pytest -q"), output("c1", &body)], "")
        .await;
    assert_eq!(r.artifacts.len(), 1, "the output became an artifact");
    f.append_to(&s, agent_loop(4), "").await;

    let p =
        f.pack(&s, "why did test_checksum_roundtrip fail with a crc32 mismatch?", budgets(2000, 300)).await.unwrap();
    assert_within_budget(&p);
    assert!(p.text.contains("FAILED - AssertionError: crc32 mismatch 0x1f != 0x2e"), "{}", p.text);
    let item = p.items.iter().find(|i| i.event_id == r.event_ids[2]).expect("the tool output is in the pack");
    assert_eq!(item.block, "retrieval");
    let (first, last) = (item.artifact_first_line.expect("artifact lines"), item.artifact_last_line.unwrap());
    assert!(first <= failing_line && failing_line <= last, "{first}-{last} misses line {failing_line}");
    assert!(
        p.text.contains(&format!("a{failing_line}: tests/test_io.py::test_checksum_roundtrip FAILED")),
        "{}",
        p.text
    );
    // The event's own text is its head and tail: not what the pack shows.
    assert!(!p.text.contains("test_case_0 PASSED"), "{}", p.text);
}

/// A task state over its budget: cut with a marker or left out, and listed in `omitted`; with the
/// block required, FAILED_PRECONDITION naming it.
#[tokio::test]
async fn a_block_over_its_budget_is_listed_or_refused_when_required() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pkreq").await;
    let s = f.task_session("big", "exec").await;
    let mut st = state("migrate the storage layer");
    st.constraints =
        (0..30).map(|i| format!("constraint {i}: keep the on-disk format of table {i} readable")).collect();
    f.put_state("big", 0, st).await.unwrap();
    f.append_to(&s, agent_loop(2), "").await;
    let mut b = budgets(1000, 1000);
    b.task_state = Some(120);
    let p = f.pack(&s, "what are the constraints?", b).await.unwrap();
    assert_within_budget(&p);
    assert_eq!(p.omitted.len(), 1, "{:?}", p.omitted);
    let o = &p.omitted[0];
    assert_eq!((o.block.as_str(), o.how.as_str(), o.budget), ("task_state", "cut", 120));
    assert!(o.tokens > 120, "{o:?}");
    assert!(p.text.contains("GetTaskState big v1 has all of it"), "{}", p.text);
    b.task_state = Some(3);
    let p = f.pack(&s, "what are the constraints?", b).await.unwrap();
    assert_eq!((p.omitted[0].how.as_str(), p.omitted[0].tokens), ("dropped", o.tokens));

    let mut req = pb::BuildPackRequest {
        namespace: f.ns.clone(),
        session_id: s.clone(),
        user_message: "what are the constraints?".into(),
        budgets: Some(b),
        required_blocks: vec!["task_state".into()],
        ..Default::default()
    };
    let r = f.c.context.build_pack(req.clone()).await;
    assert_status(r, tonic::Code::FailedPrecondition, "budgets.task_state = 3");
    req.required_blocks = vec!["system".into(), "tail".into()];
    let r = f.c.context.build_pack(req.clone()).await;
    assert_status(r, tonic::Code::InvalidArgument, "required_blocks[1]");
    // Required and whole: built, nothing omitted.
    req.budgets = Some(budgets(1000, 1000));
    req.required_blocks = vec!["task_state".into(), "system".into()];
    let p = f.c.context.build_pack(req).await.unwrap().into_inner();
    assert!(p.omitted.is_empty() && p.text.contains("constraint 29"), "{:?}", p.omitted);
}

/// An agent loop over gRPC: the next turn's pack starts with this turn's, through the end of its
/// tail (the stable evidence kept in place, the tail anchored), whatever the new question; a
/// cold replica lays it out the same way (the layout is stored with the pack).
#[tokio::test]
async fn the_next_turn_starts_with_this_turns_pack() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pkpre").await;
    let s = f.task_session("loop", "exec").await;
    f.put_state("loop", 0, state("fix separability_matrix")).await.unwrap();
    f.append_to(&s, agent_loop(6), "").await;
    let first = f.pack(&s, "what did the failing step print?", budgets(1200, 1500)).await.unwrap();
    assert!(first.blocks.iter().any(|b| b.kind == "retrieval" && !b.text.is_empty()), "{first:?}");
    let through_tail = |p: &pb::Pack| {
        let upto = p.blocks.iter().position(|b| b.kind == "tail").unwrap();
        p.blocks[..=upto].iter().filter(|b| !b.text.is_empty()).map(|b| b.text.as_str()).collect::<Vec<_>>().join("\n")
    };
    f.append_to(&s, vec![ev("assistant_message", "next I will rerun the separability tests")], "").await;
    let second = f.pack(&s, "which files did we edit so far?", budgets(1200, 1500)).await.unwrap();
    assert_within_budget(&second);
    assert!(second.text.starts_with(&through_tail(&first)), "{}\n----\n{}", first.text, second.text);
    assert!(second.text.contains("next I will rerun the separability tests"));
    let evidence = |p: &pb::Pack| -> Vec<String> {
        p.items.iter().filter(|i| i.block == "retrieval").map(|i| i.event_id.clone()).collect()
    };
    assert_eq!(evidence(&second), evidence(&first));
    // Another replica, caches cold, builds the same next pack from the stored layout.
    let replica = srv.replica().await;
    let c = replica.clients(Some(f.token.trim_start_matches("Bearer "))).await;
    let mut g = Fixture { ns: f.ns.clone(), c, session: s.clone(), token: f.token.clone() };
    let third = g.pack(&s, "which files did we edit so far?", budgets(1200, 1500)).await.unwrap();
    assert_eq!(third.text, second.text);
}

#[tokio::test]
async fn pack_requests_are_checked() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pkbad").await;
    let s = f.session.clone();
    let mut b = budgets(1000, 1000);
    b.context = Some(3000);
    assert_status(f.pack(&s, "hi", b).await, tonic::Code::InvalidArgument, "budgets: system 500");
    assert_status(
        f.pack(&s, &"word ".repeat(2000), budgets(1000, 1000)).await,
        tonic::Code::InvalidArgument,
        "user_message",
    );
    assert_status(
        f.pack(&uuid::Uuid::now_v7().to_string(), "hi", budgets(1000, 1000)).await,
        tonic::Code::NotFound,
        "session_id",
    );
    let r =
        f.c.context
            .get_pack(pb::GetPackRequest {
                namespace: "pkbad".into(),
                pack_id: uuid::Uuid::now_v7().to_string(),
                ..Default::default()
            })
            .await;
    assert_status(r, tonic::Code::NotFound, "pack_id");
    // An empty session still gets a pack (system prompt and user message).
    let p = f.pack(&s, "hello", budgets(1000, 1000)).await.unwrap();
    assert_within_budget(&p);
    assert!(p.decisions.is_empty() && p.items.is_empty());
}

/// A session's last pack keeps its newest events and standing items; the next pack still sees
/// what was appended since: the new events in the tail, a new decision among the candidates.
#[tokio::test]
async fn a_pack_sees_what_was_appended_since_the_last_one() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pka").await;
    let s = f.session.clone();
    f.append_to(&s, agent_loop(3), "").await;
    let first = f.pack(&s, "where are we?", budgets(1500, 3000)).await.unwrap();
    assert!(!first.text.contains("zeta-7"));
    let again = f.pack(&s, "where are we?", budgets(1500, 3000)).await.unwrap();
    assert_eq!((&again.text, &again.items, &again.decisions), (&first.text, &first.items, &first.decisions));

    let added = f
        .append_to(&s, vec![ev("decision", "ship zeta-7 behind a flag"), ev("assistant_message", "zeta-7 is next")], "")
        .await;
    let next = f.pack(&s, "where are we?", budgets(1500, 3000)).await.unwrap();
    assert_within_budget(&next);
    let tail: Vec<u64> = next.items.iter().filter(|i| i.block == "tail").map(|i| i.seq).collect();
    assert_eq!(tail.last(), Some(&added.last_seq), "{tail:?}");
    assert!(next.text.contains("zeta-7 is next"));
    let d = next.decisions.iter().find(|d| d.seq == added.first_seq).expect("the new decision is a candidate");
    assert!(d.sources.as_ref().unwrap().pinned, "{d:?}");
    // The new events are placed in the session's new full view.
    let item = next.items.iter().find(|i| i.seq == added.last_seq).unwrap();
    assert!(item.lines.is_some(), "{item:?}");
}

#[tokio::test]
async fn a_cached_tail_and_a_cold_replica_give_the_same_pack() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pkr").await;
    let s = f.session.clone();
    // Short events: the tail pages in past the first read (two pages of 48 events).
    let steps = |tag: &str| (0..150).map(|i| ev("assistant_message", &format!("step {tag}{i} done"))).collect();
    f.append_to(&s, steps("a"), "").await;
    let first = f.pack(&s, "which step came last?", budgets(1500, 6000)).await.unwrap();
    let again = f.pack(&s, "which step came last?", budgets(1500, 6000)).await.unwrap();
    assert_eq!((&again.text, &again.items, &again.decisions), (&first.text, &first.items, &first.decisions));
    let tail = |p: &pb::Pack| p.items.iter().filter(|i| i.block == "tail").map(|i| i.seq).collect::<Vec<u64>>();
    assert!(tail(&first).len() > 96, "{}", tail(&first).len());

    // More than a first read's worth appended at once: the cached tail is behind a gap.
    let added = f.append_to(&s, steps("b"), "").await;
    let next = f.pack(&s, "which step came last?", budgets(1500, 6000)).await.unwrap();
    let seqs = tail(&next);
    assert_eq!(seqs.last(), Some(&added.last_seq));
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "the tail has a gap: {seqs:?}");
    assert!(seqs.len() > 96, "{}", seqs.len());

    // A replica with cold caches pages the same tail in from the store.
    let replica = srv.replica().await;
    let c = replica.clients(Some(f.token.trim_start_matches("Bearer "))).await;
    let mut g = Fixture { ns: f.ns.clone(), c, session: s.clone(), token: f.token.clone() };
    let chunks = || async {
        let (n,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM pack_chunks").fetch_one(srv.store.pool()).await.unwrap();
        n
    };
    let stored = chunks().await;
    let cold = g.pack(&s, "which step came last?", budgets(1500, 6000)).await.unwrap();
    assert_eq!((&cold.text, &cold.items, &cold.decisions), (&next.text, &next.items, &next.decisions));
    // Its bulk was stored already: no new chunks. And each replica replays the other's packs.
    assert_eq!(chunks().await, stored);
    let get = |id: &str| pb::GetPackRequest { namespace: f.ns.clone(), pack_id: id.into(), ..Default::default() };
    assert_eq!(g.c.context.get_pack(get(&next.pack_id)).await.unwrap().into_inner(), next);
    assert_eq!(f.c.context.get_pack(get(&cold.pack_id)).await.unwrap().into_inner(), cold);
}

/// Past its turns and its queue (`limits.max_in_flight`, `limits.max_waiting`) a replica refuses
/// BuildPack at once with RESOURCE_EXHAUSTED and a retry hint, instead of queueing without
/// bound; a pack built without vectors says so.
#[tokio::test]
async fn packs_past_capacity_are_refused_at_once_with_a_retry_hint() {
    let srv = server_or_skip!(|c| {
        c.limits.max_in_flight = 1;
        c.limits.max_waiting = 0;
    });
    flood_of_packs(&srv, "shed", "limits.max_in_flight").await;
}

/// A queue with room is still bounded in time: a pack that would wait for a turn longer than
/// `limits.max_queue_wait_ms` is refused, not queued behind the others.
#[tokio::test]
async fn packs_that_would_wait_past_the_time_bound_are_refused() {
    let srv = server_or_skip!(|c| {
        c.limits.max_in_flight = 1;
        c.limits.max_waiting = 1_000;
        c.limits.max_queue_wait_ms = 1;
    });
    flood_of_packs(&srv, "shed-time", "limits.max_queue_wait_ms").await;
}

/// memex's own client sends a shed call again after the server's hint: the same flood through
/// `memex_client::Client` gets every pack built, and with its retries off it sees the refusals.
#[tokio::test]
async fn the_client_sends_a_shed_pack_again_after_the_hint() {
    let srv = server_or_skip!(|c| {
        c.limits.max_in_flight = 1;
        c.limits.max_waiting = 0;
    });
    let (f, s) = shed_session(&srv, "shed-retry").await;
    let token = f.token.trim_start_matches("Bearer ").to_owned();
    let client = crate::client(&srv, &f.ns, &token).await;
    let flood = |client: memex_client::Client| {
        let s = s.clone();
        async move {
            let packs: Vec<_> = (0..12)
                .map(|i| {
                    let (client, s) = (client.clone(), s.clone());
                    tokio::spawn(async move { client.build_pack(deploy_question(i, s)).await })
                })
                .collect();
            let mut refused = 0;
            for p in packs {
                match p.await.expect("task") {
                    Ok(_) => {}
                    Err(e) if e.code() == tonic::Code::ResourceExhausted => refused += 1,
                    Err(e) => panic!("{e}"),
                }
            }
            refused
        }
    };
    assert_eq!(flood(client.clone().with_shed_retries(u32::MAX)).await, 0, "every pack built in the end");
    assert!(flood(client.with_shed_retries(0)).await > 0, "without retries the refusals show");
}

/// 24 packs at once: some built, the others refused with RESOURCE_EXHAUSTED, a retry hint and a
/// message naming `limit`.
async fn flood_of_packs(srv: &memex_tests::TestServer, name: &str, limit: &str) {
    let (f, s) = shed_session(srv, name).await;
    let packs: Vec<_> = (0..24)
        .map(|i| {
            let mut c = f.c.context.clone();
            let request = pb::BuildPackRequest { namespace: f.ns.clone(), ..deploy_question(i, s.clone()) };
            tokio::spawn(async move { c.build_pack(request).await })
        })
        .collect();
    let (mut built, mut refused) = (0, 0);
    for p in packs {
        match p.await.unwrap() {
            Ok(p) => {
                built += 1;
                assert!(!p.into_inner().vectors_used, "this server has no embedding model");
            }
            Err(s) => {
                refused += 1;
                assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
                assert!(s.message().contains(limit), "{}", s.message());
                assert!(s.metadata().get("grpc-retry-pushback-ms").is_some(), "{s:?}");
            }
        }
    }
    assert!(built >= 1 && refused >= 1, "built {built}, refused {refused}");
}

/// A namespace `name` with a task session of 40 notes about a deploy cache error, for the floods.
async fn shed_session(srv: &memex_tests::TestServer, name: &str) -> (Fixture, String) {
    let mut f = fixture(srv, name).await;
    let s = f.task_session(name, "exec").await;
    f.append_to(&s, (0..40).map(|i| ev("note", &format!("deploy cache error {i}"))).collect(), "").await;
    (f, s)
}

/// The `i`th flood's pack request on session `s` (no namespace: the caller's).
fn deploy_question(i: usize, s: String) -> pb::BuildPackRequest {
    pb::BuildPackRequest {
        session_id: s,
        user_message: format!("what was the deploy cache error {i}?"),
        budgets: Some(budgets(2_000, 2_000)),
        ..Default::default()
    }
}
