//! The heuristic fact extractor: facts read deterministically from tool calls, their outputs and
//! the dialogue. A file created, edited, deleted or read; a command that failed (or a significant
//! one that worked); a test run and the tests it names, passed or failed; a package installed;
//! an error first seen and, when the command that raised it later works, resolved; decisions and
//! constraints; a user's preferences and corrections.
//!
//! The extractor is a state machine over a session's events in seq order. Facts of a tool call
//! are emitted when its result arrives (an edit whose result is an error changed nothing). Its
//! state is plain data (serde), so a worker can stop after any event and resume later with the
//! same results as one pass.
mod dialogue;
pub mod shell;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::lines::{self, Outcome};
use crate::model::{Fact, FactType, MemEvent, SeqSpan, TemporalStatus};

pub use dialogue::{dialogue_facts, first_sentence, sentences as dialogue_sentences};

/// Calls waiting for their result, at most.
const MAX_PENDING: usize = 256;
/// Open errors tracked, at most.
const MAX_OPEN_ERRORS: usize = 256;
/// Files remembered as known, at most.
const MAX_KNOWN_FILES: usize = 8192;
/// Longest `why` (characters).
const MAX_WHY: usize = 200;

/// What a tool call is, for facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CallKind {
    Read(String),
    /// Created or overwritten whole.
    Write(String),
    Edit(Vec<String>),
    /// A patch: added, updated, deleted files.
    Patch {
        added: Vec<String>,
        updated: Vec<String>,
        deleted: Vec<String>,
    },
    Shell(String),
    Other,
}

/// A call whose result has not arrived yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pending {
    id: String,
    seq: u64,
    kind: CallKind,
    why: String,
}

/// An error seen and not yet resolved: what raised it (a command or test key) and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct OpenError {
    origin: String,
    line: String,
    seq: u64,
}

/// The extractor's state between events.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FactExtractor {
    pending: Vec<Pending>,
    /// Files this session has read, written or named: a later whole-file write edits them.
    known_files: BTreeSet<String>,
    /// Open errors by signature.
    open_errors: BTreeMap<String, OpenError>,
    /// Subjects of test runs that failed last time (so a pass resolves them).
    failing: BTreeSet<String>,
    /// The agent's last stated reason (the first sentence of its last message).
    why: String,
    /// The last seq consumed.
    pub last_seq: u64,
}

impl FactExtractor {
    /// Consumes one event (in seq order), returning the facts it completes.
    pub fn push(&mut self, e: &MemEvent) -> Vec<Fact> {
        self.last_seq = e.seq;
        let mut out = Vec::new();
        match e.kind.as_str() {
            "assistant_message" => {
                let s = first_sentence(&e.content, MAX_WHY);
                if !s.is_empty() {
                    self.why = s;
                }
            }
            "tool_call" => {
                let kind = call_kind(e.tool_name.as_deref().unwrap_or(""), &e.content);
                if kind != CallKind::Other {
                    if self.pending.len() >= MAX_PENDING {
                        self.pending.remove(0);
                    }
                    let id = e.tool_call_id.clone().unwrap_or_default();
                    self.pending.push(Pending { id, seq: e.seq, kind, why: self.why.clone() });
                }
            }
            k if k == "tool_result" || k == "tool_error" || k.ends_with("tool_result") => {
                let id = e.tool_call_id.as_deref().unwrap_or("");
                let at = if id.is_empty() {
                    self.pending.len().checked_sub(1)
                } else {
                    self.pending.iter().position(|p| p.id == id)
                };
                if let Some(i) = at {
                    let call = self.pending.remove(i);
                    self.result(&call, e, k == "tool_error", &mut out);
                }
            }
            "user_message" => out.extend(dialogue_facts(e)),
            "decision" | "constraint" => {
                let what = first_sentence(&e.content, 400);
                if !what.is_empty() {
                    let (t, verb) = if e.kind == "decision" {
                        (FactType::Decision, "decided")
                    } else {
                        (FactType::Constraint, "requires")
                    };
                    out.push(fact(
                        e,
                        t,
                        &e.agent_id,
                        verb,
                        &what,
                        what.clone(),
                        TemporalStatus::Active,
                        SeqSpan::one(e.seq),
                    ));
                }
            }
            _ => {}
        }
        out
    }

    fn remember_file(&mut self, path: &str) -> bool {
        let known = self.known_files.contains(path);
        if !known && self.known_files.len() < MAX_KNOWN_FILES {
            self.known_files.insert(path.to_owned());
        }
        known
    }

    fn result(&mut self, call: &Pending, e: &MemEvent, error_kind: bool, out: &mut Vec<Fact>) {
        let span = SeqSpan::new(call.seq, e.seq);
        let outcome = lines::outcome(&e.content);
        let failed = outcome.failed(error_kind) || refused_edit(&e.content);
        let mk = |t: FactType, subject: &str, verb: &str, object: &str, what: String, status| {
            let mut f = fact(e, t, subject, verb, object, what, status, span);
            f.why = call.why.clone();
            f
        };
        match &call.kind {
            CallKind::Read(path) => {
                if !failed {
                    self.remember_file(path);
                    out.push(mk(FactType::File, path, "read", "", format!("Read {path}."), TemporalStatus::Completed));
                }
            }
            CallKind::Write(path) => {
                if !failed {
                    let verb = if self.remember_file(path) { "edited" } else { "created" };
                    out.push(mk(
                        FactType::File,
                        path,
                        verb,
                        "",
                        format!("{} {path}.", cap(verb)),
                        TemporalStatus::Completed,
                    ));
                }
            }
            CallKind::Edit(paths) => {
                if !failed {
                    for p in paths {
                        self.remember_file(p);
                        out.push(mk(
                            FactType::File,
                            p,
                            "edited",
                            "",
                            format!("Edited {p}."),
                            TemporalStatus::Completed,
                        ));
                    }
                }
            }
            CallKind::Patch { added, updated, deleted } => {
                if !failed {
                    for (paths, verb) in [(added, "created"), (updated, "edited"), (deleted, "deleted")] {
                        for p in paths {
                            self.remember_file(p);
                            out.push(mk(
                                FactType::File,
                                p,
                                verb,
                                "",
                                format!("{} {p}.", cap(verb)),
                                TemporalStatus::Completed,
                            ));
                        }
                    }
                }
            }
            CallKind::Shell(line) => self.shell_result(line, &outcome, failed, e, call, span, out),
            CallKind::Other => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn shell_result(
        &mut self,
        line: &str,
        outcome: &Outcome,
        failed: bool,
        e: &MemEvent,
        call: &Pending,
        span: SeqSpan,
        out: &mut Vec<Fact>,
    ) {
        let fx = shell::effects(line);
        let key = shell::command_key(line);
        let place = fx.cwd.clone().unwrap_or_default();
        let mk = |t: FactType, subject: &str, verb: &str, object: &str, what: String, status| {
            let mut f = fact(e, t, subject, verb, object, what, status, span);
            f.why = call.why.clone();
            f.place = place.clone();
            f
        };
        let first_error = decisive_error(outcome);
        if !failed {
            for (paths, verb) in [(&fx.created, "created"), (&fx.edited, "edited"), (&fx.deleted, "deleted")] {
                for p in paths {
                    let verb = if verb == "created" && self.remember_file(p) { "edited" } else { verb };
                    if verb != "created" {
                        self.remember_file(p);
                    }
                    out.push(mk(
                        FactType::File,
                        p,
                        verb,
                        "",
                        format!("{} {p} (`{key}`).", cap(verb)),
                        TemporalStatus::Completed,
                    ));
                }
            }
        }
        for spec in &fx.installed {
            let (name, version) = shell::package_name(spec);
            let (verb, what) = if failed {
                (
                    "install failed",
                    format!("Installing {spec} failed: {}", first_error.as_deref().unwrap_or("non-zero exit")),
                )
            } else {
                ("installed", format!("Installed {spec}."))
            };
            out.push(mk(FactType::Package, name, verb, version, what, TemporalStatus::Completed));
        }
        if let Some(test) = &fx.test {
            let summary = outcome.tests.as_ref().map(|t| t.line.clone());
            let verb = if failed { "failed" } else { "passed" };
            let object = summary.clone().or_else(|| first_error.clone()).unwrap_or_default();
            let what = match &summary {
                Some(s) => format!("`{test}` {verb}: {s}"),
                None => format!("`{test}` {verb}."),
            };
            let status = if failed { TemporalStatus::Active } else { TemporalStatus::Completed };
            out.push(mk(FactType::Test, test, verb, &object, what, status));
            for t in &outcome.failed_tests {
                out.push(mk(
                    FactType::Test,
                    t,
                    "failed",
                    test,
                    format!("Test {t} failed (`{test}`)."),
                    TemporalStatus::Active,
                ));
            }
            for t in &outcome.passed_tests {
                if self.failing.contains(t) {
                    out.push(mk(
                        FactType::Test,
                        t,
                        "passed",
                        test,
                        format!("Test {t} passed (`{test}`)."),
                        TemporalStatus::Completed,
                    ));
                }
            }
            for t in &outcome.failed_tests {
                self.failing.insert(t.clone());
            }
            for t in &outcome.passed_tests {
                self.failing.remove(t);
            }
        } else {
            // A command fact for what failed, and for significant commands that worked (a
            // success supersedes the failure of the same command); file and package commands
            // that worked have their own facts.
            let touched =
                !(fx.created.is_empty() && fx.edited.is_empty() && fx.deleted.is_empty() && fx.installed.is_empty());
            let (verb, object, status) = match (failed, outcome.exit_code) {
                (true, code) => (
                    "failed",
                    first_error.clone().or(code.map(|c| format!("exit {c}"))).unwrap_or_default(),
                    TemporalStatus::Active,
                ),
                (false, code) => {
                    ("succeeded", code.map(|c| format!("exit {c}")).unwrap_or_default(), TemporalStatus::Completed)
                }
            };
            if !key.is_empty() && (failed || (!fx.inspection_only && !touched)) {
                let what =
                    if object.is_empty() { format!("`{key}` {verb}.") } else { format!("`{key}` {verb}: {object}") };
                out.push(mk(FactType::Command, &key, verb, &object, what, status));
            }
        }
        // Errors: the first sighting of each while open, and their resolution when the command
        // (or test run) that raised them works.
        let origin = fx.test.clone().unwrap_or_else(|| key.clone());
        if failed {
            if let Some(line) = &first_error {
                let sig = error_signature(line);
                if !sig.is_empty() && !self.open_errors.contains_key(&sig) && self.open_errors.len() < MAX_OPEN_ERRORS {
                    self.open_errors
                        .insert(sig.clone(), OpenError { origin: origin.clone(), line: line.clone(), seq: e.seq });
                    out.push(mk(
                        FactType::Error,
                        &sig,
                        "seen",
                        line,
                        format!("Error from `{origin}`: {line}"),
                        TemporalStatus::Active,
                    ));
                }
            }
        } else if !origin.is_empty() {
            let resolved: Vec<String> =
                self.open_errors.iter().filter(|(_, o)| o.origin == origin).map(|(s, _)| s.clone()).collect();
            for sig in resolved {
                if let Some(o) = self.open_errors.remove(&sig) {
                    out.push(mk(
                        FactType::Error,
                        &sig,
                        "resolved",
                        &o.line,
                        format!("Resolved: `{origin}` now works (error was: {})", o.line),
                        TemporalStatus::Completed,
                    ));
                }
            }
        }
    }
}

fn cap(s: &str) -> String {
    let mut c = s.chars();
    c.next().map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
}

/// An edit tool's refusal ("String to replace not found", `<tool_use_error>`): nothing changed.
fn refused_edit(result: &str) -> bool {
    let t = result.trim_start();
    t.starts_with("<tool_use_error>")
        || t.starts_with("Error:")
        || t.starts_with("String to replace not found")
        || t.starts_with("File has not been read yet")
        || t.starts_with("No changes to make")
}

/// The error line that decides a failure: the last Python error (a traceback ends with it), else
/// the first error line.
fn decisive_error(o: &Outcome) -> Option<String> {
    o.errors
        .iter()
        .rev()
        .find(|l| lines::error_class(l).is_some_and(|c| c.ends_with("Error") || c.ends_with("Exception")))
        .or_else(|| o.errors.first())
        .cloned()
}

/// An error as a subject: its text with numbers, hex ids and quoted values masked, so the same
/// error raised again with another value is the same error.
pub fn error_signature(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_quote: Option<char> = None;
    let mut last_masked = false;
    for c in line.trim().trim_start_matches('E').trim().chars() {
        if let Some(q) = in_quote {
            if c == q {
                in_quote = None;
                out.push(c);
            }
            continue;
        }
        if c == '\'' || c == '"' {
            in_quote = Some(c);
            out.push(c);
            out.push('…');
            last_masked = false;
            continue;
        }
        if c.is_ascii_digit() {
            if !last_masked {
                out.push('N');
                last_masked = true;
            }
            continue;
        }
        last_masked = false;
        out.push(c);
    }
    out.chars().take(160).collect()
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn fact(
    e: &MemEvent,
    fact_type: FactType,
    subject: &str,
    verb: &str,
    object: &str,
    what: String,
    status: TemporalStatus,
    span: SeqSpan,
) -> Fact {
    Fact {
        fact_type,
        subject: subject.trim().to_owned(),
        verb: verb.to_owned(),
        object: object.trim().to_owned(),
        what,
        who: if e.kind == "user_message" { "user".to_owned() } else { e.agent_id.clone() },
        when: e.time,
        place: String::new(),
        why: String::new(),
        status,
        span,
    }
}

fn json_str<'a>(v: &'a serde_json::Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| v.get(*k).and_then(|x| x.as_str())).filter(|s| !s.is_empty())
}

fn shell_line(v: &serde_json::Value) -> Option<String> {
    match v.get("command").or_else(|| v.get("cmd")) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        // Codex: ["bash", "-lc", "the line"].
        Some(serde_json::Value::Array(a)) => {
            let parts: Vec<&str> = a.iter().filter_map(|x| x.as_str()).collect();
            match parts.as_slice() {
                [sh, flag, line] if sh.ends_with("sh") && flag.starts_with('-') => Some((*line).to_owned()),
                _ => Some(parts.join(" ")),
            }
        }
        _ => None,
    }
}

/// Files a patch (`*** Add File: p`, `*** Update File: p`, `*** Delete File: p`) touches.
fn patch_files(text: &str) -> Option<CallKind> {
    let (mut added, mut updated, mut deleted) = (Vec::new(), Vec::new(), Vec::new());
    for l in text.lines() {
        if let Some(p) = l.strip_prefix("*** Add File: ") {
            added.push(p.trim().to_owned());
        } else if let Some(p) = l.strip_prefix("*** Update File: ") {
            updated.push(p.trim().to_owned());
        } else if let Some(p) = l.strip_prefix("*** Delete File: ") {
            deleted.push(p.trim().to_owned());
        }
    }
    (!(added.is_empty() && updated.is_empty() && deleted.is_empty())).then_some(CallKind::Patch {
        added,
        updated,
        deleted,
    })
}

const PATH_KEYS: &[&str] =
    &["file_path", "path", "notebook_path", "filePath", "absolute_path", "filename", "target_file"];

/// What a tool call is, from its tool name and input (JSON, or a bare command line).
pub fn call_kind(tool: &str, input: &str) -> CallKind {
    let t = tool.to_ascii_lowercase();
    let v: serde_json::Value = serde_json::from_str(input).unwrap_or(serde_json::Value::Null);
    if v.is_null() {
        // Trajectories give a Bash call's command line as is; patches come as text.
        return match t.as_str() {
            "bash" | "shell" | "sh" | "terminal" | "run_shell_command" | "exec_command" | "local_shell"
                if !input.trim().is_empty() =>
            {
                CallKind::Shell(input.to_owned())
            }
            "apply_patch" => patch_files(input).unwrap_or(CallKind::Other),
            _ => CallKind::Other,
        };
    }
    let path = json_str(&v, PATH_KEYS).map(str::to_owned);
    match t.as_str() {
        "read" | "read_file" | "view" | "notebookread" | "read_many_files" => {
            path.map_or(CallKind::Other, CallKind::Read)
        }
        "write" | "write_file" | "create" | "create_file" => path.map_or(CallKind::Other, CallKind::Write),
        "edit" | "multiedit" | "replace" | "notebookedit" | "edit_file" | "str_replace" | "insert" => {
            path.map_or(CallKind::Other, |p| CallKind::Edit(vec![p]))
        }
        "str_replace_editor" | "str_replace_based_edit_tool" | "text_editor" => {
            let Some(p) = path else { return CallKind::Other };
            match json_str(&v, &["command"]) {
                Some("create") => CallKind::Write(p),
                Some("str_replace" | "insert" | "undo_edit") => CallKind::Edit(vec![p]),
                Some("view") => CallKind::Read(p),
                _ => CallKind::Other,
            }
        }
        "apply_patch" => json_str(&v, &["input", "patch"]).and_then(patch_files).unwrap_or(CallKind::Other),
        _ => match shell_line(&v) {
            Some(line) if !line.trim().is_empty() => {
                // Codex sends `apply_patch` through its shell tool.
                if line.contains("*** Begin Patch") {
                    patch_files(&line).unwrap_or(CallKind::Shell(line))
                } else {
                    CallKind::Shell(line)
                }
            }
            _ => CallKind::Other,
        },
    }
}

/// What a call's line in a turn says after the tool's name: the command, the file, the pattern.
pub fn call_summary(tool: &str, input: &str) -> String {
    match call_kind(tool, input) {
        CallKind::Shell(line) => line.lines().next().unwrap_or("").trim().to_owned(),
        CallKind::Read(p) | CallKind::Write(p) => p,
        CallKind::Edit(ps) => ps.join(", "),
        CallKind::Patch { added, updated, deleted } => {
            added.iter().chain(&updated).chain(&deleted).cloned().collect::<Vec<_>>().join(", ")
        }
        CallKind::Other => {
            let v: serde_json::Value = serde_json::from_str(input).unwrap_or(serde_json::Value::Null);
            json_str(&v, &["pattern", "query", "url", "description", "prompt", "path"])
                .map(str::to_owned)
                .unwrap_or_else(|| input.split_whitespace().collect::<Vec<_>>().join(" "))
        }
    }
}

#[cfg(test)]
mod tests;
