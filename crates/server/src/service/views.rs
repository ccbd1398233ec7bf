//! `memex.v1.ViewService`: import traces, compile views, dereference pointers.
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use memex_event::{BatchLimits, EventInput, prepare_batch};
use memex_proto::v1 as pb;
use memex_proto::v1::view_service_server::ViewService;
use memex_rank::{Bm25Blocks, ScoredBlocks};
use memex_store::{Access, ImportRequest, NewSession};
use memex_vcc::{
    Chain, CompileError, CompileOptions, InputFormat, LineKind, LineRange, Predicate, PredicateSpec, RoleFilter,
    TransposedEntry, UiOptions,
};
use tonic::{Request, Response, Status, Streaming};

use crate::convert;
use crate::state::AppState;
use crate::status::{field_status, parse_opt_uuid, parse_uuid, store_status};
use crate::views::stem_of;

const TEXT_CHUNK: usize = 64 * 1024;
const MAX_READ_LINES: u32 = 20_000;
const MAX_DIAGNOSTICS: usize = 100;

pub struct Views {
    state: Arc<AppState>,
}

impl Views {
    pub fn new(state: Arc<AppState>) -> Views {
        Views { state }
    }
}

type TextStream = Pin<Box<dyn Stream<Item = Result<pb::ViewChunk, Status>> + Send>>;

fn parse_format(field: &str, s: &str) -> Result<InputFormat, Status> {
    match s {
        "" | "auto" => Ok(InputFormat::Auto),
        "claude" => Ok(InputFormat::Claude),
        "codex" => Ok(InputFormat::Codex),
        "gemini" => Ok(InputFormat::Gemini),
        "memex" => Ok(InputFormat::Memex),
        other => Err(Status::invalid_argument(format!(
            "{field}: unknown format {other:?}; expected auto, claude, codex, gemini or memex"
        ))),
    }
}

fn format_name(f: memex_vcc::TraceFormat) -> &'static str {
    match f {
        memex_vcc::TraceFormat::Claude => "claude",
        memex_vcc::TraceFormat::Codex => "codex",
        memex_vcc::TraceFormat::Gemini => "gemini",
        memex_vcc::TraceFormat::Memex => "memex",
    }
}

fn diagnostic(d: &memex_vcc::Diagnostic) -> pb::Diagnostic {
    pb::Diagnostic {
        line: d.line,
        col: d.col,
        severity: format!("{:?}", d.severity).to_lowercase(),
        message: d.message.clone(),
    }
}

/// An imported trace's events as append inputs. A trace records what happened, so calls and
/// results missing an id or a name get stand-ins (noted in their metadata) instead of refusal.
fn import_inputs(records: Vec<memex_vcc::EventRecord>, agent_id: &str) -> Vec<EventInput> {
    records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let mut metadata = match r.metadata {
                serde_json::Value::Object(m) => m,
                _ => serde_json::Map::new(),
            };
            let event_time = r.event_time.as_deref().and_then(|t| {
                let parsed = chrono::DateTime::parse_from_rfc3339(t).ok().map(|d| d.with_timezone(&chrono::Utc));
                if parsed.is_none() {
                    metadata.insert("source_timestamp".into(), t.into());
                }
                parsed
            });
            let mut tool_name = r.tool_name.unwrap_or_default();
            let mut tool_call_id = r.tool_call_id.unwrap_or_default();
            let is_call = r.kind == "tool_call";
            let is_output = r.kind == "tool_result" || r.kind == "tool_error";
            if is_call && tool_name.is_empty() {
                tool_name = "unknown".into();
                metadata.insert("memex_stand_in".into(), "tool_name".into());
            }
            if (is_call || is_output) && tool_call_id.is_empty() {
                tool_call_id = format!("memex-import-{i}");
                metadata.insert("memex_stand_in".into(), "tool_call_id".into());
            }
            let kind = if memex_event::EventKind::parse(&r.kind).is_ok() { r.kind } else { format!("x-{}", r.kind) };
            EventInput {
                kind,
                content: r.content,
                agent_id: r.agent_id.unwrap_or_else(|| agent_id.to_owned()),
                task_id: String::new(),
                tool_name,
                tool_call_id,
                event_time,
                metadata_json: if metadata.is_empty() {
                    String::new()
                } else {
                    serde_json::Value::Object(metadata).to_string()
                },
                media_type: String::new(),
            }
        })
        .collect()
}

fn chain_index(chain: u32, n: usize) -> Result<usize, Status> {
    let i = chain.max(1) as usize - 1;
    if i >= n {
        return Err(Status::invalid_argument(format!("chain: {chain} is out of range; the trace has {n} chain(s)")));
    }
    Ok(i)
}

fn text_stream(info: pb::ViewInfo, text: bytes::Bytes) -> TextStream {
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

/// `session-id:first-last` or `session-id#chain:first-last`.
fn parse_pointer(p: &str) -> Result<(String, u32, u32, u32), Status> {
    let bad = || {
        Status::invalid_argument(format!(
            "pointer: {p:?} is not \"session-id:first-last\" or \"session-id#chain:first-last\""
        ))
    };
    let (head, range) = p.rsplit_once(':').ok_or_else(bad)?;
    let (first, last) = range.split_once('-').ok_or_else(bad)?;
    let (session, chain) = match head.split_once('#') {
        Some((s, c)) => (s, c.parse().map_err(|_| bad())?),
        None => (head, 1),
    };
    Ok((session.to_owned(), chain, first.parse().map_err(|_| bad())?, last.parse().map_err(|_| bad())?))
}

#[tonic::async_trait]
impl ViewService for Views {
    async fn import_trace(
        &self,
        request: Request<Streaming<pb::ImportTraceRequest>>,
    ) -> Result<Response<pb::ImportTraceResponse>, Status> {
        let st = &self.state;
        let meta = Request::from_parts(request.metadata().clone(), request.extensions().clone(), ());
        let mut inbound = request.into_inner();
        let first = inbound.message().await?.ok_or_else(|| Status::invalid_argument("the stream is empty"))?;
        let ns = st.auth.scope(&meta, &first.namespace, Access::Write).await?;
        let max = st.limits.max_id_bytes;
        let agent_id = convert::ident("agent_id", first.agent_id.clone(), max)?
            .ok_or_else(|| Status::invalid_argument("agent_id: is required"))?;
        let format = parse_format("input_format", &first.input_format)?;
        let file_name =
            convert::ident("file_name", first.file_name.clone(), max)?.unwrap_or_else(|| "trace.jsonl".into());
        let new = NewSession {
            id: parse_opt_uuid("session_id", &first.session_id)?,
            agent_id: agent_id.clone(),
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
        let stem = stem_of(&file_name);
        let (raw, trace, records) = tokio::task::spawn_blocking(move || {
            let opts = CompileOptions { format, strict };
            let trace = memex_vcc::compile_trace(&raw, &stem, opts)?;
            let (records, _) = memex_vcc::trace_events(&raw, format, strict)?;
            Ok::<_, CompileError>((raw, trace, records))
        })
        .await
        .map_err(|e| Status::internal(format!("import task failed: {e}")))?
        .map_err(|e| Status::invalid_argument(format!("chunk: {e}")))?;
        let format_name = format_name(trace.format());
        let inputs = import_inputs(records, &agent_id);
        let limits = BatchLimits { max_events: usize::MAX, max_id_bytes: max.max(1024) };
        let mut batch = if inputs.is_empty() {
            memex_event::PreparedBatch { events: vec![], external_tool_calls: vec![] }
        } else {
            prepare_batch(inputs, &limits, &st.policy).map_err(|e| field_status(&e))?
        };
        batch.external_tool_calls.clear(); // a trace may hold results whose call it never saw
        let media_type =
            if trace.format() == memex_vcc::TraceFormat::Gemini { "application/json" } else { "application/x-ndjson" };
        let (session, outcome) = st
            .store
            .import_session(ImportRequest {
                namespace_id: ns.id,
                session: NewSession { source_format: format_name.to_owned(), ..new },
                raw,
                file_name,
                media_type: media_type.to_owned(),
                batch,
            })
            .await
            .map_err(|e| store_status(&e))?;
        let diagnostics: Vec<pb::Diagnostic> =
            trace.diagnostics().iter().take(MAX_DIAGNOSTICS).map(diagnostic).collect();
        let diagnostic_count = trace.diagnostics().len() as u32;
        let chains = trace.chains().len() as u32;
        let raw_ref = session.source.as_ref().map(|s| pb::ArtifactRef {
            id: s.artifact.to_string(),
            size: 0,
            media_type: media_type.to_owned(),
        });
        let events = outcome.event_ids.len() as u64;
        st.metrics.events_appended.add(events, &[]);
        let response = pb::ImportTraceResponse {
            session: Some(convert::session(session.clone(), &ns.name)),
            format: format_name.to_owned(),
            raw: raw_ref,
            events,
            chains,
            diagnostics,
            diagnostic_count,
        };
        st.views.insert(session, trace).await;
        Ok(Response::new(response))
    }

    type CompileViewStream = TextStream;

    async fn compile_view(&self, request: Request<pb::CompileViewRequest>) -> Result<Response<TextStream>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        let session_id = parse_uuid("session_id", &r.session_id)?;
        let kind = pb::ViewKind::try_from(r.view).unwrap_or(pb::ViewKind::Unspecified);
        if kind == pb::ViewKind::Unspecified {
            return Err(Status::invalid_argument("view: choose VIEW_KIND_FULL, _UI, _ADAPTIVE or _INDEX"));
        }
        let search = r.predicate.as_ref().map(parse_predicate).transpose()?;
        if matches!(kind, pb::ViewKind::Adaptive | pb::ViewKind::Index) && search.is_none() {
            return Err(Status::invalid_argument(
                "predicate: the adaptive and index views need a regex, literal, terms or a ranker",
            ));
        }
        let compiled = st.views.compiled(ns.id, session_id).await?;
        let chains = compiled.trace.chains();
        let n = chains.len();
        let version = compiled.session.event_count;
        if n == 0 {
            let info = pb::ViewInfo { file_name: String::new(), chains: 0, full_lines: 0, size: 0, version };
            return Ok(Response::new(text_stream(info, bytes::Bytes::new())));
        }
        let predicates = match (&search, kind) {
            (Some(search), pb::ViewKind::Adaptive | pb::ViewKind::Index) => {
                predicates(st, ns.id, &compiled, search).await?
            }
            _ => Vec::new(),
        };
        let (text, chain, file_name) = match kind {
            pb::ViewKind::Index => {
                let views: Vec<(&Chain, Vec<memex_vcc::Hit>)> =
                    chains.iter().zip(&predicates).map(|(c, p)| (c, c.adaptive_view(p.as_ref()).hits)).collect();
                let entries: Vec<TransposedEntry<'_>> = views
                    .iter()
                    .map(|(c, hits)| TransposedEntry { reference: c.files().full.clone(), chain: c, hits })
                    .collect();
                (bytes::Bytes::from(memex_vcc::transposed_view(&entries)), &chains[0], String::new())
            }
            _ => {
                let i = chain_index(r.chain, n)?;
                let chain = &chains[i];
                match kind {
                    pb::ViewKind::Full => {
                        (compiled.full_view(i).unwrap_or_default(), chain, chain.files().full.clone())
                    }
                    pb::ViewKind::Ui => {
                        let opts = ui_options(r.truncate, r.truncate_user);
                        (bytes::Bytes::from(chain.ui_view(&opts).text), chain, chain.files().ui.clone())
                    }
                    _ => {
                        let p = predicates.get(i).ok_or_else(|| Status::invalid_argument("predicate: required"))?;
                        (
                            bytes::Bytes::from(chain.adaptive_view(p.as_ref()).text),
                            chain,
                            chain.files().adaptive.clone(),
                        )
                    }
                }
            }
        };
        let info = pb::ViewInfo {
            file_name,
            chains: n as u32,
            full_lines: chain.full_line_count(),
            size: text.len() as u64,
            version,
        };
        Ok(Response::new(text_stream(info, text)))
    }

    async fn read_lines(
        &self,
        request: Request<pb::ReadLinesRequest>,
    ) -> Result<Response<pb::ReadLinesResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        let (session, chain, first, last) = if r.pointer.is_empty() {
            (r.session_id.clone(), r.chain.max(1), r.first_line, r.last_line)
        } else {
            parse_pointer(&r.pointer)?
        };
        let session_id = parse_uuid("session_id", &session)?;
        if first == 0 {
            return Err(Status::invalid_argument("first_line: lines are numbered from 1"));
        }
        if last < first {
            return Err(Status::invalid_argument(format!("last_line: {last} is before first_line {first}")));
        }
        if last - first >= MAX_READ_LINES {
            return Err(Status::invalid_argument(format!("last_line: at most {MAX_READ_LINES} lines per call")));
        }
        let compiled = st.views.compiled(ns.id, session_id).await?;
        let chains = compiled.trace.chains();
        let i = chain_index(chain, chains.len())?;
        let c = &chains[i];
        let full_lines = c.full_line_count();
        let from = first.saturating_sub(r.context).max(1);
        let to = last.saturating_add(r.context).min(full_lines);
        let lines = if from > to { Vec::new() } else { c.read_lines(LineRange::new(from, to)) };
        Ok(Response::new(pb::ReadLinesResponse {
            lines: lines
                .into_iter()
                .map(|l| pb::Line {
                    number: l.number,
                    text: l.text,
                    role: l.role.map(|r| r.as_str().to_owned()).unwrap_or_default(),
                    kind: line_kind(&l.kind).to_owned(),
                    block: l.block.map(|b| b as i32).unwrap_or(-1),
                })
                .collect(),
            chain: i as u32 + 1,
            full_lines,
        }))
    }
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

/// What a `CompileView` predicate asks for.
enum Search {
    /// A line predicate (regex, literal, terms), with its role filter.
    Lines(PredicateSpec),
    Ranked {
        ranker: pb::Ranker,
        query: String,
        top_k: usize,
        roles: Vec<String>,
    },
}

/// Largest `top_k` of a ranked predicate.
const MAX_TOP_K: u32 = 1000;

fn parse_predicate(p: &pb::Predicate) -> Result<Search, Status> {
    let ranker = pb::Ranker::try_from(p.ranker)
        .map_err(|_| Status::invalid_argument(format!("predicate.ranker: unknown value {}", p.ranker)))?;
    if ranker == pb::Ranker::Unspecified {
        if !p.query.is_empty() {
            return Err(Status::invalid_argument("predicate.query: only with a ranker (RANKER_BM25, RANKER_SEMANTIC)"));
        }
        let spec = predicate_spec(p)?;
        // Validate the pattern now, before the session is compiled.
        spec.build().map_err(|e| Status::invalid_argument(format!("predicate: {e}")))?;
        return Ok(Search::Lines(spec));
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
    Ok(Search::Ranked { ranker, query: p.query.clone(), top_k, roles: p.roles.clone() })
}

/// One predicate per chain of the compiled session.
async fn predicates(
    st: &AppState,
    ns: uuid::Uuid,
    compiled: &crate::views::CompiledSession,
    search: &Search,
) -> Result<Vec<Box<dyn Predicate>>, Status> {
    let chains = compiled.trace.chains();
    let with_roles = |p: Box<dyn Predicate>, roles: &[String]| -> Box<dyn Predicate> {
        if roles.is_empty() { p } else { Box::new(RoleFilter { roles: roles.to_vec(), inner: p }) }
    };
    match search {
        Search::Lines(spec) => chains
            .iter()
            .map(|_| {
                spec.build()
                    .map_err(|e| Status::invalid_argument(format!("predicate: {e}")))?
                    .ok_or_else(|| Status::invalid_argument("predicate: give exactly one of regex, literal or terms"))
            })
            .collect(),
        Search::Ranked { ranker: pb::Ranker::Bm25, query, top_k, roles } => chains
            .iter()
            .map(|_| {
                let p = Bm25Blocks::new(query, *top_k).ok_or_else(|| {
                    Status::invalid_argument("predicate.query: no searchable term (punctuation only)")
                })?;
                Ok(with_roles(Box::new(p), roles))
            })
            .collect(),
        Search::Ranked { query, top_k, roles, .. } => {
            let scores = semantic_scores(st, ns, compiled, query, *top_k).await?;
            Ok(chains
                .iter()
                .map(|chain| {
                    let by_block: HashMap<usize, f64> = chain
                        .blocks()
                        .iter()
                        .enumerate()
                        .filter_map(|(i, b)| Some((i, *scores.get(&b.source_line())?)))
                        .collect();
                    with_roles(Box::new(ScoredBlocks { scores: by_block, top_k: *top_k }), roles)
                })
                .collect())
        }
    }
}

/// The session's events ranked by embedding similarity to `query`, as input record line → score.
async fn semantic_scores(
    st: &AppState,
    ns: uuid::Uuid,
    compiled: &crate::views::CompiledSession,
    query: &str,
    top_k: usize,
) -> Result<HashMap<u32, f64>, Status> {
    let index = st.search.as_ref().ok_or_else(|| {
        Status::failed_precondition("predicate.ranker: RANKER_SEMANTIC needs the search layer (search.enabled)")
    })?;
    if index.embedder().is_none() {
        return Err(Status::failed_precondition(
            "predicate.ranker: RANKER_SEMANTIC needs an embedding provider ([embedding] provider)",
        ));
    }
    let mut req = memex_search::SearchRequest::new(query, top_k);
    req.filter.session_ids = vec![compiled.session.id];
    req.bm25_weight = 0.0;
    req.vector_weight = 1.0;
    req.candidates = top_k.max(100);
    let hits = index.search(ns, &req).await.map_err(|e| crate::status::index_status(&e))?.hits;
    let seqs: Vec<u64> = hits.iter().map(|h| h.seq).collect();
    let lines: HashMap<u64, u32> = st.views.source_lines(ns, compiled, &seqs).await?.into_iter().collect();
    let mut out: HashMap<u32, f64> = HashMap::new();
    for h in hits {
        if let Some(&line) = lines.get(&h.seq) {
            let score = f64::from(h.score.vector);
            out.entry(line).and_modify(|s| *s = s.max(score)).or_insert(score);
        }
    }
    Ok(out)
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
