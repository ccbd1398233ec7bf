//! Reading tool output: which lines are errors, test summaries and exit statuses. Shared by
//! turns (key lines kept for summaries), tags (error classes) and facts (outcomes).
use std::sync::LazyLock;

use regex::Regex;

/// Longest line kept verbatim from tool output (characters).
pub const MAX_LINE: usize = 300;

macro_rules! re {
    ($name:ident, $pat:expr) => {
        static $name: LazyLock<Regex> = LazyLock::new(|| Regex::new($pat).expect("a valid pattern"));
    };
}

re!(PY_ERROR, r"^(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault|Failure))(?::\s*(.*))?$");
re!(RUST_ERROR, r"^error(\[E\d{4}\])?: (.+)$");
re!(PANIC, r"^thread '[^']*' panicked at (.+)$");
re!(GENERIC_ERROR, r"^(?:ERROR|Error|error|FATAL|Fatal|fatal|npm ERR!)[:!]?\s+(.+)$");
// pytest's error detail (`E       fixture 'x' not found`), compilers' and linters' located
// diagnostics (`a.py:3:5 - error: …`, `a.ts(3,5): error TS2345: …`, `a.go:3:5: … (goconst)`).
re!(PYTEST_DETAIL, r"^E\s{2,}(?:[\w.]*(?:Error|Exception|Failed)\b|fixture '[^']*' not found)");
re!(LOCATED_ERROR, r"^\S+?(?::\d+(?::\d+)?(?::| -)|\(\d+,\d+\):) *error\b|^\S+\.\w{1,4}:\d+:\d+: .+ \([a-z]+\)$");
re!(SHELL_ERROR, r"(?:: command not found|: No such file or directory|Segmentation fault|Permission denied)\s*$");
re!(PYTEST_FAILED_LINE, r"^(FAILED|ERROR) (\S+::\S+|\S+\.py)(?: - (.*))?$");
re!(
    PYTEST_SUMMARY,
    r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)(?:, )?)+) in [\d.]+s.*?=*$"
);
re!(PYTEST_NO_TESTS, r"^=*\s*no tests ran in [\d.]+s\s*=*$");
re!(CARGO_SUMMARY, r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed");
re!(GO_SUMMARY, r"^(ok|FAIL)\s+(\S+)(?:\s|$)");
re!(UNITTEST_RAN, r"^Ran (\d+) tests? in [\d.]+s");
re!(UNITTEST_RESULT, r"^(OK|FAILED)(?: \((.*)\))?$");
re!(JEST_SUMMARY, r"^Tests:\s+(.*(?:passed|failed).*)$");
re!(UNITTEST_HEADER, r"^(?:FAIL|ERROR): (\w+) \(([\w.]+)\)");
re!(SYMPY_HEADER, r"^_{3,} (\S+\.py):(\w+) _{3,}$");
re!(SYMPY_SUMMARY, r"^tests finished: (.*)$");
re!(ANSI, r"\x1b\[[0-9;?]*[A-Za-z]");
re!(
    EXIT_CODE,
    r"(?i)(?:<returncode>(-?\d+)</returncode>|exit(?:ed with)? (?:code|status):? (-?\d+)|process exited with code (-?\d+)|^Exit code:? (-?\d+))"
);

/// The outcome of a test run, read from its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestSummary {
    pub passed: bool,
    /// The summary line, verbatim.
    pub line: String,
}

/// What a tool's output says about how the call went.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The exit status the output states.
    pub exit_code: Option<i64>,
    /// Error lines, verbatim, in order (at most a handful).
    pub errors: Vec<String>,
    /// The test runner's summary, when the output has one.
    pub tests: Option<TestSummary>,
    /// Individual tests named as failed (`FAILED a.py::t`, `--- FAIL: TestX`, `test x ... FAILED`).
    pub failed_tests: Vec<String>,
    /// Individual tests named as passed.
    pub passed_tests: Vec<String>,
}

impl Outcome {
    /// Whether the call failed: a failing exit status, failing tests, or (without a status) an
    /// error line.
    pub fn failed(&self, is_error_kind: bool) -> bool {
        if is_error_kind {
            return true;
        }
        if let Some(t) = &self.tests {
            return !t.passed;
        }
        match self.exit_code {
            Some(c) => c != 0,
            None => !self.errors.is_empty(),
        }
    }
}

fn clip(line: &str) -> String {
    let t = line.trim();
    if t.chars().count() <= MAX_LINE { t.to_owned() } else { t.chars().take(MAX_LINE).collect::<String>() + "…" }
}

/// True for a line that states an error.
pub fn is_error_line(line: &str) -> bool {
    let t = line.trim();
    if t.is_empty() || t.len() > 2_000 {
        return false;
    }
    RUST_ERROR.is_match(t)
        || PANIC.is_match(t)
        || PYTEST_FAILED_LINE.is_match(t)
        || SHELL_ERROR.is_match(t)
        || PYTEST_DETAIL.is_match(t)
        || LOCATED_ERROR.is_match(t)
        || GENERIC_ERROR.is_match(t)
        || PY_ERROR.captures(t).is_some_and(|c| {
            // "Error: x" is generic; a bare word ending in Error must be a class name (its last
            // dotted part: `django.db.utils.OperationalError`).
            let class = c.get(1).map_or("", |m| m.as_str());
            let short = class.rsplit('.').next().unwrap_or(class);
            short.chars().next().is_some_and(char::is_uppercase) && !class.contains(' ')
        })
}

/// The error class a line names, as a tag would: `TypeError`, `E0308`, `panic`, `command-not-found`.
pub fn error_class(line: &str) -> Option<String> {
    let t = line.trim();
    if let Some(c) = RUST_ERROR.captures(t) {
        return Some(c.get(1).map_or("rust-error".to_owned(), |m| m.as_str().trim_matches(['[', ']']).to_owned()));
    }
    if PANIC.is_match(t) {
        return Some("panic".to_owned());
    }
    if t.ends_with(": command not found") {
        return Some("command-not-found".to_owned());
    }
    if let Some(c) = PY_ERROR.captures(t) {
        let class = c.get(1)?.as_str();
        let short = class.rsplit('.').next().unwrap_or(class);
        if short.len() > 5 && short.chars().next().is_some_and(char::is_uppercase) {
            return Some(short.to_owned());
        }
    }
    None
}

/// The output without terminal colour and cursor codes (test runners colour their summaries).
pub fn plain(output: &str) -> std::borrow::Cow<'_, str> {
    if output.contains('\x1b') { ANSI.replace_all(output, "") } else { std::borrow::Cow::Borrowed(output) }
}

/// Reads a tool's output: exit status, error lines, test summary and named tests.
pub fn outcome(output: &str) -> Outcome {
    let output = plain(output);
    let mut o = Outcome::default();
    let mut unittest_ran = false;
    for raw in output.lines() {
        let t = raw.trim();
        if t.is_empty() {
            continue;
        }
        if o.exit_code.is_none()
            && let Some(c) = EXIT_CODE.captures(t)
        {
            o.exit_code = (1..=4).find_map(|i| c.get(i)).and_then(|m| m.as_str().parse().ok());
        }
        if let Some(c) = CARGO_SUMMARY.captures(t) {
            let passed = &c[1] == "ok";
            // A workspace prints one summary per crate: any failure fails the run.
            let prev_ok = o.tests.as_ref().is_none_or(|s| s.passed);
            o.tests = Some(TestSummary { passed: passed && prev_ok, line: clip(t) });
        } else if let Some(c) = PYTEST_SUMMARY.captures(t) {
            let counts = &c[1];
            let failed = counts.contains("failed") || counts.contains("error");
            o.tests = Some(TestSummary { passed: !failed, line: clip(t) });
        } else if PYTEST_NO_TESTS.is_match(t) {
            o.tests = Some(TestSummary { passed: false, line: clip(t) });
        } else if let Some(c) = JEST_SUMMARY.captures(t) {
            o.tests = Some(TestSummary { passed: !c[1].contains("failed"), line: clip(t) });
        } else if UNITTEST_RAN.is_match(t) {
            unittest_ran = true;
        } else if unittest_ran && let Some(c) = UNITTEST_RESULT.captures(t) {
            o.tests = Some(TestSummary { passed: &c[1] == "OK", line: clip(t) });
        } else if let Some(c) = SYMPY_SUMMARY.captures(t) {
            // "41 passed, 5 skipped, 2 expected to fail, 2 exceptions": an expected failure is not one.
            let counts = c[1].replace("expected to fail", "");
            let failed = counts.contains("failed") || counts.contains("exception");
            o.tests = Some(TestSummary { passed: !failed, line: clip(t) });
        } else if let Some(c) = GO_SUMMARY.captures(t)
            && (c[2].contains('/') || c[2].contains('.'))
        {
            let passed = &c[1] == "ok" && o.tests.as_ref().is_none_or(|s| s.passed);
            o.tests = Some(TestSummary { passed, line: clip(t) });
        }
        if let Some(c) = PYTEST_FAILED_LINE.captures(t) {
            push_unique(&mut o.failed_tests, c[2].to_owned());
        } else if let Some(c) = UNITTEST_HEADER.captures(t) {
            push_unique(&mut o.failed_tests, format!("{} ({})", &c[1], &c[2]));
        } else if let Some(c) = SYMPY_HEADER.captures(t) {
            push_unique(&mut o.failed_tests, format!("{}:{}", &c[1], &c[2]));
        } else if let Some(name) = t.strip_prefix("--- FAIL: ") {
            push_unique(&mut o.failed_tests, name.split_whitespace().next().unwrap_or(name).to_owned());
        } else if let Some(name) = t.strip_prefix("--- PASS: ") {
            push_unique(&mut o.passed_tests, name.split_whitespace().next().unwrap_or(name).to_owned());
        } else if let Some((name, verdict)) = verdict_line(t) {
            if verdict {
                push_unique(&mut o.passed_tests, name);
            } else {
                push_unique(&mut o.failed_tests, name);
            }
        }
        if is_error_line(t) && o.errors.len() < 64 {
            push_unique(&mut o.errors, clip(t));
        }
    }
    o
}

/// `test foo::bar ... ok` (cargo), `test_x (mod.Class) ... FAIL` (unittest), `path::test PASSED` (pytest -v).
fn verdict_line(t: &str) -> Option<(String, bool)> {
    if let Some((left, right)) = t.rsplit_once(" ... ") {
        let verdict = match right.trim() {
            "ok" | "OK" | "PASSED" => true,
            "FAILED" | "FAIL" | "ERROR" => false,
            _ => return None,
        };
        let name = left.trim().trim_start_matches("test ").trim();
        return (!name.is_empty() && name.len() < 200).then(|| (name.to_owned(), verdict));
    }
    for (suffix, verdict) in [(" PASSED", true), (" FAILED", false)] {
        if let Some(name) = t.strip_suffix(suffix).or_else(|| t.split_once(suffix).map(|(n, _)| n))
            && name.contains("::")
            && !name.contains(' ')
        {
            return Some((name.to_owned(), verdict));
        }
    }
    None
}

fn push_unique(v: &mut Vec<String>, s: String) {
    if !v.contains(&s) {
        v.push(s);
    }
}

/// The lines of a tool's output worth keeping verbatim in a turn: error lines and test or exit
/// summaries, the last `max` of them (a traceback's decisive line is its last).
pub fn key_output_lines(output: &str, max: usize) -> Vec<String> {
    let output = plain(output);
    let mut keep: Vec<String> = Vec::new();
    for raw in output.lines() {
        let t = raw.trim();
        if t.is_empty() {
            continue;
        }
        let nonzero_exit =
            EXIT_CODE.captures(t).and_then(|c| (1..=4).find_map(|i| c.get(i))).is_some_and(|m| m.as_str() != "0");
        if is_error_line(t)
            || nonzero_exit
            || CARGO_SUMMARY.is_match(t)
            || PYTEST_SUMMARY.is_match(t)
            || JEST_SUMMARY.is_match(t)
            || UNITTEST_RAN.is_match(t)
            || SYMPY_SUMMARY.is_match(t)
        {
            let line = clip(t);
            if !keep.contains(&line) {
                keep.push(line);
            }
        }
    }
    let skip = keep.len().saturating_sub(max);
    keep.split_off(skip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_of_common_runners() {
        let o = outcome(
            "running 3 tests\ntest a::b ... ok\ntest a::c ... FAILED\n\ntest result: FAILED. 2 passed; 1 failed; 0 ignored",
        );
        assert_eq!(o.tests.as_ref().map(|t| t.passed), Some(false));
        assert_eq!(o.failed_tests, vec!["a::c"]);
        assert_eq!(o.passed_tests, vec!["a::b"]);
        assert!(o.failed(false));

        let o = outcome(
            "<returncode>1</returncode>\n<output>\nFAILED tests/test_x.py::test_y - AssertionError: 1 != 2\n=========== 1 failed, 4 passed in 0.31s ===========\n</output>",
        );
        assert_eq!(o.exit_code, Some(1));
        assert_eq!(o.failed_tests, vec!["tests/test_x.py::test_y"]);
        assert_eq!(o.tests.as_ref().map(|t| t.passed), Some(false));

        let o = outcome(
            "..\n----------------------------------------------------------------------\nRan 2 tests in 0.001s\n\nOK",
        );
        assert_eq!(o.tests.as_ref().map(|t| t.passed), Some(true));
        assert!(!o.failed(false));

        // Coloured pytest output (ANSI codes around the words).
        let o = outcome(
            "\x1b[31mERROR\x1b[0m a/t.py::\x1b[1mT::test_x\x1b[0m - X\n\x1b[31m==== \x1b[32m3 passed\x1b[0m, \x1b[31m\x1b[1m1 error\x1b[0m\x1b[31m in 0.5s\x1b[0m ====",
        );
        assert_eq!(o.failed_tests, vec!["a/t.py::T::test_x"]);
        assert_eq!(o.tests.as_ref().map(|t| t.passed), Some(false));
        // unittest (Django's runtests) and sympy's bin/test.
        let o = outcome(
            "FAIL: test_parameters (dbshell.test_postgresql.Tests)\n---\nRan 10 tests in 0.04s\n\nFAILED (failures=1)",
        );
        assert_eq!(o.failed_tests, vec!["test_parameters (dbshell.test_postgresql.Tests)"]);
        let o = outcome(
            "___ sympy/core/tests/test_s.py:test_evaluate_false ___\nValueError: x\n tests finished: 41 passed, 2 expected to fail, 2 exceptions,",
        );
        assert_eq!(o.failed_tests, vec!["sympy/core/tests/test_s.py:test_evaluate_false"]);
        assert_eq!(o.tests.as_ref().map(|t| t.passed), Some(false));
        assert_eq!(
            outcome("tests finished: 12 passed, 1 expected to fail, in 0.2 seconds").tests.map(|t| t.passed),
            Some(true)
        );

        let o = outcome("<returncode>0</returncode>\n<output>\nhello\n</output>");
        assert_eq!(o.exit_code, Some(0));
        assert!(!o.failed(false));
        assert!(
            outcome("Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad value 3")
                .failed(false)
        );
    }

    #[test]
    fn error_lines_and_classes() {
        assert_eq!(error_class("error[E0308]: mismatched types").as_deref(), Some("E0308"));
        assert_eq!(error_class("ModuleNotFoundError: No module named 'foo'").as_deref(), Some("ModuleNotFoundError"));
        assert_eq!(error_class("django.core.exceptions.ImproperlyConfigured"), None);
        assert_eq!(error_class("bash: foo: command not found").as_deref(), Some("command-not-found"));
        assert!(is_error_line("E       AssertionError: assert 1 == 2"));
        assert!(is_error_line("django.db.utils.OperationalError: no such table: app_book"));
        assert!(!is_error_line("no errors here"));
        assert!(!is_error_line("The Error class is documented below"));
        let keep =
            key_output_lines("a\nTraceback (most recent call last):\nKeyError: 'x'\n<returncode>1</returncode>", 4);
        assert_eq!(keep, vec!["KeyError: 'x'", "<returncode>1</returncode>"]);
    }
}
