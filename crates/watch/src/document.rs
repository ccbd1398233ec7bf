//! The tail of a Gemini CLI session: one JSON document the agent rewrites whole on every change.
//! Each version read is mapped message by message, and only the messages beyond those stored
//! are returned.
//!
//! The last message is still being written (its tool calls gain statuses and results), so it is
//! held back until a later message follows it, or until the caller says the document is at rest
//! ([`LastMessage`]). Stored messages are checked by the hash of their events, not of their
//! bytes, which the agent rewrites (token counts, `lastUpdated`). Pure.

use memex_vcc::{Diagnostic, EventRecord, InputFormat, document_events};

use crate::input::{Converter, Mark};
use crate::{Record, Rewritten};

/// Where a stored session left its document: the next message to store, and the hash of the
/// events of the messages before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocumentResume {
    pub next: u64,
    pub prefix: [u8; 32],
}

/// What to do with the document's last message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastMessage {
    /// Hold it back: the agent may still be writing it.
    Hold,
    /// Take it if none of its tool calls is still running (the document has been quiet).
    IfSettled,
    /// Take it as it is (`--once`: the files are taken as they are now).
    Take,
}

/// What reading one version of the document gave.
#[derive(Debug, PartialEq)]
pub enum DocumentUpdate {
    /// The messages not stored yet (possibly none).
    Records(Vec<Record>),
    /// The document does not parse (a rewrite caught half-written?): try the next version.
    Unreadable(Diagnostic),
}

pub struct DocumentTailer {
    format: InputFormat,
    /// Stored (or handed out): messages `0..next`, whose events hash to `prefix`.
    resume: DocumentResume,
}

impl DocumentTailer {
    pub fn new(format: InputFormat, resume: Option<DocumentResume>) -> DocumentTailer {
        let resume = resume.unwrap_or(DocumentResume { next: 0, prefix: *blake3::Hasher::new().finalize().as_bytes() });
        DocumentTailer { format, resume }
    }

    /// The messages handed out so far.
    pub fn next_message(&self) -> u64 {
        self.resume.next
    }

    /// Reads one version of the whole document. An error means a stored message is gone or
    /// changed: the document is not the one the store's events came from.
    pub fn update(&mut self, bytes: &[u8], last: LastMessage) -> Result<DocumentUpdate, Rewritten> {
        let messages = match document_events(bytes, self.format) {
            Ok(m) => m,
            Err(d) => return Ok(DocumentUpdate::Unreadable(d)),
        };
        let n = messages.len() as u64;
        if n < self.resume.next {
            return Err(Rewritten::Shrank { len: n, stored: self.resume.next });
        }
        let take_last = match last {
            LastMessage::Hold => false,
            LastMessage::IfSettled => messages.last().is_some_and(|m| m.settled),
            LastMessage::Take => true,
        };
        let limit = if take_last { n } else { n.saturating_sub(1) }.max(self.resume.next);
        let mut convert = Converter::default();
        let mut hasher = blake3::Hasher::new();
        let mut out = Vec::new();
        let mut prefix = self.resume.prefix;
        for (i, m) in (0u64..).zip(messages) {
            if i >= limit {
                break;
            }
            hash_events(&mut hasher, &m.events);
            let hash: [u8; 32] = hasher.finalize().into();
            if i + 1 == self.resume.next && hash != self.resume.prefix {
                return Err(Rewritten::Changed { at: i });
            }
            let fresh = i >= self.resume.next;
            let mark = Mark::Message { index: i, prefix: hash };
            let events: Vec<_> =
                m.events.into_iter().filter_map(|e| convert.input(e, fresh.then_some(&mark))).collect();
            if fresh && !events.is_empty() {
                out.push(Record { mark, events });
            }
            prefix = hash;
        }
        self.resume = DocumentResume { next: limit, prefix };
        Ok(DocumentUpdate::Records(out))
    }
}

/// Chains the events of one message into the running hash (a message without events adds
/// nothing, so the stored mark of the last message with events checks every message before it).
fn hash_events(hasher: &mut blake3::Hasher, events: &[EventRecord]) {
    for e in events {
        let bytes = serde_json::to_vec(e).unwrap_or_default();
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(messages: &[&str]) -> String {
        format!(
            "{{\n  \"sessionId\": \"s\",\n  \"projectHash\": \"p\",\n  \"messages\": [{}]\n}}\n",
            messages.join(",\n")
        )
    }

    const USER: &str = r#"{"id": "1", "type": "user", "content": "hello"}"#;
    const GEMINI: &str = r#"{"id": "2", "type": "gemini", "content": "hi", "tokens": {"input": 5}}"#;
    const RUNNING: &str = r#"{"id": "3", "type": "gemini", "content": "", "toolCalls": [{"id": "c1", "name": "ls", "args": {}, "status": "executing"}]}"#;
    const DONE: &str = r#"{"id": "3", "type": "gemini", "content": "", "toolCalls": [{"id": "c1", "name": "ls", "args": {}, "status": "success", "result": [{"functionResponse": {"response": {"output": "a"}}}]}]}"#;

    fn records(u: Result<DocumentUpdate, Rewritten>) -> Vec<Record> {
        match u.expect("same document") {
            DocumentUpdate::Records(r) => r,
            DocumentUpdate::Unreadable(d) => panic!("unreadable: {d:?}"),
        }
    }

    fn indexes(records: &[Record]) -> Vec<u64> {
        records
            .iter()
            .map(|r| match r.mark {
                Mark::Message { index, .. } => index,
                Mark::Line { .. } => panic!("a message mark"),
            })
            .collect()
    }

    #[test]
    fn the_last_message_waits_until_another_follows_it() {
        let mut t = DocumentTailer::new(InputFormat::Auto, None);
        assert!(records(t.update(doc(&[USER]).as_bytes(), LastMessage::Hold)).is_empty());
        assert_eq!(indexes(&records(t.update(doc(&[USER, GEMINI]).as_bytes(), LastMessage::Hold))), [0]);
        // Token counts rewritten in a stored message change nothing.
        let recounted = GEMINI.replace("5", "6");
        let got = records(t.update(doc(&[USER, &recounted, RUNNING]).as_bytes(), LastMessage::Hold));
        assert_eq!(indexes(&got), [1]);
        // A running tool call keeps the last message back even when quiet; once done, it goes.
        let settled = LastMessage::IfSettled;
        assert!(records(t.update(doc(&[USER, GEMINI, RUNNING]).as_bytes(), settled)).is_empty());
        let got = records(t.update(doc(&[USER, GEMINI, DONE]).as_bytes(), settled));
        assert_eq!(indexes(&got), [2]);
        assert_eq!(got[0].events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["tool_call", "tool_result"]);
        assert_eq!(t.next_message(), 3);
    }

    #[test]
    fn a_half_written_version_is_skipped_not_an_error() {
        let mut t = DocumentTailer::new(InputFormat::Auto, None);
        let full = doc(&[USER, GEMINI]);
        let half = &full.as_bytes()[..full.len() / 2];
        assert!(matches!(t.update(half, LastMessage::Take), Ok(DocumentUpdate::Unreadable(_))));
        assert_eq!(indexes(&records(t.update(full.as_bytes(), LastMessage::Take))), [0, 1]);
    }

    #[test]
    fn a_resumed_tail_checks_what_was_stored() {
        let mut first = DocumentTailer::new(InputFormat::Auto, None);
        let got = records(first.update(doc(&[USER, GEMINI]).as_bytes(), LastMessage::Take));
        let Mark::Message { index, prefix } = got[1].mark else { panic!("a message mark") };
        let resume = DocumentResume { next: index + 1, prefix };
        let mut again = DocumentTailer::new(InputFormat::Auto, Some(resume));
        assert_eq!(indexes(&records(again.update(doc(&[USER, GEMINI, DONE]).as_bytes(), LastMessage::Take))), [2]);
        let mut edited = DocumentTailer::new(InputFormat::Auto, Some(resume));
        let other = GEMINI.replace("hi", "bye");
        assert_eq!(
            edited.update(doc(&[USER, &other]).as_bytes(), LastMessage::Take),
            Err(Rewritten::Changed { at: 1 })
        );
        let mut shorter = DocumentTailer::new(InputFormat::Auto, Some(resume));
        assert_eq!(
            shorter.update(doc(&[USER]).as_bytes(), LastMessage::Take),
            Err(Rewritten::Shrank { len: 1, stored: 2 })
        );
    }
}
