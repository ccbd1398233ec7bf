//! `memex.v1.SearchService`: validates and converts the request, scopes it to the caller's
//! namespace, and hands it to `memex-search`.
use std::sync::Arc;

use memex_event::Role;
use memex_proto::v1 as pb;
use memex_proto::v1::search_service_server::SearchService;
use memex_search::{Hit, SearchFilter, SearchRequest, TimeRange};
use memex_store::Access;
use tonic::{Request, Response, Status};

use crate::state::AppState;
use crate::status::{index_status, parse_uuid};

const DEFAULT_LIMIT: u32 = 10;
const MAX_FILTER_VALUES: usize = 1000;

pub struct Search {
    state: Arc<AppState>,
}

impl Search {
    pub fn new(state: Arc<AppState>) -> Search {
        Search { state }
    }
}

#[tonic::async_trait]
impl SearchService for Search {
    async fn search(&self, request: Request<pb::SearchRequest>) -> Result<Response<pb::SearchResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let _turn = st.admit(&request).await?;
        let Some(index) = &st.search else {
            return Err(Status::failed_precondition("search is disabled on this server (search.enabled = false)"));
        };
        let req = convert(request.into_inner(), index.config())?;
        let results = index.search(ns.id, &req).await.map_err(|e| index_status(&e))?;
        Ok(Response::new(pb::SearchResponse {
            hits: results.hits.into_iter().map(hit).collect(),
            vectors_used: results.vectors_used,
        }))
    }
}

fn list(field: &str, values: Vec<String>, max_bytes: usize) -> Result<Vec<String>, Status> {
    if values.len() > MAX_FILTER_VALUES {
        return Err(Status::invalid_argument(format!("{field}: at most {MAX_FILTER_VALUES} values")));
    }
    for (i, v) in values.iter().enumerate() {
        if v.is_empty() || v.len() > max_bytes {
            return Err(Status::invalid_argument(format!("{field}[{i}]: must be 1..={max_bytes} bytes")));
        }
    }
    Ok(values)
}

fn time(field: &str, t: Option<prost_types::Timestamp>) -> Result<Option<chrono::DateTime<chrono::Utc>>, Status> {
    t.map(|t| {
        u32::try_from(t.nanos)
            .ok()
            .and_then(|n| chrono::DateTime::from_timestamp(t.seconds, n))
            .ok_or_else(|| Status::invalid_argument(format!("{field}: not a valid timestamp")))
    })
    .transpose()
}

fn non_negative(field: &str, v: Option<f32>, default: f32) -> Result<f32, Status> {
    let v = v.unwrap_or(default);
    if !v.is_finite() || v < 0.0 {
        return Err(Status::invalid_argument(format!("{field}: must be a finite number >= 0, got {v}")));
    }
    Ok(v)
}

fn convert(r: pb::SearchRequest, d: &memex_search::SearchConfig) -> Result<SearchRequest, Status> {
    let f = r.filter.unwrap_or_default();
    let session_ids = f
        .session_ids
        .iter()
        .enumerate()
        .map(|(i, s)| parse_uuid(&format!("filter.session_ids[{i}]"), s))
        .collect::<Result<Vec<_>, _>>()?;
    let roles = f
        .roles
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Role::parse(s).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "filter.roles[{i}]: unknown role {s:?}; expected user, assistant, tool, system or other"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let limit = if r.limit == 0 { DEFAULT_LIMIT } else { r.limit } as usize;
    let candidates = if r.candidates == 0 { d.candidates.max(limit) } else { r.candidates as usize };
    let filter = SearchFilter {
        session_ids,
        task_ids: list("filter.task_ids", f.task_ids, 256)?,
        agent_ids: list("filter.agent_ids", f.agent_ids, 256)?,
        kinds: list("filter.kinds", f.kinds, 64)?,
        roles,
        time: TimeRange { from: time("filter.time_from", f.time_from)?, to: time("filter.time_to", f.time_to)? },
    };
    let mmr_lambda = if r.mmr {
        let l = r.mmr_lambda.unwrap_or(d.mmr_lambda);
        if !(0.0..=1.0).contains(&l) {
            return Err(Status::invalid_argument(format!("mmr_lambda: must be within 0..=1, got {l}")));
        }
        Some(l)
    } else {
        None
    };
    Ok(SearchRequest {
        query: r.query,
        filter,
        limit,
        bm25_weight: non_negative("bm25_weight", r.bm25_weight, d.bm25_weight)?,
        vector_weight: non_negative("vector_weight", r.vector_weight, d.vector_weight)?,
        fusion: match r.fusion.as_str() {
            "" => d.fusion,
            f => memex_search::Fusion::parse(f)
                .ok_or_else(|| Status::invalid_argument(format!("fusion: must be \"score\" or \"rrf\", got {f:?}")))?,
        },
        rrf_k: non_negative("rrf_k", r.rrf_k, d.rrf_k)?,
        context_weight: non_negative("context_weight", r.context_weight, d.context_weight)?,
        neighbor_weight: non_negative("neighbor_weight", r.neighbor_weight, d.neighbor_weight)?,
        session_weight: non_negative("session_weight", r.session_weight, d.session_weight)?,
        candidates,
        mmr_lambda,
        tier: memex_search::VectorTier::Best,
        with_text: r.with_text,
        with_lines: true,
        heads: None,
    })
}

fn hit(h: Hit) -> pb::SearchHit {
    pb::SearchHit {
        event_id: h.event_id.to_string(),
        session_id: h.session_id.to_string(),
        seq: h.seq,
        kind: h.kind,
        role: h.role.as_str().to_owned(),
        agent_id: h.agent_id,
        task_id: h.task_id.unwrap_or_default(),
        tool_name: h.tool_name.unwrap_or_default(),
        event_time: Some(prost_types::Timestamp {
            seconds: h.event_time.timestamp(),
            nanos: h.event_time.timestamp_subsec_nanos() as i32,
        }),
        first_line: h.lines.map_or(0, |l| u64::from(l.first)),
        last_line: h.lines.map_or(0, |l| u64::from(l.last)),
        source: h.source,
        chunk: h.chunk,
        chunk_first_line: h.chunk_first_line,
        chunk_last_line: h.chunk_last_line,
        text: h.text.unwrap_or_default(),
        score: Some(pb::ScoreParts {
            fused: h.score.fused,
            bm25: h.score.bm25,
            bm25_rank: h.score.bm25_rank,
            vector: h.score.vector,
            vector_rank: h.score.vector_rank,
        }),
    }
}
