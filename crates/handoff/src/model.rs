//! What a snapshot is made from and what it is made of.
use memex_memory::{Fact, MemEvent, SeqSpan};
use memex_pointer::ViewLines;

/// The task's state card, when the session works on a task that has one: its current version.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskCard {
    pub task_id: String,
    pub version: u64,
    pub state: memex_task::TaskState,
}

/// Everything a snapshot is built from, as the shell read it from the store.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub task: Option<&'a TaskCard>,
    /// The session's user messages, in seq order (injected text is skipped here).
    pub requests: &'a [MemEvent],
    /// The session's facts, in the order they were completed: memory's stored facts, then those
    /// of the events the memory worker has not read yet.
    pub facts: &'a [Fact],
    /// The session's last events, in seq order: recent actions and the raw tail.
    pub recent: &'a [MemEvent],
    /// The last seq the snapshot covers.
    pub head: u64,
}

/// How much of each part a snapshot shows before the budget decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Tool rounds listed under recent actions.
    pub recent_actions: usize,
    /// Events shown raw at the end.
    pub tail_events: usize,
    /// Longest text of one raw event, and of one user request (characters; cut in the middle).
    pub max_event_chars: usize,
    pub max_request_chars: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { recent_actions: 10, tail_events: 6, max_event_chars: 1_500, max_request_chars: 2_000 }
    }
}

/// The snapshot's sections, in the order they are rendered: Gemini CLI's `<state_snapshot>`
/// elements (its compression prompt's, where `task_state` holds the plan), plus errors and the
/// raw tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Section {
    OverallGoal,
    ActiveConstraints,
    KeyKnowledge,
    FileSystemState,
    Errors,
    RecentActions,
    TaskState,
    RecentRounds,
}

impl Section {
    pub const ALL: [Section; 8] = [
        Section::OverallGoal,
        Section::ActiveConstraints,
        Section::KeyKnowledge,
        Section::FileSystemState,
        Section::Errors,
        Section::RecentActions,
        Section::TaskState,
        Section::RecentRounds,
    ];

    /// The XML element name (and the wire name).
    pub fn name(self) -> &'static str {
        match self {
            Section::OverallGoal => "overall_goal",
            Section::ActiveConstraints => "active_constraints",
            Section::KeyKnowledge => "key_knowledge",
            Section::FileSystemState => "file_system_state",
            Section::Errors => "errors",
            Section::RecentActions => "recent_actions",
            Section::TaskState => "task_state",
            Section::RecentRounds => "recent_rounds",
        }
    }

    /// The Markdown heading.
    pub fn title(self) -> &'static str {
        match self {
            Section::OverallGoal => "Overall goal",
            Section::ActiveConstraints => "Active constraints",
            Section::KeyKnowledge => "Key knowledge",
            Section::FileSystemState => "File-system state",
            Section::Errors => "Errors",
            Section::RecentActions => "Recent actions",
            Section::TaskState => "Task state",
            Section::RecentRounds => "Recent rounds",
        }
    }
}

/// How much an entry matters when the budget is short: the lowest goes first, and within a
/// priority the oldest. User corrections and unresolved errors go last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Priority {
    /// The raw tail.
    Tail,
    /// Files only read.
    FileRead,
    RecentAction,
    /// Done work, resolved errors, packages and other told facts.
    Settled,
    /// User requests between the first and the latest.
    EarlierRequest,
    /// Files created, modified or deleted.
    FileChange,
    /// Decisions and preferences.
    Knowledge,
    /// Failed attempts, pending and next steps.
    Plan,
    /// Goals (the first and the latest request) and constraints.
    Goal,
    /// User corrections and unresolved errors.
    Critical,
}

impl Priority {
    pub fn name(self) -> &'static str {
        match self {
            Priority::Tail => "tail",
            Priority::FileRead => "file_read",
            Priority::RecentAction => "recent_action",
            Priority::Settled => "settled",
            Priority::EarlierRequest => "earlier_request",
            Priority::FileChange => "file_change",
            Priority::Knowledge => "knowledge",
            Priority::Plan => "plan",
            Priority::Goal => "goal",
            Priority::Critical => "critical",
        }
    }
}

/// Where an entry came from: events of the session, or the task's state card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Events(SeqSpan),
    Task,
}

/// One line (or, for a request or a raw event, one block) of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub section: Section,
    /// `done`, `failed attempt`, `pending`, `next`, `unresolved`, `resolved`, `constraint`, …;
    /// empty when the section says it all.
    pub label: &'static str,
    pub text: String,
    pub source: Source,
    pub priority: Priority,
    /// Order within the section and among equals when dropping (older first): the seq the entry
    /// is about, or the card's line number.
    pub order: u64,
}

/// Where an entry's events sit in the full view: their lines, or `None` when they render none
/// (cited by seq then).
pub type Cite = Option<ViewLines>;

/// The snapshot's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `<state_snapshot>` with one element per section (Gemini CLI's layout).
    #[default]
    Xml,
    Markdown,
}

/// An entry as the snapshot shows it, with its citation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub entry: Entry,
    pub cite: Cite,
}

/// A built snapshot: the text, its exact token count, what it shows and what the budget left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub text: String,
    pub tokens: usize,
    pub shown: Vec<Shown>,
    pub omitted: Vec<Shown>,
}
