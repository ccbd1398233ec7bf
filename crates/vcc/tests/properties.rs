//! Property tests: arbitrary records never panic the compiler and every pointer resolves;
//! appending memex events never changes an earlier full-view line (stable pointers).
#![allow(clippy::unwrap_used)]

use memex_pointer::LineRange;
use memex_vcc::{CompileOptions, InputFormat, LineKind, Lines, Literal, UiOptions, UiPointerKind, compile_trace};
use proptest::prelude::*;
use serde_json::{Value, json};

mod common;
use common::{memex_event, text};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,6}", inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn tool_id() -> impl Strategy<Value = String> {
    prop_oneof![Just("toolu_aaaaaa".to_string()), Just("toolu_bbbbbb".to_string()), "[a-z]{0,8}"]
}

fn block() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(|t| json!({"type": "text", "text": t})),
        text().prop_map(|t| json!({"type": "thinking", "thinking": t})),
        Just(json!({"type": "redacted_thinking"})),
        (prop_oneof![Just("Read"), Just("Bash"), Just("TodoWrite"), Just("mcp__x")], tool_id(), json_value())
            .prop_map(|(n, id, input)| json!({"type": "tool_use", "name": n, "id": id, "input": input})),
        (tool_id(), text(), any::<bool>())
            .prop_map(|(id, t, e)| json!({"type": "tool_result", "tool_use_id": id, "content": t, "is_error": e})),
        "[A-Za-z0-9+/=]{0,12}"
            .prop_map(|d| json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": d}})),
        json_value(),
    ]
}

fn record() -> impl Strategy<Value = String> {
    let content =
        prop_oneof![text().prop_map(Value::String), prop::collection::vec(block(), 0..4).prop_map(Value::Array)];
    prop_oneof![
        (content.clone(), any::<bool>()).prop_map(|(c, s)| json!({"type": "user", "isCompactSummary": s, "message": {"content": c}}).to_string()),
        (prop_oneof![Just("m1"), Just("m2"), Just("")], content.clone())
            .prop_map(|(id, c)| json!({"type": "assistant", "timestamp": "2026-01-01T00:00:00Z", "message": {"id": id, "content": c, "usage": {"input_tokens": 3, "output_tokens": 1}, "model": "m"}}).to_string()),
        content.prop_map(|c| json!({"type": "system", "content": c}).to_string()),
        Just(json!({"type": "system", "subtype": "compact_boundary"}).to_string()),
        Just(json!({"type": "progress", "data": {}}).to_string()),
        json_value().prop_map(|v| v.to_string()),
        "\\PC{0,30}",
    ]
}

/// Every structural claim the compiled chain makes resolves into its own full view.
fn check_pointers(bytes: &[u8]) {
    let trace = compile_trace(bytes, "prop", CompileOptions::default()).unwrap();
    for chain in trace.chains() {
        let full = chain.full_view();
        let all = chain.read_lines(LineRange { first: 1, last: chain.full_line_count() });
        assert_eq!(all.len() as u32, chain.full_line_count());
        let joined: Vec<&str> = all.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(joined.join("\n"), full, "read_lines reproduces the full view");
        let n = chain.full_line_count();
        for (a, b) in [(1, n), (n / 3 + 1, n / 2 + 1), (n, n)] {
            let texts = chain.read_line_texts(LineRange { first: a, last: b });
            let infos: Vec<String> =
                chain.read_lines(LineRange { first: a, last: b }).into_iter().map(|l| l.text).collect();
            assert_eq!(texts, infos, "read_line_texts({a}-{b}) is read_lines' text");
        }
        let ui = chain.ui_view(&UiOptions { truncate: 3, truncate_user: 5 });
        for p in &ui.pointers {
            match &p.kind {
                UiPointerKind::ToolCall { call, result } => {
                    assert_eq!(all[call.first as usize - 1].kind, LineKind::Open);
                    assert_eq!(all[call.last as usize - 1].text, "<<<tool_call");
                    if let Some(r) = result {
                        assert!(all[r.first as usize - 1].text.starts_with("[tool"));
                    }
                }
                UiPointerKind::Truncated { range } => {
                    assert_eq!(chain.blocks()[p.block].body_range(), Some(*range));
                }
            }
        }
        let adaptive = chain.adaptive_view(&Lines(Literal::new("a", false).unwrap()));
        for hit in &adaptive.hits {
            let body = chain.blocks()[hit.block].body_range().unwrap();
            for &l in &hit.lines {
                assert!(all[(body.first + l) as usize - 1].text.contains('a'));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_claude_records_compile_and_pointers_resolve(lines in prop::collection::vec(record(), 0..25)) {
        check_pointers(lines.join("\n").as_bytes());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), format in 0..5usize) {
        let format = [InputFormat::Auto, InputFormat::Claude, InputFormat::Codex, InputFormat::Gemini, InputFormat::Memex][format];
        let _ = compile_trace(&bytes, "x", CompileOptions { format, strict: false }).unwrap();
        let _ = memex_vcc::trace_events(&bytes, format, false).unwrap();
    }

    #[test]
    fn appending_events_keeps_earlier_lines(events in prop::collection::vec(memex_event(), 1..30), split in 0..30usize) {
        let split = split.min(events.len());
        let render = |evs: &[String]| {
            let bytes = evs.join("\n");
            let trace = compile_trace(bytes.as_bytes(), "s", CompileOptions { format: InputFormat::Memex, strict: false }).unwrap();
            trace.chains().first().map(|c| (c.full_view(), c.sections().last().map(|s| s.range().first.saturating_sub(2))))
        };
        let (Some((before, Some(last_start))), Some((after, _))) = (render(&events[..split]), render(&events)) else {
            return Ok(());
        };
        let keep = last_start.max(1) as usize - 1;
        let old: Vec<&str> = before.split('\n').take(keep).collect();
        let new: Vec<&str> = after.split('\n').take(keep).collect();
        prop_assert_eq!(old, new);
    }
}
