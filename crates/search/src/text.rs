//! The analyzer: how text becomes index terms. The tantivy index (`memex-index`) registers the
//! same chain — split on non-alphanumeric characters, drop tokens of 40 bytes or more, lowercase,
//! English Snowball stemming — so a BM25 score computed here over a set of texts and a score from
//! the index agree on what a term is.

/// Tokens at least this long (in bytes) are dropped: hashes, base64 and minified blobs would
/// otherwise flood the term dictionary (tantivy's `RemoveLongFilter` uses the same rule).
pub const MAX_TOKEN_BYTES: usize = 40;

/// The terms of `text`, in order, with repeats.
pub fn tokenize(text: &str) -> Vec<String> {
    let stemmer = frostem::Stemmer::new(frostem::Algorithm::English);
    let mut out = Vec::new();
    for raw in text.split(|c: char| !c.is_alphanumeric()) {
        if raw.is_empty() || raw.len() >= MAX_TOKEN_BYTES {
            continue;
        }
        let lower = if raw.is_ascii() { raw.to_ascii_lowercase() } else { raw.chars().flat_map(char::to_lowercase).collect() };
        out.push(stemmer.stem(&lower).into_owned());
    }
    out
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
}
