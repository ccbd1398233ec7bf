//! Events of a trace that is still being written: the same [`EventRecord`]s as
//! [`crate::trace_events`] returns for the finished file, handed out as the file grows, so that a
//! live capture stores exactly what a one-shot import of the same file would.
//!
//! * JSON-lines traces (Claude Code, Codex CLI, memex): [`LineEvents`] takes one complete line at
//!   a time and returns the events of that line's records. The caller decides what a complete
//!   line is (it ends with `\n`) and where each line starts in the file; that is what makes a
//!   resume point a byte offset.
//! * Gemini CLI sessions are one JSON document, rewritten whole on every change:
//!   [`document_events`] maps a version of the document message by message, so the caller can
//!   take only the messages it has not stored yet.
//!
//! Same purity as the rest of the crate: bytes in, records out.

use crate::diag::{Diagnostic, Diags, Severity};
use crate::events::{EventMapper, EventRecord};
use crate::json::{Schema, Value, parse_document};
use crate::lex::gemini::message_recs;
use crate::lex::{InputFormat, Reader, TraceFormat};

/// The events of a JSON-lines trace, line by line.
///
/// Feeding every line of a file, in order, returns in total exactly the events
/// [`crate::trace_events`] returns for the whole file (when the file ends with a newline; an
/// unterminated last line is never a complete line). The mapping keeps state across lines (tool
/// names by call id, Codex's assistant runs), so a resumed tail must be fed from the first line
/// again and skip the events it already has.
pub struct LineEvents {
    reader: Reader,
    mapper: EventMapper,
    diags: Diags,
}

impl LineEvents {
    /// A stream in `format` (`Auto`: decided by the first non-blank line, as an import does).
    /// Gemini CLI documents are not lines: use [`document_events`].
    pub fn new(format: InputFormat) -> LineEvents {
        LineEvents { reader: Reader::new(format, false), mapper: EventMapper::default(), diags: Diags::default() }
    }

    /// Feeds one complete line, its terminator included, and returns the events of its records.
    pub fn push_line(&mut self, line: &[u8]) -> Vec<EventRecord> {
        let mut mapper = Mapped(&mut self.mapper);
        self.reader.push(line, &mut mapper, &mut self.diags);
        self.mapper.take_events()
    }

    /// The format in use: the requested one, or, with `Auto`, the one the first non-blank line
    /// decided (Claude until then). `Gemini` means the input is a document, not lines.
    pub fn format(&self) -> TraceFormat {
        self.reader.format()
    }

    /// The problems met since the last call (malformed lines, which yield no events).
    pub fn take_diagnostics(&mut self) -> Vec<Diagnostic> {
        std::mem::take(&mut self.diags.items)
    }
}

/// Maps each record as it is lexed.
struct Mapped<'m>(&'m mut EventMapper);

impl crate::lex::RecConsumer for Mapped<'_> {
    fn rec(&mut self, rec: crate::record::Rec<'_>, _d: &mut Diags) {
        self.0.map(&rec);
    }
}

/// One message of a session document and the events it maps to.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageEvents {
    /// False while one of its tool calls has not finished (a status other than `success`,
    /// `error` or `cancelled`): Gemini CLI rewrites such a message as the calls go on.
    pub settled: bool,
    /// Its events, possibly none (a message type the views ignore).
    pub events: Vec<EventRecord>,
}

/// Maps one version of a Gemini CLI session document, message by message. The events of all
/// messages, in order, are exactly [`crate::trace_events`] of the same bytes. A document that
/// does not parse (a rewrite caught half-written) or has no `messages` list is an error.
pub fn document_events(bytes: &[u8], format: InputFormat) -> Result<Vec<MessageEvents>, Diagnostic> {
    let start_line = start_line(bytes, format);
    let text = String::from_utf8_lossy(bytes);
    let doc = match parse_document(&text, Schema::Full) {
        Ok((doc, _)) => doc,
        Err(e) => {
            let before = &text.as_bytes()[..e.offset.min(text.len())];
            let line = memchr::memchr_iter(b'\n', before).count() as u32 + 1;
            let message = format!("invalid JSON: {}", e.message);
            return Err(Diagnostic { line, col: 1, severity: Severity::Error, message });
        }
    };
    let Some(messages) = doc.get("messages").and_then(Value::as_array) else {
        let message = "not a Gemini CLI session: no `messages` list".to_owned();
        return Err(Diagnostic { line: start_line, col: 1, severity: Severity::Error, message });
    };
    let mut mapper = EventMapper::default();
    Ok(messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            for rec in message_recs(m, i, start_line) {
                mapper.map(&rec);
            }
            MessageEvents { settled: settled(m), events: mapper.take_events() }
        })
        .collect())
}

/// Whether every tool call of a message has a final status.
fn settled(m: &Value<'_>) -> bool {
    let calls = m.get("toolCalls").and_then(Value::as_array).unwrap_or_default();
    calls.iter().all(|c| matches!(c.get("status").and_then(Value::as_str), Some("success" | "error" | "cancelled")))
}

/// The input line a document's records are attributed to, as the [`Reader`] counts it: line 1
/// when the format is given, else the first non-blank line (the one auto-detection read).
fn start_line(bytes: &[u8], format: InputFormat) -> u32 {
    if format != InputFormat::Auto {
        return 1;
    }
    let mut line = 1;
    let mut rest = bytes;
    while let Some(end) = memchr::memchr2(b'\n', b'\r', rest) {
        if !crate::text::py_strip(&String::from_utf8_lossy(&rest[..end])).is_empty() {
            break;
        }
        let crlf = rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n');
        rest = &rest[end + 1 + usize::from(crlf)..];
        line += 1;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace_events;

    const CLAUDE: &str = concat!(
        r#"{"type":"user","uuid":"u1","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"list files"}}"#,
        "\n",
        r#"{"type":"assistant","uuid":"a1","message":{"id":"m1","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}"#,
        "\r\n",
        "not json\n",
        "\n",
        r#"{"type":"user","uuid":"u2","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a b"}]}}"#,
        "\n",
    );

    fn lines(bytes: &[u8]) -> Vec<&[u8]> {
        bytes.split_inclusive(|b| *b == b'\n').collect()
    }

    #[test]
    fn line_by_line_is_the_whole_file() {
        let mut live = LineEvents::new(InputFormat::Auto);
        let per_line: Vec<Vec<EventRecord>> = lines(CLAUDE.as_bytes()).into_iter().map(|l| live.push_line(l)).collect();
        assert_eq!(per_line.iter().map(Vec::len).collect::<Vec<_>>(), [1, 2, 0, 0, 1]);
        let (whole, diags) = trace_events(CLAUDE.as_bytes(), InputFormat::Auto, false).expect("lenient");
        assert_eq!(per_line.concat(), whole);
        // The result knows its tool's name from the call two lines up: state crossed lines.
        assert_eq!(whole[3].tool_name.as_deref(), Some("Bash"));
        assert_eq!(live.take_diagnostics(), diags);
        assert_eq!(live.format(), TraceFormat::Claude);
    }

    #[test]
    fn a_codex_rollout_is_detected_from_its_first_line() {
        let rollout = concat!(
            r#"{"timestamp":"t","type":"session_meta","payload":{"id":"s"}}"#,
            "\n",
            r#"{"timestamp":"t","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}"#,
            "\n",
        );
        let mut live = LineEvents::new(InputFormat::Auto);
        let got: Vec<EventRecord> = lines(rollout.as_bytes()).into_iter().flat_map(|l| live.push_line(l)).collect();
        assert_eq!(live.format(), TraceFormat::Codex);
        assert_eq!(got, trace_events(rollout.as_bytes(), InputFormat::Auto, false).expect("lenient").0);
        assert_eq!(got.len(), 1);
    }

    const GEMINI: &str = r#"

{
 "sessionId": "s", "projectHash": "p", "messages": [
  {"id": "1", "type": "user", "timestamp": "2026-01-01T00:00:00Z", "content": "hello"},
  {"id": "2", "type": "gemini", "content": "hi", "thoughts": [{"subject": "S", "description": "D"}],
   "toolCalls": [{"id": "c1", "name": "ls", "args": {}, "status": "success",
                  "result": [{"functionResponse": {"response": {"output": "x"}}}]}]},
  {"id": "3", "type": "mystery"}
]}
"#;

    #[test]
    fn a_document_message_by_message_is_the_whole_document() {
        for format in [InputFormat::Auto, InputFormat::Gemini] {
            let messages = document_events(GEMINI.as_bytes(), format).expect("a session");
            assert_eq!(messages.iter().map(|m| m.events.len()).collect::<Vec<_>>(), [1, 4, 0]);
            let all: Vec<EventRecord> = messages.iter().flat_map(|m| m.events.clone()).collect();
            assert_eq!(all, trace_events(GEMINI.as_bytes(), format, false).expect("lenient").0, "{format:?}");
            assert!(messages.iter().all(|m| m.settled));
        }
        // Auto-detection reads the document from its first non-blank line (line 3).
        let auto = document_events(GEMINI.as_bytes(), InputFormat::Auto).expect("a session");
        assert_eq!(auto[0].events[0].metadata["source_line"], 3);
    }

    #[test]
    fn a_half_written_document_is_an_error_not_a_panic() {
        let half = &GEMINI.as_bytes()[..GEMINI.len() / 2];
        assert!(document_events(half, InputFormat::Auto).is_err());
        assert!(document_events(b"{\"sessionId\": \"s\"}", InputFormat::Auto).is_err());
    }
}
