//! Rows as the store returns them.
use chrono::{DateTime, Utc};
use memex_event::ArtifactId;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub id: Uuid,
    pub namespace_id: Uuid,
    pub agent_id: String,
    pub parent_session_id: Option<Uuid>,
    pub task_id: Option<String>,
    pub source_format: String,
    pub metadata: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    /// Number of events, which is also the seq of the last one.
    pub event_count: u64,
    /// For an imported trace: the raw file, kept as an artifact, and its name.
    pub source: Option<SessionSource>,
    /// The erasure that emptied this session (its events are tombstones; it takes no appends).
    pub erased_by: Option<Uuid>,
}

/// Where an imported session's events came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSource {
    pub artifact: ArtifactId,
    pub file_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactRef {
    pub id: ArtifactId,
    pub size: u64,
    pub media_type: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: Uuid,
    pub session_id: Uuid,
    pub seq: u64,
    pub kind: String,
    /// The full text, or the excerpt when `artifact` is set.
    pub content: String,
    pub artifact: Option<ArtifactRef>,
    pub agent_id: String,
    pub task_id: Option<String>,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    pub event_time: DateTime<Utc>,
    pub ingest_time: DateTime<Utc>,
    pub metadata: Option<serde_json::Value>,
    /// The version of its task's state when the event was written (None: the task had no state).
    pub task_state_version: Option<u64>,
}

impl Event {
    /// The JSON-lines record of the event: what `GetEvents` clients print and the views compile
    /// (the `memex` input format).
    pub fn into_record(self) -> memex_event::EventRecord {
        memex_event::EventRecord {
            id: self.id.to_string(),
            session_id: self.session_id.to_string(),
            seq: self.seq,
            kind: self.kind,
            agent_id: Some(self.agent_id),
            task_id: self.task_id,
            tool_name: self.tool_name,
            tool_call_id: self.tool_call_id,
            event_time: Some(self.event_time),
            ingest_time: Some(self.ingest_time),
            content: self.content,
            artifact: self.artifact.map(|a| memex_event::ArtifactRecord {
                id: a.id.to_string(),
                size: a.size,
                media_type: a.media_type,
            }),
            metadata: self.metadata,
        }
    }
}

/// The result of an append, or of the replay of a keyed one.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendOutcome {
    pub session_id: Uuid,
    pub first_seq: u64,
    pub last_seq: u64,
    pub event_ids: Vec<Uuid>,
    pub replayed: bool,
    /// The artifacts of artifactized events, in event order.
    pub artifacts: Vec<ArtifactRef>,
}
