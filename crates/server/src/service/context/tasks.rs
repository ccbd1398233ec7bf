//! `memex.v1.TaskService`: task state, delegation, reports.
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use memex_context::{Delegate, NewReport, TaskStateUpdate};
use memex_proto::v1 as pb;
use memex_proto::v1::task_service_server::TaskService;
use memex_store::Access;
use prost::Message;
use tonic::{Request, Response, Status};

use super::wire;
use crate::convert;
use crate::state::AppState;
use crate::status::{check_size, context_status, parse_opt_uuid};

const DEFAULT_HISTORY: u32 = 20;
const MAX_HISTORY: u32 = 200;

pub struct Tasks {
    state: Arc<AppState>,
}

impl Tasks {
    pub fn new(state: Arc<AppState>) -> Tasks {
        Tasks { state }
    }
}

/// A required task id: bounded, no control characters.
pub fn task_id(field: &str, value: String, max: usize) -> Result<String, Status> {
    convert::ident(field, value, max)?.ok_or_else(|| Status::invalid_argument(format!("{field}: is required")))
}

type ReportStream = Pin<Box<dyn Stream<Item = Result<pb::TaskReport, Status>> + Send>>;

#[tonic::async_trait]
impl TaskService for Tasks {
    async fn get_task_state(
        &self,
        request: Request<pb::GetTaskStateRequest>,
    ) -> Result<Response<pb::TaskStateVersion>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        let task = task_id("task_id", r.task_id, st.limits.max_id_bytes)?;
        let version = (r.version != 0).then_some(r.version);
        let (row, _) = st.context.task_state(ns.id, &task, version).await.map_err(|e| context_status(&e))?;
        Ok(Response::new(wire::version_out(&ns.name, &row)))
    }

    async fn update_task_state(
        &self,
        request: Request<pb::UpdateTaskStateRequest>,
    ) -> Result<Response<pb::TaskStateVersion>, Status> {
        let st = &self.state;
        check_size("request", request.get_ref().encoded_len(), st.max_message_bytes)?;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Write).await?;
        let r = request.into_inner();
        let task = task_id("task_id", r.task_id, st.limits.max_id_bytes)?;
        let state = wire::task_state(r.state.ok_or_else(|| Status::invalid_argument("state: is required"))?)?;
        let update = TaskStateUpdate {
            task_id: task,
            expected_version: r.expected_version,
            state,
            author: convert::ident("author", r.author, st.limits.max_id_bytes)?,
            tokenizer: wire::tokenizer("tokenizer", &r.tokenizer)?,
        };
        let row = st.context.update_task_state(ns.id, update).await.map_err(|e| context_status(&e))?;
        Ok(Response::new(wire::version_out(&ns.name, &row)))
    }

    async fn list_task_state_versions(
        &self,
        request: Request<pb::ListTaskStateVersionsRequest>,
    ) -> Result<Response<pb::ListTaskStateVersionsResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        let task = task_id("task_id", r.task_id, st.limits.max_id_bytes)?;
        let page = if r.page_size == 0 { DEFAULT_HISTORY } else { r.page_size.min(MAX_HISTORY) };
        let before = if r.page_token.is_empty() {
            None
        } else {
            Some(
                r.page_token
                    .strip_prefix("v:")
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| Status::invalid_argument("page_token: is not a token this server issued"))?,
            )
        };
        let rows = st.context.task_state_history(ns.id, &task, before, page).await.map_err(|e| context_status(&e))?;
        let next = match rows.last() {
            Some(last) if rows.len() as u32 == page && last.version > 1 => format!("v:{}", last.version),
            _ => String::new(),
        };
        Ok(Response::new(pb::ListTaskStateVersionsResponse {
            versions: rows.iter().map(|row| wire::version_out(&ns.name, row)).collect(),
            next_page_token: next,
        }))
    }

    async fn delegate(&self, request: Request<pb::DelegateRequest>) -> Result<Response<pb::Delegation>, Status> {
        let st = &self.state;
        check_size("request", request.get_ref().encoded_len(), st.max_message_bytes)?;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Write).await?;
        let r = request.into_inner();
        let max = st.limits.max_id_bytes;
        if r.objective.trim().is_empty() {
            return Err(Status::invalid_argument("objective: is required"));
        }
        let d = Delegate {
            parent_task_id: task_id("parent_task_id", r.parent_task_id, max)?,
            task_id: convert::ident("task_id", r.task_id, max)?,
            objective: r.objective,
            constraints: r.constraints,
            acceptance_criteria: r.acceptance_criteria,
            pointers: wire::pointers("pointers", r.pointers)?,
            plan_node_ref: convert::ident("plan_node_ref", r.plan_node_ref, max)?,
            delegated_by: parse_opt_uuid("delegated_by_session_id", &r.delegated_by_session_id)?,
            tokenizer: wire::tokenizer("tokenizer", &r.tokenizer)?,
        };
        let out = st.context.delegate(ns.id, d).await.map_err(|e| context_status(&e))?;
        Ok(Response::new(wire::delegation_out(&ns.name, &out.delegation, &out.task_state)))
    }

    async fn report(&self, request: Request<pb::ReportRequest>) -> Result<Response<pb::TaskReport>, Status> {
        let st = &self.state;
        check_size("request", request.get_ref().encoded_len(), st.max_message_bytes)?;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Write).await?;
        let r = request.into_inner();
        let report = NewReport {
            report_id: parse_opt_uuid("report_id", &r.report_id)?,
            task_id: task_id("task_id", r.task_id, st.limits.max_id_bytes)?,
            session_id: crate::status::session_id(&r.session_id)?,
            status: r.status,
            summary: r.summary,
            pointers: wire::pointers("pointers", r.pointers)?,
        };
        let row = st.context.report(ns.id, report).await.map_err(|e| context_status(&e))?;
        Ok(Response::new(wire::report_out(&ns.name, &row)))
    }

    type WatchReportsStream = ReportStream;

    async fn watch_reports(&self, request: Request<pb::WatchReportsRequest>) -> Result<Response<ReportStream>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        let parent = task_id("parent_task_id", r.parent_task_id, st.limits.max_id_bytes)?;
        let rx = st.context.watch_reports(ns.id, parent, r.after_seq);
        let name = ns.name.clone();
        let stream = futures::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(rx), move |item| match item {
            Ok(row) => Ok(wire::report_out(&name, &row)),
            Err(e) => Err(context_status(&e)),
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
