//! The memory's plain data: what goes in (events as the interpreter sees them) and what comes out
//! (turns, segments, facts). Every output names the seqs it came from, so the shell can turn
//! them into pointers `session:first-last` into the full view.
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One event of a session, as the memory reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemEvent {
    pub seq: u64,
    /// The event kind's wire name (`user_message`, `tool_call`, …, or an `x-` kind).
    pub kind: String,
    pub content: String,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    pub agent_id: String,
    pub time: DateTime<Utc>,
    /// The session had been quiet for `idle_close_secs` when this event arrived. The worker may
    /// have closed the turn before it then, so a turn opens here in every reading (a rebuild too).
    pub after_quiet: bool,
}

impl MemEvent {
    pub fn is(&self, kind: &str) -> bool {
        self.kind == kind
    }
}

/// An inclusive range of seqs within one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct SeqSpan {
    pub first: u64,
    pub last: u64,
}

impl SeqSpan {
    pub fn one(seq: u64) -> SeqSpan {
        SeqSpan { first: seq, last: seq }
    }

    pub fn new(first: u64, last: u64) -> SeqSpan {
        SeqSpan { first: first.min(last), last: first.max(last) }
    }

    pub fn contains(&self, seq: u64) -> bool {
        self.first <= seq && seq <= self.last
    }
}

/// A turn: the unit the memory tags. It starts at a user message, or at an assistant message or
/// thinking that follows tool output (the agent's next step), and runs to the event before the
/// next start; see `turns.rs`.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub span: SeqSpan,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// What the turn says, each part with the seq it came from: user and assistant text, one line
    /// per tool call, and the key lines of tool output (errors, test and exit summaries) verbatim.
    /// The rest of tool output stays out (§3.7).
    pub parts: Vec<TurnPart>,
    /// True when a user message opens the turn.
    pub from_user: bool,
    /// The turn's tool calls: (tool name, input as sent).
    pub calls: Vec<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartRole {
    User,
    Assistant,
    /// A tool call's line (`Bash: cargo test`).
    Call,
    /// A key line of tool output.
    Output,
    /// A decision, constraint, report or note event.
    Note,
}

impl PartRole {
    pub fn label(self) -> &'static str {
        match self {
            PartRole::User => "user",
            PartRole::Assistant => "assistant",
            PartRole::Call => "call",
            PartRole::Output => "output",
            PartRole::Note => "note",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnPart {
    pub seq: u64,
    pub role: PartRole,
    pub text: String,
}

impl Turn {
    /// The text tags, keywords and vectors are made from: every part but tool output.
    pub fn text(&self) -> String {
        self.joined(|r| r != PartRole::Output)
    }

    /// What was said: user, assistant and note parts.
    pub fn prose(&self) -> String {
        self.joined(|r| matches!(r, PartRole::User | PartRole::Assistant | PartRole::Note))
    }

    fn joined(&self, keep: impl Fn(PartRole) -> bool) -> String {
        let mut out = String::new();
        for p in self.parts.iter().filter(|p| keep(p.role)) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&p.text);
        }
        out
    }

    /// Key output lines, with their seqs.
    pub fn output_lines(&self) -> impl Iterator<Item = &TurnPart> {
        self.parts.iter().filter(|p| p.role == PartRole::Output)
    }
}

/// A turn as the memory keeps it: its canonical tags (most specific first) and the analyzer's
/// content terms, for the segmenter.
#[derive(Debug, Clone, PartialEq)]
pub struct TaggedTurn {
    pub turn: Turn,
    pub tags: Vec<String>,
    pub keywords: Vec<String>,
    /// A vector of the turn's text, when the shell has an embedder.
    pub vector: Option<Vec<f32>>,
}

/// Contiguous same-topic turns of one session: the unit of storage and retrieval (§3.3).
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub span: SeqSpan,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// The turns' spans, in order.
    pub turns: Vec<SeqSpan>,
    /// Every tag of its turns, by how many turns carry it (then by name).
    pub tags: Vec<String>,
    /// The tag naming it best: the first of `tags` (most turns), ties to the more specific.
    pub primary_tag: Option<String>,
    /// The first seq of an earlier segment of the same session it was merged back into (§3.3,
    /// threshold 0.35), or its own first seq.
    pub group: u64,
    /// Tokens of the turns' text.
    pub tokens: usize,
    pub summary: Summary,
}

/// An extractive summary: sentences and key lines chosen from the source, each verbatim, each
/// with the seq it came from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Summary {
    pub lines: Vec<SummaryLine>,
    /// Exact tokens of the rendered summary (`render`).
    pub tokens: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryLine {
    pub seq: u64,
    pub text: String,
}

impl Summary {
    /// One line per sentence.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (i, l) in self.lines.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&l.text);
        }
        out
    }
}

/// What kind of thing a fact states (§3.4's personal / experience / world, and what agent traces
/// are made of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactType {
    /// A file created, edited, deleted or read.
    File,
    /// A command run, and its exit status.
    Command,
    /// A test (or test suite) that passed or failed.
    Test,
    /// A package installed.
    Package,
    /// An error first seen, or resolved.
    Error,
    /// A decision (a `decision` event).
    Decision,
    /// A constraint (a `constraint` event, or a user's "must", "never", "do not").
    Constraint,
    /// A user's preference.
    Preference,
    /// A user's correction of the agent.
    Correction,
    /// About the user: identity, life.
    Personal,
    /// Something that happened, told in the dialogue.
    Experience,
    /// An external fact.
    World,
}

impl FactType {
    pub const ALL: [FactType; 12] = [
        FactType::File,
        FactType::Command,
        FactType::Test,
        FactType::Package,
        FactType::Error,
        FactType::Decision,
        FactType::Constraint,
        FactType::Preference,
        FactType::Correction,
        FactType::Personal,
        FactType::Experience,
        FactType::World,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FactType::File => "file",
            FactType::Command => "command",
            FactType::Test => "test",
            FactType::Package => "package",
            FactType::Error => "error",
            FactType::Decision => "decision",
            FactType::Constraint => "constraint",
            FactType::Preference => "preference",
            FactType::Correction => "correction",
            FactType::Personal => "personal",
            FactType::Experience => "experience",
            FactType::World => "world",
        }
    }

    pub fn parse(s: &str) -> Option<FactType> {
        FactType::ALL.into_iter().find(|t| t.name() == s)
    }

    /// Whether facts of this type about one subject form a chain in which the newer supersedes
    /// the older by subject alone (a file's latest state, a test's latest outcome). The dialogue
    /// types are matched by content instead (`supersede.rs`).
    pub fn chained_by_subject(self) -> bool {
        matches!(self, FactType::File | FactType::Command | FactType::Test | FactType::Package | FactType::Error)
    }
}

/// §3.4's temporal status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TemporalStatus {
    Active,
    Completed,
    Planned,
    Abandoned,
    Recurring,
}

impl TemporalStatus {
    pub const ALL: [TemporalStatus; 5] = [
        TemporalStatus::Active,
        TemporalStatus::Completed,
        TemporalStatus::Planned,
        TemporalStatus::Abandoned,
        TemporalStatus::Recurring,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TemporalStatus::Active => "active",
            TemporalStatus::Completed => "completed",
            TemporalStatus::Planned => "planned",
            TemporalStatus::Abandoned => "abandoned",
            TemporalStatus::Recurring => "recurring",
        }
    }

    pub fn parse(s: &str) -> Option<TemporalStatus> {
        TemporalStatus::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// A structured fact (§3.4): subject–verb–object, the 5W, status, type, and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    pub fact_type: FactType,
    pub subject: String,
    pub verb: String,
    pub object: String,
    /// A full sentence, quoting the source where it can.
    pub what: String,
    pub who: String,
    /// When it happened: the event's time, or a date the text names (resolved against it).
    pub when: DateTime<Utc>,
    /// A file, directory or place, when there is one.
    pub place: String,
    pub why: String,
    pub status: TemporalStatus,
    /// The events it was read from.
    pub span: SeqSpan,
}

impl Fact {
    /// The subject as chains compare it (case and surrounding noise folded).
    pub fn subject_key(&self) -> String {
        subject_key(self.fact_type, &self.subject)
    }
}

/// How facts of `fact_type` compare subjects: paths by their text without `./` and a trailing
/// slash, the rest case-folded with whitespace collapsed.
pub fn subject_key(fact_type: FactType, subject: &str) -> String {
    let s = subject.trim();
    match fact_type {
        FactType::File => s.trim_start_matches("./").trim_end_matches('/').to_owned(),
        FactType::Test => s.trim_start_matches("./").split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase(),
        _ => s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase(),
    }
}
