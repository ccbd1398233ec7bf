//! Claude Code session JSONL (the reference's only input).

use super::LineLexer;
use crate::diag::Diags;
use crate::json::{Object, Schema, Value};
use crate::record::{Rec, RecBody, RecMeta, RecStats, count_tool_uses};

/// Types dropped before chunk merging.
const DISCARD_TYPES: [&str; 4] = ["queue-operation", "file-history-snapshot", "last-prompt", "progress"];
/// System subtypes dropped before chunk merging.
const DISCARD_SUBTYPES: [&str; 5] =
    ["stop_hook_summary", "api_error", "bridge_status", "informational", "local_command"];

const MESSAGE: &[(&str, Schema)] =
    &[("id", Schema::Full), ("content", Schema::Full), ("usage", Schema::Full), ("model", Schema::Full)];
const TOOL_USE_RESULT: &[(&str, Schema)] = &[("agentId", Schema::Full), ("totalTokens", Schema::Full)];

/// Only these fields are built; the rest of each record (often most of its bytes, e.g. the
/// `toolUseResult` copy of every tool output) is validated and skipped.
pub(crate) const RECORD: Schema = Schema::Fields(&[
    ("type", Schema::Full),
    ("subtype", Schema::Full),
    ("content", Schema::Full),
    ("message", Schema::Fields(MESSAGE)),
    ("isCompactSummary", Schema::Full),
    ("timestamp", Schema::Full),
    ("toolUseResult", Schema::ObjectOnly(TOOL_USE_RESULT)),
    ("uuid", Schema::Full),
    ("sessionId", Schema::Full),
    ("agentId", Schema::Full),
    ("isSidechain", Schema::Full),
]);

#[derive(Debug, Default, Clone)]
pub(crate) struct ClaudeLexer;

impl LineLexer for ClaudeLexer {
    fn boxed_clone(&self) -> Box<dyn LineLexer + Send + Sync> {
        Box::new(self.clone())
    }

    fn schema(&self) -> Schema {
        RECORD
    }

    fn record<'a>(&mut self, line: u32, record: Object<'a>, d: &mut Diags) -> Vec<Rec<'a>> {
        vec![classify(line, record, d)]
    }
}

fn classify<'a>(line: u32, mut r: Object<'a>, d: &mut Diags) -> Rec<'a> {
    let rtype = r.get("type").and_then(Value::as_str).map(str::to_owned);
    let subtype = r.get("subtype").and_then(Value::as_str).map(str::to_owned);
    let (rtype, subtype) = (rtype.as_deref(), subtype.as_deref());
    let discard = rtype.is_some_and(|t| DISCARD_TYPES.contains(&t))
        || (rtype == Some("system") && subtype.is_some_and(|s| DISCARD_SUBTYPES.contains(&s)));
    if discard {
        return Rec::new(line, RecBody::Discard);
    }
    let mut message = match r.take("message") {
        Some(Value::Object(m)) => m,
        None => Object::default(),
        Some(_) => {
            d.warn("`message` is not an object; ignored");
            Object::default()
        }
    };
    let stats = stats(&mut r, &mut message);
    let meta = meta(&r);
    let content = message.take("content");
    let body = match rtype {
        Some("assistant") => RecBody::Assistant {
            id: message.take("id").unwrap_or(Value::Null),
            content: content.unwrap_or(Value::Null),
        },
        Some("user") if r.get("isCompactSummary").is_some_and(Value::truthy) => {
            RecBody::CompactSummary(content.unwrap_or(Value::Null))
        }
        Some("user") => RecBody::User(content.unwrap_or(Value::Null)),
        Some("system") if subtype == Some("compact_boundary") => RecBody::Boundary,
        Some("system") => {
            let own = r.take("content").filter(Value::truthy);
            RecBody::System(own.or(content).unwrap_or(Value::Null))
        }
        _ => RecBody::Ignored,
    };
    Rec { line, body, stats, meta, explicit_tool_names: false }
}

fn stats<'a>(r: &mut Object<'a>, message: &mut Object<'a>) -> RecStats<'a> {
    let subagent_tokens = match r.get("toolUseResult") {
        Some(tur) if tur.get("agentId").is_some_and(Value::truthy) => match tur.get("totalTokens") {
            Some(v) => py_int(v),
            None => Some(0),
        },
        _ => None,
    };
    RecStats {
        timestamp: r.get("timestamp").cloned(),
        usage: message.take("usage").filter(Value::truthy),
        model: message.take("model"),
        tool_uses: count_tool_uses(message.get("content")),
        subagent_tokens,
    }
}

fn meta(r: &Object<'_>) -> RecMeta {
    let text = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
    let mut extra = serde_json::Map::new();
    for key in ["uuid", "sessionId"] {
        if let Some(v) = text(key) {
            extra.insert(key.into(), serde_json::Value::String(v));
        }
    }
    if let Some(Value::Bool(b)) = r.get("isSidechain") {
        extra.insert("isSidechain".into(), serde_json::Value::Bool(*b));
    }
    RecMeta { timestamp: text("timestamp"), agent_id: text("agentId"), extra: (!extra.is_empty()).then_some(extra) }
}

/// Python's `int(v)` for the values a JSON field can hold; `None` where it raises.
pub(crate) fn py_int(v: &Value<'_>) -> Option<i128> {
    match v {
        Value::Int(digits) => digits.parse().ok(),
        Value::Bool(b) => Some(i128::from(*b)),
        Value::Float(f) if f.is_finite() => Some(f.trunc() as i128),
        Value::Str(s) => {
            let t = crate::text::py_strip(s).replace('_', "");
            let t = t.strip_prefix('+').unwrap_or(&t);
            let ok =
                !t.is_empty() && !s.contains("__") && t.trim_start_matches('-').bytes().all(|c| c.is_ascii_digit());
            if ok { t.parse().ok() } else { None }
        }
        _ => None,
    }
}
