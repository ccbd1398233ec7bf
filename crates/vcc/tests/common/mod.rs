//! Generators shared by the property tests: free text, and memex events (a live session's input).
use proptest::prelude::*;
use serde_json::{Value, json};

pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,12}",
        "[a-zA-Z0-9 \n]{0,40}",
        Just("\n\n".to_string()),
        Just("x\r\ny\u{1b}[31mred\u{7}".to_string()),
        Just("<system-reminder>s</system-reminder>".to_string()),
        Just("Continue from where you left off.".to_string()),
        Just("   7\u{2192}code".to_string()),
        "\\PC{0,20}",
    ]
}

/// One memex event as a JSON line, of any kind (compactions and unknown kinds too), with its
/// tool call's id among a few so that calls and results pair up or not.
pub fn memex_event() -> impl Strategy<Value = String> {
    let kinds = prop_oneof![
        Just("user_message"),
        Just("assistant_message"),
        Just("thinking"),
        Just("tool_call"),
        Just("tool_result"),
        Just("tool_error"),
        Just("system"),
        Just("compaction"),
        Just("decision"),
        Just("note"),
        Just("x-custom"),
    ];
    let calls = prop_oneof![Just("c1"), Just("c2"), Just("c3")];
    (kinds, text(), calls, prop_oneof![Just("planner"), Just("coder")], 1u64..50).prop_map(
        |(kind, content, call, agent, seq)| {
            let tool = matches!(kind, "tool_call" | "tool_result" | "tool_error");
            json!({
                "id": "0190c3a0-7b1e-7c3a-9f00-0a1b2c3d4e5f", "session_id": "s1", "seq": seq, "kind": kind,
                "agent_id": agent, "task_id": null,
                "tool_name": if kind == "tool_call" { json!("Bash") } else { Value::Null },
                "tool_call_id": if tool { json!(call) } else { Value::Null },
                "event_time": "2026-11-22T10:00:00.123Z", "ingest_time": "2026-11-22T10:00:00.130Z",
                "content": if kind == "tool_call" { json!({"command": content}).to_string() } else { content },
                "artifact": null, "metadata": null
            })
            .to_string()
        },
    )
}
