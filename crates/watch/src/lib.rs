//! # memex-watch — live trace capture
//!
//! Follows agents' trace files as they are written (Claude Code `~/.claude/projects/**/*.jsonl`,
//! Codex CLI `~/.codex/sessions/**/*.jsonl`, Gemini CLI `~/.gemini/tmp/*/chats/*.json`) and
//! appends each new record's events to the file's memex session as it arrives: one session per
//! version of a file, sub-agents linked to their parent's session, and the same events, field for
//! field, as a one-shot `ImportTrace` of the finished file (the mapping is `memex-vcc`'s, fed
//! line by line: [`memex_vcc::LineEvents`], [`memex_vcc::document_events`]).
//!
//! Exactly once, without a state file: every event carries a [`Mark`] in its metadata (byte
//! range and prefix hash, or message index and hash), so a session's last event is the resume
//! point; every batch's idempotency key is its file position ([`Position::key`]), so a retry or a
//! second watcher replays instead of duplicating. A file that shrank or whose stored bytes
//! changed is imported again as a new version (a new session whose metadata names the previous
//! one).
//!
//! The pure core — [`LineTailer`], [`DocumentTailer`], [`Converter`], [`layout`], [`batches`] —
//! does no I/O. [`run`] (`runner.rs`) is the shell: it polls the directories, reads the files and
//! talks to the server through `memex-client`.

mod document;
mod input;
pub mod layout;
mod runner;
mod tailer;

pub use document::{DocumentResume, DocumentTailer, DocumentUpdate, LastMessage};
pub use input::{Converter, MARK_KEY, Mark, Position};
pub use runner::{Observer, Summary, WatchError, WatchOptions, catch_up_file, run};
pub use tailer::{LastLine, LineResume, LineTailer};

use memex_proto::v1 as pb;

/// One record of a trace: the events it maps to (possibly several: an assistant message with
/// text and tool calls), which are appended together or not at all, and where it sits.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub mark: Mark,
    pub events: Vec<pb::EventInput>,
}

/// The file is not the one the stored events came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rewritten {
    /// The bytes (or messages' events) before the stored resume point changed, or no line ends
    /// where the stored one did.
    #[error("what was stored up to {at} changed")]
    Changed { at: u64 },
    /// The file holds less than was stored.
    #[error("the file holds {len}, less than the {stored} stored")]
    Shrank { len: u64, stored: u64 },
}

/// Records cut into `AppendEvents` batches of whole records, each at most `max_events` events
/// and about `max_bytes` of content (a single larger record is a batch of its own). Each batch
/// starts where the one before it ends; the first at `from`.
pub fn batches(records: &[Record], from: Position, max_events: usize, max_bytes: usize) -> Vec<(Position, &[Record])> {
    let mut out = Vec::new();
    let (mut start, mut at) = (0, from);
    let (mut events, mut bytes) = (0, 0);
    for (i, r) in records.iter().enumerate() {
        let size: usize = r.events.iter().map(|e| e.content.len() + e.metadata_json.len()).sum();
        if i > start && (events + r.events.len() > max_events || bytes + size > max_bytes) {
            out.push((at, &records[start..i]));
            at = records[i - 1].mark.next();
            (start, events, bytes) = (i, 0, 0);
        }
        events += r.events.len();
        bytes += size;
    }
    if start < records.len() {
        out.push((at, &records[start..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(end: u64, n: usize) -> Record {
        let e = pb::EventInput { kind: "note".into(), content: "x".repeat(10), ..Default::default() };
        Record { mark: Mark::Line { offset: end - 1, end, prefix: [0; 32] }, events: vec![e; n] }
    }

    #[test]
    fn batches_hold_whole_records_and_chain_their_positions() {
        let records = [record(5, 2), record(9, 2), record(12, 3), record(20, 1)];
        let got = batches(&records, Position::Byte(0), 4, usize::MAX);
        let shape: Vec<(Position, usize)> = got.iter().map(|(p, r)| (*p, r.len())).collect();
        assert_eq!(shape, [(Position::Byte(0), 2), (Position::Byte(9), 2)]);
        // A record bigger than the limit goes alone.
        let got = batches(&records, Position::Byte(3), 1, usize::MAX);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].0, Position::Byte(3));
        assert_eq!(got[3].0, Position::Byte(12));
        assert!(batches(&[], Position::Byte(0), 4, 100).is_empty());
        assert_eq!(batches(&records, Position::Byte(0), 100, 25).len(), 4);
    }
}
