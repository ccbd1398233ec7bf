//! Maximal marginal relevance (A.2 line 12): pick the next item by
//! `λ · relevance − (1 − λ) · max similarity to what is already picked`, λ = 0.7.
//!
//! Similarity is the cosine of embeddings when both items have one, else the Jaccard similarity of
//! their word sets, estimated from bottom-k sketches (the k smallest word hashes) so a selection
//! over hundreds of candidates costs well under a millisecond.

/// Words kept per sketch.
const SKETCH: usize = 64;

/// A bottom-k sketch of an item's word set: sorted, distinct 64-bit hashes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sketch(Vec<u64>);

/// FNV-1a over a lower-cased word: stable across runs and platforms (determinism).
fn word_hash(w: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in w.bytes() {
        h ^= u64::from(b.to_ascii_lowercase());
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Finalize (splitmix) so the bottom-k sample is not biased by word length.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

impl Sketch {
    pub fn of(text: &str) -> Sketch {
        // The bottom k kept as they come: a long text's words mostly hash above the k-th and are
        // dropped at once (sorting all of a tool output's words cost more than the rest of MMR).
        let mut bottom: Vec<u64> = Vec::with_capacity(SKETCH + 1);
        for h in text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| w.len() >= 3).map(word_hash) {
            if bottom.len() == SKETCH && bottom.last().is_some_and(|&max| h >= max) {
                continue;
            }
            if let Err(i) = bottom.binary_search(&h) {
                bottom.insert(i, h);
                bottom.truncate(SKETCH);
            }
        }
        Sketch(bottom)
    }

    /// Estimated Jaccard similarity of the two word sets.
    pub fn jaccard(&self, o: &Sketch) -> f64 {
        if self.0.is_empty() || o.0.is_empty() {
            return 0.0;
        }
        // Bottom-k of the union, and how many of those are in both.
        let (a, b) = (&self.0, &o.0);
        let (mut i, mut j, mut taken, mut both) = (0, 0, 0, 0);
        while taken < SKETCH && (i < a.len() || j < b.len()) {
            match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) if x == y => {
                    both += 1;
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x < y => i += 1,
                (Some(_), None) => i += 1,
                _ => j += 1,
            }
            taken += 1;
        }
        both as f64 / taken as f64
    }
}

fn cosine(a: &[f32], b: &[f32]) -> Option<f64> {
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    (na > 0.0 && nb > 0.0).then(|| (dot / (na.sqrt() * nb.sqrt())).clamp(0.0, 1.0))
}

/// An item as MMR sees it.
pub struct MmrItem<'a> {
    pub score: f64,
    pub sketch: &'a Sketch,
    pub embedding: Option<&'a [f32]>,
}

fn similarity(a: &MmrItem<'_>, b: &MmrItem<'_>) -> f64 {
    match (a.embedding, b.embedding) {
        (Some(x), Some(y)) => cosine(x, y).unwrap_or_else(|| a.sketch.jaccard(b.sketch)),
        _ => a.sketch.jaccard(b.sketch),
    }
}

/// Selects up to `k` items with positive score in MMR order; returns their indices. `order`
/// breaks ties (lower first), so the selection is deterministic.
pub fn mmr_select(items: &[MmrItem<'_>], order: &[usize], k: usize, lambda: f64) -> Vec<usize> {
    let max = items.iter().map(|i| i.score).fold(0.0f64, f64::max);
    if max <= 0.0 || k == 0 {
        return Vec::new();
    }
    let mut rank = vec![0usize; items.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r;
    }
    let mut left: Vec<usize> = (0..items.len()).filter(|&i| items[i].score > 0.0).collect();
    let mut max_sim = vec![0.0f64; items.len()];
    let mut picked = Vec::with_capacity(k.min(left.len()));
    while picked.len() < k && !left.is_empty() {
        let mut best = 0;
        let mut best_val = f64::NEG_INFINITY;
        for (pos, &i) in left.iter().enumerate() {
            let val = lambda * (items[i].score / max) - (1.0 - lambda) * max_sim[i];
            let better = val > best_val || (val == best_val && rank[i] < rank[left[best]]);
            if better {
                best = pos;
                best_val = val;
            }
        }
        let chosen = left.swap_remove(best);
        picked.push(chosen);
        for &i in &left {
            let s = similarity(&items[i], &items[chosen]);
            if s > max_sim[i] {
                max_sim[i] = s;
            }
        }
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sketches_estimate_overlap() {
        let a = Sketch::of("the separability matrix of nested compound models is wrong");
        let b = Sketch::of("the separability matrix of nested compound models is right");
        let c = Sketch::of("pytest collected three items and all passed");
        assert!(a.jaccard(&b) > 0.6, "{}", a.jaccard(&b));
        assert_eq!(a.jaccard(&c), 0.0);
        assert_eq!(a.jaccard(&a), 1.0);
        assert_eq!(Sketch::of("").jaccard(&a), 0.0);
    }

    proptest::proptest! {
        /// The streaming bottom-k equals sorting every word's hash and keeping the k least.
        #[test]
        fn a_sketch_is_the_bottom_k_of_all_its_words(words in proptest::collection::vec("[a-zé_]{1,6}", 0..400)) {
            let text = words.join(" . ");
            let mut all: Vec<u64> =
                text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| w.len() >= 3).map(word_hash).collect();
            all.sort_unstable();
            all.dedup();
            all.truncate(SKETCH);
            proptest::prop_assert_eq!(Sketch::of(&text).0, all);
        }
    }

    #[test]
    fn mmr_prefers_diversity_after_the_best() {
        let s1 = Sketch::of("error in separable.py line 10 ModuleNotFoundError erfa");
        let s2 = Sketch::of("error in separable.py line 10 ModuleNotFoundError erfa again");
        let s3 = Sketch::of("decision: use the v2 API for the matrix");
        let items = [
            MmrItem { score: 1.0, sketch: &s1, embedding: None },
            MmrItem { score: 0.95, sketch: &s2, embedding: None },
            MmrItem { score: 0.7, sketch: &s3, embedding: None },
            MmrItem { score: 0.0, sketch: &s3, embedding: None },
        ];
        assert_eq!(mmr_select(&items, &[0, 1, 2, 3], 10, 0.7), vec![0, 2, 1]);
        assert_eq!(mmr_select(&items, &[0, 1, 2, 3], 1, 0.7), vec![0]);
        // λ = 1 is plain relevance order.
        assert_eq!(mmr_select(&items, &[0, 1, 2, 3], 10, 1.0), vec![0, 1, 2]);
    }

    #[test]
    fn embeddings_take_precedence() {
        let s = Sketch::of("same words same words");
        let (e1, e2, e3) = ([1.0f32, 0.0], [0.99f32, 0.1], [0.0f32, 1.0]);
        let items = [
            MmrItem { score: 1.0, sketch: &s, embedding: Some(&e1) },
            MmrItem { score: 0.9, sketch: &s, embedding: Some(&e2) },
            MmrItem { score: 0.8, sketch: &s, embedding: Some(&e3) },
        ];
        assert_eq!(mmr_select(&items, &[0, 1, 2], 3, 0.7), vec![0, 2, 1]);
    }
}
