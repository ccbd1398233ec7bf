//! Non-Claude inputs (Codex, Gemini CLI, memex events) and the events mapping.
#![allow(clippy::unwrap_used)]

use memex_vcc::{CompileOptions, InputFormat, TraceFormat, UiOptions, compile_trace, trace_events};
use std::path::Path;

fn fixture(kind: &str, name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces").join(kind).join(name);
    std::fs::read(p).unwrap()
}

fn auto(bytes: &[u8]) -> memex_vcc::CompiledTrace {
    compile_trace(bytes, "t", CompileOptions::default()).unwrap()
}

const EVENTS: &str = r#"{"id":"e1","session_id":"s1","seq":1,"kind":"user_message","agent_id":"planner","task_id":null,"tool_name":null,"tool_call_id":null,"event_time":"2026-11-22T10:00:00.123Z","ingest_time":"2026-11-22T10:00:00.130Z","content":"List the files","artifact":null,"metadata":null}
{"id":"e2","session_id":"s1","seq":2,"kind":"thinking","agent_id":"planner","task_id":null,"tool_name":null,"tool_call_id":null,"event_time":"2026-11-22T10:00:01Z","ingest_time":"x","content":"ls will do","artifact":null,"metadata":null}
{"id":"e3","session_id":"s1","seq":3,"kind":"tool_call","agent_id":"planner","task_id":null,"tool_name":"Bash","tool_call_id":"call_1","event_time":"2026-11-22T10:00:02Z","ingest_time":"x","content":"{\"command\":\"ls\",\"description\":\"list\"}","artifact":null,"metadata":null}
{"id":"e4","session_id":"s1","seq":4,"kind":"tool_result","agent_id":"planner","task_id":null,"tool_name":null,"tool_call_id":"call_1","event_time":"2026-11-22T10:00:03Z","ingest_time":"x","content":"a.txt\nb.txt","artifact":null,"metadata":null}
{"id":"e5","session_id":"s1","seq":5,"kind":"decision","agent_id":"planner","task_id":null,"tool_name":null,"tool_call_id":null,"event_time":"2026-11-22T10:00:04Z","ingest_time":"x","content":"Use b.txt","artifact":null,"metadata":null}
{"id":"e6","session_id":"s1","seq":6,"kind":"assistant_message","agent_id":"planner","task_id":null,"tool_name":null,"tool_call_id":null,"event_time":"2026-11-22T10:00:05Z","ingest_time":"x","content":"Two files.","artifact":null,"metadata":null}
"#;

#[test]
fn memex_events_render_with_the_claude_vocabulary() {
    let trace = auto(EVENTS.as_bytes());
    assert_eq!(trace.format(), TraceFormat::Memex);
    assert!(trace.diagnostics().is_empty(), "{:?}", trace.diagnostics());
    let chain = &trace.chains()[0];
    let full = chain.full_view();
    let expected = "[user]\n\nList the files\n\n══════════════════════════════\n[assistant]\n\n>>>thinking\nls will do\n<<<thinking\n\n>>>tool_call Bash:call_1\ncommand: ls\ndescription: list\n<<<tool_call\n\n══════════════════════════════\n[tool] Bash:call_1\n\na.txt\nb.txt\n\n══════════════════════════════\n[decision]\n\nUse b.txt\n\n══════════════════════════════\n[assistant]\n\nTwo files.\n";
    assert_eq!(full, expected);
    let ui = chain.ui_view(&UiOptions::default()).text;
    assert_eq!(
        ui,
        "[user]\n\nList the files\n\n[assistant]\n\n* Bash \"list\" (t.txt:12-15,18-21)\n\n[decision]\n\nUse b.txt\n\n[assistant]\n\nTwo files.\n"
    );
}

#[test]
fn memex_read_results_lose_line_number_prefixes_like_claude() {
    let events = [
        r#"{"session_id":"s","seq":1,"kind":"user_message","content":"read it"}"#,
        r#"{"session_id":"s","seq":2,"kind":"tool_result","tool_name":"Read","tool_call_id":"r1","content":"     1\u2192fn main() {}\n     2\u2192"}"#,
    ]
    .join("\n");
    let full = auto(events.as_bytes()).chains()[0].full_view();
    assert!(full.contains("[tool] Read:r1\n\nfn main() {}\n\n"), "{full}");
}

#[test]
fn session_change_starts_a_new_chain() {
    let two = EVENTS.replace(r#""session_id":"s1","seq":6"#, r#""session_id":"s2","seq":6"#);
    let trace = auto(two.as_bytes());
    assert_eq!(trace.chains().len(), 2);
    assert_eq!(trace.chains()[1].files().full, "t_2.txt");
}

#[test]
fn codex_and_gemini_are_detected_and_rendered() {
    let codex =
        auto(&fixture("codex", "localpush__rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl"));
    assert_eq!(codex.format(), TraceFormat::Codex);
    assert_eq!(codex.chains().len(), 2, "one `compacted` record");
    assert!(codex.chains()[1].full_view().starts_with("[user]\n\n[compact summary"));
    let gemini = auto(&fixture("gemini-cli-json", "entire__9c53780d06b7-0.json"));
    assert_eq!(gemini.format(), TraceFormat::Gemini);
    assert!(gemini.diagnostics().is_empty());
    let full = gemini.chains()[0].full_view();
    assert!(full.contains("[tool] run_shell_command:") || full.contains("[tool] "));
}

#[test]
fn events_round_trip_through_the_memex_format() {
    let claude = fixture("claude-code", "spotter__short.jsonl");
    let (events, diags) = trace_events(&claude, InputFormat::Auto, false).unwrap();
    assert!(diags.is_empty());
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "user_message",
            "thinking",
            "assistant_message",
            "tool_call",
            "tool_call",
            "tool_error",
            "tool_error",
            "user_message"
        ]
    );
    assert_eq!(events[3].tool_name.as_deref(), Some("Bash"));
    assert_eq!(events[5].tool_name.as_deref(), Some("Bash"));
    assert!(events[3].content.starts_with("{\"command\":\"mix phx.server"));
    let jsonl: String = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut v = serde_json::to_value(e).unwrap();
            v["session_id"] = "s".into();
            v["seq"] = (i + 1).into();
            v.to_string() + "\n"
        })
        .collect();
    let trace =
        compile_trace(jsonl.as_bytes(), "rt", CompileOptions { format: InputFormat::Memex, strict: false }).unwrap();
    let full = trace.chains()[0].full_view();
    assert!(full.contains("[tool_error] Bash:8qV1Sc"), "{full}");
    assert!(full.contains(">>>tool_call Glob:dguQGx\npattern: mix.exs"));
    for kind in [
        ("codex", "localpush__rollout-2026-02-23T13-19-38-019c8a70-dda7-7f33-98ea-f30553347322.jsonl"),
        ("gemini-cli-json", "entire__ab2b9748b105-0.json"),
    ] {
        let (events, _) = trace_events(&fixture(kind.0, kind.1), InputFormat::Auto, false).unwrap();
        assert!(events.iter().any(|e| e.kind == "tool_call"), "{}", kind.1);
    }
}

/// Line 128 of this real trace holds an assistant record and a `summary` record with no newline
/// between them (see `glued_records.rs`): both are kept, with a warning; strict refuses it.
#[test]
fn glued_records_in_a_real_trace_are_both_kept() {
    let bytes = fixture("claude-code", "entire__37995ebed6e4-2.jsonl");
    let trace = auto(&bytes);
    let d = trace.diagnostics();
    assert_eq!(d.len(), 1);
    assert_eq!(
        (d[0].line, d[0].col, d[0].severity, d[0].message.as_str()),
        (128, 1008, memex_vcc::Severity::Warning, "a second record on the same line (no newline before it); both kept")
    );
    let full: String = trace.chains().iter().map(|c| c.full_view()).collect();
    assert!(full.contains("Done. I updated `TestLogging_IncludesContextValues`"), "the first record's text is kept");
    let strict = compile_trace(&bytes, "t", CompileOptions { format: InputFormat::Auto, strict: true });
    assert!(strict.is_err());
}

#[test]
fn line_lookup_serves_pointers() {
    let trace = auto(&fixture("claude-code", "spotter__short.jsonl"));
    let chain = &trace.chains()[0];
    let lines = chain.read_lines(memex_pointer::LineRange { first: 18, last: 21 });
    let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
    assert_eq!(
        texts,
        [">>>tool_call Bash:8qV1Sc", "command: mix phx.server 2>&1 | head -80", "timeout: 30000", "<<<tool_call"]
    );
    assert!(lines.iter().all(|l| l.node_type.as_deref() == Some("tool_call")));
    assert!(trace.size_bytes() > 1000);
}

#[test]
fn blocks_remember_the_input_line_they_came_from() {
    let events = [
        r#"{"session_id":"s","seq":1,"kind":"user_message","content":"hello"}"#,
        r#"{"session_id":"s","seq":2,"kind":"tool_call","tool_name":"Bash","tool_call_id":"c1","content":"{\"command\":\"ls\"}"}"#,
        r#"{"session_id":"s","seq":3,"kind":"tool_result","tool_call_id":"c1","content":"a\nb"}"#,
        r#"{"session_id":"s","seq":4,"kind":"assistant_message","content":"done"}"#,
    ]
    .join("\n");
    let trace = auto(events.as_bytes());
    let chain = &trace.chains()[0];
    let lines: Vec<u32> = chain.blocks().iter().map(|b| b.source_line()).collect();
    assert_eq!(lines, vec![1, 2, 3, 4]);
    // Claude records: every block points at a user, assistant or system record.
    let bytes = fixture("claude-code", "spotter__short.jsonl");
    let text = String::from_utf8(bytes.clone()).unwrap();
    let records: Vec<&str> = text.lines().collect();
    let trace = auto(&bytes);
    for chain in trace.chains() {
        for b in chain.blocks() {
            let rec = records[(b.source_line() - 1) as usize];
            assert!(
                rec.contains(r#""type":"user""#)
                    || rec.contains(r#""type":"assistant""#)
                    || rec.contains(r#""type":"system""#),
                "block from line {} is not from a rendered record",
                b.source_line()
            );
        }
    }
}

#[test]
fn one_lexing_pass_compiles_and_maps_every_fixture_alike() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces");
    let mut seen = 0;
    for dir in ["claude-code", "codex", "gemini-cli-json"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            let opts = CompileOptions::default();
            let (trace, events) = memex_vcc::compile_with_events(&bytes, "t", opts).unwrap();
            let alone = compile_trace(&bytes, "t", opts).unwrap();
            assert_eq!(trace.format(), alone.format());
            assert_eq!(trace.diagnostics(), alone.diagnostics());
            let views = |t: &memex_vcc::CompiledTrace| t.chains().iter().map(|c| c.full_view()).collect::<Vec<_>>();
            assert_eq!(views(&trace), views(&alone));
            assert_eq!(events, trace_events(&bytes, InputFormat::Auto, false).unwrap().0);
            seen += 1;
        }
    }
    assert!(seen >= 3, "fixtures of every format: {seen}");
    // Strict mode fails the same way.
    let bad = fixture("claude-code", "entire__37995ebed6e4-2.jsonl");
    let strict = CompileOptions { format: InputFormat::Auto, strict: true };
    assert_eq!(
        memex_vcc::compile_with_events(&bad, "t", strict).map(|_| ()),
        compile_trace(&bad, "t", strict).map(|_| ())
    );
}
