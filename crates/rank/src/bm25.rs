//! Okapi BM25 over texts at hand, without an index: the one implementation behind the adaptive
//! view's BM25 predicate (a chain's blocks are the corpus) and the context engine's scan when no
//! index is plugged in (a session's newest events, each also scored, at a lower weight, on the text
//! of the events just before it: a tool result is found by what its call and the reasoning before
//! the call said).
//!
//! Terms are the analyzer's ([`crate::for_each_term`]), the same the tantivy index uses, and the
//! formula is tantivy's (`idf = ln(1 + (N - n + 0.5) / (n + 0.5))`, term weight
//! `idf · (k1 + 1) · tf / (tf + k1 · (1 - b + b · len / avg_len))`, summed over distinct query
//! terms), so a scan ranks like the index; scores are not bit-identical because tantivy stores
//! document lengths lossily.
//!
//! A text's terms are counted once ([`TermCounts::of`]; events never change, so a caller can keep
//! the counts) and each query only looks its terms up in them.

use crate::text::for_each_term;

/// BM25 parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f64,
    /// Length normalisation (0: none, 1: full).
    pub b: f64,
    /// Weight of a document's context (preceding texts) against its own text.
    pub context_weight: f64,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 1.2, b: 0.75, context_weight: 0.5 }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The hash a term is counted under (64-bit FNV-1a of its UTF-8).
pub fn term_hash(term: &str) -> u64 {
    term.bytes().fold(FNV_OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// The terms of one text, by hash, with their counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TermCounts {
    /// (hash, count), sorted by hash.
    terms: Vec<(u64, u32)>,
    /// Terms in the text.
    len: u32,
}

impl TermCounts {
    pub fn of(text: &str) -> TermCounts {
        let mut hashes: Vec<u64> = Vec::new();
        for_each_term(text, |t| hashes.push(term_hash(t)));
        hashes.sort_unstable();
        let len = u32::try_from(hashes.len()).unwrap_or(u32::MAX);
        let mut terms: Vec<(u64, u32)> = Vec::new();
        for h in hashes {
            match terms.last_mut() {
                Some((last, n)) if *last == h => *n += 1,
                _ => terms.push((h, 1)),
            }
        }
        terms.shrink_to_fit();
        TermCounts { terms, len }
    }

    /// The terms of the first `max_bytes` of `text` (cut on a character boundary).
    pub fn of_prefix(text: &str, max_bytes: usize) -> TermCounts {
        let mut end = text.len().min(max_bytes);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        TermCounts::of(&text[..end])
    }

    /// How often the term with this [`term_hash`] occurs.
    pub fn count(&self, hash: u64) -> u32 {
        self.terms.binary_search_by_key(&hash, |(h, _)| *h).map_or(0, |i| self.terms[i].1)
    }

    /// Terms in the text.
    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Approximate memory held, in bytes (for cache weights).
    pub fn weight(&self) -> usize {
        std::mem::size_of::<Self>() + self.terms.len() * std::mem::size_of::<(u64, u32)>()
    }
}

/// One document: its own terms and those of its context (none for a plain corpus).
#[derive(Debug, Clone, Copy)]
pub struct Bm25Doc<'a> {
    pub own: &'a TermCounts,
    pub context: &'a [&'a TermCounts],
}

/// BM25 scores of `docs` (the whole corpus) for `terms` (as [`crate::query_terms`] gives them):
/// the `limit` best documents with a positive score, best first, ties by position. Deterministic.
pub fn bm25(docs: &[Bm25Doc<'_>], terms: &[String], params: Bm25Params, limit: usize) -> Vec<(usize, f32)> {
    if docs.is_empty() || terms.is_empty() || limit == 0 {
        return Vec::new();
    }
    let hashes: Vec<u64> = terms.iter().map(|t| term_hash(t)).collect();
    let w = params.context_weight;
    let mut tf: Vec<f64> = Vec::with_capacity(docs.len() * hashes.len());
    let mut lens: Vec<f64> = Vec::with_capacity(docs.len());
    let mut df = vec![0usize; hashes.len()];
    for d in docs {
        let mut len = f64::from(d.own.len());
        for c in d.context {
            len += w * f64::from(c.len());
        }
        lens.push(len);
        for (i, h) in hashes.iter().enumerate() {
            let mut n = f64::from(d.own.count(*h));
            for c in d.context {
                n += w * f64::from(c.count(*h));
            }
            if n > 0.0 {
                df[i] += 1;
            }
            tf.push(n);
        }
    }
    let n = docs.len() as f64;
    let avg = (lens.iter().sum::<f64>() / n).max(1.0);
    let idf: Vec<f64> = df.iter().map(|&d| (1.0 + (n - d as f64 + 0.5) / (d as f64 + 0.5)).ln()).collect();
    let mut scored: Vec<(usize, f64)> = tf
        .chunks(hashes.len())
        .zip(&lens)
        .enumerate()
        .map(|(i, (counts, len))| {
            let norm = params.k1 * (1.0 - params.b + params.b * len / avg);
            let s: f64 = counts
                .iter()
                .zip(&idf)
                .filter(|(c, _)| **c > 0.0)
                .map(|(c, idf)| idf * c * (params.k1 + 1.0) / (c + norm))
                .sum();
            (i, s)
        })
        .filter(|(_, s)| *s > 0.0)
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(limit);
    scored.into_iter().map(|(i, s)| (i, s as f32)).collect()
}

/// BM25 of plain texts (no context) for `query`: one score per text, in order, 0 for no match.
pub fn bm25_scores<S: AsRef<str>>(query: &str, texts: &[S], params: Bm25Params) -> Vec<f32> {
    let counts: Vec<TermCounts> = texts.iter().map(|t| TermCounts::of(t.as_ref())).collect();
    let docs: Vec<Bm25Doc<'_>> = counts.iter().map(|own| Bm25Doc { own, context: &[] }).collect();
    let mut out = vec![0.0; texts.len()];
    for (i, s) in bm25(&docs, &crate::query_terms(query), params, texts.len()) {
        out[i] = s;
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn matching_documents_outscore_others_and_rare_terms_weigh_more() {
        let texts = ["the build failed with a linker error", "the tests passed", "the build passed", "weather is nice"];
        let s = bm25_scores("linker error build", &texts, Bm25Params::default());
        assert!(s[0] > s[2] && s[2] > 0.0, "{s:?}");
        assert_eq!(s[3], 0.0);
        assert_eq!(s[1], 0.0);
        // "passed" is in two documents, "weather" in one: the rarer term weighs more.
        let s = bm25_scores("passed weather", &texts, Bm25Params::default());
        assert!(s[3] > s[1], "{s:?}");
        // Stopwords do not count when the query has content words.
        let s = bm25_scores("the weather", &texts, Bm25Params::default());
        assert_eq!((s[0], s[1], s[2]), (0.0, 0.0, 0.0), "{s:?}");
        assert!(s[3] > 0.0);
    }

    #[test]
    fn stemming_matches_inflections_and_repeats_in_query_do_not_count_twice() {
        let texts = ["running the failing tests", "nothing here"];
        let a = bm25_scores("run fail test", &texts, Bm25Params::default());
        assert!(a[0] > 0.0);
        let b = bm25_scores("run run fail test", &texts, Bm25Params::default());
        assert_eq!(a, b);
    }

    #[test]
    fn empty_inputs() {
        assert!(bm25_scores::<&str>("x", &[], Bm25Params::default()).is_empty());
        assert_eq!(bm25_scores("", &["a b"], Bm25Params::default()), vec![0.0]);
        assert_eq!(bm25_scores("a", &[""], Bm25Params::default()), vec![0.0]);
    }

    #[test]
    fn a_result_is_found_by_its_call_and_the_reasoning_before_it() {
        let other = TermCounts::of("<output>\nrunning the test suite for pkg, release notes updated\n</output>");
        let ls = TermCounts::of("ls");
        let thought = TermCounts::of("THOUGHT: record the checksum of the release tarball");
        let call = TermCounts::of("sha256sum dist/pkg-1.2.3.tar.gz");
        let result = TermCounts::of("<output>\n9f86d081884c7d65  dist/pkg-1.2.3.tar.gz\n</output>");
        let docs = [
            Bm25Doc { own: &other, context: &[&ls] },
            Bm25Doc { own: &thought, context: &[] },
            Bm25Doc { own: &call, context: &[&thought] },
            Bm25Doc { own: &result, context: &[&thought, &call] },
        ];
        let q = crate::query_terms("Which checksum did sha256sum print for the release tarball?");
        let ranked: Vec<usize> = bm25(&docs, &q, Bm25Params::default(), 10).iter().map(|h| h.0).collect();
        assert!(ranked.contains(&3), "{ranked:?}");
        assert!(ranked.iter().position(|&i| i == 3) < ranked.iter().position(|&i| i == 0));
    }

    #[test]
    fn terms_are_the_analyzers_and_identifiers_match_by_their_parts() {
        let w = TermCounts::of("Test_Prism_roundtrip failed; test_prism_ROUNDTRIP again. Ünïcode_Wörd");
        // test, prism, roundtrip, fail, test, prism, roundtrip, again, ünïcode, wörd
        assert_eq!(w.len(), 10);
        assert_eq!(w.count(term_hash("prism")), 2);
        assert_eq!(w.count(term_hash("fail")), 1, "stemmed like the index");
        assert_eq!(w.count(term_hash("wörd")), 1);
        assert_eq!(w.count(term_hash("absent")), 0);
        // A long multi-byte prefix is cut on a character boundary.
        assert_eq!(TermCounts::of_prefix(&"é".repeat(10_000), 16 * 1024).len(), 0, "one token over 40 bytes");
        assert_eq!(TermCounts::of_prefix("aé b", 2).len(), 1);
        let (a, ctx) =
            (TermCounts::of("./sierra/onyx/settings_0a1b.cfg"), TermCounts::of("find . -name '*.cfg' | grep sierra"));
        let (b, c) = (TermCounts::of("setup.cfg"), TermCounts::of("nothing here"));
        let docs = [
            Bm25Doc { own: &a, context: &[&ctx] },
            Bm25Doc { own: &b, context: &[] },
            Bm25Doc { own: &c, context: &[] },
        ];
        let q = crate::query_terms("Which .cfg settings file under sierra did the command report?");
        let hits = bm25(&docs, &q, Bm25Params::default(), 10);
        assert_eq!(hits.first().map(|h| h.0), Some(0));
        assert!(hits.iter().all(|h| h.0 != 2), "no match, no hit");
        assert_eq!(hits, bm25(&docs, &q, Bm25Params::default(), 10));
        assert!(bm25(&docs, &[], Bm25Params::default(), 10).is_empty());
    }

    proptest! {
        #[test]
        fn scores_are_finite_non_negative_and_one_per_text(
            texts in proptest::collection::vec("[a-z ]{0,40}", 0..12),
            query in "[a-z ]{0,20}",
        ) {
            let s = bm25_scores(&query, &texts, Bm25Params::default());
            prop_assert_eq!(s.len(), texts.len());
            for x in &s {
                prop_assert!(x.is_finite() && *x >= 0.0);
            }
        }

        #[test]
        fn a_text_sharing_no_term_with_the_query_scores_zero(texts in proptest::collection::vec("[a-m ]{0,30}", 1..8)) {
            let s = bm25_scores("zzz yyy", &texts, Bm25Params::default());
            prop_assert!(s.iter().all(|&x| x == 0.0));
        }
    }
}
