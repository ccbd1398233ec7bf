//! The compiler's entry points: streaming [`Compiler`], one-shot [`compile_trace`], and
//! [`compile`], which also lowers every chain to the views the CLI writes.

use crate::assemble::{Assembler, ReadyChain};
use crate::diag::{Diagnostic, Diags};
use crate::events::{EventMapper, EventRecord};
use crate::ir::Chain;
use crate::lex::{InputFormat, Reader, RecConsumer, TraceFormat};
use crate::lower::{AdaptiveView, UiOptions, UiView};
use crate::predicate::Predicate;
use crate::record::Rec;
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
    /// Index of `chains[0]` (non-zero only after [`Compiler::take_ready_chains`]).
    first_index: usize,
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
    /// The input-wide index of `chains()[0]` (0 unless chains were taken early).
    pub fn first_index(&self) -> usize {
        self.first_index
    }
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }
    /// Approximate heap size, for cache weighers.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.stem.len()
            + self.chains.iter().map(Chain::size_bytes).sum::<usize>()
            + self.diagnostics.iter().map(|d| d.message.len() + 16).sum::<usize>()
    }
}

/// Streaming compiler: feed chunks of any size, then [`Compiler::finish`]. Memory holds the
/// compiled chains, never the raw input.
///
/// A clone resumes where the original stands: clone a compiler that has read an input's first
/// bytes, push the rest into the clone and finish it, and the result is byte for byte what a
/// compile of the whole input gives (`tests/resumed.rs`). [`Compiler::snapshot`] gives the same
/// without the clone: a live session's versions are compiled that way, each from the events it
/// adds.
#[derive(Clone)]
pub struct Compiler {
    stem: String,
    strict: bool,
    reader: Reader,
    assembler: Assembler,
    diags: Diags,
    /// Set when records come from a [`Lexer`] instead of `push`.
    lexed_format: Option<TraceFormat>,
    /// Chains handed out by [`Compiler::take_ready_chains`].
    taken: usize,
}

/// The lexing half of a [`Compiler`], so that it can run on another thread: bytes in, owned
/// records out. Hand every batch, in order, to [`Compiler::push_records`]; the result is the
/// same as pushing the bytes into the compiler itself.
pub struct Lexer {
    reader: Reader,
    diags: Diags,
}

/// A batch of lexed records (owned, `Send`).
pub struct Records {
    recs: Vec<Rec<'static>>,
    diags: Vec<Diagnostic>,
    format: TraceFormat,
}

struct Collect(Vec<Rec<'static>>);

impl RecConsumer for Collect {
    fn rec(&mut self, rec: Rec<'_>, _d: &mut Diags) {
        self.0.push(rec.into_owned());
    }
}

impl Lexer {
    pub fn new(format: InputFormat) -> Self {
        Lexer { reader: Reader::new(format, false), diags: Diags::default() }
    }

    pub fn push(&mut self, bytes: &[u8]) -> Records {
        let mut out = Collect(Vec::new());
        self.reader.push(bytes, &mut out, &mut self.diags);
        self.batch(out)
    }

    pub fn finish(mut self) -> Records {
        let mut out = Collect(Vec::new());
        self.reader.finish(&mut out, &mut self.diags);
        self.batch(out)
    }

    fn batch(&mut self, out: Collect) -> Records {
        Records { recs: out.0, diags: std::mem::take(&mut self.diags.items), format: self.reader.format() }
    }
}

impl Compiler {
    pub fn new(stem: impl Into<String>, opts: CompileOptions) -> Self {
        Compiler {
            stem: stem.into(),
            strict: opts.strict,
            reader: Reader::new(opts.format, opts.strict),
            assembler: Assembler::new(),
            diags: Diags::default(),
            lexed_format: None,
            taken: 0,
        }
    }

    /// Chains that are complete and final already (only once the input is known to have more
    /// than one chain, since that decides the `_N` names), as `(index, chain)`. They are not
    /// part of the [`CompiledTrace`] that [`Compiler::finish`] returns, whose chains continue
    /// the numbering (see [`CompiledTrace::first_index`]). Lets a caller render early chains
    /// while later ones are still being read.
    pub fn take_ready_chains(&mut self) -> Vec<(usize, ReadyChain)> {
        let ready = self.assembler.take_ready(&self.stem);
        self.taken += ready.len();
        ready
    }

    /// Approximate heap size, for cache weighers (a kept compiler holds its chains so far).
    pub fn size_bytes(&self) -> usize {
        self.reader.size_bytes()
            + self.assembler.size_bytes()
            + self.diags.items.iter().map(|d| d.message.len() + 16).sum::<usize>()
            + self.stem.len()
    }

    /// What of [`Compiler::size_bytes`] is block text that its snapshot's blocks share, not
    /// copy: a cache that keeps the compiler beside its snapshot counts it once.
    pub fn text_bytes(&self) -> usize {
        self.assembler.text_bytes()
    }

    /// Consumes a batch from a [`Lexer`] (instead of [`Compiler::push`]).
    pub fn push_records(&mut self, batch: Records) {
        self.lexed_format = Some(batch.format);
        self.diags.items.extend(batch.diags);
        for rec in batch.recs {
            self.assembler.rec(rec, &mut self.diags);
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.reader.halted {
            return;
        }
        self.reader.push(bytes, &mut self.assembler, &mut self.diags);
    }

    /// What [`Compiler::finish`] would return now, with the compiler left to read on: a live
    /// session's version, resumed by the next. What no later input can change (the sections of a
    /// chain before its open assistant record, when no tool name is still to come) is finished
    /// once and kept, so each snapshot finishes only what was pushed since the last one and
    /// shares its text with it. An input that ends in an unterminated line, or a document
    /// (Gemini CLI), is complete only at its end: a clone of the compiler is finished then.
    pub fn snapshot(&mut self) -> Result<CompiledTrace, CompileError> {
        if !self.reader.settled() {
            return self.clone().finish();
        }
        let diagnostics = checked(self.strict, self.diags.items.clone())?;
        Ok(CompiledTrace {
            first_index: self.taken,
            format: self.lexed_format.unwrap_or(self.reader.format()),
            chains: self.assembler.snapshot(&self.stem),
            stem: self.stem.clone(),
            diagnostics,
        })
    }

    pub fn finish(mut self) -> Result<CompiledTrace, CompileError> {
        self.reader.finish(&mut self.assembler, &mut self.diags);
        self.finish_read()
    }

    /// Finishes once the reader has seen the whole input.
    fn finish_read(self) -> Result<CompiledTrace, CompileError> {
        let diagnostics = checked(self.strict, self.diags.items)?;
        Ok(CompiledTrace {
            first_index: self.taken,
            format: self.lexed_format.unwrap_or(self.reader.format()),
            chains: self.assembler.finish(&self.stem),
            stem: self.stem,
            diagnostics,
        })
    }
}

/// A compile's diagnostics in line order (lexing and parsing report separately); with `strict`,
/// the first one is the error.
fn checked(strict: bool, mut diagnostics: Vec<Diagnostic>) -> Result<Vec<Diagnostic>, CompileError> {
    diagnostics.sort_by_key(|d| (d.line, d.col));
    match diagnostics.first() {
        Some(first) if strict => Err(CompileError::Strict(first.clone())),
        _ => Ok(diagnostics),
    }
}

/// Compiles a whole input held in memory.
pub fn compile_trace(bytes: &[u8], stem: &str, opts: CompileOptions) -> Result<CompiledTrace, CompileError> {
    let mut compiler = Compiler::new(stem, opts);
    compiler.push(bytes);
    compiler.finish()
}

/// A record goes to the compiler's assembler and to the events mapping, so one lexing pass
/// gives both.
struct Tee<'a> {
    assembler: &'a mut Assembler,
    events: &'a mut EventMapper,
}

impl RecConsumer for Tee<'_> {
    fn rec(&mut self, rec: Rec<'_>, d: &mut Diags) {
        self.events.map(&rec);
        self.assembler.rec(rec, d);
    }
}

/// Compiles a whole input and maps it to events (what an import stores) in one lexing pass: the
/// same chains as [`compile_trace`] and the same events as [`crate::trace_events`].
pub fn compile_with_events(
    bytes: &[u8],
    stem: &str,
    opts: CompileOptions,
) -> Result<(CompiledTrace, Vec<EventRecord>), CompileError> {
    let mut compiler = Compiler::new(stem, opts);
    let mut events = EventMapper::default();
    if !compiler.reader.halted {
        let mut tee = Tee { assembler: &mut compiler.assembler, events: &mut events };
        compiler.reader.push(bytes, &mut tee, &mut compiler.diags);
    }
    let mut tee = Tee { assembler: &mut compiler.assembler, events: &mut events };
    compiler.reader.finish(&mut tee, &mut compiler.diags);
    let trace = compiler.finish_read()?;
    Ok((trace, events.into_events()))
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
    let views = trace.chains().iter().map(|c| ChainViews::render(c, views)).collect();
    Ok(Compilation { trace, views })
}
