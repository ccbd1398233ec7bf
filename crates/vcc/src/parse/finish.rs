//! Finishing a chain: tool names resolved over the whole chain, media labels named (the `_N`
//! suffix is known only at the end of the file), `Read` prefixes stripped, lines assigned.

use super::{ChainBuilder, Part, PendingBlock, PendingBody, PendingHeader, PendingMedia};
use crate::ir::{Block, Body, Chain, ChainFiles, MediaFile, Section, short_id};
use crate::media::MediaKind;
use crate::text::{is_py_space, sanitize};

impl ChainBuilder {
    /// Resolves names and media, assigns lines: the chain is complete.
    pub fn finish(mut self, files: ChainFiles) -> Chain {
        self.close_assistant();
        let media_names: Vec<String> =
            self.media.iter().map(|m| format!("{}_{}_{}.{}", files.prefix, m.kind.stem(), m.index, m.ext)).collect();
        // Before `resolve_sections`, which consumes the pending headers (explicit names).
        let read_keys = self.read_result_keys();
        let sections = self.resolve_sections();
        let blocks = std::mem::take(&mut self.blocks)
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                let read = read_keys.contains(&(i as u32));
                finish_block(b, &media_names, &self.media, read)
            })
            .collect();
        let media = self
            .media
            .into_iter()
            .zip(&media_names)
            .filter_map(|(m, name)| m.bytes.map(|bytes| MediaFile { name: name.clone(), bytes }))
            .collect();
        let mut chain = Chain { sections, blocks, body_lines: 0, footer: self.stats.footer(), media, names: files };
        chain.assign_lines();
        chain
    }

    fn tool_name(&self, id_key: &str, explicit: Option<&String>) -> String {
        match explicit {
            Some(name) => name.clone(),
            None => self.tool_names.get(id_key).cloned().unwrap_or_else(|| "unknown".into()),
        }
    }

    fn resolve_sections(&mut self) -> Vec<Section> {
        let pending = std::mem::take(&mut self.sections);
        pending
            .into_iter()
            .map(|s| {
                let header = match &s.header {
                    PendingHeader::Done(h) => h.clone(),
                    PendingHeader::Tool { is_error, id_key, id, explicit } => {
                        let name = self.tool_name(id_key, explicit.as_ref());
                        let role = if *is_error { "tool_error" } else { "tool" };
                        format!("[{role}] {name}:{}", short_id(id))
                    }
                };
                Section { role: s.role, header, blocks: s.blocks, header_line: 0, last_line: 0, timestamp: s.timestamp }
            })
            .collect()
    }

    /// Tool-id keys whose results get `Read`'s line-number stripping.
    fn read_result_keys(&self) -> std::collections::HashSet<u32> {
        let mut out = std::collections::HashSet::new();
        for (i, b) in self.blocks.iter().enumerate() {
            let Some(key) = b.tool_id_key.as_deref() else {
                continue;
            };
            let explicit = self.explicit_name(b.section);
            if self.tool_name(key, explicit.as_ref()) == "Read" {
                out.insert(i as u32);
            }
        }
        out
    }

    fn explicit_name(&self, section: u32) -> Option<String> {
        self.sections.get(section as usize).and_then(|s| match &s.header {
            PendingHeader::Tool { explicit, .. } => explicit.clone(),
            PendingHeader::Done(_) => None,
        })
    }
}

fn finish_block(b: PendingBlock, media_names: &[String], media: &[PendingMedia], read: bool) -> Block {
    let body = match b.body {
        PendingBody::Done(body) => body,
        PendingBody::Media(i) => Body::Line(media_label(media[i].kind, &media_names[i])),
        PendingBody::ToolParts(parts) => Body::Lines(join_parts(parts, media_names, media, read)),
    };
    Block { kind: b.kind, body, section: b.section, first_line: 0, body_start: 0, last_line: 0 }
}

fn media_label(kind: MediaKind, name: &str) -> String {
    format!("[{}: {name}]", kind.label())
}

/// `_sanitize("\n\n".join(parts))`, with `Read`'s `"   12→"` prefixes stripped from text parts.
fn join_parts(parts: Vec<Part>, names: &[String], media: &[PendingMedia], read: bool) -> String {
    let mut out = String::new();
    for (i, part) in parts.into_iter().enumerate() {
        if i > 0 {
            out.push_str("\n\n");
        }
        match part {
            Part::Text(t) if read => strip_read_prefixes(&t, &mut out),
            Part::Text(t) => out.push_str(&t),
            Part::Media(m) => out.push_str(&media_label(media[m].kind, &names[m])),
        }
    }
    sanitize(&out).into_owned()
}

/// `Read` results: a line `"   12→text"` becomes `"text"` when the part before the first `→`
/// is, stripped, all digits.
fn strip_read_prefixes(text: &str, out: &mut String) {
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let kept = match line.split_once('\u{2192}') {
            Some((head, tail)) if is_py_digits(head.trim_matches(is_py_space)) => tail,
            _ => line,
        };
        out.push_str(kept);
    }
}

/// Python's `str.isdigit()` (approximated with Unicode numerics).
fn is_py_digits(s: &str) -> bool {
    !s.is_empty() && s.chars().all(char::is_numeric)
}
