//! [`Client`] methods of the TRACE engine: task state, delegation and reports (TaskService), and
//! windows, compaction and packs (ContextService).
use memex_proto::v1 as pb;

use crate::{Client, ClientError};

/// The live stream of `WatchReports`: earlier reports first, then each new one as it is recorded.
pub struct Reports(tonic::codec::Streaming<pb::TaskReport>);

impl Reports {
    /// The next report; `None` when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<pb::TaskReport>, ClientError> {
        Ok(self.0.message().await?)
    }
}

impl Client {
    // --- TaskService ----------------------------------------------------------------------

    /// A version of a task's state (0: the current one).
    pub async fn get_task_state(&self, task_id: &str, version: u64) -> Result<pb::TaskStateVersion, ClientError> {
        let req = pb::GetTaskStateRequest { namespace: self.ns(), task_id: task_id.to_owned(), version };
        Ok(self.tasks.clone().get_task_state(req).await?.into_inner())
    }

    /// Compare-and-swap: `FAILED_PRECONDITION` (naming the current version) when
    /// `req.expected_version` is stale.
    pub async fn update_task_state(
        &self,
        mut req: pb::UpdateTaskStateRequest,
    ) -> Result<pb::TaskStateVersion, ClientError> {
        req.namespace = self.ns();
        Ok(self.tasks.clone().update_task_state(req).await?.into_inner())
    }

    /// One page of a task's versions, newest first.
    pub async fn list_task_state_versions(
        &self,
        task_id: &str,
        page_size: u32,
        page_token: String,
    ) -> Result<pb::ListTaskStateVersionsResponse, ClientError> {
        let req = pb::ListTaskStateVersionsRequest {
            namespace: self.ns(),
            task_id: task_id.to_owned(),
            page_size,
            page_token,
        };
        Ok(self.tasks.clone().list_task_state_versions(req).await?.into_inner())
    }

    /// Up to `limit` versions of a task's state, newest first, across pages.
    pub async fn task_history(&self, task_id: &str, limit: usize) -> Result<Vec<pb::TaskStateVersion>, ClientError> {
        let mut out = Vec::new();
        let mut token = String::new();
        while out.len() < limit {
            let page_size = u32::try_from((limit - out.len()).min(200)).unwrap_or(200);
            let page = self.list_task_state_versions(task_id, page_size, token).await?;
            out.extend(page.versions);
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        out.truncate(limit);
        Ok(out)
    }

    pub async fn delegate(&self, mut req: pb::DelegateRequest) -> Result<pb::Delegation, ClientError> {
        req.namespace = self.ns();
        Ok(self.tasks.clone().delegate(req).await?.into_inner())
    }

    pub async fn report(&self, mut req: pb::ReportRequest) -> Result<pb::TaskReport, ClientError> {
        req.namespace = self.ns();
        Ok(self.tasks.clone().report(req).await?.into_inner())
    }

    /// The reports of `parent_task_id`'s children recorded after `after_seq`, then live ones.
    pub async fn watch_reports(&self, parent_task_id: &str, after_seq: u64) -> Result<Reports, ClientError> {
        let req =
            pb::WatchReportsRequest { namespace: self.ns(), parent_task_id: parent_task_id.to_owned(), after_seq };
        Ok(Reports(self.tasks.clone().watch_reports(req).await?.into_inner()))
    }

    // --- ContextService -------------------------------------------------------------------

    pub async fn compact(&self, mut req: pb::CompactRequest) -> Result<pb::CompactResponse, ClientError> {
        req.namespace = self.ns();
        Ok(self.context.clone().compact(req).await?.into_inner())
    }

    /// One page of a manifest's evicted events.
    pub async fn expand_manifest(
        &self,
        manifest_id: &str,
        page_size: u32,
        page_token: String,
    ) -> Result<pb::ExpandManifestResponse, ClientError> {
        let req = pb::ExpandManifestRequest {
            namespace: self.ns(),
            manifest_id: manifest_id.to_owned(),
            page_size,
            page_token,
        };
        Ok(self.context.clone().expand_manifest(req).await?.into_inner())
    }

    /// A manifest and every event it evicted, across pages.
    pub async fn expand_manifest_all(
        &self,
        manifest_id: &str,
    ) -> Result<(pb::PointerManifest, Vec<pb::Event>), ClientError> {
        let mut first = self.expand_manifest(manifest_id, 5000, String::new()).await?;
        let mut events = std::mem::take(&mut first.events);
        let mut token = first.next_page_token;
        while !token.is_empty() {
            let page = self.expand_manifest(manifest_id, 5000, token).await?;
            events.extend(page.events);
            token = page.next_page_token;
        }
        Ok((first.manifest.unwrap_or_default(), events))
    }

    pub async fn get_window(&self, session_id: &str, tokenizer: &str) -> Result<pb::Window, ClientError> {
        let req = pb::GetWindowRequest {
            namespace: self.ns(),
            session_id: session_id.to_owned(),
            tokenizer: tokenizer.to_owned(),
        };
        Ok(self.context.clone().get_window(req).await?.into_inner())
    }

    pub async fn build_pack(&self, mut req: pb::BuildPackRequest) -> Result<pb::Pack, ClientError> {
        req.namespace = self.ns();
        self.unshed(|| {
            let (mut c, req) = (self.context.clone(), req.clone());
            async move { c.build_pack(req).await }
        })
        .await
    }

    /// The handoff snapshot of a session (or of an agent's or task's latest session).
    pub async fn build_snapshot(&self, mut req: pb::BuildSnapshotRequest) -> Result<pb::Snapshot, ClientError> {
        req.namespace = self.ns();
        self.unshed(|| {
            let (mut c, req) = (self.context.clone(), req.clone());
            async move { c.build_snapshot(req).await }
        })
        .await
    }

    /// A stored pack, exactly as built (`view`: `PackViewUnspecified` means whole).
    pub async fn get_pack(&self, pack_id: &str, view: pb::PackView) -> Result<pb::Pack, ClientError> {
        let req = pb::GetPackRequest { namespace: self.ns(), pack_id: pack_id.to_owned(), view: view as i32 };
        Ok(self.context.clone().get_pack(req).await?.into_inner())
    }
}
