//! A trace's event as an `AppendEvents` input: what an import (`memex-views`' `import_inputs`)
//! makes of the same record — stand-in ids and names, `x-` kinds, timestamps — plus the mark
//! that says where in the file it came from.

use std::collections::HashSet;

use memex_proto::v1 as pb;
use memex_vcc::EventRecord;

/// The metadata key of the mark.
pub const MARK_KEY: &str = "memex_watch";

/// Where a record sits in its file, kept in the metadata of each of its events (under
/// [`MARK_KEY`]), so that the store itself holds the resume point: the mark of a session's last
/// event says where to go on, and its prefix hash whether the file is still the one it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Bytes `offset..end` of a JSON-lines file (one line); `prefix` is the BLAKE3 hash of the
    /// file's bytes `0..end`.
    Line { offset: u64, end: u64, prefix: [u8; 32] },
    /// Message `index` of a session document; `prefix` is the hash of the events of messages
    /// `0..=index` (not of their bytes, which the agent rewrites: token counts, timestamps).
    Message { index: u64, prefix: [u8; 32] },
}

/// Where the next batch of a file starts: a byte offset, or a message index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Byte(u64),
    Message(u64),
}

impl Position {
    /// The idempotency key of the batch that starts here. Every batch a watcher sends starts
    /// where a committed one ended, so two attempts at the same place share a key: a retry is
    /// answered with the original commit, a different batch is refused, never stored twice.
    pub fn key(self, session_id: &str) -> String {
        match self {
            Position::Byte(b) => format!("memex-watch:{session_id}:b{b}"),
            Position::Message(m) => format!("memex-watch:{session_id}:m{m}"),
        }
    }
}

impl Mark {
    /// The position just past this record.
    pub fn next(&self) -> Position {
        match *self {
            Mark::Line { end, .. } => Position::Byte(end),
            Mark::Message { index, .. } => Position::Message(index + 1),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Mark::Line { offset, end, prefix } => serde_json::json!({
                "offset": offset, "end": end, "prefix_blake3": hex(prefix),
            }),
            Mark::Message { index, prefix } => serde_json::json!({
                "message": index, "prefix_blake3": hex(prefix),
            }),
        }
    }

    /// The mark in a stored event's metadata; `None` for an event the watcher did not write.
    pub fn from_metadata(metadata_json: &str) -> Option<Mark> {
        let v: serde_json::Value = serde_json::from_str(metadata_json).ok()?;
        let m = v.get(MARK_KEY)?;
        let prefix = unhex(m.get("prefix_blake3")?.as_str()?)?;
        match (m.get("end").and_then(|e| e.as_u64()), m.get("message").and_then(|i| i.as_u64())) {
            (Some(end), None) => Some(Mark::Line { offset: m.get("offset")?.as_u64()?, end, prefix }),
            (None, Some(index)) => Some(Mark::Message { index, prefix }),
            _ => None,
        }
    }
}

fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Turns a file's events into inputs, in file order. It must see every event of the file from
/// the first, stored or not: the stand-in ids count events from the start of the trace, and a
/// tool result can only be appended if its call was.
#[derive(Default)]
pub struct Converter {
    index: u64,
    calls: HashSet<String>,
}

impl Converter {
    /// The input for the next event of the file; `mark` is `None` for an event already stored
    /// (it is only counted).
    pub fn input(&mut self, r: EventRecord, mark: Option<&Mark>) -> Option<pb::EventInput> {
        let i = self.index;
        self.index += 1;
        let mut r = r.into_append(i, |k| memex_event::EventKind::parse(k).is_ok());
        if r.kind == "tool_call" {
            self.calls.insert(r.tool_call_id.clone());
        }
        // An import keeps a result whose call the trace never made; an append refuses it (a
        // result must answer a call of its session). It is kept under an extension kind.
        if r.answers_a_call() && !self.calls.contains(&r.tool_call_id) {
            r.kind = format!("x-{}", r.kind);
            r.metadata.insert("memex_orphan_result".into(), true.into());
        }
        let mark = mark?;
        r.metadata.insert(MARK_KEY.into(), mark.to_json());
        Some(pb::EventInput {
            kind: r.kind,
            content: r.content,
            // Empty means the session's agent, as an import sets it.
            agent_id: r.agent_id.unwrap_or_default(),
            task_id: String::new(),
            tool_name: r.tool_name,
            tool_call_id: r.tool_call_id,
            event_time: r
                .event_time
                .map(|d| prost_types::Timestamp { seconds: d.timestamp(), nanos: d.timestamp_subsec_nanos() as i32 }),
            metadata_json: serde_json::Value::Object(r.metadata).to_string(),
            media_type: String::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: &str, call: Option<&str>) -> EventRecord {
        EventRecord {
            kind: kind.into(),
            content: "c".into(),
            tool_name: call.map(|_| "Bash".into()),
            tool_call_id: call.map(str::to_owned),
            event_time: Some("2026-01-02T03:04:05.5Z".into()),
            agent_id: None,
            metadata: serde_json::json!({"source_line": 7}),
        }
    }

    #[test]
    fn a_mark_round_trips_through_metadata() {
        let line = Mark::Line { offset: 10, end: 99, prefix: [7; 32] };
        let doc = Mark::Message { index: 3, prefix: [255; 32] };
        for mark in [line, doc] {
            let mut c = Converter::default();
            let input = c.input(record("user_message", None), Some(&mark)).expect("marked");
            assert_eq!(Mark::from_metadata(&input.metadata_json), Some(mark));
        }
        assert_eq!(line.next(), Position::Byte(99));
        assert_eq!(doc.next(), Position::Message(4));
        assert_eq!(Mark::from_metadata(r#"{"source_line": 1}"#), None);
        assert_eq!(Mark::from_metadata("not json"), None);
    }

    #[test]
    fn inputs_are_what_an_import_stores() {
        let mut c = Converter::default();
        let mark = Mark::Line { offset: 0, end: 1, prefix: [0; 32] };
        let call = c.input(record("tool_call", Some("t1")), Some(&mark)).expect("marked");
        assert_eq!(call.event_time, Some(prost_types::Timestamp { seconds: 1_767_323_045, nanos: 500_000_000 }));
        let result = c.input(record("tool_result", Some("t1")), Some(&mark)).expect("marked");
        assert_eq!(result.kind, "tool_result");
        let no_id = c.input(record("tool_call", None), Some(&mark)).expect("marked");
        assert_eq!((no_id.tool_name.as_str(), no_id.tool_call_id.as_str()), ("unknown", "memex-import-2"));
        let label = c.input(record("mystery", None), Some(&mark)).expect("marked");
        assert_eq!(label.kind, "x-mystery");
        let mut late = record("note", None);
        late.event_time = Some("yesterday".into());
        let late = c.input(late, Some(&mark)).expect("marked");
        assert!(late.event_time.is_none() && late.metadata_json.contains(r#""source_timestamp":"yesterday""#));
    }

    #[test]
    fn a_result_without_its_call_becomes_an_extension_kind() {
        let mut c = Converter::default();
        let mark = Mark::Line { offset: 0, end: 1, prefix: [0; 32] };
        let orphan = c.input(record("tool_error", Some("nowhere")), Some(&mark)).expect("marked");
        assert_eq!(orphan.kind, "x-tool_error");
        assert!(orphan.metadata_json.contains(r#""memex_orphan_result":true"#));
    }

    #[test]
    fn stored_events_are_counted_not_returned() {
        let mut c = Converter::default();
        assert!(c.input(record("tool_call", Some("t1")), None).is_none());
        let mark = Mark::Line { offset: 0, end: 1, prefix: [0; 32] };
        // The call was stored earlier: its result is no orphan, and the stand-in index counts it.
        assert_eq!(c.input(record("tool_result", Some("t1")), Some(&mark)).expect("marked").kind, "tool_result");
        assert_eq!(c.input(record("tool_call", None), Some(&mark)).expect("marked").tool_call_id, "memex-import-2");
        assert_ne!(Position::Byte(5).key("s"), Position::Message(5).key("s"));
    }
}
