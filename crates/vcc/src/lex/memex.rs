//! memex's own events, as exported by the service: JSONL, one event per line, in `seq` order.
//!
//! Structure: one chain per session (a new chain starts when `session_id` changes); a section
//! per event, except that consecutive assistant-side events of one agent (`assistant_message`,
//! `thinking`, `tool_call`) form one `[assistant]` section, as the chunks of one streamed Claude
//! message do. `tool_result`/`tool_error` get their own `[tool]`/`[tool_error]` section named
//! after the call seen *earlier* with the same `tool_call_id` (or their own `tool_name`), so
//! appending events never changes an earlier line. `decision`, `constraint`, `report`, `note`
//! and `x-…` extension kinds get a section headed by their kind (`[decision]`).

use super::{LineLexer, text_block, thinking_block, tool_input_from_text, tool_result_block, tool_use_block};
use crate::diag::Diags;
use crate::json::{Object, Schema, Value};
use crate::pyfmt::to_py_str;
use crate::record::{Rec, RecBody, RecMeta};
use std::collections::HashMap;

const LABELED_KINDS: [&str; 4] = ["decision", "constraint", "report", "note"];

#[derive(Debug, Default, Clone)]
pub(crate) struct MemexLexer {
    session: Option<String>,
    calls: HashMap<String, String>,
    group: u64,
    group_agent: Option<Option<String>>,
}

impl LineLexer for MemexLexer {
    fn boxed_clone(&self) -> Box<dyn LineLexer + Send + Sync> {
        Box::new(self.clone())
    }

    fn schema(&self) -> Schema {
        Schema::Full
    }

    fn record<'a>(&mut self, line: u32, mut e: Object<'a>, d: &mut Diags) -> Vec<Rec<'a>> {
        let text = |e: &Object<'_>, k: &str| e.get(k).and_then(Value::as_str).map(str::to_owned);
        let mut out = Vec::new();
        let session = text(&e, "session_id");
        if self.session.is_some() && session != self.session {
            out.push(Rec::new(line, RecBody::Boundary));
            self.calls.clear();
            self.group_agent = None;
        }
        self.session = session;
        let meta = meta(&e);
        let kind = text(&e, "kind").unwrap_or_default();
        let body = self.body(&kind, &mut e, meta.agent_id.clone(), d);
        if !matches!(body, RecBody::Assistant { .. }) {
            self.group_agent = None;
        }
        let mut rec = Rec::new(line, body);
        rec.explicit_tool_names = true;
        rec.stats.timestamp = meta.timestamp.clone().map(Value::str);
        rec.meta = meta;
        out.push(rec);
        out
    }
}

impl MemexLexer {
    fn body<'a>(&mut self, kind: &str, e: &mut Object<'a>, agent: Option<String>, d: &mut Diags) -> RecBody<'a> {
        let content = e.take("content").unwrap_or(Value::str(""));
        let content_text = || match &content {
            Value::Str(s) => s.clone(),
            Value::Null => "".into(),
            other => to_py_str(other).into(),
        };
        match kind {
            "user_message" => RecBody::User(Value::Str(content_text())),
            "system" => RecBody::System(Value::Str(content_text())),
            "assistant_message" => self.assistant(agent, text_block(content_text())),
            "thinking" => self.assistant(agent, thinking_block(content_text())),
            "tool_call" => {
                let id = e.take("tool_call_id").unwrap_or(Value::str(""));
                let name = e.get("tool_name").map(to_py_str).unwrap_or_else(|| "unknown".into());
                self.calls.insert(to_py_str(&id), name.clone());
                let input = tool_input_from_text(content_text());
                self.assistant(agent, tool_use_block(id, Value::str(name), input))
            }
            "tool_result" | "tool_error" => {
                let id = e.take("tool_call_id").unwrap_or(Value::str(""));
                let name = match e.get("tool_name").filter(|n| n.truthy()) {
                    Some(n) => to_py_str(n),
                    None => self.calls.get(&to_py_str(&id)).cloned().unwrap_or_else(|| "unknown".into()),
                };
                let is_error = kind == "tool_error";
                let block = tool_result_block(id, name, is_error, Value::Str(content_text()));
                RecBody::User(Value::Array(vec![block]))
            }
            k if LABELED_KINDS.contains(&k) || k.starts_with("x-") => {
                RecBody::Labeled { label: k.to_string(), content: Value::Str(content_text()) }
            }
            other => {
                d.warn(format!("unknown event kind {other:?}; rendered under its own label"));
                let label = if other.is_empty() { "event".to_string() } else { other.to_string() };
                RecBody::Labeled { label, content: Value::Str(content_text()) }
            }
        }
    }

    fn assistant<'a>(&mut self, agent: Option<String>, block: Value<'a>) -> RecBody<'a> {
        if self.group_agent.as_ref() != Some(&agent) {
            self.group += 1;
            self.group_agent = Some(agent);
        }
        RecBody::Assistant { id: Value::str(format!("memex-{}", self.group)), content: Value::Array(vec![block]) }
    }
}

fn meta(e: &Object<'_>) -> RecMeta {
    let mut extra = serde_json::Map::new();
    for key in ["id", "seq", "session_id", "task_id", "ingest_time"] {
        if let Some(v) = e.get(key).filter(|v| !matches!(v, Value::Null)) {
            extra.insert(key.into(), crate::events::to_serde(v));
        }
    }
    if let Some(artifact) = e.get("artifact").filter(|v| v.truthy()) {
        extra.insert("artifact".into(), crate::events::to_serde(artifact));
    }
    if let Some(m) = e.get("metadata").filter(|v| v.truthy()) {
        extra.insert("metadata".into(), crate::events::to_serde(m));
    }
    RecMeta {
        timestamp: e.get("event_time").and_then(Value::as_str).map(str::to_owned),
        agent_id: e.get("agent_id").and_then(Value::as_str).map(str::to_owned),
        extra: Some(extra),
    }
}
