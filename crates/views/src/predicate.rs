//! Ranked predicates for the VCC adaptive view: BM25 over a chain's own blocks, and blocks scored
//! elsewhere (the semantic predicate: the search index ranks a session's events by their
//! embeddings and hands the scores in). Both keep the top k blocks; the view sorts them back into
//! conversation order and shows each with its pointer.

use std::collections::{HashMap, HashSet};

use memex_rank::{Bm25Doc, Bm25Params, TermCounts, bm25, query_terms, tokenize};
use memex_vcc::{Candidate, Hit, Predicate};

/// BM25 with the chain's searchable blocks as the corpus: the `top_k` best blocks that share a
/// term with the query, each showing the lines that contain a query term.
#[derive(Debug, Clone)]
pub struct Bm25Blocks {
    terms: Vec<String>,
    term_set: HashSet<String>,
    top_k: usize,
    params: Bm25Params,
}

impl Bm25Blocks {
    /// `None` when the query has no searchable term (punctuation only) or `top_k` is 0.
    pub fn new(query: &str, top_k: usize) -> Option<Bm25Blocks> {
        let terms = query_terms(query);
        (!terms.is_empty() && top_k > 0).then(|| Bm25Blocks {
            term_set: terms.iter().cloned().collect(),
            terms,
            top_k,
            params: Bm25Params::default(),
        })
    }
}

impl Predicate for Bm25Blocks {
    fn select(&self, candidates: &[Candidate<'_>]) -> Vec<Hit> {
        // The chain's blocks are the corpus; best first, ties in block order.
        let counts: Vec<TermCounts> = candidates.iter().map(|c| TermCounts::of(c.text())).collect();
        let docs: Vec<Bm25Doc<'_>> = counts.iter().map(|own| Bm25Doc { own, context: &[] }).collect();
        bm25(&docs, &self.terms, self.params, self.top_k)
            .into_iter()
            .map(|(i, score)| {
                let c = &candidates[i];
                let lines = c
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| tokenize(l).iter().any(|t| self.term_set.contains(t)))
                    .map(|(i, _)| i as u32)
                    .collect();
                Hit { block: c.block, lines, score: Some(f64::from(score)) }
            })
            .collect()
    }
}

/// Blocks whose scores were computed elsewhere, by block index: the `top_k` best that are among
/// the candidates (a role filter may have removed some). Shows no lines, only the pointers.
#[derive(Debug, Clone, Default)]
pub struct ScoredBlocks {
    pub scores: HashMap<usize, f64>,
    pub top_k: usize,
}

impl Predicate for ScoredBlocks {
    fn select(&self, candidates: &[Candidate<'_>]) -> Vec<Hit> {
        let scored = candidates.iter().filter_map(|c| Some((c, *self.scores.get(&c.block)?)));
        top_k(scored, self.top_k)
            .into_iter()
            .map(|(c, score)| Hit { block: c.block, lines: Vec::new(), score: Some(score) })
            .collect()
    }
}

/// The `k` best, by score and then by position (a total order: same input, same selection).
fn top_k<'c, 'a>(scored: impl Iterator<Item = (&'c Candidate<'a>, f64)>, k: usize) -> Vec<(&'c Candidate<'a>, f64)> {
    let mut all: Vec<(&Candidate<'_>, f64)> = scored.collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.block.cmp(&b.0.block)));
    all.truncate(k);
    all
}

#[cfg(test)]
mod tests {
    use memex_vcc::{CompileOptions, InputFormat, compile_trace};

    use super::*;

    fn trace(texts: &[&str]) -> memex_vcc::CompiledTrace {
        let jsonl: String = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let kind = if i % 2 == 0 { "user_message" } else { "assistant_message" };
                format!("{{\"session_id\":\"s\",\"seq\":{},\"kind\":\"{kind}\",\"content\":{:?}}}\n", i + 1, t)
            })
            .collect();
        compile_trace(jsonl.as_bytes(), "t", CompileOptions { format: InputFormat::Memex, strict: false })
            .expect("memex events compile")
    }

    #[test]
    fn bm25_keeps_the_best_blocks_and_the_lines_with_query_terms() {
        let t = trace(&[
            "please fix the build",
            "The build failed.\nlinker error: undefined symbol foo\nretrying",
            "what is the weather",
            "sunny, no linker involved",
        ]);
        let chain = &t.chains()[0];
        let p = Bm25Blocks::new("linker error", 1).expect("query has terms");
        let hits = chain.adaptive_view(&p).hits;
        assert_eq!(hits.len(), 1, "{hits:?}");
        let text = chain.candidates().iter().find(|c| c.block == hits[0].block).map(|c| c.text()).unwrap_or("");
        assert!(text.contains("undefined symbol"), "{text}");
        assert_eq!(hits[0].lines, vec![1], "only the line with a query term");
        // k = 2 also takes the other block that mentions the linker, and nothing without a match.
        let hits = chain.adaptive_view(&Bm25Blocks::new("linker error", 10).expect("terms")).hits;
        assert_eq!(hits.len(), 2, "{hits:?}");
        assert!(Bm25Blocks::new("?! --", 3).is_none(), "no term: no predicate");
        assert!(Bm25Blocks::new("linker", 0).is_none(), "k = 0: no predicate");
        // A query of stopwords only searches for them (query_terms' rule).
        assert!(Bm25Blocks::new("the", 3).is_some());
    }

    #[test]
    fn scored_blocks_take_the_top_k_in_a_total_order() {
        let t = trace(&["a", "b", "c", "d"]);
        let chain = &t.chains()[0];
        let blocks: Vec<usize> = chain.candidates().iter().map(|c| c.block).collect();
        assert!(blocks.len() >= 4, "{blocks:?}");
        let scores = HashMap::from([(blocks[0], 0.5), (blocks[1], 0.9), (blocks[2], 0.5), (9999, 1.0)]);
        let hits = ScoredBlocks { scores, top_k: 2 }.select(&chain.candidates());
        let picked: Vec<usize> = hits.iter().map(|h| h.block).collect();
        // 0.9 first, then the tie at 0.5 broken by position; the unknown block is ignored.
        assert_eq!(picked, vec![blocks[1], blocks[0]]);
        assert!(hits.iter().all(|h| h.lines.is_empty()));
    }
}
