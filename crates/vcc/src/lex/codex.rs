//! OpenAI Codex CLI rollout JSONL (`~/.codex/sessions/…/rollout-*.jsonl`).
//!
//! Normalised as the reference's later versions do: `response_item` messages become user,
//! assistant or system records (developer → system), `reasoning` summaries become thinking,
//! `function_call`/`custom_tool_call` (and the other `*_call` items) become tool calls and their
//! `*_output` items tool results, `compacted` is a compaction boundary followed by a compact
//! summary. `event_msg` records mostly duplicate response items and are dropped, except `error`
//! and `turn_aborted` (system sections) and `context_compacted` (a boundary when no `compacted`
//! record came right before it). Consecutive assistant-side items form one `[assistant]`
//! section, as one streamed Claude message would.

use super::{LineLexer, text_block, thinking_block, tool_input_from_text, tool_result_block, tool_use_block};
use crate::diag::Diags;
use crate::json::{Object, Schema, Value};
use crate::pyfmt::to_py_str;
use crate::record::{Rec, RecBody, RecMeta};
use std::borrow::Cow;
use std::collections::HashMap;

#[derive(Debug, Default, Clone)]
pub(crate) struct CodexLexer {
    /// `call_id` → tool name, for results.
    calls: HashMap<String, String>,
    /// Synthetic message id of the current run of assistant-side items.
    group: u64,
    in_group: bool,
    last_was_compacted: bool,
}

impl LineLexer for CodexLexer {
    fn boxed_clone(&self) -> Box<dyn LineLexer + Send + Sync> {
        Box::new(self.clone())
    }

    fn heap_bytes(&self) -> usize {
        crate::ir::string_map_bytes(&self.calls)
    }

    fn schema(&self) -> Schema {
        Schema::Full
    }

    fn record<'a>(&mut self, line: u32, mut r: Object<'a>, d: &mut Diags) -> Vec<Rec<'a>> {
        let meta =
            RecMeta { timestamp: r.get("timestamp").and_then(Value::as_str).map(str::to_owned), ..RecMeta::default() };
        let rtype = r.get("type").and_then(Value::as_str).unwrap_or("").to_owned();
        let payload = match r.take("payload") {
            Some(Value::Object(p)) => p,
            _ => Object::default(),
        };
        let was_compacted = std::mem::replace(&mut self.last_was_compacted, rtype == "compacted");
        let bodies = match rtype.as_str() {
            "response_item" => self.response_item(payload, d),
            "compacted" => {
                let summary = payload.get("message").cloned().unwrap_or(Value::Null);
                vec![RecBody::Boundary, RecBody::CompactSummary(summary)]
            }
            "event_msg" => event(&payload, was_compacted),
            _ => vec![RecBody::Ignored],
        };
        bodies
            .into_iter()
            .map(|body| {
                if !matches!(body, RecBody::Assistant { .. } | RecBody::Discard) {
                    self.in_group = false;
                }
                let mut rec = Rec::new(line, body);
                rec.explicit_tool_names = true;
                rec.meta = meta.clone();
                rec
            })
            .collect()
    }
}

fn event<'a>(p: &Object<'a>, after_compacted: bool) -> Vec<RecBody<'a>> {
    let text = |k: &str| p.get(k).map(to_py_str).unwrap_or_default();
    match p.get("type").and_then(Value::as_str) {
        Some("error") => vec![RecBody::System(Value::str(format!("error: {}", text("message"))))],
        Some("turn_aborted") => vec![RecBody::System(Value::str(format!("turn aborted: {}", text("reason"))))],
        Some("context_compacted") if !after_compacted => vec![RecBody::Boundary],
        _ => vec![RecBody::Discard],
    }
}

impl CodexLexer {
    fn assistant<'a>(&mut self, blocks: Vec<Value<'a>>) -> RecBody<'a> {
        if !self.in_group {
            self.group += 1;
            self.in_group = true;
        }
        RecBody::Assistant { id: Value::str(format!("codex-{}", self.group)), content: Value::Array(blocks) }
    }

    fn call<'a>(&mut self, id: Option<Value<'a>>, name: &str, input: Value<'a>) -> RecBody<'a> {
        let id = id.unwrap_or(Value::str(""));
        self.calls.insert(to_py_str(&id), name.to_string());
        self.assistant(vec![tool_use_block(id, Value::str(name.to_string()), input)])
    }

    fn response_item<'a>(&mut self, mut p: Object<'a>, d: &mut Diags) -> Vec<RecBody<'a>> {
        let kind = p.get("type").and_then(Value::as_str).unwrap_or("").to_owned();
        let body = match kind.as_str() {
            "message" => self.message(p),
            "reasoning" => {
                let text = reasoning_text(&p);
                if text.is_empty() { RecBody::Discard } else { self.assistant(vec![thinking_block(text)]) }
            }
            "function_call" | "custom_tool_call" | "tool_search_call" | "local_shell_call" => {
                let name = match kind.as_str() {
                    "tool_search_call" => "tool_search".to_string(),
                    "local_shell_call" => "local_shell".to_string(),
                    _ => p.get("name").map(to_py_str).unwrap_or_else(|| "unknown".into()),
                };
                let input = call_input(&mut p);
                let id = p.take("call_id").or_else(|| p.take("id"));
                self.call(id, &name, input)
            }
            "web_search_call" | "image_generation_call" => {
                let name = kind.trim_end_matches("_call").to_string();
                let input = p.take("action").unwrap_or_else(|| {
                    let prompt = p.take("revised_prompt").unwrap_or(Value::Null);
                    Value::object([("revised_prompt", prompt)])
                });
                let id = p.take("call_id").or_else(|| p.take("id"));
                self.call(id, &name, input)
            }
            "function_call_output" | "custom_tool_call_output" | "tool_search_output" => self.output(p, d),
            "agent_message" => {
                let header = format!("[agent message {} -> {}]", field(&p, "author"), field(&p, "recipient"));
                let mut blocks = vec![text_block(header)];
                blocks.extend(content_blocks(p.take("content")));
                self.assistant(blocks)
            }
            _ => RecBody::Ignored,
        };
        vec![body]
    }

    fn message<'a>(&mut self, mut p: Object<'a>) -> RecBody<'a> {
        let role = p.get("role").and_then(Value::as_str).unwrap_or("").to_owned();
        let blocks = content_blocks(p.take("content"));
        match role.as_str() {
            "assistant" => self.assistant(blocks),
            "user" => RecBody::User(Value::Array(blocks)),
            _ => RecBody::System(Value::Array(blocks)),
        }
    }

    fn output<'a>(&mut self, mut p: Object<'a>, d: &mut Diags) -> RecBody<'a> {
        let id = p.take("call_id").unwrap_or(Value::str(""));
        let name = self.calls.get(&to_py_str(&id)).cloned().unwrap_or_else(|| "unknown".into());
        let content = match p.take("output").or_else(|| p.take("tools")) {
            Some(Value::Str(s)) => Value::Str(s),
            Some(Value::Array(items)) => Value::Array(content_blocks(Some(Value::Array(items)))),
            Some(Value::Object(o)) => match o.get("content").or_else(|| o.get("output")) {
                Some(Value::Str(s)) => Value::str(s.to_string()),
                _ => Value::str(crate::events::to_json(&Value::Object(o))),
            },
            Some(other) if other.truthy() => {
                d.warn("codex tool output is not a string; rendered as JSON");
                Value::str(crate::events::to_json(&other))
            }
            _ => Value::str(""),
        };
        RecBody::User(Value::Array(vec![tool_result_block(id, name, false, content)]))
    }
}

fn field(p: &Object<'_>, key: &str) -> String {
    p.get(key).map(to_py_str).unwrap_or_default()
}

/// `arguments` (a JSON string, or already an object) or `input`, as a tool-call input object.
fn call_input<'a>(p: &mut Object<'a>) -> Value<'a> {
    match p.take("arguments").or_else(|| p.take("input")).or_else(|| p.take("action")) {
        Some(Value::Str(s)) => tool_input_from_text(s),
        Some(v @ Value::Object(_)) => v,
        Some(Value::Null) | None => Value::Object(Object::default()),
        Some(other) => Value::object([("input", other)]),
    }
}

/// Reasoning text: the full `content` if present, else the summary parts.
fn reasoning_text(p: &Object<'_>) -> String {
    let parts = |key: &str| -> Vec<String> {
        p.get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items.iter().filter_map(|i| i.get("text").and_then(Value::as_str).map(str::to_owned)).collect()
            })
            .unwrap_or_default()
    };
    let content = parts("content");
    let chosen = if content.is_empty() { parts("summary") } else { content };
    chosen.join("\n\n")
}

/// Codex content items (`input_text`, `output_text`, `input_image`, …) as Claude blocks.
fn content_blocks<'a>(content: Option<Value<'a>>) -> Vec<Value<'a>> {
    match content {
        Some(Value::Str(s)) => vec![text_block(s)],
        Some(Value::Array(items)) => items.into_iter().filter_map(content_item).collect(),
        _ => Vec::new(),
    }
}

fn content_item(item: Value<'_>) -> Option<Value<'_>> {
    let Value::Object(mut o) = item else {
        return None;
    };
    match o.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text" | "text" | "inputText" | "summary_text") => {
            Some(text_block(take_str(&mut o, "text")))
        }
        Some("refusal") => Some(text_block(take_str(&mut o, "refusal"))),
        Some("input_image") => match o.take("image_url") {
            Some(Value::Str(url)) if !url.is_empty() => Some(image_block(url)),
            _ => Some(text_block("[image]")),
        },
        _ => None,
    }
}

fn take_str<'a>(o: &mut Object<'a>, key: &str) -> Cow<'a, str> {
    match o.take(key) {
        Some(Value::Str(s)) => s,
        Some(other) => Cow::Owned(to_py_str(&other)),
        None => Cow::Borrowed(""),
    }
}

/// A `data:<type>;base64,<payload>` URL becomes a base64 image; other URLs are kept as text.
fn image_block(url: Cow<'_, str>) -> Value<'_> {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((media_type, data)) = rest.split_once(";base64,")
    {
        let source = Value::object([
            ("type", Value::str("base64")),
            ("media_type", Value::str(media_type.to_string())),
            ("data", Value::str(data.to_string())),
        ]);
        return Value::object([("type", Value::str("image")), ("source", source)]);
    }
    text_block(format!("[image: {url}]"))
}
