//! Planner and executors on one store (TRACE §7, A.5): delegation packets create child tasks,
//! executors report back with provenance pointers, planners watch their children's reports.
use std::time::Duration;

use memex_event::{ArtifactId, BatchLimits, EventInput, batch_fingerprint, prepare_batch};
use memex_store::{AppendRequest, ChildState, DelegationRow, ReportRow, StoreError, TaskStateRow};
use memex_task::{KeyPointer, Phase, TaskState, TaskStateVersion, validate};
use memex_tokens::Tokenizer;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::task::parse_state;
use crate::{ContextEngine, ContextError, Result};

/// Accepted report statuses.
pub const REPORT_STATUSES: [&str; 4] = ["succeeded", "failed", "partial", "blocked"];
/// A report is compact: its summary is at most this many bytes (evidence goes in pointers).
pub const MAX_SUMMARY_BYTES: usize = 8192;
/// Reports read per query while streaming.
const WATCH_PAGE: u32 = 100;
/// A watcher re-reads at least this often even without a notification.
const WATCH_POLL: Duration = Duration::from_secs(5);

/// A delegation packet (A.5 line 3).
#[derive(Debug, Clone, PartialEq)]
pub struct Delegate {
    pub parent_task_id: String,
    /// The child task's id; a fresh one when None.
    pub task_id: Option<String>,
    pub objective: String,
    pub constraints: Vec<String>,
    pub acceptance_criteria: Vec<String>,
    /// Pointers to the events and artifacts the executor needs.
    pub pointers: Vec<KeyPointer>,
    pub plan_node_ref: Option<String>,
    /// The planner's session.
    pub delegated_by: Option<Uuid>,
    pub tokenizer: Option<Tokenizer>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DelegateOutcome {
    pub delegation: DelegationRow,
    pub task_state: TaskStateRow,
}

/// An executor's report.
#[derive(Debug, Clone, PartialEq)]
pub struct NewReport {
    /// Client-chosen id, so a retried report is recorded once.
    pub report_id: Option<Uuid>,
    pub task_id: String,
    /// The executor's session; the report is appended to it as a `report` event.
    pub session_id: Uuid,
    pub status: String,
    pub summary: String,
    pub pointers: Vec<KeyPointer>,
}

impl ContextEngine {
    /// Checks that every pointer resolves in the namespace; the error names `{field}[i]`.
    pub async fn resolve_pointers(&self, namespace_id: Uuid, field: &str, pointers: &[KeyPointer]) -> Result<()> {
        let ids: Vec<(usize, Uuid)> = pointers
            .iter()
            .enumerate()
            .filter_map(|(i, p)| if let KeyPointer::Event(id) = p { Some((i, *id)) } else { None })
            .collect();
        if !ids.is_empty() {
            let just: Vec<Uuid> = ids.iter().map(|(_, id)| *id).collect();
            let found = self.store.existing_events(namespace_id, &just).await?;
            if let Some((i, id)) = ids.iter().find(|(_, id)| !found.contains(id)) {
                return Err(ContextError::invalid(
                    format!("{field}[{i}].event_id"),
                    format!("event {id} does not exist in this namespace"),
                ));
            }
        }
        for (i, p) in pointers.iter().enumerate() {
            match p {
                KeyPointer::Event(_) => {}
                KeyPointer::Artifact(a) => {
                    let id: ArtifactId = a.parse().map_err(|e: memex_event::ArtifactIdError| {
                        ContextError::invalid(format!("{field}[{i}].artifact_id"), e.to_string())
                    })?;
                    if !self.store.artifact_exists(namespace_id, &id).await? {
                        return Err(ContextError::invalid(
                            format!("{field}[{i}].artifact_id"),
                            format!("artifact {id} does not exist in this namespace"),
                        ));
                    }
                }
                KeyPointer::Span { session_id, seqs } => {
                    let session = match self.store.session(namespace_id, *session_id).await {
                        Ok(s) => s,
                        Err(StoreError::SessionNotFound(_)) => {
                            return Err(ContextError::invalid(
                                format!("{field}[{i}].span.session_id"),
                                format!("session {session_id} does not exist in this namespace"),
                            ));
                        }
                        Err(e) => return Err(e.into()),
                    };
                    if seqs.first < 1 || seqs.last < seqs.first || seqs.last > session.event_count {
                        return Err(ContextError::invalid(
                            format!("{field}[{i}].span"),
                            format!(
                                "seqs {}-{} are not within session {session_id} (seqs 1-{})",
                                seqs.first, seqs.last, session.event_count
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Creates a child task from a delegation packet.
    pub async fn delegate(&self, namespace_id: Uuid, d: Delegate) -> Result<DelegateOutcome> {
        let parent = self.store.task_state(namespace_id, &d.parent_task_id, None).await.map_err(|e| match e {
            StoreError::TaskNotFound(t) => ContextError::NotFound {
                field: "parent_task_id".into(),
                message: format!("task {t:?} has no task state in this namespace; create it with UpdateTaskState"),
            },
            other => other.into(),
        })?;
        let parent_state = parse_state(&parent)?;
        self.resolve_pointers(namespace_id, "pointers", &d.pointers).await?;
        let task_id = d.task_id.clone().unwrap_or_else(|| format!("{}/{}", d.parent_task_id, Uuid::now_v7().simple()));
        let state = TaskState {
            goals: vec![d.objective.clone()],
            constraints: d.constraints.clone(),
            open_loops: d.acceptance_criteria.iter().map(|a| format!("accept when: {a}")).collect(),
            next_actions: Vec::new(),
            key_pointers: d.pointers.clone(),
            phase: Phase::Execution,
            self_assessment: false,
            premises: parent_state.premises,
        };
        let tokenizer = d.tokenizer.unwrap_or(self.cfg.tokenizer);
        let (rendered, tokens) =
            validate(&task_id, TaskStateVersion(1), &state, &self.cfg.task_state(), &self.counter(tokenizer)).map_err(
                |mut e| {
                    // Name the packet's fields, not the derived state's.
                    e.field = match e.field.split('[').next() {
                        Some("state.goals") => "objective".into(),
                        Some("state.constraints") => e.field.replace("state.constraints", "constraints"),
                        Some("state.open_loops") => e.field.replace("state.open_loops", "acceptance_criteria"),
                        Some("state.key_pointers") => e.field.replace("state.key_pointers", "pointers"),
                        _ => "delegation".into(),
                    };
                    e
                },
            )?;
        let corrupt = |e: serde_json::Error| ContextError::Corrupt { what: "delegation", message: e.to_string() };
        let row = DelegationRow {
            task_id,
            parent_task_id: d.parent_task_id,
            objective: d.objective,
            constraints: d.constraints,
            acceptance: d.acceptance_criteria,
            pointers: serde_json::to_value(&d.pointers).map_err(corrupt)?,
            plan_node_ref: d.plan_node_ref,
            delegated_by: d.delegated_by,
            created_at: chrono::Utc::now(),
        };
        let first = ChildState {
            state: serde_json::to_value(&state).map_err(corrupt)?,
            rendered,
            tokens: tokens as u32,
            tokenizer: tokenizer.name().to_owned(),
        };
        let author = d.delegated_by.map(|s| format!("session:{s}"));
        let (delegation, task_state) = self.store.delegate(namespace_id, &row, &first, author.as_deref()).await?;
        Ok(DelegateOutcome { delegation, task_state })
    }

    /// Records an executor's report: a `report` event in its session plus the report record.
    pub async fn report(&self, namespace_id: Uuid, r: NewReport) -> Result<ReportRow> {
        if !REPORT_STATUSES.contains(&r.status.as_str()) {
            return Err(ContextError::invalid(
                "status",
                format!("{:?} is not one of {}", r.status, REPORT_STATUSES.join(", ")),
            ));
        }
        if r.summary.trim().is_empty() {
            return Err(ContextError::invalid("summary", "is required"));
        }
        if r.summary.len() > MAX_SUMMARY_BYTES {
            return Err(ContextError::invalid(
                "summary",
                format!(
                    "is {} bytes, over {MAX_SUMMARY_BYTES}: keep reports compact and point at the evidence",
                    r.summary.len()
                ),
            ));
        }
        if r.pointers.is_empty() {
            return Err(ContextError::invalid("pointers", "a report needs at least one provenance pointer"));
        }
        self.store.task_state(namespace_id, &r.task_id, None).await?;
        self.resolve_pointers(namespace_id, "pointers", &r.pointers).await?;
        let parent = self.store.delegation(namespace_id, &r.task_id).await?.map(|d| d.parent_task_id);
        let id = r.report_id.unwrap_or_else(Uuid::now_v7);
        let pointers = serde_json::to_value(&r.pointers)
            .map_err(|e| ContextError::Corrupt { what: "report", message: e.to_string() })?;
        let content = format!("report on task {}: {}\n{}", r.task_id, r.status, r.summary.trim_end());
        let metadata = serde_json::json!({ "report_id": id.to_string(), "status": r.status, "pointers": pointers });
        let input = EventInput {
            kind: "report".into(),
            content,
            task_id: r.task_id.clone(),
            metadata_json: metadata.to_string(),
            ..EventInput::default()
        };
        let session = r.session_id.to_string();
        let fingerprint = batch_fingerprint(&session, std::slice::from_ref(&input));
        let batch = prepare_batch(vec![input], &BatchLimits::default(), &memex_event::ArtifactPolicy::default())?;
        let outcome = self
            .store
            .append(AppendRequest {
                namespace_id,
                session_id: r.session_id,
                batch,
                idempotency_key: Some(format!("report:{id}")),
                fingerprint,
            })
            .await?;
        let event_id = outcome
            .event_ids
            .first()
            .copied()
            .ok_or_else(|| ContextError::Corrupt { what: "report", message: "append returned no event id".into() })?;
        let row = ReportRow {
            seq: 0,
            id,
            task_id: r.task_id,
            parent_task_id: parent,
            session_id: r.session_id,
            event_id,
            status: r.status,
            summary: r.summary,
            pointers,
            created_at: chrono::Utc::now(),
        };
        Ok(self.store.insert_report(namespace_id, &row).await?)
    }

    /// Streams the reports of `parent_task_id`'s children after stream position `after`: those
    /// already stored, then each new one as it is recorded. Ends when the receiver is dropped.
    pub fn watch_reports(
        &self,
        namespace_id: Uuid,
        parent_task_id: String,
        after: u64,
    ) -> mpsc::Receiver<Result<ReportRow>> {
        let (tx, rx) = mpsc::channel(64);
        let mut notified = self.reports.subscribe();
        let store = self.store.clone();
        // The watcher outlives the call that started it: it keeps that call's tenant.
        tokio::spawn(memex_store::tenant::inherit(memex_store::tenant::current(), async move {
            let mut cursor = after;
            loop {
                match store.reports_after(namespace_id, &parent_task_id, cursor, WATCH_PAGE).await {
                    Ok(rows) => {
                        let full = rows.len() as u32 == WATCH_PAGE;
                        for r in rows {
                            cursor = r.seq;
                            if tx.send(Ok(r)).await.is_err() {
                                return;
                            }
                        }
                        if full {
                            continue;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                }
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(WATCH_POLL) => {}
                    _ = async {
                        loop {
                            match notified.recv().await {
                                Ok((ns, _)) if ns == namespace_id => return,
                                Ok(_) => continue,
                                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
                                Err(tokio::sync::broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                            }
                        }
                    } => {}
                }
            }
        }));
        rx
    }

    /// Forwards the database's report notifications to this process's watchers until the store
    /// closes. Run it once per engine (the server spawns it).
    pub async fn listen_for_reports(&self) {
        self.store
            .listen("memex_reports", |heard| {
                if let memex_store::Heard::Payload(p) = heard {
                    let mut parts = p.split(' ');
                    if let (Some(Ok(ns)), Some(Ok(seq))) =
                        (parts.next().map(Uuid::try_parse), parts.next().map(str::parse::<u64>))
                    {
                        let _ = self.reports.send((ns, seq));
                    }
                }
            })
            .await;
    }
}
