//! From a stored event to the documents that index it. Pure: the same event always gives the same
//! documents, which is what makes a rebuilt index equal to the live one.
use memex_event::role_of_kind;
use memex_rank::{ChunkOptions, chunk_text};
use memex_store::Event;

use memex_pointer::LineRange;

/// One tantivy document, as plain data.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DocSpec {
    pub event_id: uuid::Uuid,
    pub session: uuid::Uuid,
    pub seq: u64,
    pub source: &'static str,
    pub chunk: u32,
    pub task: Option<String>,
    pub agent: String,
    pub kind: String,
    pub role: &'static str,
    pub tool: Option<String>,
    pub time_micros: i64,
    /// Where the event sits in its session's full view, when that can never change.
    pub lines: Option<LineRange>,
    pub chunk_first_line: u32,
    pub chunk_last_line: u32,
    pub doc_key: u64,
    pub text: String,
    /// Text of the preceding events (on the event's first chunk only).
    pub context: String,
}

/// What part of an event is searchable text: the content, with the tool's name in front for tool
/// calls (so "Bash" or "str_replace_editor" finds the calls).
pub(crate) fn event_text(e: &Event) -> String {
    match (&e.tool_name, e.kind.as_str()) {
        (Some(tool), "tool_call") => format!("{tool} {}", e.content),
        _ => e.content.clone(),
    }
}

/// The text embedded for an event: its searchable text, cut to `max_bytes` on a character
/// boundary (the model truncates to 256 tokens anyway; this bounds tokenizer work).
pub(crate) fn embed_text(e: &Event, max_bytes: usize) -> String {
    let mut t = event_text(e);
    if t.len() > max_bytes {
        let mut cut = max_bytes;
        while !t.is_char_boundary(cut) {
            cut -= 1;
        }
        t.truncate(cut);
    }
    t
}

/// The documents of one event: its text in chunks (always at least one, possibly empty, so every
/// indexed event leaves a trace the watermark scan can find), then the artifact's text in chunks.
pub(crate) fn event_docs(
    e: &Event,
    artifact_text: Option<&str>,
    lines: Option<LineRange>,
    chunk: ChunkOptions,
    context: &str,
) -> Vec<DocSpec> {
    let mut docs = Vec::new();
    let text = event_text(e);
    let mut push = |source: &'static str, text: &str| {
        for (i, c) in chunk_text(text, chunk).into_iter().enumerate() {
            if source == "artifact" && c.start == c.end {
                continue;
            }
            docs.push(DocSpec {
                event_id: e.id,
                session: e.session_id,
                seq: e.seq,
                source,
                chunk: i as u32,
                task: e.task_id.clone(),
                agent: e.agent_id.clone(),
                kind: e.kind.clone(),
                role: role_of_kind(&e.kind).as_str(),
                tool: e.tool_name.clone(),
                time_micros: e.event_time.timestamp_micros(),
                lines,
                chunk_first_line: c.first_line,
                chunk_last_line: c.last_line,
                doc_key: doc_key(&e.id, source, i as u32),
                text: text[c.start..c.end].to_owned(),
                context: if source == "event" && i == 0 { context.to_owned() } else { String::new() },
            });
        }
    };
    push("event", &text);
    if let Some(a) = artifact_text {
        push("artifact", a);
    }
    docs
}

/// FNV-1a over the document's identity: stable across builds and machines.
fn doc_key(event_id: &uuid::Uuid, source: &str, chunk: u32) -> u64 {
    fnv(fnv(0xcbf2_9ce4_8422_2325, event_id.as_bytes().iter().chain(source.as_bytes())), &chunk.to_le_bytes())
}

fn fnv<'a>(mut h: u64, bytes: impl IntoIterator<Item = &'a u8>) -> u64 {
    for b in bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Whether `key` is the document key of one of the event's own first `chunks` chunks (not of its
/// artifact's): the identity's common prefix is hashed once.
pub(crate) fn is_event_chunk_key(event_id: &uuid::Uuid, key: u64, chunks: u32) -> bool {
    let prefix = fnv(0xcbf2_9ce4_8422_2325, event_id.as_bytes().iter().chain(b"event"));
    (0..chunks).any(|i| fnv(prefix, &i.to_le_bytes()) == key)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use chrono::Utc;
    use uuid::Uuid;

    use super::*;

    fn event(kind: &str, content: &str) -> Event {
        Event {
            id: Uuid::now_v7(),
            session_id: Uuid::now_v7(),
            seq: 3,
            kind: kind.into(),
            content: content.into(),
            artifact: None,
            agent_id: "a".into(),
            task_id: None,
            tool_name: Some("Bash".into()),
            tool_call_id: Some("c".into()),
            event_time: Utc::now(),
            ingest_time: Utc::now(),
            metadata: None,
            task_state_version: None,
        }
    }

    #[test]
    fn document_keys_are_stable_and_tell_event_chunks_from_artifact_chunks() {
        // Keys are stored in indexes: the same identity gives the same key on every build.
        let id = Uuid::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(doc_key(&id, "artifact", 3), 0xb57b_ef24_3d05_6928);
        assert!(is_event_chunk_key(&id, doc_key(&id, "event", 0), 64));
        assert!(is_event_chunk_key(&id, doc_key(&id, "event", 63), 64));
        assert!(!is_event_chunk_key(&id, doc_key(&id, "event", 64), 64));
        assert!(!is_event_chunk_key(&id, doc_key(&id, "artifact", 0), 64));
        assert!(!is_event_chunk_key(&Uuid::from_u128(1), doc_key(&id, "event", 0), 64));
    }

    #[test]
    fn every_event_has_a_document_and_chunks_carry_their_lines() {
        let e = event("tool_result", "");
        let d = event_docs(&e, None, None, ChunkOptions::default(), "");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].role, "tool");
        let long = "line\n".repeat(1000);
        let d = event_docs(
            &e,
            Some(&long),
            Some(LineRange { first: 10, last: 20 }),
            ChunkOptions { max_bytes: 1000 },
            "ctx",
        );
        assert_eq!((d[0].source, d[0].context.as_str(), d[1].context.as_str()), ("event", "ctx", ""));
        assert_eq!(d.iter().filter(|x| x.source == "artifact").count(), 5);
        assert_eq!(d[2].chunk_first_line, 200);
        assert_eq!(d[2].lines, Some(LineRange { first: 10, last: 20 }));
        let keys: std::collections::HashSet<u64> = d.iter().map(|x| x.doc_key).collect();
        assert_eq!(keys.len(), d.len());
        assert_eq!(event_docs(&e, Some(&long), None, ChunkOptions { max_bytes: 1000 }, "")[3].doc_key, d[3].doc_key);
    }

    #[test]
    fn tool_calls_are_found_by_tool_name_and_embed_text_is_bounded() {
        let e = event("tool_call", "{\"command\":\"ls\"}");
        assert!(event_text(&e).starts_with("Bash "));
        let e = event("user_message", &"é".repeat(100));
        assert_eq!(embed_text(&e, 11).len(), 10);
    }
}
