//! The event as the context engine sees it: plain data, loaded by an adapter from the store.
use memex_event::EventKind;
use uuid::Uuid;

use crate::{LineRange, SeqRange};

/// An artifact an event points to: its content address and full size in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct ArtifactPointer {
    /// `blake3:<64 hex>`.
    pub id: String,
    pub size: u64,
}

/// What the metadata of an event says about its place in the context (TRACE §5.2): whether it
/// supersedes an earlier event, whether it is pinned, and its utility tags.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventFlags {
    /// `metadata.supersedes`: the id of the event this one replaces ("objective v3 supersedes v2").
    pub supersedes: Option<Uuid>,
    /// `metadata.pin = true`: always a candidate for its task's packs.
    pub pinned: bool,
    /// `metadata.utility`: tags such as `mistake`, `success`, `lesson`, `needed_for_final_report`.
    pub utility: Vec<String>,
}

impl EventFlags {
    /// Reads the flags from an event's metadata object; anything malformed is ignored (metadata is
    /// the client's, and a flag it got wrong must not make the event unreadable).
    pub fn from_metadata(metadata: Option<&serde_json::Value>) -> EventFlags {
        let Some(m) = metadata.and_then(|m| m.as_object()) else { return EventFlags::default() };
        let supersedes = m.get("supersedes").and_then(|v| v.as_str()).and_then(|s| Uuid::try_parse(s).ok());
        let pinned = m.get("pin").and_then(|v| v.as_bool()).unwrap_or(false);
        let mut utility: Vec<String> = match m.get("utility") {
            Some(serde_json::Value::String(s)) => vec![s.clone()],
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
            _ => Vec::new(),
        };
        utility.iter_mut().for_each(|u| *u = u.trim().to_ascii_lowercase());
        utility.retain(|u| !u.is_empty() && u.len() <= 64);
        utility.sort();
        utility.dedup();
        utility.truncate(16);
        EventFlags { supersedes, pinned, utility }
    }
}

/// One stored event, as the pure cores (scoring, packing, compaction) see it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ContextEvent {
    pub id: Uuid,
    pub session_id: Uuid,
    pub seq: u64,
    #[serde(with = "kind_name")]
    pub kind: EventKind,
    pub tool_name: Option<String>,
    /// The stored text: the full content, or the head…tail excerpt of an artifactized output.
    pub content: String,
    pub artifact: Option<ArtifactPointer>,
    /// The event's task: its own `task_id`, else its session's.
    pub task_id: Option<String>,
    /// The version of its task's state when the event was written (its premise reference).
    pub task_state_version: Option<u64>,
    /// Event time, milliseconds since the Unix epoch (recency is computed from data, not a clock).
    pub time_ms: i64,
    pub flags: EventFlags,
}

impl ContextEvent {
    pub fn seqs(&self) -> SeqRange {
        SeqRange::one(self.seq)
    }
}

/// Where an event sits in its session's full view, and its lines there (from VCC).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ViewBlock {
    pub range: LineRange,
    /// The block's lines; line `i` of this vector is full-view line `range.first + i`. Shared:
    /// the view seam keeps the blocks it has read, and an event's lines never change.
    pub lines: std::sync::Arc<[String]>,
}

mod kind_name {
    use memex_event::EventKind;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(k: &EventKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(k.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EventKind, D::Error> {
        let s = String::deserialize(d)?;
        EventKind::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flags_come_from_metadata_and_ignore_junk() {
        let id = Uuid::now_v7();
        let f = EventFlags::from_metadata(Some(&json!({
            "supersedes": id.to_string(), "pin": true, "utility": ["Mistake", " lesson ", "", "mistake"]
        })));
        assert_eq!(
            f,
            EventFlags { supersedes: Some(id), pinned: true, utility: vec!["lesson".into(), "mistake".into()] }
        );
        let junk = EventFlags::from_metadata(Some(&json!({"supersedes": 3, "pin": "yes", "utility": {"a": 1}})));
        assert_eq!(junk, EventFlags::default());
        assert_eq!(EventFlags::from_metadata(Some(&json!({"utility": "success"}))).utility, vec!["success"]);
        assert_eq!(EventFlags::from_metadata(None), EventFlags::default());
    }
}
