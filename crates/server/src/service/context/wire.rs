//! Wire ↔ domain conversions of the context API. Field paths in errors follow the request.
use memex_context::{BuiltPack, CompactOutcome};
use memex_pack::{AgentRole, BlockKind, Budgets, Decision, Exclusion, Outcome, PackItem};
use memex_pointer::{LineRange, SeqRange};
use memex_proto::v1 as pb;
use memex_store::{DelegationRow, ManifestRow, ReportRow, TaskStateRow};
use memex_task::{KeyPointer, Phase, TaskState};
use memex_tokens::Tokenizer;
use tonic::Status;

use crate::convert::timestamp;
use crate::status::parse_uuid;

pub fn tokenizer(field: &str, name: &str) -> Result<Option<Tokenizer>, Status> {
    if name.is_empty() {
        return Ok(None);
    }
    name.parse()
        .map(Some)
        .map_err(|e: memex_tokens::UnknownTokenizer| Status::invalid_argument(format!("{field}: {e}")))
}

pub fn pointer(field: &str, p: pb::Pointer) -> Result<KeyPointer, Status> {
    match p.target {
        Some(pb::pointer::Target::EventId(id)) => Ok(KeyPointer::Event(parse_uuid(&format!("{field}.event_id"), &id)?)),
        Some(pb::pointer::Target::ArtifactId(a)) => {
            if a.parse::<memex_event::ArtifactId>().is_err() {
                return Err(Status::invalid_argument(format!(
                    "{field}.artifact_id: {a:?} is not an artifact id (blake3:<64 hex>)"
                )));
            }
            Ok(KeyPointer::Artifact(a))
        }
        Some(pb::pointer::Target::Span(s)) => {
            let session_id = parse_uuid(&format!("{field}.span.session_id"), &s.session_id)?;
            let seqs = SeqRange::new(s.first_seq, s.last_seq).filter(|r| r.first >= 1).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "{field}.span: first_seq {} and last_seq {} must satisfy 1 <= first_seq <= last_seq",
                    s.first_seq, s.last_seq
                ))
            })?;
            Ok(KeyPointer::Span { session_id, seqs })
        }
        None => Err(Status::invalid_argument(format!("{field}: set one of event_id, artifact_id, span"))),
    }
}

pub fn pointers(field: &str, ps: Vec<pb::Pointer>) -> Result<Vec<KeyPointer>, Status> {
    ps.into_iter().enumerate().map(|(i, p)| pointer(&format!("{field}[{i}]"), p)).collect()
}

pub fn pointer_out(p: &KeyPointer) -> pb::Pointer {
    let target = match p {
        KeyPointer::Event(id) => pb::pointer::Target::EventId(id.to_string()),
        KeyPointer::Artifact(a) => pb::pointer::Target::ArtifactId(a.clone()),
        KeyPointer::Span { session_id, seqs } => pb::pointer::Target::Span(pb::Span {
            session_id: session_id.to_string(),
            first_seq: seqs.first,
            last_seq: seqs.last,
        }),
    };
    pb::Pointer { target: Some(target) }
}

fn pointers_json(v: &serde_json::Value) -> Vec<pb::Pointer> {
    serde_json::from_value::<Vec<KeyPointer>>(v.clone()).unwrap_or_default().iter().map(pointer_out).collect()
}

pub fn phase(field: &str, p: i32) -> Result<Phase, Status> {
    match pb::Phase::try_from(p) {
        Ok(pb::Phase::Unspecified | pb::Phase::Planning) => Ok(Phase::Planning),
        Ok(pb::Phase::Execution) => Ok(Phase::Execution),
        Ok(pb::Phase::Evaluation) => Ok(Phase::Evaluation),
        Err(_) => Err(Status::invalid_argument(format!("{field}: {p} is not a phase"))),
    }
}

fn phase_out(p: Phase) -> i32 {
    match p {
        Phase::Planning => pb::Phase::Planning as i32,
        Phase::Execution => pb::Phase::Execution as i32,
        Phase::Evaluation => pb::Phase::Evaluation as i32,
    }
}

pub fn task_state(s: pb::TaskState) -> Result<TaskState, Status> {
    Ok(TaskState {
        goals: s.goals,
        constraints: s.constraints,
        open_loops: s.open_loops,
        next_actions: s.next_actions,
        key_pointers: pointers("state.key_pointers", s.key_pointers)?,
        phase: phase("state.phase", s.phase)?,
        self_assessment: s.self_assessment,
        premises: s.premises,
    })
}

pub fn task_state_out(s: &TaskState) -> pb::TaskState {
    pb::TaskState {
        goals: s.goals.clone(),
        constraints: s.constraints.clone(),
        open_loops: s.open_loops.clone(),
        next_actions: s.next_actions.clone(),
        key_pointers: s.key_pointers.iter().map(pointer_out).collect(),
        phase: phase_out(s.phase),
        self_assessment: s.self_assessment,
        premises: s.premises.clone(),
    }
}

pub fn version_out(ns: &str, row: &TaskStateRow) -> pb::TaskStateVersion {
    let state: TaskState = serde_json::from_value(row.state.clone()).unwrap_or_default();
    pb::TaskStateVersion {
        namespace: ns.to_owned(),
        task_id: row.task_id.clone(),
        version: row.version,
        state: Some(task_state_out(&state)),
        rendered: row.rendered.clone(),
        tokens: row.tokens,
        tokenizer: row.tokenizer.clone(),
        author: row.author.clone().unwrap_or_default(),
        created_at: Some(timestamp(row.created_at)),
    }
}

fn lines(l: Option<LineRange>) -> Option<pb::LineRange> {
    l.map(|l| pb::LineRange { first: l.first, last: l.last })
}

pub fn manifest_out(row: &ManifestRow) -> Result<pb::PointerManifest, Status> {
    let m = memex_context::parse_manifest(row).map_err(|e| crate::status::context_status(&e))?;
    Ok(pb::PointerManifest {
        id: m.id.to_string(),
        session_id: m.session_id.to_string(),
        task_state_version: m.task_state_version.unwrap_or(0),
        spans: m
            .spans
            .iter()
            .map(|s| pb::EvictedSpan {
                first_seq: s.seqs.first,
                last_seq: s.seqs.last,
                first_event_id: s.first_event_id.to_string(),
                last_event_id: s.last_event_id.to_string(),
                lines: lines(s.lines),
            })
            .collect(),
        evicted_events: m.evicted_events,
        evicted_tokens: m.evicted_tokens,
        anchors: m
            .anchors
            .iter()
            .map(|a| pb::Anchor {
                event_id: a.event_id.to_string(),
                seq: a.seq,
                kind: a.kind.as_str().to_owned(),
                lines: lines(a.lines),
                label: a.label.clone(),
            })
            .collect(),
        artifacts: m.artifacts.iter().map(|a| pb::ManifestArtifact { id: a.id.clone(), size: a.size }).collect(),
        hints: Some(pb::ManifestHints {
            files: m.hints.files.clone(),
            identifiers: m.hints.identifiers.clone(),
            errors: m.hints.errors.clone(),
            tools: m.hints.tools.clone(),
        }),
        absorbed_manifest_ids: m.absorbed.iter().map(ToString::to_string).collect(),
        rendered: row.rendered.clone(),
        tokens: row.tokens,
        tokenizer: row.tokenizer.clone(),
        window_version: row.window_version,
        created_at: Some(timestamp(row.created_at)),
    })
}

pub fn compact_out(o: &CompactOutcome) -> Result<pb::CompactResponse, Status> {
    let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    Ok(pb::CompactResponse {
        compacted: o.compacted,
        manifest: o.manifest.as_ref().map(manifest_out).transpose()?,
        evicted_event_ids: o.evicted.iter().map(ToString::to_string).collect(),
        tokens_before: n(o.tokens_before),
        tokens_after: n(o.tokens_after),
        target: n(o.target),
        fits: o.fits,
        window_version: o.window_version,
        index_check: o.index_check.to_owned(),
    })
}

pub fn budgets(b: Option<pb::Budgets>, defaults: Budgets) -> Budgets {
    let Some(b) = b else { return defaults };
    let or = |v: Option<u32>, d: usize| v.map_or(d, |x| x as usize);
    Budgets {
        context: or(b.context, defaults.context),
        system: or(b.system, defaults.system),
        task_state: or(b.task_state, defaults.task_state),
        tail: or(b.tail, defaults.tail),
        retrieval: or(b.retrieval, defaults.retrieval),
        user: or(b.user, defaults.user),
        headroom: or(b.headroom, defaults.headroom),
        memory: or(b.memory, defaults.memory),
    }
}

fn budgets_out(b: &Budgets) -> pb::Budgets {
    let n = |x: usize| Some(u32::try_from(x).unwrap_or(u32::MAX));
    pb::Budgets {
        context: n(b.context),
        system: n(b.system),
        task_state: n(b.task_state),
        tail: n(b.tail),
        retrieval: n(b.retrieval),
        user: n(b.user),
        headroom: n(b.headroom),
        memory: n(b.memory),
    }
}

pub fn role(field: &str, r: i32) -> Result<Option<AgentRole>, Status> {
    match pb::Role::try_from(r) {
        Ok(pb::Role::Unspecified) => Ok(None),
        Ok(pb::Role::Solo) => Ok(Some(AgentRole::Solo)),
        Ok(pb::Role::Planner) => Ok(Some(AgentRole::Planner)),
        Ok(pb::Role::Executor) => Ok(Some(AgentRole::Executor)),
        Err(_) => Err(Status::invalid_argument(format!("{field}: {r} is not a role"))),
    }
}

/// Whether an answer carries the whole pack (`PACK_VIEW_FULL`); `default` when unspecified.
pub fn full_view(field: &str, v: i32, default: bool) -> Result<bool, Status> {
    match pb::PackView::try_from(v) {
        Ok(pb::PackView::Unspecified) => Ok(default),
        Ok(pb::PackView::Basic) => Ok(false),
        Ok(pb::PackView::Full) => Ok(true),
        Err(_) => Err(Status::invalid_argument(format!("{field}: {v} is not a pack view"))),
    }
}

fn role_out(r: AgentRole) -> i32 {
    match r {
        AgentRole::Solo => pb::Role::Solo as i32,
        AgentRole::Planner => pb::Role::Planner as i32,
        AgentRole::Executor => pb::Role::Executor as i32,
    }
}

/// `required_blocks`: the blocks a pack may not cut or leave out.
pub fn required_blocks(names: &[String]) -> Result<Vec<BlockKind>, Status> {
    let mut out = Vec::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        match BlockKind::parse(n) {
            Some(k @ (BlockKind::System | BlockKind::TaskState | BlockKind::Memory)) => {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
            _ => {
                let shown: String = n.chars().take(64).collect();
                return Err(Status::invalid_argument(format!(
                    "required_blocks[{i}]: {shown:?} is not a block that can be required; use system, task_state or memory"
                )));
            }
        }
    }
    Ok(out)
}

fn item_out(i: &PackItem) -> pb::PackItem {
    pb::PackItem {
        block: i.block.as_str().to_owned(),
        event_id: i.event_id.to_string(),
        session_id: i.session_id.to_string(),
        seq: i.seq,
        kind: i.kind.clone(),
        tool_name: i.tool_name.clone().unwrap_or_default(),
        lines: lines(i.lines),
        tokens: i.tokens as u32,
        excerpt: i.excerpt,
        score: i.score.unwrap_or(0.0),
        artifact_first_line: i.artifact_lines.map(|l| l[0]),
        artifact_last_line: i.artifact_lines.map(|l| l[1]),
    }
}

fn decision_out(d: &Decision) -> pb::CandidateDecision {
    let p = &d.parts;
    let (included, tokens, excerpt, reason, detail) = match &d.outcome {
        Outcome::Included { tokens, excerpt } => (true, *tokens as u32, *excerpt, String::new(), String::new()),
        Outcome::Excluded(x) => {
            let reason = match x {
                Exclusion::ZeroScore => "zero_score",
                Exclusion::InTail => "in_tail",
                Exclusion::BelowCut => "below_cut",
                Exclusion::NotSelected => "not_selected",
                Exclusion::Quota { .. } => "quota",
                Exclusion::OverBudget { .. } => "over_budget",
            };
            let detail = match x {
                Exclusion::Quota { .. } | Exclusion::OverBudget { .. } => serde_json::to_value(x)
                    .map(|mut v| {
                        if let Some(o) = v.as_object_mut() {
                            o.remove("reason");
                        }
                        v.to_string()
                    })
                    .unwrap_or_default(),
                _ => String::new(),
            };
            (false, 0, false, reason.to_owned(), detail)
        }
    };
    pb::CandidateDecision {
        event_id: d.event_id.to_string(),
        session_id: d.session_id.to_string(),
        seq: d.seq,
        kind: d.kind.clone(),
        sources: Some(pb::CandidateSources {
            lexical: d.sources.lexical,
            vector: d.sources.vector,
            pointer: d.sources.pointer,
            pinned: d.sources.pinned,
            anchor: d.sources.anchor,
        }),
        parts: Some(pb::PackScoreParts {
            lexical: p.lexical,
            vector: p.vector,
            recency: p.recency,
            prior: p.prior,
            base: p.base,
            task_binding: p.task_binding,
            superseded: p.superseded,
            premise: p.premise,
            phase: p.phase,
            role: p.role,
            self_assessment: p.self_assessment,
            constraint_floor: p.constraint_floor,
            modifier: p.modifier,
            score: p.score,
        }),
        mmr_rank: d.mmr_rank.map(|r| r as u32),
        included,
        tokens,
        excerpt,
        reason,
        detail_json: detail,
    }
}

/// Consumes the pack: its text and blocks are most of a response's bytes, moved rather than copied.
/// Without `full`, blocks come without their text (it is in the pack's text) and no decisions: the
/// basic view is about half the bytes to encode, send and decode.
pub fn pack_out(ns: &str, b: BuiltPack, full: bool) -> pb::Pack {
    let p = b.pack;
    pb::Pack {
        pack_id: b.id.to_string(),
        namespace: ns.to_owned(),
        session_id: b.session_id.to_string(),
        task_id: b.task_id.clone().unwrap_or_default(),
        task_state_version: b.task_state_version.unwrap_or(0),
        tokenizer: b.tokenizer.name().to_owned(),
        role: role_out(b.role),
        text: p.text,
        tokens: p.tokens as u32,
        budgets: Some(budgets_out(&p.budgets)),
        blocks: p
            .blocks
            .into_iter()
            .map(|bl| pb::PackBlock {
                kind: bl.kind.as_str().to_owned(),
                text: if full { bl.text } else { String::new() },
                tokens: bl.tokens as u32,
                budget: bl.budget as u32,
            })
            .collect(),
        items: p.items.iter().map(item_out).collect(),
        decisions: if full { p.decisions.iter().map(decision_out).collect() } else { Vec::new() },
        created_at: Some(timestamp(b.created_at)),
        vectors_used: b.vectors_used,
        omitted: p
            .omitted
            .iter()
            .map(|o| pb::PackOmission {
                block: o.block.as_str().to_owned(),
                how: if o.dropped { "dropped" } else { "cut" }.to_owned(),
                tokens: o.tokens as u32,
                budget: o.budget as u32,
            })
            .collect(),
    }
}

pub fn delegation_out(ns: &str, d: &DelegationRow, state: &TaskStateRow) -> pb::Delegation {
    pb::Delegation {
        namespace: ns.to_owned(),
        task_id: d.task_id.clone(),
        parent_task_id: d.parent_task_id.clone(),
        objective: d.objective.clone(),
        constraints: d.constraints.clone(),
        acceptance_criteria: d.acceptance.clone(),
        pointers: pointers_json(&d.pointers),
        plan_node_ref: d.plan_node_ref.clone().unwrap_or_default(),
        delegated_by_session_id: d.delegated_by.map(|s| s.to_string()).unwrap_or_default(),
        created_at: Some(timestamp(d.created_at)),
        task_state: Some(version_out(ns, state)),
    }
}

pub fn report_out(ns: &str, r: &ReportRow) -> pb::TaskReport {
    pb::TaskReport {
        namespace: ns.to_owned(),
        report_id: r.id.to_string(),
        seq: r.seq,
        task_id: r.task_id.clone(),
        parent_task_id: r.parent_task_id.clone().unwrap_or_default(),
        session_id: r.session_id.to_string(),
        event_id: r.event_id.to_string(),
        status: r.status.clone(),
        summary: r.summary.clone(),
        pointers: pointers_json(&r.pointers),
        created_at: Some(timestamp(r.created_at)),
    }
}
