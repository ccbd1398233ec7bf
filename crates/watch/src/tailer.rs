//! The tail of one JSON-lines trace (Claude Code, Codex CLI, memex events): bytes as they arrive
//! in, records with their marks out.
//!
//! A line is read once its `\n` has arrived; a half-written last line waits in the tailer. Every
//! tail starts at byte 0, because the events mapping keeps state across lines (tool names by call
//! id, Codex's assistant runs, the stand-in ids' count); a resumed tail skips the events up to
//! the stored resume point, after checking that the bytes before it are still the ones stored
//! (their BLAKE3 hash). Pure: no file, no clock, no network.

use memex_vcc::{Diagnostic, InputFormat, LineEvents, TraceFormat};

use crate::input::{Converter, Mark};
use crate::{Record, Rewritten};

/// Where a stored session left its file: the end of its last record, and the hash of the bytes
/// before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineResume {
    pub end: u64,
    pub prefix: [u8; 32],
}

/// The last complete line read: the runner re-reads it before reading on, so a file rewritten in
/// place (same size or larger) is noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastLine {
    pub offset: u64,
    pub end: u64,
    pub hash: [u8; 32],
}

pub struct LineTailer {
    events: LineEvents,
    convert: Converter,
    /// Bytes of complete lines read so far.
    consumed: u64,
    /// The unfinished last line.
    partial: Vec<u8>,
    /// Hash of bytes `0..consumed`.
    prefix: blake3::Hasher,
    resume: Option<LineResume>,
    last: Option<LastLine>,
}

impl LineTailer {
    /// A tail from byte 0; with `resume`, the events up to it are already stored.
    pub fn new(format: InputFormat, resume: Option<LineResume>) -> LineTailer {
        LineTailer {
            events: LineEvents::new(format),
            convert: Converter::default(),
            consumed: 0,
            partial: Vec::new(),
            prefix: blake3::Hasher::new(),
            resume,
            last: None,
        }
    }

    /// Bytes read so far, the unfinished line included: where the next read starts.
    pub fn read_pos(&self) -> u64 {
        self.consumed + self.partial.len() as u64
    }

    /// True until the stored resume point has been reached and checked.
    pub fn resuming(&self) -> bool {
        self.resume.is_some()
    }

    /// The stored resume point, if not reached yet.
    pub fn resume(&self) -> Option<LineResume> {
        self.resume
    }

    pub fn last_line(&self) -> Option<LastLine> {
        self.last
    }

    /// The format read (Claude until the first record said otherwise; `Gemini` means the file
    /// is a document, not lines).
    pub fn format(&self) -> TraceFormat {
        self.events.format()
    }

    pub fn take_diagnostics(&mut self) -> Vec<Diagnostic> {
        self.events.take_diagnostics()
    }

    /// Feeds the next bytes of the file; returns the records of the lines they completed that
    /// are not stored yet. An error means the file is not the one the store's events came from.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Record>, Rewritten> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while let Some(at) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(at + 1);
            if self.partial.is_empty() {
                self.line(head, &mut out)?;
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(head);
                self.line(&line, &mut out)?;
            }
            rest = tail;
        }
        self.partial.extend_from_slice(rest);
        Ok(out)
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<Record>) -> Result<(), Rewritten> {
        let offset = self.consumed;
        self.consumed += line.len() as u64;
        self.prefix.update(line);
        self.last = Some(LastLine { offset, end: self.consumed, hash: blake3::hash(line).into() });
        let events = self.events.push_line(line);
        let stored = match self.resume {
            Some(r) if self.consumed < r.end => true,
            Some(r) if self.consumed == r.end => {
                if <[u8; 32]>::from(self.prefix.finalize()) != r.prefix {
                    return Err(Rewritten::Changed { at: r.end });
                }
                self.resume = None;
                true
            }
            // A line runs across the resume point: the file's lines are not the stored ones.
            Some(r) => return Err(Rewritten::Changed { at: r.end }),
            None => false,
        };
        if events.is_empty() {
            return Ok(());
        }
        if stored {
            for e in events {
                self.convert.input(e, None);
            }
            return Ok(());
        }
        let mark = Mark::Line { offset, end: self.consumed, prefix: self.prefix.finalize().into() };
        let events = events.into_iter().filter_map(|e| self.convert.input(e, Some(&mark))).collect();
        out.push(Record { mark, events });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const TRACE: &str = concat!(
        r#"{"type":"user","uuid":"u1","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"list files"}}"#,
        "\n",
        r#"{"type":"progress","data":{}}"#,
        "\n",
        r#"{"type":"assistant","uuid":"a1","message":{"id":"m1","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}"#,
        "\n",
        r#"{"type":"user","uuid":"u2","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a b"}]}}"#,
        "\n",
        r#"{"type":"assistant","uuid":"a2","message":{"id":"m2","content":[{"type":"text","text":"two files"}]}}"#,
        "\n",
    );

    fn all(t: &mut LineTailer, chunks: &[&[u8]]) -> Vec<Record> {
        chunks.iter().flat_map(|c| t.push(c).expect("same file")).collect()
    }

    fn kinds(records: &[Record]) -> Vec<String> {
        records.iter().flat_map(|r| r.events.iter().map(|e| e.kind.clone())).collect()
    }

    #[test]
    fn a_half_written_line_waits_for_its_newline() {
        let mut t = LineTailer::new(InputFormat::Auto, None);
        let bytes = TRACE.as_bytes();
        let first_end = TRACE.find('\n').expect("a line") + 1;
        assert!(t.push(&bytes[..first_end - 1]).expect("same").is_empty(), "no newline yet");
        assert_eq!(t.read_pos(), first_end as u64 - 1);
        let got = t.push(&bytes[first_end - 1..first_end]).expect("same");
        assert_eq!(kinds(&got), ["user_message"]);
        assert_eq!(got[0].mark.next(), crate::Position::Byte(first_end as u64));
    }

    #[test]
    fn records_carry_their_lines_and_prefix_hash() {
        let mut t = LineTailer::new(InputFormat::Auto, None);
        let got = all(&mut t, &[TRACE.as_bytes()]);
        assert_eq!(kinds(&got), ["user_message", "assistant_message", "tool_call", "tool_result", "assistant_message"]);
        for r in &got {
            let Mark::Line { offset, end, prefix } = r.mark else { panic!("a line mark") };
            assert_eq!(TRACE.as_bytes()[end as usize - 1], b'\n');
            assert!(offset == 0 || TRACE.as_bytes()[offset as usize - 1] == b'\n');
            assert_eq!(prefix, <[u8; 32]>::from(blake3::hash(&TRACE.as_bytes()[..end as usize])));
        }
        assert_eq!(got[2].events[0].tool_name, "Bash");
    }

    #[test]
    fn a_resumed_tail_returns_only_what_follows_the_resume_point() {
        let mut whole = LineTailer::new(InputFormat::Auto, None);
        let full = all(&mut whole, &[TRACE.as_bytes()]);
        let Mark::Line { end, prefix, .. } = full[1].mark else { panic!("a line mark") };
        let mut t = LineTailer::new(InputFormat::Auto, Some(LineResume { end, prefix }));
        let rest = all(&mut t, &[TRACE.as_bytes()]);
        assert!(!t.resuming());
        assert_eq!(rest, full[2..]);
        // The result's tool name came from a call that was stored, not returned.
        assert_eq!(rest[0].events[0].tool_name, "Bash");
    }

    #[test]
    fn a_changed_prefix_or_a_moved_line_end_is_a_rewrite() {
        let mut whole = LineTailer::new(InputFormat::Auto, None);
        let full = all(&mut whole, &[TRACE.as_bytes()]);
        let Mark::Line { end, prefix, .. } = full[1].mark else { panic!("a line mark") };
        let edited = TRACE.replacen("list files", "list FILES", 1);
        let mut t = LineTailer::new(InputFormat::Auto, Some(LineResume { end, prefix }));
        assert_eq!(t.push(edited.as_bytes()), Err(Rewritten::Changed { at: end }));
        let longer = TRACE.replacen("list files", "list the files", 1);
        let mut t = LineTailer::new(InputFormat::Auto, Some(LineResume { end, prefix }));
        assert_eq!(t.push(longer.as_bytes()), Err(Rewritten::Changed { at: end }));
    }

    proptest! {
        /// However the bytes arrive, the records are those of the whole file at once.
        #[test]
        fn chunking_does_not_matter(cuts in proptest::collection::vec(0..TRACE.len(), 0..12)) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            let bytes = TRACE.as_bytes();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts {
                chunks.push(&bytes[at..c]);
                at = c;
            }
            chunks.push(&bytes[at..]);
            let mut whole = LineTailer::new(InputFormat::Auto, None);
            let mut pieces = LineTailer::new(InputFormat::Auto, None);
            prop_assert_eq!(all(&mut pieces, &chunks), all(&mut whole, &[bytes]));
        }
    }
}
