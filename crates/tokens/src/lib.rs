//! Token counting with the real BPE tokenizers of OpenAI models: `o200k_base` (GPT-4o and later;
//! the default) and `cl100k_base` (GPT-4, GPT-3.5).
//!
//! Budgets in memex are hard caps in *tokens*, so they are counted with the tokenizer the agent's
//! model uses, never estimated from bytes. The BPE ranks ship inside the `bpe-openai` crate and are
//! serialized at build time into the binary: nothing is fetched, at build or at run time. Its
//! counts are identical to tiktoken's (checked on 4,122 messages, 4.9 MB, of the SWE-bench
//! trajectories: 0 differences for either tokenizer) and it counts about 1.5–2× faster.
//!
//! **Architecture invariant:** pure — no I/O, no clock, no async. The first use of a tokenizer
//! deserializes its tables (tens of milliseconds); `Tokenizer::warm` does it ahead of time.

use std::fmt;
use std::str::FromStr;

/// Counts tokens. Implemented by [`Tokenizer`]; the pure cores (packing, compaction) take a
/// `&dyn TokenCounter` so adapters can put a cache in front of the tokenizer.
pub trait TokenCounter: Send + Sync {
    fn count(&self, text: &str) -> usize;

    /// `count(text)` when that is at most `limit`; otherwise some number above `limit`. For
    /// "does it fit?": a counter may stop early.
    fn count_up_to(&self, text: &str, _limit: usize) -> usize {
        self.count(text)
    }
}

/// A real tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// GPT-4o, o1, o3, o4 and later.
    #[default]
    O200kBase,
    /// GPT-4, GPT-3.5-turbo.
    Cl100kBase,
}

/// Pieces at most this long (bytes) have their counts kept per thread.
const MAX_CACHED_PIECE: usize = 48;
/// Pieces kept per thread and tokenizer before the table starts over.
const MAX_CACHED_PIECES: usize = 1 << 16;

thread_local! {
    /// Per tokenizer (by discriminant): piece → token count. FxHash: pieces are short and not
    /// adversarial to a per-thread table that starts over when full; SipHash cost a third of it.
    static PIECES: std::cell::RefCell<[rustc_hash::FxHashMap<String, u32>; 2]> = Default::default();
}

/// The tokenizer names accepted on the wire and in configuration.
pub const TOKENIZER_NAMES: [&str; 2] = ["o200k_base", "cl100k_base"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tokenizer {0:?}; expected one of o200k_base, cl100k_base")]
pub struct UnknownTokenizer(pub String);

impl Tokenizer {
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::O200kBase => "o200k_base",
            Tokenizer::Cl100kBase => "cl100k_base",
        }
    }

    fn bpe(self) -> &'static bpe_openai::Tokenizer {
        match self {
            Tokenizer::O200kBase => bpe_openai::o200k_base(),
            Tokenizer::Cl100kBase => bpe_openai::cl100k_base(),
        }
    }

    /// Loads the tables now rather than on the first count.
    pub fn warm(self) {
        let _ = self.bpe().count("warm");
    }

    /// The number of tokens `text` encodes to (no special tokens).
    ///
    /// The same as `bpe_openai::Tokenizer::count` — the sum of the counts of the pre-tokenizer's
    /// pieces — but a short piece's count is looked up in a per-thread table before it is encoded:
    /// texts are made of the same few thousand words, spaces and punctuation runs, and encoding
    /// each piece costs an encoder allocation.
    pub fn count(self, text: &str) -> usize {
        self.count_up_to(text, usize::MAX)
    }

    /// [`Tokenizer::count`], stopped at the first piece that takes the total past `limit`: a
    /// text's count is the sum of its pieces', so the answer is exact up to `limit`.
    pub fn count_up_to(self, text: &str, limit: usize) -> usize {
        let bpe = self.bpe();
        let text = bpe.normalize(text);
        PIECES.with(|pieces| {
            let mut pieces = pieces.borrow_mut();
            let table = &mut pieces[self as usize];
            let mut total = 0usize;
            for piece in bpe.split(text.as_str()) {
                let n = if piece.len() > MAX_CACHED_PIECE {
                    bpe.bpe.count(piece.as_bytes())
                } else if let Some(n) = table.get(piece) {
                    *n as usize
                } else {
                    let n = bpe.bpe.count(piece.as_bytes());
                    if table.len() >= MAX_CACHED_PIECES {
                        table.clear();
                    }
                    table.insert(piece.to_owned(), n as u32);
                    n
                };
                total += n;
                if total > limit {
                    return total;
                }
            }
            total
        })
    }

    /// The longest prefix of `text` that encodes to at most `max_tokens` tokens, cut on a token
    /// boundary (and so on a character boundary).
    pub fn truncate(self, text: &str, max_tokens: usize) -> &str {
        if max_tokens == 0 {
            return "";
        }
        let bpe = self.bpe();
        let tokens = bpe.encode(text);
        if tokens.len() <= max_tokens {
            return text;
        }
        // Decode a token prefix; back off while it ends inside a character or re-encodes longer.
        let mut k = max_tokens;
        while k > 0 {
            if let Some(prefix) = bpe.decode(&tokens[..k])
                && text.starts_with(prefix.as_str())
            {
                let cut = &text[..prefix.len()];
                if bpe.count(cut) <= max_tokens {
                    return cut;
                }
            }
            k -= 1;
        }
        ""
    }
}

impl TokenCounter for Tokenizer {
    fn count(&self, text: &str) -> usize {
        Tokenizer::count(*self, text)
    }

    fn count_up_to(&self, text: &str, limit: usize) -> usize {
        Tokenizer::count_up_to(*self, text, limit)
    }
}

impl fmt::Display for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Tokenizer {
    type Err = UnknownTokenizer;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "o200k_base" => Ok(Tokenizer::O200kBase),
            "cl100k_base" => Ok(Tokenizer::Cl100kBase),
            other => Err(UnknownTokenizer(other.chars().take(64).collect())),
        }
    }
}

/// The longest prefix of `text` made of whole lines (each with its newline) that counts at most
/// `max_tokens`; falls back to a token-boundary cut of the first line when not even it fits.
pub fn truncate_lines<'a>(counter: &dyn TokenCounter, text: &'a str, max_tokens: usize) -> &'a str {
    if counter.count(text) <= max_tokens {
        return text;
    }
    // Binary search over line ends; the prefix count is checked, so the bound holds even though
    // BPE counts are not strictly monotone in the prefix length.
    let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
    let (mut lo, mut hi) = (0usize, ends.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if counter.count(&text[..ends[mid - 1]]) <= max_tokens {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    if lo > 0 { &text[..ends[lo - 1]] } else { "" }
}

/// Whether the BPE pre-tokenizers (o200k_base, cl100k_base) start a piece here whatever comes
/// before: after a newline, at an ASCII graphic character other than `/`. No piece of either
/// pattern holds a newline followed by such a character (a newline only follows punctuation as
/// `[\r\n/]*`, or whitespace), so a text cut there counts as its two halves.
fn clean_start(text: &str) -> bool {
    text.as_bytes().first().is_some_and(|&b| b.is_ascii_graphic() && b != b'/')
}

/// Where `text`'s last line that starts cleanly begins (0 when no line after the first does).
fn last_clean_line(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut end = bytes.len();
    while let Some(nl) = bytes[..end].iter().rposition(|&b| b == b'\n') {
        if clean_start(&text[nl + 1..]) {
            return nl + 1;
        }
        end = nl;
    }
    0
}

/// The exact count of `parts` (each with its exact count) joined by `sep`, as `count` of the
/// joined text would give, counting only each part's last lines again. Exact when `sep` ends
/// with a newline and every part but the first starts cleanly (see `clean_start`): then the
/// joined text is the parts' heads, each part's last lines with `sep`, and the last part's last
/// lines, cut where pieces start anyway. Otherwise it counts the joined text.
pub fn count_joined(counter: &dyn TokenCounter, parts: &[(&str, usize)], sep: &str) -> usize {
    if !sep.ends_with('\n') || parts.iter().skip(1).any(|(t, _)| !clean_start(t)) {
        return counter.count(&parts.iter().map(|(t, _)| *t).collect::<Vec<_>>().join(sep));
    }
    let mut total = 0usize;
    for (i, (text, n)) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            total += n;
            break;
        }
        let at = last_clean_line(text);
        let last = &text[at..];
        let last_n = if at == 0 { *n } else { counter.count(last) };
        total += n.saturating_sub(last_n) + counter.count(&format!("{last}{sep}"));
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counts_match_tiktoken() {
        // Reference counts from tiktoken (tiktoken-rs 0.12.1, `encode_ordinary`).
        let cases = [
            ("hello world", 2, 2),
            ("E   AssertionError: assert separability_matrix(cm) == expected", 13, 12),
            ("    def __init__(self, name, species):\n        self.name = name\n", 17, 17),
            ("(0190c3a0-7b1e-7c3a-9f00-0a1b2c3d4e5f:41-62) [tool_result] Bash", 44, 44),
            ("日本語のテキスト 🙂 naïve café", 10, 12),
            ("", 0, 0),
        ];
        for (text, o200k, cl100k) in cases {
            assert_eq!(Tokenizer::O200kBase.count(text), o200k, "{text:?}");
            assert_eq!(Tokenizer::Cl100kBase.count(text), cl100k, "{text:?}");
        }
    }

    /// Up to its limit a bounded count is the count; past it, any number above the limit, and
    /// it stopped early (fewer than the whole text's count).
    #[test]
    fn a_bounded_count_is_exact_up_to_its_limit() {
        let text = "    def __init__(self, name, species):\n        self.name = name\n".repeat(20);
        for t in [Tokenizer::O200kBase, Tokenizer::Cl100kBase] {
            let full = t.count(&text);
            for limit in [0, 1, 7, full / 2, full - 1, full, full + 1, usize::MAX] {
                let n = t.count_up_to(&text, limit);
                if full <= limit {
                    assert_eq!(n, full, "limit {limit}");
                } else {
                    assert!(n > limit && n <= full, "limit {limit}: {n} of {full}");
                }
            }
            assert!(t.count_up_to(&text, 10) < full / 2, "it stops near its limit");
        }
    }

    #[test]
    fn names_round_trip() {
        for name in TOKENIZER_NAMES {
            let t: Tokenizer = name.parse().expect("known");
            assert_eq!(t.name(), name);
        }
        assert!("gpt2".parse::<Tokenizer>().is_err());
        assert_eq!(Tokenizer::default(), Tokenizer::O200kBase);
    }

    proptest! {
        /// The per-thread piece table never changes a count: the same as the tokenizer's own,
        /// for text seen for the first time and again.
        #[test]
        fn cached_counts_are_the_tokenizers(text in "(\\PC{0,80}|[a-z_ ]{0,80}|[ \n\t.:()]{0,40}){0,6}") {
            for t in [Tokenizer::O200kBase, Tokenizer::Cl100kBase] {
                let direct = t.bpe().count(text.as_str());
                prop_assert_eq!(t.count(&text), direct);
                prop_assert_eq!(t.count(&text), direct);
            }
        }

        /// Counting a joined text from its parts' counts is exact, whatever the parts.
        #[test]
        fn joined_counts_are_exact(
            parts in proptest::collection::vec("([#(a-zA-Z0-9 .:/\t_-]{0,12}\n?){0,6}|\\PC{0,40}", 1..5),
            sep in prop_oneof![Just("\n"), Just("\n\n"), Just(" \n"), Just("")],
        ) {
            for t in [Tokenizer::O200kBase, Tokenizer::Cl100kBase] {
                let counted: Vec<(&str, usize)> = parts.iter().map(|p| (p.as_str(), t.count(p))).collect();
                let joined = parts.join(sep);
                prop_assert_eq!(count_joined(&t, &counted, sep), t.count(&joined), "{:?}", joined);
            }
        }

        /// The same for texts shaped like pack blocks: headed lines, indented code, punctuation
        /// at line ends, blank lines, a line starting with `/`.
        #[test]
        fn joined_block_counts_are_exact(
            blocks in proptest::collection::vec(
                proptest::collection::vec(
                    prop_oneof![
                        Just("## recent turns"), Just("(s1:41-62) [tool_result] Bash"), Just("    def f(x):"),
                        Just("E   AssertionError: assert x == 1."), Just(""), Just("/usr/lib/x.py:3:"), Just("  \t"),
                        Just("done)."), Just("日本語 🙂"), Just("}"), Just("12345678")
                    ],
                    1..8,
                ),
                1..5,
            ),
        ) {
            let texts: Vec<String> = blocks.iter().map(|b| format!("## block\n{}\n", b.join("\n"))).collect();
            for t in [Tokenizer::O200kBase, Tokenizer::Cl100kBase] {
                let counted: Vec<(&str, usize)> = texts.iter().map(|p| (p.as_str(), t.count(p))).collect();
                prop_assert_eq!(count_joined(&t, &counted, "\n"), t.count(&texts.join("\n")));
            }
        }

        #[test]
        fn truncate_respects_the_cap(text in "\\PC{0,300}", max in 0usize..60) {
            for t in [Tokenizer::O200kBase, Tokenizer::Cl100kBase] {
                let cut = t.truncate(&text, max);
                prop_assert!(text.starts_with(cut));
                prop_assert!(t.count(cut) <= max);
                if t.count(&text) <= max {
                    prop_assert_eq!(cut, text.as_str());
                }
            }
        }

        #[test]
        fn truncate_lines_keeps_whole_lines(lines in proptest::collection::vec("[a-z ]{0,30}", 0..20), max in 0usize..80) {
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let t = Tokenizer::O200kBase;
            let cut = truncate_lines(&t, &text, max);
            prop_assert!(text.starts_with(cut));
            prop_assert!(t.count(cut) <= max);
            prop_assert!(cut.is_empty() || cut.ends_with('\n'));
        }
    }
}
