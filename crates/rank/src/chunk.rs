//! Cutting event text into index chunks. A long tool output indexed as one document would match
//! everything weakly; chunks of about a screenful keep BM25's length normalisation meaningful and
//! tell a hit *where* in the event it matched (the chunk's line range inside the event's text).

/// How big a chunk may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkOptions {
    /// Most bytes in a chunk (at least 4, so any UTF-8 character fits).
    pub max_bytes: usize,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions { max_bytes: 2048 }
    }
}

/// A piece of a text: bytes `start..end`, covering its lines `first_line..=last_line` (0-based,
/// counted in the whole text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub start: usize,
    pub end: usize,
    pub first_line: u32,
    pub last_line: u32,
}

/// Cuts `text` into chunks that cover it exactly, in order, each at most `max_bytes` long. Cuts
/// fall on line ends when the lines fit, else on whitespace, else on a character boundary. An
/// empty text gives one empty chunk, so every event has at least one chunk.
pub fn chunk_text(text: &str, opts: ChunkOptions) -> Vec<Chunk> {
    let max = opts.max_bytes.max(4);
    let mut cuts: Vec<usize> = Vec::new(); // chunk ends
    let mut start = 0;
    while text.len() - start > max {
        let window = &text[start..floor_char_boundary(text, start + max)];
        let cut = window
            .rfind('\n')
            .map(|i| i + 1)
            .or_else(|| window.rfind(char::is_whitespace).map(|i| i + next_char_len(window, i)))
            .filter(|&c| c > 0)
            .unwrap_or(window.len());
        let cut = if cut == 0 { next_char_len(&text[start..], 0) } else { cut };
        start += cut;
        cuts.push(start);
    }
    cuts.push(text.len());
    let mut chunks = Vec::with_capacity(cuts.len());
    let (mut from, mut line) = (0usize, 0u32);
    for end in cuts {
        let piece = &text[from..end];
        let newlines = piece.bytes().filter(|&b| b == b'\n').count() as u32;
        let last_line = if piece.ends_with('\n') && newlines > 0 { line + newlines - 1 } else { line + newlines };
        chunks.push(Chunk { start: from, end, first_line: line, last_line });
        line += newlines;
        from = end;
    }
    chunks
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn next_char_len(s: &str, i: usize) -> usize {
    s[i..].chars().next().map_or(1, char::len_utf8)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn short_text_is_one_chunk_and_empty_text_too() {
        assert_eq!(
            chunk_text("", ChunkOptions::default()),
            vec![Chunk { start: 0, end: 0, first_line: 0, last_line: 0 }]
        );
        assert_eq!(
            chunk_text("a\nb\n", ChunkOptions::default()),
            vec![Chunk { start: 0, end: 4, first_line: 0, last_line: 1 }]
        );
    }

    #[test]
    fn cuts_prefer_line_ends_then_spaces() {
        let c = chunk_text("aaa\nbbb\nccc\n", ChunkOptions { max_bytes: 8 });
        assert_eq!(
            c.iter().map(|c| (c.start, c.end, c.first_line, c.last_line)).collect::<Vec<_>>(),
            vec![(0, 8, 0, 1), (8, 12, 2, 2)]
        );
        let c = chunk_text("alpha beta gamma", ChunkOptions { max_bytes: 8 });
        assert_eq!(c.iter().map(|c| (c.start, c.end)).collect::<Vec<_>>(), vec![(0, 6), (6, 11), (11, 16)]);
    }

    proptest! {
        #[test]
        fn chunks_tile_the_text_within_the_limit(text in "(\\PC|\n| ){0,300}", max in 4usize..64) {
            let chunks = chunk_text(&text, ChunkOptions { max_bytes: max });
            prop_assert!(!chunks.is_empty());
            prop_assert_eq!(chunks[0].start, 0);
            prop_assert_eq!(chunks.last().map(|c| c.end), Some(text.len()));
            for w in chunks.windows(2) {
                prop_assert_eq!(w[0].end, w[1].start);
                prop_assert!(w[0].last_line <= w[1].first_line);
            }
            for c in &chunks {
                prop_assert!(c.end - c.start <= max);
                prop_assert!(text.is_char_boundary(c.start) && text.is_char_boundary(c.end));
                prop_assert_eq!(c.first_line as usize, text[..c.start].matches('\n').count());
                prop_assert!(c.first_line <= c.last_line);
                if c.end > c.start {
                    let upto_last = text.as_bytes()[..c.end - 1].iter().filter(|&&b| b == b'\n').count();
                    prop_assert_eq!(c.last_line as usize, upto_last);
                }
            }
        }
    }
}
