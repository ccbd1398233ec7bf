//! A line holding JSON records back to back (`{…}{…}`), as an agent that crashed before writing
//! its newline leaves behind. The reference VCC.py refuses the line (`json.loads`: "Extra data",
//! which aborts its whole run); memex keeps every record of it, and says so with a warning.
#![allow(clippy::unwrap_used)]

use memex_vcc::{CompileOptions, InputFormat, Severity, compile_trace, trace_events};

const USER: &str = r#"{"type":"user","message":{"role":"user","content":"where is the bug?"},"uuid":"u1"}"#;
const ASSISTANT: &str = r#"{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"In parse_line: it drops glued records."}]},"uuid":"a1"}"#;
const SUMMARY: &str = r#"{"type":"summary","summary":"Glued records","leafUuid":"a1"}"#;
const LAST: &str = r#"{"type":"user","message":{"role":"user","content":"thanks"},"uuid":"u2"}"#;

fn compile(text: &str) -> memex_vcc::CompiledTrace {
    compile_trace(text.as_bytes(), "t", CompileOptions::default()).unwrap()
}

fn full(trace: &memex_vcc::CompiledTrace) -> String {
    trace.chains().iter().map(|c| c.full_view()).collect()
}

#[test]
fn glued_records_compile_as_if_the_newline_were_there() {
    let glued = format!("{USER}\n{ASSISTANT}{SUMMARY}\n{LAST}\n");
    let apart = format!("{USER}\n{ASSISTANT}\n{SUMMARY}\n{LAST}\n");
    let (g, a) = (compile(&glued), compile(&apart));
    assert!(full(&g).contains("In parse_line: it drops glued records."), "{}", full(&g));
    assert_eq!(full(&g), full(&a), "the same view as with the newline");
    assert!(a.diagnostics().is_empty());
    let d = g.diagnostics();
    assert_eq!(d.len(), 1, "{d:?}");
    let col = ASSISTANT.chars().count() as u32 + 1;
    assert_eq!((d[0].line, d[0].col, d[0].severity), (2, col, Severity::Warning));
    assert!(d[0].message.contains("both kept"), "{}", d[0].message);
}

#[test]
fn three_glued_records_are_three() {
    let text = format!("{USER}{ASSISTANT}{LAST}\n");
    let trace = compile(&text);
    let view = full(&trace);
    for needle in ["where is the bug?", "In parse_line", "thanks"] {
        assert!(view.contains(needle), "{needle} missing:\n{view}");
    }
    assert_eq!(trace.diagnostics().len(), 2, "one warning per glued record");
}

#[test]
fn glued_events_of_memex_are_all_imported() {
    let e = |seq: u32, content: &str| {
        format!(r#"{{"session_id":"s","seq":{seq},"kind":"user_message","content":"{content}"}}"#)
    };
    // The first line is glued too: the format is still detected from its first record.
    let text = format!("{}{}\n{}\n", e(1, "one"), e(2, "two"), e(3, "three"));
    let (events, diags) = trace_events(text.as_bytes(), InputFormat::Auto, false).unwrap();
    let contents: Vec<&str> = events.iter().map(|ev| ev.content.as_str()).collect();
    assert_eq!(contents, ["one", "two", "three"]);
    assert_eq!(diags.len(), 1);
}

#[test]
fn a_torn_second_record_keeps_the_first() {
    let text = format!("{ASSISTANT}{{\"type\":\"us\n{LAST}\n");
    let trace = compile(&text);
    assert!(full(&trace).contains("In parse_line"), "the complete first record is kept");
    let errors: Vec<_> = trace.diagnostics().iter().filter(|d| d.severity == Severity::Error).collect();
    assert_eq!(errors.len(), 1, "{:?}", trace.diagnostics());
    assert!(errors[0].message.ends_with("rest of the line skipped"), "{}", errors[0].message);
}

#[test]
fn a_value_that_is_not_a_record_after_one_is_still_extra_data() {
    let text = format!("{USER}\n{ASSISTANT} 42\n");
    let trace = compile(&text);
    assert!(!full(&trace).contains("In parse_line"), "a line that is not a run of records is skipped whole");
    let d = trace.diagnostics();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].message, "invalid JSON: Extra data; line skipped");
    assert_eq!(d[0].col, ASSISTANT.chars().count() as u32 + 2);
}

#[test]
fn strict_refuses_a_glued_line() {
    let text = format!("{USER}\n{ASSISTANT}{SUMMARY}\n");
    let strict = compile_trace(text.as_bytes(), "t", CompileOptions { format: InputFormat::Auto, strict: true });
    assert!(strict.is_err(), "strict makes the first problem fatal, a repaired one included");
}
