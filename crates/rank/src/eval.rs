//! Retrieval metrics of the external benchmarks, exactly as their official code computes them, so
//! memex's figures are comparable with the published anchors (notes/benchmarks.md).

use std::collections::HashSet;
use std::hash::Hash;

/// LoCoMo's "recall accuracy" at k: the share of the gold ids found among the first `k` retrieved.
/// A question without evidence scores 1, as in the official `eval_question_answering`.
pub fn recall_share<T: Eq + Hash>(retrieved: &[T], gold: &[T], k: usize) -> f64 {
    if gold.is_empty() {
        return 1.0;
    }
    let top: HashSet<&T> = retrieved.iter().take(k).collect();
    gold.iter().filter(|g| top.contains(g)).count() as f64 / gold.len() as f64
}

/// 1 if any gold id is among the first `k` (0 when there is no gold).
pub fn recall_any<T: Eq + Hash>(retrieved: &[T], gold: &[T], k: usize) -> f64 {
    let top: HashSet<&T> = retrieved.iter().take(k).collect();
    f64::from(u8::from(gold.iter().any(|g| top.contains(g))))
}

/// 1 if every gold id is among the first `k` — LongMemEval's "Recall" column. Like Python's
/// `all([])`, an empty gold set scores 1.
pub fn recall_all<T: Eq + Hash>(retrieved: &[T], gold: &[T], k: usize) -> f64 {
    let top: HashSet<&T> = retrieved.iter().take(k).collect();
    f64::from(u8::from(gold.iter().all(|g| top.contains(g))))
}

/// LongMemEval's DCG: `rel[0] + Σ_{i≥1} rel[i] / log2(i + 1)` over the first `k` — ranks 1 and 2
/// both weigh 1 (not the usual `1 / log2(i + 2)`).
fn dcg(rel: &[f64], k: usize) -> f64 {
    rel.iter().take(k).enumerate().map(|(i, r)| if i == 0 { *r } else { r / ((i + 1) as f64).log2() }).sum()
}

/// LongMemEval's `ndcg_any@k` with binary relevance; the ideal ranking puts all `relevant_in_corpus`
/// relevant documents first. 0 when nothing in the corpus is relevant.
pub fn ndcg_any<T: Eq + Hash>(retrieved: &[T], gold: &[T], relevant_in_corpus: usize, k: usize) -> f64 {
    let gold: HashSet<&T> = gold.iter().collect();
    let actual: Vec<f64> = retrieved.iter().map(|r| f64::from(u8::from(gold.contains(r)))).collect();
    let ideal = vec![1.0; relevant_in_corpus];
    let idcg = dcg(&ideal, k);
    if idcg == 0.0 { 0.0 } else { dcg(&actual, k) / idcg }
}

/// Sessions in order of first appearance in a turn ranking (LongMemEval's turn→session scoring).
pub fn first_appearance<T: Eq + Hash + Clone>(ranked: &[T]) -> Vec<T> {
    let mut seen = HashSet::new();
    ranked.iter().filter(|x| seen.insert((*x).clone())).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locomo_recall_gives_partial_credit() {
        let got = ["D1:1", "D1:2", "D2:5"];
        assert_eq!(recall_share(&got, &["D1:2", "D3:1"], 3), 0.5);
        assert_eq!(recall_share(&got, &["D2:5"], 2), 0.0);
        assert_eq!(recall_share(&got, &[], 1), 1.0);
    }

    #[test]
    fn any_all_and_the_empty_gold_quirk() {
        let got = [1, 2, 3, 4];
        assert_eq!((recall_any(&got, &[3, 9], 3), recall_all(&got, &[3, 9], 3)), (1.0, 0.0));
        assert_eq!((recall_any(&got, &[1, 2], 2), recall_all(&got, &[1, 2], 2)), (1.0, 1.0));
        assert_eq!((recall_any::<i32>(&got, &[], 2), recall_all::<i32>(&got, &[], 2)), (0.0, 1.0));
    }

    #[test]
    fn ndcg_matches_longmemeval_code() {
        // rankings [x, g] with one relevant doc: dcg = 0 + 1/log2(2) = 1, idcg = 1 → 1.0.
        assert_eq!(ndcg_any(&["x", "g"], &["g"], 1, 10), 1.0);
        // relevant at rank 3: 1/log2(3).
        assert!((ndcg_any(&["x", "y", "g"], &["g"], 1, 10) - 1.0 / 3f64.log2()).abs() < 1e-12);
        // Two relevant, one found at rank 1: 1 / (1 + 1).
        assert_eq!(ndcg_any(&["g", "x"], &["g", "h"], 2, 10), 0.5);
        assert_eq!(ndcg_any(&["g"], &["g"], 0, 10), 0.0);
        assert_eq!(ndcg_any(&["x", "g"], &["g"], 1, 1), 0.0);
    }

    #[test]
    fn sessions_by_first_appearance() {
        assert_eq!(first_appearance(&["s1", "s2", "s1", "s3", "s2"]), vec!["s1", "s2", "s3"]);
    }
}
