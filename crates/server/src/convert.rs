//! Wire ↔ domain conversions. Field paths in errors follow the request (`events[2].event_time`).
use chrono::{DateTime, Utc};
use memex_proto::v1 as pb;
use memex_store::{Access, ApiKey, ArtifactRef, Event, Session};
use tonic::Status;

pub fn timestamp(t: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: t.timestamp(), nanos: t.timestamp_subsec_nanos() as i32 }
}

pub fn from_timestamp(field: &str, t: &prost_types::Timestamp) -> Result<DateTime<Utc>, Status> {
    u32::try_from(t.nanos)
        .ok()
        .and_then(|n| DateTime::from_timestamp(t.seconds, n))
        .ok_or_else(|| Status::invalid_argument(format!("{field}: not a valid timestamp")))
}

pub fn event_inputs(events: Vec<pb::EventInput>, prefix: &str) -> Result<Vec<memex_event::EventInput>, Status> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let event_time = e
                .event_time
                .as_ref()
                .map(|t| from_timestamp(&format!("{prefix}events[{i}].event_time"), t))
                .transpose()?;
            Ok(memex_event::EventInput {
                kind: e.kind,
                content: e.content,
                agent_id: e.agent_id,
                task_id: e.task_id,
                tool_name: e.tool_name,
                tool_call_id: e.tool_call_id,
                event_time,
                metadata_json: e.metadata_json,
                media_type: e.media_type,
            })
        })
        .collect()
}

pub fn artifact_ref(a: &ArtifactRef) -> pb::ArtifactRef {
    pb::ArtifactRef { id: a.id.to_string(), size: a.size, media_type: a.media_type.clone() }
}

pub fn event(e: Event) -> pb::Event {
    pb::Event {
        id: e.id.to_string(),
        session_id: e.session_id.to_string(),
        seq: e.seq,
        kind: e.kind,
        content: e.content,
        artifact: e.artifact.as_ref().map(artifact_ref),
        agent_id: e.agent_id,
        task_id: e.task_id.unwrap_or_default(),
        tool_name: e.tool_name.unwrap_or_default(),
        tool_call_id: e.tool_call_id.unwrap_or_default(),
        event_time: Some(timestamp(e.event_time)),
        ingest_time: Some(timestamp(e.ingest_time)),
        metadata_json: e.metadata.map(|m| m.to_string()).unwrap_or_default(),
        lines: None,
        task_state_version: e.task_state_version.unwrap_or(0),
    }
}

pub fn session(s: Session, namespace: &str) -> pb::Session {
    pb::Session {
        id: s.id.to_string(),
        namespace: namespace.to_owned(),
        agent_id: s.agent_id,
        parent_session_id: s.parent_session_id.map(|p| p.to_string()).unwrap_or_default(),
        task_id: s.task_id.unwrap_or_default(),
        source_format: s.source_format,
        created_at: Some(timestamp(s.created_at)),
        metadata_json: s.metadata.map(|m| m.to_string()).unwrap_or_default(),
        event_count: s.event_count,
        source_artifact_id: s.source.as_ref().map(|src| src.artifact.to_string()).unwrap_or_default(),
        source_file_name: s.source.map(|src| src.file_name).unwrap_or_default(),
    }
}

pub fn access(r: pb::Right) -> Option<Access> {
    match r {
        pb::Right::Read => Some(Access::Read),
        pb::Right::Write => Some(Access::Write),
        pb::Right::Admin => Some(Access::Admin),
        pb::Right::Unspecified => None,
    }
}

pub fn api_key(k: &ApiKey) -> pb::ApiKey {
    let right = match k.access {
        Access::Read => pb::Right::Read,
        Access::Write => pb::Right::Write,
        Access::Admin => pb::Right::Admin,
    };
    pb::ApiKey {
        id: k.id.to_string(),
        namespace: k.namespace.name.clone(),
        name: k.name.clone(),
        right: right as i32,
        created_at: Some(timestamp(k.created_at)),
        revoked_at: k.revoked_at.map(timestamp),
        expires_at: k.expires_at.map(timestamp),
    }
}

/// Parses an optional JSON-object text field.
pub fn metadata(field: &str, text: &str) -> Result<Option<serde_json::Value>, Status> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) if v.is_object() && !text.contains("\\u0000") => Ok(Some(v)),
        Ok(_) => Err(Status::invalid_argument(format!("{field}: must be a JSON object without NUL characters"))),
        Err(e) => Err(Status::invalid_argument(format!("{field}: is not valid JSON: {e}"))),
    }
}

/// An optional identifier: bounded length, no control characters.
pub fn ident(field: &str, value: String, max: usize) -> Result<Option<String>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    if value.len() > max {
        return Err(Status::invalid_argument(format!(
            "{field}: is {} bytes long, over the limit of {max}",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Status::invalid_argument(format!("{field}: contains control characters")));
    }
    Ok(Some(value))
}
