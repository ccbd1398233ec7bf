use memex_event::EventKind;
use memex_pointer::{ArtifactPointer, ContextEvent, EventFlags, LineRange};
use memex_tokens::Tokenizer;
use proptest::prelude::*;
use uuid::Uuid;

use crate::*;

const SESSION: Uuid = Uuid::from_u128(0xabc);

fn ev(seq: u64, kind: EventKind, content: &str) -> ContextEvent {
    let tool = matches!(kind, EventKind::ToolCall).then(|| "Bash".to_owned());
    ContextEvent {
        id: Uuid::from_u128(1000 + seq as u128),
        session_id: SESSION,
        seq,
        kind,
        tool_name: tool,
        content: content.into(),
        artifact: None,
        task_id: None,
        task_state_version: None,
        time_ms: 0,
        flags: EventFlags::default(),
    }
}

fn window(events: Vec<ContextEvent>) -> Window {
    let t = Tokenizer::O200kBase;
    Window {
        events: events
            .into_iter()
            .map(|e| {
                let tokens = t.count(&e.content) + 8;
                let lines = LineRange::new(e.seq as u32 * 10, e.seq as u32 * 10 + 5);
                WindowEvent { event: e, tokens, lines }
            })
            .collect(),
        manifests: vec![],
    }
}

fn params(budget: usize) -> CompactionParams {
    CompactionParams {
        window_budget: budget,
        headroom: 100,
        protected_turns: 1,
        fixed_tokens: 50,
        manifest_max_tokens: 200,
    }
}

/// A small agent loop: system, user, then (call, result) steps, a decision, a correction.
fn trace() -> Vec<ContextEvent> {
    let mut v = vec![
        ev(1, EventKind::System, "You are a coding agent."),
        ev(2, EventKind::UserMessage, "Fix separability_matrix for nested models."),
    ];
    let mut seq = 3;
    for i in 0..6 {
        v.push(ev(seq, EventKind::ToolCall, &format!("grep -rn separability astropy/modeling/file_{i}.py")));
        let out = if i == 2 {
            "Traceback (most recent call last):\nModuleNotFoundError: No module named 'erfa'\n".repeat(3)
        } else {
            format!("astropy/modeling/file_{i}.py:{i}: def separability_matrix(transform):\n").repeat(20)
        };
        v.push(ev(seq + 1, EventKind::ToolResult, &out));
        seq += 2;
    }
    v.push(ev(seq, EventKind::Decision, "use _cstack with a copy of the right matrix"));
    v.push(ev(seq + 1, EventKind::UserMessage, "No, don't change the public API."));
    v.push(ev(seq + 2, EventKind::AssistantMessage, "Understood."));
    v
}

fn planned(c: Compaction) -> CompactionPlan {
    match c {
        Compaction::Planned(p) => *p,
        other => panic!("expected a plan, got {other:?}"),
    }
}

#[test]
fn evicts_tool_results_first_and_leaves_a_compact_manifest() {
    let w = window(trace());
    let t = Tokenizer::O200kBase;
    let total = w.tokens(50);
    let plan = planned(plan_compaction(&w, &params(total - 200), Uuid::from_u128(9), SESSION, Some(4), &t));
    // Only tool results went, oldest first.
    let kinds: Vec<EventKind> = plan
        .victims
        .iter()
        .map(|id| w.events.iter().find(|e| e.event.id == *id).map(|e| e.event.kind.clone()).expect("victim"))
        .collect();
    assert!(kinds.iter().all(|k| *k == EventKind::ToolResult), "{kinds:?}");
    assert_eq!(plan.victims[0], Uuid::from_u128(1004));
    assert!(plan.fits && plan.tokens_after <= plan.target);
    assert!(plan.manifest_tokens <= 200, "{}", plan.manifest_tokens);
    assert_eq!(plan.manifest.task_state_version, Some(4));
    assert!(plan.rendered.starts_with("[pointer manifest 00000000-0000-0000-0000-000000000009]"), "{}", plan.rendered);
    assert!(plan.rendered.contains("task state v4"), "{}", plan.rendered);
    // Deterministic.
    let again = planned(plan_compaction(&w, &params(total - 200), Uuid::from_u128(9), SESSION, Some(4), &t));
    assert_eq!(plan, again);
}

#[test]
fn the_manifest_names_anchors_hints_and_spans() {
    let w = window(trace());
    let t = Tokenizer::O200kBase;
    // Tight enough that everything evictable goes.
    let plan = planned(plan_compaction(&w, &params(300), Uuid::from_u128(9), SESSION, None, &t));
    let m = &plan.manifest;
    let seqs: Vec<u64> = m.spans.iter().flat_map(|s| s.seqs.first..=s.seqs.last).collect();
    // System (1) and the protected last turn (from the correction, seq 16) stay.
    assert_eq!(seqs, (2..=15).collect::<Vec<u64>>());
    assert_eq!(m.spans.len(), 1);
    assert_eq!(m.spans[0].lines, LineRange::new(20, 155));
    assert_eq!(m.evicted_events, 14);
    let kinds: Vec<AnchorKind> = m.anchors.iter().map(|a| a.kind).collect();
    assert_eq!(kinds, vec![AnchorKind::Decision, AnchorKind::Error]);
    assert_eq!(m.anchors[1].label, "ModuleNotFoundError: No module named 'erfa'");
    assert!(m.hints.errors.contains(&"ModuleNotFoundError: No module named 'erfa'".to_owned()));
    assert_eq!(m.hints.tools, vec!["Bash"]);
    assert!(m.hints.files.iter().any(|f| f.starts_with("astropy/modeling/file_")), "{:?}", m.hints.files);
    assert!(!plan.fits);
    assert!(plan.rendered.contains("anchors: decision @15"), "{}", plan.rendered);
}

#[test]
fn a_window_within_target_is_left_alone_and_protected_windows_say_so() {
    let w = window(trace());
    let t = Tokenizer::O200kBase;
    let total = w.tokens(50);
    assert_eq!(
        plan_compaction(&w, &params(total + 100), Uuid::nil(), SESSION, None, &t),
        Compaction::AlreadyFits { tokens: total, target: total }
    );
    let mut p = params(10);
    p.protected_turns = 100;
    assert!(matches!(plan_compaction(&w, &p, Uuid::nil(), SESSION, None, &t), Compaction::NothingEvictable { .. }));
}

#[test]
fn old_manifests_are_absorbed_when_events_are_not_enough() {
    let t = Tokenizer::O200kBase;
    let mut w = window(trace());
    let first = planned(plan_compaction(&w, &params(300), Uuid::from_u128(1), SESSION, None, &t));
    w.events.retain(|e| !first.victims.contains(&e.event.id));
    w.manifests.push(WindowManifest { manifest: first.manifest.clone(), tokens: first.manifest_tokens });
    // Pretend a second manifest exists too; nothing evictable remains, so both fold into one.
    let mut second = first.manifest.clone();
    second.id = Uuid::from_u128(2);
    w.manifests.push(WindowManifest { manifest: second, tokens: first.manifest_tokens });
    let plan = planned(plan_compaction(&w, &params(300), Uuid::from_u128(3), SESSION, None, &t));
    assert!(plan.victims.is_empty());
    assert_eq!(plan.manifest.absorbed, vec![Uuid::from_u128(1), Uuid::from_u128(2)]);
    assert_eq!(plan.manifest.spans, first.manifest.spans);
}

#[test]
fn artifacts_are_listed() {
    let mut events = trace();
    events[3].artifact = Some(ArtifactPointer { id: format!("blake3:{}", "ab".repeat(32)), size: 120_000 });
    let w = window(events);
    let t = Tokenizer::O200kBase;
    let plan = planned(plan_compaction(&w, &params(300), Uuid::nil(), SESSION, None, &t));
    assert_eq!(plan.manifest.artifacts.len(), 1);
    assert!(plan.rendered.contains("(120000 bytes)"), "{}", plan.rendered);
}

fn arb_kind() -> impl Strategy<Value = EventKind> {
    prop_oneof![
        Just(EventKind::System),
        Just(EventKind::UserMessage),
        Just(EventKind::AssistantMessage),
        Just(EventKind::Thinking),
        Just(EventKind::ToolCall),
        Just(EventKind::ToolResult),
        Just(EventKind::ToolError),
        Just(EventKind::Decision),
        Just(EventKind::Constraint),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever the window: system events and the protected tail stay; victims go in class order;
    /// the manifest names exactly the victims; the window fits whenever the evictable part allows.
    #[test]
    fn compaction_keeps_its_promises(
        spec in proptest::collection::vec((arb_kind(), "[a-z /._:]{0,200}"), 1..40),
        budget in 50usize..3000,
        protected in 0usize..4,
    ) {
        let t = Tokenizer::O200kBase;
        let events: Vec<ContextEvent> =
            spec.iter().enumerate().map(|(i, (k, c))| ev(i as u64 + 1, k.clone(), c)).collect();
        let w = window(events);
        let mut p = params(budget);
        p.protected_turns = protected;
        let tail = protected_from(&w.events, protected);
        match plan_compaction(&w, &p, Uuid::from_u128(5), SESSION, None, &t) {
            Compaction::AlreadyFits { tokens, target } => prop_assert!(tokens <= target),
            Compaction::NothingEvictable { tokens, target } => {
                prop_assert!(tokens > target);
                prop_assert!(w.events[..tail].iter().all(|e| e.event.kind == EventKind::System));
            }
            Compaction::Planned(plan) => {
                let victims: Vec<&WindowEvent> =
                    w.events.iter().filter(|e| plan.victims.contains(&e.event.id)).collect();
                prop_assert_eq!(victims.len(), plan.victims.len());
                for v in &victims {
                    prop_assert!(v.event.kind != EventKind::System);
                    let idx = w.events.iter().position(|e| e.event.id == v.event.id).unwrap_or(usize::MAX);
                    prop_assert!(idx < tail);
                }
                // Class order: if anything of class c went, every evictable event of a lower class went.
                let class = |k: &EventKind| match k {
                    EventKind::ToolResult | EventKind::ToolError => 0,
                    EventKind::ToolCall => 1,
                    _ => 2,
                };
                let max_class = victims.iter().map(|v| class(&v.event.kind)).max().unwrap_or(0);
                for e in &w.events[..tail] {
                    if e.event.kind != EventKind::System && class(&e.event.kind) < max_class {
                        prop_assert!(plan.victims.contains(&e.event.id));
                    }
                }
                // The manifest names exactly the victims.
                let named: Vec<u64> = plan.manifest.spans.iter().flat_map(|s| s.seqs.first..=s.seqs.last).collect();
                let mut seqs: Vec<u64> = victims.iter().map(|v| v.event.seq).collect();
                seqs.sort_unstable();
                prop_assert_eq!(named, seqs);
                // Accounting is exact.
                let left: usize = w.events.iter().filter(|e| !plan.victims.contains(&e.event.id)).map(|e| e.tokens).sum();
                prop_assert_eq!(plan.tokens_after, p.fixed_tokens + left + plan.manifest_tokens);
                prop_assert_eq!(plan.manifest_tokens, t.count(&plan.rendered));
                prop_assert!(plan.manifest_tokens <= p.manifest_max_tokens);
                // Fits whenever the protected part plus a manifest fits.
                let kept: usize = p.fixed_tokens
                    + w.events.iter().enumerate()
                        .filter(|(i, e)| *i >= tail || e.event.kind == EventKind::System)
                        .map(|(_, e)| e.tokens).sum::<usize>();
                if kept + p.manifest_max_tokens <= p.target() {
                    prop_assert!(plan.fits, "kept {} target {}", kept, p.target());
                }
            }
        }
    }
}
