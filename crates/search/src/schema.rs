//! The tantivy schema and analyzer. Bump [`SCHEMA_VERSION`] whenever documents change shape or
//! content: an index directory of another version is deleted and rebuilt from Postgres at open.
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, NumericOptions, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, TextAnalyzer};

/// Version of the documents' shape and analysis; stored beside each index.
pub const SCHEMA_VERSION: u32 = 4;

/// The name of `Fields::time`: fast-field readers look it up by name.
pub(crate) const TIME_FIELD: &str = "time";

/// The context weight `body` is indexed for: a query at this weight walks one postings list per
/// term. A document's `body` holds its own text twice and its context once, so a term's frequency
/// there is twice (own + 0.5 · context) and its length twice (own + 0.5 · context): BM25F, the
/// formula `memex_rank::bm25` scans with, one field instead of two scored apart.
pub const BODY_CONTEXT_WEIGHT: f32 = 0.5;

/// The analyzer's name in tantivy's tokenizer manager.
pub const ANALYZER: &str = "memex";

/// Split on non-alphanumerics, drop tokens of 40+ bytes, lowercase, English stemming: the chain
/// `memex_rank::tokenize` implements, so predicates and the index agree on terms.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(memex_rank::text::MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(Stemmer::default())
        .build()
}

#[derive(Debug, Clone, Copy)]
pub struct Fields {
    /// Event id (text form), stored only: hits take their ids from the fast fields below.
    pub event_id: Field,
    pub namespace: Field,
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
    /// What queries filter on (session, task, agent, kind, role), one indexed field for all: see
    /// [`Tag`].
    pub tags: Field,
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
    /// Own text and context in one field, weighted as [`BODY_CONTEXT_WEIGHT`] says. Indexed, not
    /// stored: queries at that weight walk its one postings list per term, not `text`'s and `context`'s.
    pub body: Field,
}

/// A filter's kind: its values are indexed in `tags` as `<prefix>:<value>` (the prefix has no
/// colon, so a value may).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    Session,
    Task,
    Agent,
    Kind,
    Role,
}

/// The `tags` text of `value` for a filter of kind `tag`.
pub fn tag_text(tag: Tag, value: &str) -> String {
    let prefix = match tag {
        Tag::Session => "s",
        Tag::Task => "t",
        Tag::Agent => "a",
        Tag::Kind => "k",
        Tag::Role => "r",
    };
    format!("{prefix}:{value}")
}

impl Fields {
    /// The `tags` term of `value` for a filter of kind `tag`.
    pub fn tag(&self, tag: Tag, value: &str) -> tantivy::Term {
        tantivy::Term::from_field_text(self.tags, &tag_text(tag, value))
    }
}

pub fn schema() -> (Schema, Fields) {
    build()
}

fn build() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let indexed_only = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs),
    );
    let time_options: NumericOptions = (INDEXED | STORED | FAST).into();
    // Only what queries filter or score on is indexed, and the filters share one field. Every
    // indexed field gets its own term dictionary in every segment, and starting one costs about a
    // megabyte of writes (tantivy-fst's registry) whatever it holds: with 13 indexed fields, a
    // live catch-up's commit of a few documents (and each merge of such segments) spent most of
    // its time there. Now there are 5.
    let fields = Fields {
        event_id: b.add_text_field("event_id", STORED),
        namespace: b.add_text_field("namespace", STORED),
        event_hi: b.add_u64_field("event_hi", FAST),
        event_lo: b.add_u64_field("event_lo", FAST),
        session_hi: b.add_u64_field("session_hi", FAST),
        session_lo: b.add_u64_field("session_lo", FAST),
        seq: b.add_u64_field("seq", STORED | FAST),
        source: b.add_text_field("source", STORED),
        chunk: b.add_u64_field("chunk", STORED),
        tags: b.add_text_field("tags", STRING),
        tool: b.add_text_field("tool", STORED),
        time: b.add_i64_field(TIME_FIELD, time_options),
        first_line: b.add_u64_field("first_line", STORED),
        last_line: b.add_u64_field("last_line", STORED),
        chunk_first_line: b.add_u64_field("chunk_first_line", STORED),
        chunk_last_line: b.add_u64_field("chunk_last_line", STORED),
        doc_key: b.add_u64_field("doc_key", FAST),
        text: b.add_text_field("text", indexed_only.clone().set_stored()),
        context: b.add_text_field("context", indexed_only.clone()),
        body: b.add_text_field("body", indexed_only),
    };
    (b.build(), fields)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tantivy::tokenizer::TokenStream;

    use super::analyzer;

    fn index_terms(text: &str) -> Vec<String> {
        let mut a = analyzer();
        let mut stream = a.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        out
    }

    /// Packs scan (`memex_rank::bm25` over `TermCounts`) and views rank (`Bm25Blocks`) with the
    /// ranking core's analyzer; the index with tantivy's. They must agree on every term, or a pack
    /// built without the index would find other events than the index finds.
    #[test]
    fn the_index_and_the_ranking_core_tokenize_alike() {
        let texts = [
            "Running tests: FAILED (3 failures) in test_prism_roundtrip",
            "..foo ..bar/baz.rs:42 — Ünïcödé ÄSTHETIK İstanbul ǅemal straße",
            "sha256 9f86d081884c7d65a3e3b3b1c8b9e1f2d3c4b5a69788f9e0d1c2b3a4f5e6d7c8 dist/pkg-1.2.3.tar.gz",
            "THOUGHT: the caller's flakiness isn't the connection pool; it's the retries' jitter.",
            "",
        ];
        for t in texts {
            assert_eq!(index_terms(t), memex_rank::tokenize(t), "{t:?}");
        }
        // Every line of real agent traces.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../vcc/tests/fixtures/traces/claude-code");
        let mut lines = 0;
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let text = std::fs::read_to_string(entry.expect("entry").path()).expect("utf-8 trace");
            for line in text.lines() {
                assert_eq!(index_terms(line), memex_rank::tokenize(line), "{line:?}");
                lines += 1;
            }
        }
        assert!(lines > 1000, "{lines} lines");
    }

    proptest! {
        #[test]
        fn any_text_tokenizes_alike(text in "\\PC{0,80}") {
            prop_assert_eq!(index_terms(&text), memex_rank::tokenize(&text));
        }
    }
}
