//! Client subcommands for a running server: sessions, append, events, artifacts.
use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::Context;
use memex_client::Conn;
use memex_event::{ArtifactRecord, EventRecord};
use memex_proto::v1 as pb;

#[derive(clap::Subcommand, Debug)]
pub enum SessionCommand {
    /// Create a session; prints its id.
    Create {
        #[command(flatten)]
        conn: Conn,
        #[arg(long)]
        agent: String,
        #[arg(long)]
        task: Option<String>,
        #[arg(long)]
        parent: Option<String>,
    },
    /// Show a session as JSON.
    Get {
        #[command(flatten)]
        conn: Conn,
        id: String,
    },
    /// List sessions, newest first, one JSON object per line.
    List {
        #[command(flatten)]
        conn: Conn,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        task: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

fn session_json(s: &pb::Session) -> serde_json::Value {
    serde_json::json!({
        "id": s.id, "namespace": s.namespace, "agent_id": s.agent_id,
        "parent_session_id": s.parent_session_id, "task_id": s.task_id,
        "source_format": s.source_format, "event_count": s.event_count,
        "created_at": from_ts(&s.created_at).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
    })
}

pub async fn session(cmd: SessionCommand) -> anyhow::Result<()> {
    match cmd {
        SessionCommand::Create { conn, agent, task, parent } => {
            let mut c = conn.connect().await?;
            let s = c
                .sessions
                .create_session(pb::CreateSessionRequest {
                    namespace: conn.namespace.clone(),
                    agent_id: agent,
                    task_id: task.unwrap_or_default(),
                    parent_session_id: parent.unwrap_or_default(),
                    ..Default::default()
                })
                .await?
                .into_inner();
            println!("{}", s.id);
        }
        SessionCommand::Get { conn, id } => {
            let mut c = conn.connect().await?;
            let s = c
                .sessions
                .get_session(pb::GetSessionRequest { namespace: conn.namespace.clone(), session_id: id })
                .await?
                .into_inner();
            println!("{}", session_json(&s));
        }
        SessionCommand::List { conn, agent, task, limit } => {
            let mut c = conn.connect().await?;
            let page = c
                .sessions
                .list_sessions(pb::ListSessionsRequest {
                    namespace: conn.namespace.clone(),
                    agent_id: agent.unwrap_or_default(),
                    task_id: task.unwrap_or_default(),
                    page_size: limit,
                    ..Default::default()
                })
                .await?
                .into_inner();
            for s in &page.sessions {
                println!("{}", session_json(s));
            }
        }
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct AppendArgs {
    #[command(flatten)]
    pub conn: Conn,
    #[arg(long)]
    pub session: String,
    /// Events per AppendEvents call.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
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

pub async fn append(args: AppendArgs) -> anyhow::Result<()> {
    let mut c = args.conn.connect().await?;
    let stdin = std::io::stdin();
    let mut batch = Vec::new();
    let mut lines = stdin.lock().lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let line = line?;
        if !line.trim().is_empty() {
            let e: InputLine = serde_json::from_str(&line).with_context(|| format!("stdin:{}", i + 1))?;
            batch.push(pb::EventInput {
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
        if batch.len() >= args.batch || (lines.peek().is_none() && !batch.is_empty()) {
            let r = c
                .events
                .append_events(pb::AppendEventsRequest {
                    namespace: args.conn.namespace.clone(),
                    session_id: args.session.clone(),
                    events: std::mem::take(&mut batch),
                    idempotency_key: String::new(),
                })
                .await?
                .into_inner();
            println!("appended seqs {}..={}", r.first_seq, r.last_seq);
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
    let mut c = args.conn.connect().await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut token = String::new();
    loop {
        let page = c
            .events
            .get_events(pb::GetEventsRequest {
                namespace: args.conn.namespace.clone(),
                session_id: args.session.clone(),
                from_seq: args.from,
                to_seq: args.to.unwrap_or(0),
                page_token: std::mem::take(&mut token),
                ..Default::default()
            })
            .await?
            .into_inner();
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
    let mut c = args.conn.connect().await?;
    let mut stream = c
        .events
        .get_artifact(pb::GetArtifactRequest { namespace: args.conn.namespace.clone(), artifact_id: args.id })
        .await?
        .into_inner();
    let mut out = std::io::stdout().lock();
    while let Some(chunk) = stream.message().await? {
        out.write_all(&chunk.data)?;
    }
    out.flush()?;
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// The trace file (Claude Code JSONL, Codex rollout, Gemini CLI session JSON, memex events).
    pub file: PathBuf,
    /// The agent that produced it.
    #[arg(long, default_value = "imported")]
    pub agent: String,
    /// auto, claude, codex, gemini or memex.
    #[arg(long, default_value = "auto")]
    pub input_format: String,
    #[arg(long)]
    pub task: Option<String>,
    /// Refuse the trace at its first malformed line.
    #[arg(long)]
    pub strict: bool,
}

/// `memex import`: upload a trace; prints the new session id (diagnostics on stderr).
pub async fn import(args: ImportArgs) -> anyhow::Result<()> {
    let raw = std::fs::read(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
    let channel = args.conn.channel().await?;
    let mut views =
        memex_proto::v1::view_service_client::ViewServiceClient::with_interceptor(channel, args.conn.bearer()?);
    let file_name = args.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut msgs = vec![pb::ImportTraceRequest {
        namespace: args.conn.namespace.clone(),
        agent_id: args.agent,
        file_name: file_name.clone(),
        input_format: args.input_format,
        task_id: args.task.unwrap_or_default(),
        strict: args.strict,
        ..Default::default()
    }];
    msgs.extend(raw.chunks(1 << 20).map(|c| pb::ImportTraceRequest { chunk: c.to_vec(), ..Default::default() }));
    let r = views.import_trace(tokio_stream::iter(msgs)).await?.into_inner();
    for d in &r.diagnostics {
        eprintln!("{file_name}:{}:{}: {}", d.line, d.col, d.message);
    }
    eprintln!("imported {} events ({} format, {} chain(s))", r.events, r.format, r.chains);
    println!("{}", r.session.map(|s| s.id).unwrap_or_default());
    Ok(())
}
