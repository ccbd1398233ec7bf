//! `memex.v1.AdminService`: API keys of a namespace, for holders of an admin key.
use std::sync::Arc;

use memex_proto::v1 as pb;
use memex_proto::v1::admin_service_server::AdminService;
use memex_store::Access;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::erasure::Eraser;
use crate::state::AppState;
use crate::status::{parse_uuid, store_status};

pub struct Admin {
    state: Arc<AppState>,
    eraser: Arc<Eraser>,
}

impl Admin {
    pub fn new(state: Arc<AppState>, eraser: Arc<Eraser>) -> Admin {
        Admin { state, eraser }
    }
}

/// The longest overlap of a rotation.
const MAX_OVERLAP_SECS: u32 = 30 * 24 * 3600;

/// The most sessions one erasure takes (a larger subject: several requests).
const MAX_ERASE_SESSIONS: usize = 10_000;

#[tonic::async_trait]
impl AdminService for Admin {
    async fn create_api_key(
        &self,
        request: Request<pb::CreateApiKeyRequest>,
    ) -> Result<Response<pb::CreateApiKeyResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Admin).await?;
        let r = request.into_inner();
        let name = convert::ident("name", r.name, st.limits.max_id_bytes)?
            .ok_or_else(|| Status::invalid_argument("name: is required"))?;
        let right = pb::Right::try_from(r.right).unwrap_or(pb::Right::Unspecified);
        let access = convert::access(right)
            .ok_or_else(|| Status::invalid_argument("right: choose RIGHT_READ, RIGHT_WRITE or RIGHT_ADMIN"))?;
        let created = st.store.create_api_key(&ns, &name, access).await.map_err(|e| store_status(&e))?;
        tracing::info!(namespace = %ns.name, key_id = %created.key.id, right = access.as_str(), "api key created");
        Ok(Response::new(pb::CreateApiKeyResponse { key: Some(convert::api_key(&created.key)), token: created.token }))
    }

    async fn list_api_keys(
        &self,
        request: Request<pb::ListApiKeysRequest>,
    ) -> Result<Response<pb::ListApiKeysResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Admin).await?;
        let keys = st.store.list_api_keys(&ns).await.map_err(|e| store_status(&e))?;
        Ok(Response::new(pb::ListApiKeysResponse { keys: keys.iter().map(convert::api_key).collect() }))
    }

    async fn revoke_api_key(&self, request: Request<pb::RevokeApiKeyRequest>) -> Result<Response<pb::ApiKey>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Admin).await?;
        let id = parse_uuid("key_id", &request.get_ref().key_id)?;
        let key = st.store.revoke_api_key(&ns, id).await.map_err(|e| store_status(&e))?;
        tracing::info!(namespace = %ns.name, key_id = %id, "api key revoked");
        Ok(Response::new(convert::api_key(&key)))
    }

    async fn rotate_api_key(
        &self,
        request: Request<pb::RotateApiKeyRequest>,
    ) -> Result<Response<pb::RotateApiKeyResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Admin).await?;
        let id = parse_uuid("key_id", &request.get_ref().key_id)?;
        let overlap = request.get_ref().overlap_secs;
        if overlap > MAX_OVERLAP_SECS {
            return Err(Status::invalid_argument(format!("overlap_secs: at most {MAX_OVERLAP_SECS} (30 days)")));
        }
        let (new, old) = st
            .store
            .rotate_api_key(&ns, id, std::time::Duration::from_secs(u64::from(overlap)))
            .await
            .map_err(|e| store_status(&e))?;
        tracing::info!(namespace = %ns.name, key_id = %id, new_key_id = %new.key.id, overlap, "api key rotated");
        Ok(Response::new(pb::RotateApiKeyResponse {
            key: Some(convert::api_key(&new.key)),
            token: new.token,
            rotated: Some(convert::api_key(&old)),
        }))
    }

    async fn erase_subject(
        &self,
        request: Request<pb::EraseSubjectRequest>,
    ) -> Result<Response<pb::EraseSubjectResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Admin).await?;
        let who = st.auth.caller(&request).await;
        let r = request.into_inner();
        let reason = r.reason.trim();
        if reason.is_empty() {
            return Err(Status::invalid_argument("reason: is required (it is recorded in the erasure's audit record)"));
        }
        if reason.len() > 1000 {
            return Err(Status::invalid_argument("reason: at most 1000 bytes"));
        }
        let mut named = Vec::with_capacity(r.session_ids.len());
        for (i, id) in r.session_ids.iter().enumerate() {
            named.push(parse_uuid(&format!("session_ids[{i}]"), id)?);
        }
        let agent = convert::ident("agent_id", r.agent_id, st.limits.max_id_bytes)?;
        let task = convert::ident("task_id", r.task_id, st.limits.max_id_bytes)?;
        if named.is_empty() && agent.is_none() && task.is_none() {
            return Err(Status::invalid_argument("session_ids, agent_id or task_id: name the subject's sessions"));
        }
        let sessions =
            st.store.subject_sessions(ns.id, &named, agent.as_deref(), task.as_deref()).await.map_err(|e| match e {
                memex_store::StoreError::SessionNotFound(id) => {
                    Status::not_found(format!("session_ids: session {id} does not exist in this namespace"))
                }
                e => store_status(&e),
            })?;
        if sessions.is_empty() {
            return Err(Status::not_found("agent_id / task_id: no session of this namespace matches"));
        }
        if sessions.len() > MAX_ERASE_SESSIONS {
            return Err(Status::invalid_argument(format!(
                "the subject has {} sessions, over the {MAX_ERASE_SESSIONS} one erasure takes: erase by session_ids in parts",
                sessions.len()
            )));
        }
        let plan = memex_store::ErasurePlan {
            id: uuid::Uuid::now_v7(),
            sessions,
            requested_by: who,
            reason: reason.to_owned(),
            dry_run: r.dry_run,
        };
        let e = self.eraser.erase(ns.id, plan).await.map_err(|e| store_status(&e))?;
        let c = &e.counts;
        Ok(Response::new(pb::EraseSubjectResponse {
            erasure_id: e.id.to_string(),
            session_ids: e.sessions.iter().map(ToString::to_string).collect(),
            dry_run: e.dry_run,
            events: c.events,
            artifacts: c.artifacts,
            embeddings: c.embeddings,
            packs: c.packs,
            pack_chunks: c.pack_chunks,
            manifests: c.manifests,
            reports: c.reports,
            memory_facts: c.memory_facts,
            memory_segments: c.memory_segments,
            memory_turns: c.memory_turns,
            memory_topics: c.memory_topics,
            seq: e.seq,
        }))
    }
}
