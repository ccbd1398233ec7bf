use chrono::{TimeZone, Utc};
use memex_memory::{FactExtractor, MemEvent, SeqSpan};
use memex_pointer::{LineRange, ViewLines};
use memex_tokens::Tokenizer;
use proptest::prelude::*;
use uuid::Uuid;

use crate::*;

fn ev(seq: u64, kind: &str, content: &str) -> MemEvent {
    MemEvent {
        seq,
        kind: kind.into(),
        content: content.into(),
        tool_name: None,
        tool_call_id: None,
        agent_id: "agent".into(),
        time: Utc.timestamp_opt(1_700_000_000 + seq as i64, 0).single().expect("a time"),
        after_quiet: false,
    }
}

fn call(seq: u64, tool: &str, input: &str, id: &str) -> MemEvent {
    let mut e = ev(seq, "tool_call", input);
    e.tool_name = Some(tool.into());
    e.tool_call_id = Some(id.into());
    e
}

fn result(seq: u64, output: &str, id: &str) -> MemEvent {
    let mut e = ev(seq, "tool_result", output);
    e.tool_call_id = Some(id.into());
    e
}

/// A short coding session: a request, an edit, a failing test run, a user's correction, a fix,
/// a passing run, then a build that fails and stays failed.
fn session() -> Vec<MemEvent> {
    vec![
        ev(1, "user_message", "Fix the rounding bug in billing/invoice.py; totals are off by a cent."),
        ev(2, "assistant_message", "Let me look at the invoice code."),
        call(3, "Read", r#"{"file_path":"billing/invoice.py"}"#, "c1"),
        result(4, "def total(items):\n    return round(sum(items), 1)", "c1"),
        call(5, "Edit", r#"{"file_path":"billing/invoice.py","old_string":"1)","new_string":"2)"}"#, "c2"),
        result(6, "The file billing/invoice.py has been updated.", "c2"),
        call(7, "Bash", r#"{"command":"pytest tests/test_invoice.py"}"#, "c3"),
        result(
            8,
            "FAILED tests/test_invoice.py::test_total - AssertionError: assert 10.01 == 10.0\n1 failed, 3 passed in 0.12s",
            "c3",
        ),
        ev(9, "user_message", "No, don't change the tests. Use Decimal for money instead of floats."),
        ev(10, "assistant_message", "Switching the totals to Decimal."),
        call(11, "Edit", r#"{"file_path":"billing/invoice.py","old_string":"round","new_string":"Decimal"}"#, "c4"),
        result(12, "The file billing/invoice.py has been updated.", "c4"),
        call(13, "Bash", r#"{"command":"pytest tests/test_invoice.py"}"#, "c5"),
        result(14, "4 passed in 0.10s", "c5"),
        call(15, "Bash", r#"{"command":"make build"}"#, "c6"),
        result(16, "error: linker `cc` not found\nmake: *** [build] Error 1\nexit code: 2", "c6"),
        ev(17, "assistant_message", "Next I will install the C toolchain and build again."),
    ]
}

fn facts(events: &[MemEvent]) -> Vec<memex_memory::Fact> {
    let mut x = FactExtractor::default();
    events.iter().flat_map(|e| x.push(e)).collect()
}

fn snapshot(events: &[MemEvent], budget: usize, format: Format) -> Snapshot {
    let facts = facts(events);
    let requests: Vec<MemEvent> = events.iter().filter(|e| e.kind == "user_message").cloned().collect();
    let input = Input { task: None, requests: &requests, facts: &facts, recent: events, head: 17 };
    let entries = entries(&input, &Options::default());
    // Every event on two lines of its own, so the pointers are checkable.
    let cites = |s: SeqSpan| {
        Some(ViewLines { chain: 1, range: LineRange { first: 2 * s.first as u32, last: 2 * s.last as u32 + 1 } })
    };
    render(Uuid::nil(), None, entries, &cites, format, budget, &Tokenizer::O200kBase)
}

#[test]
fn a_snapshot_states_goal_knowledge_files_errors_and_plan_with_pointers() {
    let s = snapshot(&session(), 4_000, Format::Xml);
    let t = &s.text;
    assert!(t.starts_with("<state_snapshot>\nsessions: s1=00000000-0000-0000-0000-000000000000\n"), "{t}");
    assert!(t.ends_with("</state_snapshot>\n"), "{t}");
    // The requests, verbatim, the latest last.
    assert!(
        t.contains("- [request] (s1:2-3) Fix the rounding bug in billing/invoice.py; totals are off by a cent."),
        "{t}"
    );
    assert!(t.contains("- [latest request] (s1:18-19) No, don't change the tests."), "{t}");
    // The correction, verbatim, in key knowledge.
    let knowledge = section(t, "active_constraints");
    assert!(knowledge.contains("[correction]") && knowledge.contains("Use Decimal for money"), "{knowledge}");
    // Said once: the constraint read from the same message is part of the correction.
    assert!(!knowledge.contains("[constraint]"), "{knowledge}");
    // The file's latest state cites its last change (seqs 11–12).
    let files = section(t, "file_system_state");
    assert!(files.contains("(s1:22-25) billing/invoice.py: modified (2 changes)"), "{files}");
    // The build's error verbatim and unresolved; the test failure resolved by the later pass.
    let errors = section(t, "errors");
    assert!(errors.contains("[unresolved]") && errors.contains("error: linker `cc` not found"), "{errors}");
    let plan = section(t, "task_state");
    assert!(plan.contains("[failed attempt]") && plan.contains("`make build` failed"), "{plan}");
    assert!(plan.contains("[done]") && plan.contains("`pytest tests/test_invoice.py` passed"), "{plan}");
    assert!(plan.contains("(after 1 failed attempt)"), "{plan}");
    assert!(plan.contains("[next] (s1:34-35) Next I will install the C toolchain"), "{plan}");
    // The test the first run named as failed passed with the suite's later run.
    assert!(plan.contains("[done] (s1:14-17) Test tests/test_invoice.py::test_total failed"), "{plan}");
    assert_eq!(plan.matches("[failed attempt]").count(), 1, "{plan}");
    let actions = section(t, "recent_actions");
    assert!(actions.contains("Bash: make build → failed (exit 2)"), "{actions}");
    assert!(s.omitted.is_empty());
    assert_eq!(s.tokens, Tokenizer::O200kBase.count(t));
}

fn section<'a>(text: &'a str, name: &str) -> &'a str {
    let open = format!("<{name}>\n");
    let close = format!("</{name}>");
    let from = text.find(&open).map(|i| i + open.len()).unwrap_or(text.len());
    let to = text[from..].find(&close).map(|i| from + i).unwrap_or(text.len());
    &text[from..to]
}

#[test]
fn the_same_input_gives_the_same_bytes_in_both_layouts() {
    for format in [Format::Xml, Format::Markdown] {
        let a = snapshot(&session(), 600, format);
        let b = snapshot(&session(), 600, format);
        assert_eq!(a, b);
    }
    let md = snapshot(&session(), 4_000, Format::Markdown).text;
    assert!(md.starts_with("# State snapshot\n") && md.contains("## File-system state\n"), "{md}");
}

#[test]
fn a_short_budget_drops_the_tail_first_and_keeps_corrections_and_unresolved_errors() {
    let full = snapshot(&session(), 4_000, Format::Xml);
    let short = snapshot(&session(), 260, Format::Xml);
    assert!(short.tokens <= 260 && full.tokens > 260, "{} {}", short.tokens, full.tokens);
    assert!(!short.omitted.is_empty());
    assert!(short.omitted.iter().any(|s| s.entry.section == Section::RecentRounds));
    assert!(short.text.contains("Use Decimal for money"), "{}", short.text);
    assert!(short.text.contains("error: linker `cc` not found"), "{}", short.text);
    assert!(short.text.contains("<omitted>\nLeft out for the token budget"), "{}", short.text);
    // Whatever went, nothing more important stayed behind in its place.
    let worst_kept = short.shown.iter().map(|s| s.entry.priority).min();
    let best_dropped = short.omitted.iter().map(|s| s.entry.priority).max();
    assert!(best_dropped <= worst_kept, "{best_dropped:?} > {worst_kept:?}");
}

#[test]
fn the_task_state_leads_when_there_is_one() {
    let events = session();
    let facts = facts(&events);
    let task = TaskCard {
        task_id: "T-7".into(),
        version: 3,
        state: memex_task::TaskState {
            goals: vec!["Ship exact billing totals".into()],
            constraints: vec!["No float money".into()],
            open_loops: vec!["CI is red on the linker".into()],
            next_actions: vec!["Install build-essential".into()],
            ..Default::default()
        },
    };
    let input = Input { task: Some(&task), requests: &events[..0], facts: &facts, recent: &events, head: 17 };
    let s = render(
        Uuid::nil(),
        Some(("T-7", 3)),
        entries(&input, &Options::default()),
        &|_| None,
        Format::Xml,
        4_000,
        &Tokenizer::O200kBase,
    );
    assert!(s.text.contains("<overall_goal>\n- (task T-7 v3) Ship exact billing totals\n"), "{}", s.text);
    assert!(s.text.contains("- [pending] (task T-7 v3) CI is red on the linker\n"), "{}", s.text);
    assert!(s.text.contains("- [next] (task T-7 v3) Install build-essential\n"), "{}", s.text);
    // Without full-view lines, events are cited by seq.
    assert!(s.text.contains("(s1@15-16)"), "{}", s.text);
}

#[test]
fn long_requests_are_cut_in_the_middle_with_a_marker() {
    let long = format!("start {} end", "word ".repeat(2_000));
    let cut = cut_middle(&long, 300);
    assert!(cut.starts_with("start ") && cut.ends_with(" end") && cut.contains("characters cut"), "{cut}");
    assert!(cut.chars().count() < 340);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// The budget holds exactly, everything is either shown or listed as omitted, and what is
    /// dropped never outranks what is kept.
    #[test]
    fn the_budget_holds_for_any_cut_and_budget(cut in 1usize..=17, budget in MIN_BUDGET..2_000usize, md in any::<bool>()) {
        let events: Vec<MemEvent> = session().into_iter().take(cut).collect();
        let format = if md { Format::Markdown } else { Format::Xml };
        let facts = facts(&events);
        let input = Input { task: None, requests: &events, facts: &facts, recent: &events, head: cut as u64 };
        let all = entries(&input, &Options::default());
        let n = all.len();
        let s = render(Uuid::nil(), None, all, &|_| None, format, budget, &Tokenizer::O200kBase);
        prop_assert!(s.tokens <= budget, "{} > {budget}", s.tokens);
        prop_assert_eq!(s.tokens, Tokenizer::O200kBase.count(&s.text));
        prop_assert_eq!(s.shown.len() + s.omitted.len(), n);
        let worst_kept = s.shown.iter().map(|x| x.entry.priority).min();
        let best_dropped = s.omitted.iter().map(|x| x.entry.priority).max();
        if let (Some(k), Some(d)) = (worst_kept, best_dropped) {
            prop_assert!(d <= k);
        }
    }
}

#[test]
fn the_last_failure_is_shown_verbatim_when_memory_kept_an_earlier_error_of_its_kind() {
    let events = vec![
        ev(1, "user_message", "Make the migration work."),
        call(2, "Bash", r#"{"command":"python manage.py migrate"}"#, "c1"),
        result(3, "app.errors.HeaderError: header 17 is invalid\nexit code: 1", "c1"),
        call(4, "Bash", r#"{"command":"python manage.py migrate"}"#, "c2"),
        result(5, "app.errors.HeaderError: header 42 is invalid\nexit code: 1", "c2"),
    ];
    let s = snapshot(&events, 4_000, Format::Xml);
    let errors = section(&s.text, "errors");
    assert!(
        errors
            .contains("[unresolved] (s1:4-7) Error from `python manage.py migrate`: app.errors.HeaderError: header 17"),
        "{}",
        s.text
    );
    assert!(
        errors.contains(
            "- [last failure] (s1:8-11) Bash: python manage.py migrate failed: app.errors.HeaderError: header 42 is invalid"
        ),
        "{errors}"
    );
}

#[test]
fn a_long_chat_keeps_its_first_and_latest_requests_and_drops_the_oldest_between() {
    let events: Vec<MemEvent> =
        (1..=1_500).map(|i| ev(i, "user_message", &format!("Request number {i}: please look at item {i}."))).collect();
    let input = Input { task: None, requests: &events, facts: &[], recent: &events[1_400..], head: 1_500 };
    let s = render(
        Uuid::nil(),
        None,
        entries(&input, &Options::default()),
        &|_| None,
        Format::Xml,
        1_000,
        &Tokenizer::O200kBase,
    );
    assert!(s.tokens <= 1_000);
    assert!(s.text.contains("Request number 1: ") && s.text.contains("Request number 1500: "), "{}", s.text);
    // The requests kept between them are the newest ones.
    let kept: Vec<u64> =
        s.shown.iter().filter(|x| x.entry.priority == Priority::EarlierRequest).map(|x| x.entry.order).collect();
    assert!(!kept.is_empty() && kept.iter().all(|&o| o > 1_400), "{kept:?}");
    assert!(s.text.contains("overall_goal"), "{}", s.text);
}
