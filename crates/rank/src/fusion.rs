//! Fusing ranked lists. Two ways:
//! - reciprocal-rank fusion (Cormack, Clarke & Büttcher 2009): each retriever's list contributes
//!   `weight / (k + rank)` to every item it ranks. It needs no score calibration between BM25 and
//!   cosine similarity, but it throws the scores away: a BM25 list whose first hit towers over the
//!   rest counts the same as one of near ties, and a weak retriever's rank 1 weighs as much as a
//!   strong one's.
//! - score fusion (CombSUM, Fox & Shaw 1994): each list contributes `weight × score`, the scores
//!   brought to one scale first ([`max_scaled`] for BM25; cosine similarity is on one already).
//!   On LoCoMo with MiniLM it ranks evidence better than the best RRF weighting (notes in
//!   `memex-search`'s config).
//!
//! Every hit keeps its score parts (rank, raw score and contribution per list), so a caller can see
//! why it ranked where it did.

use std::collections::BTreeMap;

/// One retriever's results, best first: `(key, raw score)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedList<K> {
    pub weight: f32,
    pub items: Vec<(K, f32)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RrfOptions {
    /// The rank constant; 60 in the original paper.
    pub k: f32,
}

impl Default for RrfOptions {
    fn default() -> Self {
        RrfOptions { k: 60.0 }
    }
}

/// What one list contributed to a fused hit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part {
    /// 1-based rank in that list.
    pub rank: u32,
    /// The retriever's own score (BM25, cosine similarity, …).
    pub score: f32,
    /// `weight / (k + rank)` (RRF) or `weight × score` (score fusion).
    pub contribution: f32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FusedHit<K> {
    pub key: K,
    /// Sum of the contributions.
    pub score: f32,
    /// One entry per input list, in input order; `None` where that list did not rank the key.
    pub parts: Vec<Option<Part>>,
}

impl<K> FusedHit<K> {
    fn best_rank(&self) -> u32 {
        self.parts.iter().flatten().map(|p| p.rank).min().unwrap_or(u32::MAX)
    }
}

/// Fuses `lists` into one ranking, best first. A key listed twice in one list counts once, at its
/// better rank. Ties are broken by the best single rank, then by key, so the order is a function of
/// the input alone.
pub fn rrf<K: Ord + Clone>(lists: &[RankedList<K>], opts: RrfOptions) -> Vec<FusedHit<K>> {
    fuse(lists, |weight, rank, _| weight / (opts.k + rank as f32))
}

/// Fuses `lists` by their scores: a key's score is the sum of `weight × score` over the lists that
/// rank it. Scores must be on comparable scales (see [`max_scaled`]). Duplicates and ties as in
/// [`rrf`].
pub fn score_sum<K: Ord + Clone>(lists: &[RankedList<K>]) -> Vec<FusedHit<K>> {
    fuse(lists, |weight, _, score| weight * score)
}

/// Divides the scores of `items` by the largest: BM25 scores onto 0..=1 (the best hit 1), so they
/// add up with cosine similarities. Returns the divisor, so a caller can report raw scores; 1 (and
/// the scores left alone) when no score is positive and finite.
pub fn max_scaled<K>(items: &mut [(K, f32)]) -> f32 {
    let max = items.iter().map(|(_, s)| *s).fold(0.0f32, f32::max);
    if !(max > 0.0 && max.is_finite()) {
        return 1.0;
    }
    items.iter_mut().for_each(|(_, s)| *s /= max);
    max
}

fn fuse<K: Ord + Clone>(lists: &[RankedList<K>], contribution: impl Fn(f32, u32, f32) -> f32) -> Vec<FusedHit<K>> {
    let mut by_key: BTreeMap<K, FusedHit<K>> = BTreeMap::new();
    for (li, list) in lists.iter().enumerate() {
        for (i, (key, score)) in list.items.iter().enumerate() {
            let rank = (i + 1) as u32;
            let hit = by_key.entry(key.clone()).or_insert_with(|| FusedHit {
                key: key.clone(),
                score: 0.0,
                parts: vec![None; lists.len()],
            });
            if hit.parts[li].is_none() {
                let contribution = contribution(list.weight, rank, *score);
                hit.parts[li] = Some(Part { rank, score: *score, contribution });
                hit.score += contribution;
            }
        }
    }
    let mut hits: Vec<FusedHit<K>> = by_key.into_values().collect();
    hits.sort_by(|a, b| {
        b.score.total_cmp(&a.score).then_with(|| a.best_rank().cmp(&b.best_rank())).then_with(|| a.key.cmp(&b.key))
    });
    hits
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn list(weight: f32, keys: &[u32]) -> RankedList<u32> {
        RankedList { weight, items: keys.iter().map(|&k| (k, 1.0 / (k as f32 + 1.0))).collect() }
    }

    #[test]
    fn agreement_wins_and_parts_explain_the_score() {
        let hits = rrf(&[list(1.0, &[1, 2, 3]), list(1.0, &[3, 1, 4])], RrfOptions::default());
        let keys: Vec<u32> = hits.iter().map(|h| h.key).collect();
        assert_eq!(keys, vec![1, 3, 2, 4]);
        let h = &hits[0];
        assert_eq!(h.parts[0].map(|p| p.rank), Some(1));
        assert_eq!(h.parts[1].map(|p| p.rank), Some(2));
        assert!((h.score - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-7);
        assert!(hits[3].parts[0].is_none());
    }

    #[test]
    fn weights_shift_the_balance() {
        let hits = rrf(&[list(0.1, &[1, 2]), list(1.0, &[2, 1])], RrfOptions::default());
        assert_eq!(hits[0].key, 2);
        let hits = rrf(&[list(1.0, &[1, 2]), list(0.0, &[2, 1])], RrfOptions::default());
        assert_eq!(hits[0].key, 1);
    }

    #[test]
    fn duplicates_count_once_at_their_best_rank() {
        let hits = rrf(&[list(1.0, &[5, 5, 6])], RrfOptions { k: 0.0 });
        assert_eq!(hits[0].key, 5);
        assert!((hits[0].score - 1.0).abs() < 1e-7);
        assert_eq!(hits[1].parts[0].map(|p| p.rank), Some(3));
    }

    #[test]
    fn score_fusion_keeps_the_margins_rrf_throws_away() {
        // BM25 is sure of key 1 and unsure of the rest; the vector list mildly prefers 2.
        let mut items = vec![(1u32, 20.0), (2, 2.0), (3, 1.9)];
        assert_eq!(max_scaled(&mut items), 20.0);
        let bm25 = RankedList { weight: 1.0, items };
        let vector = RankedList { weight: 0.5, items: vec![(2u32, 0.42), (1, 0.40), (3, 0.10)] };
        let keys = |h: Vec<FusedHit<u32>>| h.iter().map(|h| h.key).collect::<Vec<_>>();
        assert_eq!(keys(score_sum(&[bm25.clone(), vector.clone()])), vec![1, 2, 3]);
        let h = &score_sum(&[bm25.clone(), vector.clone()])[0];
        assert!((h.score - (1.0 + 0.5 * 0.40)).abs() < 1e-6);
        assert_eq!(h.parts[1].map(|p| p.rank), Some(2));
        // RRF sees only ranks: with the vector list weighted a little more, its rank 1 wins.
        assert_eq!(keys(rrf(&[bm25, RankedList { weight: 1.2, ..vector }], RrfOptions::default()))[0], 2);
    }

    #[test]
    fn max_scaling_puts_the_best_at_one_and_leaves_nothing_positive_alone() {
        let scaled = |mut v: Vec<(u32, f32)>| (max_scaled(&mut v), v);
        assert_eq!(scaled(vec![(1, 4.0), (2, 1.0)]), (4.0, vec![(1, 1.0), (2, 0.25)]));
        assert_eq!(scaled(vec![(1, 0.0), (2, -1.0)]), (1.0, vec![(1, 0.0), (2, -1.0)]));
        assert_eq!(scaled(Vec::new()), (1.0, Vec::new()));
    }

    proptest! {
        #[test]
        fn fused_is_sorted_covers_the_union_and_scores_are_sums(
            a in proptest::collection::vec(0u32..30, 0..20),
            b in proptest::collection::vec(0u32..30, 0..20),
            wa in 0.0f32..2.0, wb in 0.0f32..2.0, k in 0.0f32..100.0,
        ) {
            let hits = rrf(&[list(wa, &a), list(wb, &b)], RrfOptions { k });
            let mut union: Vec<u32> = a.iter().chain(&b).copied().collect();
            union.sort();
            union.dedup();
            let mut got: Vec<u32> = hits.iter().map(|h| h.key).collect();
            got.sort();
            prop_assert_eq!(got, union);
            for w in hits.windows(2) {
                prop_assert!(w[0].score >= w[1].score);
            }
            for h in &hits {
                let sum: f32 = h.parts.iter().flatten().map(|p| p.contribution).sum();
                prop_assert!((sum - h.score).abs() <= 1e-6);
            }
        }

        #[test]
        fn a_single_list_keeps_its_order(mut keys in proptest::collection::vec(0u32..1000, 0..40)) {
            let mut seen = std::collections::HashSet::new();
            keys.retain(|k| seen.insert(*k));
            let hits = rrf(&[list(1.0, &keys)], RrfOptions::default());
            prop_assert_eq!(hits.iter().map(|h| h.key).collect::<Vec<_>>(), keys);
        }

        #[test]
        fn input_order_of_lists_does_not_change_the_ranking(
            a in proptest::collection::vec(0u32..30, 0..20),
            b in proptest::collection::vec(0u32..30, 0..20),
        ) {
            let x: Vec<u32> = rrf(&[list(1.0, &a), list(1.0, &b)], RrfOptions::default()).iter().map(|h| h.key).collect();
            let y: Vec<u32> = rrf(&[list(1.0, &b), list(1.0, &a)], RrfOptions::default()).iter().map(|h| h.key).collect();
            prop_assert_eq!(x, y);
        }
    }
}
