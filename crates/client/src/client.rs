//! [`Client`]: one typed method per RPC of sessions, events, views, search and API keys (the
//! task and context RPCs are in `context.rs`, memory's in `memory.rs`). Every call acts in the
//! client's namespace, which overwrites whatever a request passed in carries.
use std::io::Write;

use memex_proto::v1 as pb;
use memex_proto::v1::admin_service_client::AdminServiceClient;
use memex_proto::v1::context_service_client::ContextServiceClient;
use memex_proto::v1::event_service_client::EventServiceClient;
use memex_proto::v1::memory_service_client::MemoryServiceClient;
use memex_proto::v1::search_service_client::SearchServiceClient;
use memex_proto::v1::session_service_client::SessionServiceClient;
use memex_proto::v1::task_service_client::TaskServiceClient;
use memex_proto::v1::view_service_client::ViewServiceClient;
use tonic::transport::Channel;

use crate::{Authed, Bearer, ClientError};

/// A connection to one namespace of a server. Cheap to clone; the methods take `&self`, so one
/// client serves concurrent callers.
#[derive(Clone)]
pub struct Client {
    pub(crate) namespace: String,
    pub(crate) events: EventServiceClient<Authed>,
    pub(crate) sessions: SessionServiceClient<Authed>,
    pub(crate) views: ViewServiceClient<Authed>,
    pub(crate) search: SearchServiceClient<Authed>,
    pub(crate) context: ContextServiceClient<Authed>,
    pub(crate) tasks: TaskServiceClient<Authed>,
    pub(crate) memory: MemoryServiceClient<Authed>,
    pub(crate) admin: AdminServiceClient<Authed>,
    /// Times a call the server shed is sent again (`retry.rs`).
    pub(crate) retries: u32,
}

/// A compiled view: what the server says about it, then its text.
#[derive(Debug, Clone, Default)]
pub struct CompiledView {
    pub info: pb::ViewInfo,
    pub text: Vec<u8>,
}

/// Bytes per `ImportTrace` message.
const IMPORT_CHUNK: usize = 1 << 20;

impl Client {
    /// A client over an open channel; messages of any size both ways (the server enforces its own
    /// limits and says so).
    pub fn new(channel: Channel, bearer: Bearer, namespace: impl Into<String>) -> Client {
        let (ch, b) = (channel, bearer);
        Client {
            namespace: namespace.into(),
            events: EventServiceClient::with_interceptor(ch.clone(), b.clone())
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
            sessions: SessionServiceClient::with_interceptor(ch.clone(), b.clone())
                .max_decoding_message_size(usize::MAX),
            views: ViewServiceClient::with_interceptor(ch.clone(), b.clone())
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
            search: SearchServiceClient::with_interceptor(ch.clone(), b.clone()).max_decoding_message_size(usize::MAX),
            context: ContextServiceClient::with_interceptor(ch.clone(), b.clone())
                .max_decoding_message_size(usize::MAX),
            tasks: TaskServiceClient::with_interceptor(ch.clone(), b.clone()).max_decoding_message_size(usize::MAX),
            memory: MemoryServiceClient::with_interceptor(ch.clone(), b.clone()).max_decoding_message_size(usize::MAX),
            admin: AdminServiceClient::with_interceptor(ch, b),
            retries: crate::retry::SHED_RETRIES,
        }
    }

    /// How many times a call the server shed (`RESOURCE_EXHAUSTED` with a retry hint: nothing
    /// was done) is sent again after the hint; 0 to see every refusal.
    pub fn with_shed_retries(mut self, retries: u32) -> Client {
        self.retries = retries;
        self
    }

    /// `call`'s answer, sent again while the server sheds it.
    pub(crate) async fn unshed<T, F, Fut>(&self, call: F) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        Ok(crate::retry::shed_retry(self.retries, call).await?.into_inner())
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub(crate) fn ns(&self) -> String {
        self.namespace.clone()
    }

    // --- SessionService -------------------------------------------------------------------

    pub async fn create_session(&self, mut req: pb::CreateSessionRequest) -> Result<pb::Session, ClientError> {
        req.namespace = self.ns();
        Ok(self.sessions.clone().create_session(req).await?.into_inner())
    }

    pub async fn get_session(&self, session_id: &str) -> Result<pb::Session, ClientError> {
        let req = pb::GetSessionRequest { namespace: self.ns(), session_id: session_id.to_owned() };
        Ok(self.sessions.clone().get_session(req).await?.into_inner())
    }

    /// One page, newest first.
    pub async fn list_sessions(
        &self,
        mut req: pb::ListSessionsRequest,
    ) -> Result<pb::ListSessionsResponse, ClientError> {
        req.namespace = self.ns();
        Ok(self.sessions.clone().list_sessions(req).await?.into_inner())
    }

    // --- EventService ---------------------------------------------------------------------

    /// One atomic batch; with an idempotency key a retry replays the first answer.
    pub async fn append_events(
        &self,
        session_id: &str,
        events: Vec<pb::EventInput>,
        idempotency_key: Option<String>,
    ) -> Result<pb::AppendEventsResponse, ClientError> {
        let req = pb::AppendEventsRequest {
            namespace: self.ns(),
            session_id: session_id.to_owned(),
            events,
            idempotency_key: idempotency_key.unwrap_or_default(),
        };
        // A shed append wrote nothing: sending it again cannot commit it twice.
        self.unshed(|| {
            let (mut c, req) = (self.events.clone(), req.clone());
            async move { c.append_events(req).await }
        })
        .await
    }

    /// Streams `batches` (each one atomic) to a session; returns the last acknowledgement, which
    /// counts every message and event committed.
    pub async fn stream_events(
        &self,
        session_id: &str,
        batches: Vec<Vec<pb::EventInput>>,
    ) -> Result<pb::StreamEventsAck, ClientError> {
        let (ns, session) = (self.ns(), session_id.to_owned());
        let msgs = batches.into_iter().enumerate().map(move |(i, events)| pb::StreamEventsRequest {
            namespace: if i == 0 { ns.clone() } else { String::new() },
            session_id: if i == 0 { session.clone() } else { String::new() },
            events,
            idempotency_key: String::new(),
        });
        let mut acks = self.events.clone().stream_events(tokio_stream::iter(msgs)).await?.into_inner();
        let mut last = pb::StreamEventsAck::default();
        while let Some(ack) = acks.message().await? {
            last = ack;
        }
        Ok(last)
    }

    /// One page of events: by ids, or a session's seq range (`req.session_id`, `from_seq`, …).
    pub async fn get_events(&self, mut req: pb::GetEventsRequest) -> Result<pb::GetEventsResponse, ClientError> {
        req.namespace = self.ns();
        Ok(self.events.clone().get_events(req).await?.into_inner())
    }

    /// Every event of a session, in seq order, across pages.
    pub async fn session_events(&self, session_id: &str) -> Result<Vec<pb::Event>, ClientError> {
        let mut out = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .get_events(pb::GetEventsRequest {
                    session_id: session_id.to_owned(),
                    page_size: 1000,
                    page_token: std::mem::take(&mut token),
                    ..Default::default()
                })
                .await?;
            out.extend(page.events);
            if page.next_page_token.is_empty() {
                return Ok(out);
            }
            token = page.next_page_token;
        }
    }

    /// Writes an artifact's bytes to `out`; returns its metadata.
    pub async fn get_artifact(&self, artifact_id: &str, out: &mut impl Write) -> Result<pb::ArtifactRef, ClientError> {
        let req = pb::GetArtifactRequest { namespace: self.ns(), artifact_id: artifact_id.to_owned() };
        let mut stream = self.events.clone().get_artifact(req).await?.into_inner();
        let mut meta = pb::ArtifactRef::default();
        while let Some(chunk) = stream.message().await? {
            if let Some(a) = chunk.artifact {
                meta = a;
            }
            out.write_all(&chunk.data).map_err(|e| ClientError::Input(format!("cannot write the artifact: {e}")))?;
        }
        Ok(meta)
    }

    // --- ViewService ----------------------------------------------------------------------

    /// Uploads a whole trace (`meta` carries the first message's fields). `sent` is called with
    /// the bytes handed to the transport so far, as the upload proceeds (for a progress bar).
    pub async fn import_trace(
        &self,
        mut meta: pb::ImportTraceRequest,
        trace: Vec<u8>,
        mut sent: impl FnMut(u64) + Send + 'static,
    ) -> Result<pb::ImportTraceResponse, ClientError> {
        meta.namespace = self.ns();
        meta.chunk = Vec::new();
        let trace = std::sync::Arc::new(trace);
        let chunks = trace.len().div_ceil(IMPORT_CHUNK);
        let body = (0..chunks).map(move |i| {
            let end = ((i + 1) * IMPORT_CHUNK).min(trace.len());
            sent(end as u64);
            pb::ImportTraceRequest { chunk: trace[i * IMPORT_CHUNK..end].to_vec(), ..Default::default() }
        });
        let msgs = std::iter::once(meta).chain(body);
        Ok(self.views.clone().import_trace(tokio_stream::iter(msgs)).await?.into_inner())
    }

    /// A session's view, whole.
    pub async fn compile_view(&self, mut req: pb::CompileViewRequest) -> Result<CompiledView, ClientError> {
        req.namespace = self.ns();
        let mut stream = self
            .unshed(|| {
                let (mut c, req) = (self.views.clone(), req.clone());
                async move { c.compile_view(req).await }
            })
            .await?;
        let mut view = CompiledView::default();
        while let Some(chunk) = stream.message().await? {
            if let Some(info) = chunk.info {
                view.text.reserve(usize::try_from(info.size).unwrap_or(0));
                view.info = info;
            }
            view.text.extend_from_slice(&chunk.text);
        }
        Ok(view)
    }

    /// Full-view lines: `req.pointer` (`session:first-last`) or session, chain and range.
    pub async fn read_lines(&self, mut req: pb::ReadLinesRequest) -> Result<pb::ReadLinesResponse, ClientError> {
        req.namespace = self.ns();
        Ok(self.views.clone().read_lines(req).await?.into_inner())
    }

    // --- SearchService --------------------------------------------------------------------

    pub async fn search(&self, mut req: pb::SearchRequest) -> Result<pb::SearchResponse, ClientError> {
        req.namespace = self.ns();
        self.unshed(|| {
            let (mut c, req) = (self.search.clone(), req.clone());
            async move { c.search(req).await }
        })
        .await
    }

    // --- AdminService ---------------------------------------------------------------------

    /// A new key of this namespace; the token is in the answer only.
    pub async fn create_api_key(&self, name: &str, right: pb::Right) -> Result<pb::CreateApiKeyResponse, ClientError> {
        let req = pb::CreateApiKeyRequest { namespace: self.ns(), name: name.to_owned(), right: right as i32 };
        Ok(self.admin.clone().create_api_key(req).await?.into_inner())
    }

    pub async fn list_api_keys(&self) -> Result<Vec<pb::ApiKey>, ClientError> {
        let req = pb::ListApiKeysRequest { namespace: self.ns() };
        Ok(self.admin.clone().list_api_keys(req).await?.into_inner().keys)
    }

    pub async fn revoke_api_key(&self, key_id: &str) -> Result<pb::ApiKey, ClientError> {
        let req = pb::RevokeApiKeyRequest { namespace: self.ns(), key_id: key_id.to_owned() };
        Ok(self.admin.clone().revoke_api_key(req).await?.into_inner())
    }

    /// Rotates a key: a new one, and the old one expiring after `overlap_secs`.
    pub async fn rotate_api_key(
        &self,
        key_id: &str,
        overlap_secs: u32,
    ) -> Result<pb::RotateApiKeyResponse, ClientError> {
        let req = pb::RotateApiKeyRequest { namespace: self.ns(), key_id: key_id.to_owned(), overlap_secs };
        Ok(self.admin.clone().rotate_api_key(req).await?.into_inner())
    }

    /// Erases a data subject's sessions (see `EraseSubject`); `req.dry_run` only counts.
    pub async fn erase_subject(
        &self,
        mut req: pb::EraseSubjectRequest,
    ) -> Result<pb::EraseSubjectResponse, ClientError> {
        req.namespace = self.ns();
        Ok(self.admin.clone().erase_subject(req).await?.into_inner())
    }
}
