//! The compiler's entry points: streaming [`Compiler`], one-shot [`compile_trace`], and
//! [`compile`], which also lowers every chain to the views the CLI writes.

use crate::assemble::Assembler;
use crate::diag::{Diagnostic, Diags};
use crate::ir::Chain;
use crate::lex::{InputFormat, Reader, TraceFormat};
use crate::lower::{AdaptiveView, UiOptions, UiView};
use crate::predicate::Predicate;
use crate::text::count_words;
use thiserror::Error;

/// Errors a caller can act on.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CompileError {
    /// `strict` was set and the input had a problem (the first one).
    #[error("{}:{}: {}", .0.line, .0.col, .0.message)]
    Strict(Diagnostic),
}

/// How to read an input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileOptions {
    pub format: InputFormat,
    /// Make the first diagnostic fatal.
    pub strict: bool,
}

/// A compiled input: its chains (immutable, `Send + Sync`) and the problems met on the way.
#[derive(Debug, Clone)]
pub struct CompiledTrace {
    stem: String,
    format: TraceFormat,
    chains: Vec<Chain>,
    diagnostics: Vec<Diagnostic>,
}

impl CompiledTrace {
    /// The name outputs are derived from (`<stem>[_N].txt`, …).
    pub fn stem(&self) -> &str {
        &self.stem
    }
    pub fn format(&self) -> TraceFormat {
        self.format
    }
    /// One chain per compaction segment; empty if the input had no records.
    pub fn chains(&self) -> &[Chain] {
        &self.chains
    }
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }
    /// Approximate heap size, for cache weighers.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.stem.len()
            + self.chains.iter().map(Chain::size_bytes).sum::<usize>()
            + self
                .diagnostics
                .iter()
                .map(|d| d.message.len() + 16)
                .sum::<usize>()
    }
}

/// Streaming compiler: feed chunks of any size, then [`Compiler::finish`]. Memory holds the
/// compiled chains, never the raw input.
pub struct Compiler {
    stem: String,
    strict: bool,
    reader: Reader,
    assembler: Assembler,
    diags: Diags,
}

impl Compiler {
    pub fn new(stem: impl Into<String>, opts: CompileOptions) -> Self {
        Compiler {
            stem: stem.into(),
            strict: opts.strict,
            reader: Reader::new(opts.format, opts.strict),
            assembler: Assembler::new(),
            diags: Diags::default(),
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.reader.halted {
            return;
        }
        self.reader
            .push(bytes, &mut self.assembler, &mut self.diags);
    }

    pub fn finish(mut self) -> Result<CompiledTrace, CompileError> {
        self.reader.finish(&mut self.assembler, &mut self.diags);
        if self.strict
            && let Some(first) = self.diags.items.first()
        {
            return Err(CompileError::Strict(first.clone()));
        }
        Ok(CompiledTrace {
            format: self.reader.format(),
            chains: self.assembler.finish(&self.stem),
            stem: self.stem,
            diagnostics: self.diags.items,
        })
    }
}

/// Compiles a whole input held in memory.
pub fn compile_trace(
    bytes: &[u8],
    stem: &str,
    opts: CompileOptions,
) -> Result<CompiledTrace, CompileError> {
    let mut compiler = Compiler::new(stem, opts);
    compiler.push(bytes);
    compiler.finish()
}

/// What to lower each chain to.
#[derive(Clone, Copy, Default)]
pub struct ViewOptions<'p> {
    pub ui: UiOptions,
    /// The search of the adaptive view (`--grep`); no adaptive view without one.
    pub predicate: Option<&'p dyn Predicate>,
}

/// One chain's views, as the CLI writes them.
#[derive(Debug, Clone)]
pub struct ChainViews {
    pub full: String,
    /// The CLI's "(N lines, W words)" for the full view.
    pub full_lines: u32,
    pub full_words: usize,
    pub ui: UiView,
    pub ui_words: usize,
    pub adaptive: Option<AdaptiveView>,
}

impl ChainViews {
    pub fn render(chain: &Chain, opts: &ViewOptions<'_>) -> Self {
        let full = chain.full_view();
        let ui = chain.ui_view(&opts.ui);
        ChainViews {
            full_words: count_words(&full),
            full_lines: chain.full_line_count(),
            full,
            ui_words: count_words(&ui.text),
            ui,
            adaptive: opts.predicate.map(|p| chain.adaptive_view(p)),
        }
    }
}

/// A compiled input and the views of each of its chains.
#[derive(Debug, Clone)]
pub struct Compilation {
    pub trace: CompiledTrace,
    /// One entry per chain, in order.
    pub views: Vec<ChainViews>,
}

/// Compiles an input and lowers every chain: the very bytes `memex view` writes.
pub fn compile(
    bytes: &[u8],
    stem: &str,
    opts: CompileOptions,
    views: &ViewOptions<'_>,
) -> Result<Compilation, CompileError> {
    let trace = compile_trace(bytes, stem, opts)?;
    let views = trace
        .chains()
        .iter()
        .map(|c| ChainViews::render(c, views))
        .collect();
    Ok(Compilation { trace, views })
}
