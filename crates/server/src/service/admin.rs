//! `memex.v1.AdminService`: API keys of a namespace, for holders of an admin key.
use std::sync::Arc;

use memex_proto::v1 as pb;
use memex_proto::v1::admin_service_server::AdminService;
use memex_store::Access;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::state::AppState;
use crate::status::{parse_uuid, store_status};

pub struct Admin {
    state: Arc<AppState>,
}

impl Admin {
    pub fn new(state: Arc<AppState>) -> Admin {
        Admin { state }
    }
}

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
}
