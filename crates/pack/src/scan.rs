//! A lexical scan: BM25 over events at hand, each scored on its own text and — at a lower weight —
//! the text of the events just before it (a tool result is found by what its call and the
//! reasoning before the call said). It is the context engine's search when no search index is
//! plugged in; an index answers the same question without reading every event.
use std::collections::HashMap;

/// Bytes of one text that are scanned (events keep at most an 8 KiB excerpt of a tool output).
const MAX_SCAN_BYTES: usize = 16 * 1024;

/// BM25 parameters of the scan.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScanParams {
    pub k1: f64,
    pub b: f64,
    /// Weight of the context (preceding events' text) against the event's own text.
    pub context_weight: f64,
}

impl Default for ScanParams {
    fn default() -> Self {
        ScanParams { k1: 1.2, b: 0.75, context_weight: 0.5 }
    }
}

/// One scanned event: its own text and the texts of what came just before it.
#[derive(Debug, Clone, Copy)]
pub struct ScanDoc<'a> {
    pub own: &'a str,
    pub context: &'a [&'a str],
}

/// The query's terms as the scan matches them: each term, and the parts of a term joined by `_`
/// (`test_parse_roundtrip` also matches `parse` and `roundtrip`), three characters or more.
pub fn scan_terms(terms: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in terms {
        let t = t.to_lowercase();
        let parts: Vec<String> = if t.contains('_') {
            t.split('_').filter(|p| p.chars().count() >= 3).map(str::to_owned).collect()
        } else {
            Vec::new()
        };
        for w in std::iter::once(t).chain(parts) {
            if !out.contains(&w) {
                out.push(w);
            }
        }
    }
    out
}

/// Counts of each query term in `text` (and its token count), matching whole words and the
/// `_`-joined parts of words.
fn count_terms(text: &str, index: &HashMap<&str, usize>, counts: &mut [f64], weight: f64, buf: &mut String) -> f64 {
    let text = if text.len() > MAX_SCAN_BYTES {
        let mut end = MAX_SCAN_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        &text[..end]
    } else {
        text
    };
    let mut len = 0.0;
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if word.is_empty() {
            continue;
        }
        len += 1.0;
        buf.clear();
        buf.extend(word.chars().flat_map(char::to_lowercase));
        if let Some(&i) = index.get(buf.as_str()) {
            counts[i] += weight;
        }
        if word.contains('_') {
            for part in buf.split('_') {
                if let Some(&i) = index.get(part) {
                    counts[i] += weight;
                }
            }
        }
    }
    len * weight
}

/// BM25 scores of `docs` for `terms` (as [`scan_terms`] gives them): the `limit` best documents
/// with a positive score, best first, ties by position. Deterministic.
pub fn bm25_scan(docs: &[ScanDoc<'_>], terms: &[String], params: ScanParams, limit: usize) -> Vec<(usize, f32)> {
    if docs.is_empty() || terms.is_empty() || limit == 0 {
        return Vec::new();
    }
    let index: HashMap<&str, usize> = terms.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    let mut buf = String::new();
    let mut tf: Vec<Vec<f64>> = Vec::with_capacity(docs.len());
    let mut lens: Vec<f64> = Vec::with_capacity(docs.len());
    let mut df = vec![0usize; terms.len()];
    for d in docs {
        let mut counts = vec![0.0; terms.len()];
        let mut len = count_terms(d.own, &index, &mut counts, 1.0, &mut buf);
        for c in d.context {
            len += count_terms(c, &index, &mut counts, params.context_weight, &mut buf);
        }
        for (i, c) in counts.iter().enumerate() {
            if *c > 0.0 {
                df[i] += 1;
            }
        }
        tf.push(counts);
        lens.push(len);
    }
    let n = docs.len() as f64;
    let avg = (lens.iter().sum::<f64>() / n).max(1.0);
    let idf: Vec<f64> = df.iter().map(|&d| (1.0 + (n - d as f64 + 0.5) / (d as f64 + 0.5)).ln()).collect();
    let mut scored: Vec<(usize, f64)> = tf
        .iter()
        .zip(&lens)
        .enumerate()
        .map(|(i, (counts, len))| {
            let norm = params.k1 * (1.0 - params.b + params.b * len / avg);
            let s: f64 = counts
                .iter()
                .zip(&idf)
                .filter(|(c, _)| **c > 0.0)
                .map(|(c, idf)| idf * c * (params.k1 + 1.0) / (c + norm))
                .sum();
            (i, s)
        })
        .filter(|(_, s)| *s > 0.0)
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(limit);
    scored.into_iter().map(|(i, s)| (i, s as f32)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(q: &str) -> Vec<String> {
        scan_terms(&crate::query_terms(&[q]))
    }

    #[test]
    fn a_result_is_found_by_its_call_and_the_reasoning_before_it() {
        let thought = "THOUGHT: record the checksum of the release tarball";
        let call = "sha256sum dist/pkg-1.2.3.tar.gz";
        let result = "<output>\n9f86d081884c7d65  dist/pkg-1.2.3.tar.gz\n</output>";
        let other = "<output>\nrunning the test suite for pkg, release notes updated\n</output>";
        let docs = [
            ScanDoc { own: other, context: &["ls"] },
            ScanDoc { own: thought, context: &[] },
            ScanDoc { own: call, context: &[thought] },
            ScanDoc { own: result, context: &[thought, call] },
        ];
        let hits = bm25_scan(
            &docs,
            &terms("Which checksum did sha256sum print for the release tarball?"),
            ScanParams::default(),
            10,
        );
        let ranked: Vec<usize> = hits.iter().map(|h| h.0).collect();
        assert!(ranked.contains(&3), "{ranked:?}");
        assert!(ranked.iter().position(|&i| i == 3) < ranked.iter().position(|&i| i == 0));
    }

    #[test]
    fn underscore_parts_match_and_scores_are_deterministic() {
        assert_eq!(terms("test_prism_roundtrip"), vec!["test_prism_roundtrip", "test", "prism", "roundtrip"]);
        let docs = [
            ScanDoc { own: "./sierra/onyx/settings_0a1b.cfg", context: &["find . -name '*.cfg' | grep sierra"] },
            ScanDoc { own: "setup.cfg", context: &[] },
            ScanDoc { own: "nothing here", context: &[] },
        ];
        let q = terms("Which .cfg settings file under sierra did the command report?");
        let a = bm25_scan(&docs, &q, ScanParams::default(), 10);
        assert_eq!(a.first().map(|h| h.0), Some(0));
        assert!(a.iter().all(|h| h.0 != 2), "no match, no hit");
        assert_eq!(a, bm25_scan(&docs, &q, ScanParams::default(), 10));
        assert!(bm25_scan(&docs, &[], ScanParams::default(), 10).is_empty());
        // Long multi-byte text is cut on a character boundary.
        let long = "é".repeat(MAX_SCAN_BYTES);
        assert!(bm25_scan(&[ScanDoc { own: &long, context: &[] }], &q, ScanParams::default(), 1).is_empty());
    }
}
