//! What a manifest keeps of the evicted span besides pointers: anchor events and retrieval hints
//! (file paths, identifiers, exact error strings, tool names). Deterministic extraction, no model.
use std::collections::BTreeMap;
use std::sync::LazyLock;

use memex_event::EventKind;
use memex_pointer::ContextEvent;
use regex::Regex;

/// Why an evicted event is an anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnchorKind {
    Constraint,
    Decision,
    /// A user message that corrects the agent.
    Correction,
    /// A tool error, or a tool result whose output reports an error.
    Error,
}

impl AnchorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AnchorKind::Constraint => "constraint",
            AnchorKind::Decision => "decision",
            AnchorKind::Correction => "correction",
            AnchorKind::Error => "error",
        }
    }
}

static PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        (?:[A-Za-z0-9_.~-]+/)+[A-Za-z0-9_.-]+          # a/b/c.py, ./x/y
        | [A-Za-z0-9_-]+\.(?:py|rs|js|ts|tsx|jsx|go|java|c|h|cc|cpp|hpp|rb|php|toml|json|ya?ml|cfg|ini|md|rst|txt|sh|sql|html|css|lock|xml|proto)\b",
    )
    .unwrap_or_else(|e| panic!("static regex: {e}"))
});

static IDENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(?:[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]+|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]+)\b")
        .unwrap_or_else(|e| panic!("static regex: {e}"))
});

static ERROR_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?:\b[A-Z][A-Za-z]*(?:Error|Exception)\b|\berror(?:\[E\d+\])?:|\bFAILED\b|\bpanicked at\b|\bfatal:|No such file or directory|command not found|Segmentation fault)",
    )
    .unwrap_or_else(|e| panic!("static regex: {e}"))
});

static CORRECTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:no\b|nope\b|wrong\b|stop\b|actually\b|instead\b|that'?s not\b)|\b(?:don'?t|do not|never|instead of|not what I)\b")
        .unwrap_or_else(|e| panic!("static regex: {e}"))
});

/// The first line of `text` that reports an error, trimmed and cut to `max` characters.
pub fn error_line(text: &str, max: usize) -> Option<String> {
    text.lines().map(str::trim).find(|l| ERROR_LINE.is_match(l)).map(|l| cut(l, max))
}

/// Why `e` is an anchor, if it is one.
pub fn anchor_kind(e: &ContextEvent) -> Option<AnchorKind> {
    match e.kind {
        EventKind::Constraint => Some(AnchorKind::Constraint),
        EventKind::Decision => Some(AnchorKind::Decision),
        EventKind::ToolError => Some(AnchorKind::Error),
        EventKind::ToolResult if error_line(&e.content, 200).is_some() => Some(AnchorKind::Error),
        EventKind::UserMessage if CORRECTION.is_match(first_line(&e.content)) => Some(AnchorKind::Correction),
        _ => None,
    }
}

/// A one-line label for an anchor: the error line for errors, else the first non-empty line.
pub fn anchor_label(e: &ContextEvent, kind: AnchorKind, max: usize) -> String {
    if kind == AnchorKind::Error
        && let Some(l) = error_line(&e.content, max)
    {
        return l;
    }
    cut(first_line(&e.content), max)
}

fn first_line(text: &str) -> &str {
    text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("")
}

/// Cuts to at most `max` characters, marking the cut with `…`.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Retrieval hints derived from evicted events; each list is ranked (most useful first).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hints {
    pub files: Vec<String>,
    pub identifiers: Vec<String>,
    /// Exact error strings, verbatim (trimmed).
    pub errors: Vec<String>,
    pub tools: Vec<String>,
}

/// How many of each hint a manifest stores (it renders fewer).
pub const STORED_HINTS: usize = 16;

/// Ranks by count (descending), then first appearance.
#[derive(Default)]
struct Tally {
    counts: BTreeMap<String, (usize, usize)>,
    next: usize,
}

impl Tally {
    fn add(&mut self, s: &str) {
        let next = self.next;
        let entry = self.counts.entry(s.to_owned()).or_insert((0, next));
        if entry.0 == 0 {
            self.next += 1;
        }
        entry.0 += 1;
    }

    fn top(self, n: usize) -> Vec<String> {
        let mut v: Vec<(String, (usize, usize))> = self.counts.into_iter().collect();
        v.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
        v.into_iter().take(n).map(|(s, _)| s).collect()
    }
}

/// Derives the hints of a set of evicted events (in seq order).
pub fn derive_hints<'a>(events: impl IntoIterator<Item = &'a ContextEvent>) -> Hints {
    let (mut files, mut idents, mut tools) = (Tally::default(), Tally::default(), Tally::default());
    let mut errors: Vec<String> = Vec::new();
    for e in events {
        if let Some(t) = &e.tool_name {
            tools.add(t);
        }
        let text = e.content.as_str();
        for m in PATH.find_iter(text) {
            let p = m.as_str().trim_matches(|c| c == '.' || c == '-');
            if p.len() >= 3 && p.len() <= 160 && !p.starts_with("//") && p.chars().any(|c| c.is_ascii_alphabetic()) {
                files.add(p);
            }
        }
        for m in IDENT.find_iter(text) {
            let s = m.as_str();
            if s.len() >= 4 && s.len() <= 64 {
                idents.add(s);
            }
        }
        if matches!(e.kind, EventKind::ToolResult | EventKind::ToolError) {
            for line in text.lines().map(str::trim).filter(|l| ERROR_LINE.is_match(l)) {
                let line = cut(line, 200);
                if !errors.contains(&line) && errors.len() < STORED_HINTS {
                    errors.push(line);
                }
            }
        }
    }
    Hints {
        files: files.top(STORED_HINTS),
        identifiers: idents.top(STORED_HINTS),
        errors,
        tools: tools.top(STORED_HINTS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memex_pointer::EventFlags;
    use uuid::Uuid;

    pub(crate) fn ev(seq: u64, kind: EventKind, tool: Option<&str>, content: &str) -> ContextEvent {
        ContextEvent {
            id: Uuid::from_u128(seq as u128),
            session_id: Uuid::nil(),
            seq,
            kind,
            tool_name: tool.map(str::to_owned),
            content: content.into(),
            artifact: None,
            task_id: None,
            task_state_version: None,
            time_ms: 0,
            flags: EventFlags::default(),
        }
    }

    #[test]
    fn hints_find_paths_identifiers_errors_and_tools() {
        let events = [
            ev(1, EventKind::ToolCall, Some("Bash"), "grep -n separability_matrix astropy/modeling/separable.py"),
            ev(
                2,
                EventKind::ToolResult,
                None,
                "Traceback (most recent call last):\n  File \"astropy/modeling/separable.py\", line 3\nModuleNotFoundError: No module named 'erfa'\n",
            ),
            ev(3, EventKind::ToolCall, Some("Bash"), "cat setup.cfg && python reproduce_issue.py"),
        ];
        let h = derive_hints(&events);
        assert_eq!(h.files[0], "astropy/modeling/separable.py");
        assert!(h.files.contains(&"setup.cfg".to_owned()) && h.files.contains(&"reproduce_issue.py".to_owned()));
        assert!(h.identifiers.contains(&"separability_matrix".to_owned()), "{:?}", h.identifiers);
        assert!(h.identifiers.contains(&"ModuleNotFoundError".to_owned()));
        assert_eq!(h.errors, vec!["ModuleNotFoundError: No module named 'erfa'".to_owned()]);
        assert_eq!(h.tools, vec!["Bash"]);
    }

    #[test]
    fn anchors_are_decisions_constraints_errors_and_corrections() {
        assert_eq!(anchor_kind(&ev(1, EventKind::Decision, None, "use v2")), Some(AnchorKind::Decision));
        assert_eq!(anchor_kind(&ev(1, EventKind::Constraint, None, "no API change")), Some(AnchorKind::Constraint));
        assert_eq!(anchor_kind(&ev(1, EventKind::ToolError, None, "boom")), Some(AnchorKind::Error));
        let failing =
            ev(1, EventKind::ToolResult, None, "collected 3 items\nFAILED test_x.py::test_a - AssertionError\n");
        assert_eq!(anchor_kind(&failing), Some(AnchorKind::Error));
        assert_eq!(anchor_label(&failing, AnchorKind::Error, 30), "FAILED test_x.py::test_a - As…");
        assert_eq!(anchor_kind(&ev(1, EventKind::ToolResult, None, "ok")), None);
        assert_eq!(
            anchor_kind(&ev(1, EventKind::UserMessage, None, "No, don't touch the tests")),
            Some(AnchorKind::Correction)
        );
        assert_eq!(anchor_kind(&ev(1, EventKind::UserMessage, None, "please fix the bug")), None);
    }
}
