//! Diagnostics: problems in an input that the reference would have crashed on.

use serde::Serialize;

/// How bad a problem is. Either way the rest of the input is still compiled; `--strict` makes
/// any diagnostic fatal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The record (line) was dropped.
    Error,
    /// The record was compiled, with something substituted or left out.
    Warning,
}

/// A problem at `line:col` (1-based; the column counts characters) of an input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub line: u32,
    pub col: u32,
    pub severity: Severity,
    pub message: String,
}

impl Diagnostic {
    /// `path:line:col: message`, the form printed on stderr.
    pub fn render(&self, path: &str) -> String {
        format!("{path}:{}:{}: {}", self.line, self.col, self.message)
    }
}

/// Collects diagnostics for the record being compiled.
#[derive(Debug, Default, Clone)]
pub(crate) struct Diags {
    pub items: Vec<Diagnostic>,
    pub line: u32,
}

impl Diags {
    pub fn at(&mut self, line: u32, col: u32, severity: Severity, message: impl Into<String>) {
        self.items.push(Diagnostic { line, col, severity, message: message.into() });
    }

    /// A warning about the current record.
    pub fn warn(&mut self, message: impl Into<String>) {
        let line = self.line;
        self.at(line, 1, Severity::Warning, message);
    }

    /// An error that dropped the current record.
    pub fn error(&mut self, message: impl Into<String>) {
        let line = self.line;
        self.at(line, 1, Severity::Error, message);
    }
}

/// 1-based character column of byte `offset` in `text`.
pub(crate) fn column(text: &str, offset: usize) -> u32 {
    let offset = offset.min(text.len());
    let mut at = offset;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text[..at].chars().count() as u32 + 1
}
