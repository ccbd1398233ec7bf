//! Adaptive-view predicates: which blocks a search shows, and which of their lines.
//!
//! One interface, [`Predicate`], works at block level: it is given every searchable block of a
//! chain (a [`Candidate`]) and returns [`Hit`]s. Line matchers (regex, literal, terms) implement
//! the simpler [`LineMatcher`] and are lifted by [`Lines`]; a ranker living in another crate
//! (BM25, embeddings) implements [`Predicate`] directly, scores the candidates, keeps its top k
//! and may leave a hit's `lines` empty (the view then prints only the block's pointer).

use crate::ir::{Block, BlockKind, Body, SectionRole};
use regex::Regex;
use serde::Serialize;
use thiserror::Error;

/// The searchable body of one block, as a predicate sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// Index into [`crate::Chain::blocks`].
    pub block: usize,
    /// The role of the block's section.
    pub role: &'a SectionRole,
    pub kind: &'a BlockKind,
    /// Full-view line of the body's first line.
    pub first_line: u32,
    body: &'a Body,
}

impl<'a> Candidate<'a> {
    pub(crate) fn new(block: usize, b: &'a Block, role: &'a SectionRole) -> Self {
        Candidate { block, role, kind: &b.kind, first_line: b.body_start, body: &b.body }
    }

    /// The body's lines (as the full view numbers them).
    pub fn lines(&self) -> impl Iterator<Item = &'a str> + use<'a> {
        self.body.lines()
    }

    /// The body text, lines joined with `\n`.
    pub fn text(&self) -> &'a str {
        self.body.joined()
    }
}

/// A selected block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub block: usize,
    /// 0-based offsets (within the body) of the lines to show, ascending; may be empty.
    pub lines: Vec<u32>,
    /// A ranker's score, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

/// Chooses the blocks of the adaptive view.
pub trait Predicate: Send + Sync {
    /// Returns the selected blocks, in any order (the views sort by position).
    fn select(&self, candidates: &[Candidate<'_>]) -> Vec<Hit>;
}

/// Line-level matching, the reference's model (`regex.search(line)` per rendered line).
pub trait LineMatcher: Send + Sync {
    fn is_match(&self, line: &str) -> bool;
}

/// Lifts a [`LineMatcher`]: a block is selected iff one of its lines matches.
pub struct Lines<M>(pub M);

impl<M: LineMatcher> Predicate for Lines<M> {
    fn select(&self, candidates: &[Candidate<'_>]) -> Vec<Hit> {
        candidates
            .iter()
            .filter_map(|c| {
                let lines: Vec<u32> =
                    c.lines().enumerate().filter(|(_, l)| self.0.is_match(l)).map(|(i, _)| i as u32).collect();
                (!lines.is_empty()).then_some(Hit { block: c.block, lines, score: None })
            })
            .collect()
    }
}

/// A pattern the search cannot use.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PatternError {
    #[error("invalid regex: {0}")]
    Invalid(String),
    #[error("unsupported in memex (Rust regex engine): {0}")]
    Unsupported(&'static str),
}

/// A regex with Python `re` syntax (as `--grep` takes it), compiled for Rust's engine.
#[derive(Debug, Clone)]
pub struct PyRegex(Regex);

impl PyRegex {
    /// Translates Python syntax (`\Z`, `\uXXXX`, literal `{`, `[` inside classes, Python's
    /// `\s`, …); lookaround and backreferences are rejected.
    pub fn new(pattern: &str) -> Result<Self, PatternError> {
        let translated = crate::pyregex::translate(pattern)?;
        Regex::new(&translated).map(PyRegex).map_err(|e| PatternError::Invalid(e.to_string()))
    }
}

impl LineMatcher for PyRegex {
    fn is_match(&self, line: &str) -> bool {
        self.0.is_match(line)
    }
}

/// A literal substring, optionally case-insensitive (Unicode simple case folding).
#[derive(Debug, Clone)]
pub struct Literal(Regex);

impl Literal {
    pub fn new(text: &str, ignore_case: bool) -> Result<Self, PatternError> {
        let escaped = regex::escape(text);
        let pattern = if ignore_case { format!("(?i){escaped}") } else { escaped };
        Regex::new(&pattern).map(Literal).map_err(|e| PatternError::Invalid(e.to_string()))
    }
}

impl LineMatcher for Literal {
    fn is_match(&self, line: &str) -> bool {
        self.0.is_match(line)
    }
}

impl LineMatcher for Box<dyn LineMatcher> {
    fn is_match(&self, line: &str) -> bool {
        (**self).is_match(line)
    }
}

/// How several terms combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Match {
    /// A block is selected if any term matches one of its lines.
    #[default]
    Any,
    /// A block is selected if every term matches some line of it.
    All,
}

/// Several terms; the lines shown are those matching any term.
pub struct Terms {
    pub terms: Vec<Box<dyn LineMatcher>>,
    pub mode: Match,
}

impl Predicate for Terms {
    fn select(&self, candidates: &[Candidate<'_>]) -> Vec<Hit> {
        candidates
            .iter()
            .filter_map(|c| {
                let mut seen = vec![false; self.terms.len()];
                let mut lines = Vec::new();
                for (i, line) in c.lines().enumerate() {
                    let mut any = false;
                    for (t, term) in self.terms.iter().enumerate() {
                        if term.is_match(line) {
                            seen[t] = true;
                            any = true;
                        }
                    }
                    if any {
                        lines.push(i as u32);
                    }
                }
                let selected = match self.mode {
                    Match::Any => !lines.is_empty(),
                    Match::All => seen.iter().all(|s| *s),
                };
                selected.then_some(Hit { block: c.block, lines, score: None })
            })
            .collect()
    }
}

/// Restricts another predicate to blocks whose section role or node type is listed
/// (`user`, `assistant`, `thinking`, `tool_call`, `tool_result`, …).
pub struct RoleFilter<P> {
    pub roles: Vec<String>,
    pub inner: P,
}

impl<P: Predicate> Predicate for RoleFilter<P> {
    fn select(&self, candidates: &[Candidate<'_>]) -> Vec<Hit> {
        let kept: Vec<Candidate<'_>> = candidates
            .iter()
            .filter(|c| {
                let node = c.kind.node_type();
                self.roles.iter().any(|r| r == c.role.as_str() || *r == node)
            })
            .copied()
            .collect();
        self.inner.select(&kept)
    }
}

impl Predicate for Box<dyn Predicate> {
    fn select(&self, candidates: &[Candidate<'_>]) -> Vec<Hit> {
        (**self).select(candidates)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn literal_and_ignore_case() {
        assert!(Literal::new("a.b", false).unwrap().is_match("xa.by"));
        assert!(!Literal::new("a.b", false).unwrap().is_match("axb"));
        assert!(Literal::new("TEST", true).unwrap().is_match("a test"));
    }

    #[test]
    fn python_regex_features() {
        assert!(PyRegex::new("(?i)test").unwrap().is_match("Testing"));
        assert!(PyRegex::new("a{").unwrap().is_match("a{"));
        assert!(PyRegex::new(r"end\Z").unwrap().is_match("the end"));
        assert!(PyRegex::new(r"[[]").unwrap().is_match("["));
        assert!(PyRegex::new(r"\u00e9").unwrap().is_match("café"));
        assert!(PyRegex::new(r"a\sb").unwrap().is_match("a\u{1c}b"));
        assert!(PyRegex::new(r"\<x\>").unwrap().is_match("<x>"));
        assert!(matches!(PyRegex::new("(?=x)"), Err(PatternError::Unsupported(_))));
        assert!(matches!(PyRegex::new(r"(a)\1"), Err(PatternError::Unsupported(_))));
        assert!(matches!(PyRegex::new("(unclosed"), Err(PatternError::Invalid(_))));
    }
}

/// A predicate described as data — what the CLI flags and the `CompileView` RPC both say — and
/// built in one place so both search the same way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PredicateSpec {
    /// Python-style regex (`--grep`); an empty pattern means no search, as in VCC.py.
    pub regex: Option<String>,
    pub literal: Option<String>,
    pub terms: Vec<String>,
    /// Terms must all match (default: any).
    pub all_terms: bool,
    /// For `literal` and `terms`.
    pub ignore_case: bool,
    /// Keep only blocks of these roles (default: all).
    pub roles: Vec<String>,
}

impl PredicateSpec {
    /// The predicate, or `None` when the spec asks for no search.
    pub fn build(&self) -> Result<Option<Box<dyn Predicate>>, PatternError> {
        let base: Box<dyn Predicate> = if let Some(pattern) = self.regex.as_ref().filter(|p| !p.is_empty()) {
            Box::new(Lines(PyRegex::new(pattern)?))
        } else if let Some(text) = &self.literal {
            Box::new(Lines(Literal::new(text, self.ignore_case)?))
        } else if !self.terms.is_empty() {
            let terms = self
                .terms
                .iter()
                .map(|t| Literal::new(t, self.ignore_case).map(|l| Box::new(l) as Box<dyn LineMatcher>))
                .collect::<Result<Vec<_>, _>>()?;
            Box::new(Terms { terms, mode: if self.all_terms { Match::All } else { Match::Any } })
        } else {
            return Ok(None);
        };
        if self.roles.is_empty() {
            return Ok(Some(base));
        }
        Ok(Some(Box::new(RoleFilter { roles: self.roles.clone(), inner: base })))
    }
}
