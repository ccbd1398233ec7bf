//! From a session's facts and events to the snapshot's entries, each with the events it cites and
//! how much it matters. Nothing here is summarised: requests, constraints, corrections and error
//! lines are the source's words (long ones cut in the middle, with a marker).
use std::collections::BTreeMap;

use memex_memory::facts::call_summary;
use memex_memory::lines::outcome;
use memex_memory::turns::{is_injected_user_text, is_output as is_result};
use memex_memory::{Fact, FactType, MemEvent, SeqSpan};

use crate::model::{Entry, Input, Options, Priority, Section, Source};

/// Longest one-line text of a fact or action (characters).
const MAX_LINE: usize = 400;

/// Every entry the snapshot could show, in section order, then by `order`.
pub fn entries(input: &Input<'_>, options: &Options) -> Vec<Entry> {
    let mut out = Vec::new();
    goal(input, options, &mut out);
    knowledge(input, &mut out);
    files(input, &mut out);
    errors(input, &mut out);
    recent_actions(input, options, &mut out);
    plan(input, &mut out);
    tail(input, options, &mut out);
    out.sort_by(|a, b| (a.section, a.order, &a.text).cmp(&(b.section, b.order, &b.text)));
    out
}

fn entry(section: Section, label: &'static str, text: String, span: SeqSpan, priority: Priority) -> Entry {
    Entry { section, label, text, source: Source::Events(span), priority, order: span.last }
}

fn task_entry(section: Section, label: &'static str, text: &str, priority: Priority, line: usize) -> Entry {
    Entry { section, label, text: one_line(text, MAX_LINE), source: Source::Task, priority, order: line as u64 }
}

/// The task's goals, else the user's requests: the first (the overall goal) and the latest
/// matter most; the ones between go first when the budget is short.
fn goal(input: &Input<'_>, options: &Options, out: &mut Vec<Entry>) {
    if let Some(task) = input.task.filter(|t| !t.state.goals.is_empty()) {
        for (i, g) in task.state.goals.iter().enumerate() {
            out.push(task_entry(Section::OverallGoal, "", g, Priority::Goal, i));
        }
    }
    let requests: Vec<&MemEvent> = input.requests.iter().filter(|e| !is_injected_user_text(&e.content)).collect();
    let n = requests.len();
    for (i, e) in requests.into_iter().enumerate() {
        let priority = if i == 0 || i + 1 == n { Priority::Goal } else { Priority::EarlierRequest };
        let label = if i + 1 == n && n > 1 { "latest request" } else { "request" };
        out.push(entry(
            Section::OverallGoal,
            label,
            cut_middle(e.content.trim(), options.max_request_chars),
            SeqSpan::one(e.seq),
            priority,
        ));
    }
}

/// Constraints, preferences and corrections (active constraints), decisions, packages installed
/// and told facts (key knowledge), verbatim, each stated once (the latest statement of the same
/// words wins); and the task's constraints.
fn knowledge(input: &Input<'_>, out: &mut Vec<Entry>) {
    if let Some(task) = input.task {
        for (i, c) in task.state.constraints.iter().enumerate() {
            out.push(task_entry(Section::ActiveConstraints, "constraint", c, Priority::Goal, i));
        }
    }
    let mut latest: BTreeMap<(FactType, String), &Fact> = BTreeMap::new();
    for f in input.facts {
        let keep = matches!(
            f.fact_type,
            FactType::Constraint
                | FactType::Decision
                | FactType::Preference
                | FactType::Correction
                | FactType::Personal
                | FactType::Experience
                | FactType::World
        ) || (f.fact_type == FactType::Package && f.verb == "installed");
        if keep {
            latest.insert((f.fact_type, f.what.trim().to_owned()), f);
        }
    }
    // A message read as both a constraint and a correction: the statement that holds the
    // other says it once.
    let all: Vec<(FactType, String, SeqSpan)> = latest.iter().map(|((t, w), f)| (*t, w.clone(), f.span)).collect();
    latest.retain(|(t, what), f| {
        !all.iter().any(|(t2, w2, span)| {
            *span == f.span && (t2, w2) != (t, what) && w2.len() > what.len() && w2.contains(what.as_str())
        })
    });
    for ((t, what), f) in latest {
        let priority = match t {
            FactType::Correction => Priority::Critical,
            FactType::Constraint => Priority::Goal,
            FactType::Decision | FactType::Preference => Priority::Knowledge,
            _ => Priority::Settled,
        };
        let section = match t {
            FactType::Correction | FactType::Constraint | FactType::Preference => Section::ActiveConstraints,
            _ => Section::KeyKnowledge,
        };
        out.push(entry(section, t.name(), one_line(&what, MAX_LINE), f.span, priority));
    }
}

/// Each file's latest state and the last change's pointer; files only read, lower.
fn files(input: &Input<'_>, out: &mut Vec<Entry>) {
    struct State<'a> {
        last: &'a Fact,
        last_change: Option<&'a Fact>,
        created: bool,
        changes: usize,
    }
    let mut by_file: BTreeMap<String, State<'_>> = BTreeMap::new();
    for f in input.facts.iter().filter(|f| f.fact_type == FactType::File) {
        let s =
            by_file.entry(f.subject_key()).or_insert(State { last: f, last_change: None, created: false, changes: 0 });
        s.last = f;
        if f.verb != "read" {
            s.last_change = Some(f);
            s.changes += 1;
            s.created |= f.verb == "created";
        }
    }
    for s in by_file.values() {
        let path = &s.last.subject;
        match s.last_change {
            Some(c) => {
                let state = match c.verb.as_str() {
                    "deleted" => "deleted",
                    "created" => "created",
                    _ if s.created => "created, then modified",
                    _ => "modified",
                };
                let times = if s.changes > 1 { format!(" ({} changes)", s.changes) } else { String::new() };
                out.push(entry(
                    Section::FileSystemState,
                    "",
                    one_line(&format!("{path}: {state}{times}"), MAX_LINE),
                    c.span,
                    Priority::FileChange,
                ));
            }
            None => out.push(entry(
                Section::FileSystemState,
                "",
                one_line(&format!("{path}: read"), MAX_LINE),
                s.last.span,
                Priority::FileRead,
            )),
        }
    }
}

/// Errors by signature: the ones still open verbatim, the resolved ones one line each; and the
/// latest failing round: its command verbatim and its own error line (memory keeps an error's
/// first sighting, and a later one of the same kind may read differently), or its failing test
/// summary.
fn errors(input: &Input<'_>, out: &mut Vec<Entry>) {
    known_errors(input, out);
    let latest = input.recent.iter().enumerate().rev().find_map(|(i, r)| {
        if !is_result(&r.kind) {
            return None;
        }
        let o = outcome(&r.content);
        if !o.failed(r.kind == "tool_error") {
            return None;
        }
        let call = input.recent[..i].iter().rev().find(|c| c.kind == "tool_call");
        Some((o, call, r))
    });
    let Some((o, call, r)) = latest else { return };
    let mut why: Vec<String> = o.errors.last().cloned().into_iter().collect();
    if let Some(t) = o.tests.as_ref().filter(|t| !t.passed && !why.contains(&t.line)) {
        why.push(t.line.clone());
    }
    if why.is_empty() {
        why.extend(o.exit_code.map(|c| format!("exit {c}")));
    }
    let what = match call {
        Some(c) => {
            let tool = c.tool_name.as_deref().filter(|t| !t.is_empty()).unwrap_or("tool");
            format!("{tool}: {}", one_line(&call_summary(tool, &c.content), 240))
        }
        None => "a tool call".to_owned(),
    };
    let text = if why.is_empty() { format!("{what} failed") } else { format!("{what} failed: {}", why.join(" | ")) };
    let span = SeqSpan::new(call.map_or(r.seq, |c| c.seq), r.seq);
    out.push(entry(Section::Errors, "last failure", one_line(&text, 2 * MAX_LINE), span, Priority::Plan));
}

fn known_errors(input: &Input<'_>, out: &mut Vec<Entry>) {
    let mut by_sig: BTreeMap<String, &Fact> = BTreeMap::new();
    for f in input.facts.iter().filter(|f| f.fact_type == FactType::Error) {
        by_sig.insert(f.subject_key(), f);
    }
    for f in by_sig.values() {
        if f.verb == "resolved" {
            out.push(entry(Section::Errors, "resolved", one_line(&f.object, MAX_LINE / 2), f.span, Priority::Settled));
        } else {
            // `what` names the command and quotes the line.
            out.push(entry(Section::Errors, "unresolved", one_line(&f.what, MAX_LINE), f.span, Priority::Critical));
        }
    }
}

/// Work items from what the events show: each command's and test's latest outcome (a failure
/// not followed by a success is a failed attempt; a later success supersedes it), the task's open
/// loops and next actions, and the agent's last stated step.
fn plan(input: &Input<'_>, out: &mut Vec<Entry>) {
    if let Some(task) = input.task {
        for (i, l) in task.state.open_loops.iter().enumerate() {
            out.push(task_entry(Section::TaskState, "pending", l, Priority::Plan, i));
        }
        for (i, a) in task.state.next_actions.iter().enumerate() {
            out.push(task_entry(Section::TaskState, "next", a, Priority::Plan, task.state.open_loops.len() + i));
        }
    }
    let mut by_subject: BTreeMap<(FactType, String), (&Fact, usize)> = BTreeMap::new();
    for f in input.facts.iter().filter(|f| matches!(f.fact_type, FactType::Command | FactType::Test)) {
        let e = by_subject.entry((f.fact_type, f.subject_key())).or_insert((f, 0));
        e.0 = f;
        if f.verb == "failed" {
            e.1 += 1;
        }
    }
    // A suite's last passing run, by its key: a test it named as failed before passes with it.
    let mut suite_passed: BTreeMap<String, u64> = BTreeMap::new();
    for f in input.facts.iter().filter(|f| f.fact_type == FactType::Test && f.verb == "passed") {
        suite_passed.insert(f.subject_key(), f.span.last);
    }
    for ((_, _), (f, failures)) in by_subject {
        let passed_since = f.fact_type == FactType::Test
            && !f.object.is_empty()
            && suite_passed
                .get(&memex_memory::model::subject_key(FactType::Test, &f.object))
                .is_some_and(|s| *s > f.span.last);
        if f.verb == "failed" && passed_since {
            let text = format!("{} Then `{}` passed.", f.what, f.object);
            out.push(entry(Section::TaskState, "done", one_line(&text, MAX_LINE), f.span, Priority::Settled));
        } else if f.verb == "failed" {
            out.push(entry(Section::TaskState, "failed attempt", one_line(&f.what, MAX_LINE), f.span, Priority::Plan));
        } else {
            let text = if failures > 0 {
                format!("{} (after {failures} failed attempt{})", f.what, if failures == 1 { "" } else { "s" })
            } else {
                f.what.clone()
            };
            out.push(entry(Section::TaskState, "done", one_line(&text, MAX_LINE), f.span, Priority::Settled));
        }
    }
    // The agent's last stated step, when nothing it did came after it.
    if let Some(last) =
        input.recent.iter().rev().find(|e| e.kind == "assistant_message" && !e.content.trim().is_empty())
    {
        let acted_since = input.recent.iter().any(|e| e.seq > last.seq && e.kind != "tool_call");
        let label = if acted_since { "current step" } else { "next" };
        out.push(entry(
            Section::TaskState,
            label,
            one_line(first_paragraph(&last.content), MAX_LINE),
            SeqSpan::one(last.seq),
            Priority::Plan,
        ));
    }
}

/// The last tool rounds: a call, its result's outcome (exit status, test summary, first error).
fn recent_actions(input: &Input<'_>, options: &Options, out: &mut Vec<Entry>) {
    let mut rounds: Vec<(SeqSpan, String)> = Vec::new();
    for (i, call) in input.recent.iter().enumerate().filter(|(_, e)| e.kind == "tool_call") {
        let tool = call.tool_name.as_deref().filter(|t| !t.is_empty()).unwrap_or("tool");
        let what = call_summary(tool, &call.content);
        let result = input.recent[i + 1..].iter().find(|e| {
            is_result(&e.kind)
                && match (&call.tool_call_id, &e.tool_call_id) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        });
        let (span, how) = match result {
            Some(r) => (SeqSpan::new(call.seq, r.seq), describe(r)),
            None => (SeqSpan::one(call.seq), "no result yet".to_owned()),
        };
        rounds.push((span, one_line(&format!("{tool}: {what} → {how}"), MAX_LINE)));
    }
    let skip = rounds.len().saturating_sub(options.recent_actions);
    for (span, text) in rounds.into_iter().skip(skip) {
        out.push(entry(Section::RecentActions, "", text, span, Priority::RecentAction));
    }
}

/// A result in a few words: failed or ok, the exit status, the test summary or first error.
fn describe(r: &MemEvent) -> String {
    let o = outcome(&r.content);
    let failed = o.failed(r.kind == "tool_error");
    let mut s = String::from(if failed { "failed" } else { "ok" });
    if let Some(c) = o.exit_code {
        s.push_str(&format!(" (exit {c})"));
    }
    if let Some(t) = &o.tests {
        s.push_str(": ");
        s.push_str(&t.line);
    } else if failed && let Some(e) = o.errors.last() {
        s.push_str(": ");
        s.push_str(e);
    }
    s
}

/// The last events, raw (long ones cut in the middle).
fn tail(input: &Input<'_>, options: &Options, out: &mut Vec<Entry>) {
    // What the harness wrote into the user's turn (command echoes, reminders) is not a round.
    let shown: Vec<&MemEvent> = input
        .recent
        .iter()
        .filter(|e| !(e.content.trim().is_empty() || e.kind == "user_message" && is_injected_user_text(&e.content)))
        .collect();
    let skip = shown.len().saturating_sub(options.tail_events);
    for e in shown.into_iter().skip(skip) {
        let mut head = e.kind.clone();
        if let Some(t) = e.tool_name.as_deref().filter(|t| !t.is_empty()) {
            head.push(' ');
            head.push_str(t);
        }
        let body = cut_middle(e.content.trim(), options.max_event_chars);
        out.push(entry(Section::RecentRounds, "", format!("[{head}]\n{body}"), SeqSpan::one(e.seq), Priority::Tail));
    }
}

fn first_paragraph(text: &str) -> &str {
    text.trim().split("\n\n").next().unwrap_or("")
}

/// The text on one line (whitespace runs collapsed), at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= max {
        return joined;
    }
    let mut s: String = joined.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// The text itself when short enough, else its head and tail around a marker saying how much
/// was cut (the full text is at the entry's pointer).
pub fn cut_middle(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_owned();
    }
    let keep = max.saturating_sub(40);
    let head: String = text.chars().take(keep * 2 / 3).collect();
    let tail_len = keep - keep * 2 / 3;
    let tail: String = text.chars().skip(n - tail_len).collect();
    format!("{head}\n[… {} characters cut …]\n{tail}", n - keep)
}
