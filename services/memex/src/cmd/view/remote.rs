//! `memex view --session ID`: a stored session's view, compiled by a running server
//! (ViewService.CompileView), on stdout. The same bytes `memex view FILE` writes for the trace
//! the session was imported from.
use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use memex_proto::v1 as pb;

use crate::cmd::exit;
use crate::cmd::out::{self, ClientArgs};

#[derive(Parser, Debug)]
#[command(name = "memex view --session", after_help = exit::HELP)]
struct RemoteCli {
    #[command(flatten)]
    args: ClientArgs,
    /// The session to compile.
    #[arg(long)]
    session: String,
    /// full (every line: the coordinates), ui (what the user saw), adaptive (the blocks a
    /// predicate selects, with pointers) or index (the same hits as a flat list).
    #[arg(long, value_enum, default_value = "full")]
    mode: Mode,
    /// Chain of a trace split by compactions.
    #[arg(long, default_value_t = 1)]
    chain: u32,
    /// UI view: token limit for non-user text (0: the default 128; -1: none).
    #[arg(short = 't', long, default_value_t = 0, allow_negative_numbers = true)]
    truncate: i32,
    /// UI view: token limit for user text (0: the default 256; -1: none; also `-tu`).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    truncate_user: i32,
    /// Adaptive/index: blocks matching a Python-style regex.
    #[arg(long, value_name = "PATTERN")]
    grep: Option<String>,
    /// Adaptive/index: blocks containing a literal string.
    #[arg(long, value_name = "TEXT")]
    literal: Option<String>,
    /// Adaptive/index: blocks containing these terms (repeatable; see --match).
    #[arg(long = "term", value_name = "TEXT")]
    terms: Vec<String>,
    #[arg(long = "match", value_enum, default_value = "any")]
    match_mode: MatchMode,
    /// Case-insensitive --literal/--term.
    #[arg(short = 'i', long)]
    ignore_case: bool,
    /// Only blocks of these roles: user, assistant, tool, system (repeatable).
    #[arg(long = "role")]
    roles: Vec<String>,
    /// Adaptive/index: the --top-k blocks BM25 ranks best for this query.
    #[arg(long, value_name = "QUERY")]
    bm25: Option<String>,
    /// Adaptive/index: the --top-k events the embeddings rank best for this query.
    #[arg(long, value_name = "QUERY", conflicts_with = "bm25")]
    semantic: Option<String>,
    #[arg(long, default_value_t = 10)]
    top_k: u32,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    Full,
    Ui,
    Adaptive,
    Index,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum MatchMode {
    Any,
    All,
}

/// Whether the arguments ask for a stored session rather than local files.
pub fn wanted(args: &[OsString]) -> bool {
    args.iter().any(|a| a.to_str().is_some_and(|a| a == "--session" || a.starts_with("--session=")))
}

pub fn run(args: Vec<OsString>) -> ExitCode {
    let raw = std::iter::once(OsString::from("memex view")).chain(args.into_iter().map(super::rewrite_tu));
    let cli = match RemoteCli::try_parse_from(raw) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    let result = crate::cmd::runtime().and_then(|rt| rt.block_on(view(cli)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", exit::message(&e));
            ExitCode::from(exit::status(&e))
        }
    }
}

fn predicate(cli: &RemoteCli) -> Option<pb::Predicate> {
    let ranked =
        cli.bm25.as_ref().map(|q| (pb::Ranker::Bm25, q)).or(cli.semantic.as_ref().map(|q| (pb::Ranker::Semantic, q)));
    let any = cli.grep.is_some() || cli.literal.is_some() || !cli.terms.is_empty() || ranked.is_some();
    any.then(|| pb::Predicate {
        regex: cli.grep.clone().unwrap_or_default(),
        literal: cli.literal.clone().unwrap_or_default(),
        terms: cli.terms.clone(),
        all_terms: matches!(cli.match_mode, MatchMode::All),
        ignore_case: cli.ignore_case,
        roles: cli.roles.clone(),
        ranker: ranked.map_or(pb::Ranker::Unspecified, |r| r.0) as i32,
        query: ranked.map(|r| r.1.clone()).unwrap_or_default(),
        top_k: cli.top_k,
    })
}

async fn view(cli: RemoteCli) -> anyhow::Result<()> {
    let kind = match cli.mode {
        Mode::Full => pb::ViewKind::Full,
        Mode::Ui => pb::ViewKind::Ui,
        Mode::Adaptive => pb::ViewKind::Adaptive,
        Mode::Index => pb::ViewKind::Index,
    };
    let req = pb::CompileViewRequest {
        session_id: cli.session.clone(),
        view: kind as i32,
        chain: cli.chain,
        truncate: cli.truncate,
        truncate_user: cli.truncate_user,
        predicate: predicate(&cli),
        ..Default::default()
    };
    let v = cli.args.client().await?.compile_view(req).await?;
    if cli.args.json() {
        return out::print_json(&serde_json::json!({
            "info": out::to_json(&v.info, "ViewInfo")?,
            "text": String::from_utf8_lossy(&v.text),
        }));
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&v.text)?;
    stdout.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_flag_selects_the_server() {
        assert!(wanted(&["--session".into(), "s1".into()]));
        assert!(wanted(&["--mode=ui".into(), "--session=s1".into()]));
        assert!(!wanted(&["t.jsonl".into(), "--grep".into(), "x".into()]));
    }

    #[test]
    fn cli_definition_is_valid() {
        use clap::CommandFactory;
        RemoteCli::command().debug_assert();
    }
}
