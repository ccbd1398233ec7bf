//! BuildPack (A.2): gather candidates and the agent's window from the store and the search
//! sources, let `memex-pack` score, select and pack them, store the pack with every decision.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use memex_event::{ArtifactId, EventKind, FieldError, NamespaceId, Seq, SessionId};
use memex_pack::{
    AgentRole, ArtifactMatch, BlockKind, Budgets, Candidate, PackError, PackRequest, Relation, RetrievalPack, Sources,
    TailEntry, TaskContext, build_pack,
};
use memex_pointer::{ContextEvent, ViewBlock};
use memex_rank::query_terms;
use memex_store::{Event, PackChunk, PackRow, SeqRange as StoreSeqRange, StoreError};
use memex_task::{KeyPointer, TaskState};
use memex_tokens::Tokenizer;
use uuid::Uuid;

use crate::layout::{layout_key, read_layout, write_layout};
use crate::recent::{TailPages, reaches_start};
use crate::seams::SearchQuery;
use crate::stats::PhaseClock;
use crate::stored::{ChunkId, Stored, decompress_chunk, store_pack};
use crate::task::parse_state;
use crate::window::{is_evicted, parse_manifest};
use crate::{ContextEngine, ContextError, POINTER_LIMIT, Result, STANDING_LIMIT};

/// Newest events read per round trip for the recent tail (the first read takes two pages: one
/// page rarely fills the default tail budget, and each round trip costs more than the rows).
const TAIL_PAGE: u32 = 48;

/// Newest system events of the session read for the system block.
const SYSTEM_EVENTS: u32 = 50;

/// A BuildPack request.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BuildPack {
    pub session_id: Uuid,
    /// The task the pack is conditioned on; the session's task when None.
    pub task_id: Option<String>,
    pub user_message: String,
    /// A system/policy prefix kept outside the store, placed before the session's system events.
    pub system_prompt: String,
    /// The engine's default budgets when None.
    pub budgets: Option<Budgets>,
    pub tokenizer: Option<Tokenizer>,
    /// Derived from the task's delegations when None: a task that delegated is a planner, a
    /// delegated task an executor.
    pub role: Option<AgentRole>,
    /// Ask for superseded versions too.
    pub historical: bool,
    /// Whose working set fills the memory block (with a memory budget); the session's id when None.
    #[serde(default)]
    pub memory_reader: Option<String>,
    /// Blocks that must be in the pack whole (system, task state, memory): the pack is refused
    /// rather than built with one of them cut or left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<BlockKind>,
}

/// A stored pack.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltPack {
    pub id: Uuid,
    pub session_id: Uuid,
    pub task_id: Option<String>,
    pub task_state_version: Option<u64>,
    pub tokenizer: Tokenizer,
    pub role: AgentRole,
    pub pack: RetrievalPack,
    pub created_at: DateTime<Utc>,
    /// Whether the search behind it used vectors (see `SourceHits::vectors_used`).
    pub vectors_used: bool,
}

/// What is recorded beside a pack: the request and what it was resolved to.
#[derive(serde::Serialize, serde::Deserialize)]
struct Recorded {
    request: BuildPack,
    task_id: Option<String>,
    task_state_version: Option<u64>,
    tokenizer: Tokenizer,
    role: AgentRole,
    sources: Vec<String>,
    /// Absent in packs stored before it was recorded.
    #[serde(default)]
    vectors_used: bool,
}

fn pack_error(e: PackError) -> ContextError {
    let text = e.to_string();
    let (field, message) = text.split_once(": ").unwrap_or(("budgets", text.as_str()));
    match e {
        PackError::Required { .. } => ContextError::Precondition { field: field.into(), message: message.into() },
        _ => ContextError::Invalid(FieldError::new(field, message)),
    }
}

/// Accumulates candidates by event id, merging what several sources said.
#[derive(Default)]
struct Gathered {
    events: BTreeMap<Uuid, (Arc<Event>, Sources)>,
    /// The part of an event's artifact the search matched best.
    artifact_matches: HashMap<Uuid, ArtifactMatch>,
}

impl Gathered {
    fn add(&mut self, events: impl IntoIterator<Item = Arc<Event>>, sources: Sources) {
        for e in events {
            match self.events.get_mut(&e.id) {
                Some((_, s)) => *s = s.merge(sources),
                None => {
                    self.events.insert(e.id, (e, sources));
                }
            }
        }
    }
}

/// The `<context-topics>` hint takes at most this share of the memory budget, and at most
/// [`MAX_HINT_TOKENS`] (§3.6: 2K); the working set takes the rest.
const HINT_SHARE: usize = 4;
const MAX_HINT_TOKENS: usize = 2_000;

impl ContextEngine {
    /// The memory block's text for a pack with a memory budget.
    async fn memory_block(&self, namespace_id: Uuid, req: &BuildPack, budget: usize) -> Result<String> {
        if budget == 0 {
            return Ok(String::new());
        }
        let Some(memory) = &self.memory else {
            return Err(ContextError::invalid(
                "budgets.memory",
                "memory is disabled on this server ([memory] enabled = false)",
            ));
        };
        let reader = req.memory_reader.clone().unwrap_or_else(|| req.session_id.to_string());
        let hint = (budget / HINT_SHARE).clamp(1, MAX_HINT_TOKENS);
        memory.render(namespace_id, &reader, hint, budget.saturating_sub(hint)).await
    }

    /// Builds, stores and returns the pack for one turn.
    pub async fn build_pack(&self, namespace_id: Uuid, req: BuildPack) -> Result<BuiltPack> {
        let mut clock = PhaseClock::start();
        let tokenizer = req.tokenizer.unwrap_or(self.cfg.tokenizer);
        let counter = self.counter(tokenizer);
        let budgets = req.budgets.unwrap_or(self.cfg.budgets);
        budgets.check().map_err(pack_error)?;
        let session_id = req.session_id;
        // Round trip 1 (concurrent): the session, its task and its window, the newest events
        // unless the session's last pack kept them (then only what was appended since is read,
        // once the session's head is known).
        let cached_tail = self.cached_tail(namespace_id, session_id);
        let (ctx, fresh) =
            tokio::try_join!(self.store.pack_context(namespace_id, session_id, req.task_id.as_deref()), async {
                match cached_tail {
                    Some(_) => Ok(None),
                    None => self.read_newest(namespace_id, session_id, 2 * TAIL_PAGE).await.map(Some),
                }
            })?;
        // A compacted session's manifests (the window's row came with the rest; no ids, no read).
        let evictions = &ctx.evictions;
        let manifest_rows = self.store.manifests(namespace_id, &ctx.window.manifests).await?;
        let task_id = ctx.task_id.clone();
        if let Some(t) = &ctx.session_task {
            self.session_tasks.insert((namespace_id, session_id), Some(t.clone()));
        }
        let state = match &ctx.state {
            Some(row) => parse_state(row)?,
            None => TaskState::default(),
        };
        let mut related: Vec<(String, Relation)> = Vec::new();
        if let Some(p) = &ctx.parent {
            related.push((p.clone(), Relation::Parent));
        }
        related.extend(ctx.children.iter().map(|c| (c.clone(), Relation::Child)));
        let role = req.role.unwrap_or(if !ctx.children.is_empty() {
            AgentRole::Planner
        } else if ctx.parent.is_some() {
            AgentRole::Executor
        } else {
            AgentRole::Solo
        });
        let mut scope: Vec<Uuid> = vec![session_id];
        for (s, t) in &ctx.sessions {
            self.session_tasks.insert((namespace_id, *s), Some(t.clone()));
            if !scope.contains(s) {
                scope.push(*s);
            }
        }
        // The sessions' last seqs, read with the rest: the search's catch-up check and the
        // full-view lookups need not read them again.
        let mut heads: HashMap<Uuid, u64> = ctx.heads.iter().copied().collect();
        heads.insert(session_id, ctx.head);
        let scope_heads: Vec<(Uuid, u64)> = scope.iter().map(|s| (*s, heads.get(s).copied().unwrap_or(0))).collect();
        clock.lap(0);

        // The agent's window: the recent tail (resident events and manifests) and the system block.
        // Read more of the session only while the tail budget could still take it.
        let pages = TailPages {
            first: 2 * TAIL_PAGE,
            page: TAIL_PAGE,
            max_events: self.cfg.tail_events as usize,
            wanted_bytes: budgets.tail.saturating_mul(6),
        };
        let newest = self.tail_for_pack(namespace_id, session_id, ctx.head, cached_tail, fresh, &pages).await?;
        // Every event of the session is in the tail's reach: all manifests belong in the window.
        let complete = reaches_start(&newest);
        let tail_events: Vec<&Event> = newest.iter().rev().filter(|e| !is_evicted(evictions, e.seq)).collect();
        // Placed in the full view together with the candidates, below: one lookup of the session.
        let tail_ctx: Vec<ContextEvent> = self
            .context_events(namespace_id, &tail_events)
            .await?
            .into_iter()
            .filter(|e| e.kind != EventKind::System)
            .collect();
        let oldest_tail = tail_ctx.first().map_or(u64::MAX, |e| e.seq);
        let mut tail_manifests: Vec<(u64, TailEntry)> = Vec::new();
        let mut manifests = Vec::with_capacity(manifest_rows.len());
        for m in &manifest_rows {
            let parsed = parse_manifest(m)?;
            if parsed.position() >= oldest_tail || complete {
                let position = parsed.position();
                tail_manifests.push((position, TailEntry::Manifest { id: m.id, position, text: m.rendered.clone() }));
            }
            manifests.push(parsed);
        }
        clock.lap(1);

        // Candidates (A.2 lines 2–6), gathered concurrently: key pointers, standing items,
        // manifest anchors, search.
        let mut query_text = req.user_message.clone();
        for line in state.goals.iter().chain(&state.next_actions).chain(&state.open_loops) {
            query_text.push('\n');
            query_text.push_str(line);
        }
        let terms = query_terms(&query_text);
        let anchors: Vec<Uuid> = manifests.iter().flat_map(|m| m.anchors.iter().map(|a| a.event_id)).collect();
        let q = SearchQuery {
            namespace_id,
            text: query_text.clone(),
            terms: terms.clone(),
            sessions: scope.clone(),
            limit: self.cfg.search_limit,
            heads: Some(scope_heads.clone()),
        };
        // The session's last layout, when it was for packs like this one: its stable evidence is
        // read back (from the events cache, mostly) so the pack can keep it in place.
        let params = self.cfg.pack_params();
        let layout_key = layout_key(tokenizer, task_id.as_deref(), role, &budgets, &params);
        let layout = ctx.last_layout.as_deref().and_then(|b| read_layout(b, &layout_key));
        let stable_ids: Vec<Uuid> =
            layout.as_ref().map_or_else(Vec::new, |l| l.stable.iter().map(|s| s.event_id).collect());
        let (pointed, (standing, system_events), anchored, (searched, vectors_used), stable) = tokio::try_join!(
            self.expand_pointers(namespace_id, &state, &scope),
            // The session's system events (the system block) come in the same round trip.
            self.standing_at(namespace_id, &scope, scope_heads, STANDING_LIMIT, session_id, SYSTEM_EVENTS),
            async {
                if anchors.is_empty() { Ok(Vec::new()) } else { self.events_by_ids(namespace_id, &anchors).await }
            },
            self.search(namespace_id, &q),
            async {
                if stable_ids.is_empty() { Ok(Vec::new()) } else { self.events_by_ids(namespace_id, &stable_ids).await }
            },
        )?;
        clock.lap(2);
        let mut system = req.system_prompt.trim_end().to_owned();
        for e in system_events.iter().rev() {
            if !system.is_empty() {
                system.push('\n');
            }
            system.push_str(e.content.trim_end());
        }
        let mut g = Gathered::default();
        g.add(pointed, Sources { pointer: true, ..Sources::default() });
        g.add(standing.into_iter().map(Arc::new), Sources { pinned: true, ..Sources::default() });
        g.add(anchored, Sources { anchor: true, ..Sources::default() });
        g.add(stable, Sources::default());
        let mut embeddings: HashMap<Uuid, Vec<f32>> = HashMap::new();
        for (h, e) in searched {
            g.add([e], Sources { lexical: h.lexical, vector: h.vector, ..Sources::default() });
            if let Some(emb) = h.embedding {
                embeddings.insert(h.event_id, emb);
            }
            if let Some(m) = h.artifact_match {
                g.artifact_matches.insert(h.event_id, m);
            }
        }
        clock.lap(3);
        let (candidates, tail_views) =
            self.candidates(namespace_id, task_id.as_deref(), g, embeddings, &tail_ctx, &heads).await?;
        let mut tail: Vec<(u64, TailEntry)> = tail_ctx
            .into_iter()
            .zip(tail_views)
            .map(|(event, view)| (event.seq, TailEntry::Event { event, view }))
            .chain(tail_manifests)
            .collect();
        tail.sort_by_key(|(pos, e)| (*pos, matches!(e, TailEntry::Event { .. })));
        clock.lap(4);

        let memory = self.memory_block(namespace_id, &req, budgets.memory).await?;
        let task_card = ctx.state.as_ref().map(|r| r.rendered.clone());
        let request = PackRequest {
            session_id: req.session_id,
            system,
            task_state: task_card,
            task_ref: ctx.state.as_ref().map(|r| format!("{} v{}", r.task_id, r.version)),
            memory,
            tail: tail.into_iter().map(|(_, e)| e).collect(),
            user_message: req.user_message.clone(),
            candidates,
            terms,
            task: TaskContext {
                task_id: task_id.clone(),
                phase: state.phase,
                self_assessment: state.self_assessment,
                premises: state.premises.clone(),
                role,
                related,
                historical: req.historical,
            },
            budgets,
            params,
            required: req.required.clone(),
            layout,
        };
        let pack = build_pack(&request, &counter).map_err(pack_error)?;
        clock.lap(5);

        let id = Uuid::now_v7();
        let task_state_version = ctx.state.as_ref().map(|r| r.version);
        let recorded = Recorded {
            request: req.clone(),
            task_id: task_id.clone(),
            task_state_version,
            tokenizer,
            role,
            sources: self.source_names().into_iter().map(str::to_owned).collect(),
            vectors_used,
        };
        let json = |v: serde_json::Result<serde_json::Value>| {
            v.map_err(|e| ContextError::Corrupt { what: "pack", message: e.to_string() })
        };
        // Only the chunks not known to be stored already travel (and are compressed).
        let stored = store_pack(&pack, &|c| self.stored_chunks.contains_key(&(namespace_id, *c)))?;
        let chunks = stored.new.into_iter().map(|(id, body)| PackChunk { id, body }).collect();
        let row = PackRow {
            id,
            session_id: req.session_id,
            task_id: task_id.clone(),
            task_state_version,
            tokenizer: tokenizer.name().to_owned(),
            tokens: pack.tokens as u32,
            request: json(serde_json::to_value(&recorded))?,
            pack: stored.manifest,
            chunks,
            created_at: Utc::now(),
            layout: pack.layout.as_ref().and_then(|l| write_layout(&layout_key, l)),
        };
        let created_at = match &self.writer {
            Some(w) => w.write(namespace_id, row).await?,
            None => self.store.insert_pack(namespace_id, &row).await?,
        };
        for c in stored.ids {
            self.stored_chunks.insert((namespace_id, c), ());
        }
        clock.lap(6);
        clock.finish();
        Ok(BuiltPack {
            id,
            session_id: req.session_id,
            task_id,
            task_state_version,
            tokenizer,
            role,
            pack,
            created_at,
            vectors_used,
        })
    }

    /// A stored pack, exactly as it was built.
    pub async fn pack(&self, namespace_id: Uuid, id: Uuid) -> Result<BuiltPack> {
        let row = self.store.pack(namespace_id, id).await?;
        let corrupt = |e: serde_json::Error| ContextError::Corrupt { what: "pack", message: e.to_string() };
        let recorded: Recorded = serde_json::from_value(row.request).map_err(corrupt)?;
        let stored = Stored::read(&row.pack)?;
        let ids = stored.chunk_ids()?;
        let bodies: HashMap<ChunkId, Vec<u8>> = if ids.is_empty() {
            HashMap::new()
        } else {
            self.store.pack_chunks(namespace_id, &ids).await?.into_iter().map(|c| (c.id, c.body)).collect()
        };
        let pack = stored.into_pack(|c| match bodies.get(c) {
            Some(body) => decompress_chunk(c, body),
            None => Err(ContextError::Corrupt { what: "pack", message: format!("pack {id}: a chunk is missing") }),
        })?;
        for c in &ids {
            self.stored_chunks.insert((namespace_id, *c), ());
        }
        Ok(BuiltPack {
            id: row.id,
            session_id: row.session_id,
            task_id: row.task_id,
            task_state_version: row.task_state_version,
            tokenizer: recorded.tokenizer,
            role: recorded.role,
            pack,
            created_at: row.created_at,
            vectors_used: recorded.vectors_used,
        })
    }

    /// Pointer expansion from the task state (A.2 line 4).
    async fn expand_pointers(&self, namespace_id: Uuid, state: &TaskState, scope: &[Uuid]) -> Result<Vec<Arc<Event>>> {
        let mut out = Vec::new();
        let ids: Vec<Uuid> = state
            .key_pointers
            .iter()
            .filter_map(|p| if let KeyPointer::Event(id) = p { Some(*id) } else { None })
            .collect();
        if !ids.is_empty() {
            match self.events_by_ids(namespace_id, &ids).await {
                Ok(events) => out.extend(events),
                // Pointers are checked when the state is written; an id that no longer resolves
                // cannot happen in an append-only store, but must not break every pack if it does.
                Err(ContextError::Store(StoreError::EventNotFound { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        for p in &state.key_pointers {
            match p {
                KeyPointer::Event(_) => {}
                KeyPointer::Artifact(a) => {
                    if let Ok(id) = a.parse::<ArtifactId>() {
                        out.extend(
                            self.store
                                .events_with_artifact(namespace_id, scope, id.as_bytes(), POINTER_LIMIT)
                                .await?
                                .into_iter()
                                .map(Arc::new),
                        );
                    }
                }
                KeyPointer::Span { session_id, seqs } => {
                    let range = StoreSeqRange { from: seqs.first, to: Some(seqs.last) };
                    match self.store.events_in_range(namespace_id, *session_id, range, POINTER_LIMIT, None).await {
                        Ok(page) => out.extend(page.events.into_iter().map(Arc::new)),
                        Err(StoreError::SessionNotFound(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(out)
    }

    /// Every search source's hits, with their events; the store scan's when none is plugged in.
    /// The search's hits with their events, and whether any source ranked by vectors.
    async fn search(
        &self,
        namespace_id: Uuid,
        q: &SearchQuery,
    ) -> Result<(Vec<(crate::seams::SearchHit, Arc<Event>)>, bool)> {
        if self.sources.is_empty() {
            return Ok((self.scan(namespace_id, q).await?, false));
        }
        let mut out = Vec::new();
        let mut vectors_used = false;
        for source in self.sources.iter() {
            let found = source.search(q).await?;
            vectors_used |= found.vectors_used;
            let ids: Vec<Uuid> = found.hits.iter().map(|h| h.event_id).collect();
            if ids.is_empty() {
                continue;
            }
            let events = self.events_by_ids(namespace_id, &ids).await?;
            out.extend(found.hits.into_iter().zip(events));
        }
        Ok((out, vectors_used))
    }

    /// Turns gathered events into candidates: task, supersession, premises, full-view blocks.
    /// Also places the `tail` events in the full view (one lookup per session for both).
    async fn candidates(
        &self,
        namespace_id: Uuid,
        task_id: Option<&str>,
        g: Gathered,
        mut embeddings: HashMap<Uuid, Vec<f32>>,
        tail: &[ContextEvent],
        heads: &HashMap<Uuid, u64>,
    ) -> Result<(Vec<Candidate>, Vec<Option<ViewBlock>>)> {
        let mut artifact_matches = g.artifact_matches;
        let (events, sources): (Vec<Arc<Event>>, Vec<Sources>) = g.events.into_values().unzip();
        let ctx = self.context_events(namespace_id, &events).await?;
        // Supersession is read from the candidates themselves: an event that supersedes another is
        // a standing item of its task, so every superseding event in scope is among them.
        let superseded: std::collections::HashSet<Uuid> = ctx.iter().filter_map(|e| e.flags.supersedes).collect();
        let mut premises: HashMap<u64, std::sync::Arc<Vec<String>>> = HashMap::new();
        if let Some(t) = task_id {
            let mut versions: Vec<u64> =
                ctx.iter().filter(|e| e.task_id.as_deref() == Some(t)).filter_map(|e| e.task_state_version).collect();
            versions.sort_unstable();
            versions.dedup();
            premises.extend(self.premises_of(namespace_id, t, &versions).await?);
        }
        let mut views = self.views(namespace_id, tail, &ctx, heads).await?;
        let candidate_views = views.split_off(tail.len());
        let candidates = ctx
            .into_iter()
            .zip(sources)
            .zip(candidate_views)
            .map(|((event, sources), view)| {
                let p = (event.task_id.as_deref() == task_id && task_id.is_some())
                    .then(|| event.task_state_version.and_then(|v| premises.get(&v)).map(|p| p.as_ref().clone()))
                    .flatten();
                Candidate {
                    superseded: superseded.contains(&event.id),
                    embedding: embeddings.remove(&event.id),
                    artifact_match: artifact_matches.remove(&event.id),
                    premises: p,
                    view,
                    sources,
                    event,
                }
            })
            .collect();
        Ok((candidates, views))
    }

    /// Full-view blocks of the events of `a` then `b` (of any sessions), in that order. `heads`:
    /// sessions' last seqs the caller has just read (see [`memex_pointer::FullView::blocks`]).
    pub(crate) async fn views(
        &self,
        namespace_id: Uuid,
        a: &[ContextEvent],
        b: &[ContextEvent],
        heads: &HashMap<Uuid, u64>,
    ) -> Result<Vec<Option<ViewBlock>>> {
        let events: Vec<&ContextEvent> = a.iter().chain(b).collect();
        let mut by_session: BTreeMap<Uuid, Vec<usize>> = BTreeMap::new();
        for (i, e) in events.iter().enumerate() {
            by_session.entry(e.session_id).or_default().push(i);
        }
        let mut out = vec![None; events.len()];
        for (session, idx) in by_session {
            let seqs: Vec<Seq> = idx.iter().map(|&i| Seq(events[i].seq)).collect();
            // A head older than an event asked for is stale (an append raced the read): ask afresh.
            let head = heads.get(&session).map(|h| Seq(*h)).filter(|h| seqs.iter().all(|s| s <= h));
            let found = self.full_view.blocks(NamespaceId(namespace_id), SessionId(session), head, &seqs).await?;
            for (i, v) in idx.into_iter().zip(found) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}
