//! What a search asks and what it answers, in domain terms (the gRPC messages are converted to and
//! from these in the server).
use chrono::{DateTime, Utc};
use memex_event::Role;
use uuid::Uuid;

use memex_pointer::LineRange;

use crate::schema::Tag;

/// Inclusive bounds on event time; either side may be open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeRange {
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// Restricts a search; every non-empty list is an "any of" condition, and conditions combine with
/// "and". The namespace is not here: it is the search's scope, mandatory and checked by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchFilter {
    pub session_ids: Vec<Uuid>,
    pub task_ids: Vec<String>,
    pub agent_ids: Vec<String>,
    pub kinds: Vec<String>,
    pub roles: Vec<Role>,
    pub time: TimeRange,
}

impl SearchFilter {
    /// Most sessions a filter may name and still be served session by session: the text index
    /// searches only their segments, and k-NN reads only their vectors (exactly, not through
    /// HNSW, which would filter after the fact and lose recall).
    pub const FEW_SESSIONS: usize = 16;

    pub fn names_few_sessions(&self) -> bool {
        (1..=Self::FEW_SESSIONS).contains(&self.session_ids.len())
    }

    /// Its conditions on the index's `tags`, in the order a query applies them: each kind that
    /// has values, with its values. The committed index's query and a fresh part's both read
    /// them here, so the two filter alike.
    pub(crate) fn tag_clauses(&self) -> Vec<(Tag, Vec<String>)> {
        let clauses = [
            (Tag::Session, self.session_ids.iter().map(Uuid::to_string).collect()),
            (Tag::Task, self.task_ids.clone()),
            (Tag::Agent, self.agent_ids.clone()),
            (Tag::Kind, self.kinds.clone()),
            (Tag::Role, self.roles.iter().map(|r| r.as_str().to_owned()).collect()),
        ];
        clauses.into_iter().filter(|(_, values): &(Tag, Vec<String>)| !values.is_empty()).collect()
    }

    /// Its time bounds in microseconds since the epoch (the index's `time`), when it has any.
    pub(crate) fn time_micros(&self) -> Option<(Option<i64>, Option<i64>)> {
        let (from, to) = (self.time.from, self.time.to);
        (from.is_some() || to.is_some()).then(|| (from.map(|t| t.timestamp_micros()), to.map(|t| t.timestamp_micros())))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    pub query: String,
    pub filter: SearchFilter,
    /// Hits to return.
    pub limit: usize,
    /// Weight of the BM25 list in the fusion (0: vectors only).
    pub bm25_weight: f32,
    /// Weight of the vector list in the fusion (0: BM25 only).
    pub vector_weight: f32,
    /// How the two lists are fused.
    pub fusion: Fusion,
    /// The RRF rank constant (with [`Fusion::Rrf`]).
    pub rrf_k: f32,
    /// Weight of a match in the preceding events' text relative to one in the event's own text
    /// (0: the event's own text only).
    pub context_weight: f32,
    /// Neighbour smoothing of the BM25 list: an event's score gains this share of the BM25 scores
    /// of the events just before and after it in its session (0: off). A turn's relevance often
    /// shows in the turns around it (the question it answers, the reply that echoes it).
    pub neighbor_weight: f32,
    /// Session smoothing of the BM25 list: an event's score gains this share of the best BM25 score
    /// of another event of its session (0: off): evidence clusters in the sessions about the topic.
    pub session_weight: f32,
    /// Candidates taken from each retriever before fusion.
    pub candidates: usize,
    /// Diversify with MMR at this lambda (1: pure relevance); None: no MMR.
    pub mmr_lambda: Option<f32>,
    /// Return the matched chunk's text with each hit.
    pub with_text: bool,
    /// Fill hits' full-view line ranges that the index does not store (a lookup per session).
    pub with_lines: bool,
    /// Which vectors rank the query (see [`VectorTier`]).
    pub tier: VectorTier,
    /// The last seq of each of `filter.session_ids`, when the caller has just read them (the
    /// context engine does, with the pack's session): the catch-up then reads neither their sum
    /// nor, unless other sessions join its round, the heads themselves. Events appended after the
    /// caller read them may be missed, as if the search had come first.
    pub heads: Option<Vec<(Uuid, u64)>>,
}

/// How the BM25 and vector lists become one ranking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fusion {
    /// `bm25_weight × BM25 / best BM25 + vector_weight × cosine`: the scores' margins count.
    #[default]
    Score,
    /// Reciprocal-rank fusion: `weight / (rrf_k + rank)` per list; only ranks count.
    Rrf,
}

impl Fusion {
    pub fn as_str(self) -> &'static str {
        match self {
            Fusion::Score => "score",
            Fusion::Rrf => "rrf",
        }
    }

    /// `score` or `rrf`.
    pub fn parse(s: &str) -> Option<Fusion> {
        match s {
            "score" => Some(Fusion::Score),
            "rrf" => Some(Fusion::Rrf),
            _ => None,
        }
    }
}

/// Which vectors a query is ranked by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VectorTier {
    /// The model's, when its vector is had in time; else the fast tier's.
    #[default]
    Best,
    /// The fast tier's (a static table: no inference), when there is one: what a pack, asked for
    /// at a fleet's rate, can afford.
    Fast,
}

impl SearchRequest {
    /// A hybrid search with the default fusion settings ([`crate::SearchConfig::default`]).
    pub fn new(query: impl Into<String>, limit: usize) -> SearchRequest {
        crate::SearchConfig::default().request(query, limit)
    }
}

/// Why a hit ranked where it did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScoreParts {
    /// The fused score (score fusion or RRF, then MMR order).
    pub fused: f32,
    /// BM25 of the best-matching chunk, and its 1-based rank in the BM25 list (0: not in it).
    pub bm25: f32,
    pub bm25_rank: u32,
    /// Cosine similarity of the event's vector to the query's, and its rank (0: not in the list).
    pub vector: f32,
    pub vector_rank: u32,
}

/// One event found, with its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub event_id: Uuid,
    pub session_id: Uuid,
    pub seq: u64,
    pub kind: String,
    pub role: Role,
    pub agent_id: String,
    pub task_id: Option<String>,
    pub tool_name: Option<String>,
    pub event_time: DateTime<Utc>,
    /// Where the event sits in its session's full view (None when it renders no lines, or no
    /// full view is plugged in).
    pub lines: Option<LineRange>,
    /// Which part of the event matched best: `event` or `artifact`, the chunk number, and the
    /// chunk's lines within that text (0-based).
    pub source: String,
    pub chunk: u32,
    pub chunk_first_line: u32,
    pub chunk_last_line: u32,
    /// The matched chunk's text, when asked for.
    pub text: Option<String>,
    pub score: ScoreParts,
}

/// One event ranked, before it is read (see [`crate::SearchIndex::rank`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankedEvent {
    pub event_id: Uuid,
    pub score: ScoreParts,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SearchResults {
    pub hits: Vec<Hit>,
    /// Whether the vector list took part: false with no embedder, a zero vector weight, or when
    /// the query's vector could not be had in time (the model was saturated).
    pub vectors_used: bool,
}

/// A ranking without the events read ([`crate::SearchIndex::rank`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RankedEvents {
    pub events: Vec<RankedEvent>,
    /// As [`SearchResults::vectors_used`].
    pub vectors_used: bool,
    /// For ranked events whose best BM25 chunk lies in their artifact (a large output the event
    /// keeps only the head and tail of), that chunk: what a pack shows instead of the head.
    pub artifact_chunks: std::collections::HashMap<Uuid, ArtifactChunk>,
}

/// A chunk of an event's artifact that matched a query: lines `first_line..=last_line` (0-based)
/// of the artifact's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactChunk {
    pub first_line: u32,
    pub last_line: u32,
    pub text: String,
}
