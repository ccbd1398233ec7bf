//! Real traces as the core's events, and a token counter: shared by the tests and the bench
//! (`#[path]`-included by `benches/advance.rs`).
use memex_memory::MemEvent;
use memex_tokens::{TokenCounter, Tokenizer};

pub struct Counter;

impl TokenCounter for Counter {
    fn count(&self, text: &str) -> usize {
        Tokenizer::O200kBase.count(text)
    }
}

pub fn events_of(file: &str) -> Vec<MemEvent> {
    let path = format!("{}/../vcc/tests/fixtures/traces/{file}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).expect("a fixture");
    let (records, _) = memex_vcc::trace_events(&bytes, memex_vcc::InputFormat::Auto, false).expect("a trace");
    let base = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").expect("a time").to_utc();
    records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let r = r.into_append(i as u64, |_| true);
            MemEvent {
                seq: i as u64 + 1,
                kind: r.kind,
                content: r.content,
                tool_name: Some(r.tool_name).filter(|s| !s.is_empty()),
                tool_call_id: Some(r.tool_call_id).filter(|s| !s.is_empty()),
                agent_id: "agent".into(),
                time: r.event_time.unwrap_or(base + chrono::Duration::seconds(i as i64)),
                after_quiet: false,
            }
        })
        .collect()
}
