//! Building the context pack (A.2): system, task state, retrieval, recent tail and user message,
//! each under its own hard budget, with a decision recorded for every candidate.
//!
//! The budget invariant — every block within its budget and the whole pack within
//! `context − headroom` — holds on the exact token count of the exact text returned: running sums
//! choose the items, then the assembled text is counted and items are dropped (lowest ranked
//! first) until it fits, so BPE effects at item boundaries can never push a pack over.
use std::collections::{BTreeMap, HashMap};

use memex_pointer::{ContextEvent, LineRange, SessionAliases, ViewBlock};
use memex_tokens::{TokenCounter, truncate_lines};
use uuid::Uuid;

use crate::candidate::{Candidate, ItemType, QuotaGroup, Sources, TaskContext};
use crate::mmr::{MmrItem, Sketch, mmr_select};
use crate::render::render_item;
use crate::score::{BaseWeights, ScoreParts, score_all};

/// Per-block budgets in tokens (TRACE §9.1). Invariant checked by [`Budgets::check`]:
/// `system + task_state + tail + retrieval + user + headroom ≤ context`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Budgets {
    pub context: usize,
    pub system: usize,
    pub task_state: usize,
    pub tail: usize,
    pub retrieval: usize,
    pub user: usize,
    pub headroom: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            context: 32_000,
            system: 2_000,
            task_state: 800,
            tail: 8_000,
            retrieval: 4_096,
            user: 4_000,
            headroom: 4_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error(
        "budgets: system {system} + task_state {task_state} + tail {tail} + retrieval {retrieval} + user {user} + headroom {headroom} = {sum} exceeds context {context}"
    )]
    Budgets {
        system: usize,
        task_state: usize,
        tail: usize,
        retrieval: usize,
        user: usize,
        headroom: usize,
        sum: usize,
        context: usize,
    },
    #[error("user_message: {tokens} tokens, over budgets.user = {budget}")]
    UserMessage { tokens: usize, budget: usize },
}

impl Budgets {
    pub fn check(&self) -> Result<(), PackError> {
        let sum = self
            .system
            .saturating_add(self.task_state)
            .saturating_add(self.tail)
            .saturating_add(self.retrieval)
            .saturating_add(self.user)
            .saturating_add(self.headroom);
        if sum > self.context {
            return Err(PackError::Budgets {
                system: self.system,
                task_state: self.task_state,
                tail: self.tail,
                retrieval: self.retrieval,
                user: self.user,
                headroom: self.headroom,
                sum,
                context: self.context,
            });
        }
        Ok(())
    }
}

/// Share of the retrieval budget each type group may take.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Quotas {
    pub tool_output: f64,
    pub tool_call: f64,
    pub thinking: f64,
    pub other: f64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas { tool_output: 0.6, tool_call: 0.3, thinking: 0.2, other: 1.0 }
    }
}

impl Quotas {
    fn share(&self, g: QuotaGroup) -> f64 {
        match g {
            QuotaGroup::ToolOutput => self.tool_output,
            QuotaGroup::ToolCall => self.tool_call,
            QuotaGroup::Thinking => self.thinking,
            QuotaGroup::Other => self.other,
        }
    }
}

/// Tuning of selection and packing.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PackParams {
    /// MMR trade-off (A.2: 0.7).
    pub lambda: f64,
    /// K_max: most items MMR selects.
    pub max_items: usize,
    /// Most candidates (by score) that enter MMR.
    pub max_candidates: usize,
    /// One item may take at most this share of the retrieval budget (an excerpt otherwise).
    pub item_share: f64,
    pub quotas: Quotas,
    /// Recency half-life, in milliseconds of event time.
    pub half_life_ms: f64,
    pub weights: BaseWeights,
}

impl Default for PackParams {
    fn default() -> Self {
        PackParams {
            lambda: 0.7,
            max_items: 32,
            max_candidates: 200,
            item_share: 0.25,
            quotas: Quotas::default(),
            half_life_ms: 6.0 * 3600.0 * 1000.0,
            weights: BaseWeights::default(),
        }
    }
}

/// An entry of the agent's recent window.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // a few dozen per pack, most of them events
pub enum TailEntry {
    Event {
        event: ContextEvent,
        view: Option<ViewBlock>,
    },
    /// A pointer manifest in the window, already rendered.
    Manifest {
        id: Uuid,
        text: String,
    },
}

/// Everything a pack is built from. The same request gives the same pack, byte for byte.
#[derive(Debug, Clone)]
pub struct PackRequest {
    /// The requesting agent's session: `s1` in the pack.
    pub session_id: Uuid,
    /// The system block's text (policy prefix, the session's system events).
    pub system: String,
    /// The rendered task-state card, and how to fetch it whole if the block must cut it.
    pub task_state: Option<String>,
    pub task_ref: Option<String>,
    /// The agent's window, oldest first; the tail block takes the newest that fit.
    pub tail: Vec<TailEntry>,
    pub user_message: String,
    pub candidates: Vec<Candidate>,
    /// Query terms, for excerpts.
    pub terms: Vec<String>,
    pub task: TaskContext,
    pub budgets: Budgets,
    pub params: PackParams,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    System,
    TaskState,
    Retrieval,
    Tail,
    User,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackBlock {
    pub kind: BlockKind,
    pub text: String,
    pub tokens: usize,
    pub budget: usize,
}

/// A piece of evidence in the pack, with its provenance.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PackItem {
    pub block: BlockKind,
    pub event_id: Uuid,
    pub session_id: Uuid,
    pub seq: u64,
    pub kind: String,
    pub tool_name: Option<String>,
    pub lines: Option<LineRange>,
    pub tokens: usize,
    pub excerpt: bool,
    /// The final score (retrieval items).
    pub score: Option<f64>,
}

/// Why a candidate was left out.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Exclusion {
    /// The task-conditioned modifier is 0 (another task's item).
    ZeroScore,
    /// Already in the recent-tail block.
    InTail,
    /// Below the `max_candidates` cut by score.
    BelowCut,
    /// MMR stopped at `max_items` before reaching it.
    NotSelected,
    /// Its type group's quota of the retrieval budget was used up.
    Quota { group: QuotaGroup, quota: usize },
    /// Not even an excerpt fit what was left of the retrieval budget.
    OverBudget { remaining: usize },
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    Included { tokens: usize, excerpt: bool },
    Excluded(Exclusion),
}

/// The record of one candidate: where it came from, how it scored, what happened to it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    pub event_id: Uuid,
    pub session_id: Uuid,
    pub seq: u64,
    pub kind: String,
    pub sources: Sources,
    pub parts: ScoreParts,
    /// Position in MMR order (0 = first picked).
    pub mmr_rank: Option<usize>,
    pub outcome: Outcome,
}

/// The pack an agent sees at one turn.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RetrievalPack {
    /// The blocks joined: what goes into the model's context.
    pub text: String,
    /// Exact token count of `text`.
    pub tokens: usize,
    pub blocks: Vec<PackBlock>,
    pub items: Vec<PackItem>,
    pub decisions: Vec<Decision>,
    pub budgets: Budgets,
}

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
    let system = capped_block("## system\n", &req.system, "… (system block cut to its budget)\n", b.system, counter);
    let task = match &req.task_state {
        Some(card) => {
            let marker = match &req.task_ref {
                Some(r) => format!("… (task state cut to its budget; GetTaskState {r} has all of it)\n"),
                None => "… (task state cut to its budget)\n".to_owned(),
            };
            capped_block("", card, &marker, b.task_state, counter)
        }
        None => String::new(),
    };
    let (tail_text, tail_items) = tail_block(req, counter);
    let in_tail: Vec<Uuid> = tail_items.iter().map(|i| i.event_id).collect();
    let (mut retrieval, mut decisions) = retrieval_block(req, &in_tail, counter);

    let mut items: Vec<PackItem> = Vec::new();
    let blocks = loop {
        let blocks = [
            (BlockKind::System, &system, b.system),
            (BlockKind::TaskState, &task, b.task_state),
            (BlockKind::Retrieval, &retrieval.text, b.retrieval),
            (BlockKind::Tail, &tail_text, b.tail),
            (BlockKind::User, &user_text, b.user),
        ];
        let text: String =
            blocks.iter().filter(|(_, t, _)| !t.is_empty()).map(|(_, t, _)| t.as_str()).collect::<Vec<_>>().join("\n");
        let tokens = counter.count(&text);
        // Blocks fit on their own; only boundary effects could push the whole over, and then the
        // retrieval block gives way.
        if tokens + b.headroom <= b.context || retrieval.items.is_empty() {
            items.extend(retrieval.items.iter().cloned());
            items.extend(tail_items.iter().cloned());
            let blocks = blocks
                .iter()
                .map(|(kind, t, budget)| PackBlock {
                    kind: *kind,
                    text: (*t).clone(),
                    tokens: counter.count(t),
                    budget: *budget,
                })
                .collect::<Vec<_>>();
            break (blocks, text, tokens);
        }
        retrieval.drop_last(&mut decisions, counter);
    };
    let (blocks, text, tokens) = blocks;
    Ok(RetrievalPack { text, tokens, blocks, items, decisions, budgets: b })
}

/// `title` + `body`, cut on line boundaries (then mid-line) to `budget` with `marker` appended.
fn capped_block(title: &str, body: &str, marker: &str, budget: usize, counter: &dyn TokenCounter) -> String {
    if body.trim().is_empty() {
        return String::new();
    }
    let body = body.trim_end_matches('\n');
    let whole = format!("{title}{body}\n");
    if counter.count(&whole) <= budget {
        return whole;
    }
    let room = budget.saturating_sub(counter.count(title) + counter.count(marker) + 1);
    let head = truncate_lines(counter, &whole[title.len()..], room);
    let text = format!("{title}{head}{marker}");
    if counter.count(&text) <= budget { text } else { String::new() }
}

/// The newest entries of the window that fit the tail budget, oldest first. The newest event is
/// always there, cut to the budget if it is larger.
fn tail_block(req: &PackRequest, counter: &dyn TokenCounter) -> (String, Vec<PackItem>) {
    let budget = req.budgets.tail;
    let mut aliases = SessionAliases::starting_with(req.session_id);
    let legend = format!("{}\n", aliases.legend());
    let fixed = counter.count(TAIL_HEADER) + counter.count(&legend);
    let mut used = fixed;
    let mut chosen: Vec<(String, Option<PackItem>)> = Vec::new();
    for entry in req.tail.iter().rev() {
        let (text, item) = match entry {
            TailEntry::Manifest { text, .. } => (format!("{}\n", text.trim_end_matches('\n')), None),
            TailEntry::Event { event, view } => {
                let alias = aliases.alias(event.session_id);
                let text = memex_pointer::render_event(&alias, event, view.as_ref());
                (text, Some(item_of(BlockKind::Tail, event, view.as_ref(), 0, false, None)))
            }
        };
        let cost = counter.count(&text) + 1;
        if used + cost <= budget {
            used += cost;
            chosen.push((text, item));
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
                chosen.push((r.text, Some(item_of(BlockKind::Tail, event, view.as_ref(), 0, true, None))));
            }
        }
        break;
    }
    chosen.reverse();
    loop {
        if chosen.is_empty() {
            return (String::new(), Vec::new());
        }
        let mut text = format!("{TAIL_HEADER}{legend}");
        for (t, _) in &chosen {
            text.push('\n');
            text.push_str(t);
        }
        let tokens = counter.count(&text);
        if tokens <= budget {
            let items = chosen
                .into_iter()
                .filter_map(|(t, item)| {
                    item.map(|mut i| {
                        i.tokens = counter.count(&t);
                        i
                    })
                })
                .collect();
            return (text, items);
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
    }
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
}

impl Retrieval {
    fn assemble(&mut self) {
        if self.items.is_empty() {
            self.text.clear();
            return;
        }
        let mut text = format!("{RETRIEVAL_HEADER}{}\n", self.legend);
        for p in &self.parts {
            text.push('\n');
            text.push_str(p);
        }
        self.text = text;
    }

    /// Drops the lowest-ranked item (the last added), recording why.
    fn drop_last(&mut self, decisions: &mut [Decision], counter: &dyn TokenCounter) {
        if let (Some(_), Some(_), Some(d)) = (self.items.pop(), self.parts.pop(), self.decision_of.pop()) {
            decisions[d].outcome = Outcome::Excluded(Exclusion::OverBudget { remaining: 0 });
        }
        let _ = counter;
        self.assemble();
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
    let sketches: HashMap<usize, Sketch> = eligible.iter().map(|&i| (i, Sketch::of(&cands[i].event.content))).collect();
    let mmr_items: Vec<MmrItem<'_>> = eligible
        .iter()
        .map(|i| MmrItem { score: parts[*i].score, sketch: &sketches[i], embedding: cands[*i].embedding.as_deref() })
        .collect();
    let local_order: Vec<usize> = (0..eligible.len()).collect();
    let picked = mmr_select(&mmr_items, &local_order, p.max_items, p.lambda);

    let mut aliases = SessionAliases::starting_with(req.session_id);
    let mut r =
        Retrieval { text: String::new(), items: vec![], parts: vec![], decision_of: vec![], legend: aliases.legend() };
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
        let rendered = render_item(&alias, &c.event, c.view.as_ref(), &req.terms, cap, counter);
        match rendered {
            Some(item) => {
                used += item.tokens + 1 + legend_growth;
                if legend_growth > 0 {
                    legend_tokens += legend_growth;
                    r.legend = new_legend;
                }
                *group_used.entry(group).or_insert(0) += item.tokens;
                decisions[i].outcome = Outcome::Included { tokens: item.tokens, excerpt: item.excerpt };
                r.items.push(item_of(
                    BlockKind::Retrieval,
                    &c.event,
                    c.view.as_ref(),
                    item.tokens,
                    item.excerpt,
                    Some(parts[i].score),
                ));
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
    r.assemble();
    while !r.items.is_empty() && counter.count(&r.text) > budget {
        r.drop_last(&mut decisions, counter);
        let a = alias_set(req.session_id, &r.items);
        if a.legend() != r.legend {
            r.legend = a.legend();
            r.assemble();
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
