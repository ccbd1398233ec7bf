//! The analyzer: how text becomes index terms. The tantivy index (`memex-search`) registers the
//! same chain — split on non-alphanumeric characters, drop tokens of 40 bytes or more, lowercase,
//! English Snowball stemming — so a BM25 score computed here over a set of texts and a score from
//! the index agree on what a term is.

/// Tokens at least this long (in bytes) are dropped: hashes, base64 and minified blobs would
/// otherwise flood the term dictionary (tantivy's `RemoveLongFilter` uses the same rule).
pub const MAX_TOKEN_BYTES: usize = 40;

/// Calls `f` with each term of `text`, in order, with repeats: what [`tokenize`] collects, without
/// a `String` per term (BM25 scans count the terms of every event they read).
pub fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    let stemmer = frostem::Stemmer::new(frostem::Algorithm::English);
    let mut lower = String::new();
    for raw in text.split(|c: char| !c.is_alphanumeric()) {
        if raw.is_empty() || raw.len() >= MAX_TOKEN_BYTES {
            continue;
        }
        lower.clear();
        if raw.is_ascii() {
            lower.extend(raw.bytes().map(|b| char::from(b.to_ascii_lowercase())));
        } else {
            lower.extend(raw.chars().flat_map(char::to_lowercase));
        }
        f(&stemmer.stem(&lower));
    }
}

/// The terms of `text`, in order, with repeats.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_owned()));
    out
}

/// English function words. A query keeps its content words only (unless it has nothing else):
/// "when did Caroline go to the support group" searches for "caroline support group" — scoring
/// "did" and "the" against millions of chunks costs time and adds noise that IDF only dampens.
pub const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "before", "being",
    "both", "but", "by", "can", "could", "did", "do", "does", "doing", "done", "during", "each", "for", "from", "had",
    "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it",
    "its", "just", "me", "might", "more", "most", "my", "no", "nor", "not", "of", "on", "or", "our", "ours", "she",
    "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "then", "there", "these", "they",
    "this", "those", "to", "too", "us", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who",
    "whom", "why", "will", "with", "would", "you", "your", "yours",
];

/// The terms a query searches for: its tokens without stopwords, deduplicated, in first-seen
/// order; all of its tokens if every one is a stopword.
pub fn query_terms(query: &str) -> Vec<String> {
    // The stopwords' own terms (stemmed as a query's are), made once.
    static STOP: std::sync::LazyLock<std::collections::HashSet<String>> =
        std::sync::LazyLock::new(|| STOPWORDS.iter().flat_map(|w| tokenize(w)).collect());
    let stop = &*STOP;
    let all = tokenize(query);
    let content: Vec<&String> = all.iter().filter(|t| !stop.contains(*t)).collect();
    let chosen: Vec<&String> = if content.is_empty() { all.iter().collect() } else { content };
    let mut seen = std::collections::HashSet::new();
    chosen.into_iter().filter(|t| seen.insert((*t).clone())).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lowercases_and_stems() {
        assert_eq!(tokenize("Running tests: FAILED (3 failures)"), vec!["run", "test", "fail", "3", "failur"]);
        assert_eq!(tokenize("src/lib.rs:42"), vec!["src", "lib", "rs", "42"]);
        assert!(tokenize(&"a".repeat(40)).is_empty());
        assert_eq!(tokenize("Ünïcödé"), vec!["ünïcödé"]);
    }

    #[test]
    fn queries_keep_their_content_words() {
        assert_eq!(
            query_terms("When did Caroline go to the support group?"),
            vec!["carolin", "go", "support", "group"]
        );
        assert_eq!(query_terms("what is it"), vec!["what", "is", "it"]);
        assert_eq!(query_terms("test tests testing"), vec!["test"]);
        assert!(query_terms("").is_empty());
    }
}
