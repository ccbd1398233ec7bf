//! Entries to text under a hard token budget. When everything does not fit, entries go in
//! priority order (lowest first, the oldest first among equals: see `Priority`), and the text
//! says how many of each section went. The result is counted exactly; the bound holds for the
//! returned text, not for an estimate.
use memex_memory::SeqSpan;
use memex_pointer::{LineRange, SeqRange};
use memex_pointer::{SessionAliases, cite};
use memex_tokens::TokenCounter;
use uuid::Uuid;

use crate::model::{Cite, Entry, Format, Section, Shown, Snapshot, Source};

/// The smallest budget a snapshot can be asked for: the frame and a few lines.
pub const MIN_BUDGET: usize = 128;

/// Lays `entries` out for `session` within `budget` tokens. `cites` gives each entry's lines in
/// the full view (by the span it cites); an entry without lines is cited by seq.
pub fn render(
    session: Uuid,
    task: Option<(&str, u64)>,
    entries: Vec<Entry>,
    cites: &dyn Fn(SeqSpan) -> Cite,
    format: Format,
    budget: usize,
    counter: &dyn TokenCounter,
) -> Snapshot {
    let alias = SessionAliases::starting_with(session);
    let task_cite = task.map(|(id, v)| format!("(task {id} v{v})")).unwrap_or_else(|| "(task)".to_owned());
    let shown: Vec<Shown> = entries
        .into_iter()
        .map(|entry| {
            let cite = match entry.source {
                Source::Events(span) => cites(span),
                Source::Task => None,
            };
            Shown { entry, cite }
        })
        .collect();
    let lines: Vec<String> = shown.iter().map(|s| entry_text(s, "s1", &task_cite, format)).collect();
    let costs: Vec<usize> = lines.iter().map(|l| counter.count(l)).collect();
    let frame = Frame { format, legend: alias.legend() };

    // Drop order: priority, then age, then section and position (a total order).
    let mut order: Vec<usize> = (0..shown.len()).collect();
    order.sort_by_key(|&i| (shown[i].entry.priority, shown[i].entry.order, shown[i].entry.section, i));
    let mut kept = vec![true; shown.len()];
    // Kept entries per section and their tokens, kept up to date as entries go, so that each
    // step costs one count (the omitted line's), not a pass over every entry.
    let mut per_section = [0usize; Section::ALL.len()];
    for s in &shown {
        per_section[s.entry.section as usize] += 1;
    }
    let totals = per_section;
    let section_costs: Vec<usize> = Section::ALL
        .iter()
        .map(|&sec| counter.count(&frame.section_open(sec)) + counter.count(&frame.section_close(sec)))
        .collect();
    let fixed = counter.count(&frame.open()) + counter.count(frame.close());
    let mut entries_cost: usize = costs.iter().sum();
    let mut dropped = 0usize;
    loop {
        let sections: usize = per_section.iter().zip(&section_costs).filter(|(n, _)| **n > 0).map(|(_, c)| c).sum();
        let dropped_per: Vec<usize> = totals.iter().zip(&per_section).map(|(t, k)| t - k).collect();
        let estimate = fixed + sections + entries_cost + counter.count(&frame.omitted(&dropped_per));
        if estimate <= budget || dropped == order.len() {
            let text = frame.text(&shown, &kept, &lines);
            let tokens = counter.count(&text);
            // Counts of joined lines are exact when every line starts cleanly; checked anyway.
            if tokens <= budget || dropped == order.len() {
                let (mut shown_out, mut omitted) = (Vec::new(), Vec::new());
                for (s, k) in shown.into_iter().zip(kept) {
                    if k { shown_out.push(s) } else { omitted.push(s) }
                }
                return Snapshot { text, tokens, shown: shown_out, omitted };
            }
        }
        let i = order[dropped];
        kept[i] = false;
        per_section[shown[i].entry.section as usize] -= 1;
        entries_cost -= costs[i];
        dropped += 1;
    }
}

/// One entry as it reads: `- [label] (s1:41-62) text`, or a raw event under its header.
fn entry_text(s: &Shown, alias: &str, task_cite: &str, format: Format) -> String {
    let e = &s.entry;
    let c = match e.source {
        Source::Events(span) => citation(alias, s.cite, span),
        Source::Task => task_cite.to_owned(),
    };
    if e.section == Section::RecentRounds {
        // `[tool_result Bash]\n…` after the citation; the body keeps its own lines.
        let (head, body) = e.text.split_once('\n').unwrap_or((&e.text, ""));
        let fence = if format == Format::Markdown { "```" } else { "" };
        return if fence.is_empty() {
            format!("{c} {head}\n{body}\n")
        } else {
            format!("{c} {head}\n{fence}\n{body}\n{fence}\n")
        };
    }
    let label = if e.label.is_empty() { String::new() } else { format!("[{}] ", e.label) };
    // A request keeps its lines; the ones after the first are indented under the item.
    let text = e.text.replace('\n', "\n  ");
    format!("- {label}{c} {text}\n")
}

fn citation(alias: &str, lines: Cite, span: SeqSpan) -> String {
    let seqs = SeqRange { first: span.first, last: span.last };
    match lines {
        Some(v) if v.chain == 1 => cite(alias, Some(v.range), seqs),
        Some(v) => format!("({alias}#{}:{})", v.chain, v.range),
        None => cite(alias, None::<LineRange>, seqs),
    }
}

struct Frame {
    format: Format,
    legend: String,
}

impl Frame {
    fn open(&self) -> String {
        match self.format {
            Format::Xml => format!("<state_snapshot>\n{}\n", self.legend),
            Format::Markdown => format!("# State snapshot\n{}\n", self.legend),
        }
    }

    fn close(&self) -> &'static str {
        match self.format {
            Format::Xml => "</state_snapshot>\n",
            Format::Markdown => "",
        }
    }

    fn section_open(&self, s: Section) -> String {
        match self.format {
            Format::Xml => format!("<{}>\n", s.name()),
            Format::Markdown => format!("## {}\n", s.title()),
        }
    }

    fn section_close(&self, s: Section) -> String {
        match self.format {
            Format::Xml => format!("</{}>\n", s.name()),
            Format::Markdown => String::new(),
        }
    }

    /// What the budget left out, per section (`dropped[section]`): `recent_rounds 4, recent_actions 2`.
    fn omitted(&self, dropped: &[usize]) -> String {
        let list: Vec<String> = Section::ALL
            .iter()
            .zip(dropped)
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| format!("{} {n}", s.name()))
            .collect();
        if list.is_empty() {
            return String::new();
        }
        let line = format!(
            "Left out for the token budget (least important first; the answer lists them with pointers): {}",
            list.join(", ")
        );
        match self.format {
            Format::Xml => format!("<omitted>\n{line}\n</omitted>\n"),
            Format::Markdown => format!("## Omitted\n{line}\n"),
        }
    }

    fn text(&self, shown: &[Shown], kept: &[bool], lines: &[String]) -> String {
        let mut out = self.open();
        for sec in Section::ALL {
            let mut any = false;
            for ((s, k), line) in shown.iter().zip(kept).zip(lines) {
                if *k && s.entry.section == sec {
                    if !any {
                        out.push_str(&self.section_open(sec));
                        any = true;
                    }
                    out.push_str(line);
                }
            }
            if any {
                out.push_str(&self.section_close(sec));
            }
        }
        let mut dropped = [0usize; Section::ALL.len()];
        for (s, k) in shown.iter().zip(kept) {
            if !k {
                dropped[s.entry.section as usize] += 1;
            }
        }
        out.push_str(&self.omitted(&dropped));
        out.push_str(self.close());
        out
    }
}
