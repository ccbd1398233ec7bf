//! `memex erase`: a data subject's sessions erased through a running server (EraseSubject; needs
//! an admin key). Prints what went; `--dry-run` only counts.
use memex_proto::v1 as pb;

use super::out::{self, ClientArgs};

#[derive(clap::Args, Debug)]
pub struct EraseArgs {
    #[command(flatten)]
    args: ClientArgs,
    /// A session of the subject (repeatable).
    #[arg(long = "session")]
    sessions: Vec<String>,
    /// Every session of this agent.
    #[arg(long)]
    agent: Option<String>,
    /// Every session of this task.
    #[arg(long)]
    task: Option<String>,
    /// Why, for the audit record (e.g. "GDPR art. 17 request 2026-118").
    #[arg(long)]
    reason: String,
    /// Count what would be erased; change nothing.
    #[arg(long)]
    dry_run: bool,
}

pub async fn erase(a: EraseArgs) -> anyhow::Result<()> {
    let req = pb::EraseSubjectRequest {
        session_ids: a.sessions,
        agent_id: a.agent.unwrap_or_default(),
        task_id: a.task.unwrap_or_default(),
        reason: a.reason,
        dry_run: a.dry_run,
        ..Default::default()
    };
    let r = a.args.client().await?.erase_subject(req).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&r, "EraseSubjectResponse")?);
    }
    let verb = if r.dry_run { "would erase" } else { "erased" };
    outln!("{verb} {} session(s): {}", r.session_ids.len(), r.session_ids.join(" "));
    outln!(
        "events {}  artifacts {}  embeddings {}  packs {} (chunks {})  manifests {}  reports {}",
        r.events,
        r.artifacts,
        r.embeddings,
        r.packs,
        r.pack_chunks,
        r.manifests,
        r.reports
    );
    outln!(
        "memory: facts {}  segments {}  turns {}  topics {} (rebuilt by the worker)",
        r.memory_facts,
        r.memory_segments,
        r.memory_turns,
        r.memory_topics
    );
    if !r.dry_run {
        outln!("erasure {} (log seq {})", r.erasure_id, r.seq);
    }
    Ok(())
}
