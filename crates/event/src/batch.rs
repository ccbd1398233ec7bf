//! Validation of an append batch: every check that needs no database, so a bad batch is refused
//! before anything is written, with the offending field named.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use crate::artifact::{ArtifactId, ArtifactPolicy, DEFAULT_MEDIA_TYPE, excerpt};
use crate::kind::EventKind;

/// One event as a client sends it (the proto message, minus transport details).
/// Empty strings mean "not given", as in proto3.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventInput {
    pub kind: String,
    pub content: String,
    pub agent_id: String,
    pub task_id: String,
    pub tool_name: String,
    pub tool_call_id: String,
    pub event_time: Option<DateTime<Utc>>,
    /// A JSON object, as text; empty for none.
    pub metadata_json: String,
    /// Media type of the content, recorded on the artifact if the content is artifactized.
    pub media_type: String,
}

/// A validated event, ready to be written. `content` is what the events table stores: the full
/// text, or the excerpt when `artifact` holds the full body.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: EventKind,
    pub content: String,
    pub artifact: Option<NewArtifact>,
    pub agent_id: Option<String>,
    pub task_id: Option<String>,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    pub event_time: Option<DateTime<Utc>>,
    pub metadata: Option<serde_json::Value>,
}

/// The full body of an artifactized event.
#[derive(Debug, Clone, PartialEq)]
pub struct NewArtifact {
    pub id: ArtifactId,
    pub body: String,
    pub media_type: String,
}

/// Limits on one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchLimits {
    pub max_events: usize,
    /// Longest accepted identifier (agent id, task id, tool name, tool-call id), in bytes.
    pub max_id_bytes: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits { max_events: 10_000, max_id_bytes: 256 }
    }
}

/// A rejected input, naming the field: `events[3].tool_call_id: …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError { field: field.into(), message: message.into() }
    }
}

/// A batch that passed every database-free check.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedBatch {
    pub events: Vec<NewEvent>,
    /// Tool-call ids named by results in this batch whose call is not in the batch: the store
    /// must find each of them among the session's earlier tool calls.
    pub external_tool_calls: Vec<(usize, String)>,
}

/// Validates a batch and artifactizes large tool outputs.
///
/// Rules: the batch is non-empty and within `limits.max_events`; every kind is known or an
/// extension kind; a tool call names its tool and call id; a tool result or error names the call it
/// answers, and a call in the same batch comes before its result; identifiers are within
/// `limits.max_id_bytes` and have no control characters; metadata is a JSON object without NUL
/// characters (Postgres jsonb cannot hold them).
pub fn prepare_batch(
    inputs: Vec<EventInput>,
    limits: &BatchLimits,
    policy: &ArtifactPolicy,
) -> Result<PreparedBatch, FieldError> {
    if inputs.is_empty() {
        return Err(FieldError::new("events", "the batch is empty; send at least one event"));
    }
    if inputs.len() > limits.max_events {
        return Err(FieldError::new(
            "events",
            format!("the batch has {} events, over the limit of {}", inputs.len(), limits.max_events),
        ));
    }
    let mut calls_in_batch: HashSet<String> = HashSet::new();
    let mut external = Vec::new();
    let mut events = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.into_iter().enumerate() {
        let event = prepare_event(i, input, limits, policy)?;
        if event.kind == EventKind::ToolCall
            && let Some(id) = &event.tool_call_id
        {
            calls_in_batch.insert(id.clone());
        }
        if event.kind.is_tool_output()
            && let Some(id) = &event.tool_call_id
            && !calls_in_batch.contains(id)
        {
            external.push((i, id.clone()));
        }
        events.push(event);
    }
    Ok(PreparedBatch { events, external_tool_calls: external })
}

/// A hash identifying a batch's content, so a reused idempotency key can be told apart from a retry:
/// BLAKE3 over the session id and every field of every event, each length-prefixed.
pub fn batch_fingerprint(session_id: &str, inputs: &[EventInput]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(session_id.as_bytes());
    for e in inputs {
        for text in [
            &e.kind,
            &e.content,
            &e.agent_id,
            &e.task_id,
            &e.tool_name,
            &e.tool_call_id,
            &e.metadata_json,
            &e.media_type,
        ] {
            field(text.as_bytes());
        }
        let time = e.event_time.map(|t| t.timestamp_nanos_opt().unwrap_or(i64::MIN)).unwrap_or(i64::MAX);
        field(&time.to_le_bytes());
    }
    h.finalize().into()
}

fn prepare_event(
    i: usize,
    input: EventInput,
    limits: &BatchLimits,
    policy: &ArtifactPolicy,
) -> Result<NewEvent, FieldError> {
    let field = |name: &str| format!("events[{i}].{name}");
    let kind = EventKind::parse(&input.kind).map_err(|e| FieldError::new(field("kind"), e.to_string()))?;
    let ident = |name: &str, value: String| -> Result<Option<String>, FieldError> {
        if value.is_empty() {
            return Ok(None);
        }
        if value.len() > limits.max_id_bytes {
            return Err(FieldError::new(
                field(name),
                format!("is {} bytes long, over the limit of {}", value.len(), limits.max_id_bytes),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(FieldError::new(field(name), "contains control characters"));
        }
        Ok(Some(value))
    };
    let agent_id = ident("agent_id", input.agent_id)?;
    let task_id = ident("task_id", input.task_id)?;
    let tool_name = ident("tool_name", input.tool_name)?;
    let tool_call_id = ident("tool_call_id", input.tool_call_id)?;
    if kind == EventKind::ToolCall {
        if tool_name.is_none() {
            return Err(FieldError::new(field("tool_name"), "a tool_call must name its tool"));
        }
        if tool_call_id.is_none() {
            return Err(FieldError::new(field("tool_call_id"), "a tool_call needs an id so its result can name it"));
        }
    }
    if kind.is_tool_output() && tool_call_id.is_none() {
        return Err(FieldError::new(field("tool_call_id"), format!("a {kind} must name the tool call it answers")));
    }
    let metadata = parse_metadata(&input.metadata_json).map_err(|m| FieldError::new(field("metadata_json"), m))?;
    let media_type = if input.media_type.is_empty() {
        DEFAULT_MEDIA_TYPE.to_owned()
    } else {
        check_media_type(&input.media_type).map_err(|m| FieldError::new(field("media_type"), m))?;
        input.media_type
    };
    let must_artifactize =
        (kind.is_tool_output() && input.content.len() > policy.threshold_bytes) || input.content.contains('\0');
    let (content, artifact) = if must_artifactize {
        let id = ArtifactId::of(input.content.as_bytes());
        let inline = excerpt(&input.content, &id, policy);
        (inline, Some(NewArtifact { id, body: input.content, media_type }))
    } else {
        (input.content, None)
    };
    Ok(NewEvent {
        kind,
        content,
        artifact,
        agent_id,
        task_id,
        tool_name,
        tool_call_id,
        event_time: input.event_time,
        metadata,
    })
}

fn parse_metadata(text: &str) -> Result<Option<serde_json::Value>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("is not valid JSON: {e}"))?;
    if !value.is_object() {
        return Err("must be a JSON object".to_owned());
    }
    if text.contains("\\u0000") || text.contains('\0') {
        return Err("contains a NUL character, which Postgres jsonb cannot store".to_owned());
    }
    Ok(Some(value))
}

fn check_media_type(mt: &str) -> Result<(), String> {
    let ok = mt.len() <= 255
        && mt.is_ascii()
        && !mt.chars().any(|c| c.is_ascii_control())
        && mt.split(';').next().is_some_and(|t| {
            let mut parts = t.trim().split('/');
            matches!((parts.next(), parts.next(), parts.next()), (Some(a), Some(b), None) if !a.is_empty() && !b.is_empty())
        });
    if ok { Ok(()) } else { Err(format!("{mt:?} is not a media type like \"text/plain\"")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str) -> EventInput {
        EventInput { kind: kind.into(), content: "x".into(), ..Default::default() }
    }

    fn call(id: &str) -> EventInput {
        EventInput { tool_name: "Bash".into(), tool_call_id: id.into(), ..ev("tool_call") }
    }

    fn result(id: &str) -> EventInput {
        EventInput { tool_call_id: id.into(), ..ev("tool_result") }
    }

    fn prepare(inputs: Vec<EventInput>) -> Result<PreparedBatch, FieldError> {
        prepare_batch(inputs, &BatchLimits::default(), &ArtifactPolicy::default())
    }

    fn err_field(inputs: Vec<EventInput>) -> String {
        prepare(inputs).err().map(|e| e.field).unwrap_or_default()
    }

    #[test]
    fn empty_and_oversized_batches_are_refused() {
        assert_eq!(err_field(vec![]), "events");
        let limits = BatchLimits { max_events: 2, ..Default::default() };
        let err = prepare_batch(vec![ev("note"); 3], &limits, &ArtifactPolicy::default()).err();
        assert_eq!(err.map(|e| e.to_string()).as_deref(), Some("events: the batch has 3 events, over the limit of 2"));
    }

    #[test]
    fn fields_are_named_in_errors() {
        assert_eq!(err_field(vec![ev("note"), ev("")]), "events[1].kind");
        assert_eq!(err_field(vec![ev("bogus")]), "events[0].kind");
        assert_eq!(err_field(vec![EventInput { tool_call_id: "c".into(), ..ev("tool_call") }]), "events[0].tool_name");
        assert_eq!(err_field(vec![EventInput { tool_name: "B".into(), ..ev("tool_call") }]), "events[0].tool_call_id");
        assert_eq!(err_field(vec![ev("tool_error")]), "events[0].tool_call_id");
        assert_eq!(
            err_field(vec![EventInput { metadata_json: "[1]".into(), ..ev("note") }]),
            "events[0].metadata_json"
        );
        assert_eq!(err_field(vec![EventInput { metadata_json: "{".into(), ..ev("note") }]), "events[0].metadata_json");
        assert_eq!(
            err_field(vec![EventInput { metadata_json: r#"{"a":"\u0000"}"#.into(), ..ev("note") }]),
            "events[0].metadata_json"
        );
        assert_eq!(err_field(vec![EventInput { agent_id: "a\nb".into(), ..ev("note") }]), "events[0].agent_id");
        assert_eq!(err_field(vec![EventInput { task_id: "t".repeat(300), ..ev("note") }]), "events[0].task_id");
        assert_eq!(err_field(vec![EventInput { media_type: "text".into(), ..ev("note") }]), "events[0].media_type");
    }

    #[test]
    fn results_pair_with_calls_in_the_batch_or_are_left_to_the_store() {
        let ok = prepare(vec![call("c1"), result("c1"), result("c0")]).expect("valid");
        assert_eq!(ok.external_tool_calls, vec![(2, "c0".to_owned())]);
        // A result before its call in the same batch is not paired with it.
        let early = prepare(vec![result("c1"), call("c1")]).expect("valid");
        assert_eq!(early.external_tool_calls, vec![(0, "c1".to_owned())]);
    }

    #[test]
    fn large_tool_outputs_become_artifacts_with_an_excerpt() {
        let body = "y\n".repeat(10_000);
        let mut big = result("c1");
        big.content = body.clone();
        let mut big_note = ev("note");
        big_note.content = body.clone();
        let batch = prepare(vec![call("c1"), big, big_note]).expect("valid");
        let art = batch.events[1].artifact.as_ref().expect("artifactized");
        assert_eq!(art.body, body);
        assert_eq!(art.id, ArtifactId::of(body.as_bytes()));
        assert_eq!(art.media_type, DEFAULT_MEDIA_TYPE);
        assert!(batch.events[1].content.len() < 8 * 1024 + 200);
        assert!(batch.events[1].content.contains(&art.id.to_string()));
        // Only tool outputs are artifactized for size.
        assert!(batch.events[2].artifact.is_none());
        assert_eq!(batch.events[2].content, body);
    }

    #[test]
    fn fingerprints_tell_batches_apart() {
        let a = vec![ev("note")];
        let mut b = a.clone();
        b[0].content = "y".into();
        assert_eq!(batch_fingerprint("s", &a), batch_fingerprint("s", &a));
        assert_ne!(batch_fingerprint("s", &a), batch_fingerprint("s", &b));
        assert_ne!(batch_fingerprint("s", &a), batch_fingerprint("t", &a));
        // Field boundaries matter: moving a byte between fields changes the hash.
        let c = vec![EventInput { kind: "no".into(), content: "tex".into(), ..Default::default() }];
        let d = vec![EventInput { kind: "not".into(), content: "ex".into(), ..Default::default() }];
        assert_ne!(batch_fingerprint("s", &c), batch_fingerprint("s", &d));
    }

    #[test]
    fn content_with_nul_is_kept_exactly_in_an_artifact() {
        let mut note = ev("note");
        note.content = "a\0b".into();
        let batch = prepare(vec![note]).expect("valid");
        assert_eq!(batch.events[0].artifact.as_ref().map(|a| a.body.as_str()), Some("a\0b"));
        assert!(!batch.events[0].content.contains('\0'));
    }
}
