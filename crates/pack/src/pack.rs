//! Building the context pack (A.2): system, task state, retrieval, recent tail and user message,
//! each under its own hard budget, with a decision recorded for every candidate.
//!
//! The budget invariant — every block within its budget and the whole pack within
//! `context − headroom` — holds on the exact token count of the exact text returned: running sums
//! choose the items, then the assembled text is counted and items are dropped (lowest ranked
//! first) until it fits, so BPE effects at item boundaries can never push a pack over.
use std::collections::BTreeMap;

use memex_pointer::{ContextEvent, SessionAliases, ViewBlock};
use memex_rank::{Sketch, cosine, mmr};
use memex_tokens::{TokenCounter, truncate_lines};
use uuid::Uuid;

use crate::candidate::{Candidate, ItemType, QuotaGroup};
use crate::model::{
    BlockKind, Decision, Exclusion, Omission, Outcome, PackBlock, PackError, PackItem, PackRequest, RetrievalPack,
    TailEntry,
};
use crate::render::{render_artifact_match, render_item};
use crate::score::score_all;

const RETRIEVAL_HEADER: &str =
    "## retrieved evidence (read-only memory from the lossless store; follow a pointer to expand)\n";
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
    let (tail_text, tail_tokens, tail_items) = tail_block(req, counter);
    let in_tail: Vec<Uuid> = tail_items.iter().map(|i| i.event_id).collect();
    let (mut retrieval, mut decisions) = retrieval_block(req, &in_tail, counter);

    let mut items: Vec<PackItem> = Vec::new();
    let blocks = loop {
        // The retrieval and tail blocks were counted as they were assembled.
        let blocks = [
            (BlockKind::System, &system, None, b.system),
            (BlockKind::TaskState, &task, None, b.task_state),
            (BlockKind::Memory, &memory, None, b.memory),
            (BlockKind::Retrieval, &retrieval.text, Some(retrieval.tokens), b.retrieval),
            (BlockKind::Tail, &tail_text, Some(tail_tokens), b.tail),
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
        // retrieval block gives way.
        if tokens + b.headroom <= b.context || retrieval.items.is_empty() {
            items.extend(retrieval.items.iter().cloned());
            items.extend(tail_items.iter().cloned());
            break (blocks, text, tokens);
        }
        retrieval.drop_last(&mut decisions, counter);
    };
    let (blocks, text, tokens) = blocks;
    Ok(RetrievalPack { text, tokens, blocks, items, decisions, budgets: b, omitted })
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

/// The newest entries of the window that fit the tail budget, oldest first. The newest event is
/// always there, cut to the budget if it is larger.
/// The tail block's text, its token count and its items.
fn tail_block(req: &PackRequest, counter: &dyn TokenCounter) -> (String, usize, Vec<PackItem>) {
    let budget = req.budgets.tail;
    let mut aliases = SessionAliases::starting_with(req.session_id);
    let legend = format!("{}\n", aliases.legend());
    let fixed = counter.count(TAIL_HEADER) + counter.count(&legend);
    let mut used = fixed;
    // (text, its tokens, its item): the count taken to choose an entry is the item's count.
    let mut chosen: Vec<(String, usize, Option<PackItem>)> = Vec::new();
    for entry in req.tail.iter().rev() {
        let (text, item) = match entry {
            TailEntry::Manifest { text, .. } => (format!("{}\n", text.trim_end_matches('\n')), None),
            TailEntry::Event { event, view } => {
                let alias = aliases.alias(event.session_id);
                let text = memex_pointer::render_event(&alias, event, view.as_ref());
                (text, Some(item_of(BlockKind::Tail, event, view.as_ref(), 0, false, None)))
            }
        };
        let tokens = counter.count(&text);
        if used + tokens < budget {
            used += tokens + 1;
            chosen.push((text, tokens, item));
            continue;
        }
        if chosen.is_empty()
            && let TailEntry::Event { event, view } = entry
        {
            // The newest event alone is over the tail budget: keep as much of it as fits.
            let alias = aliases.alias(event.session_id);
            if let Some(r) = crate::render::render_item(
                &alias,
                event,
                view.as_ref(),
                &req.terms,
                budget.saturating_sub(used + 1),
                counter,
            ) {
                chosen.push((r.text, r.tokens, Some(item_of(BlockKind::Tail, event, view.as_ref(), 0, true, None))));
            }
        }
        break;
    }
    chosen.reverse();
    loop {
        if chosen.is_empty() {
            return (String::new(), 0, Vec::new());
        }
        let parts: Vec<(&str, usize)> = chosen.iter().map(|(t, n, _)| (t.as_str(), *n)).collect();
        let (text, tokens) = joined_block(&format!("{TAIL_HEADER}{legend}"), &parts, counter);
        if tokens <= budget {
            let items = chosen
                .into_iter()
                .filter_map(|(_, tokens, item)| {
                    item.map(|mut i| {
                        i.tokens = tokens;
                        i
                    })
                })
                .collect();
            return (text, tokens, items);
        }
        chosen.remove(0); // oldest first
    }
}

fn item_of(
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
fn joined_block(head: &str, parts: &[(&str, usize)], counter: &dyn TokenCounter) -> (String, usize) {
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

/// The retrieval block under construction.
struct Retrieval {
    text: String,
    items: Vec<PackItem>,
    /// Rendered item texts, parallel to `items`.
    parts: Vec<String>,
    /// Decision index of each item, parallel to `items`.
    decision_of: Vec<usize>,
    legend: String,
    /// The token count of `text`, kept by `assemble`.
    tokens: usize,
}

impl Retrieval {
    /// Renders `text` from the items and counts it.
    fn assemble(&mut self, counter: &dyn TokenCounter) {
        if self.items.is_empty() {
            self.text.clear();
            self.tokens = 0;
            return;
        }
        let head = format!("{RETRIEVAL_HEADER}{}\n", self.legend);
        let parts: Vec<(&str, usize)> =
            self.parts.iter().zip(&self.items).map(|(p, i)| (p.as_str(), i.tokens)).collect();
        (self.text, self.tokens) = joined_block(&head, &parts, counter);
    }

    /// Drops the lowest-ranked item (the last added), recording why.
    fn drop_last(&mut self, decisions: &mut [Decision], counter: &dyn TokenCounter) {
        if let (Some(_), Some(_), Some(d)) = (self.items.pop(), self.parts.pop(), self.decision_of.pop()) {
            decisions[d].outcome = Outcome::Excluded(Exclusion::OverBudget { remaining: 0 });
        }
        self.assemble(counter);
    }
}

fn dedupe(cands: &[Candidate]) -> Vec<Candidate> {
    let mut by_id: BTreeMap<Uuid, usize> = BTreeMap::new();
    let mut out: Vec<Candidate> = Vec::with_capacity(cands.len());
    for c in cands {
        match by_id.get(&c.event.id) {
            Some(&i) => {
                let merged = out[i].sources.merge(c.sources);
                out[i].sources = merged;
                out[i].superseded |= c.superseded;
                if out[i].view.is_none() {
                    out[i].view.clone_from(&c.view);
                }
                if out[i].embedding.is_none() {
                    out[i].embedding.clone_from(&c.embedding);
                }
            }
            None => {
                by_id.insert(c.event.id, out.len());
                out.push(c.clone());
            }
        }
    }
    out
}

fn retrieval_block(req: &PackRequest, in_tail: &[Uuid], counter: &dyn TokenCounter) -> (Retrieval, Vec<Decision>) {
    let budget = req.budgets.retrieval;
    let p = &req.params;
    let cands = dedupe(&req.candidates);
    let parts = score_all(&cands, &req.task, &p.weights, p.half_life_ms);
    let mut decisions: Vec<Decision> = cands
        .iter()
        .zip(&parts)
        .map(|(c, s)| Decision {
            event_id: c.event.id,
            session_id: c.event.session_id,
            seq: c.event.seq,
            kind: c.event.kind.as_str().to_owned(),
            sources: c.sources,
            parts: *s,
            mmr_rank: None,
            outcome: Outcome::Excluded(Exclusion::NotSelected),
        })
        .collect();
    // Rank: score, then newer, then id — a total order, so ties never depend on input order.
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| {
        parts[b]
            .score
            .total_cmp(&parts[a].score)
            .then(cands[b].event.time_ms.cmp(&cands[a].event.time_ms))
            .then(cands[a].event.id.cmp(&cands[b].event.id))
    });
    let mut eligible: Vec<usize> = Vec::new();
    for &i in &order {
        let reason = if parts[i].score <= 0.0 {
            Some(Exclusion::ZeroScore)
        } else if in_tail.contains(&cands[i].event.id) {
            Some(Exclusion::InTail)
        } else if eligible.len() >= p.max_candidates {
            Some(Exclusion::BelowCut)
        } else {
            None
        };
        match reason {
            Some(r) => decisions[i].outcome = Outcome::Excluded(r),
            None => eligible.push(i),
        }
    }
    // Similarity: the cosine of the two items' embeddings when both have one, else how alike
    // their words are.
    let sketches: Vec<Sketch> = eligible.iter().map(|&i| Sketch::of(&cands[i].event.content)).collect();
    let relevance: Vec<f64> = eligible.iter().map(|&i| parts[i].score).collect();
    let similarity = |a: usize, b: usize| match (&cands[eligible[a]].embedding, &cands[eligible[b]].embedding) {
        (Some(x), Some(y)) if x.len() == y.len() && !x.is_empty() => f64::from(cosine(x, y)).max(0.0),
        _ => sketches[a].jaccard(&sketches[b]),
    };
    let picked = mmr(&relevance, p.max_items, p.lambda, similarity);

    let mut aliases = SessionAliases::starting_with(req.session_id);
    let mut r = Retrieval {
        text: String::new(),
        items: vec![],
        parts: vec![],
        decision_of: vec![],
        legend: aliases.legend(),
        tokens: 0,
    };
    let header_tokens = counter.count(RETRIEVAL_HEADER);
    let mut legend_tokens = counter.count(&r.legend) + 1;
    let mut used = header_tokens + legend_tokens;
    let item_cap = ((budget as f64 * p.item_share) as usize).max(256);
    let mut group_used: BTreeMap<QuotaGroup, usize> = BTreeMap::new();
    for (rank, &local) in picked.iter().enumerate() {
        let i = eligible[local];
        decisions[i].mmr_rank = Some(rank);
        let c = &cands[i];
        let group = ItemType::of(&c.event.kind).quota_group();
        let quota = (budget as f64 * p.quotas.share(group)) as usize;
        let quota_left = quota.saturating_sub(group_used.get(&group).copied().unwrap_or(0));
        let alias = aliases.alias(c.event.session_id);
        let new_legend = aliases.legend();
        let legend_growth =
            if new_legend != r.legend { (counter.count(&new_legend) + 1).saturating_sub(legend_tokens) } else { 0 };
        let remaining = budget.saturating_sub(used + legend_growth + 1);
        let cap = item_cap.min(remaining).min(quota_left);
        let rendered = match &c.artifact_match {
            Some(m) => render_artifact_match(&alias, &c.event, c.view.as_ref(), m, &req.terms, cap, counter),
            None => render_item(&alias, &c.event, c.view.as_ref(), &req.terms, cap, counter),
        };
        match rendered {
            Some(item) => {
                used += item.tokens + 1 + legend_growth;
                if legend_growth > 0 {
                    legend_tokens += legend_growth;
                    r.legend = new_legend;
                }
                *group_used.entry(group).or_insert(0) += item.tokens;
                decisions[i].outcome = Outcome::Included { tokens: item.tokens, excerpt: item.excerpt };
                let mut pack_item = item_of(
                    BlockKind::Retrieval,
                    &c.event,
                    c.view.as_ref(),
                    item.tokens,
                    item.excerpt,
                    Some(parts[i].score),
                );
                pack_item.artifact_lines = c.artifact_match.as_ref().map(|m| [m.first_line + 1, m.last_line + 1]);
                r.items.push(pack_item);
                r.parts.push(item.text);
                r.decision_of.push(i);
            }
            None => {
                // Undo an alias taken for an item that did not make it.
                aliases = alias_set(req.session_id, &r.items);
                decisions[i].outcome = Outcome::Excluded(if quota_left < item_cap.min(remaining) {
                    Exclusion::Quota { group, quota }
                } else {
                    Exclusion::OverBudget { remaining }
                });
            }
        }
    }
    r.assemble(counter);
    while !r.items.is_empty() && r.tokens > budget {
        r.drop_last(&mut decisions, counter);
        let a = alias_set(req.session_id, &r.items);
        if a.legend() != r.legend {
            r.legend = a.legend();
            r.assemble(counter);
        }
    }
    (r, decisions)
}

/// The aliases the given items use, in order of first use after `s1`.
fn alias_set(first: Uuid, items: &[PackItem]) -> SessionAliases {
    let mut a = SessionAliases::starting_with(first);
    for i in items {
        a.alias(i.session_id);
    }
    a
}
