//! `memex search` (SearchService.Search) and `memex read` (ViewService.ReadLines): find events,
//! then read the full-view lines a hit points at.
use anyhow::Context as _;
use memex_client::line_pointer;
use memex_proto::v1 as pb;

use super::out::{self, ClientArgs};

#[derive(clap::Args, Debug)]
pub struct SearchArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// Words to look for (no query syntax: every word is a term).
    #[arg(required = true, num_args = 1..)]
    pub query: Vec<String>,
    /// Hits to return (1..1000).
    #[arg(long, short = 'k', default_value_t = 10)]
    pub limit: u32,
    /// Only these sessions (repeatable; any of them).
    #[arg(long = "session")]
    pub sessions: Vec<String>,
    #[arg(long = "task")]
    pub tasks: Vec<String>,
    #[arg(long = "agent")]
    pub agents: Vec<String>,
    /// Event kinds, e.g. tool_result (repeatable).
    #[arg(long = "kind")]
    pub kinds: Vec<String>,
    /// user, assistant, tool, system or other (repeatable).
    #[arg(long = "role")]
    pub roles: Vec<String>,
    /// Events at or after this time (RFC 3339).
    #[arg(long)]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Events at or before this time (RFC 3339).
    #[arg(long)]
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// Diversify the hits (maximal marginal relevance).
    #[arg(long)]
    pub mmr: bool,
    #[arg(long)]
    pub mmr_lambda: Option<f32>,
    #[arg(long)]
    pub bm25_weight: Option<f32>,
    #[arg(long)]
    pub vector_weight: Option<f32>,
    /// JSON: include each hit's matched text (text output always shows its first line).
    #[arg(long)]
    pub with_text: bool,
}

pub async fn search(a: SearchArgs) -> anyhow::Result<()> {
    let req = pb::SearchRequest {
        query: a.query.join(" "),
        limit: a.limit,
        filter: Some(pb::SearchFilter {
            session_ids: a.sessions.clone(),
            task_ids: a.tasks.clone(),
            agent_ids: a.agents.clone(),
            kinds: a.kinds.clone(),
            roles: a.roles.clone(),
            time_from: a.since.as_ref().map(out::timestamp),
            time_to: a.until.as_ref().map(out::timestamp),
        }),
        mmr: a.mmr,
        mmr_lambda: a.mmr_lambda,
        bm25_weight: a.bm25_weight,
        vector_weight: a.vector_weight,
        with_text: a.with_text || !a.args.json(),
        ..Default::default()
    };
    let r = a.args.client().await?.search(req).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&r, "SearchResponse")?);
    }
    for (i, h) in r.hits.iter().enumerate() {
        outln!("{}", hit_line(i + 1, h));
        if !h.text.trim().is_empty() {
            outln!("    {}", out::one_line(&h.text, 100));
        }
    }
    if r.hits.is_empty() {
        eprintln!("no hits");
    }
    if !r.vectors_used {
        eprintln!("(ranked by BM25 alone: no query vector)");
    }
    Ok(())
}

/// `1. s1:41-62  tool_result Bash  score 0.0325 (bm25 #1, vector #3)`.
fn hit_line(rank: usize, h: &pb::SearchHit) -> String {
    let at = if h.first_line > 0 {
        line_pointer(&h.session_id, 1, h.first_line, h.last_line)
    } else {
        format!("{} seq {}", h.session_id, h.seq)
    };
    let tool = if h.tool_name.is_empty() { String::new() } else { format!(" {}", h.tool_name) };
    let s = h.score.unwrap_or_default();
    let mut why = Vec::new();
    if s.bm25_rank > 0 {
        why.push(format!("bm25 #{}", s.bm25_rank));
    }
    if s.vector_rank > 0 {
        why.push(format!("vector #{}", s.vector_rank));
    }
    format!("{rank}. {at}  {}{tool}  score {:.4} ({})", h.kind, s.fused, why.join(", "))
}

#[derive(clap::Args, Debug)]
pub struct ReadArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// `SESSION:FIRST-LAST` (or `SESSION#CHAIN:FIRST-LAST`): full-view lines, as search hits and
    /// packs cite them.
    pub pointer: String,
    /// Extra lines before and after the range.
    #[arg(long, short = 'C', default_value_t = 0)]
    pub context: u32,
}

pub async fn read(a: ReadArgs) -> anyhow::Result<()> {
    let req = pb::ReadLinesRequest { pointer: a.pointer.clone(), context: a.context, ..Default::default() };
    let r = a.args.client().await?.read_lines(req).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&r, "ReadLinesResponse")?);
    }
    let width = r.lines.last().map_or(1, |l| l.number.to_string().len());
    let mut stdout = std::io::stdout().lock();
    for l in &r.lines {
        use std::io::Write as _;
        writeln!(stdout, "{:>width$}  {}", l.number, l.text).context("stdout")?;
    }
    Ok(())
}
