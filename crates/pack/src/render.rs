//! Rendering one item in the adaptive-view form under a token cap: whole when it fits, else an
//! excerpt of the lines that match the query (with their full-view line numbers when known) and
//! `…` where lines were left out — the way VCC's adaptive view shows a block.
use memex_pointer::{ContextEvent, ViewBlock, event_header, render_event};
use memex_tokens::TokenCounter;

use crate::candidate::ArtifactMatch;

/// Displayed lines are cut to this many characters (the store keeps them whole).
const MAX_LINE_CHARS: usize = 600;
/// Query terms an excerpt looks for.
const MAX_TERMS: usize = 48;
/// Shorter terms are not looked for: as substrings they would match almost every line.
const MIN_TERM_CHARS: usize = 3;

/// An item rendered under a cap.
pub struct Rendered {
    pub text: String,
    pub tokens: usize,
    pub excerpt: bool,
}

fn cut_line(l: &str) -> String {
    if l.chars().count() <= MAX_LINE_CHARS {
        return l.to_owned();
    }
    let mut s: String = l.chars().take(MAX_LINE_CHARS - 1).collect();
    s.push('…');
    s
}

/// Renders `event` within `cap` tokens, or `None` if not even its header and one line fit.
pub fn render_item(
    alias: &str,
    event: &ContextEvent,
    view: Option<&ViewBlock>,
    terms: &[String],
    cap: usize,
    counter: &dyn TokenCounter,
) -> Option<Rendered> {
    within(render_event(alias, event, view), cap, false, counter)
        .or_else(|| excerpt(alias, event, view, terms, cap, counter))
}

/// `text` as it is, when it fits `cap`.
fn within(text: String, cap: usize, excerpt: bool, counter: &dyn TokenCounter) -> Option<Rendered> {
    // Cheap bound first: a token is at least one byte... of most text; count only plausible fits.
    if text.len() > cap.saturating_mul(8) {
        return None;
    }
    let tokens = counter.count(&text);
    (tokens <= cap).then_some(Rendered { text, tokens, excerpt })
}

/// Renders the part of `event`'s artifact that matched the query (`m`), within `cap` tokens: the
/// event's header (its pointer into the full view, and the artifact's id), then the matched
/// lines numbered in the artifact (`a1201: …`, 1-based), all of them when they fit, else those
/// around the query's terms. `None` if not even the header and one line fit.
pub fn render_artifact_match(
    alias: &str,
    event: &ContextEvent,
    view: Option<&ViewBlock>,
    m: &ArtifactMatch,
    terms: &[String],
    cap: usize,
    counter: &dyn TokenCounter,
) -> Option<Rendered> {
    let header = format!(
        "{} matched in artifact lines a{}-a{}\n",
        event_header(alias, event, view.map(|v| v.range)),
        m.first_line + 1,
        m.last_line + 1
    );
    let lines: Vec<(Option<u32>, &str)> =
        m.text.lines().enumerate().map(|(i, l)| (Some(m.first_line + 1 + i as u32), l)).collect();
    let all: Vec<usize> = (0..lines.len()).collect();
    let show = |n: Option<u32>, l: &str| match n {
        Some(n) => format!("a{n}: {}\n", cut_line(l)),
        None => format!("{}\n", cut_line(l)),
    };
    within(assemble(&header, &lines, &all, &show), cap, true, counter)
        .or_else(|| excerpt_lines(&header, &lines, &show, terms, cap, counter))
}

fn excerpt(
    alias: &str,
    event: &ContextEvent,
    view: Option<&ViewBlock>,
    terms: &[String],
    cap: usize,
    counter: &dyn TokenCounter,
) -> Option<Rendered> {
    let header = format!("{} (excerpt)\n", event_header(alias, event, view.map(|v| v.range)));
    // Lines with their full-view numbers when VCC located the event.
    let lines: Vec<(Option<u32>, &str)> = match view {
        Some(v) => v.lines.iter().enumerate().map(|(i, l)| (Some(v.range.first + i as u32), l.as_str())).collect(),
        None => event.content.lines().map(|l| (None, l)).collect(),
    };
    let show = |n: Option<u32>, l: &str| match n {
        Some(n) => format!("{n}: {}\n", cut_line(l)),
        None => format!("{}\n", cut_line(l)),
    };
    excerpt_lines(&header, &lines, &show, terms, cap, counter)
}

/// `header`, then the lines around those that contain the most query terms (the head when none
/// does), `…` where lines were left out, within `cap` tokens.
fn excerpt_lines(
    header: &str,
    lines: &[(Option<u32>, &str)],
    show: &dyn Fn(Option<u32>, &str) -> String,
    terms: &[String],
    cap: usize,
    counter: &dyn TokenCounter,
) -> Option<Rendered> {
    let header_tokens = counter.count(header);
    if lines.is_empty() || header_tokens + 4 > cap {
        return None;
    }
    // Rank lines by how many query terms they contain; the head stands in when none match.
    // (A tool output has thousands of lines: each term's searcher is built once, and ASCII lines,
    // most of them, are lowercased in place of a Unicode pass.)
    // Terms are the analyzer's (stemmed: `releas` finds `released` and `releases`).
    let finders: Vec<memchr::memmem::Finder<'_>> = terms
        .iter()
        .filter(|t| t.chars().count() >= MIN_TERM_CHARS)
        .take(MAX_TERMS)
        .map(memchr::memmem::Finder::new)
        .collect();
    let mut low = String::new();
    let mut ranked: Vec<(usize, usize)> = Vec::new();
    for (i, (_, l)) in lines.iter().enumerate() {
        if l.is_ascii() {
            low.clear();
            low.push_str(l);
            low.make_ascii_lowercase();
        } else {
            low = l.to_lowercase();
        }
        let hits = finders.iter().filter(|f| f.find(low.as_bytes()).is_some()).count();
        if hits > 0 {
            ranked.push((hits, i));
        }
    }
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let seeds: Vec<usize> =
        if ranked.is_empty() { (0..lines.len()).collect() } else { ranked.iter().map(|r| r.1).collect() };
    let mut chosen: Vec<usize> = Vec::new();
    let mut used = header_tokens + 1; // + a gap marker
    'seeds: for seed in seeds {
        let around =
            if ranked.is_empty() { seed..=seed } else { seed.saturating_sub(1)..=(seed + 1).min(lines.len() - 1) };
        for i in around {
            if chosen.contains(&i) {
                continue;
            }
            let cost = counter.count(&show(lines[i].0, lines[i].1)) + 1;
            if used + cost > cap {
                if chosen.is_empty() {
                    continue;
                }
                break 'seeds;
            }
            used += cost;
            chosen.push(i);
        }
    }
    if chosen.is_empty() {
        return None;
    }
    chosen.sort_unstable();
    loop {
        let text = assemble(header, lines, &chosen, show);
        let tokens = counter.count(&text);
        if tokens <= cap {
            return Some(Rendered { text, tokens, excerpt: true });
        }
        chosen.pop();
        if chosen.is_empty() {
            return None;
        }
    }
}

fn assemble(
    header: &str,
    lines: &[(Option<u32>, &str)],
    chosen: &[usize],
    show: &dyn Fn(Option<u32>, &str) -> String,
) -> String {
    let mut text = header.to_owned();
    let mut prev: Option<usize> = None;
    for &i in chosen {
        let gap = match prev {
            None => i > 0,
            Some(p) => i > p + 1,
        };
        if gap {
            text.push_str("…\n");
        }
        text.push_str(&show(lines[i].0, lines[i].1));
        prev = Some(i);
    }
    if prev.is_some_and(|p| p + 1 < lines.len()) {
        text.push_str("…\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use memex_event::EventKind;
    use memex_pointer::{EventFlags, LineRange};
    use memex_tokens::Tokenizer;
    use uuid::Uuid;

    fn event(content: &str) -> ContextEvent {
        ContextEvent {
            id: Uuid::nil(),
            session_id: Uuid::nil(),
            seq: 4,
            kind: EventKind::ToolResult,
            tool_name: Some("Bash".into()),
            content: content.into(),
            artifact: None,
            task_id: None,
            task_state_version: None,
            time_ms: 0,
            flags: EventFlags::default(),
        }
    }

    #[test]
    fn small_items_are_whole_and_large_ones_excerpted_around_matches() {
        let t = Tokenizer::O200kBase;
        let small = render_item("s1", &event("ok\n"), None, &[], 100, &t).expect("fits");
        assert_eq!(small.text, "(s1@4) [tool_result] Bash\nok\n");
        assert!(!small.excerpt);
        let mut content = String::new();
        for i in 0..400 {
            content.push_str(&format!("line {i} of filler output\n"));
        }
        content.push_str("sha256 9f86d081884c7d65  dist/pkg.tar.gz\n");
        content.push_str("more filler\n");
        let terms = memex_rank::query_terms("the sha256 of the dist tarball");
        let big = render_item("s1", &event(&content), None, &terms, 60, &t).expect("excerpt");
        assert!(big.excerpt && big.tokens <= 60);
        assert_eq!(
            big.text,
            "(s1@4) [tool_result] Bash (excerpt)\n…\nline 399 of filler output\nsha256 9f86d081884c7d65  dist/pkg.tar.gz\nmore filler\n"
        );
        // With full-view coordinates, excerpt lines carry their numbers.
        let view = ViewBlock {
            range: LineRange { first: 100, last: 100 + 401 },
            lines: content.lines().map(str::to_owned).collect::<Vec<_>>().into(),
        };
        let numbered = render_item("s1", &event(&content), Some(&view), &terms, 60, &t).expect("excerpt");
        assert!(
            numbered.text.starts_with("(s1:100-501) [tool_result] Bash (excerpt)\n…\n499: line 399"),
            "{}",
            numbered.text
        );
        assert!(render_item("s1", &event(&content), None, &terms, 5, &t).is_none());
    }
}
