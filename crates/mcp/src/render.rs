//! Answers as an LLM reads them: text first, every item with its pointer (`session:first-last`,
//! which `read_lines` dereferences), and the same as structured JSON for clients that parse.
use std::fmt::Write;

use memex_pointer::LineRange;
use memex_proto::v1 as pb;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use crate::args::pointer_text;

pub(crate) fn result(text: String, structured: Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(structured);
    r
}

/// `session:first-last` when the lines are known, else `session@seq` (a seq citation).
fn cite(session: &str, first: u64, last: u64, seq: u64) -> String {
    match (u32::try_from(first), u32::try_from(last)) {
        (Ok(f), Ok(l)) if f > 0 => match LineRange::new(f, l) {
            Some(r) => format!("{session}:{r}"),
            None => format!("{session}@{seq}"),
        },
        _ => format!("{session}@{seq}"),
    }
}

fn indent(out: &mut String, text: &str) {
    for line in text.lines() {
        let _ = writeln!(out, "   {line}");
    }
}

pub(crate) fn search(query: &str, r: pb::SearchResponse) -> CallToolResult {
    let mut out = format!(
        "{} hit(s) for {query:?} ({}). Read a hit's lines with read_lines(pointer); cite it as evidence by its event:ID.\n",
        r.hits.len(),
        if r.vectors_used { "words and meaning" } else { "words only" }
    );
    let mut hits = Vec::with_capacity(r.hits.len());
    for (i, h) in r.hits.iter().enumerate() {
        let pointer = cite(&h.session_id, h.first_line, h.last_line, h.seq);
        let score = h.score.as_ref().map(|s| s.fused).unwrap_or_default();
        let tool = if h.tool_name.is_empty() { String::new() } else { format!(" {}", h.tool_name) };
        let _ = writeln!(
            out,
            "{}. {pointer} [{}]{tool} event:{} (seq {}, score {score:.4})",
            i + 1,
            h.kind,
            h.event_id,
            h.seq
        );
        indent(&mut out, &h.text);
        hits.push(json!({
            "pointer": pointer, "evidence": format!("event:{}", h.event_id), "event_id": h.event_id,
            "session_id": h.session_id, "seq": h.seq,
            "kind": h.kind, "role": h.role, "tool_name": h.tool_name, "score": score, "text": h.text,
        }));
    }
    result(out, json!({ "hits": hits, "vectors_used": r.vectors_used }))
}

pub(crate) fn read_lines(pointer: &str, r: pb::ReadLinesResponse) -> CallToolResult {
    let mut out = format!("{pointer} (chain {}, {} lines in the full view)\n", r.chain, r.full_lines);
    for l in &r.lines {
        let _ = writeln!(out, "{:>6}  {}", l.number, l.text);
    }
    let lines: Vec<Value> =
        r.lines.iter().map(|l| json!({ "number": l.number, "text": l.text, "role": l.role, "kind": l.kind })).collect();
    result(out, json!({ "pointer": pointer, "chain": r.chain, "full_lines": r.full_lines, "lines": lines }))
}

pub(crate) fn pack(p: pb::Pack) -> CallToolResult {
    let mut out = format!(
        "pack {}: {} tokens ({}), task state version {}{}\nitems (read any with read_lines):\n",
        p.pack_id,
        p.tokens,
        p.tokenizer,
        p.task_state_version,
        if p.vectors_used { "" } else { ", ranked by words only" }
    );
    let mut items = Vec::with_capacity(p.items.len());
    for it in &p.items {
        let (first, last) = it.lines.as_ref().map(|l| (l.first.into(), l.last.into())).unwrap_or((0, 0));
        let pointer = cite(&it.session_id, first, last, it.seq);
        let artifact = match (it.artifact_first_line, it.artifact_last_line) {
            (Some(a), Some(b)) => format!(", artifact lines {a}-{b}"),
            _ => String::new(),
        };
        let _ = writeln!(out, "  {pointer} [{}] {} tokens ({}{artifact})", it.kind, it.tokens, it.block);
        items.push(json!({
            "pointer": pointer, "block": it.block, "event_id": it.event_id, "kind": it.kind,
            "tokens": it.tokens, "excerpt": it.excerpt,
            "artifact_lines": it.artifact_first_line.zip(it.artifact_last_line).map(|(a, b)| [a, b]),
        }));
    }
    let mut omitted = Vec::with_capacity(p.omitted.len());
    for o in &p.omitted {
        let _ = writeln!(out, "{} block {}: needs {} tokens whole, budget {}", o.block, o.how, o.tokens, o.budget);
        omitted.push(json!({ "block": o.block, "how": o.how, "tokens": o.tokens, "budget": o.budget }));
    }
    let _ = write!(out, "--- pack text ---\n{}", p.text);
    result(
        out,
        json!({
            "pack_id": p.pack_id, "session_id": p.session_id, "task_id": p.task_id, "tokens": p.tokens,
            "tokenizer": p.tokenizer, "vectors_used": p.vectors_used, "items": items, "omitted": omitted,
            "text": p.text,
        }),
    )
}

fn snapshot_item(i: &pb::SnapshotItem) -> Value {
    json!({
        "section": i.section, "label": i.label, "text": i.text, "pointer": i.pointer,
        "first_seq": i.first_seq, "last_seq": i.last_seq, "priority": i.priority,
    })
}

pub(crate) fn snapshot(s: pb::Snapshot) -> CallToolResult {
    let mut out = format!(
        "snapshot of session {}: {}/{} tokens ({}), events 1-{}",
        s.session_id, s.tokens, s.budget_tokens, s.tokenizer, s.head_seq
    );
    if !s.omitted.is_empty() {
        let _ = write!(out, "; {} entries left out for the budget (in structuredContent.omitted)", s.omitted.len());
    }
    let _ = write!(out, "\n{}", s.text);
    result(
        out,
        json!({
            "session_id": s.session_id, "task_id": s.task_id, "task_state_version": s.task_state_version,
            "tokens": s.tokens, "budget_tokens": s.budget_tokens, "tokenizer": s.tokenizer,
            "head_seq": s.head_seq, "memory_seq": s.memory_seq, "text": s.text,
            "items": s.items.iter().map(snapshot_item).collect::<Vec<_>>(),
            "omitted": s.omitted.iter().map(snapshot_item).collect::<Vec<_>>(),
        }),
    )
}

pub(crate) fn task_state(v: pb::TaskStateVersion) -> CallToolResult {
    let out = format!(
        "task {} version {} ({} tokens, by {})\n{}",
        v.task_id,
        v.version,
        v.tokens,
        if v.author.is_empty() { "-" } else { &v.author },
        v.rendered
    );
    let state = v.state.unwrap_or_default();
    let phase = match pb::Phase::try_from(state.phase) {
        Ok(pb::Phase::Execution) => "execution",
        Ok(pb::Phase::Evaluation) => "evaluation",
        _ => "planning",
    };
    let key_pointers: Vec<String> = state.key_pointers.iter().map(pointer_text).collect();
    result(
        out,
        json!({
            "task_id": v.task_id, "version": v.version, "tokens": v.tokens, "rendered": v.rendered,
            "state": {
                "goals": state.goals, "constraints": state.constraints, "open_loops": state.open_loops,
                "next_actions": state.next_actions, "premises": state.premises, "key_pointers": key_pointers,
                "phase": phase, "self_assessment": state.self_assessment,
            },
        }),
    )
}

pub(crate) fn report(r: pb::TaskReport) -> CallToolResult {
    let pointers: Vec<String> = r.pointers.iter().map(pointer_text).collect();
    let out = format!(
        "report {} ({}) recorded for task {} as event {} in session {} (report stream seq {}); pointers: {}",
        r.report_id,
        r.status,
        r.task_id,
        r.event_id,
        r.session_id,
        r.seq,
        pointers.join(", ")
    );
    result(
        out,
        json!({
            "report_id": r.report_id, "seq": r.seq, "task_id": r.task_id, "parent_task_id": r.parent_task_id,
            "session_id": r.session_id, "event_id": r.event_id, "status": r.status, "pointers": pointers,
        }),
    )
}

fn manifest_json(m: &pb::PointerManifest) -> Value {
    let spans: Vec<Value> = m
        .spans
        .iter()
        .map(|s| {
            let (first, last) = s.lines.as_ref().map(|l| (l.first.into(), l.last.into())).unwrap_or((0, 0));
            json!({
                "pointer": cite(&m.session_id, first, last, s.first_seq),
                "first_seq": s.first_seq, "last_seq": s.last_seq,
            })
        })
        .collect();
    json!({
        "id": m.id, "session_id": m.session_id, "evicted_events": m.evicted_events,
        "evicted_tokens": m.evicted_tokens, "spans": spans, "rendered": m.rendered,
    })
}

pub(crate) fn compact(r: pb::CompactResponse) -> CallToolResult {
    let mut out = if r.compacted {
        format!(
            "compacted: {} -> {} tokens (target {}, {}); {} event(s) evicted\n",
            r.tokens_before,
            r.tokens_after,
            r.target,
            if r.fits { "fits" } else { "still over" },
            r.evicted_event_ids.len()
        )
    } else {
        format!("nothing compacted: the window holds {} tokens (target {})\n", r.tokens_before, r.target)
    };
    let manifest = r.manifest.as_ref().map(manifest_json);
    if let Some(m) = &r.manifest {
        let _ = writeln!(out, "manifest {} (expand_manifest brings the events back):\n{}", m.id, m.rendered);
    }
    result(
        out,
        json!({
            "compacted": r.compacted, "tokens_before": r.tokens_before, "tokens_after": r.tokens_after,
            "target": r.target, "fits": r.fits, "window_version": r.window_version, "manifest": manifest,
            "evicted_event_ids": r.evicted_event_ids,
        }),
    )
}

pub(crate) fn expand(r: pb::ExpandManifestResponse) -> CallToolResult {
    let mut out = String::new();
    if let Some(m) = &r.manifest {
        let _ =
            writeln!(out, "manifest {} of session {}: {} event(s) on this page", m.id, m.session_id, r.events.len());
    }
    let mut events = Vec::with_capacity(r.events.len());
    for e in &r.events {
        let pointer = e
            .lines
            .as_ref()
            .map(|l| cite(&e.session_id, l.first_line.into(), l.last_line.into(), e.seq))
            .unwrap_or_else(|| format!("{}@{}", e.session_id, e.seq));
        let tool = if e.tool_name.is_empty() { String::new() } else { format!(" {}", e.tool_name) };
        let _ = writeln!(out, "{pointer} [{}]{tool} event:{}", e.kind, e.id);
        indent(&mut out, &e.content);
        events.push(json!({
            "pointer": pointer, "event_id": e.id, "seq": e.seq, "kind": e.kind, "tool_name": e.tool_name,
            "content": e.content,
        }));
    }
    if !r.next_page_token.is_empty() {
        let _ = writeln!(out, "more: call again with page_token {:?}", r.next_page_token);
    }
    result(
        out,
        json!({
            "manifest": r.manifest.as_ref().map(manifest_json), "events": events,
            "next_page_token": r.next_page_token,
        }),
    )
}

// --- memory -------------------------------------------------------------------------------

/// A memory item's pointer as the server gave it, else `session@seq` (the server could not place
/// its events in the full view).
fn at(pointer: &str, session: &str, seq: u64) -> String {
    if pointer.is_empty() { format!("{session}@{seq}") } else { pointer.to_owned() }
}

fn time(t: &Option<prost_types::Timestamp>) -> Value {
    t.as_ref().map_or(Value::Null, |t| Value::String(t.to_string()))
}

/// To the second: text is read, not parsed (the structured answer has the exact time).
fn time_text(t: &Option<prost_types::Timestamp>) -> String {
    t.as_ref().map_or_else(|| "-".to_owned(), |t| prost_types::Timestamp { seconds: t.seconds, nanos: 0 }.to_string())
}

fn fact_json(f: &pb::Fact) -> Value {
    json!({
        "id": f.id, "pointer": at(&f.pointer, &f.session_id, f.first_seq), "fact_type": f.fact_type,
        "subject": f.subject, "verb": f.verb, "object": f.object, "what": f.what, "who": f.who,
        "when": time(&f.when), "where": f.r#where, "why": f.why, "status": f.status,
        "session_id": f.session_id, "first_seq": f.first_seq, "last_seq": f.last_seq,
        "current": f.superseded_by.is_empty(), "superseded_by": f.superseded_by,
        "superseded_at": time(&f.superseded_at), "source": f.source,
    })
}

/// `s:54-61 [test] cargo test parser passed: test result: ok (completed, 2025-…) fact:ID`, then
/// its sentence, indented by `pad`.
fn fact_text(out: &mut String, f: &pb::Fact, pad: &str) {
    let object = if f.object.is_empty() { String::new() } else { format!(": {}", first_line(&f.object)) };
    let superseded = if f.superseded_by.is_empty() {
        String::new()
    } else {
        format!(" SUPERSEDED by fact:{} at {}", f.superseded_by, time_text(&f.superseded_at))
    };
    let _ = writeln!(
        out,
        "{pad}{} [{}] {} {}{object} ({}, {}) fact:{}{superseded}",
        at(&f.pointer, &f.session_id, f.first_seq),
        f.fact_type,
        f.subject,
        f.verb,
        f.status,
        time_text(&f.when),
        f.id
    );
    if !f.what.trim().is_empty() {
        let _ = writeln!(out, "{pad}   {}", first_line(&f.what));
    }
}

fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim()
}

fn summary_json(lines: &[pb::SummaryLine]) -> Vec<Value> {
    lines.iter().map(|l| json!({ "pointer": l.pointer, "seq": l.seq, "text": l.text })).collect()
}

fn summary_text(out: &mut String, lines: &[pb::SummaryLine], pad: &str) {
    for l in lines {
        let at = if l.pointer.is_empty() { format!("seq {}", l.seq) } else { l.pointer.clone() };
        let _ = writeln!(out, "{pad}{at} {}", first_line(&l.text));
    }
}

fn segment_json(s: &pb::Segment) -> Value {
    json!({
        "id": s.id, "pointer": at(&s.pointer, &s.session_id, s.first_seq), "session_id": s.session_id,
        "first_seq": s.first_seq, "last_seq": s.last_seq, "start_time": time(&s.start_time),
        "end_time": time(&s.end_time), "turns": s.turns, "tags": s.tags, "primary_tag": s.primary_tag,
        "closed": s.closed, "summary": summary_json(&s.summary),
    })
}

fn segment_line(s: &pb::Segment) -> String {
    format!(
        "{} ({}; {} turns from {}; tags {})",
        at(&s.pointer, &s.session_id, s.first_seq),
        s.primary_tag,
        s.turns,
        time_text(&s.start_time),
        s.tags.join(", ")
    )
}

fn topic_json(t: &pb::TopicInfo) -> Value {
    json!({
        "tag": t.tag, "aliases": t.aliases, "parent": t.parent, "segments": t.segments, "turns": t.turns,
        "sessions": t.sessions, "facts": t.facts, "first_time": time(&t.first_time),
        "last_time": time(&t.last_time), "broad": t.broad, "in_cover": t.in_cover,
        "description": t.description, "summary": summary_json(&t.summary), "summary_tokens": t.summary_tokens,
    })
}

fn topic_line(t: &pb::TopicInfo) -> String {
    let aliases: Vec<&str> = t.aliases.iter().map(String::as_str).filter(|a| *a != t.tag).collect();
    let aliases = if aliases.is_empty() { String::new() } else { format!(" (also {})", aliases.join(", ")) };
    let parent = if t.parent.is_empty() { String::new() } else { format!(", under {}", t.parent) };
    format!(
        "{}{aliases}: {} segment(s), {} turn(s), {} session(s), {} fact(s), {} to {}{parent}",
        t.tag,
        t.segments,
        t.turns,
        t.sessions,
        t.facts,
        time_text(&t.first_time),
        time_text(&t.last_time)
    )
}

fn quote_json(q: &pb::Quote) -> Value {
    let session = q.segment.as_ref().map_or("", |s| s.session_id.as_str());
    json!({
        "pointer": at(&q.hit_pointer, session, q.hit_seq), "match_type": q.match_type, "excerpt": q.excerpt,
        "score": q.score, "superseded": q.superseded, "segment": q.segment.as_ref().map(segment_json),
        "facts": q.facts.iter().map(fact_json).collect::<Vec<_>>(),
    })
}

fn quotes_text(out: &mut String, quotes: &[pb::Quote]) {
    for (i, q) in quotes.iter().enumerate() {
        let session = q.segment.as_ref().map_or("", |s| s.session_id.as_str());
        let older = if q.superseded { " [older session, superseded]" } else { "" };
        let _ = writeln!(
            out,
            "{}. {} [{}] score {:.4}{older}",
            i + 1,
            at(&q.hit_pointer, session, q.hit_seq),
            q.match_type,
            q.score
        );
        indent(out, &q.excerpt);
        if let Some(s) = &q.segment {
            let _ = writeln!(out, "   segment {}:", segment_line(s));
            summary_text(out, &s.summary, "     ");
        }
        if !q.facts.is_empty() {
            let _ = writeln!(out, "   facts:");
            for f in &q.facts {
                fact_text(out, f, "     ");
            }
        }
    }
}

pub(crate) fn find_quote(query: &str, r: pb::FindQuoteResponse) -> CallToolResult {
    let mut out = format!(
        "{} quote(s) for {query:?} ({}). Read a quote's exact lines with read_lines(pointer).\n",
        r.quotes.len(),
        if r.vectors_used { "words and meaning" } else { "words only" }
    );
    if r.already_presented > 0 {
        let _ = writeln!(out, "{} segment(s) left out: already shown to this reader.", r.already_presented);
    }
    quotes_text(&mut out, &r.quotes);
    result(
        out,
        json!({
            "quotes": r.quotes.iter().map(quote_json).collect::<Vec<_>>(),
            "already_presented": r.already_presented, "vectors_used": r.vectors_used,
        }),
    )
}

pub(crate) fn query_facts(r: pb::QueryFactsResponse) -> CallToolResult {
    let mut out = format!("{} fact(s), newest or most relevant first", r.facts.len());
    if !r.expanded_verbs.is_empty() {
        let _ = write!(out, " (verbs matched: {})", r.expanded_verbs.join(", "));
    }
    out.push_str(". get_fact(fact_id) shows how one changed over time.\n");
    for f in &r.facts {
        fact_text(&mut out, f, "");
    }
    result(
        out,
        json!({ "facts": r.facts.iter().map(fact_json).collect::<Vec<_>>(), "expanded_verbs": r.expanded_verbs }),
    )
}

pub(crate) fn expand_topic(r: pb::ExpandTopicResponse) -> CallToolResult {
    let tag = r.topic.as_ref().map_or("", |t| t.tag.as_str());
    let mut out = format!(
        "topic {tag} at depth {}: {} tokens from {} segment(s){}\n",
        r.depth,
        r.tokens,
        r.segments.len(),
        if r.omitted_segments > 0 {
            format!(" ({} more left out for max_tokens)", r.omitted_segments)
        } else {
            String::new()
        }
    );
    // Without a reader nothing is paged in, and the working set is not the caller's.
    if r.working_set_tokens > 0 || !r.paged_out.is_empty() {
        let _ = writeln!(out, "working set: {}/{} tokens", r.working_set_tokens, r.working_set_budget);
    }
    for p in &r.paged_out {
        let _ = writeln!(out, "paged out: {} ({}, {} tokens freed)", p.tag, p.action, p.freed_tokens);
    }
    for s in &r.segments {
        let _ = writeln!(out, "  segment {}", segment_line(s));
    }
    let _ = write!(out, "--- text ---\n{}", r.text);
    let paged: Vec<Value> = r
        .paged_out
        .iter()
        .map(|p| json!({ "tag": p.tag, "action": p.action, "freed_tokens": p.freed_tokens }))
        .collect();
    result(
        out,
        json!({
            "topic": r.topic.as_ref().map(topic_json), "depth": r.depth, "text": r.text, "tokens": r.tokens,
            "segments": r.segments.iter().map(segment_json).collect::<Vec<_>>(),
            "omitted_segments": r.omitted_segments, "paged_out": paged,
            "working_set_tokens": r.working_set_tokens, "working_set_budget": r.working_set_budget,
        }),
    )
}

pub(crate) fn remember_when(query: &str, r: pb::RememberWhenResponse) -> CallToolResult {
    let mut out = format!(
        "{} quote(s) for {query:?} from {} to {}. Read a quote's exact lines with read_lines(pointer).\n",
        r.quotes.len(),
        time_text(&r.from),
        time_text(&r.to)
    );
    quotes_text(&mut out, &r.quotes);
    let _ = writeln!(out, "{} fact(s) completed in the range:", r.facts_in_window.len());
    for f in &r.facts_in_window {
        fact_text(&mut out, f, "  ");
    }
    result(
        out,
        json!({
            "from": time(&r.from), "to": time(&r.to),
            "quotes": r.quotes.iter().map(quote_json).collect::<Vec<_>>(),
            "facts_in_window": r.facts_in_window.iter().map(fact_json).collect::<Vec<_>>(),
        }),
    )
}

pub(crate) fn recall_all(r: pb::RecallAllResponse) -> CallToolResult {
    let mut out = format!(
        "{} topic(s) in {} tokens{}. expand_topic(tag) brings one in at more depth.\n",
        r.topics.len(),
        r.tokens,
        if r.omitted_topics > 0 {
            format!(" ({} more left out for max_tokens)", r.omitted_topics)
        } else {
            String::new()
        }
    );
    let _ = write!(out, "--- text ---\n{}", r.text);
    result(
        out,
        json!({
            "topics": r.topics.iter().map(topic_json).collect::<Vec<_>>(), "text": r.text, "tokens": r.tokens,
            "omitted_topics": r.omitted_topics,
        }),
    )
}

pub(crate) fn list_topics(r: pb::ListTopicsResponse) -> CallToolResult {
    let mut out = format!(
        "{} of {} topic(s). expand_topic(tag) brings one in; its summary lines cite their pointers.\n",
        r.topics.len(),
        r.total
    );
    for t in &r.topics {
        let _ = writeln!(out, "{}", topic_line(t));
        if !t.description.trim().is_empty() {
            let _ = writeln!(out, "   {}", first_line(&t.description));
        }
        summary_text(&mut out, &t.summary, "   ");
    }
    if !r.next_page_token.is_empty() {
        let _ = writeln!(out, "more: call again with page_token {:?}", r.next_page_token);
    }
    result(
        out,
        json!({
            "topics": r.topics.iter().map(topic_json).collect::<Vec<_>>(),
            "next_page_token": r.next_page_token, "total": r.total,
        }),
    )
}

pub(crate) fn get_fact(r: pb::GetFactResponse) -> CallToolResult {
    let mut out = String::new();
    if let Some(f) = &r.fact {
        fact_text(&mut out, f, "");
    }
    let _ = writeln!(out, "supersession chain, oldest first ({} fact(s)):", r.chain.len());
    for f in &r.chain {
        fact_text(&mut out, f, "  ");
    }
    result(
        out,
        json!({ "fact": r.fact.as_ref().map(fact_json), "chain": r.chain.iter().map(fact_json).collect::<Vec<_>>() }),
    )
}

pub(crate) fn memory_status(s: pb::GetMemoryStatusResponse) -> CallToolResult {
    let out = format!(
        "memory ({} interpreter): {} event(s) not yet read; {} session(s), {} segment(s), {} fact(s), {} topic(s); topics {}",
        s.interpreter,
        s.lag_events,
        s.sessions,
        s.segments,
        s.facts,
        s.topics,
        if s.topics_current { "current" } else { "awaiting a rebuild" }
    );
    result(
        out,
        json!({
            "interpreter": s.interpreter, "lag_events": s.lag_events, "sessions": s.sessions,
            "segments": s.segments, "facts": s.facts, "topics": s.topics, "topics_current": s.topics_current,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_is_cited_by_lines_else_by_seq() {
        assert_eq!(cite("s", 41, 62, 7), "s:41-62");
        assert_eq!(cite("s", 0, 0, 7), "s@7");
        let hit = pb::SearchHit {
            session_id: "s".into(),
            event_id: "e".into(),
            seq: 3,
            kind: "tool_result".into(),
            first_line: 5,
            last_line: 9,
            text: "cargo test\nok".into(),
            ..Default::default()
        };
        let r = search("cargo", pb::SearchResponse { hits: vec![hit], vectors_used: false });
        let text = r.content[0].as_text().expect("text").text.clone();
        assert!(text.contains("1. s:5-9 [tool_result] event:e"), "{text}");
        assert!(text.contains("   cargo test\n   ok"), "{text}");
        assert_eq!(r.structured_content.expect("json")["hits"][0]["pointer"], "s:5-9");
    }

    #[test]
    fn memory_items_are_cited_by_pointer_else_by_seq() {
        let fact = |id: &str, verb: &str, pointer: &str, by: &str| pb::Fact {
            id: id.into(),
            fact_type: "test".into(),
            subject: "cargo test parser".into(),
            verb: verb.into(),
            session_id: "s".into(),
            first_seq: 5,
            last_seq: 6,
            pointer: pointer.into(),
            superseded_by: by.into(),
            ..Default::default()
        };
        let r = query_facts(pb::QueryFactsResponse {
            facts: vec![fact("f2", "passed", "s:54-61", ""), fact("f1", "failed", "", "f2")],
            expanded_verbs: vec![],
        });
        let text = r.content[0].as_text().expect("text").text.clone();
        assert!(text.contains("s:54-61 [test] cargo test parser passed"), "{text}");
        assert!(
            text.contains("s@5 [test] cargo test parser failed") && text.contains("SUPERSEDED by fact:f2"),
            "{text}"
        );
        let json = r.structured_content.expect("json");
        assert_eq!((&json["facts"][0]["pointer"], &json["facts"][0]["current"]), (&json!("s:54-61"), &json!(true)));
        assert_eq!((&json["facts"][1]["pointer"], &json["facts"][1]["current"]), (&json!("s@5"), &json!(false)));
    }
}
