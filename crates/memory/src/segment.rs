//! Segmentation (§3.3): consecutive turns of one session are related by the MAX of three
//! signals — tag overlap (intersection over the smaller set), embedding similarity ×0.9 and
//! keyword Jaccard ×0.8 — so each can only lift, never dilute. Below 0.5 a new segment starts;
//! so it does past the size cap (20 turns) or a time gap (12 h). Turns whose first (most
//! specific) tags agree always stay together. A segment that closes is merged back into the
//! most related earlier segment of its session at 0.35.
//!
//! Every decision depends only on a pair of consecutive turns and the segment in progress, so
//! segmenting a session in pieces gives the segments of one pass.
use std::collections::HashMap;

use chrono::Duration;
use serde::{Deserialize, Serialize};

use crate::model::TaggedTurn;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SegmentConfig {
    /// Consecutive turns less related than this are split.
    pub split_below: f32,
    /// A closed segment joins the group of an earlier one at least this related.
    pub merge_back: f32,
    /// Turns per segment, at most.
    pub max_turns: usize,
    /// A gap between turns longer than this (seconds) splits.
    pub max_gap_secs: i64,
    /// Discount of the embedding signal.
    pub embedding_weight: f32,
    /// Discount of the keyword signal.
    pub keyword_weight: f32,
}

impl Default for SegmentConfig {
    fn default() -> Self {
        SegmentConfig {
            split_below: 0.5,
            merge_back: 0.35,
            max_turns: 20,
            max_gap_secs: 12 * 3600,
            embedding_weight: 0.9,
            keyword_weight: 0.8,
        }
    }
}

/// Intersection over the smaller set (0 when either is empty).
pub fn tag_overlap(a: &[String], b: &[String]) -> f32 {
    let small = a.len().min(b.len());
    if small == 0 {
        return 0.0;
    }
    let shared = a.iter().filter(|t| b.contains(t)).count();
    shared as f32 / small as f32
}

/// Jaccard overlap of two sorted, deduplicated keyword lists.
pub fn jaccard(a: &[String], b: &[String]) -> f32 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    shared as f32 / (a.len() + b.len() - shared) as f32
}

/// What relatedness compares: tags, keywords, a vector.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Features {
    pub tags: Vec<String>,
    pub keywords: Vec<String>,
    pub vector: Option<Vec<f32>>,
}

impl Features {
    pub fn of(t: &TaggedTurn) -> Features {
        Features { tags: t.tags.clone(), keywords: t.keywords.clone(), vector: t.vector.clone() }
    }
}

/// The MAX of the three signals.
pub fn relatedness(a: &Features, b: &Features, cfg: &SegmentConfig) -> f32 {
    let tags = tag_overlap(&a.tags, &b.tags);
    let emb = match (&a.vector, &b.vector) {
        (Some(x), Some(y)) => memex_rank::cosine(x, y).max(0.0) * cfg.embedding_weight,
        _ => 0.0,
    };
    let kw = jaccard(&a.keywords, &b.keywords) * cfg.keyword_weight;
    tags.max(emb).max(kw)
}

/// Whether `next` starts a new segment after `prev`, in a segment of `len` turns so far.
pub fn splits(prev: &TaggedTurn, next: &TaggedTurn, len: usize, cfg: &SegmentConfig) -> bool {
    if len >= cfg.max_turns {
        return true;
    }
    if next.turn.start - prev.turn.end > Duration::seconds(cfg.max_gap_secs) {
        return true;
    }
    if let (Some(a), Some(b)) = (prev.tags.first(), next.tags.first())
        && a == b
    {
        return false;
    }
    relatedness(&Features::of(prev), &Features::of(next), cfg) < cfg.split_below
}

/// Groups consecutive turns into segments: the index ranges of `turns`, in order.
pub fn segment_ranges(turns: &[TaggedTurn], cfg: &SegmentConfig) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..turns.len() {
        if splits(&turns[i - 1], &turns[i], i - start, cfg) {
            out.push(start..i);
            start = i;
        }
    }
    if !turns.is_empty() {
        out.push(start..turns.len());
    }
    out
}

/// A segment's tags: every tag of its turns by how many turns carry it, ties to the one met
/// first (turn tags come most specific first).
pub fn segment_tags(turns: &[TaggedTurn]) -> Vec<String> {
    let mut count: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut order = 0;
    for t in turns {
        for tag in &t.tags {
            let e = count.entry(tag).or_insert((0, order));
            e.0 += 1;
            order += 1;
        }
    }
    let mut tags: Vec<(&str, (usize, usize))> = count.into_iter().collect();
    tags.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
    tags.into_iter().map(|(t, _)| t.to_owned()).collect()
}

/// A segment's features: its tags (the first `max_tags`), the union of its keywords and the mean
/// of its turns' vectors.
pub fn segment_features(turns: &[TaggedTurn], max_tags: usize) -> Features {
    let mut tags = segment_tags(turns);
    tags.truncate(max_tags);
    let mut keywords: Vec<String> = turns.iter().flat_map(|t| t.keywords.iter().cloned()).collect();
    keywords.sort();
    keywords.dedup();
    let vectors: Vec<&Vec<f32>> = turns.iter().filter_map(|t| t.vector.as_ref()).collect();
    let vector = vectors.first().map(|v0| {
        let mut mean = vec![0.0f32; v0.len()];
        for v in &vectors {
            for (m, x) in mean.iter_mut().zip(v.iter()) {
                *m += x;
            }
        }
        let n = vectors.len() as f32;
        mean.iter_mut().for_each(|m| *m /= n);
        mean
    });
    Features { tags, keywords, vector }
}

/// The group a closed segment joins: the most related earlier segment's group at or above the
/// merge-back threshold (ties to the earliest), else its own. `earlier` is (group, features) in
/// session order.
pub fn merge_back(new_first_seq: u64, new: &Features, earlier: &[(u64, Features)], cfg: &SegmentConfig) -> u64 {
    let mut best: Option<(f32, u64)> = None;
    for (group, f) in earlier {
        let r = relatedness(new, f, cfg);
        if r >= cfg.merge_back && best.is_none_or(|(b, _)| r > b) {
            best = Some((r, *group));
        }
    }
    best.map_or(new_first_seq, |(_, g)| g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SeqSpan, Turn};
    use chrono::{TimeZone, Utc};

    fn turn(seq: u64, hour: i64, tags: &[&str], kw: &[&str]) -> TaggedTurn {
        let at = Utc.timestamp_opt(1_700_000_000 + hour * 3600, 0).single().expect("a time");
        TaggedTurn {
            turn: Turn { span: SeqSpan::one(seq), start: at, end: at, parts: vec![], from_user: true, calls: vec![] },
            tags: tags.iter().map(|s| s.to_string()).collect(),
            keywords: kw.iter().map(|s| s.to_string()).collect(),
            vector: None,
        }
    }

    #[test]
    fn signals_lift_and_never_dilute() {
        let cfg = SegmentConfig::default();
        let a = Features { tags: vec!["x".into(), "y".into()], keywords: vec![], vector: Some(vec![1.0, 0.0]) };
        let b = Features { tags: vec!["y".into()], keywords: vec![], vector: Some(vec![0.0, 1.0]) };
        assert_eq!(relatedness(&a, &b, &cfg), 1.0);
        let c = Features { tags: vec!["z".into()], keywords: vec![], vector: Some(vec![1.0, 0.0]) };
        assert!((relatedness(&a, &c, &cfg) - 0.9).abs() < 1e-6);
        assert_eq!(jaccard(&["a".into(), "b".into()], &["b".into(), "c".into()]), 1.0 / 3.0);
    }

    #[test]
    fn splits_at_topic_changes_gaps_and_the_cap() {
        let cfg = SegmentConfig { max_turns: 3, ..SegmentConfig::default() };
        let turns = vec![
            turn(1, 0, &["parser"], &["pars"]),
            turn(2, 0, &["parser", "lexer"], &["lex"]),
            turn(3, 0, &["deploy"], &["helm"]),
            turn(4, 0, &["deploy"], &["helm"]),
            turn(5, 20, &["deploy"], &["helm"]),
            turn(6, 20, &["deploy"], &["helm"]),
            turn(7, 20, &["deploy"], &["helm"]),
            turn(8, 20, &["deploy"], &["helm"]),
        ];
        let r = segment_ranges(&turns, &cfg);
        assert_eq!(r, vec![0..2, 2..4, 4..7, 7..8]);
        // Pieces give the segments of one pass.
        let mut pieces = segment_ranges(&turns[..2], &cfg);
        assert_eq!(pieces.pop(), Some(0..2));
    }

    #[test]
    fn merge_back_joins_the_most_related_earlier_group() {
        let cfg = SegmentConfig::default();
        let f = |tags: &[&str]| Features { tags: tags.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        let earlier = vec![(1, f(&["a", "b", "c"])), (9, f(&["d", "e"]))];
        assert_eq!(merge_back(20, &f(&["e", "z"]), &earlier, &cfg), 9);
        assert_eq!(merge_back(20, &f(&["q"]), &earlier, &cfg), 20);
    }
}
