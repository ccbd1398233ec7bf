//! [`Client`] methods of memory (MemoryService): quotes, facts, topics and the worker's status.
//! Every answer is the server's, cited by pointers `session:first-last`; nothing is decided here.
use memex_proto::v1 as pb;

use crate::{Client, ClientError};

/// Topics per `ListTopics` page when paging through all of them (the server's most).
const TOPICS_PAGE: usize = 1_000;

impl Client {
    /// Segments and tool output matching `req.query`, with the facts read from them.
    pub async fn find_quote(&self, mut req: pb::FindQuoteRequest) -> Result<pb::FindQuoteResponse, ClientError> {
        req.namespace = self.ns();
        self.unshed(|| {
            let (mut c, req) = (self.memory.clone(), req.clone());
            async move { c.find_quote(req).await }
        })
        .await
    }

    /// Structured facts (filters, verb expansion, supersession, as of a time).
    pub async fn query_facts(&self, mut req: pb::QueryFactsRequest) -> Result<pb::QueryFactsResponse, ClientError> {
        req.namespace = self.ns();
        self.unshed(|| {
            let (mut c, req) = (self.memory.clone(), req.clone());
            async move { c.query_facts(req).await }
        })
        .await
    }

    /// A topic at a depth, paged into `req.reader`'s working set when a reader is named.
    pub async fn expand_topic(&self, mut req: pb::ExpandTopicRequest) -> Result<pb::ExpandTopicResponse, ClientError> {
        req.namespace = self.ns();
        self.unshed(|| {
            let (mut c, req) = (self.memory.clone(), req.clone());
            async move { c.expand_topic(req).await }
        })
        .await
    }

    /// `find_quote` within a time range (a preset, or from/to), with that range's completed facts.
    pub async fn remember_when(
        &self,
        mut req: pb::RememberWhenRequest,
    ) -> Result<pb::RememberWhenResponse, ClientError> {
        req.namespace = self.ns();
        self.unshed(|| {
            let (mut c, req) = (self.memory.clone(), req.clone());
            async move { c.remember_when(req).await }
        })
        .await
    }

    /// Every topic summary of the cover within `max_tokens` (0: the server's default).
    pub async fn recall_all(&self, max_tokens: u32) -> Result<pb::RecallAllResponse, ClientError> {
        let req = pb::RecallAllRequest { namespace: self.ns(), max_tokens };
        self.unshed(|| {
            let (mut c, req) = (self.memory.clone(), req.clone());
            async move { c.recall_all(req).await }
        })
        .await
    }

    /// One page of the namespace's topics.
    pub async fn list_topics(&self, mut req: pb::ListTopicsRequest) -> Result<pb::ListTopicsResponse, ClientError> {
        req.namespace = self.ns();
        Ok(self.memory.clone().list_topics(req).await?.into_inner())
    }

    /// The topics (whose tag or aliases contain `contains`, when not empty) across pages: all of
    /// them, or the first `limit`. The answer's `next_page_token` is where a limit stopped.
    pub async fn topics(&self, contains: &str, limit: Option<usize>) -> Result<pb::ListTopicsResponse, ClientError> {
        let mut out = pb::ListTopicsResponse::default();
        let mut token = String::new();
        loop {
            let want = limit.map_or(TOPICS_PAGE, |l| l.saturating_sub(out.topics.len()).min(TOPICS_PAGE));
            if want == 0 {
                break;
            }
            let req = pb::ListTopicsRequest {
                limit: u32::try_from(want).unwrap_or(1_000),
                page_token: token,
                contains: contains.to_owned(),
                ..Default::default()
            };
            let page = self.list_topics(req).await?;
            // An empty page with a token would loop for ever: take it as the end.
            let empty = page.topics.is_empty();
            out.topics.extend(page.topics);
            out.total = page.total;
            out.next_page_token = page.next_page_token.clone();
            if page.next_page_token.is_empty() || empty {
                break;
            }
            token = page.next_page_token;
        }
        Ok(out)
    }

    /// A fact and its supersession chain, oldest first.
    pub async fn get_fact(&self, fact_id: &str) -> Result<pb::GetFactResponse, ClientError> {
        let req = pb::GetFactRequest { namespace: self.ns(), fact_id: fact_id.to_owned() };
        Ok(self.memory.clone().get_fact(req).await?.into_inner())
    }

    /// How far the memory worker has got, and what the memory holds.
    pub async fn memory_status(&self) -> Result<pb::GetMemoryStatusResponse, ClientError> {
        let req = pb::GetMemoryStatusRequest { namespace: self.ns() };
        Ok(self.memory.clone().get_memory_status(req).await?.into_inner())
    }
}
