//! The JSON-lines form of a stored event (`memex events`, the `memex` input format of `memex view`).
//! One object per line, fields in this order, absent values as `null`.
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub id: String,
    pub session_id: String,
    pub seq: u64,
    pub kind: String,
    pub agent_id: Option<String>,
    pub task_id: Option<String>,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    pub event_time: Option<DateTime<Utc>>,
    pub ingest_time: Option<DateTime<Utc>>,
    pub content: String,
    pub artifact: Option<ArtifactRecord>,
    pub metadata: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    /// `blake3:<64 hex>`.
    pub id: String,
    pub size: u64,
    pub media_type: String,
}

impl EventRecord {
    /// One line of JSON, without the newline. Timestamps are RFC 3339 with microseconds and `Z`,
    /// so the same event always prints the same bytes.
    pub fn to_json_line(&self) -> String {
        // Serializing plain strings, numbers and JSON values cannot fail.
        serde_json::to_string(&Wire::from(self)).unwrap_or_default()
    }
}

/// The serialized shape, with timestamps pinned to one format.
#[derive(Serialize)]
struct Wire<'a> {
    id: &'a str,
    session_id: &'a str,
    seq: u64,
    kind: &'a str,
    agent_id: Option<&'a str>,
    task_id: Option<&'a str>,
    tool_name: Option<&'a str>,
    tool_call_id: Option<&'a str>,
    event_time: Option<String>,
    ingest_time: Option<String>,
    content: &'a str,
    artifact: Option<&'a ArtifactRecord>,
    metadata: Option<&'a serde_json::Value>,
}

fn rfc3339(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl<'a> From<&'a EventRecord> for Wire<'a> {
    fn from(e: &'a EventRecord) -> Self {
        Wire {
            id: &e.id,
            session_id: &e.session_id,
            seq: e.seq,
            kind: &e.kind,
            agent_id: e.agent_id.as_deref(),
            task_id: e.task_id.as_deref(),
            tool_name: e.tool_name.as_deref(),
            tool_call_id: e.tool_call_id.as_deref(),
            event_time: e.event_time.as_ref().map(rfc3339),
            ingest_time: e.ingest_time.as_ref().map(rfc3339),
            content: &e.content,
            artifact: e.artifact.as_ref(),
            metadata: e.metadata.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_is_stable_and_parses_back() {
        let t = DateTime::from_timestamp(1_795_000_000, 123_456_000).expect("time");
        let rec = EventRecord {
            id: "0190c3a0-7b1e-7c3a-9f00-0a1b2c3d4e5f".into(),
            session_id: "0190c3a0-0000-7000-8000-000000000000".into(),
            seq: 3,
            kind: "tool_result".into(),
            agent_id: Some("exec".into()),
            task_id: None,
            tool_name: None,
            tool_call_id: Some("call_1".into()),
            event_time: Some(t),
            ingest_time: Some(t),
            content: "ok\n".into(),
            artifact: None,
            metadata: Some(serde_json::json!({"b": 1, "a": 2})),
        };
        let line = rec.to_json_line();
        assert!(line.starts_with(r#"{"id":"0190c3a0-7b1e-7c3a-9f00-0a1b2c3d4e5f","session_id":"#), "{line}");
        assert!(line.contains(r#""event_time":"2026-11-18T"#) && line.contains(".123456Z"), "{line}");
        let back: EventRecord = serde_json::from_str(&line).expect("parse");
        assert_eq!(back, rec);
    }
}
