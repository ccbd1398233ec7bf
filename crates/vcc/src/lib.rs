//! # memex-vcc — the VCC trace compiler
//!
//! Compiles agent traces (Claude Code JSONL, Codex CLI rollouts, Gemini CLI sessions, memex's
//! own events) into the views of VCC ("View-oriented Conversation Compiler"), byte-identical to
//! the reference implementation (`lllyasviel/VCC` @ b98acfd) on Claude Code input:
//!
//! * the **full view** (`.txt`): every block, every line — memex's coordinate system;
//! * the **UI view** (`.min.txt`): what the user saw, tool calls as one-line summaries with
//!   `(file:call,result)` pointers;
//! * the **adaptive view** (`.view.txt`) and the **transposed view** (the CLI's stdout): the
//!   blocks a [`Predicate`] selects, each with a `(file:start-end)` pointer.
//!
//! Pipeline: lex (`lex`: bytes → lines → records, per format) → merge streamed chunks and split
//! chains at compactions (`assemble`) → parse records into sections and blocks (`parse`) → one
//! line-assignment pass ([`Chain`]) → lower and emit each view (`lower`). Lowering only selects,
//! truncates or annotates; it never renumbers, so every pointer of every view resolves into the
//! full view.
//!
//! The crate is pure: no file system, clock, environment or async. Callers hand it bytes and
//! receive strings and bytes; `memex view` is a thin file-I/O wrapper over [`compile`].
//!
//! ## Capabilities for the service
//!
//! * Compile in memory: [`compile`] `(bytes, stem, CompileOptions, ViewOptions) →`
//!   [`Compilation`] (per chain: full, UI and adaptive view text, media via
//!   [`Chain::media`], diagnostics with `line`/`col`). [`Compiler`] is the same thing fed in
//!   chunks; [`Lexer`] + [`Compiler::push_records`] split it in two halves that can run on two
//!   threads (same bytes out).
//! * A compiled, immutable IR: [`CompiledTrace`] (`Send + Sync`, [`CompiledTrace::size_bytes`]
//!   for a cache weigher). Each [`Chain`] re-renders [`Chain::ui_view`] /
//!   [`Chain::adaptive_view`] with other options or predicates without re-parsing, and answers
//!   line lookups: [`Chain::read_lines`] (text, line kind, role and block of each full-view
//!   line in a range) and [`Chain::blocks`] / [`Chain::sections`] (boundaries).
//! * Events: [`trace_events`] maps any input format to flat [`EventRecord`]s (kind, content,
//!   tool name and call id, event time, agent id, metadata), documented losses included;
//!   [`LineEvents`] and [`document_events`] hand out the same events as a trace grows (the live
//!   capture of `memex watch`).
//! * Predicates: [`Predicate`] (block-level, for rankers: BM25 or embeddings can score
//!   [`Candidate`]s and return top-k [`Hit`]s) and [`LineMatcher`] (regex, literal, …).
//! * JSON: [`manifest::chain_manifest`] — views plus pointer metadata, deterministic.
//!
//! ## Where the reference crashes, this crate does not
//!
//! A malformed JSON line, a non-object record, invalid UTF-8, invalid base64 or a field of the
//! wrong type yields a [`Diagnostic`] (`line:col: message`); the rest of the input is compiled.
//! With [`CompileOptions::strict`] the first diagnostic is a [`CompileError`].

mod assemble;

pub use assemble::ReadyChain;
mod compile;
mod diag;
mod events;
mod ir;
mod json;
mod lex;
mod lines;
mod live;
mod lower;
pub mod manifest;
mod media;
mod parse;
mod predicate;
mod pyfmt;
mod pyregex;
mod record;
mod stats;
mod text;
mod tool;

pub use compile::{
    ChainViews, Compilation, CompileError, CompileOptions, CompiledTrace, Compiler, Lexer, Records, ViewOptions,
    compile, compile_trace, compile_with_events,
};
pub use diag::{Diagnostic, Severity};
pub use events::{AppendRecord, EventRecord, trace_events};
pub use ir::{Block, BlockKind, Chain, ChainFiles, MediaFile, SEPARATOR, Section, SectionRole, Speaker};
pub use lex::{InputFormat, TraceFormat, UnknownFormat};
pub use lines::{LineInfo, LineKind};
pub use live::{LineEvents, MessageEvents, document_events};
pub use lower::{
    AdaptiveView, TransposedEntry, UiOptions, UiPointer, UiPointerKind, UiView, short_name, transposed_view,
};
pub use predicate::{
    Candidate, Hit, LineMatcher, Lines, Literal, Match, PatternError, Predicate, PredicateSpec, PyRegex, RoleFilter,
    Terms,
};

/// The stem VCC.py names a file's views after, `os.path.splitext(os.path.basename(path))[0]`:
/// the file name without its last extension, where leading dots do not start one (`.trace` and
/// `..foo` keep their names). Both `/` and `\` separate directories.
pub fn stem_of(path: &str) -> String {
    let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
    match base.rfind('.') {
        Some(at) if base[..at].chars().any(|c| c != '.') => base[..at].to_owned(),
        _ => base.to_owned(),
    }
}

/// Counts words the way the reference's summary lines do (non-whitespace tokens).
pub fn word_count(text: &str) -> usize {
    text::count_words(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn compiled_ir_is_send_and_sync() {
        assert_send_sync::<CompiledTrace>();
        assert_send_sync::<Chain>();
    }
}

#[cfg(test)]
mod stem_tests {
    use super::stem_of;

    #[test]
    fn stems_are_python_splitext_of_the_base_name() {
        assert_eq!(stem_of("a/b/trace.jsonl"), "trace");
        assert_eq!(stem_of("C:\\x\\t.tar.gz"), "t.tar");
        assert_eq!(stem_of(".trace"), ".trace");
        assert_eq!(stem_of("..foo"), "..foo");
        assert_eq!(stem_of("a..b"), "a.");
        assert_eq!(stem_of("noext"), "noext");
    }
}
