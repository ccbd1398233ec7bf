//! Agents' windows: what is resident, compaction (A.4) and manifest expansion.
use std::collections::HashMap;

use memex_compaction::{
    Compaction, CompactionParams, PointerManifest, Window, WindowEvent, WindowManifest, plan_compaction,
};
use memex_event::{NamespaceId, SessionId};
use memex_pointer::{ContextEvent, SeqRange, render_event, seq_runs};
use memex_store::{Event, Eviction, ManifestRow, NewCompaction, SeqRange as StoreSeqRange, StoreError};
use memex_tokens::{TokenCounter, Tokenizer};
use uuid::Uuid;

use crate::{ContextEngine, ContextError, Result};

/// Attempts before a compaction gives up on a window that keeps changing.
const COMPACT_ATTEMPTS: usize = 5;
/// Events read per page when loading a whole session.
const PAGE: u32 = 5000;

#[derive(Debug, Clone, PartialEq)]
pub struct CompactRequest {
    pub session_id: Uuid,
    /// B_ctx of the agent's window.
    pub window_budget: usize,
    pub headroom: usize,
    pub protected_turns: usize,
    /// Tokens of a system prompt that lives outside the store (counted, never evicted).
    pub system_tokens: usize,
    pub tokenizer: Option<Tokenizer>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompactOutcome {
    /// False when the window already fit or nothing could be evicted.
    pub compacted: bool,
    pub manifest: Option<ManifestRow>,
    pub evicted: Vec<Uuid>,
    pub tokens_before: usize,
    pub tokens_after: usize,
    pub target: usize,
    pub fits: bool,
    pub window_version: u64,
    /// How the victims' indexing was checked.
    pub index_check: &'static str,
}

/// A session's window as it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ResidentWindow {
    pub version: u64,
    /// Resident events, in seq order.
    pub events: Vec<ContextEvent>,
    /// Manifests in the window, oldest first.
    pub manifests: Vec<ManifestRow>,
    pub evictions: Vec<Eviction>,
    /// Tokens of the resident events and manifests as rendered in the window.
    pub tokens: usize,
}

/// A manifest and (a page of) the events it evicted.
#[derive(Debug, Clone, PartialEq)]
pub struct Expansion {
    pub manifest: ManifestRow,
    pub events: Vec<Event>,
    pub next_page_token: Option<String>,
}

pub(crate) fn is_evicted(evictions: &[Eviction], seq: u64) -> bool {
    // Sorted by first_seq and disjoint: the candidate is the last run starting at or before seq.
    let i = evictions.partition_point(|e| e.first_seq <= seq);
    i > 0 && evictions[i - 1].last_seq >= seq
}

/// The manifest a stored row holds.
pub fn parse_manifest(row: &ManifestRow) -> Result<PointerManifest> {
    serde_json::from_value(row.body.clone())
        .map_err(|e| ContextError::Corrupt { what: "pointer manifest", message: e.to_string() })
}

impl ContextEngine {
    /// Every event of a session, in seq order.
    async fn all_events(&self, namespace_id: Uuid, session_id: Uuid) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .store
                .events_in_range(namespace_id, session_id, StoreSeqRange { from: 1, to: None }, PAGE, token.as_deref())
                .await?;
            out.extend(page.events);
            match page.next_page_token {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// The window of a session: resident events, manifests, evicted runs and token total.
    pub async fn window(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        tokenizer: Option<Tokenizer>,
    ) -> Result<ResidentWindow> {
        let (w, evictions, manifests) = self.store.window(namespace_id, session_id).await?;
        let events = self.all_events(namespace_id, session_id).await?;
        let resident: Vec<Event> = events.into_iter().filter(|e| !is_evicted(&evictions, e.seq)).collect();
        let events = self.context_events(namespace_id, &resident).await?;
        let counter = self.counter(tokenizer.unwrap_or(self.cfg.tokenizer));
        let views = self.views(namespace_id, &events, &[], &HashMap::new()).await?;
        let tokens =
            events.iter().zip(&views).map(|(e, v)| counter.count(&render_event("s1", e, v.as_ref()))).sum::<usize>()
                + manifests.iter().map(|m| counter.count(&m.rendered)).sum::<usize>();
        Ok(ResidentWindow { version: w.version, events, manifests, evictions, tokens })
    }

    /// Compacts a session's window (A.4) if it is over `budget − headroom`.
    pub async fn compact(&self, namespace_id: Uuid, req: CompactRequest) -> Result<CompactOutcome> {
        if req.headroom >= req.window_budget {
            return Err(ContextError::invalid(
                "headroom",
                format!("{} leaves nothing of window_budget {}", req.headroom, req.window_budget),
            ));
        }
        for _ in 0..COMPACT_ATTEMPTS {
            match self.compact_once(namespace_id, &req).await {
                Err(ContextError::Store(StoreError::StaleWindow(_))) => continue,
                other => return other,
            }
        }
        Err(ContextError::WindowContention(req.session_id))
    }

    async fn compact_once(&self, namespace_id: Uuid, req: &CompactRequest) -> Result<CompactOutcome> {
        let session_id = req.session_id;
        let tokenizer = req.tokenizer.unwrap_or(self.cfg.tokenizer);
        let counter = self.counter(tokenizer);
        let (w, evictions, manifest_rows) = self.store.window(namespace_id, session_id).await?;
        let all = self.all_events(namespace_id, session_id).await?;
        let resident: Vec<Event> = all.into_iter().filter(|e| !is_evicted(&evictions, e.seq)).collect();
        let events = self.context_events(namespace_id, &resident).await?;
        let views = self.views(namespace_id, &events, &[], &HashMap::new()).await?;
        // The task-state card is outside the evictable window, like the system prompt.
        let task = self.tasks_of(namespace_id, &[session_id]).await?.remove(&session_id).flatten();
        let (task_version, card_tokens) = match &task {
            Some(t) => match self.store.task_state(namespace_id, t, None).await {
                Ok(row) => (Some(row.version), counter.count(&row.rendered)),
                Err(StoreError::TaskNotFound(_)) => (None, 0),
                Err(e) => return Err(e.into()),
            },
            None => (None, 0),
        };
        let window = Window {
            events: events
                .into_iter()
                .zip(views)
                .map(|(event, view)| {
                    let tokens = counter.count(&render_event("s1", &event, view.as_ref()));
                    WindowEvent { lines: view.map(|v| v.range), event, tokens }
                })
                .collect(),
            manifests: manifest_rows
                .iter()
                .map(|m| Ok(WindowManifest { manifest: parse_manifest(m)?, tokens: counter.count(&m.rendered) }))
                .collect::<Result<Vec<_>>>()?,
        };
        let params = CompactionParams {
            window_budget: req.window_budget,
            headroom: req.headroom,
            protected_turns: req.protected_turns,
            fixed_tokens: req.system_tokens + card_tokens,
            manifest_max_tokens: self.cfg.manifest_max_tokens,
        };
        let manifest_id = Uuid::now_v7();
        let plan = match plan_compaction(&window, &params, manifest_id, session_id, task_version, &counter) {
            Compaction::AlreadyFits { tokens, target } | Compaction::NothingEvictable { tokens, target } => {
                return Ok(CompactOutcome {
                    compacted: false,
                    manifest: None,
                    evicted: Vec::new(),
                    tokens_before: tokens,
                    tokens_after: tokens,
                    target,
                    fits: tokens <= target,
                    window_version: w.version,
                    index_check: "not needed",
                });
            }
            Compaction::Planned(plan) => plan,
        };
        // Layer-1 invariant (A.4 line 3): the victims are persisted — and indexed, when an index
        // is plugged in — before they leave the window.
        self.store.events_by_ids(namespace_id, &plan.victims).await?;
        let index_check = match &self.index {
            Some(index) => {
                // The victims are committed events of this session: once its index has caught up
                // with the store, it has them.
                index.ensure_indexed(NamespaceId(namespace_id), &[SessionId(session_id)]).await?;
                "persisted and indexed"
            }
            None => "persisted (no search index plugged in)",
        };
        let victim_seqs: Vec<u64> =
            window.events.iter().filter(|e| plan.victims.contains(&e.event.id)).map(|e| e.event.seq).collect();
        let evicted: Vec<(u64, u64)> = seq_runs(victim_seqs).into_iter().map(|r: SeqRange| (r.first, r.last)).collect();
        let mut active: Vec<Uuid> =
            w.manifests.iter().copied().filter(|m| !plan.manifest.absorbed.contains(m)).collect();
        active.push(manifest_id);
        let m = &plan.manifest;
        let body = serde_json::to_value(m)
            .map_err(|e| ContextError::Corrupt { what: "pointer manifest", message: e.to_string() })?;
        let (first_seq, last_seq) =
            (m.spans.first().map_or(0, |s| s.seqs.first), m.spans.last().map_or(0, |s| s.seqs.last));
        let version = self
            .store
            .commit_compaction(
                namespace_id,
                NewCompaction {
                    session_id,
                    expected_version: w.version,
                    manifest_id,
                    task_state_version: task_version,
                    first_seq,
                    last_seq,
                    evicted_events: m.evicted_events,
                    body,
                    rendered: plan.rendered.clone(),
                    tokens: plan.manifest_tokens as u32,
                    tokenizer: tokenizer.name().to_owned(),
                    evicted,
                    manifests: active,
                },
            )
            .await?;
        let manifest = self.store.manifest(namespace_id, manifest_id).await?;
        Ok(CompactOutcome {
            compacted: true,
            manifest: Some(manifest),
            evicted: plan.victims.clone(),
            tokens_before: plan.tokens_before,
            tokens_after: plan.tokens_after,
            target: plan.target,
            fits: plan.fits,
            window_version: version,
            index_check,
        })
    }

    /// A manifest and the events it evicted, `page_size` at a time, in seq order.
    pub async fn expand_manifest(
        &self,
        namespace_id: Uuid,
        manifest_id: Uuid,
        page_size: u32,
        page_token: Option<&str>,
    ) -> Result<Expansion> {
        let row = self.store.manifest(namespace_id, manifest_id).await?;
        let manifest = parse_manifest(&row)?;
        let mut from = match page_token {
            Some(t) => t
                .strip_prefix("seq:")
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| ContextError::invalid("page_token", "is not a token this server issued"))?,
            None => 0,
        };
        let mut events = Vec::new();
        let mut next = None;
        for span in &manifest.spans {
            if span.seqs.last < from {
                continue;
            }
            from = from.max(span.seqs.first);
            let want = page_size.saturating_sub(events.len() as u32);
            let page = self
                .store
                .events_in_range(
                    namespace_id,
                    row.session_id,
                    StoreSeqRange { from, to: Some(span.seqs.last) },
                    want,
                    None,
                )
                .await?;
            events.extend(page.events);
            if events.len() as u32 >= page_size {
                let last = events.last().map_or(from, |e| e.seq);
                if manifest.spans.iter().any(|s| s.seqs.last > last) {
                    next = Some(format!("seq:{}", last + 1));
                }
                break;
            }
        }
        Ok(Expansion { manifest: row, events, next_page_token: next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_lookup() {
        let m = Uuid::nil();
        let ev = [
            Eviction { first_seq: 3, last_seq: 5, manifest_id: m },
            Eviction { first_seq: 9, last_seq: 9, manifest_id: m },
        ];
        let evicted: Vec<u64> = (1..12).filter(|s| is_evicted(&ev, *s)).collect();
        assert_eq!(evicted, vec![3, 4, 5, 9]);
        assert!(!is_evicted(&[], 1));
    }
}
