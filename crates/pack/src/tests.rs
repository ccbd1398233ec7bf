use memex_event::EventKind;
use memex_pointer::{ContextEvent, EventFlags, LineRange, ViewBlock};
use memex_task::Phase;
use memex_tokens::Tokenizer;
use proptest::prelude::*;
use uuid::Uuid;

use crate::*;

const S1: Uuid = Uuid::from_u128(0x51);

fn ev(n: u128, kind: EventKind, content: &str) -> ContextEvent {
    let tool = matches!(kind, EventKind::ToolCall | EventKind::ToolResult).then(|| "Bash".to_owned());
    ContextEvent {
        id: Uuid::from_u128(1000 + n),
        session_id: S1,
        seq: n as u64,
        kind,
        tool_name: tool,
        content: content.into(),
        artifact: None,
        task_id: Some("t".into()),
        task_state_version: Some(1),
        time_ms: 1_000_000 + n as i64,
        flags: EventFlags::default(),
    }
}

fn is_evidence(b: BlockKind) -> bool {
    matches!(b, BlockKind::Retrieval | BlockKind::TurnRetrieval)
}

fn lexical(e: ContextEvent, s: f32) -> Candidate {
    Candidate::new(e, Sources { lexical: Some(s), ..Sources::default() })
}

fn task() -> TaskContext {
    TaskContext { task_id: Some("t".into()), phase: Phase::Execution, ..TaskContext::default() }
}

fn request(candidates: Vec<Candidate>) -> PackRequest {
    PackRequest {
        session_id: S1,
        system: "You are a careful coding agent.".into(),
        task_state: Some("## task state t v1 · phase execution\ngoals:\n- fix the bug\n".into()),
        task_ref: Some("t v1".into()),
        memory: String::new(),
        tail: vec![],
        user_message: "what was the checksum of the release tarball?".into(),
        candidates,
        terms: memex_rank::query_terms("what was the checksum of the release tarball?"),
        task: task(),
        budgets: Budgets::default(),
        params: PackParams::default(),
        required: vec![],
        layout: None,
    }
}

fn score_of(c: Candidate, t: &TaskContext) -> ScoreParts {
    score_all(&[c], t, &BaseWeights::default(), 3.6e6)[0]
}

#[test]
fn modifiers_follow_a3() {
    let t = task();
    let base = score_of(lexical(ev(1, EventKind::ToolResult, "x"), 1.0), &t);
    assert_eq!(base.task_binding, 1.0);
    assert_eq!(base.phase, 1.3);
    let mut sup = lexical(ev(1, EventKind::ToolResult, "x"), 1.0);
    sup.superseded = true;
    assert!((score_of(sup.clone(), &t).modifier - 0.13).abs() < 1e-9);
    let hist = TaskContext { historical: true, ..t.clone() };
    assert_eq!(score_of(sup, &hist).superseded, 1.0);
    let mut other = ev(1, EventKind::Decision, "x");
    other.task_id = Some("elsewhere".into());
    assert_eq!(score_of(lexical(other.clone(), 1.0), &t).score, 0.0);
    let related = TaskContext { related: vec![("elsewhere".into(), Relation::Child)], ..t.clone() };
    assert_eq!(score_of(lexical(other, 1.0), &related).task_binding, 1.0);
    // Constraints are floored at 3 even when everything else demotes them.
    let mut c = lexical(ev(2, EventKind::Constraint, "never touch the API"), 0.1);
    c.superseded = true;
    let p = score_of(c, &t);
    assert!(p.constraint_floor && p.modifier == CONSTRAINT_FLOOR);
    // Self-assessment doubles mistakes.
    let sa = TaskContext { self_assessment: true, ..t.clone() };
    assert_eq!(score_of(lexical(ev(3, EventKind::ToolError, "boom"), 1.0), &sa).self_assessment, 2.0);
    let mut lesson = ev(4, EventKind::Note, "lesson");
    lesson.flags.utility = vec!["lesson".into()];
    assert_eq!(score_of(lexical(lesson, 1.0), &sa).self_assessment, 2.0);
    // Premises that no longer hold demote.
    let mut pc = lexical(ev(5, EventKind::Note, "x"), 1.0);
    pc.premises = Some(vec!["python 3.8".into()]);
    let now = TaskContext { premises: vec!["python 3.12".into()], ..t };
    assert_eq!(score_of(pc, &now).premise, memex_task::PREMISE_FLOOR);
}

#[test]
fn planners_and_executors_see_different_things() {
    let decision = lexical(ev(1, EventKind::Decision, "use the v2 API"), 1.0);
    let log = lexical(ev(2, EventKind::ToolResult, "build log ..."), 1.0);
    let planner = TaskContext { role: AgentRole::Planner, phase: Phase::Planning, ..task() };
    let executor = TaskContext { role: AgentRole::Executor, phase: Phase::Execution, ..task() };
    assert!(score_of(decision.clone(), &planner).score > score_of(log.clone(), &planner).score * 3.0);
    assert!(score_of(log, &executor).score > score_of(decision, &executor).score);
}

#[test]
fn a_pack_has_every_block_and_a_decision_per_candidate() {
    let t = Tokenizer::O200kBase;
    let mut req = request(vec![
        lexical(ev(1, EventKind::ToolCall, "sha256sum dist/release-1.2.tar.gz"), 9.0),
        lexical(ev(2, EventKind::ToolResult, "9f86d081884c7d659a2feaa0c55ad015  dist/release-1.2.tar.gz"), 8.0),
        lexical(ev(3, EventKind::Thinking, "I should check the checksum"), 2.0),
        {
            let mut e = ev(4, EventKind::Decision, "ship release 1.2");
            e.task_id = Some("unrelated".into());
            lexical(e, 5.0)
        },
    ]);
    req.tail = vec![
        TailEntry::Manifest { id: Uuid::nil(), position: 9, text: "[pointer manifest x] 3 events evicted".into() },
        TailEntry::Event { event: ev(9, EventKind::AssistantMessage, "Let me look."), view: None },
    ];
    let pack = build_pack(&req, &t).expect("pack");
    assert_eq!(pack.tokens, t.count(&pack.text));
    assert!(pack.text.contains("9f86d081884c7d659a2feaa0c55ad015"));
    assert!(pack.text.starts_with("## system\nYou are a careful coding agent.\n\n## task state t v1"), "{}", pack.text);
    assert!(pack.text.contains("## recent turns\nsessions: s1=00000000-0000-0000-0000-000000000051\n\n[pointer manifest x] 3 events evicted\n\n(s1@9) [assistant_message]\nLet me look.\n"), "{}", pack.text);
    assert!(pack.text.ends_with("## user\nwhat was the checksum of the release tarball?\n"));
    assert_eq!(pack.decisions.len(), 4);
    let unrelated = pack.decisions.iter().find(|d| d.seq == 4).expect("decision");
    assert_eq!(unrelated.outcome, Outcome::Excluded(Exclusion::ZeroScore));
    let retrieved: Vec<u64> = pack.items.iter().filter(|i| is_evidence(i.block)).map(|i| i.seq).collect();
    assert_eq!(retrieved, vec![1, 2, 3]);
    assert_eq!(pack.items.iter().filter(|i| i.block == BlockKind::Tail).count(), 1);
    // Same request, same pack.
    assert_eq!(build_pack(&req, &t).expect("pack"), pack);
}

#[test]
fn bad_requests_are_refused_not_overflowed() {
    let t = Tokenizer::O200kBase;
    let mut req = request(vec![]);
    req.budgets.context = 1000;
    assert!(matches!(build_pack(&req, &t), Err(PackError::Budgets { .. })));
    let mut req = request(vec![]);
    req.budgets.user = 3;
    assert!(matches!(build_pack(&req, &t), Err(PackError::UserMessage { .. })));
}

#[test]
fn quotas_and_budgets_are_recorded() {
    let t = Tokenizer::O200kBase;
    let logs: Vec<Candidate> = (0..30)
        .map(|i| {
            lexical(
                ev(i, EventKind::ToolResult, &format!("checksum line {i} tarball release {}", "x ".repeat(200))),
                5.0,
            )
        })
        .collect();
    let mut req = request(logs);
    req.budgets.retrieval = 1000;
    let pack = build_pack(&req, &t).expect("pack");
    let evidence: usize = pack.blocks.iter().filter(|b| is_evidence(b.kind)).map(|b| b.tokens).sum();
    assert!(evidence <= 1000);
    let tool_tokens: usize = pack.items.iter().filter(|i| is_evidence(i.block)).map(|i| i.tokens).sum();
    assert!(tool_tokens <= 600, "{tool_tokens}");
    assert!(pack.decisions.iter().any(|d| matches!(d.outcome, Outcome::Excluded(Exclusion::Quota { .. }))));
}

#[test]
fn full_view_lines_are_cited() {
    let t = Tokenizer::O200kBase;
    let mut c = lexical(ev(1, EventKind::ToolResult, "checksum ok"), 1.0);
    c.view = Some(ViewBlock {
        range: LineRange { first: 41, last: 43 },
        lines: vec!["[tool] Bash".into(), "".into(), "checksum ok".into()].into(),
    });
    let pack = build_pack(&request(vec![c]), &t).expect("pack");
    assert!(pack.text.contains("(s1:41-43) [tool_result] Bash\n[tool] Bash\n\nchecksum ok\n"), "{}", pack.text);
    assert_eq!(pack.items[0].lines, LineRange::new(41, 43));
}

fn arb_kind() -> impl Strategy<Value = EventKind> {
    prop_oneof![
        Just(EventKind::UserMessage),
        Just(EventKind::AssistantMessage),
        Just(EventKind::Thinking),
        Just(EventKind::ToolCall),
        Just(EventKind::ToolResult),
        Just(EventKind::ToolError),
        Just(EventKind::Decision),
        Just(EventKind::Constraint),
        Just(EventKind::Report),
        Just(EventKind::Note),
    ]
}

fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,40}",
        proptest::collection::vec("[a-zA-Z0-9 ./_:()=-]{0,120}", 0..60).prop_map(|l| l.join("\n")),
        "\\PC{0,400}",
        "(checksum|tarball|release|error|\n| ){0,300}",
    ]
}

prop_compose! {
    fn arb_candidate()(
        n in 0u128..60,
        kind in arb_kind(),
        text in arb_text(),
        session in 0u128..3,
        task in prop_oneof![Just(Some("t")), Just(Some("child")), Just(Some("x")), Just(None)],
        lex in proptest::option::of(0.0f32..20.0),
        vec in proptest::option::of(-1.0f32..1.0),
        pinned in any::<bool>(),
        superseded in any::<bool>(),
        with_view in any::<bool>(),
    ) -> Candidate {
        let mut e = ev(n, kind, &text);
        e.session_id = Uuid::from_u128(0x51 + session);
        e.task_id = task.map(str::to_owned);
        let mut c = Candidate::new(e, Sources { lexical: lex, vector: vec, pinned, ..Sources::default() });
        c.superseded = superseded;
        if with_view {
            let lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let last = 10 + lines.len() as u32;
            c.view = Some(ViewBlock { range: LineRange { first: 10, last }, lines: lines.into() });
        }
        c
    }
}

prop_compose! {
    fn arb_budgets()(
        system in 0usize..300, task_state in 0usize..300, tail in 0usize..1500,
        retrieval in 0usize..3000, user in 20usize..200, headroom in 0usize..500, slack in 0usize..50,
        memory in prop_oneof![Just(0usize), 0usize..400],
    ) -> Budgets {
        let context = system + task_state + memory + tail + retrieval + user + headroom + slack;
        Budgets { context, system, task_state, tail, retrieval, user, headroom, memory }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The budget invariant: whatever the candidates, tail and budgets, every block is within its
    /// budget and the pack within context − headroom, by exact count of the returned text; every
    /// candidate gets exactly one decision; the same request gives the same pack.
    #[test]
    fn the_pack_never_exceeds_its_budget(
        candidates in proptest::collection::vec(arb_candidate(), 0..40),
        tail in proptest::collection::vec((arb_kind(), arb_text()), 0..12),
        budgets in arb_budgets(),
        system in arb_text(),
        card in arb_text(),
        memory in arb_text(),
        user in "[a-z ?]{0,60}",
        role in prop_oneof![Just(AgentRole::Solo), Just(AgentRole::Planner), Just(AgentRole::Executor)],
        cl100k in any::<bool>(),
    ) {
        let t = if cl100k { Tokenizer::Cl100kBase } else { Tokenizer::O200kBase };
        let req = PackRequest {
            session_id: S1,
            system,
            task_state: (!card.is_empty()).then_some(card),
            task_ref: Some("t v3".into()),
            memory,
            tail: tail.iter().enumerate().map(|(i, (k, c))| TailEntry::Event { event: ev(100 + i as u128, k.clone(), c), view: None }).collect(),
            user_message: user.clone(),
            terms: memex_rank::query_terms(&user),
            candidates: candidates.clone(),
            task: TaskContext { role, related: vec![("child".into(), Relation::Child)], ..task() },
            budgets,
            params: PackParams::default(),
            required: vec![],
            layout: None,
        };
        match build_pack(&req, &t) {
            Err(PackError::UserMessage { .. }) => { let u = format!("## user\n{user}\n"); prop_assert!(t.count(&u) > budgets.user) },
            Err(e) => prop_assert!(false, "unexpected error {e}"),
            Ok(pack) => {
                prop_assert_eq!(pack.tokens, t.count(&pack.text));
                prop_assert!(pack.tokens + budgets.headroom <= budgets.context, "{} + {} > {}", pack.tokens, budgets.headroom, budgets.context);
                for b in &pack.blocks {
                    prop_assert_eq!(b.tokens, t.count(&b.text));
                    prop_assert!(b.tokens <= b.budget, "{:?}: {} > {}", b.kind, b.tokens, b.budget);
                }
                let mut ids: Vec<Uuid> = candidates.iter().map(|c| c.event.id).collect();
                ids.sort();
                ids.dedup();
                prop_assert_eq!(pack.decisions.len(), ids.len());
                let included = pack.decisions.iter().filter(|d| matches!(d.outcome, Outcome::Included { .. })).count();
                prop_assert_eq!(included, pack.items.iter().filter(|i| is_evidence(i.block)).count());
                let evidence: usize = pack.blocks.iter().filter(|b| is_evidence(b.kind)).map(|b| b.tokens).sum();
                prop_assert!(evidence <= budgets.retrieval, "{} > {}", evidence, budgets.retrieval);
                // Built again after itself (its layout kept), the pack is the same.
                let again = PackRequest { layout: pack.layout.clone(), ..req.clone() };
                let second = build_pack(&again, &t).expect("the same request builds");
                prop_assert_eq!(&second.text, &pack.text);
                prop_assert_eq!(&second.items, &pack.items);
                for item in pack.items.iter().filter(|i| is_evidence(i.block)) {
                    prop_assert!(ids.contains(&item.event_id));
                }
                prop_assert_eq!(build_pack(&req, &t).ok(), Some(pack));
            }
        }
    }
}

#[test]
fn a_block_that_does_not_fit_is_listed_or_refused_when_required() {
    let t = Tokenizer::O200kBase;
    let mut req = request(vec![]);
    let card =
        format!("## task state t v1 · phase execution\ngoals:\n{}", "- keep every public API stable\n".repeat(40));
    req.task_state = Some(card.clone());
    let whole = t.count(&card);
    // Room for a cut with its marker: cut, and said so.
    req.budgets.task_state = 60;
    let pack = build_pack(&req, &t).expect("pack");
    assert_eq!(pack.omitted, vec![Omission { block: BlockKind::TaskState, dropped: false, tokens: whole, budget: 60 }]);
    assert!(pack.text.contains("GetTaskState t v1 has all of it"), "{}", pack.text);
    // No room even for the marker: left out, and said so.
    req.budgets.task_state = 5;
    let pack = build_pack(&req, &t).expect("pack");
    assert_eq!(pack.omitted, vec![Omission { block: BlockKind::TaskState, dropped: true, tokens: whole, budget: 5 }]);
    assert!(!pack.text.contains("task state"), "{}", pack.text);
    // Required: refused, naming the block, what it needs and its budget.
    req.required = vec![BlockKind::TaskState];
    let err = build_pack(&req, &t).expect_err("required block over budget");
    assert_eq!(err, PackError::Required { block: BlockKind::TaskState, tokens: whole, budget: 5 });
    assert!(err.to_string().contains("budgets.task_state = 5"), "{err}");
    // Whole: nothing omitted, and requiring it is no obstacle.
    req.budgets.task_state = 800;
    let pack = build_pack(&req, &t).expect("pack");
    assert!(pack.omitted.is_empty());
    assert!(pack.text.contains("- keep every public API stable"));
}

#[test]
fn a_large_output_shows_the_part_of_its_artifact_that_matched() {
    let t = Tokenizer::O200kBase;
    let mut e = ev(7, EventKind::ToolResult, "collected 900 items\n…\n[output truncated]\n= 1 failed, 899 passed =\n");
    e.artifact = Some(memex_pointer::ArtifactPointer { id: "blake3:ab".into(), size: 120_000 });
    let mut c = lexical(e, 9.0);
    c.artifact_match = Some(ArtifactMatch {
        first_line: 4410,
        last_line: 4412,
        text: "tests/test_io.py::test_roundtrip PASSED\ntests/test_io.py::test_checksum FAILED\nE   AssertionError: checksum mismatch\n".into(),
    });
    let mut req = request(vec![c]);
    req.tail = vec![TailEntry::Event { event: ev(9, EventKind::AssistantMessage, "Let me look."), view: None }];
    req.user_message = "why did test_checksum fail?".into();
    req.terms = memex_rank::query_terms(&req.user_message);
    let pack = build_pack(&req, &t).expect("pack");
    assert!(
        pack.text.contains("(s1@7) [tool_result] Bash (excerpt; full output 120000 bytes in artifact blake3:ab) matched in artifact lines a4411-a4413\na4411: tests/test_io.py::test_roundtrip PASSED\na4412: tests/test_io.py::test_checksum FAILED\na4413: E   AssertionError: checksum mismatch\n"),
        "{}",
        pack.text
    );
    assert!(!pack.text.contains("collected 900 items"), "the head is not what matched: {}", pack.text);
    let item = pack.items.iter().find(|i| i.seq == 7).expect("item");
    assert_eq!(item.artifact_lines, Some([4411, 4413]));
    assert!(item.excerpt);
    // Kept as stable evidence, it shows the same lines next turn, though this turn's search did
    // not match that chunk (its event is a candidate only because the layout keeps it).
    let mut next = req.clone();
    next.layout = pack.layout.clone();
    next.candidates[0].artifact_match = None;
    next.candidates[0].sources = Sources::default();
    next.user_message = "and what else?".into();
    let again = build_pack(&next, &t).expect("pack");
    assert!(again.text.contains("a4412: tests/test_io.py::test_checksum FAILED"), "{}", again.text);
    assert_eq!(again.items.iter().find(|i| i.seq == 7).and_then(|i| i.artifact_lines), Some([4411, 4413]));
}

/// An agent loop: each turn appends an event and asks something new. While the tail stays
/// anchored, turn N+1's pack starts with turn N's, through the end of its tail (the stable
/// evidence kept byte for byte); when the tail outgrows its budget, it is laid out afresh at
/// `tail_refill` of it, and anchored again from there.
#[test]
fn consecutive_turns_share_their_prefix_through_the_tail() {
    let t = Tokenizer::O200kBase;
    let topics = ["checksum", "traceback", "grep", "patch", "import", "pytest", "separability", "release"];
    let pool: Vec<ContextEvent> = (0..40u128)
        .map(|i| {
            let topic = topics[i as usize % topics.len()];
            ev(i, EventKind::ToolResult, &format!("{topic} output {i}: {}\n", "line of tool output ".repeat(8)))
        })
        .collect();
    let mut window: Vec<TailEntry> = (100..110u128)
        .map(|i| TailEntry::Event {
            event: ev(i, EventKind::AssistantMessage, &format!("step {i}: working")),
            view: None,
        })
        .collect();
    let (mut prev, mut anchored, mut rebased) = (None::<RetrievalPack>, 0, 0);
    for turn in 0..80u128 {
        window.push(TailEntry::Event {
            event: ev(
                200 + turn,
                EventKind::AssistantMessage,
                &format!("turn {turn}: next I look at {}", topics[turn as usize % 8]),
            ),
            view: None,
        });
        // Each turn's search ranks the pool its own way.
        let candidates: Vec<Candidate> = pool
            .iter()
            .enumerate()
            .map(|(i, e)| lexical(e.clone(), ((i as u128 * 7 + turn * 13) % 23) as f32 + 1.0))
            .collect();
        let mut req = request(candidates);
        req.user_message = format!("what did the {} step show?", topics[turn as usize % 8]);
        req.terms = memex_rank::query_terms(&req.user_message);
        req.tail = window.clone();
        req.budgets.tail = 400;
        req.budgets.retrieval = 600;
        req.layout = prev.as_ref().and_then(|p| p.layout.clone());
        let pack = build_pack(&req, &t).expect("pack");
        assert!(pack.tokens + req.budgets.headroom <= req.budgets.context);
        if let Some(p) = &prev {
            let (was, now) = (p.layout.as_ref().expect("layout"), pack.layout.as_ref().expect("layout"));
            if was.tail_from == now.tail_from {
                anchored += 1;
                let upto = p.blocks.iter().position(|b| b.kind == BlockKind::Tail).expect("tail block");
                let prefix = RetrievalPack::joined(&p.blocks[..=upto]);
                assert!(pack.text.starts_with(&prefix), "turn {turn}: the prefix through the tail changed");
                assert_eq!(now.stable, was.stable, "turn {turn}: the stable evidence moved");
            } else {
                rebased += 1;
                let tail = pack.blocks.iter().find(|b| b.kind == BlockKind::Tail).expect("tail block");
                assert!(tail.tokens <= (400.0 * PackParams::default().tail_refill) as usize + 16, "{}", tail.tokens);
            }
        }
        prev = Some(pack);
    }
    // Each turn adds ~15 tokens; the tail re-bases every ~10 turns, no more.
    assert!(rebased >= 3 && anchored >= 5 * rebased, "anchored {anchored}, rebased {rebased}");
}
