//! `memex.v1.EventService`: append, stream, read events and artifacts.
use std::pin::Pin;
use std::sync::Arc;

use futures::{FutureExt, Stream, StreamExt};
use memex_event::{ArtifactId, NamespaceId, PreparedBatch, Seq, SessionId, batch_fingerprint, prepare_batch};
use memex_proto::v1 as pb;
use memex_proto::v1::event_service_server::EventService;
use memex_store::{Access, AppendOutcome, AppendRequest, Namespace, SeqRange};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use uuid::Uuid;

use crate::convert;
use crate::state::AppState;
use crate::status::{check_size, field_status, parse_uuid, store_status, view_status};

/// Artifact bytes per streamed chunk.
const ARTIFACT_CHUNK: usize = 64 * 1024;
const MAX_IDS: usize = 1000;
const DEFAULT_PAGE: u32 = 500;
const MAX_PAGE: u32 = 5000;

pub struct Events {
    state: Arc<AppState>,
}

impl Events {
    pub fn new(state: Arc<AppState>) -> Events {
        Events { state }
    }
}

/// One validated append unit: an AppendEvents request or one StreamEvents message.
struct Unit {
    session_id: Uuid,
    batch: PreparedBatch,
    key: Option<String>,
    fingerprint: [u8; 32],
}

impl AppState {
    /// Checks one batch without touching the database. `prefix` locates it in a stream
    /// (`messages[4].`) so errors name the exact field.
    fn validate_unit(
        &self,
        prefix: &str,
        session_id: &str,
        events: Vec<pb::EventInput>,
        key: String,
    ) -> Result<Unit, Status> {
        let sid = parse_uuid(&format!("{prefix}session_id"), session_id)?;
        crate::rpc::record_session(sid);
        let key = convert::ident(&format!("{prefix}idempotency_key"), key, self.limits.max_id_bytes)?;
        let inputs = convert::event_inputs(events, prefix)?;
        let fingerprint = batch_fingerprint(session_id, &inputs);
        let batch = prepare_batch(inputs, &self.limits, &self.policy).map_err(|mut e| {
            e.field = format!("{prefix}{}", e.field);
            field_status(&e)
        })?;
        Ok(Unit { session_id: sid, batch, key, fingerprint })
    }

    /// Fills each event's full-view lines, one compiled view per session involved.
    async fn add_lines(&self, ns: &Namespace, events: &mut [pb::Event]) -> Result<(), Status> {
        let mut by_session: std::collections::BTreeMap<String, Vec<u64>> = std::collections::BTreeMap::new();
        for e in events.iter() {
            by_session.entry(e.session_id.clone()).or_default().push(e.seq);
        }
        for (session, seqs) in by_session {
            let id = SessionId(parse_uuid("session_id", &session)?);
            let seqs: Vec<Seq> = seqs.into_iter().map(Seq).collect();
            let lines = self.views.event_lines(NamespaceId(ns.id), id, &seqs).await.map_err(|e| view_status(&e))?;
            for e in events.iter_mut().filter(|e| e.session_id == session) {
                e.lines = lines.get(&Seq(e.seq)).map(|l| pb::FullViewLines {
                    chain: l.chain,
                    first_line: l.range.first,
                    last_line: l.range.last,
                });
            }
        }
        Ok(())
    }

    async fn commit(&self, ns: &Namespace, unit: Unit) -> Result<AppendOutcome, Status> {
        self.admission.wrote();
        let events = unit.batch.events.len() as u64;
        let bytes = crate::quotas::batch_bytes(&unit.batch);
        self.quotas.admit(ns, events, bytes).await?;
        let artifact_bytes: u64 =
            unit.batch.events.iter().filter_map(|e| e.artifact.as_ref()).map(|a| a.body.len() as u64).sum();
        let outcome = self
            .store
            .append(AppendRequest {
                namespace_id: ns.id,
                session_id: unit.session_id,
                batch: unit.batch,
                idempotency_key: unit.key,
                fingerprint: unit.fingerprint,
            })
            .await
            .map_err(|e| store_status(&e))?;
        if !outcome.replayed {
            self.quotas.appended(ns.id, bytes);
            self.metrics.events_appended.add(events, &[]);
            self.metrics.append_batches.add(1, &[]);
            self.metrics.artifact_bytes.add(artifact_bytes, &[]);
        }
        Ok(outcome)
    }
}

type AckStream = Pin<Box<dyn Stream<Item = Result<pb::StreamEventsAck, Status>> + Send>>;
type ChunkStream = Pin<Box<dyn Stream<Item = Result<pb::ArtifactChunk, Status>> + Send>>;

#[tonic::async_trait]
impl EventService for Events {
    async fn append_events(
        &self,
        request: Request<pb::AppendEventsRequest>,
    ) -> Result<Response<pb::AppendEventsResponse>, Status> {
        let st = &self.state;
        check_size("request", request.get_ref().encoded_len(), st.max_message_bytes)?;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Write).await?;
        let r = request.into_inner();
        let unit = st.validate_unit("", &r.session_id, r.events, r.idempotency_key)?;
        let outcome = st.commit(&ns, unit).await?;
        Ok(Response::new(pb::AppendEventsResponse {
            first_seq: outcome.first_seq,
            last_seq: outcome.last_seq,
            event_ids: outcome.event_ids.iter().map(Uuid::to_string).collect(),
            replayed: outcome.replayed,
            artifacts: outcome.artifacts.iter().map(convert::artifact_ref).collect(),
        }))
    }

    type StreamEventsStream = AckStream;

    async fn stream_events(
        &self,
        request: Request<Streaming<pb::StreamEventsRequest>>,
    ) -> Result<Response<AckStream>, Status> {
        let st = self.state.clone();
        let (tx, rx) = mpsc::channel(64);
        // Authenticate against the first message's namespace before answering.
        let metadata_req = Request::from_parts(request.metadata().clone(), request.extensions().clone(), ());
        let mut inbound = request.into_inner();
        let first = match inbound.message().await? {
            Some(m) => m,
            None => return Ok(Response::new(Box::pin(ReceiverStream::new(rx)))),
        };
        let ns = st.auth.scope(&metadata_req, &first.namespace, Access::Write).await?;
        // The task outlives this handler: it keeps the RPC's tenant (the caller's namespace).
        tokio::spawn(memex_store::tenant::inherit(memex_store::tenant::current(), async move {
            let result = ingest_stream(&st, &ns, first, &mut inbound, &tx).await;
            if let Err(status) = result {
                let _ = tx.send(Err(status)).await;
            }
        }));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_events(
        &self,
        request: Request<pb::GetEventsRequest>,
    ) -> Result<Response<pb::GetEventsResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        match (r.event_ids.is_empty(), r.session_id.is_empty()) {
            (false, false) => Err(Status::invalid_argument(
                "event_ids: give either event_ids or session_id with a seq range, not both",
            )),
            (true, true) => {
                Err(Status::invalid_argument("session_id: give event_ids, or a session_id and a seq range"))
            }
            (false, true) => {
                if r.event_ids.len() > MAX_IDS {
                    return Err(Status::invalid_argument(format!(
                        "event_ids: {} ids asked, over the limit of {MAX_IDS}",
                        r.event_ids.len()
                    )));
                }
                let ids = r
                    .event_ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| parse_uuid(&format!("event_ids[{i}]"), id))
                    .collect::<Result<Vec<_>, _>>()?;
                let events = st.store.events_by_ids(ns.id, &ids).await.map_err(|e| store_status(&e))?;
                let mut events: Vec<pb::Event> = events.into_iter().map(convert::event).collect();
                if r.with_lines {
                    st.add_lines(&ns, &mut events).await?;
                }
                Ok(Response::new(pb::GetEventsResponse { events, next_page_token: String::new() }))
            }
            (true, false) => {
                let session_id = crate::status::session_id(&r.session_id)?;
                let from = r.from_seq.max(1);
                let to = (r.to_seq != 0).then_some(r.to_seq);
                if let Some(to) = to
                    && to < from
                {
                    return Err(Status::invalid_argument(format!("to_seq: {to} is before from_seq {from}")));
                }
                let page_size = if r.page_size == 0 { DEFAULT_PAGE } else { r.page_size.min(MAX_PAGE) };
                let token = (!r.page_token.is_empty()).then_some(r.page_token.as_str());
                let page = st
                    .store
                    .events_in_range(ns.id, session_id, SeqRange { from, to }, page_size, token)
                    .await
                    .map_err(|e| store_status(&e))?;
                let mut events: Vec<pb::Event> = page.events.into_iter().map(convert::event).collect();
                let mut next = page.next_page_token;
                // Keep each page within the message limit (at least one event per page).
                let mut size = 0;
                if let Some(cut) = events.iter().enumerate().position(|(i, e)| {
                    size += e.encoded_len() + 8;
                    i > 0 && size > st.max_message_bytes
                }) {
                    next = Some(memex_store::seq_page_token(events[cut].seq));
                    events.truncate(cut);
                }
                if r.with_lines {
                    st.add_lines(&ns, &mut events).await?;
                }
                Ok(Response::new(pb::GetEventsResponse { events, next_page_token: next.unwrap_or_default() }))
            }
        }
    }

    type GetArtifactStream = ChunkStream;

    async fn get_artifact(&self, request: Request<pb::GetArtifactRequest>) -> Result<Response<ChunkStream>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let raw = &request.get_ref().artifact_id;
        if raw.is_empty() {
            return Err(Status::invalid_argument("artifact_id: is required"));
        }
        let id: ArtifactId = raw.parse().map_err(|e| Status::invalid_argument(format!("artifact_id: {e}")))?;
        let artifact = st.store.artifact(ns.id, id).await.map_err(|e| store_status(&e))?;
        let info = convert::artifact_ref(&artifact.info);
        let bytes = bytes::Bytes::from(artifact.bytes);
        let total = bytes.len();
        let mut chunks = Vec::with_capacity(total / ARTIFACT_CHUNK + 1);
        let mut offset = 0;
        loop {
            let end = (offset + ARTIFACT_CHUNK).min(total);
            chunks.push(Ok(pb::ArtifactChunk {
                artifact: (offset == 0).then(|| info.clone()),
                offset: offset as u64,
                data: bytes.slice(offset..end),
            }));
            offset = end;
            if offset >= total {
                break;
            }
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }
}

/// Drives one StreamEvents call: validates each message, commits messages that arrived together
/// in one statement when they can share one (same session, no idempotency key), and acknowledges
/// every commit. On a bad message, everything before it is committed and acknowledged first.
async fn ingest_stream(
    st: &AppState,
    ns: &Namespace,
    first: pb::StreamEventsRequest,
    inbound: &mut Streaming<pb::StreamEventsRequest>,
    tx: &mpsc::Sender<Result<pb::StreamEventsAck, Status>>,
) -> Result<(), Status> {
    let mut index: u64 = 0;
    let mut session = first.session_id.clone();
    let mut events_committed = 0u64;
    let mut next = Some(first);
    while let Some(msg) = next.take() {
        let mut group: Vec<Unit> = vec![to_unit(st, ns, index, msg, &mut session)?];
        let mut pending_error = None;
        // Take whatever else has already arrived, up to one batch's worth of events.
        while group.iter().map(|u| u.batch.events.len()).sum::<usize>() < st.limits.max_events {
            match inbound.next().now_or_never() {
                Some(Some(Ok(m))) => match to_unit(st, ns, index + group.len() as u64, m, &mut session) {
                    Ok(u) => group.push(u),
                    Err(e) => {
                        pending_error = Some(e);
                        break;
                    }
                },
                Some(Some(Err(e))) => {
                    pending_error = Some(e);
                    break;
                }
                Some(None) | None => break,
            }
        }
        for (first_seq, last_seq, n_msgs, n_events) in commit_group(st, ns, index, group).await? {
            index += n_msgs;
            events_committed += n_events;
            let ack = pb::StreamEventsAck { messages_committed: index, first_seq, last_seq, events_committed };
            if tx.send(Ok(ack)).await.is_err() {
                return Ok(()); // the client went away; what was acknowledged stays committed
            }
        }
        if let Some(e) = pending_error {
            return Err(e);
        }
        next = inbound.message().await?;
    }
    Ok(())
}

fn to_unit(
    st: &AppState,
    ns: &Namespace,
    index: u64,
    msg: pb::StreamEventsRequest,
    session: &mut String,
) -> Result<Unit, Status> {
    let prefix = format!("messages[{index}].");
    check_size(&format!("messages[{index}]"), msg.encoded_len(), st.max_message_bytes)?;
    if !msg.namespace.is_empty() && msg.namespace != ns.name {
        return Err(Status::invalid_argument(format!(
            "{prefix}namespace: a stream stays in one namespace ({:?})",
            ns.name
        )));
    }
    if !msg.session_id.is_empty() {
        session.clone_from(&msg.session_id);
    }
    st.validate_unit(&prefix, session, msg.events, msg.idempotency_key)
}

/// Commits a group of consecutive stream messages; returns (first_seq, last_seq, messages,
/// events) per commit. Runs of same-session, unkeyed messages share a statement; if a shared
/// commit is refused, its messages are retried one by one so the error names the exact message.
async fn commit_group(
    st: &AppState,
    ns: &Namespace,
    first_index: u64,
    group: Vec<Unit>,
) -> Result<Vec<(u64, u64, u64, u64)>, Status> {
    let mut acks = Vec::new();
    let mut run: Vec<Unit> = Vec::new();
    let mut index = first_index;
    for unit in group {
        let joins = unit.key.is_none()
            && run.last().is_some_and(|last| last.key.is_none() && last.session_id == unit.session_id);
        if !joins && !run.is_empty() {
            index += flush(st, ns, index, std::mem::take(&mut run), &mut acks).await?;
        }
        run.push(unit);
    }
    if !run.is_empty() {
        flush(st, ns, index, run, &mut acks).await?;
    }
    Ok(acks)
}

async fn flush(
    st: &AppState,
    ns: &Namespace,
    index: u64,
    run: Vec<Unit>,
    acks: &mut Vec<(u64, u64, u64, u64)>,
) -> Result<u64, Status> {
    let n_msgs = run.len() as u64;
    if run.len() == 1 || run.iter().any(|u| u.key.is_some()) {
        for (i, unit) in run.into_iter().enumerate() {
            let n = unit.batch.events.len() as u64;
            let o = st.commit(ns, unit).await.map_err(|s| at_message(s, index + i as u64))?;
            acks.push((o.first_seq, o.last_seq, 1, n));
        }
        return Ok(n_msgs);
    }
    let merged = merge(&run);
    let n = merged.batch.events.len() as u64;
    match st.commit(ns, merged).await {
        Ok(o) => {
            acks.push((o.first_seq, o.last_seq, n_msgs, n));
            Ok(n_msgs)
        }
        Err(s) if s.code() == tonic::Code::InvalidArgument => {
            // One of the messages is bad in a way only the database could tell: find which.
            for (i, unit) in run.into_iter().enumerate() {
                let n = unit.batch.events.len() as u64;
                let o = st.commit(ns, unit).await.map_err(|s| at_message(s, index + i as u64))?;
                acks.push((o.first_seq, o.last_seq, 1, n));
            }
            Ok(n_msgs)
        }
        Err(s) => Err(s),
    }
}

fn merge(run: &[Unit]) -> Unit {
    let mut events = Vec::new();
    let mut external = Vec::new();
    for u in run {
        let offset = events.len();
        external.extend(u.batch.external_tool_calls.iter().map(|(i, id)| (i + offset, id.clone())));
        events.extend(u.batch.events.iter().cloned());
    }
    // A result may answer a call from an earlier message of the same run (never a later one).
    let mut first_call: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, e) in events.iter().enumerate() {
        if e.kind == memex_event::EventKind::ToolCall
            && let Some(id) = e.tool_call_id.as_deref()
        {
            first_call.entry(id).or_insert(i);
        }
    }
    let external = external.into_iter().filter(|(i, id)| first_call.get(id.as_str()).is_none_or(|c| c > i)).collect();
    Unit {
        session_id: run[0].session_id,
        batch: PreparedBatch { events, external_tool_calls: external },
        key: None,
        fingerprint: [0; 32],
    }
}

fn at_message(s: Status, index: u64) -> Status {
    let msg = s.message();
    if msg.starts_with("messages[") { s } else { Status::new(s.code(), format!("messages[{index}].{msg}")) }
}
