//! `memex.v1.SessionService`.
use std::sync::Arc;

use memex_proto::v1 as pb;
use memex_proto::v1::session_service_server::SessionService;
use memex_store::{Access, NewSession, SessionFilter};
use tonic::{Request, Response, Status};

use crate::convert;
use crate::state::AppState;
use crate::status::{parse_opt_uuid, store_status};

const DEFAULT_PAGE: u32 = 100;
const MAX_PAGE: u32 = 1000;

pub struct Sessions {
    state: Arc<AppState>,
}

impl Sessions {
    pub fn new(state: Arc<AppState>) -> Sessions {
        Sessions { state }
    }
}

#[tonic::async_trait]
impl SessionService for Sessions {
    async fn create_session(
        &self,
        request: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Write).await?;
        let r = request.into_inner();
        let max = st.limits.max_id_bytes;
        let agent_id = convert::ident("agent_id", r.agent_id, max)?
            .ok_or_else(|| Status::invalid_argument("agent_id: is required"))?;
        let source_format = convert::ident("source_format", r.source_format, 64)?.unwrap_or_else(|| "memex".to_owned());
        let new = NewSession {
            id: parse_opt_uuid("session_id", &r.session_id)?,
            agent_id,
            parent_session_id: parse_opt_uuid("parent_session_id", &r.parent_session_id)?,
            task_id: convert::ident("task_id", r.task_id, max)?,
            source_format,
            metadata: convert::metadata("metadata_json", &r.metadata_json)?,
        };
        let session = st.store.create_session(ns.id, new).await.map_err(|e| store_status(&e))?;
        crate::rpc::record_session(session.id);
        Ok(Response::new(convert::session(session, &ns.name)))
    }

    async fn get_session(&self, request: Request<pb::GetSessionRequest>) -> Result<Response<pb::Session>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let id = crate::status::session_id(&request.get_ref().session_id)?;
        let session = st.store.session(ns.id, id).await.map_err(|e| store_status(&e))?;
        Ok(Response::new(convert::session(session, &ns.name)))
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        let filter = SessionFilter {
            agent_id: (!r.agent_id.is_empty()).then_some(r.agent_id),
            task_id: (!r.task_id.is_empty()).then_some(r.task_id),
            parent_session_id: parse_opt_uuid("parent_session_id", &r.parent_session_id)?,
        };
        let page_size = if r.page_size == 0 { DEFAULT_PAGE } else { r.page_size.min(MAX_PAGE) };
        let token = (!r.page_token.is_empty()).then_some(r.page_token.as_str());
        let page = st.store.list_sessions(ns.id, &filter, page_size, token).await.map_err(|e| store_status(&e))?;
        Ok(Response::new(pb::ListSessionsResponse {
            sessions: page.sessions.into_iter().map(|s| convert::session(s, &ns.name)).collect(),
            next_page_token: page.next_page_token.unwrap_or_default(),
        }))
    }
}
