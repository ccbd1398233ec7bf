//! `memex handoff`: the handoff snapshot of a session (BuildSnapshot), every line cited.
use memex_proto::v1 as pb;

use super::out::{self, ClientArgs};

#[derive(clap::Args, Debug)]
pub struct HandoffArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// The session (default: the latest session of --agent, else of --task).
    #[arg(long)]
    pub session: Option<String>,
    /// The task whose state card leads (default: the session's task).
    #[arg(long)]
    pub task: Option<String>,
    /// Without --session: the agent whose latest session is meant.
    #[arg(long)]
    pub agent: Option<String>,
    /// Token budget (default: the server's, 4000).
    #[arg(long)]
    pub budget: Option<u32>,
    /// o200k_base or cl100k_base (default o200k_base).
    #[arg(long, default_value = "")]
    pub tokenizer: String,
    /// xml (`<state_snapshot>`) or markdown.
    #[arg(long, value_parser = ["xml", "markdown"], default_value = "xml")]
    pub layout: String,
    /// Tool rounds listed under recent actions (default 10).
    #[arg(long)]
    pub recent_actions: Option<u32>,
    /// Events shown raw at the end (default 6).
    #[arg(long)]
    pub tail_events: Option<u32>,
    /// Text output: only the snapshot's text (no item list).
    #[arg(long)]
    pub text_only: bool,
}

impl HandoffArgs {
    pub fn request(&self) -> pb::BuildSnapshotRequest {
        pb::BuildSnapshotRequest {
            session_id: self.session.clone().unwrap_or_default(),
            task_id: self.task.clone().unwrap_or_default(),
            agent_id: self.agent.clone().unwrap_or_default(),
            budget_tokens: self.budget.unwrap_or(0),
            tokenizer: self.tokenizer.clone(),
            format: layout(&self.layout) as i32,
            recent_actions: self.recent_actions,
            tail_events: self.tail_events,
            ..Default::default()
        }
    }
}

pub fn layout(name: &str) -> pb::SnapshotFormat {
    if name == "markdown" { pb::SnapshotFormat::Markdown } else { pb::SnapshotFormat::Xml }
}

pub async fn handoff(a: HandoffArgs) -> anyhow::Result<()> {
    let s = a.args.client().await?.build_snapshot(a.request()).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&s, "Snapshot")?);
    }
    if !a.text_only {
        let task =
            if s.task_id.is_empty() { "-".to_owned() } else { format!("{} v{}", s.task_id, s.task_state_version) };
        out!(
            "snapshot  session {}  task {task}  {}/{} tokens ({})  events 1-{} (memory read to {})\n",
            s.session_id,
            s.tokens,
            s.budget_tokens,
            s.tokenizer,
            s.head_seq,
            s.memory_seq
        );
        if !s.omitted.is_empty() {
            out!("omitted for the budget ({}):\n", s.omitted.len());
            for i in &s.omitted {
                let at = if i.pointer.is_empty() {
                    format!("seq {}-{}", i.first_seq, i.last_seq)
                } else {
                    i.pointer.clone()
                };
                let text: String = i.text.lines().next().unwrap_or("").chars().take(100).collect();
                out!("  {:<18} {at}  {text}\n", i.section);
            }
        }
    }
    out!("{}", s.text);
    Ok(())
}
