//! Maximal marginal relevance (Carbonell & Goldstein 1998; TRACE A.2 line 12): re-rank so each
//! next pick is relevant and unlike the picks before it. A retrieval pack of ten near-identical
//! test-failure lines wastes its budget; MMR spreads it. Search diversifies hits with it (cosine
//! of embeddings) and packs their items (cosine when both items have an embedding, else the
//! Jaccard similarity of their word sets, estimated by [`Sketch`]).

/// Chooses up to `k` of the candidates with positive relevance, in pick order, as indices into
/// `relevance`.
///
/// `relevance` is scaled to [0, 1] by its maximum; `sim(i, j)` is the similarity of candidates `i`
/// and `j`. Each pick maximises `lambda · relevance − (1 − lambda) · max similarity to the picks
/// so far`; ties go to the lower index, so the selection is deterministic. `lambda = 1` returns
/// the candidates by relevance; `lambda = 0` only avoids repeats.
pub fn mmr(relevance: &[f64], k: usize, lambda: f64, sim: impl Fn(usize, usize) -> f64) -> Vec<usize> {
    mmr_after(relevance, &[], k, lambda, sim)
}

/// [`mmr`] that has already picked `first` (indices into `relevance`, in that order, whatever
/// their relevance): the rest continue as [`mmr`] would have after picking them itself. A pack
/// that keeps the evidence of an earlier turn in place picks the remainder this way, so building
/// it again from the same state gives the same picks.
pub fn mmr_after(
    relevance: &[f64],
    first: &[usize],
    k: usize,
    lambda: f64,
    sim: impl Fn(usize, usize) -> f64,
) -> Vec<usize> {
    let max = relevance.iter().copied().fold(0.0f64, f64::max);
    let first: Vec<usize> = first.iter().copied().filter(|&i| i < relevance.len()).take(k).collect();
    if (max <= 0.0 && first.is_empty()) || k == 0 {
        return Vec::new();
    }
    let mut left: Vec<usize> = (0..relevance.len()).filter(|&i| relevance[i] > 0.0 && !first.contains(&i)).collect();
    // Highest similarity of each candidate to anything picked so far.
    let mut max_sim = vec![f64::NEG_INFINITY; relevance.len()];
    let mut picked: Vec<usize> = Vec::with_capacity(k.min(left.len() + first.len()));
    for &chosen in &first {
        picked.push(chosen);
        for &j in &left {
            max_sim[j] = max_sim[j].max(sim(chosen, j));
        }
    }
    let max = if max > 0.0 { max } else { 1.0 };
    while picked.len() < k && !left.is_empty() {
        let mut best = 0;
        let mut best_val = f64::NEG_INFINITY;
        for (pos, &i) in left.iter().enumerate() {
            let penalty = if picked.is_empty() { 0.0 } else { max_sim[i] };
            let val = lambda * (relevance[i] / max) - (1.0 - lambda) * penalty;
            if val > best_val || (val == best_val && i < left[best]) {
                best = pos;
                best_val = val;
            }
        }
        let chosen = left.swap_remove(best);
        picked.push(chosen);
        for &j in &left {
            max_sim[j] = max_sim[j].max(sim(chosen, j));
        }
    }
    picked
}

/// Words kept per sketch.
const SKETCH: usize = 64;

/// A bottom-k sketch of a text's word set (the k smallest word hashes, sorted and distinct), so
/// MMR over hundreds of candidates costs well under a millisecond. Words here are raw (split on
/// anything but letters, digits and `_`, three characters or more, lower-cased), not the
/// analyzer's terms: this estimates how alike two texts read, for diversity, and stemming every
/// word of every tool output would cost more than the rest of MMR.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sketch(Vec<u64>);

/// FNV-1a over a lower-cased word, finalized (splitmix) so the bottom-k sample is not biased by
/// word length: stable across runs and platforms.
fn word_hash(w: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in w.bytes() {
        h ^= u64::from(b.to_ascii_lowercase());
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn near_duplicates_are_pushed_down() {
        // 0 and 1 are duplicates; 2 is a little less relevant but different.
        let rel = [1.0, 0.99, 0.8];
        let sim = |a: usize, b: usize| if a.min(b) == 0 && a.max(b) == 1 { 1.0 } else { 0.0 };
        assert_eq!(mmr(&rel, 3, 1.0, sim), vec![0, 1, 2]);
        assert_eq!(mmr(&rel, 3, 0.5, sim), vec![0, 2, 1]);
        // Nothing relevant, nothing picked; zero relevance is never picked.
        assert!(mmr(&[0.0, 0.0], 2, 0.7, sim).is_empty());
        assert_eq!(mmr(&[0.5, 0.0, 1.0], 3, 0.7, |_, _| 0.0), vec![2, 0]);
    }

    #[test]
    fn sketches_estimate_overlap_and_steer_mmr() {
        let a = Sketch::of("the separability matrix of nested compound models is wrong");
        let b = Sketch::of("the separability matrix of nested compound models is right");
        let c = Sketch::of("pytest collected three items and all passed");
        assert!(a.jaccard(&b) > 0.6, "{}", a.jaccard(&b));
        assert_eq!(a.jaccard(&c), 0.0);
        assert_eq!(a.jaccard(&a), 1.0);
        assert_eq!(Sketch::of("").jaccard(&a), 0.0);
        let s = [a, b, c];
        assert_eq!(mmr(&[1.0, 0.95, 0.7], 3, 0.7, |i, j| s[i].jaccard(&s[j])), vec![0, 2, 1]);
    }

    proptest! {
        #[test]
        fn picks_are_distinct_relevant_and_k_bounded(
            rel in proptest::collection::vec(0.0f64..10.0, 0..30), k in 0usize..40, lambda in 0.0f64..=1.0,
        ) {
            let picks = mmr(&rel, k, lambda, |a, b| ((a * 7 + b * 7) % 5) as f64 / 5.0);
            let positive = rel.iter().filter(|r| **r > 0.0).count();
            prop_assert_eq!(picks.len(), k.min(positive));
            let mut s = picks.clone();
            s.sort();
            s.dedup();
            prop_assert_eq!(s.len(), picks.len());
            prop_assert!(picks.iter().all(|&i| rel[i] > 0.0));
        }

        /// Picking the first j of MMR's own picks and continuing gives MMR's picks.
        #[test]
        fn continuing_after_its_own_first_picks_is_mmr(
            rel in proptest::collection::vec(0.0f64..10.0, 0..30), k in 0usize..40, lambda in 0.0f64..=1.0, j in 0usize..40,
        ) {
            let sim = |a: usize, b: usize| ((a * 7 + b * 3) % 5) as f64 / 5.0;
            let all = mmr(&rel, k, lambda, sim);
            let j = j.min(all.len());
            prop_assert_eq!(mmr_after(&rel, &all[..j], k, lambda, sim), all);
        }

        #[test]
        fn lambda_one_is_relevance_order(rel in proptest::collection::vec(0.01f64..10.0, 0..30)) {
            let picks = mmr(&rel, rel.len(), 1.0, |_, _| 1.0);
            let mut want: Vec<usize> = (0..rel.len()).collect();
            want.sort_by(|&a, &b| rel[b].total_cmp(&rel[a]).then(a.cmp(&b)));
            prop_assert_eq!(picks, want);
        }

        /// The streaming bottom-k equals sorting every word's hash and keeping the k least.
        #[test]
        fn a_sketch_is_the_bottom_k_of_all_its_words(words in proptest::collection::vec("[a-zé_]{1,6}", 0..400)) {
            let text = words.join(" . ");
            let mut all: Vec<u64> =
                text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| w.len() >= 3).map(word_hash).collect();
            all.sort_unstable();
            all.dedup();
            all.truncate(SKETCH);
            prop_assert_eq!(Sketch::of(&text).0, all);
        }
    }
}
