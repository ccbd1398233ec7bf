//! `memex view`: the reference VCC.py command line over `memex-vcc`.
//!
//! A thin file-I/O shell: it expands inputs, streams each file into [`memex_vcc::Compiler`],
//! writes the views and media the library returns, and prints what VCC.py prints. Flags,
//! output names and stdout are the reference's, so the VCC agent skill works unchanged.
//!
//! `-tu` is a two-letter short option (argparse style), which clap cannot declare; the
//! arguments are therefore captured raw and parsed by [`ViewCli`] after rewriting `-tu`.

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use memex_vcc::{
    Chain, ChainViews, CompileError, CompileOptions, CompiledTrace, Compiler, InputFormat, Predicate, ReadyChain,
    TransposedEntry, UiOptions, ViewOptions, manifest, transposed_view,
};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

mod glob;
mod remote;

/// Compile agent traces into VCC views (run `memex view --help` for the options).
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub struct ViewArgs {
    /// `FILE... [-o DIR] [-t [N]] [-tu [N]] [--grep PATTERN] …` — see `memex view --help`.
    #[arg(num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true, value_name = "ARGS")]
    pub args: Vec<OsString>,
}

/// Compile agent traces into VCC views: full (.txt), UI (.min.txt) and, with a search,
/// adaptive (.view.txt) plus the transposed view on stdout — byte-compatible with VCC.py.
#[derive(Parser, Debug)]
#[command(
    name = "memex view",
    infer_long_args = true,
    after_help = "--format chooses the OUTPUT (text: VCC.py's stdout; json: views plus pointer \
metadata). The INPUT format is --input-format (auto-detected by default: Claude Code JSONL, Codex \
rollout JSONL, Gemini CLI session JSON, memex events JSONL).\n\nA session stored on a running server: \
`memex view --session ID --mode full|ui|adaptive|index` (see `memex view --session x --help`)."
)]
struct ViewCli {
    /// Trace files or glob patterns (`**` recursive; matches of one pattern in mtime order);
    /// gzip'd files are read as the trace they hold; `-` reads stdin (views named `stdin.*`).
    #[arg(required = true, value_name = "FILE")]
    inputs: Vec<String>,
    /// Output directory (default: next to each input).
    #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
    output_dir: Option<String>,
    /// UI-view token limit for non-user text (0 = no truncation).
    #[arg(short = 't', long = "truncate", value_name = "N", num_args = 0..=1,
          default_value = "128", default_missing_value = "128", allow_negative_numbers = true)]
    truncate: i64,
    /// UI-view token limit for user text (also spelled `-tu`).
    #[arg(long = "truncate-user", value_name = "N", num_args = 0..=1,
          default_value = "256", default_missing_value = "256", allow_negative_numbers = true)]
    truncate_user: i64,
    /// Search with a Python-syntax regex: writes .view.txt and prints the transposed view.
    #[arg(long, value_name = "PATTERN")]
    grep: Option<String>,
    /// Search for a literal string instead of a regex.
    #[arg(long, value_name = "TEXT", conflicts_with = "grep")]
    literal: Option<String>,
    /// Search for several literal terms (repeatable); see --match.
    #[arg(long = "term", value_name = "TEXT", conflicts_with_all = ["grep", "literal"])]
    terms: Vec<String>,
    /// Rank blocks by BM25 against this query (each input's chain is the corpus) and keep the
    /// --top-k best.
    #[arg(long, value_name = "QUERY", conflicts_with_all = ["grep", "literal", "terms"])]
    bm25: Option<String>,
    /// Blocks kept by --bm25.
    #[arg(long = "top-k", value_name = "K", default_value_t = 10)]
    top_k: usize,
    /// With several --term: a block matches if any (default) or all of them match.
    #[arg(long = "match", value_enum, default_value = "any")]
    match_mode: MatchMode,
    /// Case-insensitive --literal/--term (for --grep use `(?i)`).
    #[arg(short = 'i', long)]
    ignore_case: bool,
    /// Only search blocks of these roles or node types (user, assistant, thinking, tool_call,
    /// tool_result, tool_error, system, …); repeatable.
    #[arg(long = "role", value_name = "ROLE")]
    roles: Vec<String>,
    /// Output on stdout: `text` (VCC.py's) or `json` (views plus pointer metadata).
    #[arg(long, value_enum, default_value = "text")]
    format: OutputFormat,
    /// Input format; `auto` detects Claude Code, Codex, Gemini CLI or memex events.
    #[arg(long = "input-format", value_enum, default_value = "auto")]
    input_format: InputFormatArg,
    /// Make the first problem in an input fatal for that input (exit status 1).
    #[arg(long)]
    strict: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum MatchMode {
    Any,
    All,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum OutputFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum InputFormatArg {
    Auto,
    Claude,
    Codex,
    Gemini,
    Memex,
}

impl From<InputFormatArg> for InputFormat {
    fn from(f: InputFormatArg) -> Self {
        match f {
            InputFormatArg::Auto => InputFormat::Auto,
            InputFormatArg::Claude => InputFormat::Claude,
            InputFormatArg::Codex => InputFormat::Codex,
            InputFormatArg::Gemini => InputFormat::Gemini,
            InputFormatArg::Memex => InputFormat::Memex,
        }
    }
}

pub fn run(args: ViewArgs) -> ExitCode {
    if remote::wanted(&args.args) {
        return remote::run(args.args);
    }
    let raw = std::iter::once(OsString::from("memex view")).chain(args.args.into_iter().map(rewrite_tu));
    let cli = match ViewCli::try_parse_from(raw) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    let predicate = match build_predicate(&cli) {
        Ok(p) => p,
        Err(message) => {
            eprintln!("memex view: error: {message}");
            return ExitCode::from(2);
        }
    };
    match Session::new(&cli, predicate.as_deref()).run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("memex view: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// argparse's `-tu N` / `-tu=N` → `--truncate-user`.
fn rewrite_tu(arg: OsString) -> OsString {
    match arg.to_str() {
        Some("-tu") => "--truncate-user".into(),
        Some(s) if s.starts_with("-tu=") => format!("--truncate-user={}", &s[4..]).into(),
        _ => arg,
    }
}

fn build_predicate(cli: &ViewCli) -> Result<Option<Box<dyn Predicate>>, String> {
    if let Some(query) = &cli.bm25 {
        let p: Box<dyn Predicate> = Box::new(
            memex_views::Bm25Blocks::new(query, cli.top_k)
                .ok_or("--bm25: the query has no searchable term, or --top-k is 0")?,
        );
        if cli.roles.is_empty() {
            return Ok(Some(p));
        }
        return Ok(Some(Box::new(memex_vcc::RoleFilter { roles: cli.roles.clone(), inner: p })));
    }
    let spec = memex_vcc::PredicateSpec {
        regex: cli.grep.clone(),
        literal: cli.literal.clone(),
        terms: cli.terms.clone(),
        all_terms: matches!(cli.match_mode, MatchMode::All),
        ignore_case: cli.ignore_case,
        roles: cli.roles.clone(),
    };
    spec.build().map_err(|e| match &cli.grep {
        Some(p) if !p.is_empty() => format!("invalid regex for --grep: {e}"),
        _ => e.to_string(),
    })
}

/// One invocation: inputs in order, the transposed view and JSON gathered for the end.
struct Session<'a> {
    cli: &'a ViewCli,
    predicate: Option<&'a dyn Predicate>,
    /// Transposed-view text per chain, in input order.
    transposed: Vec<String>,
    json_inputs: Vec<serde_json::Value>,
    ok: bool,
}

impl<'a> Session<'a> {
    fn new(cli: &'a ViewCli, predicate: Option<&'a dyn Predicate>) -> Self {
        Session { cli, predicate, transposed: Vec::new(), json_inputs: Vec::new(), ok: true }
    }

    fn run(mut self) -> anyhow::Result<bool> {
        let cwd = std::env::current_dir().context("current directory")?;
        for input in expand_inputs(&self.cli.inputs) {
            if let Err(e) = self.input(&input, &cwd) {
                eprintln!("{input}: {e:#}");
                self.ok = false;
            }
        }
        let mut stdout = std::io::stdout().lock();
        if self.cli.format == OutputFormat::Json {
            let transposed = self.predicate.map(|_| self.transposed_text());
            let doc = serde_json::json!({ "inputs": self.json_inputs, "transposed": transposed });
            serde_json::to_writer(&mut stdout, &doc)?;
            writeln!(stdout)?;
        } else if self.predicate.is_some() {
            stdout.write_all(self.transposed_text().as_bytes())?;
        }
        Ok(self.ok)
    }

    fn transposed_text(&self) -> String {
        let parts: Vec<&str> = self.transposed.iter().rev().filter(|t| !t.is_empty()).map(String::as_str).collect();
        parts.join("\n")
    }

    fn input(&mut self, input: &str, cwd: &Path) -> anyhow::Result<()> {
        let out_dir = match &self.cli.output_dir {
            Some(dir) => dir.clone(),
            None => default_output_dir(input, cwd),
        };
        std::fs::create_dir_all(&out_dir).with_context(|| format!("cannot create {out_dir}"))?;
        let opts = ViewOptions {
            ui: UiOptions { truncate: self.cli.truncate, truncate_user: self.cli.truncate_user },
            predicate: self.predicate,
        };
        let json = self.cli.format == OutputFormat::Json;
        // Chains complete before the end of the file are rendered and written on a second
        // thread while the rest is still being read.
        let (compiled, early) = std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, ReadyChain)>(2);
            let out_dir = &out_dir;
            let renderer = scope.spawn(move || {
                rx.into_iter()
                    .map(|(i, c)| (i, render_one(i, &c.finish(), &opts, out_dir, cwd, json)))
                    .collect::<Vec<_>>()
            });
            let compiled = self.compile(input, &tx);
            drop(tx);
            (compiled, renderer.join().unwrap_or_default())
        });
        let trace = match compiled? {
            Ok(trace) => trace,
            Err(CompileError::Strict(d)) => {
                eprintln!("{}", d.render(input));
                self.ok = false;
                return Ok(());
            }
        };
        for d in trace.diagnostics() {
            eprintln!("{}", d.render(input));
        }
        let quiet = self.predicate.is_some() || json;
        if early.is_empty() && trace.chains().is_empty() && !quiet {
            println!("No conversation chains found.");
        }
        let mut rendered = early;
        rendered.extend(render_chains(&trace, &opts, &out_dir, cwd, json));
        rendered.sort_by_key(|(i, _)| *i);
        let mut summary = (Vec::new(), Vec::new());
        let mut json_chains = Vec::new();
        for (_, r) in rendered {
            let r = r?;
            summary.0.push(r.full_line);
            summary.1.push(r.ui_line);
            self.transposed.extend(r.transposed);
            json_chains.extend(r.json);
        }
        if !quiet {
            for line in summary.0.iter().chain(&summary.1) {
                println!("{line}");
            }
        }
        if self.cli.format == OutputFormat::Json {
            self.json_inputs.push(serde_json::json!({
                "path": input,
                "format": trace.format(),
                "diagnostics": trace.diagnostics(),
                "chains": json_chains,
            }));
        }
        Ok(())
    }

    /// Streams the file into the compiler, never holding the raw input in memory; a second
    /// thread reads ahead so the kernel's copy overlaps with compiling. (Lexing on a worker via
    /// `memex_vcc::Lexer` was measured too: it costs ~25% more CPU for owned records and was
    /// not faster on this 2-core machine under load.)
    fn compile(
        &self,
        input: &str,
        ready: &std::sync::mpsc::SyncSender<(usize, ReadyChain)>,
    ) -> anyhow::Result<Result<CompiledTrace, CompileError>> {
        let opts = CompileOptions { format: self.cli.input_format.into(), strict: self.cli.strict };
        let file = super::input::open(input).context("cannot open")?;
        let mut compiler = Compiler::new(memex_vcc::stem_of(&file.name), opts);
        read_ahead(file.reader, |chunk| {
            compiler.push(chunk);
            // With --strict a later problem discards the whole input: nothing is written early.
            if !opts.strict {
                for chain in compiler.take_ready_chains() {
                    let _ = ready.send(chain);
                }
            }
        })?;
        Ok(compiler.finish())
    }
}

/// Reads `file` (decompressed, if it was gzip'd) in 1 MiB chunks on a second thread, calling
/// `each` on this one; spent buffers go back to the reader (no fresh pages per chunk).
fn read_ahead(mut file: Box<dyn Read + Send>, mut each: impl FnMut(&[u8])) -> anyhow::Result<()> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Vec<u8>>>(2);
    let (give_back, spent) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            loop {
                let mut buf = spent.try_recv().unwrap_or_else(|_| Vec::with_capacity(1 << 20));
                buf.clear();
                let read = (&mut file).take(1 << 20).read_to_end(&mut buf).map(|_| buf);
                let done = !matches!(&read, Ok(b) if !b.is_empty());
                if tx.send(read).is_err() || done {
                    return;
                }
            }
        });
        for chunk in rx {
            let chunk = chunk.context("cannot read")?;
            if chunk.is_empty() {
                break;
            }
            each(&chunk);
            let _ = give_back.send(chunk);
        }
        anyhow::Ok(())
    })
}

/// What the session keeps of one rendered chain.
struct Rendered {
    full_line: String,
    ui_line: String,
    transposed: Option<String>,
    json: Option<serde_json::Value>,
}

/// Renders and writes every chain, two at a time (chains are independent); results in order.
fn render_chains(
    trace: &CompiledTrace,
    opts: &ViewOptions<'_>,
    out_dir: &str,
    cwd: &Path,
    json: bool,
) -> Vec<(usize, anyhow::Result<Rendered>)> {
    let (chains, first) = (trace.chains(), trace.first_index());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(2)).min(chains.len().max(1));
    let mut results: Vec<(usize, anyhow::Result<Rendered>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(chain) = chains.get(i) else {
                            return mine;
                        };
                        let index = first + i;
                        mine.push((index, render_one(index, chain, opts, out_dir, cwd, json)));
                    }
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results
}

fn render_one(
    index: usize,
    chain: &Chain,
    opts: &ViewOptions<'_>,
    out_dir: &str,
    cwd: &Path,
    json: bool,
) -> anyhow::Result<Rendered> {
    let views = ChainViews::render(chain, opts);
    let paths = write_chain(chain, &views, out_dir)?;
    let transposed = views.adaptive.as_ref().map(|adaptive| {
        let reference = rel_path(Path::new(&paths[0]), cwd);
        transposed_view(&[TransposedEntry { reference, chain, hits: &adaptive.hits }])
    });
    let json = if json {
        let m = serde_json::to_value(manifest::chain_manifest(index, chain, &views))?;
        Some(serde_json::json!({ "paths": paths, "manifest": m }))
    } else {
        None
    };
    Ok(Rendered {
        full_line: format!("  {}  ({} lines, {} words)", paths[0], views.full_lines, views.full_words),
        ui_line: format!("  {}  ({} lines, {} words)", paths[1], views.ui.lines, views.ui_words),
        transposed,
        json,
    })
}

/// Writes media, `.txt`, `.min.txt` and `.view.txt`; returns their printed paths.
fn write_chain(chain: &Chain, views: &ChainViews, out_dir: &str) -> anyhow::Result<Vec<String>> {
    for m in chain.media() {
        write_file(&py_join(out_dir, &m.name), &m.bytes)?;
    }
    let files = chain.files();
    let full = py_join(out_dir, &files.full);
    let ui = py_join(out_dir, &files.ui);
    write_file(&full, views.full.as_bytes())?;
    write_file(&ui, views.ui.text.as_bytes())?;
    let mut paths = vec![full, ui];
    if let Some(adaptive) = &views.adaptive {
        let view = py_join(out_dir, &files.adaptive);
        write_file(&view, adaptive.text.as_bytes())?;
        paths.push(view);
    }
    Ok(paths)
}

fn write_file(path: &str, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {path}"))
}

/// `os.path.join(dir, name)` for a plain file name.
fn py_join(dir: &str, name: &str) -> String {
    if dir.is_empty() || dir.ends_with('/') { format!("{dir}{name}") } else { format!("{dir}/{name}") }
}

/// `os.path.dirname(os.path.abspath(input)) or "."`.
fn default_output_dir(input: &str, cwd: &Path) -> String {
    let abs = normalize(&cwd.join(input));
    abs.parent().map_or_else(|| ".".into(), |p| p.to_string_lossy().into_owned())
}

/// Lexical `os.path.normpath` of an absolute path (no symlink resolution).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `os.path.relpath(path)` against the working directory.
fn rel_path(path: &Path, cwd: &Path) -> String {
    let target = normalize(&cwd.join(path));
    let base = normalize(cwd);
    let (t, b): (Vec<_>, Vec<_>) = (target.components().collect(), base.components().collect());
    let common = t.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = vec!["..".into(); b.len() - common];
    parts.extend(t[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()));
    if parts.is_empty() { ".".into() } else { parts.join("/") }
}

/// VCC.py's input expansion: each argument globbed (`**` recursive, hidden files only when the
/// pattern says so), one argument's matches in modification-time order, an argument without
/// matches used as given.
fn expand_inputs(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for arg in args {
        let mut matches = glob::expand(arg);
        matches.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
        if matches.is_empty() {
            out.push(arg.clone());
        } else {
            out.extend(matches);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_like_python() {
        assert_eq!(memex_vcc::stem_of("dir/a.b.jsonl"), "a.b");
        assert_eq!(memex_vcc::stem_of(".hidden"), ".hidden");
        assert_eq!(py_join(".", "x.txt"), "./x.txt");
        assert_eq!(py_join("out/", "x.txt"), "out/x.txt");
        let cwd = Path::new("/work/a");
        assert_eq!(rel_path(Path::new("./x.txt"), cwd), "x.txt");
        assert_eq!(rel_path(Path::new("/work/b/x.txt"), cwd), "../b/x.txt");
        assert_eq!(default_output_dir("../c/t.jsonl", cwd), "/work/c");
    }

    #[test]
    fn cli_definition_is_valid() {
        use clap::CommandFactory;
        ViewCli::command().debug_assert();
    }

    #[test]
    fn tu_is_rewritten() {
        assert_eq!(rewrite_tu("-tu".into()), OsString::from("--truncate-user"));
        assert_eq!(rewrite_tu("-tu=5".into()), OsString::from("--truncate-user=5"));
        assert_eq!(rewrite_tu("-t".into()), OsString::from("-t"));
    }
}
