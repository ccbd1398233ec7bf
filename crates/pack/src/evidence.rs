//! The evidence of a pack (A.2 lines 7–14): candidates scored, MMR-selected and packed under
//! the retrieval budget, in two sections. The *stable* section (before the tail) keeps the
//! evidence of the turn that began the session's current layout, byte for byte, while the tail
//! stays anchored; the *turn* section (after the tail) holds what this turn's query found. A
//! provider's prompt cache then serves everything up to the new tail entries (issue 20, item 4).
use std::collections::BTreeMap;

use memex_pointer::SessionAliases;
use memex_rank::{Sketch, cosine, mmr_after};
use memex_tokens::TokenCounter;
use uuid::Uuid;

use crate::candidate::{Candidate, ItemType, QuotaGroup};
use crate::model::{BlockKind, Decision, Exclusion, Layout, Outcome, PackItem, PackRequest, StableItem};
use crate::pack::{item_of, joined_block};
use crate::render::{Rendered, render_artifact_match, render_item};
use crate::score::score_all;

const STABLE_HEADER: &str =
    "## retrieved evidence (read-only memory from the lossless store; follow a pointer to expand)\n";
/// The least cap a freshly laid-out stable item is rendered under: below it, what is left of
/// the stable section goes to this turn's evidence instead.
const MIN_STABLE_ITEM: usize = 96;
const TURN_HEADER: &str = "## retrieved for this turn (read-only memory from the lossless store)\n";

/// One section of evidence under construction.
pub(crate) struct Section {
    header: &'static str,
    block: BlockKind,
    pub(crate) text: String,
    pub(crate) items: Vec<PackItem>,
    /// Rendered item texts, parallel to `items`.
    parts: Vec<String>,
    /// Decision index of each item, parallel to `items`.
    decision_of: Vec<usize>,
    /// What each item was rendered from besides its event, parallel to `items`.
    rendered_as: Vec<StableItem>,
    legend: String,
    /// The token count of `text`, kept by `assemble`.
    pub(crate) tokens: usize,
}

impl Section {
    fn new(header: &'static str, block: BlockKind, session: Uuid) -> Section {
        Section {
            header,
            block,
            text: String::new(),
            items: Vec::new(),
            parts: Vec::new(),
            decision_of: Vec::new(),
            rendered_as: Vec::new(),
            legend: SessionAliases::starting_with(session).legend(),
            tokens: 0,
        }
    }

    /// Renders `text` from the items and counts it.
    fn assemble(&mut self, counter: &dyn TokenCounter) {
        if self.items.is_empty() {
            self.text.clear();
            self.tokens = 0;
            return;
        }
        let head = format!("{}{}\n", self.header, self.legend);
        let parts: Vec<(&str, usize)> =
            self.parts.iter().zip(&self.items).map(|(p, i)| (p.as_str(), i.tokens)).collect();
        (self.text, self.tokens) = joined_block(&head, &parts, counter);
    }

    /// Drops the last item, recording why, and re-assembles (with the legend it now needs).
    fn drop_last(&mut self, session: Uuid, decisions: &mut [Decision], counter: &dyn TokenCounter) {
        if let (Some(_), Some(_), Some(d), Some(_)) =
            (self.items.pop(), self.parts.pop(), self.decision_of.pop(), self.rendered_as.pop())
        {
            decisions[d].outcome = Outcome::Excluded(Exclusion::OverBudget { remaining: 0 });
        }
        self.legend = alias_set(session, &self.items).legend();
        self.assemble(counter);
    }
}

/// The two sections and what the next pack needs to keep the stable one in place.
pub(crate) struct Evidence {
    pub(crate) stable: Section,
    pub(crate) turn: Section,
    /// The terms the stable section was excerpted for.
    pub(crate) terms: Vec<String>,
    /// The stable section's budget.
    pub(crate) stable_budget: usize,
    /// The retrieval budget both sections share.
    budget: usize,
}

impl Evidence {
    /// Drops the lowest-ranked item: the turn section's last, else the stable section's.
    pub(crate) fn drop_last(&mut self, session: Uuid, decisions: &mut [Decision], counter: &dyn TokenCounter) {
        if self.turn.items.is_empty() {
            self.stable.drop_last(session, decisions, counter);
        } else {
            self.turn.drop_last(session, decisions, counter);
        }
    }

    /// This turn's section's budget: what the stable section (and its separator) left.
    pub(crate) fn turn_budget(&self) -> usize {
        self.budget.saturating_sub(self.stable.tokens + usize::from(self.stable.tokens > 0))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.stable.items.is_empty() && self.turn.items.is_empty()
    }

    pub(crate) fn stable_layout(&self) -> Vec<StableItem> {
        self.stable.rendered_as.clone()
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
                if out[i].artifact_match.is_none() {
                    out[i].artifact_match.clone_from(&c.artifact_match);
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

fn render(c: &Candidate, alias: &str, terms: &[String], cap: usize, counter: &dyn TokenCounter) -> Option<Rendered> {
    match &c.artifact_match {
        Some(m) => render_artifact_match(alias, &c.event, c.view.as_ref(), m, terms, cap, counter),
        None => render_item(alias, &c.event, c.view.as_ref(), terms, cap, counter),
    }
}

/// Selects and packs the evidence. `kept`: the last layout's stable evidence, to keep in place
/// (the tail is anchored); None lays the sections out afresh.
pub(crate) fn evidence(
    req: &PackRequest,
    in_tail: &[Uuid],
    kept: Option<&Layout>,
    counter: &dyn TokenCounter,
) -> (Evidence, Vec<Decision>) {
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
    // The kept evidence, as candidate indices; kept only when every item is still a candidate
    // (an erased event is not) and none has entered the tail.
    let kept: Option<(&Layout, Vec<usize>)> = kept.and_then(|l| {
        let idx: Option<Vec<usize>> = l
            .stable
            .iter()
            .map(|s| cands.iter().position(|c| c.event.id == s.event_id).filter(|_| !in_tail.contains(&s.event_id)))
            .collect();
        idx.map(|i| (l, i))
    });
    // Rank: score, then newer, then id — a total order, so ties never depend on input order.
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| {
        parts[b]
            .score
            .total_cmp(&parts[a].score)
            .then(cands[b].event.time_ms.cmp(&cands[a].event.time_ms))
            .then(cands[a].event.id.cmp(&cands[b].event.id))
    });
    let is_kept = |i: usize| kept.as_ref().is_some_and(|(_, k)| k.contains(&i));
    let mut eligible: Vec<usize> = Vec::new();
    for &i in &order {
        let reason = if is_kept(i) {
            None
        } else if parts[i].score <= 0.0 {
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
    let first: Vec<usize> = match &kept {
        Some((_, k)) => k.iter().filter_map(|i| eligible.iter().position(|e| e == i)).collect(),
        None => Vec::new(),
    };
    let picked = mmr_after(&relevance, &first, p.max_items.max(first.len()), p.lambda, similarity);

    let stable_budget = ((budget as f64 * p.stable_share.clamp(0.0, 1.0)) as usize).min(budget);
    let item_cap = ((budget as f64 * p.item_share) as usize).max(256);
    let mut ev = Evidence {
        stable: Section::new(STABLE_HEADER, BlockKind::Retrieval, req.session_id),
        turn: Section::new(TURN_HEADER, BlockKind::TurnRetrieval, req.session_id),
        terms: kept.as_ref().map_or_else(|| req.terms.clone(), |(l, _)| l.terms.clone()),
        stable_budget,
        budget,
    };
    let stable_terms = ev.terms.clone();
    let mut group_used: BTreeMap<QuotaGroup, usize> = BTreeMap::new();
    let mut at = 0;
    // The stable section: the kept items, rendered as they were; or, laid out afresh, the first
    // picks that fit its budget at their usual cap.
    {
        let mut packer = Packer::new(&mut ev.stable, req.session_id, stable_budget, counter);
        while at < picked.len() {
            let i = eligible[picked[at]];
            // A kept item is rendered from what it was rendered from before.
            let kept_item = kept.as_ref().and_then(|(l, _)| l.stable.get(at).filter(|_| at < first.len()));
            let again;
            let c = match kept_item {
                Some(k) if k.artifact_match != cands[i].artifact_match => {
                    again = Candidate { artifact_match: k.artifact_match.clone(), ..cands[i].clone() };
                    &again
                }
                _ => &cands[i],
            };
            let group = ItemType::of(&c.event.kind).quota_group();
            let cap = match (kept_item, &kept) {
                (Some(k), _) => k.cap,
                // Past the kept items: the rest are this turn's.
                (None, Some(_)) => break,
                // Laid out afresh: the first picks, each under the cap it would have anyway, the
                // last one cut to what the section has left.
                (None, None) => {
                    let quota = (budget as f64 * p.quotas.share(group)) as usize;
                    let quota_left = quota.saturating_sub(group_used.get(&group).copied().unwrap_or(0));
                    let cap = item_cap.min(quota_left).min(packer.remaining_for(c.event.session_id));
                    if cap < MIN_STABLE_ITEM.min(item_cap) {
                        break;
                    }
                    cap
                }
            };
            match packer.add(c, i, at, cap, &stable_terms, &mut decisions, parts[i].score) {
                Some(tokens) => *group_used.entry(group).or_insert(0) += tokens,
                // Not even a line fits its cap (or a kept item no longer renders, which it never
                // should): it and the rest are this turn's.
                None => break,
            }
            at += 1;
        }
        packer.finish(&mut decisions);
    }
    // This turn's section: the remaining picks under what the stable section left.
    let turn_budget = ev.turn_budget();
    {
        let mut packer = Packer::new(&mut ev.turn, req.session_id, turn_budget, counter);
        for (rank, &local) in picked.iter().enumerate().skip(at) {
            let i = eligible[local];
            let c = &cands[i];
            let group = ItemType::of(&c.event.kind).quota_group();
            let quota = (budget as f64 * p.quotas.share(group)) as usize;
            let quota_left = quota.saturating_sub(group_used.get(&group).copied().unwrap_or(0));
            let remaining = packer.remaining_for(c.event.session_id);
            let cap = item_cap.min(remaining).min(quota_left);
            match packer.add(c, i, rank, cap, &req.terms, &mut decisions, parts[i].score) {
                Some(tokens) => *group_used.entry(group).or_insert(0) += tokens,
                None => {
                    decisions[i].outcome = Outcome::Excluded(if quota_left < item_cap.min(remaining) {
                        Exclusion::Quota { group, quota }
                    } else {
                        Exclusion::OverBudget { remaining }
                    });
                }
            }
        }
        packer.finish(&mut decisions);
    }
    (ev, decisions)
}

/// Fills one section under its budget, item by item, with the session aliases its items use.
struct Packer<'a> {
    section: &'a mut Section,
    session: Uuid,
    aliases: SessionAliases,
    budget: usize,
    used: usize,
    legend_tokens: usize,
    counter: &'a dyn TokenCounter,
}

impl<'a> Packer<'a> {
    fn new(section: &'a mut Section, session: Uuid, budget: usize, counter: &'a dyn TokenCounter) -> Packer<'a> {
        let aliases = SessionAliases::starting_with(session);
        let legend_tokens = counter.count(&aliases.legend()) + 1;
        let used = counter.count(section.header) + legend_tokens;
        Packer { section, session, aliases, budget, used, legend_tokens, counter }
    }

    /// Tokens left for an item of `session` (after the legend grows for a new session).
    fn remaining_for(&self, session: Uuid) -> usize {
        let mut a = self.aliases.clone();
        a.alias(session);
        let growth = if a.legend() != self.section.legend {
            (self.counter.count(&a.legend()) + 1).saturating_sub(self.legend_tokens)
        } else {
            0
        };
        self.budget.saturating_sub(self.used + growth + 1)
    }

    /// Renders candidate `c` (index `i`, MMR rank `rank`) under `cap` and adds it; its tokens,
    /// or None when it did not render (the caller records why).
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        c: &Candidate,
        i: usize,
        rank: usize,
        cap: usize,
        terms: &[String],
        decisions: &mut [Decision],
        score: f64,
    ) -> Option<usize> {
        decisions[i].mmr_rank = Some(rank);
        let remaining = self.remaining_for(c.event.session_id);
        let mut aliases = self.aliases.clone();
        let alias = aliases.alias(c.event.session_id);
        let item = render(c, &alias, terms, cap.min(remaining), self.counter)?;
        let new_legend = aliases.legend();
        if new_legend != self.section.legend {
            let growth = (self.counter.count(&new_legend) + 1).saturating_sub(self.legend_tokens);
            self.legend_tokens += growth;
            self.used += growth;
            self.section.legend = new_legend;
        }
        self.aliases = aliases;
        self.used += item.tokens + 1;
        decisions[i].outcome = Outcome::Included { tokens: item.tokens, excerpt: item.excerpt };
        let mut pack_item =
            item_of(self.section.block, &c.event, c.view.as_ref(), item.tokens, item.excerpt, Some(score));
        pack_item.artifact_lines = c.artifact_match.as_ref().map(|m| [m.first_line + 1, m.last_line + 1]);
        self.section.items.push(pack_item);
        self.section.parts.push(item.text);
        self.section.decision_of.push(i);
        self.section.rendered_as.push(StableItem {
            event_id: c.event.id,
            cap,
            artifact_match: c.artifact_match.clone(),
        });
        Some(item.tokens)
    }

    /// Assembles the section and drops its last items while the exact count is over budget.
    fn finish(self, decisions: &mut [Decision]) {
        self.section.assemble(self.counter);
        while !self.section.items.is_empty() && self.section.tokens > self.budget {
            self.section.drop_last(self.session, decisions, self.counter);
        }
    }
}

/// The aliases the given items use, in order of first use after `s1`.
fn alias_set(first: Uuid, items: &[PackItem]) -> SessionAliases {
    let mut a = SessionAliases::starting_with(first);
    for i in items {
        a.alias(i.session_id);
    }
    a
}
