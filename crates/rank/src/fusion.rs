//! Reciprocal-rank fusion (Cormack, Clarke & Büttcher 2009): each retriever's list contributes
//! `weight / (k + rank)` to every item it ranks. RRF needs no score calibration between BM25 and
//! cosine similarity — their scales are unrelated — and a large `k` flattens the advantage of the
//! very top ranks.
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
    /// `weight / (k + rank)`.
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
                let contribution = list.weight / (opts.k + rank as f32);
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
