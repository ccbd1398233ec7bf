//! Client subcommands for a running server: sessions, append, events, artifacts, import.
use std::io::{BufRead, Write};

use anyhow::Context;
use memex_client::Conn;
use memex_event::{ArtifactRecord, EventRecord};
use memex_proto::v1 as pb;

use super::out::{self, ClientArgs};
use super::progress::Progress;

#[derive(clap::Subcommand, Debug)]
pub enum SessionCommand {
    /// Create a session; prints its id.
    Create {
        #[command(flatten)]
        args: ClientArgs,
        #[arg(long)]
        agent: String,
        #[arg(long)]
        task: Option<String>,
        #[arg(long)]
        parent: Option<String>,
    },
    /// Show a session.
    Get {
        #[command(flatten)]
        args: ClientArgs,
        id: String,
    },
    /// List sessions, newest first (JSON: one object per line).
    List {
        #[command(flatten)]
        args: ClientArgs,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        task: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

fn session_text(s: &pb::Session) -> String {
    let mut line = format!("{}  agent {}  {} events  {}", s.id, s.agent_id, s.event_count, out::time(&s.created_at));
    for (label, v) in [("task", &s.task_id), ("parent", &s.parent_session_id), ("source", &s.source_format)] {
        if !v.is_empty() {
            line.push_str(&format!("  {label} {v}"));
        }
    }
    if !s.source_file_name.is_empty() {
        line.push_str(&format!(" ({})", s.source_file_name));
    }
    line
}

fn print_session(args: &ClientArgs, s: &pb::Session) -> anyhow::Result<()> {
    if args.json() {
        out::print_json(&out::to_json(s, "Session")?)
    } else {
        outln!("{}", session_text(s));
        Ok(())
    }
}

pub async fn session(cmd: SessionCommand) -> anyhow::Result<()> {
    match cmd {
        SessionCommand::Create { args, agent, task, parent } => {
            let s = args
                .client()
                .await?
                .create_session(pb::CreateSessionRequest {
                    agent_id: agent,
                    task_id: task.unwrap_or_default(),
                    parent_session_id: parent.unwrap_or_default(),
                    ..Default::default()
                })
                .await?;
            if args.json() {
                print_session(&args, &s)?;
            } else {
                outln!("{}", s.id);
            }
        }
        SessionCommand::Get { args, id } => print_session(&args, &args.client().await?.get_session(&id).await?)?,
        SessionCommand::List { args, agent, task, limit } => {
            let page = args
                .client()
                .await?
                .list_sessions(pb::ListSessionsRequest {
                    agent_id: agent.unwrap_or_default(),
                    task_id: task.unwrap_or_default(),
                    page_size: limit,
                    ..Default::default()
                })
                .await?;
            for s in &page.sessions {
                print_session(&args, s)?;
            }
        }
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct AppendArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    #[arg(long)]
    pub session: String,
    /// Events per batch (each batch is atomic).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Send the batches on one StreamEvents stream instead of one AppendEvents call each.
    #[arg(long)]
    pub stream: bool,
    /// AppendEvents only: a retry with the same key and batch is answered with the first result
    /// (one batch only: the key names one batch).
    #[arg(long, conflicts_with = "stream")]
    pub idempotency_key: Option<String>,
}

/// One input line of `memex append`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InputLine {
    kind: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    agent_id: String,
    #[serde(default)]
    task_id: String,
    #[serde(default)]
    tool_name: String,
    #[serde(default)]
    tool_call_id: String,
    #[serde(default)]
    event_time: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
    #[serde(default)]
    media_type: String,
}

fn read_events(batch: usize) -> anyhow::Result<Vec<Vec<pb::EventInput>>> {
    let mut batches = vec![Vec::new()];
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let e: InputLine = serde_json::from_str(&line).with_context(|| format!("stdin:{}", i + 1))?;
        if batches.last().is_some_and(|b| b.len() >= batch.max(1)) {
            batches.push(Vec::new());
        }
        if let Some(b) = batches.last_mut() {
            b.push(pb::EventInput {
                kind: e.kind,
                content: e.content,
                agent_id: e.agent_id,
                task_id: e.task_id,
                tool_name: e.tool_name,
                tool_call_id: e.tool_call_id,
                event_time: e.event_time.map(|t| prost_types_ts(&t)),
                metadata_json: e.metadata.map(|m| m.to_string()).unwrap_or_default(),
                media_type: e.media_type,
            });
        }
    }
    batches.retain(|b| !b.is_empty());
    Ok(batches)
}

pub async fn append(a: AppendArgs) -> anyhow::Result<()> {
    let batches = read_events(a.batch)?;
    if a.idempotency_key.is_some() && batches.len() > 1 {
        anyhow::bail!("--idempotency-key names one batch; these events make {} (raise --batch)", batches.len());
    }
    let c = a.args.client().await?;
    if a.stream {
        let ack = c.stream_events(&a.session, batches).await?;
        if a.args.json() {
            return out::print_json(&out::to_json(&ack, "StreamEventsAck")?);
        }
        outln!("appended {} events in {} batches", ack.events_committed, ack.messages_committed);
        return Ok(());
    }
    for batch in batches {
        let r = c.append_events(&a.session, batch, a.idempotency_key.clone()).await?;
        if a.args.json() {
            out::print_json(&out::to_json(&r, "AppendEventsResponse")?)?;
        } else {
            let replayed = if r.replayed { " (replayed)" } else { "" };
            outln!("appended seqs {}..={}{replayed}", r.first_seq, r.last_seq);
        }
    }
    Ok(())
}

fn prost_types_ts(t: &chrono::DateTime<chrono::Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: t.timestamp(), nanos: t.timestamp_subsec_nanos() as i32 }
}

fn from_ts(t: &Option<prost_types::Timestamp>) -> Option<chrono::DateTime<chrono::Utc>> {
    t.as_ref().and_then(|t| chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).ok()?))
}

/// The JSON-lines record of a wire event.
pub fn record(e: pb::Event) -> EventRecord {
    let opt = |s: String| (!s.is_empty()).then_some(s);
    EventRecord {
        event_time: from_ts(&e.event_time),
        ingest_time: from_ts(&e.ingest_time),
        id: e.id,
        session_id: e.session_id,
        seq: e.seq,
        kind: e.kind,
        agent_id: opt(e.agent_id),
        task_id: opt(e.task_id),
        tool_name: opt(e.tool_name),
        tool_call_id: opt(e.tool_call_id),
        content: e.content,
        artifact: e.artifact.map(|a| ArtifactRecord { id: a.id, size: a.size, media_type: a.media_type }),
        metadata: opt(e.metadata_json).and_then(|m| serde_json::from_str(&m).ok()),
    }
}

#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[arg(long)]
    pub session: String,
    #[arg(long, default_value_t = 1)]
    pub from: u64,
    /// Last seq (inclusive); default: the end.
    #[arg(long)]
    pub to: Option<u64>,
}

pub async fn events(args: EventsArgs) -> anyhow::Result<()> {
    let c = args.conn.client().await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut token = String::new();
    loop {
        let page = c
            .get_events(pb::GetEventsRequest {
                session_id: args.session.clone(),
                from_seq: args.from,
                to_seq: args.to.unwrap_or(0),
                page_token: std::mem::take(&mut token),
                ..Default::default()
            })
            .await?;
        for e in page.events {
            writeln!(out, "{}", record(e).to_json_line())?;
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    out.flush()?;
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct ArtifactArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// `blake3:<64 hex>`.
    pub id: String,
}

pub async fn artifact(args: ArtifactArgs) -> anyhow::Result<()> {
    let c = args.conn.client().await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    c.get_artifact(&args.id, &mut out).await?;
    out.flush()?;
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// The trace file (Claude Code JSONL, Codex rollout, Gemini CLI session JSON, memex events),
    /// gzip'd or not; `-` reads stdin.
    pub file: String,
    /// The agent that produced it.
    #[arg(long, default_value = "imported")]
    pub agent: String,
    /// auto, claude, codex, gemini or memex.
    #[arg(long, default_value = "auto")]
    pub input_format: String,
    #[arg(long)]
    pub task: Option<String>,
    /// The file name stored with the session (its stem names the views); default: the file's
    /// name without `.gz` (the server's `trace.jsonl` for stdin).
    #[arg(long)]
    pub name: Option<String>,
    /// Refuse the trace at its first malformed line.
    #[arg(long)]
    pub strict: bool,
}

/// `memex import`: upload a trace; prints the new session id (diagnostics on stderr), or with
/// `--format json` the whole answer.
pub async fn import(a: ImportArgs) -> anyhow::Result<()> {
    let (name, raw) = super::input::read_all(&a.file)?;
    let file_name = a.name.clone().unwrap_or_else(|| if a.file == "-" { String::new() } else { name });
    let c = a.args.client().await?;
    let meta = pb::ImportTraceRequest {
        agent_id: a.agent.clone(),
        file_name: file_name.clone(),
        input_format: a.input_format.clone(),
        task_id: a.task.clone().unwrap_or_default(),
        strict: a.strict,
        ..Default::default()
    };
    let progress = Progress::bytes("import", raw.len() as u64);
    let total = raw.len() as u64;
    let p = progress.clone();
    let r = c
        .import_trace(meta, raw, move |sent| {
            p.set(sent);
            if sent == total {
                p.message("compiling on the server");
            }
        })
        .await;
    progress.finish();
    let r = r?;
    if a.args.json() {
        return out::print_json(&out::to_json(&r, "ImportTraceResponse")?);
    }
    let shown = if file_name.is_empty() { a.file.as_str() } else { file_name.as_str() };
    for d in &r.diagnostics {
        eprintln!("{shown}:{}:{}: {}", d.line, d.col, d.message);
    }
    if r.diagnostic_count as usize > r.diagnostics.len() {
        eprintln!("{shown}: {} more diagnostics", r.diagnostic_count as usize - r.diagnostics.len());
    }
    eprintln!("imported {} events ({} format, {} chain(s))", r.events, r.format, r.chains);
    outln!("{}", r.session.map(|s| s.id).unwrap_or_default());
    Ok(())
}
