//! Memory over gRPC: the worker reads a coding session into facts, segments and topics, and the
//! reader tools answer with pointers that ReadLines dereferences; supersession, as_of, paging,
//! presented-ref dedup, field errors, access, and a rebuild that gives the same memory.
use std::time::Duration;

use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::{Clients, TestServer, memory_on};
use tonic::Code;

use crate::{ev, result, tool_call as call};

/// A coding session: a request, a constraint, an edit, a failing test with a compiler error, a
/// fix, the test passing, a user correction, and later talk about deployment.
fn session_events() -> Vec<pb::EventInput> {
    vec![
        ev(
            "user_message",
            "The `parse_header` function rejects valid headers. Fix it, and never change the public API.",
        ),
        ev("assistant_message", "I'll read the parser first."),
        call("c1", "Read", r#"{"file_path":"src/parser.rs"}"#),
        result("c1", "fn parse_header(h: &str) -> Result<Header, Error> { todo!() }"),
        ev("assistant_message", "The parser compares lengths wrongly; editing it."),
        call("c2", "Edit", r#"{"file_path":"src/parser.rs","old_string":"a","new_string":"b"}"#),
        result("c2", "The file src/parser.rs has been updated."),
        call("c3", "Bash", r#"{"command":"cargo test parser"}"#),
        result(
            "c3",
            "error[E0308]: mismatched types in src/parser.rs\ntest parser::valid_header ... FAILED\ntest result: FAILED. 4 passed; 1 failed",
        ),
        ev("assistant_message", "A type mismatch in the parser; fixing the return type."),
        call("c4", "Edit", r#"{"file_path":"src/parser.rs","old_string":"b","new_string":"c"}"#),
        result("c4", "The file src/parser.rs has been updated."),
        call("c5", "Bash", r#"{"command":"cargo test parser"}"#),
        result("c5", "test parser::valid_header ... ok\ntest result: ok. 5 passed; 0 failed"),
        ev("user_message", "No, use the `httparse` crate instead of hand-written parsing."),
        ev("assistant_message", "Switching the parser to httparse."),
        call("c6", "Bash", r#"{"command":"cargo add httparse"}"#),
        result("c6", "Adding httparse v1.9.4 to dependencies"),
        ev(
            "user_message",
            "Now let's talk deployment: the Helm chart needs a readiness probe for the staging cluster.",
        ),
        ev("assistant_message", "The Helm chart gets a gRPC readiness probe; staging uses the same chart values."),
        call("c7", "Write", r#"{"file_path":"deploy/helm/values-staging.yaml","content":"probe: grpc"}"#),
        result("c7", "File created successfully at: deploy/helm/values-staging.yaml"),
    ]
}

async fn append(c: &Clients, ns: &str, session: &str, events: Vec<pb::EventInput>) {
    c.events
        .clone()
        .append_events(pb::AppendEventsRequest {
            namespace: ns.into(),
            session_id: session.into(),
            events,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Waits until the worker has read everything and the topics are current.
async fn settled(c: &Clients, ns: &str) -> pb::GetMemoryStatusResponse {
    for _ in 0..1_500 {
        let s = c
            .memory
            .clone()
            .get_memory_status(pb::GetMemoryStatusRequest { namespace: ns.into() })
            .await
            .unwrap()
            .into_inner();
        if s.lag_events == 0 && s.topics_current && s.segments > 0 && s.topics > 0 {
            // One more round: the last turn closes after the events are read.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let again = c
                .memory
                .clone()
                .get_memory_status(pb::GetMemoryStatusRequest { namespace: ns.into() })
                .await
                .unwrap()
                .into_inner();
            if again == s {
                return s;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the memory worker did not settle");
}

async fn read_lines(f: &crate::Fixture, pointer: &str) -> String {
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

#[tokio::test]
async fn the_worker_reads_a_session_and_the_reader_tools_answer_with_pointers() {
    let Some(srv) = TestServer::start_with(memory_on).await else { return };
    let f = crate::fixture(&srv, "mem").await;
    append(&f.c, &f.ns, &f.session, session_events()).await;
    let status = settled(&f.c, &f.ns).await;
    assert_eq!(status.interpreter, "heuristic");
    assert!(status.facts >= 8, "{status:?}");
    // The worker stored the line map of the session it read to the end, before any reader
    // asked: an answer citing it needs no compile.
    let (ns_id, session_id) = (srv.store.namespace(&f.ns).await.unwrap().id, f.session.parse().unwrap());
    let map = srv.store.line_map(ns_id, session_id).await.unwrap().expect("the worker stored a line map");
    assert_eq!(map.version, srv.store.session(ns_id, session_id).await.unwrap().event_count);
    let mut m = f.c.memory.clone();

    // The test failed, then passed: the latest status is "passed", and the failure is
    // superseded (as_of before the fix still says "failed").
    let facts = m
        .query_facts(pb::QueryFactsRequest {
            namespace: f.ns.clone(),
            fact_type: "test".into(),
            subject: "valid_header".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .facts;
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0].verb, "passed");
    let passed = facts[0].clone();
    let all = m
        .query_facts(pb::QueryFactsRequest {
            namespace: f.ns.clone(),
            fact_type: "test".into(),
            subject: "valid_header".into(),
            include_superseded: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .facts;
    assert_eq!(all.len(), 2);
    let failed = all.iter().find(|f| f.verb == "failed").unwrap().clone();
    assert_eq!(failed.superseded_by, passed.id);
    // Verb expansion: "broke" finds the failure among superseded facts.
    let broke = m
        .query_facts(pb::QueryFactsRequest {
            namespace: f.ns.clone(),
            verb: "broke".into(),
            include_superseded: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(broke.expanded_verbs.contains(&"failed".to_string()), "{:?}", broke.expanded_verbs);
    assert!(broke.facts.iter().any(|x| x.id == failed.id));
    // The chain, oldest first.
    let chain = m
        .get_fact(pb::GetFactRequest { namespace: f.ns.clone(), fact_id: failed.id.clone() })
        .await
        .unwrap()
        .into_inner()
        .chain;
    assert_eq!(chain.iter().map(|c| c.verb.as_str()).collect::<Vec<_>>(), vec!["failed", "passed"]);
    // Every fact cites lines that hold what it says.
    let text = read_lines(&f, &failed.pointer).await;
    assert!(text.contains("cargo test parser"), "{}: {text}", failed.pointer);
    let errors = m
        .query_facts(pb::QueryFactsRequest {
            namespace: f.ns.clone(),
            fact_type: "error".into(),
            include_superseded: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .facts;
    let verbs: Vec<&str> = errors.iter().map(|e| e.verb.as_str()).collect();
    assert!(verbs.contains(&"seen") && verbs.contains(&"resolved"), "{errors:?}");
    assert!(errors.iter().any(|e| e.object.contains("error[E0308]: mismatched types")));
    // The user's words: a constraint and a correction, verbatim.
    for (t, quote) in [("constraint", "never change the public API"), ("correction", "use the `httparse` crate")] {
        let r = m
            .query_facts(pb::QueryFactsRequest { namespace: f.ns.clone(), fact_type: t.into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .facts;
        assert!(r.iter().any(|x| x.what.contains(quote) && x.who == "user"), "{t}: {r:?}");
    }

    // FindQuote: the segment holding the error, with the hit's own pointer and the facts read there.
    let q = m
        .find_quote(pb::FindQuoteRequest {
            namespace: f.ns.clone(),
            query: "mismatched types".into(),
            reader: "agent-r".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // The tool's output matched (the assistant's words about it may rank above it).
    let first = q.quotes.iter().find(|x| x.match_type == "tool_output").expect("the output is quoted");
    let seg = first.segment.as_ref().expect("the hit is in a segment");
    assert!(!seg.pointer.is_empty() && !seg.summary.is_empty());
    assert!(read_lines(&f, &first.hit_pointer).await.contains("mismatched types"));
    assert!(first.facts.iter().any(|x| x.fact_type == "error"), "{:?}", first.facts);
    // Every pointer of the answer is there and dereferences: the segments', their summary
    // lines' and their facts' (looked up before the rows that name them were read).
    for quote in &q.quotes {
        let seg = quote.segment.as_ref();
        let pointers = seg
            .map(|s| &s.pointer)
            .into_iter()
            .chain(seg.into_iter().flat_map(|s| s.summary.iter().map(|l| &l.pointer)));
        for p in pointers.chain(quote.facts.iter().map(|x| &x.pointer)) {
            assert!(!p.is_empty() && !read_lines(&f, p).await.is_empty(), "{p:?} in {quote:?}");
        }
    }
    for quote in &q.quotes {
        let mut ids: Vec<&str> = quote.facts.iter().map(|x| x.id.as_str()).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n, "a fact twice in one quote");
    }
    // Shown to this reader once: not again.
    let again = m
        .find_quote(pb::FindQuoteRequest {
            namespace: f.ns.clone(),
            query: "mismatched types".into(),
            reader: "agent-r".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(again.already_presented >= 1);
    assert!(again.quotes.iter().all(|x| x.segment.as_ref().is_none_or(|s| s.id != seg.id)));

    // Topics: the parser and the deployment are topics, each with a summary citing lines (a tag
    // carried by one segment only is a topic when it leads that segment).
    let topics = m
        .list_topics(pb::ListTopicsRequest { namespace: f.ns.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = topics.topics.iter().map(|t| t.tag.as_str()).collect();
    assert!(names.contains(&"parser.rs") && names.contains(&"values-staging.yaml"), "{names:?}");
    let x = m
        .expand_topic(pb::ExpandTopicRequest {
            namespace: f.ns.clone(),
            tag: "parser.rs".into(),
            depth: "segments".into(),
            reader: "agent-r".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!x.segments.is_empty() && x.tokens > 0 && x.working_set_tokens == x.tokens, "{x:?}");
    assert!(x.text.contains(&x.segments[0].pointer), "{}", x.text);
    let full = m
        .expand_topic(pb::ExpandTopicRequest {
            namespace: f.ns.clone(),
            tag: "parser.rs".into(),
            depth: "full".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(full.text.contains("cargo test parser") && full.tokens > x.tokens, "{}", full.text);
    let all =
        m.recall_all(pb::RecallAllRequest { namespace: f.ns.clone(), max_tokens: 4_000 }).await.unwrap().into_inner();
    assert!(!all.topics.is_empty() && all.tokens <= 4_000 && all.topics.iter().all(|t| t.in_cover));
    let when = m
        .remember_when(pb::RememberWhenRequest {
            namespace: f.ns.clone(),
            query: "readiness probe".into(),
            preset: "last_7_days".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!when.quotes.is_empty());
    assert!(
        when.facts_in_window.iter().any(|x| x.subject.ends_with("values-staging.yaml")),
        "{:?}",
        when.facts_in_window
    );

    // A pack with a memory budget carries the topics hint and the reader's working set (the
    // topic paged in above), within its budget.
    let pack =
        f.c.context
            .clone()
            .build_pack(pb::BuildPackRequest {
                namespace: f.ns.clone(),
                session_id: f.session.clone(),
                user_message: "what did we change in the parser?".into(),
                budgets: Some(pb::Budgets { memory: Some(1_500), ..Default::default() }),
                memory_reader: "agent-r".into(),
                view: pb::PackView::Full as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    let kinds: Vec<&str> = pack.blocks.iter().map(|b| b.kind.as_str()).collect();
    let pos = |k: &str| kinds.iter().position(|x| *x == k);
    assert!(pos("task_state") < pos("memory") && pos("memory") < pos("retrieval"), "{kinds:?}");
    let block = pack.blocks.iter().find(|b| b.kind == "memory").expect("a memory block");
    assert!(block.tokens > 0 && block.tokens <= 1_500, "{block:?}");
    assert!(block.text.contains("<context-topics") && block.text.contains("- parser.rs [segments]"), "{}", block.text);
    assert!(block.text.contains(&x.segments[0].pointer), "the working set's content: {}", block.text);

    // Errors name the field.
    for (code, field, res) in [
        (
            Code::InvalidArgument,
            "depth",
            m.expand_topic(pb::ExpandTopicRequest {
                namespace: f.ns.clone(),
                tag: "parser.rs".into(),
                depth: "deep".into(),
                ..Default::default()
            })
            .await
            .map(|_| ()),
        ),
        (
            Code::NotFound,
            "topic",
            m.expand_topic(pb::ExpandTopicRequest {
                namespace: f.ns.clone(),
                tag: "nope".into(),
                ..Default::default()
            })
            .await
            .map(|_| ()),
        ),
        (
            Code::InvalidArgument,
            "preset",
            m.remember_when(pb::RememberWhenRequest {
                namespace: f.ns.clone(),
                query: "x".into(),
                preset: "last_week".into(),
                ..Default::default()
            })
            .await
            .map(|_| ()),
        ),
        (
            Code::InvalidArgument,
            "fact_type",
            m.query_facts(pb::QueryFactsRequest {
                namespace: f.ns.clone(),
                fact_type: "gossip".into(),
                ..Default::default()
            })
            .await
            .map(|_| ()),
        ),
        (
            Code::InvalidArgument,
            "query",
            m.find_quote(pb::FindQuoteRequest { namespace: f.ns.clone(), ..Default::default() }).await.map(|_| ()),
        ),
        (
            Code::NotFound,
            "fact_id",
            m.get_fact(pb::GetFactRequest { namespace: f.ns.clone(), fact_id: uuid::Uuid::nil().to_string() })
                .await
                .map(|_| ()),
        ),
    ] {
        let e = res.expect_err(field);
        assert_eq!(e.code(), code, "{field}: {e:?}");
        assert!(e.message().contains(field), "{field}: {}", e.message());
    }
    // A reader's state needs write access; reading does not.
    let (_, read) = srv.namespace_with_key(&f.ns, Access::Read).await;
    let mut ro = srv.clients(Some(&read)).await.memory;
    let e = ro
        .expand_topic(pb::ExpandTopicRequest {
            namespace: f.ns.clone(),
            tag: "parser.rs".into(),
            reader: "agent-r".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    ro.expand_topic(pb::ExpandTopicRequest { namespace: f.ns.clone(), tag: "parser.rs".into(), ..Default::default() })
        .await
        .unwrap();
}

/// Paging: expanding topics past the working set's budget collapses the coldest first.
#[tokio::test]
async fn expanding_past_the_budget_pages_the_coldest_topics_out() {
    let Some(srv) = TestServer::start_with(|c| {
        memory_on(c);
        c.memory.working_set_tokens = 150;
    })
    .await
    else {
        return;
    };
    let f = crate::fixture(&srv, "paging").await;
    append(&f.c, &f.ns, &f.session, session_events()).await;
    settled(&f.c, &f.ns).await;
    let mut m = f.c.memory.clone();
    let topics = m
        .list_topics(pb::ListTopicsRequest { namespace: f.ns.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .topics;
    assert!(topics.len() >= 3, "{topics:?}");
    let mut paged = Vec::new();
    // Each topic's cost at full depth and at its summary (rendered, pointers included), as a
    // reader with no working set is told.
    let mut full = std::collections::HashMap::new();
    let mut summary = std::collections::HashMap::new();
    for t in &topics {
        let x = m
            .expand_topic(pb::ExpandTopicRequest {
                namespace: f.ns.clone(),
                tag: t.tag.clone(),
                depth: "full".into(),
                reader: "pager".into(),
                max_tokens: 600,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(x.working_set_tokens <= x.working_set_budget.max(x.tokens), "{x:?}");
        assert_eq!(x.working_set_budget, 150);
        full.insert(t.tag.clone(), x.tokens);
        paged.extend(x.paged_out);
        let s = m
            .expand_topic(pb::ExpandTopicRequest {
                namespace: f.ns.clone(),
                tag: t.tag.clone(),
                depth: "summary".into(),
                max_tokens: 600,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        summary.insert(t.tag.clone(), s.tokens);
    }
    assert!(!paged.is_empty(), "nothing paged out");
    assert!(paged.iter().all(|p| p.action == "collapsed" || p.action == "dropped"));
    // A collapsed topic is kept at what its summary costs as shown, not at the summary's lines
    // without their pointers.
    let collapsed: Vec<&pb::PageOut> = paged.iter().filter(|p| p.action == "collapsed").collect();
    assert!(!collapsed.is_empty(), "{paged:?}");
    for p in collapsed {
        assert_eq!(p.freed_tokens, full[&p.tag] - summary[&p.tag], "{p:?}: full {full:?}, summary {summary:?}");
    }
}

#[derive(Debug, PartialEq)]
struct Snapshot {
    segments: Vec<(i64, i64, Vec<String>, String, bool)>,
    facts: Vec<(String, String, String, String, i64, Option<uuid::Uuid>)>,
    topics: Vec<(String, Vec<String>, bool, String)>,
}

async fn snapshot(store: &memex_store::Store, ns: uuid::Uuid) -> Snapshot {
    let pool = store.pool();
    Snapshot {
        segments: sqlx::query_as(
            "SELECT first_seq, last_seq, tags, summary_text, closed FROM memory_segments WHERE namespace_id = $1 ORDER BY first_seq",
        )
        .bind(ns)
        .fetch_all(pool)
        .await
        .unwrap(),
        facts: sqlx::query_as(
            "SELECT fact_type, subject, verb, what, first_seq, superseded_by FROM memory_facts WHERE namespace_id = $1
             ORDER BY first_seq, fact_type, subject, verb",
        )
        .bind(ns)
        .fetch_all(pool)
        .await
        .unwrap(),
        topics: sqlx::query_as(
            "SELECT tag, aliases, in_cover, description FROM memory_topics WHERE namespace_id = $1 ORDER BY tag",
        )
        .bind(ns)
        .fetch_all(pool)
        .await
        .unwrap(),
    }
}

/// The counts GetMemoryStatus reports (kept by the worker as it writes) are the tables' own.
async fn assert_counts(store: &memex_store::Store, ns: uuid::Uuid, status: &pb::GetMemoryStatusResponse) {
    let (sessions, segments, facts, topics, unread): (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM memory_progress WHERE namespace_id = $1),
                (SELECT count(*) FROM memory_segments WHERE namespace_id = $1),
                (SELECT count(*) FROM memory_facts WHERE namespace_id = $1),
                (SELECT count(*) FROM memory_topics WHERE namespace_id = $1),
                (SELECT coalesce(sum(s.next_seq - 1 - coalesce(p.fact_seq, 0)), 0)::int8 FROM sessions s
                 LEFT JOIN memory_progress p ON p.session_id = s.id WHERE s.namespace_id = $1)",
    )
    .bind(ns)
    .fetch_one(store.pool())
    .await
    .unwrap();
    let counted = (status.sessions, status.segments, status.facts, status.topics, status.lag_events);
    assert_eq!(counted, (sessions as u64, segments as u64, facts as u64, topics as u64, unread as u64));
}

/// Waits until every session's last turn is closed (the session has been quiet long enough).
async fn turns_closed(store: &memex_store::Store, ns: uuid::Uuid) {
    for _ in 0..1_000 {
        let (open,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM sessions s LEFT JOIN memory_progress p ON p.session_id = s.id
             WHERE s.namespace_id = $1 AND s.next_seq > 1 AND coalesce(p.turn_seq, 0) < s.next_seq - 1",
        )
        .bind(ns)
        .fetch_one(store.pool())
        .await
        .unwrap();
        if open == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the last turn did not close");
}

/// Memory is derived: forgotten and read again — here in jobs of three events, after a restart —
/// it is the same, row for row. Live, the events arrive in five appends and a turn closes only
/// after a quiet second, as in production (where a quiet spell also cuts the turn on a rebuild).
#[tokio::test]
async fn a_rebuild_in_small_jobs_after_a_restart_gives_the_same_memory() {
    let Some(srv) = TestServer::start_with(|c| {
        memory_on(c);
        c.memory.idle_close_secs = 1;
    })
    .await
    else {
        return;
    };
    let f = crate::fixture(&srv, "rebuild").await;
    for chunk in session_events().chunks(5) {
        append(&f.c, &f.ns, &f.session, chunk.to_vec()).await;
    }
    let ns = srv.store.namespace("rebuild").await.unwrap().id;
    turns_closed(&srv.store, ns).await;
    let status = settled(&f.c, &f.ns).await;
    assert_counts(&srv.store, ns, &status).await;
    let before = snapshot(&srv.store, ns).await;
    assert!(before.segments.len() >= 2 && before.facts.len() >= 8, "{before:?}");
    let (config, store) = (srv.config.clone(), srv.store.clone());
    srv.stop().await;
    assert!(subjects_match_facts(&store, ns).await > 0);
    let lookups = tag_lookups_match(&store, ns).await;
    assert!(lookups.0 > 0 && lookups.1 > 0, "{lookups:?}");
    memex_recall::reset_namespace(store.pool(), ns).await.unwrap();
    assert_eq!(subjects_match_facts(&store, ns).await, 0, "the facts' subjects go with them");
    assert_eq!(tag_lookups_match(&store, ns).await, (0, 0), "the tag lookups go with their rows");
    let mut config = config;
    config.memory.events_per_job = 3;
    let srv = TestServer::restart(config, store.clone()).await;
    let c = srv.clients(Some(f.token.trim_start_matches("Bearer "))).await;
    turns_closed(&store, ns).await;
    let status = settled(&c, &f.ns).await;
    assert_counts(&store, ns, &status).await;
    assert_eq!(snapshot(&store, ns).await, before);
    assert!(subjects_match_facts(&store, ns).await > 0);
    assert_eq!(tag_lookups_match(&store, ns).await, lookups);
}

/// Checks that the tag lookups ExpandTopic reads by equality hold exactly what their tables say:
/// `memory_segment_tags` a row per tag of each segment (with its end, as the worker last rewrote
/// it), `memory_topic_aliases` a row per alias of each topic. Returns their sizes.
async fn tag_lookups_match(store: &memex_store::Store, ns: uuid::Uuid) -> (usize, usize) {
    type SegTag = (String, uuid::Uuid, uuid::Uuid, i64, chrono::DateTime<chrono::Utc>);
    let rows = |sql: &'static str| async move {
        sqlx::query_as::<_, SegTag>(sql).bind(ns).fetch_all(store.pool()).await.unwrap()
    };
    let listed = rows(
        "SELECT tag, segment_id, session_id, first_seq, end_time FROM memory_segment_tags
         WHERE namespace_id = $1 ORDER BY tag, segment_id",
    )
    .await;
    let segments = rows(
        "SELECT DISTINCT x.tag, s.id, s.session_id, s.first_seq, s.end_time FROM memory_segments s
         CROSS JOIN LATERAL unnest(s.tags) AS x(tag) WHERE s.namespace_id = $1 ORDER BY 1, 2",
    )
    .await;
    assert_eq!(listed, segments);
    let aliases = |sql: &'static str| async move {
        sqlx::query_as::<_, (String, String)>(sql).bind(ns).fetch_all(store.pool()).await.unwrap()
    };
    let listed_aliases =
        aliases("SELECT alias, tag FROM memory_topic_aliases WHERE namespace_id = $1 ORDER BY alias, tag").await;
    let topics = aliases(
        "SELECT DISTINCT x.alias, t.tag FROM memory_topics t CROSS JOIN LATERAL unnest(t.aliases) AS x(alias)
         WHERE t.namespace_id = $1 ORDER BY 1, 2",
    )
    .await;
    assert_eq!(listed_aliases, topics);
    (listed.len(), listed_aliases.len())
}

/// Checks that `memory_subjects` (what QueryFacts matches a subject against) holds exactly the
/// distinct subjects of the namespace's facts; returns how many.
async fn subjects_match_facts(store: &memex_store::Store, ns: uuid::Uuid) -> usize {
    let listed: Vec<String> =
        sqlx::query_scalar("SELECT subject FROM memory_subjects WHERE namespace_id = $1 ORDER BY subject")
            .bind(ns)
            .fetch_all(store.pool())
            .await
            .unwrap();
    let facts: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT subject FROM memory_facts WHERE namespace_id = $1 ORDER BY subject")
            .bind(ns)
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(listed, facts);
    listed.len()
}

/// Sessions read before the worker stored line maps get theirs when it is idle: after a restart
/// (the worker of a new version on an old memory), a session read to its end with no map is
/// compiled once and its map stored, without any reader asking.
#[tokio::test]
async fn an_idle_worker_stores_the_maps_of_sessions_read_without_them() {
    let Some(srv) = TestServer::start_with(memory_on).await else { return };
    let f = crate::fixture(&srv, "backfill").await;
    append(&f.c, &f.ns, &f.session, session_events()).await;
    settled(&f.c, &f.ns).await;
    let (ns, session) = (srv.store.namespace("backfill").await.unwrap().id, f.session.parse().unwrap());
    let (config, store) = (srv.config.clone(), srv.store.clone());
    srv.stop().await;
    sqlx::query("DELETE FROM view_line_maps WHERE namespace_id = $1").bind(ns).execute(store.pool()).await.unwrap();
    assert_eq!(store.line_map(ns, session).await.unwrap(), None);
    let srv = TestServer::restart(config, store.clone()).await;
    for _ in 0..500 {
        if let Some(map) = store.line_map(ns, session).await.unwrap() {
            assert_eq!(map.version, store.session(ns, session).await.unwrap().event_count);
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(srv);
    panic!("the idle worker stored no line map");
}

/// An idle worker reads every session only on news of an append (ADR: `memex_store::news`):
/// with its periodic look an hour away, an append is still read at once, announced by the
/// server's store to the worker's own over Postgres.
#[tokio::test]
async fn an_append_is_read_on_its_news_alone() {
    let Some(srv) = TestServer::start_with(|c| {
        memory_on(c);
        c.memory.idle_rescan_ms = 3_600_000;
    })
    .await
    else {
        return;
    };
    let f = crate::fixture(&srv, "news").await;
    let ns = srv.store.namespace("news").await.unwrap().id;
    let session: uuid::Uuid = f.session.parse().unwrap();
    let events = session_events();
    let (first, rest) = events.split_at(events.len() / 2);
    // Past the worker's first look and its listener's connection: the server's first append
    // must be announced too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    append(&f.c, &f.ns, &f.session, first.to_vec()).await;
    read_to(&srv.store, ns, session, first.len() as i64).await;
    // Past the worker's hot spell (settle 0, poll 20 ms): it now looks only on news.
    tokio::time::sleep(Duration::from_millis(500)).await;
    append(&f.c, &f.ns, &f.session, rest.to_vec()).await;
    read_to(&srv.store, ns, session, events.len() as i64).await;
}

/// A backlog larger than one round is read round after round, without waiting for the periodic
/// look: the hot spell after work starts when the round's jobs end (one session a round here,
/// each round longer than the hot spell of 40 ms, the periodic look an hour away). Before that
/// fix the worker stopped after the rounds the appends' news brought.
///
/// Other tests' servers share the database, and their workers claim sessions of every
/// namespace, up to 16 at once: one dropped at the end of its test holds what it claimed for its
/// lease (10 s under `memory_on`), and this worker, idle by then, has no news to look again.
/// So once, after 12 s without progress, an append to another session brings news; a worker
/// that needs it twice stops between rounds.
#[tokio::test]
async fn a_backlog_is_read_round_after_round_not_at_each_periodic_look() {
    let Some(srv) = TestServer::start_with(|c| {
        memory_on(c);
        c.memory.idle_rescan_ms = 3_600_000;
        c.memory.claim_sessions = 1;
        c.memory.jobs_in_flight = 1;
    })
    .await
    else {
        return;
    };
    let f = crate::fixture(&srv, "rounds").await;
    let ns = srv.store.namespace("rounds").await.unwrap().id;
    let mut sessions: Vec<uuid::Uuid> = vec![f.session.parse().unwrap()];
    for i in 0..5 {
        sessions.push(new_session(&f, &format!("agent-{i}")).await.parse().unwrap());
    }
    let poke = new_session(&f, "poke").await;
    let events = session_events();
    for s in &sessions {
        append(&f.c, &f.ns, &s.to_string(), events.clone()).await;
    }
    let (mut pokes, mut last, mut since) = (0, -1i64, std::time::Instant::now());
    loop {
        let read: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM memory_progress WHERE namespace_id = $1 AND session_id = ANY($2) AND fact_seq >= $3",
        )
        .bind(ns)
        .bind(&sessions)
        .bind(events.len() as i64)
        .fetch_one(srv.store.pool())
        .await
        .unwrap();
        if read == sessions.len() as i64 {
            break;
        }
        if read != last {
            (last, since) = (read, std::time::Instant::now());
        } else if since.elapsed() > Duration::from_secs(12) {
            assert!(pokes < 1, "{read} of {} sessions read: the worker stopped between rounds again", sessions.len());
            append(&f.c, &f.ns, &poke, events[..1].to_vec()).await;
            (pokes, since) = (pokes + 1, std::time::Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A backlog updates nearly every fact it writes, and its reads under a speaker's lock were slow
/// until the tables were vacuumed: the worker vacuums both once it has written
/// `vacuum_every_facts` facts rather than wait for autovacuum's first visit (a minute).
#[tokio::test]
async fn the_worker_vacuums_the_facts_it_wrote() {
    let Some(srv) = TestServer::start_with(|c| {
        memory_on(c);
        c.memory.vacuum_every_facts = 1;
    })
    .await
    else {
        return;
    };
    let vacuums = || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT COALESCE(min(vacuum_count), 0)::int8 FROM pg_stat_user_tables
             WHERE relname IN ('memory_facts', 'memory_fact_keywords')",
        )
        .fetch_one(srv.store.pool())
        .await
        .unwrap();
        n
    };
    let before = vacuums().await;
    let f = crate::fixture(&srv, "vacuum").await;
    append(&f.c, &f.ns, &f.session, session_events()).await;
    let ns = srv.store.namespace("vacuum").await.unwrap().id;
    read_to(&srv.store, ns, f.session.parse().unwrap(), session_events().len() as i64).await;
    // Cumulative statistics reach the view within a second or so of the vacuum.
    let mut after = before;
    for _ in 0..100 {
        after = vacuums().await;
        if after > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(after > before, "no vacuum of memory_facts and memory_fact_keywords after the worker wrote facts");
}

/// Waits until the memory worker has read the session up to `seq` (10 s at most).
async fn read_to(store: &memex_store::Store, ns: uuid::Uuid, session: uuid::Uuid, seq: i64) {
    for _ in 0..500 {
        let read: Option<i64> =
            sqlx::query_scalar("SELECT fact_seq FROM memory_progress WHERE namespace_id = $1 AND session_id = $2")
                .bind(ns)
                .bind(session)
                .fetch_optional(store.pool())
                .await
                .unwrap();
        if read.is_some_and(|r| r >= seq) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the memory worker did not read the session to seq {seq}");
}

/// With memory off, the reader tools say so.
#[tokio::test]
async fn memory_off_is_a_failed_precondition() {
    let Some(srv) = TestServer::start().await else { return };
    let f = crate::fixture(&srv, "off").await;
    let e =
        f.c.memory
            .clone()
            .list_topics(pb::ListTopicsRequest { namespace: f.ns.clone(), ..Default::default() })
            .await
            .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("memory.enabled") || e.message().contains("[memory] enabled"), "{}", e.message());
    let e =
        f.c.context
            .clone()
            .build_pack(pb::BuildPackRequest {
                namespace: f.ns.clone(),
                session_id: f.session.clone(),
                user_message: "hi".into(),
                budgets: Some(pb::Budgets { memory: Some(500), ..Default::default() }),
                ..Default::default()
            })
            .await
            .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("budgets.memory:"), "{}", e.message());
}

/// `e`, stamped with event time `t`.
fn at(t: chrono::DateTime<chrono::Utc>, e: pb::EventInput) -> pb::EventInput {
    pb::EventInput { event_time: Some(prost_types::Timestamp { seconds: t.timestamp(), nanos: 0 }), ..e }
}

/// Another session of the fixture's namespace.
async fn new_session(f: &crate::Fixture, agent: &str) -> String {
    f.c.sessions
        .clone()
        .create_session(pb::CreateSessionRequest {
            namespace: f.ns.clone(),
            agent_id: agent.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id
}

/// `QueryFacts` in the fixture's namespace.
async fn facts(f: &crate::Fixture, q: pb::QueryFactsRequest) -> Vec<pb::Fact> {
    f.c.memory
        .clone()
        .query_facts(pb::QueryFactsRequest { namespace: f.ns.clone(), ..q })
        .await
        .unwrap()
        .into_inner()
        .facts
}

/// A subject's chain is in time order whatever order its sessions are read in: a session that
/// happened between two others, or before them all, is linked in where it belongs (the worker
/// relinks only the stretch around the new facts).
#[tokio::test]
async fn a_chain_across_sessions_follows_time_not_arrival() {
    let Some(srv) = TestServer::start_with(memory_on).await else { return };
    let f = crate::fixture(&srv, "chain").await;
    let base = chrono::Utc::now() - chrono::Duration::hours(1);
    // Appended in this order; in time: D (5), A (10), C (20), B (30).
    let runs = [
        ("A", 10, "FAILED. 1 passed; 1 failed"),
        ("B", 30, "ok. 2 passed; 0 failed"),
        ("C", 20, "FAILED. 0 passed; 2 failed"),
        ("D", 5, "ok. 2 passed; 0 failed"),
    ];
    for (name, minute, outcome) in runs {
        let sid = if name == "A" { f.session.clone() } else { new_session(&f, &format!("agent-{name}")).await };
        let start = base + chrono::Duration::minutes(minute);
        let events: Vec<pb::EventInput> = vec![
            ev("user_message", "Run the tests."),
            call("t1", "Bash", r#"{"command":"cargo test"}"#),
            result("t1", &format!("test result: {outcome}")),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, e)| at(start + chrono::Duration::seconds(i as i64), e))
        .collect();
        append(&f.c, &f.ns, &sid, events).await;
        // Read one session at a time, in the order appended.
        settled(&f.c, &f.ns).await;
    }
    let cargo_test =
        pb::QueryFactsRequest { subject: "cargo test".into(), fact_type: "test".into(), ..Default::default() };
    let tests = facts(&f, pb::QueryFactsRequest { include_superseded: true, ..cargo_test.clone() }).await;
    assert_eq!(tests.len(), 4, "{tests:?}");
    let mut by_time = tests.clone();
    by_time.sort_by_key(|t| t.when.as_ref().map(|w| w.seconds));
    let verbs: Vec<&str> = by_time.iter().map(|t| t.verb.as_str()).collect();
    assert_eq!(verbs, ["passed", "failed", "failed", "passed"], "{by_time:?}");
    for w in by_time.windows(2) {
        assert_eq!(w[0].superseded_by, w[1].id, "{by_time:?}");
    }
    assert!(by_time[3].superseded_by.is_empty());
    // The latest state, as a reader asks for it, is B's pass.
    let current = facts(&f, cargo_test).await;
    assert_eq!(current.len(), 1, "{current:?}");
    assert_eq!(current[0].id, by_time[3].id);
}

/// A user's rule restated later in another session supersedes the earlier one; a rule that only
/// shares a word with it does not.
#[tokio::test]
async fn a_restated_rule_supersedes_the_earlier_one() {
    let Some(srv) = TestServer::start_with(memory_on).await else { return };
    let f = crate::fixture(&srv, "restate").await;
    let base = chrono::Utc::now() - chrono::Duration::hours(1);
    let said = [
        (10, "Never change the public API of the parser module."),
        (20, "Always run the linter before you commit."),
        (30, "Never change the public API of the parser module, not even for tests."),
    ];
    for (minute, text) in said {
        let sid = new_session(&f, &format!("agent-{minute}")).await;
        let t = base + chrono::Duration::minutes(minute);
        let events = vec![
            at(t, ev("user_message", text)),
            at(t + chrono::Duration::seconds(1), ev("assistant_message", "Understood.")),
        ];
        append(&f.c, &f.ns, &sid, events).await;
        settled(&f.c, &f.ns).await;
    }
    let rules = facts(
        &f,
        pb::QueryFactsRequest { fact_type: "constraint".into(), include_superseded: true, ..Default::default() },
    )
    .await;
    let find = |needle: &str, not: &str| {
        rules.iter().find(|x| x.what.contains(needle) && (not.is_empty() || !x.what.contains(not))).cloned()
    };
    let first = find("public API of the parser module.", "").expect("the first rule");
    let linter = find("linter", "").expect("the linter rule");
    let again = find("not even for tests", "").expect("the restated rule");
    assert_eq!(first.superseded_by, again.id, "{rules:?}");
    assert!(linter.superseded_by.is_empty() && again.superseded_by.is_empty(), "{rules:?}");
    // The keyword rows the candidates are read through (kept by triggers) are the facts' own,
    // supersession included.
    let ns = srv.store.namespace("restate").await.unwrap().id;
    let keyword_rows = |sql: &'static str| {
        sqlx::query_as::<_, (uuid::Uuid, String, Option<chrono::DateTime<chrono::Utc>>)>(sql)
            .bind(ns)
            .fetch_all(srv.store.pool())
    };
    let from_facts = keyword_rows(
        "SELECT DISTINCT id, k, superseded_at FROM memory_facts, unnest(keywords) k
         WHERE namespace_id = $1 AND fact_type NOT IN ('file', 'command', 'test', 'package', 'error') ORDER BY 1, 2",
    )
    .await
    .unwrap();
    let kept = keyword_rows(
        "SELECT fact_id, keyword, superseded_at FROM memory_fact_keywords WHERE namespace_id = $1 ORDER BY 1, 2",
    )
    .await
    .unwrap();
    assert!(kept.iter().any(|(id, _, at)| id.to_string() == first.id && at.is_some()), "{kept:?}");
    assert_eq!(kept, from_facts);
    // Deleting the facts (a rebuild, an erasure) takes their keyword rows with them.
    memex_recall::reset_namespace(srv.store.pool(), ns).await.unwrap();
    assert!(
        keyword_rows("SELECT fact_id, keyword, superseded_at FROM memory_fact_keywords WHERE namespace_id = $1")
            .await
            .unwrap()
            .is_empty()
    );
}

/// The worker's namespaces take turns: a namespace with a backlog of sessions (a bulk import)
/// does not hold back a session of another namespace that arrived after it.
#[tokio::test]
async fn namespaces_take_turns_for_the_memory_worker() {
    // Memory off: no worker claims meanwhile; the claim is called as the worker calls it.
    let Some(srv) = TestServer::start().await else { return };
    let big = crate::fixture(&srv, "turns-big").await;
    let mut sessions = vec![big.session.clone()];
    for i in 0..3 {
        sessions.push(new_session(&big, &format!("agent-{i}")).await);
    }
    for s in &sessions {
        append(&big.c, &big.ns, s, session_events()).await;
    }
    let small = crate::fixture(&srv, "turns-small").await;
    append(&small.c, &small.ns, &small.session, session_events()).await;
    let ids =
        [srv.store.namespace("turns-big").await.unwrap().id, srv.store.namespace("turns-small").await.unwrap().id];
    memex_recall::tables::register(srv.store.pool(), Some(&ids)).await.unwrap();
    let claimed =
        memex_recall::tables::claim(srv.store.pool(), "test", 60.0, 2, 0.0, (0.0, 2_000), Some(&ids)).await.unwrap();
    let got: std::collections::BTreeSet<uuid::Uuid> = claimed.iter().map(|c| c.namespace_id).collect();
    assert_eq!(got, ids.into_iter().collect(), "one session of each namespace, not two of the big one");
    // The rest of the big namespace's backlog comes next.
    let next =
        memex_recall::tables::claim(srv.store.pool(), "test", 60.0, 8, 0.0, (0.0, 2_000), Some(&ids)).await.unwrap();
    assert_eq!(next.len(), 3);
    assert!(next.iter().all(|c| c.namespace_id == ids[0]));
}

/// A live session is read in batches: its next job waits until its last one has settled, unless
/// a full job's events are waiting. Only registered sessions are claimed (the worker registers
/// new ones at most once per settle).
#[tokio::test]
async fn a_session_is_claimed_once_settled_or_a_full_job_waits() {
    // Memory off: no worker claims meanwhile; the claim is called as the worker calls it.
    let Some(srv) = TestServer::start().await else { return };
    let f = crate::fixture(&srv, "settle").await;
    append(&f.c, &f.ns, &f.session, session_events()).await;
    let waiting = session_events().len() as u32;
    let ids = [srv.store.namespace("settle").await.unwrap().id];
    let claim =
        |settle: (f64, u32)| memex_recall::tables::claim(srv.store.pool(), "test", 60.0, 8, 0.0, settle, Some(&ids));
    // Not registered yet: nothing to claim, however settled.
    assert!(claim((0.0, 1)).await.unwrap().is_empty(), "claimed a session never registered");
    memex_recall::tables::register(srv.store.pool(), Some(&ids)).await.unwrap();
    // Registered just now: not settled for an hour, and more than the waiting events make a job.
    assert!(claim((3_600.0, waiting + 1)).await.unwrap().is_empty(), "claimed before it settled");
    // A full job waits: claimed at once.
    let full = claim((3_600.0, waiting)).await.unwrap();
    assert_eq!(full.len(), 1);
    assert_eq!(full[0].head, u64::from(waiting));
    // Leased now; once the lease is given back, a settle of zero claims it again.
    memex_recall::tables::release(srv.store.pool(), ids[0], full[0].session_id, 0.0).await.unwrap();
    assert_eq!(claim((0.0, waiting + 1)).await.unwrap().len(), 1);
}
