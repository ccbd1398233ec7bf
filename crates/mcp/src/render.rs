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
        let _ = writeln!(out, "  {pointer} [{}] {} tokens ({})", it.kind, it.tokens, it.block);
        items.push(json!({
            "pointer": pointer, "block": it.block, "event_id": it.event_id, "kind": it.kind,
            "tokens": it.tokens, "excerpt": it.excerpt,
        }));
    }
    let _ = write!(out, "--- pack text ---\n{}", p.text);
    result(
        out,
        json!({
            "pack_id": p.pack_id, "session_id": p.session_id, "task_id": p.task_id, "tokens": p.tokens,
            "tokenizer": p.tokenizer, "vectors_used": p.vectors_used, "items": items, "text": p.text,
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
}
