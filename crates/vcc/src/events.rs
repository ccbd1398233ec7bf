//! The events mapping: a trace in any input format as a flat list of memex event records, so an
//! imported trace can be stored as events (and viewed again through the `memex` format).
//!
//! One event per rendered block, in input order: user text → `user_message`, assistant text →
//! `assistant_message`, thinking → `thinking`, a tool call → `tool_call` (content = the input as
//! JSON), a tool result → `tool_result`/`tool_error` (content = the result text), system content
//! → `system`, memex labels → their kind. A compaction boundary and a compact summary become
//! `system` events with `metadata.vcc` set to `compact_boundary` / `compact_summary` (the
//! summary's full text is kept, not the `[compact summary — N lines]` line).
//!
//! What is lost: whitespace-only text blocks (the views render them as empty lines); records
//! the views ignore as well (progress, snapshots, attachments, `summary`
//! records, unknown block types); image and document payloads (the event says
//! `[image: <media type>, <N> base64 chars]`); streamed chunks are not merged (each block is its
//! own event, in order); token usage survives only as `metadata.usage` of the record's first
//! event; `Read` line-number prefixes are kept (the views strip them).

use crate::CompileError;
use crate::diag::{Diagnostic, Diags};
use crate::json::Value;
use crate::lex::{InputFormat, Reader, RecConsumer};
use crate::pyfmt::to_py_str;
use crate::record::{Rec, RecBody, RecMeta};
use serde::Serialize;
use std::collections::HashMap;

/// One event, in the shape of memex's `AppendEvents` input (ids, sequence numbers and ingest
/// times are the store's business).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRecord {
    /// `user_message`, `assistant_message`, `thinking`, `tool_call`, `tool_result`,
    /// `tool_error`, `system`, or a memex label kind.
    pub kind: String,
    pub content: String,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    /// The source record's timestamp, if it had one.
    pub event_time: Option<String>,
    pub agent_id: Option<String>,
    /// Provenance: `source_line`, format-specific ids, `usage`, `model`, `media_type`, …
    pub metadata: serde_json::Value,
}

/// Maps a whole trace to events. Malformed lines are reported as diagnostics (fatal with
/// `strict`), exactly as when compiling views.
pub fn trace_events(
    bytes: &[u8],
    format: InputFormat,
    strict: bool,
) -> Result<(Vec<EventRecord>, Vec<Diagnostic>), CompileError> {
    let mut reader = Reader::new(format, strict);
    let mut mapper = EventMapper::default();
    let mut d = Diags::default();
    reader.push(bytes, &mut mapper, &mut d);
    reader.finish(&mut mapper, &mut d);
    if strict && let Some(first) = d.items.first() {
        return Err(CompileError::Strict(first.clone()));
    }
    Ok((mapper.events, d.items))
}

/// An [`EventRecord`] as an append carries it: what an import stores and what `memex watch`
/// appends, from one mapping. A trace records what happened, so a call or a result missing its
/// id or name gets a stand-in (`memex_stand_in` in the metadata) instead of a refusal; a kind
/// memex does not know becomes `x-<kind>`; a timestamp that does not parse is kept as
/// `source_timestamp`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendRecord {
    pub kind: String,
    pub content: String,
    /// Empty when the record had none.
    pub tool_name: String,
    pub tool_call_id: String,
    pub event_time: Option<chrono::DateTime<chrono::Utc>>,
    pub agent_id: Option<String>,
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl AppendRecord {
    /// True for `tool_result` and `tool_error`: the kinds that answer a call.
    pub fn answers_a_call(&self) -> bool {
        self.kind == "tool_result" || self.kind == "tool_error"
    }
}

impl EventRecord {
    /// The record as an append carries it; `index` is its place among the trace's events (the
    /// stand-in call id names it).
    pub fn into_append(self, index: u64, known_kind: impl Fn(&str) -> bool) -> AppendRecord {
        let mut metadata = match self.metadata {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        let event_time = self.event_time.as_deref().and_then(|t| {
            let parsed = chrono::DateTime::parse_from_rfc3339(t).ok().map(|d| d.with_timezone(&chrono::Utc));
            if parsed.is_none() {
                metadata.insert("source_timestamp".into(), t.into());
            }
            parsed
        });
        let mut tool_name = self.tool_name.unwrap_or_default();
        let mut tool_call_id = self.tool_call_id.unwrap_or_default();
        let is_call = self.kind == "tool_call";
        let is_output = self.kind == "tool_result" || self.kind == "tool_error";
        if is_call && tool_name.is_empty() {
            tool_name = "unknown".into();
            metadata.insert("memex_stand_in".into(), "tool_name".into());
        }
        if (is_call || is_output) && tool_call_id.is_empty() {
            tool_call_id = format!("memex-import-{index}");
            metadata.insert("memex_stand_in".into(), "tool_call_id".into());
        }
        let kind = if known_kind(&self.kind) { self.kind } else { format!("x-{}", self.kind) };
        AppendRecord {
            kind,
            content: self.content,
            tool_name,
            tool_call_id,
            event_time,
            agent_id: self.agent_id,
            metadata,
        }
    }
}

#[derive(Default)]
pub(crate) struct EventMapper {
    events: Vec<EventRecord>,
    calls: HashMap<String, String>,
}

struct Ctx<'m> {
    meta: &'m RecMeta,
    line: u32,
    first: bool,
    usage: Option<serde_json::Value>,
}

impl RecConsumer for EventMapper {
    fn rec(&mut self, rec: Rec<'_>, _d: &mut Diags) {
        self.map(&rec);
    }
}

impl EventMapper {
    /// The events mapped so far.
    pub(crate) fn into_events(self) -> Vec<EventRecord> {
        self.events
    }

    /// The events mapped since the last call (the live tailer drains them record by record).
    pub(crate) fn take_events(&mut self) -> Vec<EventRecord> {
        std::mem::take(&mut self.events)
    }

    /// Maps one record (by reference, so the same record can also be compiled).
    pub(crate) fn map(&mut self, rec: &Rec<'_>) {
        let mut usage = serde_json::Map::new();
        if let Some(u) = &rec.stats.usage {
            usage.insert("usage".into(), to_serde(u));
        }
        if let Some(m) = rec.stats.model.as_ref().filter(|m| m.truthy()) {
            usage.insert("model".into(), to_serde(m));
        }
        let mut ctx = Ctx {
            meta: &rec.meta,
            line: rec.line,
            first: true,
            usage: (!usage.is_empty()).then_some(serde_json::Value::Object(usage)),
        };
        match &rec.body {
            RecBody::Discard | RecBody::Ignored => {}
            RecBody::Boundary => self.push(&mut ctx, "system", "[compact boundary]".into(), marker("compact_boundary")),
            RecBody::CompactSummary(c) => self.push(&mut ctx, "system", plain_text(c), marker("compact_summary")),
            RecBody::System(c) if c.truthy() => self.content(&mut ctx, c, "system"),
            RecBody::System(_) => {}
            RecBody::User(c) => self.content(&mut ctx, c, "user_message"),
            RecBody::Assistant { content, .. } => self.content(&mut ctx, content, "assistant_message"),
            RecBody::Labeled { label, content } => self.push(&mut ctx, label, plain_text(content), None),
        }
    }
}

fn marker(what: &str) -> Option<(&'static str, serde_json::Value)> {
    Some(("vcc", serde_json::Value::String(what.into())))
}

/// Text of a string, or of the text blocks of a list.
fn plain_text(v: &Value<'_>) -> String {
    match v {
        Value::Str(s) => s.to_string(),
        Value::Array(items) => {
            items.iter().filter_map(|b| b.get("text").map(to_py_str)).collect::<Vec<_>>().join("\n\n")
        }
        Value::Null => String::new(),
        other => to_py_str(other),
    }
}

impl EventMapper {
    fn push(
        &mut self,
        ctx: &mut Ctx<'_>,
        kind: &str,
        content: String,
        extra: Option<(&'static str, serde_json::Value)>,
    ) {
        self.push_tool(ctx, kind, content, None, None, extra);
    }

    fn push_tool(
        &mut self,
        ctx: &mut Ctx<'_>,
        kind: &str,
        content: String,
        tool_name: Option<String>,
        tool_call_id: Option<String>,
        extra: Option<(&'static str, serde_json::Value)>,
    ) {
        let mut metadata = ctx.meta.extra.clone().unwrap_or_default();
        metadata.insert("source_line".into(), ctx.line.into());
        if ctx.first
            && let Some(serde_json::Value::Object(u)) = &ctx.usage
        {
            metadata.extend(u.clone());
        }
        if let Some((k, v)) = extra {
            metadata.insert(k.into(), v);
        }
        ctx.first = false;
        self.events.push(EventRecord {
            kind: kind.into(),
            content,
            tool_name,
            tool_call_id,
            event_time: ctx.meta.timestamp.clone(),
            agent_id: ctx.meta.agent_id.clone(),
            metadata: serde_json::Value::Object(metadata),
        });
    }

    fn content(&mut self, ctx: &mut Ctx<'_>, content: &Value<'_>, text_kind: &str) {
        match content {
            Value::Str(s) if !s.is_empty() => self.push(ctx, text_kind, s.to_string(), None),
            Value::Array(blocks) => {
                for b in blocks {
                    self.block(ctx, b, text_kind);
                }
            }
            _ => {}
        }
    }

    fn block(&mut self, ctx: &mut Ctx<'_>, b: &Value<'_>, text_kind: &str) {
        let text = |k: &str| b.get(k).map(to_py_str).unwrap_or_default();
        match b.type_str() {
            Some("text") if !crate::text::py_strip(&text("text")).is_empty() => {
                self.push(ctx, text_kind, text("text"), None);
            }
            Some("thinking") if b.get("thinking").is_some_and(Value::truthy) => {
                self.push(ctx, "thinking", text("thinking"), None);
            }
            Some("redacted_thinking") => {
                let extra = marker("redacted_thinking");
                self.push(ctx, "thinking", "[content redacted by model provider]".into(), extra);
            }
            Some("tool_use") => {
                let id = b.get("id").map(to_py_str);
                let name = b.get("name").map_or_else(|| "unknown".into(), to_py_str);
                if let Some(id) = &id {
                    self.calls.insert(id.clone(), name.clone());
                }
                let input = b.get("input").map_or_else(|| "{}".into(), to_json);
                self.push_tool(ctx, "tool_call", input, Some(name), id, None);
            }
            Some("tool_result") => self.tool_result(ctx, b),
            Some(kind @ ("image" | "document")) => {
                let source = b.get("source");
                let media_type = source.and_then(|s| s.get("media_type")).map(to_py_str).unwrap_or_default();
                let size = source.and_then(|s| s.get("data")).and_then(Value::as_str).map_or(0, str::len);
                let content = format!("[{kind}: {media_type}, {size} base64 chars]");
                let extra = Some(("media_type", serde_json::Value::String(media_type)));
                self.push(ctx, text_kind, content, extra);
            }
            _ => {}
        }
    }

    fn tool_result(&mut self, ctx: &mut Ctx<'_>, b: &Value<'_>) {
        let id = b.get("tool_use_id").map(to_py_str);
        let name = match b.get("name") {
            Some(n) => Some(to_py_str(n)),
            None => id.as_ref().and_then(|i| self.calls.get(i).cloned()),
        };
        let kind = if b.get("is_error").is_some_and(Value::truthy) { "tool_error" } else { "tool_result" };
        let content = match b.get("content") {
            Some(Value::Str(s)) => s.to_string(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| match i.type_str() {
                    Some("text") => i.get("text").map(to_py_str).unwrap_or_default(),
                    Some(other) => format!("[{other}]"),
                    None => String::new(),
                })
                .collect::<Vec<_>>()
                .join("\n\n"),
            _ => String::new(),
        };
        self.push_tool(ctx, kind, content, name, id, None);
    }
}

/// Compact JSON with keys in input order (Python-dict semantics for duplicates).
pub(crate) fn to_json(v: &Value<'_>) -> String {
    let mut out = String::new();
    write_json(v, &mut out);
    out
}

fn write_json(v: &Value<'_>, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(d) => out.push_str(crate::pyfmt::py_int(d)),
        Value::Float(f) if f.is_finite() => out.push_str(&serde_json::Value::from(*f).to_string()),
        Value::Float(f) if f.is_nan() => out.push_str("NaN"),
        Value::Float(f) => out.push_str(if *f > 0.0 { "Infinity" } else { "-Infinity" }),
        Value::Str(s) => out.push_str(&serde_json::Value::String(s.to_string()).to_string()),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, item)) in o.iter_py().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.to_string()).to_string());
                out.push(':');
                write_json(item, out);
            }
            out.push('}');
        }
    }
}

/// Converts to `serde_json::Value` (key order is serde_json's; numbers that do not fit become
/// strings).
pub(crate) fn to_serde(v: &Value<'_>) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(d) => d
            .parse::<i64>()
            .map(serde_json::Value::from)
            .or_else(|_| d.parse::<u64>().map(serde_json::Value::from))
            .unwrap_or_else(|_| serde_json::Value::String(d.to_string())),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map_or_else(|| serde_json::Value::String(crate::pyfmt::py_float(*f)), serde_json::Value::Number),
        Value::Str(s) => serde_json::Value::String(s.to_string()),
        Value::Array(items) => serde_json::Value::Array(items.iter().map(to_serde).collect()),
        Value::Object(o) => serde_json::Value::Object(o.iter_py().map(|(k, v)| (k.to_string(), to_serde(v))).collect()),
    }
}
