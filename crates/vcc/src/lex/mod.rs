//! Lexing: bytes → lines → JSON records → [`Rec`]s, for every input format.
//!
//! The [`Reader`] is fed arbitrary chunks (so a large file never has to be in memory at once),
//! splits them into lines with Python's universal-newline rules (`\n`, `\r\n`, `\r`), decodes
//! each line as UTF-8 and hands JSON objects to the format's [`LineLexer`]. A line that is not
//! valid JSON, not an object, or not valid UTF-8 becomes a diagnostic; the next line is read as
//! usual. Gemini CLI sessions are one pretty-printed JSON document, so that format buffers the
//! whole input and is lexed at the end.

mod claude;
mod codex;
pub(crate) mod gemini;
mod memex;

use crate::diag::{Diags, Severity, column};
use crate::json::{Object, Schema, Value, parse_document, parse_first};
use crate::record::Rec;
use serde::Serialize;
use std::borrow::Cow;

/// Input format requested by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    /// Decide from the first record.
    #[default]
    Auto,
    Claude,
    Codex,
    Gemini,
    Memex,
}

/// The format an input was compiled as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFormat {
    /// Claude Code session JSONL.
    Claude,
    /// OpenAI Codex CLI rollout JSONL.
    Codex,
    /// Gemini CLI session JSON.
    Gemini,
    /// memex's own exported events (JSONL).
    Memex,
}

/// A format name that is none of memex's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown format {0:?}; expected auto, claude, codex, gemini or memex")]
pub struct UnknownFormat(pub String);

impl std::str::FromStr for InputFormat {
    type Err = UnknownFormat;

    /// The names the CLI, the API and stored sessions use; empty means `auto`.
    fn from_str(s: &str) -> Result<InputFormat, UnknownFormat> {
        match s {
            "" | "auto" => Ok(InputFormat::Auto),
            "claude" => Ok(InputFormat::Claude),
            "codex" => Ok(InputFormat::Codex),
            "gemini" => Ok(InputFormat::Gemini),
            "memex" => Ok(InputFormat::Memex),
            other => Err(UnknownFormat(other.to_owned())),
        }
    }
}

impl TraceFormat {
    /// The name stored with an imported session (and parsed back by [`InputFormat`]'s `FromStr`).
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Claude => "claude",
            TraceFormat::Codex => "codex",
            TraceFormat::Gemini => "gemini",
            TraceFormat::Memex => "memex",
        }
    }

    /// The media type of a raw file in this format: one JSON document, or JSON lines.
    pub fn media_type(self) -> &'static str {
        match self {
            TraceFormat::Gemini => "application/json",
            _ => "application/x-ndjson",
        }
    }
}

impl From<TraceFormat> for InputFormat {
    fn from(f: TraceFormat) -> InputFormat {
        match f {
            TraceFormat::Claude => InputFormat::Claude,
            TraceFormat::Codex => InputFormat::Codex,
            TraceFormat::Gemini => InputFormat::Gemini,
            TraceFormat::Memex => InputFormat::Memex,
        }
    }
}

/// Receives the records of one input in order.
pub(crate) trait RecConsumer {
    fn rec(&mut self, rec: Rec<'_>, d: &mut Diags);
}

/// A format whose records are one JSON object per line.
pub(crate) trait LineLexer {
    /// Which fields of a record to build (the rest is validated and skipped).
    fn schema(&self) -> Schema;
    /// Turns one record into zero or more [`Rec`]s.
    fn record<'a>(&mut self, line: u32, record: Object<'a>, d: &mut Diags) -> Vec<Rec<'a>>;
    /// A copy in the same state (a [`crate::Compiler`] is cloned to resume a longer input).
    fn boxed_clone(&self) -> Box<dyn LineLexer + Send + Sync>;
    /// What it keeps on the heap between records, for [`Reader::size_bytes`].
    fn heap_bytes(&self) -> usize {
        0
    }
}

enum State {
    Detect,
    Lines(Box<dyn LineLexer + Send + Sync>),
    Document { start_line: u32, buf: Vec<u8> },
}

impl Clone for State {
    fn clone(&self) -> Self {
        match self {
            State::Detect => State::Detect,
            State::Lines(lexer) => State::Lines(lexer.boxed_clone()),
            State::Document { start_line, buf } => State::Document { start_line: *start_line, buf: buf.clone() },
        }
    }
}

/// Streaming front end of one input.
#[derive(Clone)]
pub(crate) struct Reader {
    detected: Option<TraceFormat>,
    state: State,
    carry: Vec<u8>,
    skip_lf: bool,
    line_no: u32,
    /// Set when a strict compile hit its first diagnostic: the rest is ignored.
    pub halted: bool,
    strict: bool,
}

impl Reader {
    pub fn new(requested: InputFormat, strict: bool) -> Self {
        let mut reader = Reader {
            detected: None,
            state: State::Detect,
            carry: Vec::new(),
            skip_lf: false,
            line_no: 0,
            halted: false,
            strict,
        };
        match requested {
            InputFormat::Auto => {}
            InputFormat::Gemini => reader.start_document(1),
            InputFormat::Claude => reader.start_lines(TraceFormat::Claude),
            InputFormat::Codex => reader.start_lines(TraceFormat::Codex),
            InputFormat::Memex => reader.start_lines(TraceFormat::Memex),
        }
        reader
    }

    /// Approximate heap size: what it holds of a line or document still being read.
    pub fn size_bytes(&self) -> usize {
        let buffered = match &self.state {
            State::Document { buf, .. } => buf.capacity(),
            State::Lines(lexer) => lexer.heap_bytes(),
            State::Detect => 0,
        };
        self.carry.capacity() + buffered + 64
    }

    /// The format in use (Claude until something else was detected).
    pub fn format(&self) -> TraceFormat {
        self.detected.unwrap_or(TraceFormat::Claude)
    }

    fn start_lines(&mut self, format: TraceFormat) {
        self.detected = Some(format);
        let lexer: Box<dyn LineLexer + Send + Sync> = match format {
            TraceFormat::Codex => Box::<codex::CodexLexer>::default(),
            TraceFormat::Memex => Box::<memex::MemexLexer>::default(),
            TraceFormat::Claude | TraceFormat::Gemini => Box::new(claude::ClaudeLexer),
        };
        self.state = State::Lines(lexer);
    }

    fn start_document(&mut self, start_line: u32) {
        self.detected = Some(TraceFormat::Gemini);
        self.state = State::Document { start_line, buf: Vec::new() };
    }

    /// Feeds the next chunk of input.
    pub fn push(&mut self, bytes: &[u8], c: &mut dyn RecConsumer, d: &mut Diags) {
        let mut rest = bytes;
        if self.skip_lf {
            self.skip_lf = false;
            if rest.first() == Some(&b'\n') {
                rest = &rest[1..];
            }
        }
        if !self.carry.is_empty() {
            let Some(at) = memchr::memchr2(b'\n', b'\r', rest) else {
                self.carry.extend_from_slice(rest);
                return;
            };
            let mut line = std::mem::take(&mut self.carry);
            line.extend_from_slice(&rest[..at]);
            self.line(&line, c, d);
            rest = &rest[self.after_terminator(rest, at)..];
        }
        while !self.halted {
            let Some(at) = memchr::memchr2(b'\n', b'\r', rest) else {
                break;
            };
            self.line(&rest[..at], c, d);
            rest = &rest[self.after_terminator(rest, at)..];
        }
        if !self.halted {
            self.carry.extend_from_slice(rest);
        }
    }

    /// Index just past the terminator at `at` (`\r\n` counts once, even across chunks).
    fn after_terminator(&mut self, b: &[u8], at: usize) -> usize {
        if b[at] == b'\r' {
            match b.get(at + 1) {
                Some(b'\n') => return at + 2,
                None => self.skip_lf = true,
                Some(_) => {}
            }
        }
        at + 1
    }

    /// Whether [`Reader::finish`] has nothing to add: no unterminated line, no document.
    pub fn settled(&self) -> bool {
        self.carry.is_empty() && !matches!(self.state, State::Document { .. })
    }

    /// Ends the input: the unterminated last line, then a buffered document.
    pub fn finish(&mut self, c: &mut dyn RecConsumer, d: &mut Diags) {
        if !self.carry.is_empty() && !self.halted {
            let line = std::mem::take(&mut self.carry);
            self.line(&line, c, d);
        }
        if let State::Document { start_line, buf } = &mut self.state {
            let (start, buf) = (*start_line, std::mem::take(buf));
            if !self.halted {
                gemini::lex_document(&buf, start, c, d);
            }
        }
    }

    fn line(&mut self, raw: &[u8], c: &mut dyn RecConsumer, d: &mut Diags) {
        self.line_no += 1;
        d.line = self.line_no;
        if let State::Document { buf, .. } = &mut self.state {
            buf.extend_from_slice(raw);
            buf.push(b'\n');
            return;
        }
        let text = decode_line(raw, self.line_no, d);
        if crate::text::py_strip(&text).is_empty() {
            return self.check_halt(d);
        }
        if let State::Detect = self.state {
            self.detect(&text);
            if let State::Document { buf, .. } = &mut self.state {
                buf.extend_from_slice(text.as_bytes());
                buf.push(b'\n');
                return;
            }
        }
        if let State::Lines(lexer) = &mut self.state {
            lex_line(lexer.as_mut(), &text, self.line_no, c, d);
        }
        self.check_halt(d);
    }

    fn check_halt(&mut self, d: &Diags) {
        if self.strict && !d.items.is_empty() {
            self.halted = true;
        }
    }

    /// Auto-detection from the first non-blank line.
    fn detect(&mut self, text: &str) {
        const PROBE: Schema = Schema::Fields(&[
            ("type", Schema::Full),
            ("seq", Schema::ObjectOnly(&[])),
            ("kind", Schema::ObjectOnly(&[])),
            ("session_id", Schema::ObjectOnly(&[])),
            ("payload", Schema::ObjectOnly(&[])),
            ("messages", Schema::ObjectOnly(&[])),
            ("sessionId", Schema::ObjectOnly(&[])),
            ("projectHash", Schema::ObjectOnly(&[])),
        ]);
        // The first record decides, even when another is glued to it on the same line.
        let format = match parse_first(text, PROBE) {
            Ok((Value::Object(o), _, _)) => detect_object(&o),
            Ok(_) => TraceFormat::Claude,
            // A pretty-printed document opens with a line that is just `{` (or `[`); a torn
            // JSONL record is anything longer and stays Claude (and becomes a diagnostic).
            Err(_) if matches!(crate::text::py_strip(text), "{" | "[") => TraceFormat::Gemini,
            Err(_) => TraceFormat::Claude,
        };
        match format {
            TraceFormat::Gemini => self.start_document(self.line_no),
            other => self.start_lines(other),
        }
    }
}

fn detect_object(o: &Object<'_>) -> TraceFormat {
    let has = |k: &str| o.contains_key(k);
    if has("seq") && has("kind") && has("session_id") {
        return TraceFormat::Memex;
    }
    const CODEX_TYPES: [&str; 6] =
        ["session_meta", "response_item", "event_msg", "turn_context", "compacted", "world_state"];
    let rtype = o.get("type").and_then(Value::as_str);
    if has("payload") && rtype.is_some_and(|t| CODEX_TYPES.contains(&t)) {
        return TraceFormat::Codex;
    }
    if has("messages") && (has("sessionId") || has("projectHash")) {
        return TraceFormat::Gemini;
    }
    TraceFormat::Claude
}

/// Decodes a line as UTF-8; invalid bytes become U+FFFD with a warning at the first of them.
fn decode_line<'b>(raw: &'b [u8], line: u32, d: &mut Diags) -> Cow<'b, str> {
    match std::str::from_utf8(raw) {
        Ok(s) => Cow::Borrowed(s),
        Err(e) => {
            let valid = std::str::from_utf8(&raw[..e.valid_up_to()]).unwrap_or_default();
            let col = valid.chars().count() as u32 + 1;
            d.at(line, col, Severity::Warning, "invalid UTF-8; bytes replaced with U+FFFD");
            String::from_utf8_lossy(raw)
        }
    }
}

/// Lexes one line into its record. A line holding records back to back (`{…}{…}`, left by an
/// agent that crashed before writing a newline) yields every one of them, with a warning at the
/// column where the second begins: the reference VCC.py refuses such a line (`json.loads`:
/// "Extra data"), memex keeps both records.
fn lex_line(lexer: &mut dyn LineLexer, text: &str, line: u32, c: &mut dyn RecConsumer, d: &mut Diags) {
    let mut start = 0;
    while start < text.len() {
        let rest = &text[start..];
        let (value, replaced, end) = match parse_first(rest, lexer.schema()) {
            Ok(parsed) => parsed,
            Err(e) => {
                let col = column(text, start + e.offset);
                let skipped = if start == 0 { "line skipped" } else { "rest of the line skipped" };
                d.at(line, col, Severity::Error, format!("invalid JSON: {}; {skipped}", e.message));
                return;
            }
        };
        let glued = end < rest.len();
        let skipped = if start == 0 { "line skipped" } else { "rest of the line skipped" };
        let record = match value {
            Value::Object(o) if !glued || rest.as_bytes()[end] == b'{' => o,
            // Anything else after a value is what `json.loads` calls extra data: the line is
            // not a run of records, so the rest of it is not taken.
            _ if glued => {
                let col = column(text, start + end);
                d.at(line, col, Severity::Error, format!("invalid JSON: Extra data; {skipped}"));
                return;
            }
            _ => {
                d.error("record is not a JSON object; skipped");
                return;
            }
        };
        if replaced {
            d.warn("lone UTF-16 surrogate escape replaced with U+FFFD");
        }
        if glued {
            let col = column(text, start + end);
            d.at(line, col, Severity::Warning, "a second record on the same line (no newline before it); both kept");
        }
        for rec in lexer.record(line, record, d) {
            c.rec(rec, d);
        }
        start += end;
    }
}

/// Builds a text content block `{"type": "text", "text": …}`.
pub(crate) fn text_block<'a>(text: impl Into<Cow<'a, str>>) -> Value<'a> {
    Value::object([("type", Value::str("text")), ("text", Value::Str(text.into()))])
}

/// Builds a thinking block.
pub(crate) fn thinking_block<'a>(text: impl Into<Cow<'a, str>>) -> Value<'a> {
    Value::object([("type", Value::str("thinking")), ("thinking", Value::Str(text.into()))])
}

/// Builds a `tool_use` block.
pub(crate) fn tool_use_block<'a>(id: Value<'a>, name: Value<'a>, input: Value<'a>) -> Value<'a> {
    Value::object([("type", Value::str("tool_use")), ("id", id), ("name", name), ("input", input)])
}

/// Builds a `tool_result` block carrying its tool's name (see `ToolNames::InResult`).
pub(crate) fn tool_result_block<'a>(id: Value<'a>, name: String, is_error: bool, content: Value<'a>) -> Value<'a> {
    Value::object([
        ("type", Value::str("tool_result")),
        ("tool_use_id", id),
        ("name", Value::str(name)),
        ("is_error", Value::Bool(is_error)),
        ("content", content),
    ])
}

/// Tool input from a JSON-encoded argument string: the object if it is one, else `{"input": s}`.
pub(crate) fn tool_input_from_text(text: Cow<'_, str>) -> Value<'_> {
    match parse_document(&text, Schema::Full) {
        Ok((v @ Value::Object(_), _)) => v.into_owned(),
        _ => Value::object([("input", Value::Str(text))]),
    }
}

#[cfg(test)]
mod format_name_tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for f in [TraceFormat::Claude, TraceFormat::Codex, TraceFormat::Gemini, TraceFormat::Memex] {
            assert_eq!(f.name().parse::<InputFormat>(), Ok(InputFormat::from(f)));
        }
        assert_eq!("".parse::<InputFormat>(), Ok(InputFormat::Auto));
        assert_eq!("auto".parse::<InputFormat>(), Ok(InputFormat::Auto));
        assert_eq!("yaml".parse::<InputFormat>(), Err(UnknownFormat("yaml".into())));
    }
}
