//! `memex.v1.MemoryService`: the reader tools. Each handler scopes the request to the caller's
//! namespace (write access when a `reader`'s state changes), converts it, calls one use case of
//! `memex_recall::Memory` and encodes the answer.
use std::sync::Arc;

use chrono::{DateTime, Utc};
use memex_memory::Depth;
use memex_proto::v1 as pb;
use memex_proto::v1::memory_service_server::MemoryService;
use memex_recall::reader::{FactView, LineView, Quote, SegmentView, TopicView};
use memex_recall::{FactQuery, Memory, QuoteRequest};
use memex_store::Access;
use tonic::{Request, Response, Status};

use crate::state::AppState;
use crate::status::{parse_uuid, recall_status};

pub struct MemoryHandler {
    state: Arc<AppState>,
}

impl MemoryHandler {
    pub fn new(state: Arc<AppState>) -> MemoryHandler {
        MemoryHandler { state }
    }

    fn memory(&self) -> Result<&Memory, Status> {
        self.state
            .memory
            .as_ref()
            .ok_or_else(|| Status::failed_precondition("memory is disabled on this server ([memory] enabled = false)"))
    }
}

fn ts(t: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: t.timestamp(), nanos: t.timestamp_subsec_nanos() as i32 }
}

fn time(field: &str, t: Option<prost_types::Timestamp>) -> Result<Option<DateTime<Utc>>, Status> {
    t.map(|t| {
        u32::try_from(t.nanos)
            .ok()
            .and_then(|n| DateTime::from_timestamp(t.seconds, n))
            .ok_or_else(|| Status::invalid_argument(format!("{field}: not a valid timestamp")))
    })
    .transpose()
}

fn sessions(field: &str, ids: &[String]) -> Result<Vec<uuid::Uuid>, Status> {
    if ids.len() > 1_000 {
        return Err(Status::invalid_argument(format!("{field}: at most 1000 values")));
    }
    ids.iter().enumerate().map(|(i, s)| parse_uuid(&format!("{field}[{i}]"), s)).collect()
}

fn required(field: &str, value: &str, max: usize) -> Result<(), Status> {
    if value.trim().is_empty() {
        return Err(Status::invalid_argument(format!("{field}: is required")));
    }
    if value.len() > max {
        return Err(Status::invalid_argument(format!("{field}: at most {max} bytes, got {}", value.len())));
    }
    Ok(())
}

/// Write access when the call changes a reader's state, read otherwise.
fn access(reader: &str) -> Access {
    if reader.is_empty() { Access::Read } else { Access::Write }
}

fn line(l: LineView) -> pb::SummaryLine {
    pb::SummaryLine { text: l.text, seq: l.seq, pointer: l.pointer }
}

fn fact(f: FactView) -> pb::Fact {
    pb::Fact {
        id: f.id.to_string(),
        fact_type: f.fact_type,
        subject: f.subject,
        verb: f.verb,
        object: f.object,
        what: f.what,
        who: f.who,
        when: Some(ts(f.when)),
        r#where: f.place,
        why: f.why,
        status: f.status,
        session_id: f.session.to_string(),
        first_seq: f.first_seq,
        last_seq: f.last_seq,
        pointer: f.pointer,
        superseded_by: f.superseded_by.map(|u| u.to_string()).unwrap_or_default(),
        superseded_at: f.superseded_at.map(ts),
        source: f.source,
    }
}

fn segment(s: SegmentView) -> pb::Segment {
    pb::Segment {
        id: s.id.to_string(),
        session_id: s.session.to_string(),
        first_seq: s.first_seq,
        last_seq: s.last_seq,
        pointer: s.pointer,
        start_time: Some(ts(s.start)),
        end_time: Some(ts(s.end)),
        turns: s.turns,
        tags: s.tags,
        primary_tag: s.primary_tag,
        summary: s.summary.into_iter().map(line).collect(),
        summary_tokens: s.summary_tokens,
        group_seq: s.group_seq,
        closed: s.closed,
    }
}

fn quote(q: Quote) -> pb::Quote {
    pb::Quote {
        segment: q.segment.map(segment),
        match_type: q.match_type.to_owned(),
        excerpt: q.excerpt,
        hit_pointer: q.hit_pointer,
        hit_seq: q.hit_seq,
        score: q.score,
        facts: q.facts.into_iter().map(fact).collect(),
        superseded: q.superseded,
    }
}

fn topic(t: TopicView) -> pb::TopicInfo {
    pb::TopicInfo {
        tag: t.tag,
        aliases: t.aliases,
        parent: t.parent.unwrap_or_default(),
        segments: t.segments,
        turns: t.turns,
        sessions: t.sessions,
        first_time: t.first_time.map(ts),
        last_time: t.last_time.map(ts),
        broad: t.broad,
        in_cover: t.in_cover,
        description: t.description,
        summary: t.summary.into_iter().map(line).collect(),
        summary_tokens: t.summary_tokens,
        facts: t.facts,
    }
}

fn quote_request(
    query: String,
    limit: u32,
    session_ids: &[String],
    reader: String,
    reset: bool,
) -> Result<QuoteRequest, Status> {
    required("query", &query, 4_096)?;
    Ok(QuoteRequest {
        query,
        limit: limit as usize,
        sessions: sessions("session_ids", session_ids)?,
        reader,
        reset_presented: reset,
        range: None,
    })
}

#[tonic::async_trait]
impl MemoryService for MemoryHandler {
    async fn find_quote(
        &self,
        request: Request<pb::FindQuoteRequest>,
    ) -> Result<Response<pb::FindQuoteResponse>, Status> {
        let st = &self.state;
        let r = request.get_ref();
        let ns = st.auth.scope(&request, &r.namespace, access(&r.reader)).await?;
        let _turn = st.admit(&request).await?;
        let r = request.into_inner();
        let req = quote_request(r.query, r.limit, &r.session_ids, r.reader, r.reset_presented)?;
        let q = self.memory()?.find_quote(ns.id, &req).await.map_err(|e| recall_status(&e))?;
        Ok(Response::new(pb::FindQuoteResponse {
            quotes: q.quotes.into_iter().map(quote).collect(),
            already_presented: q.already_presented,
            vectors_used: q.vectors_used,
        }))
    }

    async fn query_facts(
        &self,
        request: Request<pb::QueryFactsRequest>,
    ) -> Result<Response<pb::QueryFactsResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let _turn = st.admit(&request).await?;
        let r = request.into_inner();
        let q = FactQuery {
            subject: r.subject,
            verb: r.verb,
            status: r.status,
            object_contains: r.object_contains,
            fact_type: r.fact_type,
            as_of: time("as_of", r.as_of)?,
            include_superseded: r.include_superseded,
            question: r.question,
            limit: r.limit as usize,
            sessions: sessions("session_ids", &r.session_ids)?,
        };
        let (facts, verbs) = self.memory()?.query_facts(ns.id, &q).await.map_err(|e| recall_status(&e))?;
        Ok(Response::new(pb::QueryFactsResponse {
            facts: facts.into_iter().map(fact).collect(),
            expanded_verbs: verbs,
        }))
    }

    async fn expand_topic(
        &self,
        request: Request<pb::ExpandTopicRequest>,
    ) -> Result<Response<pb::ExpandTopicResponse>, Status> {
        let st = &self.state;
        let r = request.get_ref();
        let ns = st.auth.scope(&request, &r.namespace, access(&r.reader)).await?;
        let _turn = st.admit(&request).await?;
        let r = request.into_inner();
        required("tag", &r.tag, 256)?;
        let depth = match r.depth.as_str() {
            "" => Depth::Summary,
            d => Depth::parse(d).ok_or_else(|| {
                Status::invalid_argument(format!("depth: unknown {d:?}; expected summary, segments or full"))
            })?,
        };
        let x = self
            .memory()?
            .expand_topic(ns.id, &r.tag, depth, &r.reader, r.max_tokens as usize)
            .await
            .map_err(|e| recall_status(&e))?;
        Ok(Response::new(pb::ExpandTopicResponse {
            topic: Some(topic(x.topic)),
            depth: x.depth.name().to_owned(),
            text: x.text,
            tokens: x.tokens,
            segments: x.segments.into_iter().map(segment).collect(),
            omitted_segments: x.omitted_segments,
            paged_out: x
                .paged_out
                .into_iter()
                .map(|p| match p {
                    memex_memory::paging::PageOut::Collapsed { tag, freed, .. } => {
                        pb::PageOut { tag, action: "collapsed".into(), freed_tokens: freed as u32 }
                    }
                    memex_memory::paging::PageOut::Dropped { tag, freed } => {
                        pb::PageOut { tag, action: "dropped".into(), freed_tokens: freed as u32 }
                    }
                })
                .collect(),
            working_set_tokens: x.working_set_tokens,
            working_set_budget: x.working_set_budget,
        }))
    }

    async fn remember_when(
        &self,
        request: Request<pb::RememberWhenRequest>,
    ) -> Result<Response<pb::RememberWhenResponse>, Status> {
        let st = &self.state;
        let r = request.get_ref();
        let ns = st.auth.scope(&request, &r.namespace, access(&r.reader)).await?;
        let _turn = st.admit(&request).await?;
        let r = request.into_inner();
        let range =
            memex_recall::reader::resolve_range(&r.preset, time("from", r.from)?, time("to", r.to)?, Utc::now())
                .map_err(|e| recall_status(&e))?;
        let req = quote_request(r.query, r.limit, &r.session_ids, r.reader, false)?;
        let (q, facts) = self.memory()?.remember_when(ns.id, &req, range).await.map_err(|e| recall_status(&e))?;
        Ok(Response::new(pb::RememberWhenResponse {
            quotes: q.quotes.into_iter().map(quote).collect(),
            facts_in_window: facts.into_iter().map(fact).collect(),
            from: Some(ts(range.from)),
            to: Some(ts(range.to)),
        }))
    }

    async fn recall_all(
        &self,
        request: Request<pb::RecallAllRequest>,
    ) -> Result<Response<pb::RecallAllResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let _turn = st.admit(&request).await?;
        let r = request.into_inner();
        let x = self.memory()?.recall_all(ns.id, r.max_tokens as usize).await.map_err(|e| recall_status(&e))?;
        Ok(Response::new(pb::RecallAllResponse {
            topics: x.topics.into_iter().map(topic).collect(),
            text: x.text,
            tokens: x.tokens,
            omitted_topics: x.omitted,
        }))
    }

    async fn list_topics(
        &self,
        request: Request<pb::ListTopicsRequest>,
    ) -> Result<Response<pb::ListTopicsResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let r = request.into_inner();
        if r.contains.len() > 256 || r.page_token.len() > 256 {
            return Err(Status::invalid_argument("contains, page_token: at most 256 bytes"));
        }
        let p = self
            .memory()?
            .list_topics(ns.id, r.limit as usize, &r.page_token, &r.contains)
            .await
            .map_err(|e| recall_status(&e))?;
        Ok(Response::new(pb::ListTopicsResponse {
            topics: p.topics.into_iter().map(topic).collect(),
            next_page_token: p.next_page_token,
            total: p.total,
        }))
    }

    async fn get_fact(&self, request: Request<pb::GetFactRequest>) -> Result<Response<pb::GetFactResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let id = parse_uuid("fact_id", &request.get_ref().fact_id)?;
        let (f, chain) = self.memory()?.get_fact(ns.id, id).await.map_err(|e| match e {
            memex_recall::RecallError::NotFound(m) => Status::not_found(format!("fact_id: {m} not found")),
            e => recall_status(&e),
        })?;
        Ok(Response::new(pb::GetFactResponse { fact: Some(fact(f)), chain: chain.into_iter().map(fact).collect() }))
    }

    async fn get_memory_status(
        &self,
        request: Request<pb::GetMemoryStatusRequest>,
    ) -> Result<Response<pb::GetMemoryStatusResponse>, Status> {
        let st = &self.state;
        let ns = st.auth.scope(&request, &request.get_ref().namespace, Access::Read).await?;
        let s = self.memory()?.status(ns.id).await.map_err(|e| recall_status(&e))?;
        Ok(Response::new(pb::GetMemoryStatusResponse {
            interpreter: s.interpreter,
            lag_events: s.lag_events,
            sessions: s.sessions,
            segments: s.segments,
            facts: s.facts,
            topics: s.topics,
            topics_current: s.topics_current,
        }))
    }
}
