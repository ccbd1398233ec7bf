//! Topics: a namespace's tags made canonical, split where over-broad, and the greedy set cover
//! whose summaries are the memory's table of contents (§3.2, §3.3).
//!
//! Everything here is a function of the set of segments, never of the order they arrived in:
//! aliases are connected components (same stems; one edit apart; near-identical vectors) named by
//! their most used member, so a namespace rebuilt from its events gets the same topics.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicConfig {
    /// A tag on at least this many turns…
    pub broad_min_turns: usize,
    /// …and this share of all turns is split into subtopics.
    pub broad_share: f64,
    /// Subtopics of one broad tag, at most.
    pub max_subtopics: usize,
    /// Segments a co-tag needs to become a subtopic.
    pub subtopic_min_segments: usize,
    /// Tags whose vectors are at least this similar are one topic.
    pub alias_cosine: f32,
    /// The most used tags compared by vector (pairwise).
    pub alias_vector_pool: usize,
    /// A tag on fewer segments is a topic only when it is some segment's primary tag (a passing
    /// mention is not a subject).
    pub min_segments: usize,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            broad_min_turns: 15,
            broad_share: 0.15,
            max_subtopics: 8,
            subtopic_min_segments: 2,
            alias_cosine: 0.92,
            alias_vector_pool: 300,
            min_segments: 2,
        }
    }
}

/// A segment as topics see it.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentTags {
    /// Orders sessions for ties (any stable id).
    pub session: u128,
    pub turns: usize,
    /// Its tags, most used first.
    pub tags: Vec<String>,
    pub primary: Option<String>,
}

/// A topic: a canonical tag (or `tag/co-tag` for a subtopic of an over-broad tag), what it
/// covers and whether it is in the cover.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topic {
    pub tag: String,
    /// The spellings that mean it (itself included), sorted.
    pub aliases: Vec<String>,
    /// For a subtopic: the broad topic it splits, and the co-tag's aliases a member also carries.
    pub parent: Option<String>,
    pub with: Vec<String>,
    /// Indexes of its segments in the input, ascending.
    pub segments: Vec<usize>,
    pub turns: usize,
    pub sessions: usize,
    /// Over-broad: split into subtopics, kept out of the cover (its subtopics stand in).
    pub broad: bool,
    pub in_cover: bool,
}

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[ra.max(rb)] = ra.min(rb);
        }
    }
}

/// The stems of a tag's words: `5k-running` and `5k-run` share `5k run`.
fn stem_key(tag: &str) -> String {
    memex_rank::tokenize(&tag.replace(['-', '/'], " ")).join(" ")
}

/// One-deletion variants of a tag, for edit distance one (a shared variant, or one tag a
/// variant of the other).
fn deletions(tag: &str) -> Vec<String> {
    let chars: Vec<char> = tag.chars().collect();
    (0..chars.len()).map(|i| chars.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, c)| c).collect()).collect()
}

/// Only plain words are merged by spelling: not file names, not anything with digits (`test_a.py`
/// and `test_b.py`, `e0308` and `e0309` are different things), and only when they begin alike.
fn fuzzy_ok(tag: &str) -> bool {
    tag.len() >= 7 && !tag.contains('.') && !tag.chars().any(|c| c.is_ascii_digit())
}

/// Alias classes of `tags` (distinct): a class id per tag.
pub fn alias_classes(tags: &[String], vectors: Option<&[Option<Vec<f32>>]>, cfg: &TopicConfig) -> Vec<usize> {
    let mut uf = UnionFind((0..tags.len()).collect());
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for (i, t) in tags.iter().enumerate() {
        if t.contains('.') {
            continue; // file names are exact
        }
        let k = stem_key(t);
        if k.is_empty() {
            continue;
        }
        match by_key.get(&k) {
            Some(&j) => uf.union(i, j),
            None => {
                by_key.insert(k, i);
            }
        }
    }
    let mut by_del: HashMap<String, usize> = HashMap::new();
    let index: HashMap<&str, usize> = tags.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    for (i, t) in tags.iter().enumerate() {
        if !fuzzy_ok(t) {
            continue;
        }
        for d in deletions(t) {
            if d.get(..4) != t.get(..4) {
                continue;
            }
            if let Some(&j) = index.get(d.as_str())
                && fuzzy_ok(&tags[j])
            {
                uf.union(i, j);
            }
            match by_del.get(&d) {
                Some(&j) => uf.union(i, j),
                None => {
                    by_del.insert(d, i);
                }
            }
        }
    }
    if let Some(vectors) = vectors {
        let pool: Vec<usize> = (0..tags.len().min(cfg.alias_vector_pool)).collect();
        for a in 0..pool.len() {
            let Some(va) = vectors.get(pool[a]).and_then(Option::as_ref) else { continue };
            for &b in &pool[a + 1..] {
                if let Some(vb) = vectors.get(b).and_then(Option::as_ref)
                    && !tags[pool[a]].contains('.')
                    && !tags[b].contains('.')
                    && memex_rank::cosine(va, vb) >= cfg.alias_cosine
                {
                    uf.union(pool[a], b);
                }
            }
        }
    }
    (0..tags.len()).map(|i| uf.find(i)).collect()
}

/// The topics of a namespace's segments. `vectors`, when given, are of the distinct tags in the
/// order [`distinct_tags`] returns them.
pub fn build_topics(segs: &[SegmentTags], vectors: Option<&[Option<Vec<f32>>]>, cfg: &TopicConfig) -> Vec<Topic> {
    let tags = distinct_tags(segs);
    let class = alias_classes(&tags, vectors, cfg);
    // Segments and turns per spelling.
    let tag_index: HashMap<&str, usize> = tags.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    let mut members: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new(); // class → segments
    for (si, s) in segs.iter().enumerate() {
        for t in &s.tags {
            if let Some(&ti) = tag_index.get(t.as_str()) {
                members.entry(class[ti]).or_default().insert(si);
            }
        }
    }
    let mut spellings: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (ti, c) in class.iter().enumerate() {
        spellings.entry(*c).or_default().push(ti);
    }
    let uses: Vec<usize> = {
        let mut u = vec![0usize; tags.len()];
        for s in segs {
            for t in &s.tags {
                if let Some(&ti) = tag_index.get(t.as_str()) {
                    u[ti] += 1;
                }
            }
        }
        u
    };
    let total_turns: usize = segs.iter().map(|s| s.turns).sum();
    let mut topics: Vec<Topic> = Vec::new();
    let mut class_name: BTreeMap<usize, String> = BTreeMap::new();
    for (c, sp) in &spellings {
        // Named by the most used spelling; ties to the shorter, then the first in order.
        let name = sp
            .iter()
            .min_by(|&&a, &&b| {
                uses[b].cmp(&uses[a]).then(tags[a].len().cmp(&tags[b].len())).then(tags[a].cmp(&tags[b]))
            })
            .map(|&i| tags[i].clone())
            .unwrap_or_default();
        class_name.insert(*c, name.clone());
        let segments: Vec<usize> = members.get(c).map(|m| m.iter().copied().collect()).unwrap_or_default();
        let primary =
            segments.iter().any(|&s| segs[s].primary.as_ref().is_some_and(|p| sp.iter().any(|&i| tags[i] == *p)));
        if segments.len() < cfg.min_segments && !primary {
            continue;
        }
        let mut aliases: Vec<String> = sp.iter().map(|&i| tags[i].clone()).collect();
        aliases.sort();
        topics.push(topic(name, aliases, None, Vec::new(), segments, segs));
    }
    // Over-broad topics split into subtopics by their most frequent co-topics.
    let broad: BTreeSet<String> = topics
        .iter()
        .filter(|t| t.turns >= cfg.broad_min_turns && (t.turns as f64) >= cfg.broad_share * total_turns as f64)
        .map(|t| t.tag.clone())
        .collect();
    let by_name: HashMap<String, (Vec<String>, BTreeSet<usize>)> =
        topics.iter().map(|t| (t.tag.clone(), (t.aliases.clone(), t.segments.iter().copied().collect()))).collect();
    let mut subtopics = Vec::new();
    for t in topics.iter_mut().filter(|t| broad.contains(&t.tag)) {
        t.broad = true;
        let mut co: BTreeMap<String, usize> = BTreeMap::new();
        for &si in &t.segments {
            let mut seen = BTreeSet::new();
            for tag in &segs[si].tags {
                if let Some(&ti) = tag_index.get(tag.as_str()) {
                    let name = &class_name[&class[ti]];
                    if *name != t.tag
                        && !broad.contains(name)
                        && by_name.contains_key(name)
                        && seen.insert(name.clone())
                    {
                        *co.entry(name.clone()).or_default() += 1;
                    }
                }
            }
        }
        let mut co: Vec<(String, usize)> = co.into_iter().filter(|(_, n)| *n >= cfg.subtopic_min_segments).collect();
        co.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (name, _) in co.into_iter().take(cfg.max_subtopics) {
            let Some((with, with_segs)) = by_name.get(&name) else { continue };
            let segments: Vec<usize> = t.segments.iter().copied().filter(|s| with_segs.contains(s)).collect();
            subtopics.push(topic(
                format!("{}/{}", t.tag, name),
                t.aliases.clone(),
                Some(t.tag.clone()),
                with.clone(),
                segments,
                segs,
            ));
        }
    }
    topics.extend(subtopics);
    topics.sort_by(|a, b| a.tag.cmp(&b.tag));
    let cover = greedy_cover(&topics, segs, &class_name, &class, &tag_index);
    for t in &mut topics {
        t.in_cover = cover.contains(&t.tag);
    }
    topics
}

fn topic(
    tag: String,
    aliases: Vec<String>,
    parent: Option<String>,
    with: Vec<String>,
    segments: Vec<usize>,
    segs: &[SegmentTags],
) -> Topic {
    let turns = segments.iter().map(|&i| segs[i].turns).sum();
    let sessions = segments.iter().map(|&i| segs[i].session).collect::<BTreeSet<_>>().len();
    Topic { tag, aliases, parent, with, segments, turns, sessions, broad: false, in_cover: false }
}

/// The distinct tags of the segments, most used first (ties by name): the order vectors are
/// given in and the vector pool is taken from.
pub fn distinct_tags(segs: &[SegmentTags]) -> Vec<String> {
    let mut uses: BTreeMap<&str, usize> = BTreeMap::new();
    for s in segs {
        for t in &s.tags {
            *uses.entry(t).or_default() += 1;
        }
    }
    let mut v: Vec<(&str, usize)> = uses.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.into_iter().map(|(t, _)| t.to_owned()).collect()
}

/// Greedy set cover (§3.3): the topic covering the most uncovered turns, until every tagged
/// turn is covered; broad topics stand aside for their subtopics; each segment's primary tag's
/// topic is always in (the primary-tag guarantee).
fn greedy_cover(
    topics: &[Topic],
    segs: &[SegmentTags],
    class_name: &BTreeMap<usize, String>,
    class: &[usize],
    tag_index: &HashMap<&str, usize>,
) -> BTreeSet<String> {
    let mut cover = BTreeSet::new();
    let mut covered = vec![false; segs.len()];
    for (si, s) in segs.iter().enumerate() {
        if let Some(p) = &s.primary
            && let Some(&ti) = tag_index.get(p.as_str())
        {
            let name = &class_name[&class[ti]];
            let is_broad = topics.iter().any(|t| t.tag == *name && t.broad);
            if !is_broad {
                cover.insert(name.clone());
                covered[si] = true;
            }
        }
    }
    for t in topics.iter().filter(|t| cover.contains(&t.tag)) {
        for &si in &t.segments {
            covered[si] = true;
        }
    }
    let candidates: Vec<&Topic> = topics.iter().filter(|t| !t.broad).collect();
    loop {
        let mut best: Option<(usize, &Topic)> = None;
        for t in &candidates {
            if cover.contains(&t.tag) {
                continue;
            }
            let gain: usize = t.segments.iter().filter(|&&s| !covered[s]).map(|&s| segs[s].turns.max(1)).sum();
            if gain > 0 && best.is_none_or(|(g, b)| gain > g || (gain == g && t.tag < b.tag)) {
                best = Some((gain, t));
            }
        }
        let Some((_, t)) = best else { break };
        cover.insert(t.tag.clone());
        for &s in &t.segments {
            covered[s] = true;
        }
    }
    // Segments carrying only broad tags are covered by the broad topic itself.
    for t in topics.iter().filter(|t| t.broad) {
        if t.segments.iter().any(|&s| !covered[s]) {
            cover.insert(t.tag.clone());
            for &s in &t.segments {
                covered[s] = true;
            }
        }
    }
    cover
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(session: u128, turns: usize, tags: &[&str]) -> SegmentTags {
        SegmentTags {
            session,
            turns,
            tags: tags.iter().map(|s| s.to_string()).collect(),
            primary: tags.first().map(|s| s.to_string()),
        }
    }

    #[test]
    fn aliases_join_by_stem_and_spelling_but_not_files() {
        let tags: Vec<String> =
            ["5k-run", "5k-running", "compaction", "compactoin", "test_a.py", "test_b.py", "reader", "header"]
                .map(String::from)
                .to_vec();
        let c = alias_classes(&tags, None, &TopicConfig::default());
        assert_eq!(c[0], c[1]);
        assert_eq!(c[2], c[3]);
        assert_ne!(c[4], c[5]);
        assert_ne!(c[6], c[7]);
    }

    #[test]
    fn topics_are_named_split_and_covered() {
        let mut segs =
            vec![seg(1, 2, &["compaction", "window"]), seg(1, 1, &["compactions"]), seg(2, 3, &["helm", "deploy"])];
        // "bash" on every turn is over-broad: split by what it co-occurs with.
        for i in 0..6 {
            segs.push(seg(3, 3, &["bash", if i % 2 == 0 { "deploy" } else { "pytest" }]));
        }
        let topics = build_topics(&segs, None, &TopicConfig::default());
        let names: Vec<&str> = topics.iter().map(|t| t.tag.as_str()).collect();
        assert!(names.contains(&"compaction") && !names.contains(&"compactions"), "{names:?}");
        let bash = topics.iter().find(|t| t.tag == "bash").expect("bash");
        assert!(bash.broad && !bash.in_cover);
        let sub = topics.iter().find(|t| t.tag == "bash/pytest").expect("a subtopic");
        assert_eq!(sub.segments.len(), 3);
        assert_eq!(sub.parent.as_deref(), Some("bash"));
        // Every segment is covered by some topic in the cover.
        for (i, _) in segs.iter().enumerate() {
            assert!(topics.iter().any(|t| t.in_cover && t.segments.contains(&i)), "segment {i} uncovered");
        }
        // The same set in another order gives the same topics.
        let mut rev = segs.clone();
        rev.reverse();
        let again = build_topics(&rev, None, &TopicConfig::default());
        let key = |ts: &[Topic]| ts.iter().map(|t| (t.tag.clone(), t.turns, t.in_cover)).collect::<Vec<_>>();
        assert_eq!(key(&topics), key(&again));
    }
}
