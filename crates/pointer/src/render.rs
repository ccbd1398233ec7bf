//! The adaptive-view form: `(s1:41-62) [tool_result] Bash`, then the lines.
use std::fmt::Write as _;

use uuid::Uuid;

use crate::{ContextEvent, LineRange, SeqRange, ViewBlock};

/// Short names for the sessions a block cites, in order of first use: `s1`, `s2`, …
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionAliases {
    sessions: Vec<Uuid>,
}

impl SessionAliases {
    /// Aliases whose `s1` is `first` (the requesting session).
    pub fn starting_with(first: Uuid) -> SessionAliases {
        SessionAliases { sessions: vec![first] }
    }

    /// The alias of `session`, assigning the next one if it has none yet.
    pub fn alias(&mut self, session: Uuid) -> String {
        let i = match self.sessions.iter().position(|s| *s == session) {
            Some(i) => i,
            None => {
                self.sessions.push(session);
                self.sessions.len() - 1
            }
        };
        format!("s{}", i + 1)
    }

    /// `sessions: s1=<uuid>, s2=<uuid>` — the line that declares the aliases used.
    pub fn legend(&self) -> String {
        let mut out = String::from("sessions:");
        for (i, s) in self.sessions.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            let _ = write!(out, "{sep}s{}={s}", i + 1);
        }
        out
    }

    pub fn sessions(&self) -> &[Uuid] {
        &self.sessions
    }
}

/// A pointer as text: `(s1:41-62)` with full-view lines, `(s1@17)` / `(s1@17-40)` with seqs.
pub fn cite(alias: &str, lines: Option<LineRange>, seqs: SeqRange) -> String {
    match lines {
        Some(l) => format!("({alias}:{l})"),
        None => format!("({alias}@{seqs})"),
    }
}

/// `(s1:41-62) [tool_result] Bash` — the header of an event in the adaptive-view form.
pub fn event_header(alias: &str, event: &ContextEvent, lines: Option<LineRange>) -> String {
    let mut h = cite(alias, lines, event.seqs());
    let _ = write!(h, " [{}]", event.kind);
    if let Some(tool) = &event.tool_name {
        let _ = write!(h, " {tool}");
    }
    if let Some(a) = &event.artifact {
        let _ = write!(h, " (excerpt; full output {} bytes in artifact {})", a.size, a.id);
    }
    h
}

/// The whole event in the adaptive-view form: the header, then its lines — the full-view lines
/// when VCC located the event, else its stored content — ending with a newline.
pub fn render_event(alias: &str, event: &ContextEvent, view: Option<&ViewBlock>) -> String {
    let mut out = event_header(alias, event, view.map(|v| v.range));
    out.push('\n');
    match view {
        Some(v) => {
            for line in v.lines.iter() {
                out.push_str(line);
                out.push('\n');
            }
        }
        None => {
            out.push_str(event.content.trim_end_matches('\n'));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArtifactPointer, EventFlags};
    use memex_event::EventKind;

    fn event(kind: EventKind, tool: Option<&str>, content: &str) -> ContextEvent {
        ContextEvent {
            id: Uuid::nil(),
            session_id: Uuid::nil(),
            seq: 17,
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
    fn headers_follow_the_adaptive_view() {
        let e = event(EventKind::ToolResult, Some("Bash"), "ok\n");
        let lines = LineRange::new(41, 62);
        assert_eq!(event_header("s1", &e, lines), "(s1:41-62) [tool_result] Bash");
        assert_eq!(event_header("s2", &e, None), "(s2@17) [tool_result] Bash");
        let mut big = e.clone();
        big.artifact = Some(ArtifactPointer { id: "blake3:ab".into(), size: 90000 });
        assert_eq!(
            event_header("s1", &big, None),
            "(s1@17) [tool_result] Bash (excerpt; full output 90000 bytes in artifact blake3:ab)"
        );
        assert_eq!(
            render_event("s1", &event(EventKind::UserMessage, None, "hi\n\n"), None),
            "(s1@17) [user_message]\nhi\n"
        );
        let view =
            ViewBlock { range: LineRange { first: 3, last: 4 }, lines: vec!["[user]".into(), "hi".into()].into() };
        assert_eq!(render_event("s1", &e, Some(&view)), "(s1:3-4) [tool_result] Bash\n[user]\nhi\n");
    }

    #[test]
    fn aliases_are_stable_and_declared() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut al = SessionAliases::starting_with(a);
        assert_eq!(al.alias(b), "s2");
        assert_eq!(al.alias(a), "s1");
        assert_eq!(al.alias(b), "s2");
        assert_eq!(
            al.legend(),
            "sessions: s1=00000000-0000-0000-0000-000000000001, s2=00000000-0000-0000-0000-000000000002"
        );
        assert_eq!(cite("s1", None, SeqRange { first: 3, last: 9 }), "(s1@3-9)");
    }
}
