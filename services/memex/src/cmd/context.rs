//! ContextService commands: `memex pack build|get`, `memex window`, `memex compact`,
//! `memex expand`.
use memex_client::line_pointer;
use memex_proto::v1 as pb;

use super::client::record;
use super::out::{self, ClientArgs};

#[derive(clap::Subcommand, Debug)]
pub enum PackCommand {
    /// Build, store and show the context pack for one turn of a session (BuildPack).
    Build(Box<BuildArgs>),
    /// A stored pack, exactly as it was built (GetPack).
    Get {
        #[command(flatten)]
        args: ClientArgs,
        pack_id: String,
        /// Only what went into the context (no per-block text, no candidate decisions).
        #[arg(long)]
        basic: bool,
        /// Text output: only the pack's text.
        #[arg(long)]
        text_only: bool,
    },
}

#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    #[arg(long)]
    pub session: String,
    /// The user's message of this turn.
    #[arg(long, short = 'm', default_value = "")]
    pub message: String,
    /// Default: the session's task.
    #[arg(long)]
    pub task: Option<String>,
    /// A system/policy prefix that lives outside the store.
    #[arg(long, default_value = "")]
    pub system: String,
    /// Total context budget in tokens (default: the server's).
    #[arg(long)]
    pub budget: Option<u32>,
    #[arg(long)]
    pub retrieval_budget: Option<u32>,
    #[arg(long)]
    pub tail_budget: Option<u32>,
    #[arg(long)]
    pub headroom: Option<u32>,
    /// Tokens of memory in the pack: the `<context-topics>` hint and the reader's working set
    /// (default 0: none).
    #[arg(long)]
    pub memory_budget: Option<u32>,
    /// Whose working set fills the memory block (default: the session).
    #[arg(long, default_value = "")]
    pub memory_reader: String,
    /// o200k_base or cl100k_base (default: the server's).
    #[arg(long, default_value = "")]
    pub tokenizer: String,
    /// solo, planner or executor (default: derived from the task).
    #[arg(long, value_parser = ["solo", "planner", "executor"])]
    pub role: Option<String>,
    /// Do not demote superseded items.
    #[arg(long)]
    pub historical: bool,
    /// A block that must be in the pack whole (repeatable): the pack is refused, naming the
    /// block and its budget, rather than built with it cut or left out.
    #[arg(long = "require", value_parser = ["system", "task_state", "memory"])]
    pub require: Vec<String>,
    /// The whole pack: each block's text and every candidate's decision.
    #[arg(long)]
    pub full: bool,
    /// Text output: only the pack's text.
    #[arg(long)]
    pub text_only: bool,
}

pub async fn pack(cmd: PackCommand) -> anyhow::Result<()> {
    match cmd {
        PackCommand::Build(b) => {
            let role = match b.role.as_deref() {
                Some("solo") => pb::Role::Solo,
                Some("planner") => pb::Role::Planner,
                Some("executor") => pb::Role::Executor,
                _ => pb::Role::Unspecified,
            };
            let req = pb::BuildPackRequest {
                session_id: b.session.clone(),
                task_id: b.task.clone().unwrap_or_default(),
                user_message: b.message.clone(),
                system_prompt: b.system.clone(),
                budgets: Some(pb::Budgets {
                    context: b.budget,
                    retrieval: b.retrieval_budget,
                    tail: b.tail_budget,
                    headroom: b.headroom,
                    memory: b.memory_budget,
                    ..Default::default()
                }),
                memory_reader: b.memory_reader.clone(),
                tokenizer: b.tokenizer.clone(),
                role: role as i32,
                historical: b.historical,
                view: if b.full { pb::PackView::Full } else { pb::PackView::Basic } as i32,
                required_blocks: b.require.clone(),
                ..Default::default()
            };
            let p = b.args.client().await?.build_pack(req).await?;
            show_pack(&b.args, &p, b.text_only)
        }
        PackCommand::Get { args, pack_id, basic, text_only } => {
            let view = if basic { pb::PackView::Basic } else { pb::PackView::Full };
            let p = args.client().await?.get_pack(&pack_id, view).await?;
            show_pack(&args, &p, text_only)
        }
    }
}

fn show_pack(args: &ClientArgs, p: &pb::Pack, text_only: bool) -> anyhow::Result<()> {
    if args.json() {
        return out::print_json(&out::to_json(p, "Pack")?);
    }
    if !text_only {
        out!("{}", pack_summary(p));
    }
    out!("{}", p.text);
    if !p.text.ends_with('\n') {
        outln!();
    }
    Ok(())
}

/// Everything about a pack but its text: header, blocks, items (with pointers), decisions.
fn pack_summary(p: &pb::Pack) -> String {
    let mut s = String::new();
    let budgets = p.budgets.unwrap_or_default();
    let role = out::enum_name(pb::Role::try_from(p.role).unwrap_or_default().as_str_name(), "ROLE_");
    s.push_str(&format!(
        "pack {}  session {}  task {}  {}/{} tokens ({})  role {role}  vectors {}\n",
        p.pack_id,
        p.session_id,
        if p.task_id.is_empty() { "-" } else { &p.task_id },
        p.tokens,
        budgets.context.unwrap_or(0),
        p.tokenizer,
        if p.vectors_used { "used" } else { "not used" },
    ));
    let blocks: Vec<String> = p.blocks.iter().map(|b| format!("{} {}/{}", b.kind, b.tokens, b.budget)).collect();
    s.push_str(&format!("blocks: {}\n", blocks.join("  ")));
    for i in &p.items {
        let at = i.lines.map_or_else(
            || format!("{} seq {}", i.session_id, i.seq),
            |l| line_pointer(&i.session_id, 1, l.first.into(), l.last.into()),
        );
        let tool = if i.tool_name.is_empty() { String::new() } else { format!(" {}", i.tool_name) };
        let excerpt = match (i.excerpt, i.artifact_first_line, i.artifact_last_line) {
            (_, Some(a), Some(b)) => format!("  artifact lines {a}-{b}"),
            (true, ..) => "  excerpt".to_owned(),
            _ => String::new(),
        };
        s.push_str(&format!(
            "  {:<9} {at}  {}{tool}  {} tokens  score {:.3}{excerpt}\n",
            i.block, i.kind, i.tokens, i.score
        ));
    }
    for o in &p.omitted {
        s.push_str(&format!("  {} block {}: needs {} tokens whole, budget {}\n", o.block, o.how, o.tokens, o.budget));
    }
    if !p.decisions.is_empty() {
        let included = p.decisions.iter().filter(|d| d.included).count();
        s.push_str(&format!("decisions: {} candidates, {included} included\n", p.decisions.len()));
        for d in p.decisions.iter().filter(|d| !d.included) {
            let score = d.parts.map_or(0.0, |p| p.score);
            s.push_str(&format!(
                "  left out {} seq {} {}: {} (score {score:.3})\n",
                d.session_id, d.seq, d.kind, d.reason
            ));
        }
    }
    s.push_str("──── text ────\n");
    s
}

#[derive(clap::Args, Debug)]
pub struct WindowArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    #[arg(long)]
    pub session: String,
    #[arg(long, default_value = "")]
    pub tokenizer: String,
}

pub async fn window(a: WindowArgs) -> anyhow::Result<()> {
    let w = a.args.client().await?.get_window(&a.session, &a.tokenizer).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&w, "Window")?);
    }
    outln!(
        "window of {}  version {}  {} tokens  {} events resident  {} manifests",
        w.session_id,
        w.version,
        w.tokens,
        w.events.len(),
        w.manifests.len()
    );
    for m in &w.manifests {
        out!("{}", manifest_text(m));
    }
    for e in &w.events {
        let tool = if e.tool_name.is_empty() { String::new() } else { format!(" {}", e.tool_name) };
        outln!("  seq {:>5}  {}{tool}  {}", e.seq, e.kind, e.event_id);
    }
    Ok(())
}

fn manifest_text(m: &pb::PointerManifest) -> String {
    let mut s = format!(
        "manifest {}  {} events, {} tokens evicted; stands in for them in {} tokens\n",
        m.id, m.evicted_events, m.evicted_tokens, m.tokens
    );
    for span in &m.spans {
        let lines = span.lines.map_or_else(String::new, |l| {
            format!("  lines {}", line_pointer(&m.session_id, 1, l.first.into(), l.last.into()))
        });
        s.push_str(&format!("  seqs {}-{}{lines}\n", span.first_seq, span.last_seq));
    }
    s.push_str(&out::indent(&m.rendered, 4));
    s
}

#[derive(clap::Args, Debug)]
pub struct CompactArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    #[arg(long)]
    pub session: String,
    /// The agent's window size (B_ctx) in tokens.
    #[arg(long)]
    pub budget: u32,
    /// Tokens to keep free: the window is brought within budget - headroom.
    #[arg(long, default_value_t = 0)]
    pub headroom: u32,
    /// The last this many turns are never evicted (server default 2).
    #[arg(long)]
    pub protected_turns: Option<u32>,
    /// Tokens of a system prompt outside the store (counted, never evicted).
    #[arg(long, default_value_t = 0)]
    pub system_tokens: u32,
    #[arg(long, default_value = "")]
    pub tokenizer: String,
}

pub async fn compact(a: CompactArgs) -> anyhow::Result<()> {
    let req = pb::CompactRequest {
        session_id: a.session.clone(),
        window_budget: a.budget,
        headroom: a.headroom,
        protected_turns: a.protected_turns,
        system_tokens: a.system_tokens,
        tokenizer: a.tokenizer.clone(),
        ..Default::default()
    };
    let r = a.args.client().await?.compact(req).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&r, "CompactResponse")?);
    }
    let verdict = if r.compacted { "compacted" } else { "not compacted" };
    let fits = if r.fits { "fits" } else { "does not fit" };
    outln!(
        "{verdict}: {} → {} tokens (target {}, {fits}); {} events evicted; window version {}",
        r.tokens_before,
        r.tokens_after,
        r.target,
        r.evicted_event_ids.len(),
        r.window_version
    );
    if !r.index_check.is_empty() {
        outln!("victims checked: {}", r.index_check);
    }
    if let Some(m) = &r.manifest {
        out!("{}", manifest_text(m));
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct ExpandArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    pub manifest_id: String,
}

/// `memex expand`: a manifest and the originals it evicted (text: the manifest, then the events
/// as JSON lines, the format `memex events` prints and `memex view` reads).
pub async fn expand(a: ExpandArgs) -> anyhow::Result<()> {
    let (manifest, events) = a.args.client().await?.expand_manifest_all(&a.manifest_id).await?;
    if a.args.json() {
        let events: Vec<serde_json::Value> =
            events.iter().map(|e| out::to_json(e, "Event")).collect::<anyhow::Result<_>>()?;
        return out::print_json(&serde_json::json!({
            "manifest": out::to_json(&manifest, "PointerManifest")?,
            "events": events,
        }));
    }
    out!("{}", manifest_text(&manifest));
    for e in events {
        outln!("{}", record(e).to_json_line());
    }
    Ok(())
}
