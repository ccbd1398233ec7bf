//! Building the context pack (A.2): system, task state, retrieval, recent tail and user message,
//! each under its own hard budget, with a decision recorded for every candidate.
//!
//! The budget invariant — every block within its budget and the whole pack within
//! `context − headroom` — holds on the exact token count of the exact text returned: running sums
//! choose the items, then the assembled text is counted and items are dropped (lowest ranked
//! first) until it fits, so BPE effects at item boundaries can never push a pack over.
use memex_pointer::{ContextEvent, SessionAliases, ViewBlock};
use memex_tokens::{TokenCounter, truncate_lines};
use uuid::Uuid;

use crate::evidence::evidence;
use crate::model::{
    BlockKind, Layout, Omission, PackBlock, PackError, PackItem, PackRequest, RetrievalPack, TailEntry,
};

const TAIL_HEADER: &str = "## recent turns\n";

/// Builds the pack. Errors only on a request that cannot be honoured (budgets that do not add
/// up, a user message over its budget); otherwise the pack fits, whatever the candidates.
pub fn build_pack(req: &PackRequest, counter: &dyn TokenCounter) -> Result<RetrievalPack, PackError> {
    let b = req.budgets;
    b.check()?;
    let user_text = format!("## user\n{}\n", req.user_message.trim_end_matches('\n'));
    let user_tokens = counter.count(&user_text);
    if user_tokens > b.user {
        return Err(PackError::UserMessage { tokens: counter.count(&req.user_message), budget: b.user });
    }
    let mut omitted: Vec<Omission> = Vec::new();
    let mut capped = |kind: BlockKind, title: &str, body: &str, marker: &str, budget: usize| {
        let (text, omission) = capped_block(kind, title, body, marker, budget, counter);
        match omission {
            Some(o) if req.required.contains(&kind) => {
                Err(PackError::Required { block: kind, tokens: o.tokens, budget: o.budget })
            }
            Some(o) => {
                omitted.push(o);
                Ok(text)
            }
            None => Ok(text),
        }
    };
    let system =
        capped(BlockKind::System, "## system\n", &req.system, "… (system block cut to its budget)\n", b.system)?;
    let task = match &req.task_state {
        Some(card) => {
            let marker = match &req.task_ref {
                Some(r) => format!("… (task state cut to its budget; GetTaskState {r} has all of it)\n"),
                None => "… (task state cut to its budget)\n".to_owned(),
            };
            capped(BlockKind::TaskState, "", card, &marker, b.task_state)?
        }
        None => String::new(),
    };
    let memory = match b.memory {
        0 => String::new(),
        budget => capped(
            BlockKind::Memory,
            "",
            &req.memory,
            "… (memory block cut to its budget; expand_topic pages in more)\n",
            budget,
        )?,
    };
    let tail = tail_block(req, counter);
    let in_tail: Vec<Uuid> = tail.items.iter().map(|i| i.event_id).collect();
    // The stable evidence stays in place only while the tail it precedes is anchored: a tail
    // laid out afresh breaks the prompt cache's prefix anyway, so the evidence is chosen afresh.
    let kept = if tail.anchored { req.layout.as_ref() } else { None };
    let (mut ev, mut decisions) = evidence(req, &in_tail, kept, counter);

    let mut items: Vec<PackItem> = Vec::new();
    let blocks = loop {
        // The evidence and tail blocks were counted as they were assembled.
        let blocks = [
            (BlockKind::System, &system, None, b.system),
            (BlockKind::TaskState, &task, None, b.task_state),
            (BlockKind::Memory, &memory, None, b.memory),
            (BlockKind::Retrieval, &ev.stable.text, Some(ev.stable.tokens), ev.stable_budget),
            (BlockKind::Tail, &tail.text, Some(tail.tokens), b.tail),
            (BlockKind::TurnRetrieval, &ev.turn.text, Some(ev.turn.tokens), ev.turn_budget()),
            (BlockKind::User, &user_text, Some(user_tokens), b.user),
        ];
        // Packs without a memory budget have no memory block (as before there was one).
        let blocks = blocks
            .iter()
            .filter(|(kind, _, _, budget)| *kind != BlockKind::Memory || *budget > 0)
            .map(|(kind, t, tokens, budget)| PackBlock {
                kind: *kind,
                text: (*t).clone(),
                tokens: tokens.unwrap_or_else(|| counter.count(t)),
                budget: *budget,
            })
            .collect::<Vec<_>>();
        let text = RetrievalPack::joined(&blocks);
        // The whole is counted from the blocks (each counted already, and cached), recounting only
        // their last lines: exactly what counting the joined text would give.
        let tokens = RetrievalPack::joined_tokens(&blocks, counter);
        // Blocks fit on their own; only boundary effects could push the whole over, and then the
        // evidence gives way.
        if tokens + b.headroom <= b.context || ev.is_empty() {
            items.extend(ev.stable.items.iter().cloned());
            items.extend(tail.items.iter().cloned());
            items.extend(ev.turn.items.iter().cloned());
            break (blocks, text, tokens);
        }
        ev.drop_last(req.session_id, &mut decisions, counter);
    };
    let (blocks, text, tokens) = blocks;
    let layout = Layout { tail_from: tail.from, stable: ev.stable_layout(), terms: ev.terms.clone() };
    Ok(RetrievalPack { text, tokens, blocks, items, decisions, budgets: b, omitted, layout: Some(layout) })
}

/// `title` + `body`, cut on line boundaries (then mid-line) to `budget` with `marker` appended;
/// with the omission when it had to be cut, or left out because not even the marker fit.
fn capped_block(
    kind: BlockKind,
    title: &str,
    body: &str,
    marker: &str,
    budget: usize,
    counter: &dyn TokenCounter,
) -> (String, Option<Omission>) {
    if body.trim().is_empty() {
        return (String::new(), None);
    }
    let body = body.trim_end_matches('\n');
    let whole = format!("{title}{body}\n");
    let tokens = counter.count(&whole);
    if tokens <= budget {
        return (whole, None);
    }
    let room = budget.saturating_sub(counter.count(title) + counter.count(marker) + 1);
    let head = truncate_lines(counter, &whole[title.len()..], room);
    let text = format!("{title}{head}{marker}");
    if counter.count(&text) <= budget {
        (text, Some(Omission { block: kind, dropped: false, tokens, budget }))
    } else {
        (String::new(), Some(Omission { block: kind, dropped: true, tokens, budget }))
    }
}

/// The tail block: its text, token count, items, its oldest entry, and whether it kept the last
/// layout's anchor.
struct Tail {
    text: String,
    tokens: usize,
    items: Vec<PackItem>,
    from: Option<(u64, bool)>,
    anchored: bool,
}

/// The tail block. Anchored: every entry from the last layout's oldest one, when they all fit
/// the budget, so the block only grows at its end from turn to turn. Otherwise the newest entries
/// that fit the budget (a first pack) or `tail_refill` of it (the anchored tail outgrew it), oldest
/// first; the newest event is always there, cut to the budget if it is larger.
fn tail_block(req: &PackRequest, counter: &dyn TokenCounter) -> Tail {
    let budget = req.budgets.tail;
    let mut aliases = SessionAliases::starting_with(req.session_id);
    // (text, its tokens, its item): the count taken to choose an entry is the item's count.
    let mut render = |entry: &TailEntry| match entry {
        TailEntry::Manifest { text, .. } => {
            let text = format!("{}\n", text.trim_end_matches('\n'));
            let tokens = counter.count(&text);
            (text, tokens, None)
        }
        TailEntry::Event { event, view } => {
            let alias = aliases.alias(event.session_id);
            let text = memex_pointer::render_event(&alias, event, view.as_ref());
            let tokens = counter.count(&text);
            (text, tokens, Some(item_of(BlockKind::Tail, event, view.as_ref(), tokens, false, None)))
        }
    };
    let from = req.layout.as_ref().and_then(|l| l.tail_from);
    if let Some(k) = from.and_then(|f| req.tail.iter().position(|e| e.position() == f)) {
        let chosen: Vec<_> = req.tail[k..].iter().map(&mut render).collect();
        if let Some((text, tokens, items, _)) = assemble_tail(req.session_id, chosen, budget, counter, false) {
            return Tail { text, tokens, items, from, anchored: true };
        }
    }
    let fill = match &req.layout {
        Some(_) => ((budget as f64 * req.params.tail_refill.clamp(0.0, 1.0)) as usize).min(budget),
        None => budget,
    };
    let legend = format!("{}\n", SessionAliases::starting_with(req.session_id).legend());
    let mut used = counter.count(TAIL_HEADER) + counter.count(&legend);
    let mut chosen: Vec<TailPart> = Vec::new();
    let mut first = None;
    for (k, entry) in req.tail.iter().enumerate().rev() {
        let (text, tokens, item) = render(entry);
        if used + tokens < fill {
            used += tokens + 1;
            chosen.push((text, tokens, item));
            first = Some(k);
            continue;
        }
        if chosen.is_empty() {
            // The running count above is an estimate (a newline per entry); the block counted
            // exactly may still hold the newest entry whole. It must then be kept whole: the
            // next pack, anchored at this entry, renders it whole if it fits, and an excerpt here
            // would make the same request give two packs.
            let whole = vec![(text.clone(), tokens, item.clone())];
            if assemble_tail(req.session_id, whole, budget, counter, false).is_some() {
                chosen.push((text, tokens, item));
                first = Some(k);
            } else if let TailEntry::Event { event, view } = entry {
                // The newest event alone is over the tail budget: keep as much of it as fits.
                let alias = SessionAliases::starting_with(req.session_id).alias(event.session_id);
                if let Some(r) = crate::render::render_item(
                    &alias,
                    event,
                    view.as_ref(),
                    &req.terms,
                    budget.saturating_sub(used + 1),
                    counter,
                ) {
                    let item = item_of(BlockKind::Tail, event, view.as_ref(), r.tokens, true, None);
                    chosen.push((r.text, r.tokens, Some(item)));
                    first = Some(k);
                }
            }
        }
        break;
    }
    chosen.reverse();
    let (text, tokens, items, dropped) =
        assemble_tail(req.session_id, chosen, budget, counter, true).unwrap_or((String::new(), 0, Vec::new(), 0));
    let from =
        if text.is_empty() { None } else { first.and_then(|k| req.tail.get(k + dropped)).map(TailEntry::position) };
    Tail { text, tokens, items, from, anchored: false }
}

type TailPart = (String, usize, Option<PackItem>);

/// The tail block from its entries (oldest first): its text, tokens, items and how many of the
/// oldest entries were dropped to fit `budget` (None when that was not allowed and needed).
fn assemble_tail(
    session: Uuid,
    mut chosen: Vec<TailPart>,
    budget: usize,
    counter: &dyn TokenCounter,
    may_drop: bool,
) -> Option<(String, usize, Vec<PackItem>, usize)> {
    let legend = format!("{}\n", SessionAliases::starting_with(session).legend());
    let mut dropped = 0;
    loop {
        if chosen.is_empty() {
            return Some((String::new(), 0, Vec::new(), dropped));
        }
        let parts: Vec<(&str, usize)> = chosen.iter().map(|(t, n, _)| (t.as_str(), *n)).collect();
        let (text, tokens) = joined_block(&format!("{TAIL_HEADER}{legend}"), &parts, counter);
        if tokens <= budget {
            let items = chosen.into_iter().filter_map(|(_, _, item)| item).collect();
            return Some((text, tokens, items, dropped));
        }
        if !may_drop {
            return None;
        }
        chosen.remove(0); // oldest first
        dropped += 1;
    }
}

pub(crate) fn item_of(
    block: BlockKind,
    e: &ContextEvent,
    view: Option<&ViewBlock>,
    tokens: usize,
    excerpt: bool,
    score: Option<f64>,
) -> PackItem {
    PackItem {
        block,
        event_id: e.id,
        session_id: e.session_id,
        seq: e.seq,
        kind: e.kind.as_str().to_owned(),
        tool_name: e.tool_name.clone(),
        lines: view.map(|v| v.range),
        tokens,
        excerpt,
        score,
        artifact_lines: None,
    }
}

/// `head`, then each part (with its own token count) after a newline, and the token count of the
/// whole as counting it would give: from the parts' counts (cached across packs), recounting only
/// the head and each part's last lines (`memex_tokens::count_joined`). The assembled block is new
/// text in nearly every pack, so counting it whole never hits the count cache.
pub(crate) fn joined_block(head: &str, parts: &[(&str, usize)], counter: &dyn TokenCounter) -> (String, usize) {
    let mut text = head.to_owned();
    for (p, _) in parts {
        text.push('\n');
        text.push_str(p);
    }
    let mut all: Vec<(&str, usize)> = Vec::with_capacity(parts.len() + 1);
    all.push((head, counter.count(head)));
    all.extend_from_slice(parts);
    (text, memex_tokens::count_joined(counter, &all, "\n"))
}
