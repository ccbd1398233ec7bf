//! Maximal marginal relevance (Carbonell & Goldstein 1998): re-rank so each next pick is relevant
//! and unlike the picks before it. A retrieval pack of ten near-identical test-failure lines wastes
//! its budget; MMR spreads it.

/// Chooses up to `k` of the candidates, in pick order, as indices into `relevance`.
///
/// `relevance` is scaled to [0, 1] by its maximum; `sim(i, j)` is the similarity of candidates `i`
/// and `j` (cosine of their embeddings, say; 0 when unknown). Each pick maximises
/// `lambda · relevance − (1 − lambda) · max similarity to the picks so far`; ties go to the lower
/// index. `lambda = 1` returns the candidates by relevance; `lambda = 0` only avoids repeats.
pub fn mmr(relevance: &[f32], k: usize, lambda: f32, sim: impl Fn(usize, usize) -> f32) -> Vec<usize> {
    let n = relevance.len();
    let max = relevance.iter().copied().fold(0.0f32, f32::max);
    let rel: Vec<f32> = relevance.iter().map(|&r| if max > 0.0 { r / max } else { 0.0 }).collect();
    let mut picked: Vec<usize> = Vec::with_capacity(k.min(n));
    let mut taken = vec![false; n];
    // Highest similarity of each candidate to anything picked so far.
    let mut max_sim = vec![f32::NEG_INFINITY; n];
    while picked.len() < k.min(n) {
        let mut best: Option<(usize, f32)> = None;
        for i in (0..n).filter(|&i| !taken[i]) {
            let penalty = if picked.is_empty() { 0.0 } else { max_sim[i] };
            let value = lambda * rel[i] - (1.0 - lambda) * penalty;
            if best.is_none_or(|(_, v)| value > v) {
                best = Some((i, value));
            }
        }
        let Some((i, _)) = best else { break };
        taken[i] = true;
        picked.push(i);
        for j in (0..n).filter(|&j| !taken[j]) {
            max_sim[j] = max_sim[j].max(sim(i, j));
        }
    }
    picked
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
    }

    proptest! {
        #[test]
        fn picks_are_distinct_in_range_and_k_bounded(
            rel in proptest::collection::vec(0.0f32..10.0, 0..30), k in 0usize..40, lambda in 0.0f32..=1.0,
        ) {
            let picks = mmr(&rel, k, lambda, |a, b| ((a * 7 + b * 7) % 5) as f32 / 5.0);
            prop_assert_eq!(picks.len(), k.min(rel.len()));
            let mut s = picks.clone();
            s.sort();
            s.dedup();
            prop_assert_eq!(s.len(), picks.len());
            prop_assert!(picks.iter().all(|&i| i < rel.len()));
        }

        #[test]
        fn lambda_one_is_relevance_order(rel in proptest::collection::vec(0.0f32..10.0, 0..30)) {
            let picks = mmr(&rel, rel.len(), 1.0, |_, _| 1.0);
            let mut want: Vec<usize> = (0..rel.len()).collect();
            want.sort_by(|&a, &b| rel[b].total_cmp(&rel[a]).then(a.cmp(&b)));
            prop_assert_eq!(picks, want);
        }
    }
}
