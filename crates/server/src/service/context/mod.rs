//! `memex.v1.ContextService` (compaction, windows, packs) and `memex.v1.TaskService` (task state,
//! delegation, reports): thin translations onto `memex-context`.
mod snapshot;
pub mod tasks;
mod wire;

use std::sync::Arc;

use memex_context::{BuildPack, CompactRequest};
use memex_proto::v1 as pb;
use memex_proto::v1::context_service_server::ContextService;
use memex_store::Access;
use prost::Message;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::state::AppState;
use crate::status::{check_size, context_status, parse_uuid, recall_status};

const DEFAULT_PAGE: u32 = 500;
const MAX_PAGE: u32 = 5000;
/// Default protected recent turns of a compaction.
const PROTECTED_TURNS: u32 = 2;

pub struct Context {
    state: Arc<AppState>,
}

impl Context {
    pub fn new(state: Arc<AppState>) -> Context {
        Context { state }
    }
}

#[tonic::async_trait]
impl ContextService for Context {
    async fn compact(&self, request: Request<pb::CompactRequest>) -> Result<Response<pb::CompactResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Write).await?;
        let r = request.into_inner();
        if r.window_budget == 0 {
            return Err(Status::invalid_argument("window_budget: is required (tokens of the agent's window)"));
        }
        let req = CompactRequest {
            session_id: crate::status::session_id(&r.session_id)?,
            window_budget: r.window_budget as usize,
            headroom: r.headroom as usize,
            protected_turns: r.protected_turns.unwrap_or(PROTECTED_TURNS) as usize,
            system_tokens: r.system_tokens as usize,
            tokenizer: wire::tokenizer("tokenizer", &r.tokenizer)?,
        };
        let out = st.context.compact(ns.id, req).await.map_err(|e| context_status(&e))?;
        Ok(Response::new(wire::compact_out(&out)?))
    }

    async fn expand_manifest(
        &self,
        request: Request<pb::ExpandManifestRequest>,
    ) -> Result<Response<pb::ExpandManifestResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        let id = parse_uuid("manifest_id", &r.manifest_id)?;
        let page = if r.page_size == 0 { DEFAULT_PAGE } else { r.page_size.min(MAX_PAGE) };
        let token = (!r.page_token.is_empty()).then_some(r.page_token.as_str());
        let x = st.context.expand_manifest(ns.id, id, page, token).await.map_err(|e| context_status(&e))?;
        Ok(Response::new(pb::ExpandManifestResponse {
            manifest: Some(wire::manifest_out(&x.manifest)?),
            events: x.events.into_iter().map(convert::event).collect(),
            next_page_token: x.next_page_token.unwrap_or_default(),
        }))
    }

    async fn get_window(&self, request: Request<pb::GetWindowRequest>) -> Result<Response<pb::Window>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        let session = crate::status::session_id(&r.session_id)?;
        let tokenizer = wire::tokenizer("tokenizer", &r.tokenizer)?;
        let w = st.context.window(ns.id, session, tokenizer).await.map_err(|e| context_status(&e))?;
        Ok(Response::new(pb::Window {
            session_id: session.to_string(),
            version: w.version,
            events: w
                .events
                .iter()
                .map(|e| pb::WindowEvent {
                    event_id: e.id.to_string(),
                    seq: e.seq,
                    kind: e.kind.as_str().to_owned(),
                    tool_name: e.tool_name.clone().unwrap_or_default(),
                })
                .collect(),
            manifests: w.manifests.iter().map(wire::manifest_out).collect::<Result<_, _>>()?,
            evicted: w
                .evictions
                .iter()
                .map(|e| pb::Span { session_id: session.to_string(), first_seq: e.first_seq, last_seq: e.last_seq })
                .collect(),
            tokens: u32::try_from(w.tokens).unwrap_or(u32::MAX),
        }))
    }

    async fn build_pack(&self, request: Request<pb::BuildPackRequest>) -> Result<Response<pb::Pack>, Status> {
        let st = &self.state;
        check_size("request", request.get_ref().encoded_len(), st.max_message_bytes)?;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Write).await?;
        let _turn = st.admit(&request).await?;
        let r = request.into_inner();
        let full = wire::full_view("view", r.view, false)?;
        let req = BuildPack {
            session_id: crate::status::session_id(&r.session_id)?,
            task_id: convert::ident("task_id", r.task_id, st.limits.max_id_bytes)?,
            user_message: r.user_message,
            system_prompt: r.system_prompt,
            budgets: Some(wire::budgets(r.budgets, st.context.config().budgets)),
            tokenizer: wire::tokenizer("tokenizer", &r.tokenizer)?,
            role: wire::role("role", r.role)?,
            historical: r.historical,
            memory_reader: match r.memory_reader.as_str() {
                "" => None,
                m if m.len() > 256 || m.chars().any(char::is_control) => {
                    return Err(Status::invalid_argument(
                        "memory_reader: at most 256 characters, no control characters",
                    ));
                }
                m => Some(m.to_owned()),
            },
            required: wire::required_blocks(&r.required_blocks)?,
        };
        let built = st.context.build_pack(ns.id, req).await.map_err(|e| context_status(&e))?;
        let pack = wire::pack_out(&ns.name, built, full);
        st.metrics.record_pack(&pack);
        Ok(Response::new(pack))
    }

    async fn get_pack(&self, request: Request<pb::GetPackRequest>) -> Result<Response<pb::Pack>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let id = parse_uuid("pack_id", &request.get_ref().pack_id)?;
        let full = wire::full_view("view", request.get_ref().view, true)?;
        let built = st.context.pack(ns.id, id).await.map_err(|e| context_status(&e))?;
        Ok(Response::new(wire::pack_out(&ns.name, built, full)))
    }

    async fn build_snapshot(
        &self,
        request: Request<pb::BuildSnapshotRequest>,
    ) -> Result<Response<pb::Snapshot>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let _turn = st.admit(&request).await?;
        let r = request.into_inner();
        let req = snapshot::request(r, st.limits.max_id_bytes)?;
        let memory = st.snapshots.as_ref().ok_or_else(|| Status::unavailable("the server is starting"))?;
        let built = memory.snapshot(ns.id, &req).await.map_err(|e| recall_status(&e))?;
        Ok(Response::new(snapshot::out(&ns.name, &req, built)))
    }
}
