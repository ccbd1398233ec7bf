//! `memex.v1.ViewService`: decode, call the use case in `memex-views`, encode.
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use memex_event::{NamespaceId, Seq, SessionId};
use memex_pointer::{LineRange, Pointer};
use memex_proto::v1 as pb;
use memex_proto::v1::view_service_server::ViewService;
use memex_store::{Access, NewSession};
use memex_vcc::{InputFormat, LineKind, PredicateSpec, UiOptions};
use memex_views::{ImportTrace, RankedQuery, RenderedView, ViewKind, ViewQuery, ViewRequest};
use tonic::{Request, Response, Status, Streaming};

use crate::convert;
use crate::state::AppState;
use crate::status::{index_status, parse_opt_uuid, view_status};

const TEXT_CHUNK: usize = 64 * 1024;
const MAX_DIAGNOSTICS: usize = 100;
/// Largest `top_k` of a ranked predicate.
const MAX_TOP_K: u32 = 1000;

/// The ViewService handlers (the compiled sessions themselves are `memex_views::Views`).
pub struct ViewHandler {
    state: Arc<AppState>,
}

impl ViewHandler {
    pub fn new(state: Arc<AppState>) -> ViewHandler {
        ViewHandler { state }
    }
}

type TextStream = Pin<Box<dyn Stream<Item = Result<pb::ViewChunk, Status>> + Send>>;

#[tonic::async_trait]
impl ViewService for ViewHandler {
    async fn import_trace(
        &self,
        request: Request<Streaming<pb::ImportTraceRequest>>,
    ) -> Result<Response<pb::ImportTraceResponse>, Status> {
        let st = &self.state;
        let meta = Request::from_parts(request.metadata().clone(), request.extensions().clone(), ());
        let mut inbound = request.into_inner();
        let first = inbound.message().await?.ok_or_else(|| Status::invalid_argument("the stream is empty"))?;
        let ns = st.auth.scope(&meta, &first.namespace, Access::Write).await?;
        let _turn = st.admit(&meta).await?;
        let max = st.limits.max_id_bytes;
        let agent_id = convert::ident("agent_id", first.agent_id.clone(), max)?
            .ok_or_else(|| Status::invalid_argument("agent_id: is required"))?;
        let format: InputFormat =
            first.input_format.parse().map_err(|e| Status::invalid_argument(format!("input_format: {e}")))?;
        let file_name =
            convert::ident("file_name", first.file_name.clone(), max)?.unwrap_or_else(|| "trace.jsonl".into());
        let session = NewSession {
            id: parse_opt_uuid("session_id", &first.session_id)?,
            agent_id,
            parent_session_id: parse_opt_uuid("parent_session_id", &first.parent_session_id)?,
            task_id: convert::ident("task_id", first.task_id.clone(), max)?,
            source_format: String::new(),
            metadata: None,
        };
        let strict = first.strict;
        let mut raw = first.chunk;
        while let Some(msg) = inbound.message().await? {
            if raw.len() + msg.chunk.len() > st.max_import_bytes {
                return Err(Status::invalid_argument(format!(
                    "chunk: the trace exceeds {} bytes (limits.max_import_bytes)",
                    st.max_import_bytes
                )));
            }
            raw.extend_from_slice(&msg.chunk);
        }
        // The trace is kept (an artifact) and becomes events of about its size: twice its bytes,
        // until a recount (`memex admin quota --recount`) says exactly.
        let bytes = 2 * raw.len() as u64;
        st.quotas.admit(&ns, 0, bytes).await?;
        let req = ImportTrace { session, file_name, format, strict, raw };
        let imported = st.views.import(NamespaceId(ns.id), req, &st.policy, max).await.map_err(|e| view_status(&e))?;
        st.quotas.charge(ns.id, imported.events, bytes);
        st.metrics.events_appended.add(imported.events, &[]);
        crate::rpc::record_session(imported.session.id);
        let raw_ref = imported.session.source.as_ref().map(|s| pb::ArtifactRef {
            id: s.artifact.to_string(),
            size: 0,
            media_type: imported.media_type.to_owned(),
        });
        Ok(Response::new(pb::ImportTraceResponse {
            format: imported.format.name().to_owned(),
            raw: raw_ref,
            events: imported.events,
            chains: imported.chains as u32,
            diagnostics: imported.diagnostics.iter().take(MAX_DIAGNOSTICS).map(diagnostic).collect(),
            diagnostic_count: imported.diagnostics.len() as u32,
            session: Some(convert::session(imported.session, &ns.name)),
        }))
    }

    type CompileViewStream = TextStream;

    async fn compile_view(&self, request: Request<pb::CompileViewRequest>) -> Result<Response<TextStream>, Status> {
        let st = &self.state;
        let ns = NamespaceId(st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?.id);
        let _turn = st.admit(&request).await?;
        let r = request.into_inner();
        let session = SessionId(crate::status::session_id(&r.session_id)?);
        let kind = match pb::ViewKind::try_from(r.view).unwrap_or(pb::ViewKind::Unspecified) {
            pb::ViewKind::Unspecified => {
                return Err(Status::invalid_argument("view: choose VIEW_KIND_FULL, _UI, _ADAPTIVE or _INDEX"));
            }
            pb::ViewKind::Full => ViewKind::Full,
            pb::ViewKind::Ui => ViewKind::Ui(ui_options(r.truncate, r.truncate_user)),
            pb::ViewKind::Adaptive => ViewKind::Adaptive,
            pb::ViewKind::Index => ViewKind::Index,
        };
        let ranks = matches!(kind, ViewKind::Adaptive | ViewKind::Index);
        let query = match &r.predicate {
            Some(p) => self.view_query(ns, session, p, ranks).await?,
            None => None,
        };
        let view = st
            .views
            .render(ns, session, ViewRequest { kind, chain: r.chain, query })
            .await
            .map_err(|e| view_status(&e))?;
        Ok(Response::new(text_stream(view)))
    }

    async fn read_lines(
        &self,
        request: Request<pb::ReadLinesRequest>,
    ) -> Result<Response<pb::ReadLinesResponse>, Status> {
        let st = &self.state;
        let ns = NamespaceId(st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?.id);
        let r = request.into_inner();
        let pointer = if r.pointer.is_empty() {
            Pointer {
                session: SessionId(crate::status::session_id(&r.session_id)?),
                chain: r.chain.max(1),
                range: LineRange { first: r.first_line, last: r.last_line },
            }
        } else {
            Pointer::parse(&r.pointer).map_err(|e| Status::invalid_argument(e.to_string()))?
        };
        crate::rpc::record_session(pointer.session.0);
        let read = st.views.read_lines(ns, pointer, r.context).await.map_err(|e| view_status(&e))?;
        Ok(Response::new(pb::ReadLinesResponse {
            lines: read
                .lines
                .into_iter()
                .map(|l| pb::Line {
                    number: l.number,
                    text: l.text,
                    role: l.role.map(|r| r.as_str().to_owned()).unwrap_or_default(),
                    kind: line_kind(&l.kind).to_owned(),
                    block: l.block.map(|b| b as i32).unwrap_or(-1),
                })
                .collect(),
            chain: read.chain,
            full_lines: read.full_lines,
        }))
    }
}

impl ViewHandler {
    /// Decodes a predicate. A semantic ranker's scores come from the search index, asked only when
    /// the view ranks (`ranks`); the full and UI views ignore a predicate once it is valid.
    async fn view_query(
        &self,
        ns: NamespaceId,
        session: SessionId,
        p: &pb::Predicate,
        ranks: bool,
    ) -> Result<Option<ViewQuery>, Status> {
        let ranker = pb::Ranker::try_from(p.ranker)
            .map_err(|_| Status::invalid_argument(format!("predicate.ranker: unknown value {}", p.ranker)))?;
        if ranker == pb::Ranker::Unspecified {
            if !p.query.is_empty() {
                return Err(Status::invalid_argument(
                    "predicate.query: only with a ranker (RANKER_BM25, RANKER_SEMANTIC)",
                ));
            }
            return predicate_spec(p).map(|spec| Some(ViewQuery::Lines(spec)));
        }
        if !p.regex.is_empty() || !p.literal.is_empty() || !p.terms.is_empty() {
            return Err(Status::invalid_argument("predicate: a ranker takes `query`, not regex, literal or terms"));
        }
        if p.query.trim().is_empty() {
            return Err(Status::invalid_argument("predicate.query: required with a ranker"));
        }
        if p.top_k > MAX_TOP_K {
            return Err(Status::invalid_argument(format!("predicate.top_k: at most {MAX_TOP_K}")));
        }
        let top_k = if p.top_k == 0 { 10 } else { p.top_k as usize };
        let roles = p.roles.clone();
        if ranker == pb::Ranker::Bm25 {
            return Ok(Some(ViewQuery::Ranked(RankedQuery::Bm25 { query: p.query.clone(), top_k, roles })));
        }
        if !ranks {
            return Ok(None);
        }
        let index = self.state.search.as_ref().ok_or_else(|| {
            Status::failed_precondition("predicate.ranker: RANKER_SEMANTIC needs the search layer (search.enabled)")
        })?;
        let scores = index.vector_scores(ns, session, &p.query, top_k).await.map_err(|e| match e {
            memex_search::IndexError::NoEmbedder => {
                Status::failed_precondition(format!("predicate.ranker: RANKER_SEMANTIC {e}"))
            }
            e => index_status(&e),
        })?;
        let mut by_seq: std::collections::HashMap<Seq, f64> = std::collections::HashMap::new();
        for (seq, score) in scores {
            by_seq.entry(seq).and_modify(|s| *s = s.max(f64::from(score))).or_insert(f64::from(score));
        }
        Ok(Some(ViewQuery::Ranked(RankedQuery::Scored { scores: by_seq, top_k, roles })))
    }
}

fn predicate_spec(p: &pb::Predicate) -> Result<PredicateSpec, Status> {
    let given = [!p.regex.is_empty(), !p.literal.is_empty(), !p.terms.is_empty()].iter().filter(|b| **b).count();
    if given != 1 {
        return Err(Status::invalid_argument("predicate: give exactly one of regex, literal or terms"));
    }
    Ok(PredicateSpec {
        regex: (!p.regex.is_empty()).then(|| p.regex.clone()),
        literal: (!p.literal.is_empty()).then(|| p.literal.clone()),
        terms: p.terms.clone(),
        all_terms: p.all_terms,
        ignore_case: p.ignore_case,
        roles: p.roles.clone(),
    })
}

fn ui_options(truncate: i32, truncate_user: i32) -> UiOptions {
    let d = UiOptions::default();
    let pick = |v: i32, default: i64| match v {
        0 => default,
        v if v < 0 => 0,
        v => i64::from(v),
    };
    UiOptions { truncate: pick(truncate, d.truncate), truncate_user: pick(truncate_user, d.truncate_user) }
}

fn diagnostic(d: &memex_vcc::Diagnostic) -> pb::Diagnostic {
    pb::Diagnostic {
        line: d.line,
        col: d.col,
        severity: format!("{:?}", d.severity).to_lowercase(),
        message: d.message.clone(),
    }
}

fn text_stream(view: RenderedView) -> TextStream {
    let info = pb::ViewInfo {
        file_name: view.file_name,
        chains: view.chains,
        full_lines: view.full_lines,
        size: view.text.len() as u64,
        version: view.version,
    };
    let text = view.text;
    let mut chunks = vec![Ok(pb::ViewChunk { info: Some(info), text: bytes::Bytes::new() })];
    let mut at = 0;
    while at < text.len() {
        let end = (at + TEXT_CHUNK).min(text.len());
        chunks.push(Ok(pb::ViewChunk { info: None, text: text.slice(at..end) }));
        at = end;
    }
    Box::pin(tokio_stream::iter(chunks))
}

fn line_kind(k: &LineKind) -> &'static str {
    match k {
        LineKind::Separator => "separator",
        LineKind::Header => "header",
        LineKind::Blank => "blank",
        LineKind::Open => "open",
        LineKind::Body => "body",
        LineKind::Close => "close",
        LineKind::Trailer => "trailer",
        LineKind::Stats => "stats",
    }
}
