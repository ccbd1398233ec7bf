//! Event kinds: a closed set of built-in kinds plus open extension kinds (`x-…`).

use std::fmt;

/// What an event is. The built-in kinds are the vocabulary the views, compaction and packing
/// understand; extension kinds (`x-` prefix) are stored and returned verbatim so integrations can
/// record their own event types without a schema change.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    UserMessage,
    AssistantMessage,
    Thinking,
    ToolCall,
    ToolResult,
    ToolError,
    System,
    Decision,
    Constraint,
    Report,
    Note,
    /// An integration-defined kind; the string keeps its `x-` prefix.
    Extension(String),
}

/// The built-in kinds with their wire names, in documentation order.
pub const BUILTIN_KINDS: [(&str, EventKind); 11] = [
    ("user_message", EventKind::UserMessage),
    ("assistant_message", EventKind::AssistantMessage),
    ("thinking", EventKind::Thinking),
    ("tool_call", EventKind::ToolCall),
    ("tool_result", EventKind::ToolResult),
    ("tool_error", EventKind::ToolError),
    ("system", EventKind::System),
    ("decision", EventKind::Decision),
    ("constraint", EventKind::Constraint),
    ("report", EventKind::Report),
    ("note", EventKind::Note),
];

/// Longest accepted kind name, in bytes.
pub const MAX_KIND_LEN: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    #[error("is empty; expected one of {list} or an extension kind starting with \"x-\"", list = builtin_list())]
    Empty,
    #[error("unknown kind {0:?}; expected one of {list} or an extension kind starting with \"x-\"", list = builtin_list())]
    Unknown(String),
    #[error(
        "extension kind {0:?} is invalid: after \"x-\" use 1 to {max} characters of [a-z0-9_.-]",
        max = MAX_KIND_LEN - 2
    )]
    BadExtension(String),
}

fn builtin_list() -> String {
    BUILTIN_KINDS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

impl EventKind {
    /// Parses a wire name. Built-in names are exact (lower snake case); extension kinds are
    /// `x-` followed by lower-case ASCII letters, digits, `_`, `.` or `-`.
    pub fn parse(s: &str) -> Result<Self, KindError> {
        if s.is_empty() {
            return Err(KindError::Empty);
        }
        if let Some((_, kind)) = BUILTIN_KINDS.iter().find(|(n, _)| *n == s) {
            return Ok(kind.clone());
        }
        if let Some(rest) = s.strip_prefix("x-") {
            let ok = !rest.is_empty()
                && s.len() <= MAX_KIND_LEN
                && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
            return if ok {
                Ok(EventKind::Extension(s.to_owned()))
            } else {
                Err(KindError::BadExtension(s.to_owned()))
            };
        }
        Err(KindError::Unknown(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        match self {
            EventKind::UserMessage => "user_message",
            EventKind::AssistantMessage => "assistant_message",
            EventKind::Thinking => "thinking",
            EventKind::ToolCall => "tool_call",
            EventKind::ToolResult => "tool_result",
            EventKind::ToolError => "tool_error",
            EventKind::System => "system",
            EventKind::Decision => "decision",
            EventKind::Constraint => "constraint",
            EventKind::Report => "report",
            EventKind::Note => "note",
            EventKind::Extension(s) => s,
        }
    }

    /// Tool results and errors are the outputs that may be artifactized and must pair with a call.
    pub fn is_tool_output(&self) -> bool {
        matches!(self, EventKind::ToolResult | EventKind::ToolError)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_round_trip() {
        for (name, kind) in BUILTIN_KINDS {
            assert_eq!(EventKind::parse(name), Ok(kind.clone()));
            assert_eq!(kind.as_str(), name);
        }
    }

    #[test]
    fn extension_kinds_are_kept_verbatim() {
        assert_eq!(EventKind::parse("x-plan_node.v2"), Ok(EventKind::Extension("x-plan_node.v2".into())));
        assert_eq!(EventKind::parse("x-plan_node.v2").map(|k| k.to_string()).as_deref(), Ok("x-plan_node.v2"));
    }

    #[test]
    fn bad_kinds_are_rejected_with_a_reason() {
        assert_eq!(EventKind::parse(""), Err(KindError::Empty));
        assert_eq!(EventKind::parse("User_Message"), Err(KindError::Unknown("User_Message".into())));
        assert_eq!(EventKind::parse("x-"), Err(KindError::BadExtension("x-".into())));
        assert_eq!(EventKind::parse("x-Caps"), Err(KindError::BadExtension("x-Caps".into())));
        let long = format!("x-{}", "a".repeat(MAX_KIND_LEN));
        assert!(matches!(EventKind::parse(&long), Err(KindError::BadExtension(_))));
        let msg = KindError::Unknown("foo".into()).to_string();
        assert!(msg.contains("tool_result") && msg.contains("\"x-\""), "{msg}");
    }
}
