//! The token stream between the lexers and the parser: one [`Rec`] per input record, in the
//! shape of a Claude Code record (every lexer normalises to it, as the reference's later
//! versions do), with the few fields the stats footer and the event mapping need.

use crate::json::Value;

/// One lexed record.
#[derive(Debug)]
pub(crate) struct Rec<'a> {
    /// 1-based input line (of the record's first line for multi-line documents).
    pub line: u32,
    pub body: RecBody<'a>,
    pub stats: RecStats<'a>,
    pub meta: RecMeta,
    /// Tool results carry their tool's name (non-Claude lexers resolve it from earlier calls).
    pub explicit_tool_names: bool,
}

#[derive(Debug)]
pub(crate) enum RecBody<'a> {
    /// Dropped before anything else (`progress`, `file-history-snapshot`, …): it does not even
    /// end a run of streamed assistant chunks.
    Discard,
    /// Kept but not rendered (`summary`, `attachment`, most system subtypes): ends a chunk run
    /// and counts for the stats footer.
    Ignored,
    /// `compact_boundary`: ends the chain.
    Boundary,
    /// A system record's content (string or block list); nothing is rendered if falsy.
    System(Value<'a>),
    /// `isCompactSummary` user record with its `message.content`.
    CompactSummary(Value<'a>),
    /// A user record's `message.content` (string or block list).
    User(Value<'a>),
    /// An assistant record: `message.id` (chunks with the same id merge) and `message.content`.
    Assistant { id: Value<'a>, content: Value<'a> },
    /// A memex event kind with its own header label (`decision`, `note`, `x-…`).
    Labeled { label: String, content: Value<'a> },
}

/// What the stats footer reads from a record.
#[derive(Debug, Default)]
pub(crate) struct RecStats<'a> {
    pub timestamp: Option<Value<'a>>,
    /// `message.usage` when truthy.
    pub usage: Option<Value<'a>>,
    pub model: Option<Value<'a>>,
    /// `tool_use` blocks in `message.content`.
    pub tool_uses: u64,
    /// `toolUseResult.totalTokens` of a sub-agent result.
    pub subagent_tokens: Option<i128>,
}

/// Provenance kept for the event mapping and JSON output.
#[derive(Debug, Default, Clone)]
pub(crate) struct RecMeta {
    pub timestamp: Option<String>,
    pub agent_id: Option<String>,
    /// Extra provenance (uuid, session id, …) as a JSON object.
    pub extra: Option<serde_json::Map<String, serde_json::Value>>,
}

impl<'a> Rec<'a> {
    /// Detaches the record from its input line (to hand it to another thread).
    pub fn into_owned(self) -> Rec<'static> {
        let body = match self.body {
            RecBody::Discard => RecBody::Discard,
            RecBody::Ignored => RecBody::Ignored,
            RecBody::Boundary => RecBody::Boundary,
            RecBody::System(v) => RecBody::System(v.into_owned()),
            RecBody::CompactSummary(v) => RecBody::CompactSummary(v.into_owned()),
            RecBody::User(v) => RecBody::User(v.into_owned()),
            RecBody::Assistant { id, content } => {
                RecBody::Assistant { id: id.into_owned(), content: content.into_owned() }
            }
            RecBody::Labeled { label, content } => RecBody::Labeled { label, content: content.into_owned() },
        };
        let s = self.stats;
        Rec {
            line: self.line,
            body,
            stats: RecStats {
                timestamp: s.timestamp.map(Value::into_owned),
                usage: s.usage.map(Value::into_owned),
                model: s.model.map(Value::into_owned),
                tool_uses: s.tool_uses,
                subagent_tokens: s.subagent_tokens,
            },
            meta: self.meta,
            explicit_tool_names: self.explicit_tool_names,
        }
    }

    pub fn new(line: u32, body: RecBody<'a>) -> Self {
        Rec { line, body, stats: RecStats::default(), meta: RecMeta::default(), explicit_tool_names: false }
    }
}

/// Counts `{"type": "tool_use"}` objects in a content list.
pub(crate) fn count_tool_uses(content: Option<&Value<'_>>) -> u64 {
    content
        .and_then(Value::as_array)
        .map_or(0, |blocks| blocks.iter().filter(|b| b.type_str() == Some("tool_use")).count() as u64)
}
