//! Events → turns. A turn opens at a user's message, or at the agent's next step (an assistant
//! message or thinking after tool output), and is capped so one turn never swallows a long run of
//! tool calls. Its text is what was said and which tools were called; tool output stays out of
//! it (§3.7) but for its key lines: errors, test and exit summaries, kept verbatim.
use crate::lines::key_output_lines;
use crate::model::{MemEvent, PartRole, SeqSpan, Turn, TurnPart};

/// Tool calls after which a turn closes at the next call.
const MAX_CALLS_PER_TURN: usize = 8;
/// Events after which a turn closes, whatever comes next.
const MAX_EVENTS_PER_TURN: usize = 64;
/// Longest tool-call line in a turn's text (characters).
const MAX_CALL_LINE: usize = 240;
/// Key output lines kept per tool result.
const MAX_OUTPUT_LINES: usize = 4;

/// True for a user message that a harness wrote, not the user: local-command echoes, system
/// reminders, interruption notes, Claude Code's summary after a compaction.
pub fn is_injected_user_text(text: &str) -> bool {
    let t = text.trim_start();
    t.is_empty()
        || t.starts_with("<command-")
        || t.starts_with("<local-command")
        || t.starts_with("<system-reminder>")
        || t.starts_with("<user-prompt-submit-hook>")
        || t.starts_with("Caveat: The messages below")
        || t.starts_with("This session is being continued from a previous conversation")
        || t.starts_with("[Request interrupted")
        || t.starts_with("[image:")
}

/// Whether an event of `kind` is a tool's output (a result or an error).
pub fn is_output(kind: &str) -> bool {
    matches!(kind, "tool_result" | "tool_error") || kind.ends_with("tool_result")
}

/// Whether `e` opens a new turn, given the turn in progress.
fn opens_turn(e: &MemEvent, prev: Option<&MemEvent>, events_in_turn: usize, calls_in_turn: usize) -> bool {
    if events_in_turn == 0 {
        return false;
    }
    if events_in_turn >= MAX_EVENTS_PER_TURN {
        return true;
    }
    let after_output = prev.is_some_and(|p| is_output(&p.kind));
    match e.kind.as_str() {
        "user_message" => !is_injected_user_text(&e.content),
        "assistant_message" | "thinking" => after_output,
        "tool_call" => after_output && calls_in_turn >= MAX_CALLS_PER_TURN,
        _ => false,
    }
}

/// Splits a session's events (in seq order) into turns. The last turn may still grow; callers
/// that process a live session treat it as provisional.
pub fn turns(events: &[MemEvent]) -> Vec<Turn> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut calls = 0;
    // A turn with nothing said or done yet (system records, injected text) runs on into the next.
    let mut content = false;
    for i in 0..events.len() {
        let prev = i.checked_sub(1).map(|j| &events[j]);
        // After a quiet spell the turn before may have been closed as it stood: cut there always.
        let quiet = events[i].after_quiet && i > start;
        if quiet || (content && opens_turn(&events[i], prev, i - start, calls)) {
            out.push(turn_of(&events[start..i]));
            start = i;
            calls = 0;
            content = false;
        }
        let e = &events[i];
        content |= match e.kind.as_str() {
            "user_message" => !is_injected_user_text(&e.content),
            "assistant_message" | "tool_call" | "decision" | "constraint" | "report" | "note" => true,
            _ => false,
        };
        if e.is("tool_call") {
            calls += 1;
        }
    }
    if start < events.len() {
        out.push(turn_of(&events[start..]));
    }
    out
}

fn turn_of(events: &[MemEvent]) -> Turn {
    let first = &events[0];
    let last = &events[events.len() - 1];
    let mut parts = Vec::new();
    let mut from_user = false;
    let mut calls = Vec::new();
    for e in events {
        let part = |role, text: String| TurnPart { seq: e.seq, role, text };
        match e.kind.as_str() {
            "user_message" if !is_injected_user_text(&e.content) => {
                from_user |= e.seq == first.seq;
                parts.push(part(PartRole::User, e.content.trim().to_owned()));
            }
            "assistant_message" => parts.push(part(PartRole::Assistant, e.content.trim().to_owned())),
            "decision" | "constraint" | "report" | "note" => {
                parts.push(part(PartRole::Note, e.content.trim().to_owned()))
            }
            "tool_call" => {
                calls.push((e.tool_name.clone().unwrap_or_default(), e.content.clone()));
                parts.push(part(PartRole::Call, call_line(e)));
            }
            k if is_output(k) => {
                for l in key_output_lines(&e.content, MAX_OUTPUT_LINES) {
                    parts.push(part(PartRole::Output, l));
                }
            }
            _ => {}
        }
    }
    parts.retain(|p| !p.text.is_empty());
    Turn {
        span: SeqSpan::new(first.seq, last.seq),
        start: first.time.min(last.time),
        end: first.time.max(last.time),
        parts,
        from_user,
        calls,
    }
}

/// One line naming a tool call: `Bash: cargo test`, `Edit: src/lib.rs`.
pub fn call_line(e: &MemEvent) -> String {
    let tool = e.tool_name.as_deref().filter(|t| !t.is_empty()).unwrap_or("tool");
    let what = crate::facts::call_summary(tool, &e.content);
    let mut line = format!("{tool}: {what}");
    if line.chars().count() > MAX_CALL_LINE {
        line = line.chars().take(MAX_CALL_LINE).collect::<String>() + "…";
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ev;

    #[test]
    fn a_turn_opens_at_users_and_at_the_step_after_tool_output() {
        let events = vec![
            ev(1, "user_message", "fix the flaky test"),
            ev(2, "assistant_message", "Let me look."),
            ev(3, "tool_call", r#"{"command":"cargo test"}"#).tool("Bash", "c1"),
            ev(4, "tool_result", "test result: FAILED. 1 passed; 1 failed").call_id("c1"),
            ev(5, "assistant_message", "One test fails; reading it."),
            ev(6, "tool_call", r#"{"file_path":"src/lib.rs"}"#).tool("Read", "c2"),
            ev(7, "tool_result", "fn main() {}").call_id("c2"),
            ev(8, "user_message", "<system-reminder>ignore</system-reminder>"),
            ev(9, "user_message", "use nextest"),
        ];
        let t = turns(&events);
        let spans: Vec<(u64, u64)> = t.iter().map(|t| (t.span.first, t.span.last)).collect();
        assert_eq!(spans, vec![(1, 4), (5, 8), (9, 9)]);
        assert!(t[0].from_user && !t[1].from_user && t[2].from_user);
        assert_eq!(t[0].text(), "fix the flaky test\nLet me look.\nBash: cargo test");
        let out: Vec<(u64, &str)> = t[0].output_lines().map(|p| (p.seq, p.text.as_str())).collect();
        assert_eq!(out, vec![(4, "test result: FAILED. 1 passed; 1 failed")]);
        assert_eq!(t[1].text(), "One test fails; reading it.\nRead: src/lib.rs");
    }

    #[test]
    fn a_long_run_of_calls_is_cut() {
        let mut events = vec![ev(1, "user_message", "go")];
        for i in 0..20u64 {
            events.push(ev(2 + 2 * i, "tool_call", r#"{"command":"ls"}"#).tool("Bash", &format!("c{i}")));
            events.push(ev(3 + 2 * i, "tool_result", "ok").call_id(&format!("c{i}")));
        }
        let t = turns(&events);
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].span, SeqSpan::new(1, 17));
        assert!(t.iter().all(|t| t.calls.len() <= MAX_CALLS_PER_TURN));
    }
}
