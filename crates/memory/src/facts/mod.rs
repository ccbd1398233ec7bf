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
    /// When the call writes a script: the script and the files its code writes.
    #[serde(default)]
    script: Option<(String, Vec<String>)>,
}

/// Scripts remembered, at most.
const MAX_SCRIPTS: usize = 256;

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
    /// Scripts this session wrote, and the files their code writes (`open(p, "w")`): running one
    /// changes those files.
    #[serde(default)]
    scripts: BTreeMap<String, Vec<String>>,
    /// Whether a user's message came before (a later one may answer the agent's work).
    #[serde(default)]
    heard_user: bool,
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
                    let script = script_written(&kind, &e.content);
                    self.pending.push(Pending { id, seq: e.seq, kind, why: self.why.clone(), script });
                }
            }
            k if crate::turns::is_output(k) => {
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
            "user_message" => {
                out.extend(dialogue_facts(e, self.heard_user));
                self.heard_user |= !crate::turns::is_injected_user_text(&e.content);
            }
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
        if !failed
            && let Some((script, targets)) = &call.script
            && (self.scripts.len() < MAX_SCRIPTS || self.scripts.contains_key(script))
        {
            self.scripts.insert(script_key(script), targets.clone());
        }
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
        // Running a script the session wrote changes the files its code writes.
        if !failed {
            let ran: Vec<String> = shell::scripts_run(line)
                .iter()
                .filter_map(|s| self.scripts.get(&script_key(s)).cloned())
                .flatten()
                .collect();
            for p in ran {
                let verb = if self.remember_file(&p) { "edited" } else { "created" };
                out.push(mk(
                    FactType::File,
                    &p,
                    verb,
                    "",
                    format!("{} {p} (by `{key}`).", cap(verb)),
                    TemporalStatus::Completed,
                ));
            }
        }
        // `rm` that failed only on files that were not there removed the others.
        let deleted: Vec<String> =
            if failed { shell::removed_despite(&fx.deleted, &outcome.errors) } else { fx.deleted.clone() };
        for p in &deleted {
            self.remember_file(p);
            out.push(mk(
                FactType::File,
                p,
                "deleted",
                "",
                format!("Deleted {p} (`{key}`)."),
                TemporalStatus::Completed,
            ));
        }
        if !failed {
            for (paths, verb) in [(&fx.created, "created"), (&fx.edited, "edited")] {
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
            for line in &reported_errors(outcome, first_error.as_deref()) {
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

/// A script's name as runs and writes compare it (`./x.py` and `x.py` alike).
fn script_key(p: &str) -> String {
    p.trim_start_matches("./").to_owned()
}

static PY_OPEN_W: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r#"open\(\s*(?:['"]([^'"]+)['"]|(\w+))\s*,\s*['"][wa]"#).expect("a valid pattern")
});
static PY_WRITE_TEXT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r#"Path\(\s*['"]([^'"]+)['"]\s*\)\.write_(?:text|bytes)\("#).expect("a valid pattern")
});
static JS_WRITE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r#"writeFile(?:Sync)?\(\s*['"]([^'"]+)['"]"#).expect("a valid pattern")
});
static ASSIGN_PATH: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r#"(?m)^\s*(\w+)\s*=\s*['"]([^'"\s]+\.\w{1,5})['"]\s*$"#).expect("a valid pattern")
});

/// The files a script's code writes: `open("p", "w")` (or `open(var, "w")` with `var = "p"`),
/// `Path("p").write_text(…)`, `fs.writeFileSync("p", …)`.
pub fn script_targets(code: &str) -> Vec<String> {
    let vars: BTreeMap<&str, &str> =
        ASSIGN_PATH.captures_iter(code).filter_map(|c| Some((c.get(1)?.as_str(), c.get(2)?.as_str()))).collect();
    let mut out: Vec<String> = Vec::new();
    let mut push = |p: &str| {
        if !p.is_empty() && !p.starts_with("/tmp/") && !out.iter().any(|x| x == p) {
            out.push(p.to_owned());
        }
    };
    for c in PY_OPEN_W.captures_iter(code) {
        match (c.get(1), c.get(2)) {
            (Some(p), _) => push(p.as_str()),
            (None, Some(v)) => {
                if let Some(p) = vars.get(v.as_str()) {
                    push(p)
                }
            }
            _ => {}
        }
    }
    for c in PY_WRITE_TEXT.captures_iter(code).chain(JS_WRITE.captures_iter(code)) {
        push(&c[1]);
    }
    out
}

/// When a call writes a script (a Write of a `.py`/`.js` file, or a shell heredoc into one): the
/// script and the files its code writes.
fn script_written(kind: &CallKind, input: &str) -> Option<(String, Vec<String>)> {
    let is_script = |p: &str| [".py", ".js", ".mjs", ".ts"].iter().any(|x| p.ends_with(x));
    let (path, code) = match kind {
        CallKind::Write(p) if is_script(p) => {
            let v: serde_json::Value = serde_json::from_str(input).ok()?;
            (p.clone(), json_str(&v, &["content", "file_text", "text"])?.to_owned())
        }
        CallKind::Shell(line) if line.contains("<<") => {
            let fx = shell::effects(line);
            let p = fx.created.iter().chain(&fx.edited).find(|p| is_script(p))?.clone();
            (p, line.split_once('\n').map(|(_, body)| body.to_owned()).unwrap_or_default())
        }
        _ => return None,
    };
    let targets = script_targets(&code);
    (!targets.is_empty()).then_some((path, targets))
}

/// Errors of a failed output worth a fact each: the decisive one, and up to two more distinct
/// ones (a test run or a type check can fail on several errors at once).
const MAX_ERRORS_PER_OUTPUT: usize = 3;

fn reported_errors(o: &Outcome, decisive: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = decisive.map(str::to_owned).into_iter().collect();
    let mut seen: Vec<String> = out.iter().map(|l| error_signature(l)).collect();
    for l in &o.errors {
        if out.len() >= MAX_ERRORS_PER_OUTPUT {
            break;
        }
        // A test summary line without a message is the test's failure (a test fact), not an error.
        let t = l.trim();
        if (t.starts_with("FAILED ") || t.starts_with("ERROR ")) && !PYTEST_SUMMARY_ERROR.is_match(t) {
            continue;
        }
        let sig = error_signature(l);
        if !seen.contains(&sig) {
            seen.push(sig);
            out.push(l.clone());
        }
    }
    out
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

static PYTEST_SUMMARY_ERROR: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"^(?:FAILED|ERROR) \S+ - (.+)$").expect("a valid pattern"));

/// An error as a subject: its text with numbers, hex ids and quoted values masked, so the same
/// error raised again with another value is the same error.
pub fn error_signature(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_quote: Option<char> = None;
    let mut last_masked = false;
    // pytest's detail prefix (`E       KeyError: …`), and a test summary's test id: the error is its message.
    let t = line.trim();
    let t = t.strip_prefix("E ").map_or(t, str::trim_start);
    let t = match PYTEST_SUMMARY_ERROR.captures(t) {
        Some(c) => c.get(1).map_or(t, |m| m.as_str()),
        None => t,
    };
    for c in t.chars() {
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
