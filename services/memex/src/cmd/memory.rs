//! MemoryService commands: `memex memory quote|facts|expand|when|recall|topics|fact|status`.
//! Every quote, segment, summary line and fact is printed with its pointer `session:first-last`
//! (what `memex read` takes), or its seqs where the server could not place it in the full view.
use memex_proto::v1 as pb;

use super::out::{self, ClientArgs};

#[derive(clap::Subcommand, Debug)]
pub enum MemoryCommand {
    /// Search segments and tool output for a quote, with the facts read there (FindQuote).
    Quote(QuoteArgs),
    /// Structured facts: what held, what changed, what is current (QueryFacts).
    Facts(Box<FactsArgs>),
    /// A topic at a depth: its summary, its segments' summaries, or its full text (ExpandTopic).
    Expand(ExpandArgs),
    /// Search within a time range, with the facts completed in it (RememberWhen).
    When(WhenArgs),
    /// Every topic summary of the namespace within a token budget: a bird's-eye view (RecallAll).
    Recall {
        #[command(flatten)]
        args: ClientArgs,
        /// Token budget of the text (server default 30,000, at most 100,000).
        #[arg(long)]
        max_tokens: Option<u32>,
    },
    /// The namespace's topics, all pages unless --limit (ListTopics).
    Topics {
        #[command(flatten)]
        args: ClientArgs,
        /// Only topics whose tag or aliases contain this.
        #[arg(long, default_value = "")]
        contains: String,
        /// At most this many topics.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// One fact and its supersession chain, oldest first (GetFact).
    Fact {
        #[command(flatten)]
        args: ClientArgs,
        fact_id: String,
    },
    /// How far the memory worker has got, and what the memory holds (GetMemoryStatus).
    Status {
        #[command(flatten)]
        args: ClientArgs,
    },
    /// Forget the derived memory of namespaces (on the database, like `memex reindex`): turns,
    /// segments, facts and topics are read again from the events by the running workers.
    /// Readers' working sets stay.
    Rebuild {
        #[command(flatten)]
        config: memex_server::flags::ConfigArgs,
        /// Namespaces to rebuild (default: all).
        #[arg(long = "namespace", short = 'n')]
        namespaces: Vec<String>,
    },
}

#[derive(clap::Args, Debug)]
pub struct QuoteArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// Words to look for.
    #[arg(required = true, num_args = 1..)]
    pub query: Vec<String>,
    /// Quotes to return (1..100, server default 10).
    #[arg(long, short = 'k')]
    pub limit: Option<u32>,
    /// Only these sessions (repeatable; any of them).
    #[arg(long = "session")]
    pub sessions: Vec<String>,
    /// An agent id: segments already shown to it are left out, and those shown are remembered
    /// (needs a write key).
    #[arg(long, default_value = "")]
    pub reader: String,
    /// Forget what --reader was shown before this search.
    #[arg(long, requires = "reader")]
    pub reset_presented: bool,
}

#[derive(clap::Args, Debug)]
pub struct FactsArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// Subject contains this (case-insensitive), e.g. a file, test or package name.
    #[arg(long, default_value = "")]
    pub subject: String,
    /// A verb; its synonyms match too (e.g. broke: failed).
    #[arg(long, default_value = "")]
    pub verb: String,
    /// active, completed, planned, abandoned or recurring.
    #[arg(long, default_value = "")]
    pub status: String,
    /// Object contains this (case-insensitive).
    #[arg(long = "object", default_value = "")]
    pub object_contains: String,
    /// file, command, test, package, error, decision, constraint, preference, correction,
    /// personal, experience or world.
    #[arg(long = "type", default_value = "")]
    pub fact_type: String,
    /// What held at this time (RFC 3339): facts from before it, less those superseded by then.
    #[arg(long)]
    pub as_of: Option<chrono::DateTime<chrono::Utc>>,
    /// Also superseded facts (marked as such).
    #[arg(long)]
    pub include_superseded: bool,
    /// Rank by similarity to this question (else newest first).
    #[arg(long, default_value = "")]
    pub question: String,
    /// Facts to return (1..500, server default 50).
    #[arg(long, short = 'k')]
    pub limit: Option<u32>,
    /// Only these sessions (repeatable; any of them).
    #[arg(long = "session")]
    pub sessions: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct ExpandArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// A topic's tag or one of its aliases (`memex memory topics` lists them).
    pub tag: String,
    /// summary, segments or full (server default summary).
    #[arg(long, default_value = "")]
    pub depth: String,
    /// An agent id whose working set takes the topic (needs a write key); colder topics are
    /// paged out to make room.
    #[arg(long, default_value = "")]
    pub reader: String,
    /// Most tokens of text (server default 2,000 at segments, 8,000 at full).
    #[arg(long)]
    pub max_tokens: Option<u32>,
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("range").required(true).args(["preset", "from"])))]
pub struct WhenArgs {
    #[command(flatten)]
    pub args: ClientArgs,
    /// Words to look for.
    #[arg(required = true, num_args = 1..)]
    pub query: Vec<String>,
    /// today, yesterday, last_7_days, last_30_days, last_90_days or last_365_days.
    #[arg(long)]
    pub preset: Option<String>,
    /// Start of the range (RFC 3339).
    #[arg(long)]
    pub from: Option<chrono::DateTime<chrono::Utc>>,
    /// End of the range (RFC 3339; default now).
    #[arg(long, requires = "from")]
    pub to: Option<chrono::DateTime<chrono::Utc>>,
    /// Quotes to return (1..100, server default 10).
    #[arg(long, short = 'k')]
    pub limit: Option<u32>,
    /// An agent id: segments already shown to it are left out (needs a write key).
    #[arg(long, default_value = "")]
    pub reader: String,
    /// Only these sessions (repeatable; any of them).
    #[arg(long = "session")]
    pub sessions: Vec<String>,
}

async fn rebuild(config: memex_server::flags::ConfigArgs, names: Vec<String>) -> anyhow::Result<()> {
    let config = config.load()?;
    let store = memex_server::connect_store(&config)
        .await
        .map_err(|e| anyhow::anyhow!("connecting to the database (make run sets it up): {e}"))?;
    store.migrate().await?;
    let namespaces = if names.is_empty() {
        store.list_namespaces().await?
    } else {
        let mut v = Vec::new();
        for n in &names {
            v.push(store.namespace(n).await?);
        }
        v
    };
    for ns in &namespaces {
        memex_recall::reset_namespace(store.pool(), ns.id).await?;
        eprintln!("{}: memory forgotten; the memory workers read it again from the events", ns.name);
    }
    Ok(())
}

pub async fn memory(cmd: MemoryCommand) -> anyhow::Result<()> {
    match cmd {
        MemoryCommand::Quote(a) => quote(a).await,
        MemoryCommand::Facts(a) => facts(*a).await,
        MemoryCommand::Expand(a) => expand(a).await,
        MemoryCommand::When(a) => when(a).await,
        MemoryCommand::Recall { args, max_tokens } => {
            let r = args.client().await?.recall_all(max_tokens.unwrap_or(0)).await?;
            if args.json() {
                return out::print_json(&out::to_json(&r, "RecallAllResponse")?);
            }
            outln!("{} topics, {} tokens ({} left out for the budget)", r.topics.len(), r.tokens, r.omitted_topics);
            // The text renders each topic's summary with its pointers: list the topics only.
            for t in &r.topics {
                outln!("  {}", topic_line(t));
            }
            text_block(&r.text)
        }
        MemoryCommand::Topics { args, contains, limit } => {
            let r = args.client().await?.topics(&contains, limit).await?;
            if args.json() {
                return out::print_json(&out::to_json(&r, "ListTopicsResponse")?);
            }
            for t in &r.topics {
                out!("{}", topic_text(t));
            }
            if r.topics.is_empty() {
                eprintln!("no topics");
            } else if r.topics.len() < usize::try_from(r.total).unwrap_or(usize::MAX) {
                eprintln!("({} of {} topics)", r.topics.len(), r.total);
            }
            Ok(())
        }
        MemoryCommand::Fact { args, fact_id } => {
            let r = args.client().await?.get_fact(&fact_id).await?;
            if args.json() {
                return out::print_json(&out::to_json(&r, "GetFactResponse")?);
            }
            if let Some(f) = &r.fact {
                out!("{}", fact_text(f, 0));
            }
            outln!("chain, oldest first:");
            for (i, f) in r.chain.iter().enumerate() {
                let this = if r.fact.as_ref().is_some_and(|x| x.id == f.id) { "  ← this fact" } else { "" };
                outln!("  {}. {}{this}", i + 1, fact_line(f));
            }
            Ok(())
        }
        // The operator's command, over any namespace: `Tenant::All`.
        MemoryCommand::Rebuild { config, namespaces } => {
            memex_store::tenant::scope(memex_store::Tenant::All, rebuild(config, namespaces)).await
        }
        MemoryCommand::Status { args } => {
            let s = args.client().await?.memory_status().await?;
            if args.json() {
                return out::print_json(&out::to_json(&s, "GetMemoryStatusResponse")?);
            }
            outln!(
                "interpreter {}  lag {} events  {} sessions  {} segments  {} facts  {} topics ({})",
                s.interpreter,
                s.lag_events,
                s.sessions,
                s.segments,
                s.facts,
                s.topics,
                if s.topics_current { "current" } else { "awaiting a rebuild" }
            );
            Ok(())
        }
    }
}

async fn quote(a: QuoteArgs) -> anyhow::Result<()> {
    let req = pb::FindQuoteRequest {
        query: a.query.join(" "),
        limit: a.limit.unwrap_or(0),
        session_ids: a.sessions.clone(),
        reader: a.reader.clone(),
        reset_presented: a.reset_presented,
        ..Default::default()
    };
    let r = a.args.client().await?.find_quote(req).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&r, "FindQuoteResponse")?);
    }
    quotes(&r.quotes)?;
    if r.quotes.is_empty() {
        eprintln!("no quotes");
    }
    if r.already_presented > 0 {
        eprintln!("({} segments left out: already shown to {})", r.already_presented, a.reader);
    }
    if !r.vectors_used {
        eprintln!("(ranked by BM25 alone: no query vector)");
    }
    Ok(())
}

async fn facts(a: FactsArgs) -> anyhow::Result<()> {
    let req = pb::QueryFactsRequest {
        subject: a.subject.clone(),
        verb: a.verb.clone(),
        status: a.status.clone(),
        object_contains: a.object_contains.clone(),
        fact_type: a.fact_type.clone(),
        as_of: a.as_of.as_ref().map(out::timestamp),
        include_superseded: a.include_superseded,
        question: a.question.clone(),
        limit: a.limit.unwrap_or(0),
        session_ids: a.sessions.clone(),
        ..Default::default()
    };
    let r = a.args.client().await?.query_facts(req).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&r, "QueryFactsResponse")?);
    }
    for f in &r.facts {
        out!("{}", fact_text(f, 0));
    }
    if r.facts.is_empty() {
        eprintln!("no facts");
    }
    if !a.verb.is_empty() && !r.expanded_verbs.is_empty() {
        eprintln!("(verbs matched: {})", r.expanded_verbs.join(", "));
    }
    Ok(())
}

async fn expand(a: ExpandArgs) -> anyhow::Result<()> {
    let req = pb::ExpandTopicRequest {
        tag: a.tag.clone(),
        depth: a.depth.clone(),
        reader: a.reader.clone(),
        max_tokens: a.max_tokens.unwrap_or(0),
        ..Default::default()
    };
    let r = a.args.client().await?.expand_topic(req).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&r, "ExpandTopicResponse")?);
    }
    let tag = r.topic.as_ref().map_or(a.tag.as_str(), |t| t.tag.as_str());
    outln!(
        "topic {tag}  depth {}  {} tokens  {} segments ({} left out for the limit)",
        r.depth,
        r.tokens,
        r.segments.len(),
        r.omitted_segments
    );
    if !a.reader.is_empty() {
        outln!("working set of {}: {}/{} tokens", a.reader, r.working_set_tokens, r.working_set_budget);
        for p in &r.paged_out {
            outln!("  paged out {} ({}, {} tokens freed)", p.tag, p.action, p.freed_tokens);
        }
    }
    for s in &r.segments {
        outln!("  {}", segment_line(s));
    }
    text_block(&r.text)
}

async fn when(a: WhenArgs) -> anyhow::Result<()> {
    let req = pb::RememberWhenRequest {
        query: a.query.join(" "),
        preset: a.preset.clone().unwrap_or_default(),
        from: a.from.as_ref().map(out::timestamp),
        to: a.to.as_ref().map(out::timestamp),
        limit: a.limit.unwrap_or(0),
        reader: a.reader.clone(),
        session_ids: a.sessions.clone(),
        ..Default::default()
    };
    let r = a.args.client().await?.remember_when(req).await?;
    if a.args.json() {
        return out::print_json(&out::to_json(&r, "RememberWhenResponse")?);
    }
    outln!("from {} to {}", out::time(&r.from), out::time(&r.to));
    quotes(&r.quotes)?;
    if r.quotes.is_empty() {
        eprintln!("no quotes");
    }
    if !r.facts_in_window.is_empty() {
        outln!("facts completed in the range:");
        for f in &r.facts_in_window {
            out!("{}", fact_text(f, 2));
        }
    }
    Ok(())
}

/// The quotes of FindQuote or RememberWhen, numbered, each with its segment and facts.
fn quotes(qs: &[pb::Quote]) -> anyhow::Result<()> {
    for (i, q) in qs.iter().enumerate() {
        let session = q.segment.as_ref().map_or("", |s| s.session_id.as_str());
        let superseded = if q.superseded { "  [older session, superseded]" } else { "" };
        outln!(
            "{}. {}  {}  score {:.4}{superseded}",
            i + 1,
            at(&q.hit_pointer, session, q.hit_seq, q.hit_seq),
            q.match_type,
            q.score
        );
        if !q.excerpt.trim().is_empty() {
            outln!("    {}", out::one_line(&q.excerpt, 160));
        }
        if let Some(s) = &q.segment {
            outln!("    segment {}", segment_line(s));
            for l in &s.summary {
                outln!("      {}", summary_line(l));
            }
        }
        for f in &q.facts {
            out!("{}", fact_text(f, 4));
        }
    }
    Ok(())
}

/// A pointer as the server gave it, else the seqs it names (`s1 seq 4-9`).
fn at(pointer: &str, session: &str, first: u64, last: u64) -> String {
    match (pointer.is_empty(), first == last) {
        (false, _) => pointer.to_owned(),
        (true, true) => format!("{session} seq {first}"),
        (true, false) => format!("{session} seq {first}-{last}"),
    }
}

/// `s1:41-62  test parser::valid_header passed "2 passed; 0 failed"  [completed]  2026-…  fact ID`.
fn fact_line(f: &pb::Fact) -> String {
    let object = if f.object.is_empty() { String::new() } else { format!(" {:?}", out::one_line(&f.object, 80)) };
    let superseded = if f.superseded_by.is_empty() {
        String::new()
    } else {
        format!("  superseded by {} at {}", f.superseded_by, out::time(&f.superseded_at))
    };
    format!(
        "{}  {} {} {}{object}  [{}]  {}  fact {}{superseded}",
        at(&f.pointer, &f.session_id, f.first_seq, f.last_seq),
        f.fact_type,
        f.subject,
        f.verb,
        f.status,
        out::time(&f.when),
        f.id
    )
}

/// A fact's line, then its sentence (the source's words), indented by `pad`.
fn fact_text(f: &pb::Fact, pad: usize) -> String {
    let mut s = format!("{:pad$}{}\n", "", fact_line(f));
    if !f.what.trim().is_empty() {
        s.push_str(&format!("{:pad$}    {}\n", "", out::one_line(&f.what, 160)));
    }
    s
}

/// `s1:12-40  parser.rs [parser.rs, cargo]  4 turns  2026-…`.
fn segment_line(s: &pb::Segment) -> String {
    let open = if s.closed { "" } else { "  (open)" };
    format!(
        "{}  {} [{}]  {} turns  {}{open}",
        at(&s.pointer, &s.session_id, s.first_seq, s.last_seq),
        s.primary_tag,
        s.tags.join(", "),
        s.turns,
        out::time(&s.start_time)
    )
}

fn summary_line(l: &pb::SummaryLine) -> String {
    let at = if l.pointer.is_empty() { format!("seq {}", l.seq) } else { l.pointer.clone() };
    format!("{at}  {}", out::one_line(&l.text, 160))
}

/// `parser.rs (also parser)  3 segments, 9 turns, 1 sessions, 6 facts  FIRST – LAST  [cover]`.
fn topic_line(t: &pb::TopicInfo) -> String {
    let mut flags = Vec::new();
    if t.in_cover {
        flags.push("cover".to_owned());
    }
    if t.broad {
        flags.push("broad".to_owned());
    }
    if !t.parent.is_empty() {
        flags.push(format!("in {}", t.parent));
    }
    let flags = if flags.is_empty() { String::new() } else { format!("  [{}]", flags.join(", ")) };
    let aliases: Vec<&str> = t.aliases.iter().map(String::as_str).filter(|a| *a != t.tag).collect();
    let aliases = if aliases.is_empty() { String::new() } else { format!(" (also {})", aliases.join(", ")) };
    format!(
        "{}{aliases}  {} segments, {} turns, {} sessions, {} facts  {} – {}{flags}",
        t.tag,
        t.segments,
        t.turns,
        t.sessions,
        t.facts,
        out::time(&t.first_time),
        out::time(&t.last_time)
    )
}

/// A topic's line, its description, and its summary lines with their pointers.
fn topic_text(t: &pb::TopicInfo) -> String {
    let mut s = format!("{}\n", topic_line(t));
    if !t.description.trim().is_empty() {
        s.push_str(&format!("    {}\n", out::one_line(&t.description, 160)));
    }
    for l in &t.summary {
        s.push_str(&format!("    {}\n", summary_line(l)));
    }
    s
}

/// The answer's text (it cites its own pointers), after a rule.
fn text_block(text: &str) -> anyhow::Result<()> {
    outln!("──── text ────");
    out!("{text}");
    if !text.ends_with('\n') {
        outln!();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unplaced_item_is_cited_by_its_seqs() {
        assert_eq!(at("s1:4-9", "s1", 2, 3), "s1:4-9");
        assert_eq!(at("", "s1", 2, 3), "s1 seq 2-3");
        assert_eq!(at("", "s1", 2, 2), "s1 seq 2");
        let f = pb::Fact {
            id: "f1".into(),
            fact_type: "test".into(),
            subject: "parser".into(),
            verb: "passed".into(),
            status: "completed".into(),
            session_id: "s1".into(),
            pointer: "s1:7-9".into(),
            superseded_by: "f2".into(),
            ..Default::default()
        };
        let line = fact_line(&f);
        assert!(line.starts_with("s1:7-9  test parser passed  [completed]"), "{line}");
        assert!(line.ends_with("fact f1  superseded by f2 at -"), "{line}");
    }
}
