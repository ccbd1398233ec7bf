//! A lexical scan: BM25 over events at hand, each scored on its own text and — at a lower weight —
//! the text of the events just before it (a tool result is found by what its call and the
//! reasoning before the call said). It is the context engine's search when no search index is
//! plugged in; an index answers the same question without looking at every event.
//!
//! An event's words are counted once ([`WordCounts::of`]; events never change, so the adapter can
//! keep the counts) and each scan only looks its query terms up in them.

/// Bytes of one text that are counted (events keep at most an 8 KiB excerpt of a tool output).
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

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(h: u64, b: u8) -> u64 {
    (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
}

/// The hash a lower-cased word is counted under (64-bit FNV-1a of its UTF-8).
pub fn term_hash(term: &str) -> u64 {
    let mut h = FNV_OFFSET;
    for c in term.chars().flat_map(char::to_lowercase) {
        let mut b = [0u8; 4];
        for &x in c.encode_utf8(&mut b).as_bytes() {
            h = fnv(h, x);
        }
    }
    h
}

/// The words of one text: the hashes of its lower-cased words (split on anything but letters,
/// digits and `_`) and of the `_`-separated parts of words that have them, with their counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WordCounts {
    /// (hash, count), sorted by hash.
    words: Vec<(u64, u32)>,
    /// Words in the text.
    len: u32,
}

impl WordCounts {
    /// Counts the words of `text` (its first 16 KiB).
    pub fn of(text: &str) -> WordCounts {
        let mut end = text.len().min(MAX_SCAN_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut hashes: Vec<u64> = Vec::new();
        let mut len = 0u32;
        for word in text[..end].split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if word.is_empty() {
                continue;
            }
            len += 1;
            if word.is_ascii() {
                let mut h = FNV_OFFSET;
                let mut part = FNV_OFFSET;
                let mut part_len = 0usize;
                let split = word.contains('_');
                for b in word.bytes() {
                    let b = b.to_ascii_lowercase();
                    h = fnv(h, b);
                    if split {
                        if b == b'_' {
                            if part_len > 0 {
                                hashes.push(part);
                            }
                            part = FNV_OFFSET;
                            part_len = 0;
                        } else {
                            part = fnv(part, b);
                            part_len += 1;
                        }
                    }
                }
                hashes.push(h);
                if split && part_len > 0 {
                    hashes.push(part);
                }
            } else {
                hashes.push(term_hash(word));
                if word.contains('_') {
                    hashes.extend(word.split('_').filter(|p| !p.is_empty()).map(term_hash));
                }
            }
        }
        hashes.sort_unstable();
        let mut words: Vec<(u64, u32)> = Vec::new();
        for h in hashes {
            match words.last_mut() {
                Some((last, n)) if *last == h => *n += 1,
                _ => words.push((h, 1)),
            }
        }
        words.shrink_to_fit();
        WordCounts { words, len }
    }

    /// How often the word with this [`term_hash`] occurs.
    pub fn count(&self, hash: u64) -> u32 {
        self.words.binary_search_by_key(&hash, |(h, _)| *h).map_or(0, |i| self.words[i].1)
    }

    /// Words in the text.
    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Approximate memory held, in bytes (for cache weights).
    pub fn weight(&self) -> usize {
        std::mem::size_of::<Self>() + self.words.len() * std::mem::size_of::<(u64, u32)>()
    }
}

/// One scanned event: its own words and the words of what came just before it.
#[derive(Debug, Clone, Copy)]
pub struct ScanDoc<'a> {
    pub own: &'a WordCounts,
    pub context: &'a [&'a WordCounts],
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

/// BM25 scores of `docs` for `terms` (as [`scan_terms`] gives them): the `limit` best documents
/// with a positive score, best first, ties by position. Deterministic.
pub fn bm25_scan(docs: &[ScanDoc<'_>], terms: &[String], params: ScanParams, limit: usize) -> Vec<(usize, f32)> {
    if docs.is_empty() || terms.is_empty() || limit == 0 {
        return Vec::new();
    }
    let hashes: Vec<u64> = terms.iter().map(|t| term_hash(t)).collect();
    let w = params.context_weight;
    let mut tf: Vec<f64> = Vec::with_capacity(docs.len() * hashes.len());
    let mut lens: Vec<f64> = Vec::with_capacity(docs.len());
    let mut df = vec![0usize; hashes.len()];
    for d in docs {
        let mut len = f64::from(d.own.len());
        for c in d.context {
            len += w * f64::from(c.len());
        }
        lens.push(len);
        for (i, h) in hashes.iter().enumerate() {
            let mut n = f64::from(d.own.count(*h));
            for c in d.context {
                n += w * f64::from(c.count(*h));
            }
            if n > 0.0 {
                df[i] += 1;
            }
            tf.push(n);
        }
    }
    let n = docs.len() as f64;
    let avg = (lens.iter().sum::<f64>() / n).max(1.0);
    let idf: Vec<f64> = df.iter().map(|&d| (1.0 + (n - d as f64 + 0.5) / (d as f64 + 0.5)).ln()).collect();
    let mut scored: Vec<(usize, f64)> = tf
        .chunks(hashes.len())
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
        let other = WordCounts::of("<output>\nrunning the test suite for pkg, release notes updated\n</output>");
        let ls = WordCounts::of("ls");
        let thought = WordCounts::of("THOUGHT: record the checksum of the release tarball");
        let call = WordCounts::of("sha256sum dist/pkg-1.2.3.tar.gz");
        let result = WordCounts::of("<output>\n9f86d081884c7d65  dist/pkg-1.2.3.tar.gz\n</output>");
        let docs = [
            ScanDoc { own: &other, context: &[&ls] },
            ScanDoc { own: &thought, context: &[] },
            ScanDoc { own: &call, context: &[&thought] },
            ScanDoc { own: &result, context: &[&thought, &call] },
        ];
        let q = terms("Which checksum did sha256sum print for the release tarball?");
        let ranked: Vec<usize> = bm25_scan(&docs, &q, ScanParams::default(), 10).iter().map(|h| h.0).collect();
        assert!(ranked.contains(&3), "{ranked:?}");
        assert!(ranked.iter().position(|&i| i == 3) < ranked.iter().position(|&i| i == 0));
    }

    #[test]
    fn words_are_counted_case_blind_with_their_parts() {
        let w = WordCounts::of("Test_Prism_roundtrip failed; test_prism_ROUNDTRIP again. Ünïcode_Wörd");
        assert_eq!(w.len(), 5);
        assert_eq!(w.count(term_hash("test_prism_roundtrip")), 2);
        assert_eq!(w.count(term_hash("prism")), 2);
        assert_eq!(w.count(term_hash("failed")), 1);
        assert_eq!(w.count(term_hash("wörd")), 1);
        assert_eq!(w.count(term_hash("ünïcode_wörd")), 1);
        assert_eq!(w.count(term_hash("absent")), 0);
        // Long multi-byte text is cut on a character boundary.
        assert_eq!(WordCounts::of(&"é".repeat(MAX_SCAN_BYTES)).len(), 1);
    }

    #[test]
    fn underscore_parts_match_and_scores_are_deterministic() {
        assert_eq!(terms("test_prism_roundtrip"), vec!["test_prism_roundtrip", "test", "prism", "roundtrip"]);
        let (a, ctx) =
            (WordCounts::of("./sierra/onyx/settings_0a1b.cfg"), WordCounts::of("find . -name '*.cfg' | grep sierra"));
        let (b, c) = (WordCounts::of("setup.cfg"), WordCounts::of("nothing here"));
        let docs = [
            ScanDoc { own: &a, context: &[&ctx] },
            ScanDoc { own: &b, context: &[] },
            ScanDoc { own: &c, context: &[] },
        ];
        let q = terms("Which .cfg settings file under sierra did the command report?");
        let hits = bm25_scan(&docs, &q, ScanParams::default(), 10);
        assert_eq!(hits.first().map(|h| h.0), Some(0));
        assert!(hits.iter().all(|h| h.0 != 2), "no match, no hit");
        assert_eq!(hits, bm25_scan(&docs, &q, ScanParams::default(), 10));
        assert!(bm25_scan(&docs, &[], ScanParams::default(), 10).is_empty());
    }
}
