//! TaskService commands: `memex task get|update|history`, `memex delegate`, `memex report`,
//! `memex watch-reports`.
use anyhow::Context as _;
use memex_client::{format_pointer, parse_pointer};
use memex_proto::v1 as pb;

use super::out::{self, ClientArgs};

#[derive(clap::Subcommand, Debug)]
pub enum TaskCommand {
    /// A version of a task's state (default: the current one).
    Get {
        #[command(flatten)]
        args: ClientArgs,
        task: String,
        #[arg(long, default_value_t = 0)]
        version: u64,
    },
    /// Write the next version of a task's state (compare-and-swap on --expected-version; exit
    /// status 6 when another writer got there first).
    Update(Box<UpdateArgs>),
    /// Every version of a task's state, newest first.
    History {
        #[command(flatten)]
        args: ClientArgs,
        task: String,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
}

#[derive(clap::Args, Debug)]
pub struct UpdateArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    pub task: String,
    /// The version this update is based on (0 creates the task).
    #[arg(long)]
    pub expected_version: u64,
    /// The whole state as JSON (`memex task get --format json`'s `state`); `-` reads stdin. The
    /// field flags below are added to it.
    #[arg(long)]
    pub state: Option<String>,
    #[arg(long = "goal")]
    pub goals: Vec<String>,
    #[arg(long = "constraint")]
    pub constraints: Vec<String>,
    #[arg(long = "open-loop")]
    pub open_loops: Vec<String>,
    #[arg(long = "next-action")]
    pub next_actions: Vec<String>,
    #[arg(long = "premise")]
    pub premises: Vec<String>,
    /// event:ID, blake3:HEX or span:SESSION:FIRST-LAST (repeatable).
    #[arg(long = "pointer")]
    pub pointers: Vec<String>,
    #[arg(long, value_parser = ["planning", "execution", "evaluation"])]
    pub phase: Option<String>,
    /// The task ends with a self-assessment.
    #[arg(long)]
    pub self_assessment: bool,
    #[arg(long, default_value = "")]
    pub author: String,
    #[arg(long, default_value = "")]
    pub tokenizer: String,
}

fn pointers(texts: &[String]) -> anyhow::Result<Vec<pb::Pointer>> {
    Ok(texts.iter().map(|p| parse_pointer(p)).collect::<Result<_, _>>()?)
}

fn read_arg(value: &str) -> anyhow::Result<String> {
    if value == "-" {
        return std::io::read_to_string(std::io::stdin()).context("cannot read stdin");
    }
    match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("cannot read {path}")),
        None => Ok(value.to_owned()),
    }
}

fn state(u: &UpdateArgs) -> anyhow::Result<pb::TaskState> {
    let mut s: pb::TaskState = match &u.state {
        Some(v) => out::from_json(&read_arg(v)?, "TaskState").context("--state")?,
        None => pb::TaskState::default(),
    };
    s.goals.extend(u.goals.iter().cloned());
    s.constraints.extend(u.constraints.iter().cloned());
    s.open_loops.extend(u.open_loops.iter().cloned());
    s.next_actions.extend(u.next_actions.iter().cloned());
    s.premises.extend(u.premises.iter().cloned());
    s.key_pointers.extend(pointers(&u.pointers)?);
    match u.phase.as_deref() {
        Some("planning") => s.set_phase(pb::Phase::Planning),
        Some("execution") => s.set_phase(pb::Phase::Execution),
        Some("evaluation") => s.set_phase(pb::Phase::Evaluation),
        _ => {}
    }
    s.self_assessment |= u.self_assessment;
    Ok(s)
}

pub async fn task(cmd: TaskCommand) -> anyhow::Result<()> {
    match cmd {
        TaskCommand::Get { args, task, version } => {
            let v = args.client().await?.get_task_state(&task, version).await?;
            show_version(&args, &v, true)
        }
        TaskCommand::Update(u) => {
            let req = pb::UpdateTaskStateRequest {
                task_id: u.task.clone(),
                expected_version: u.expected_version,
                state: Some(state(&u)?),
                author: u.author.clone(),
                tokenizer: u.tokenizer.clone(),
                ..Default::default()
            };
            let v = u.args.client().await?.update_task_state(req).await?;
            show_version(&u.args, &v, false)
        }
        TaskCommand::History { args, task, limit } => {
            let versions = args.client().await?.task_history(&task, limit).await?;
            for v in &versions {
                if args.json() {
                    out::print_json(&out::to_json(v, "TaskStateVersion")?)?;
                } else {
                    outln!("{}", version_line(v));
                }
            }
            Ok(())
        }
    }
}

/// `task t1 version 3  240 tokens (o200k_base)  by planner  2026-…`.
fn version_line(v: &pb::TaskStateVersion) -> String {
    let author = if v.author.is_empty() { String::new() } else { format!("  by {}", v.author) };
    let phase = v
        .state
        .as_ref()
        .map_or_else(String::new, |s| format!("  phase {}", out::enum_name(s.phase().as_str_name(), "PHASE_")));
    format!(
        "task {} version {}  {} tokens ({}){phase}{author}  {}",
        v.task_id,
        v.version,
        v.tokens,
        v.tokenizer,
        out::time(&v.created_at)
    )
}

fn show_version(args: &ClientArgs, v: &pb::TaskStateVersion, card: bool) -> anyhow::Result<()> {
    if args.json() {
        return out::print_json(&out::to_json(v, "TaskStateVersion")?);
    }
    outln!("{}", version_line(v));
    if card {
        out!("{}", out::indent(&v.rendered, 2));
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct DelegateArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// The planner's task (it must have a task state).
    #[arg(long)]
    pub parent: String,
    #[arg(long)]
    pub objective: String,
    /// The child task's id (default: `<parent>/<uuid>`).
    #[arg(long)]
    pub task: Option<String>,
    #[arg(long = "constraint")]
    pub constraints: Vec<String>,
    #[arg(long = "accept")]
    pub acceptance_criteria: Vec<String>,
    /// event:ID, blake3:HEX or span:SESSION:FIRST-LAST (repeatable; each must resolve).
    #[arg(long = "pointer")]
    pub pointers: Vec<String>,
    #[arg(long, default_value = "")]
    pub plan_node: String,
    /// The planner's session.
    #[arg(long, default_value = "")]
    pub session: String,
}

pub async fn delegate(a: DelegateArgs) -> anyhow::Result<()> {
    let req = pb::DelegateRequest {
        parent_task_id: a.parent.clone(),
        task_id: a.task.clone().unwrap_or_default(),
        objective: a.objective.clone(),
        constraints: a.constraints.clone(),
        acceptance_criteria: a.acceptance_criteria.clone(),
        pointers: pointers(&a.pointers)?,
        plan_node_ref: a.plan_node.clone(),
        delegated_by_session_id: a.session.clone(),
        ..Default::default()
    };
    let d = a.args.client().await?.delegate(req).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&d, "Delegation")?);
    }
    outln!("delegated {} (parent {}): {}", d.task_id, d.parent_task_id, d.objective);
    for p in &d.pointers {
        outln!("  pointer {}", format_pointer(p));
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// The executor's task.
    #[arg(long)]
    pub task: String,
    /// The executor's session (the report becomes a `report` event there).
    #[arg(long)]
    pub session: String,
    #[arg(long, value_parser = ["succeeded", "failed", "partial", "blocked"])]
    pub status: String,
    /// At most 8 KiB; `-` reads stdin, `@FILE` a file.
    #[arg(long)]
    pub summary: String,
    /// At least one: event:ID, blake3:HEX or span:SESSION:FIRST-LAST (repeatable).
    #[arg(long = "pointer")]
    pub pointers: Vec<String>,
    /// A client-chosen UUID: a retried report is recorded once.
    #[arg(long, default_value = "")]
    pub report_id: String,
}

pub async fn report(a: ReportArgs) -> anyhow::Result<()> {
    let req = pb::ReportRequest {
        task_id: a.task.clone(),
        session_id: a.session.clone(),
        status: a.status.clone(),
        summary: read_arg(&a.summary)?,
        pointers: pointers(&a.pointers)?,
        report_id: a.report_id.clone(),
        ..Default::default()
    };
    let r = a.args.client().await?.report(req).await?;
    show_report(&a.args, &r)
}

fn show_report(args: &ClientArgs, r: &pb::TaskReport) -> anyhow::Result<()> {
    if args.json() {
        return out::print_json(&out::to_json(r, "TaskReport")?);
    }
    let ptrs: Vec<String> = r.pointers.iter().map(format_pointer).collect();
    outln!(
        "report #{} {}  task {} (parent {})  {}  event {}\n  {}\n  pointers: {}",
        r.seq,
        r.status,
        r.task_id,
        if r.parent_task_id.is_empty() { "-" } else { &r.parent_task_id },
        out::time(&r.created_at),
        r.event_id,
        out::one_line(&r.summary, 200),
        ptrs.join(" ")
    );
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// The planner's task: its children's reports are shown.
    #[arg(long)]
    pub parent: String,
    /// Resume after this report seq (0: from the first).
    #[arg(long, default_value_t = 0)]
    pub after: u64,
}

/// `memex watch-reports`: past reports, then live ones until Ctrl-C (JSON: one line each).
pub async fn watch_reports(a: WatchArgs) -> anyhow::Result<()> {
    let mut reports = a.args.client().await?.watch_reports(&a.parent, a.after).await?;
    loop {
        let next = tokio::select! {
            r = reports.next() => r?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        match next {
            Some(r) => show_report(&a.args, &r)?,
            None => return Ok(()),
        }
    }
}
