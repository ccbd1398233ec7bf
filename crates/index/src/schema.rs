//! The tantivy schema and analyzer. Bump [`SCHEMA_VERSION`] whenever documents change shape or
//! content: an index directory of another version is deleted and rebuilt from Postgres at open.
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, TextAnalyzer};

/// Version of the documents' shape and analysis; stored beside each index.
pub const SCHEMA_VERSION: u32 = 2;

/// The analyzer's name in tantivy's tokenizer manager.
pub const ANALYZER: &str = "memex";

/// Split on non-alphanumerics, drop tokens of 40+ bytes, lowercase, English stemming: the chain
/// `memex_search::tokenize` implements, so predicates and the index agree on terms.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(memex_search::text::MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(Stemmer::default())
        .build()
}

#[derive(Debug, Clone, Copy)]
pub struct Fields {
    /// Event id (text form): filters and deletes.
    pub event_id: Field,
    pub namespace: Field,
    pub session: Field,
    /// Event and session ids as two u64 fast fields each (high, low halves): a hit's ids are read
    /// without loading its document or looking up a string column's dictionary (a zstd block
    /// decoded per lookup, once the largest cost of a query).
    pub event_hi: Field,
    pub event_lo: Field,
    pub session_hi: Field,
    pub session_lo: Field,
    pub seq: Field,
    /// `event` (the event's stored content) or `artifact` (the full artifact text).
    pub source: Field,
    pub chunk: Field,
    pub task: Field,
    pub agent: Field,
    pub kind: Field,
    pub role: Field,
    pub tool: Field,
    /// Event time, microseconds since the epoch.
    pub time: Field,
    /// Full-view line range of the event (0: unknown).
    pub first_line: Field,
    pub last_line: Field,
    /// Lines of the chunk within its text (0-based).
    pub chunk_first_line: Field,
    pub chunk_last_line: Field,
    /// A stable per-document key (hash of event id, source and chunk) that breaks score ties the
    /// same way in every index built from the same events.
    pub doc_key: Field,
    pub text: Field,
    /// The text of the events just before this one in its session (first chunk only): a turn's
    /// meaning often lives in the turn it answers. Indexed, not stored.
    pub context: Field,
}

pub fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text_opts = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs),
        )
        .set_stored();
    let fields = Fields {
        event_id: b.add_text_field("event_id", STRING | STORED),
        namespace: b.add_text_field("namespace", STRING | STORED),
        session: b.add_text_field("session", STRING | STORED),
        event_hi: b.add_u64_field("event_hi", FAST),
        event_lo: b.add_u64_field("event_lo", FAST),
        session_hi: b.add_u64_field("session_hi", FAST),
        session_lo: b.add_u64_field("session_lo", FAST),
        seq: b.add_u64_field("seq", INDEXED | STORED | FAST),
        source: b.add_text_field("source", STRING | STORED),
        chunk: b.add_u64_field("chunk", STORED),
        task: b.add_text_field("task", STRING | STORED),
        agent: b.add_text_field("agent", STRING | STORED),
        kind: b.add_text_field("kind", STRING | STORED),
        role: b.add_text_field("role", STRING | STORED),
        tool: b.add_text_field("tool", STRING | STORED),
        time: b.add_i64_field("time", INDEXED | STORED | FAST),
        first_line: b.add_u64_field("first_line", STORED),
        last_line: b.add_u64_field("last_line", STORED),
        chunk_first_line: b.add_u64_field("chunk_first_line", STORED),
        chunk_last_line: b.add_u64_field("chunk_last_line", STORED),
        doc_key: b.add_u64_field("doc_key", FAST),
        text: b.add_text_field("text", text_opts.clone()),
        context: b.add_text_field(
            "context",
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs),
            ),
        ),
    };
    (b.build(), fields)
}
