//! Okapi BM25 over a set of texts, with the analyzer of [`crate::tokenize`]. This is the plain
//! function the adaptive view's BM25 predicate calls: no index, the texts are the corpus.
//!
//! The formula is tantivy's (`idf = ln(1 + (N - n + 0.5) / (n + 0.5))`, term weight
//! `idf · (k1 + 1) · tf / (tf + k1 · (1 - b + b · len / avg_len))`, summed over distinct query
//! terms), so scores here and from the index rank alike; they are not bit-identical because
//! tantivy stores document lengths lossily.

use std::collections::HashMap;

use crate::text::tokenize;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation (0: none, 1: full).
    pub b: f32,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 1.2, b: 0.75 }
    }
}

/// A corpus analysed once, to score many queries against.
#[derive(Debug, Clone)]
pub struct Bm25 {
    params: Bm25Params,
    /// Per document: term → frequency.
    docs: Vec<HashMap<String, u32>>,
    lens: Vec<u32>,
    avg_len: f32,
    /// Term → number of documents containing it.
    df: HashMap<String, u32>,
}

impl Bm25 {
    pub fn new<S: AsRef<str>>(texts: &[S], params: Bm25Params) -> Bm25 {
        let mut docs = Vec::with_capacity(texts.len());
        let mut lens = Vec::with_capacity(texts.len());
        let mut df: HashMap<String, u32> = HashMap::new();
        for t in texts {
            let terms = tokenize(t.as_ref());
            lens.push(terms.len() as u32);
            let mut tf: HashMap<String, u32> = HashMap::new();
            for term in terms {
                *tf.entry(term).or_default() += 1;
            }
            for term in tf.keys() {
                *df.entry(term.clone()).or_default() += 1;
            }
            docs.push(tf);
        }
        let total: u64 = lens.iter().map(|&l| u64::from(l)).sum();
        let avg_len = if lens.is_empty() { 0.0 } else { total as f32 / lens.len() as f32 };
        Bm25 { params, docs, lens, avg_len, df }
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The score of every document for `query`, in corpus order (0 for no shared term).
    pub fn scores(&self, query: &str) -> Vec<f32> {
        let terms = crate::text::query_terms(query);
        let n = self.docs.len() as f32;
        let Bm25Params { k1, b } = self.params;
        let weights: Vec<(&String, f32)> = terms
            .iter()
            .filter_map(|t| {
                let df = *self.df.get(t)? as f32;
                Some((t, (1.0 + (n - df + 0.5) / (df + 0.5)).ln() * (k1 + 1.0)))
            })
            .collect();
        self.docs
            .iter()
            .zip(&self.lens)
            .map(|(tf, &len)| {
                let norm = if self.avg_len > 0.0 { k1 * (1.0 - b + b * len as f32 / self.avg_len) } else { k1 };
                weights.iter().filter_map(|(t, w)| tf.get(*t).map(|&f| w * f as f32 / (f as f32 + norm))).sum()
            })
            .collect()
    }
}

/// BM25 scores of `texts` for `query`, treating `texts` as the whole corpus.
pub fn bm25_scores<S: AsRef<str>>(query: &str, texts: &[S], params: Bm25Params) -> Vec<f32> {
    Bm25::new(texts, params).scores(query)
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
