//! Finishing a chain: tool names resolved over the whole chain, media labels named (the `_N`
//! suffix is known only at the end of the file), `Read` prefixes stripped, lines assigned.
//!
//! A live session finishes its chain again at every version ([`ChainBuilder::snapshot`]). What
//! can no longer change is finished once and kept ([`Finished`]), so a version finishes only the
//! sections it adds, and the blocks it hands out share their text with the builder's.

use std::sync::Arc;

use super::{ChainBuilder, Part, PendingBlock, PendingBody, PendingHeader, PendingMedia, PendingSection};
use crate::ir::{Block, Body, Chain, ChainFiles, MediaFile, Section, SectionRole, assign_lines, short_id, vec_bytes};
use crate::media::MediaKind;
use crate::text::{is_py_space, sanitize};

/// The first sections of a chain and their blocks, finished and with their lines, as every later
/// version of the chain has them. A section is final once nothing still to come can change it:
/// it is closed (not the open assistant record) and neither its header nor its blocks wait on a
/// tool name (a result that names its tool, as the `memex` format's do, never does; the
/// reference's whole-chain lookup always might). Media labels depend on the chain's file prefix,
/// so the sections are kept for one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    prefix: String,
    sections: Vec<Section>,
    /// The blocks of `sections` (and any before them that belong to none).
    blocks: Vec<Block>,
    /// The line after the last of `sections`.
    line: u32,
}

impl Default for Finished {
    fn default() -> Self {
        Finished { prefix: String::new(), sections: Vec::new(), blocks: Vec::new(), line: 1 }
    }
}

impl Finished {
    /// Its own heap bytes: block bodies are the builder's, shared, and counted there.
    pub(crate) fn size_bytes(&self) -> usize {
        self.prefix.capacity()
            + vec_bytes(&self.sections, Section::heap_bytes)
            + vec_bytes(&self.blocks, |b| b.kind.heap_bytes())
    }
}

impl ChainBuilder {
    /// Resolves names and media, assigns lines: the chain is complete.
    pub fn finish(mut self, files: ChainFiles) -> Chain {
        self.close_assistant();
        let mut chain = self.chain(files, false);
        let names: Vec<String> = media_names(&chain.names.prefix, &self.media).collect();
        chain.media = self
            .media
            .into_iter()
            .zip(names)
            .filter_map(|(m, name)| m.bytes.map(|bytes| MediaFile { name, bytes }))
            .collect();
        chain
    }

    /// The chain [`ChainBuilder::finish`] would give now (an open assistant record closed), with
    /// the builder left to read on. Sections that are final by now are kept finished, so the
    /// next snapshot finishes only the sections after them.
    pub fn snapshot(&mut self, files: ChainFiles) -> Chain {
        let mut chain = self.chain(files, true);
        let names = media_names(&chain.names.prefix, &self.media);
        chain.media = self
            .media
            .iter()
            .zip(names)
            .filter_map(|(m, name)| m.bytes.clone().map(|bytes| MediaFile { name, bytes }))
            .collect();
        chain
    }

    /// The chain without its media files; with `keep`, what became final is kept finished.
    fn chain(&mut self, files: ChainFiles, keep: bool) -> Chain {
        if self.finished.prefix != files.prefix {
            self.finished = Finished { prefix: files.prefix.clone(), ..Finished::default() };
        }
        let names: Vec<String> = media_names(&files.prefix, &self.media).collect();
        let done = &self.finished;
        let (k, m) = (done.sections.len(), done.blocks.len());
        let mut sections = Vec::with_capacity(self.sections.len() + 1);
        sections.extend_from_slice(&done.sections);
        sections.extend(self.sections[k..].iter().map(|s| self.resolve_section(s)));
        if let Some(open) = self.open.as_ref().filter(|o| o.has_content) {
            sections.push(Section {
                role: SectionRole::Assistant,
                header: "[assistant]".into(),
                blocks: open.first_block..self.blocks.len() as u32,
                header_line: 0,
                last_line: 0,
                timestamp: open.timestamp.as_deref().map(Arc::from),
            });
        }
        let mut blocks = Vec::with_capacity(self.blocks.len());
        blocks.extend_from_slice(&done.blocks);
        blocks.extend(self.blocks[m..].iter().map(|b| finish_block(b, &names, &self.media, self.is_read(b))));
        // Sections final by now: closed ones, from the first still waiting on a name on.
        let k2 = if keep { k + self.sections[k..].iter().take_while(|s| self.is_final(s)).count() } else { k };
        let line = assign_lines(&mut sections[k..k2], &mut blocks, k, done.line);
        let body_lines = assign_lines(&mut sections[k2..], &mut blocks, k2, line);
        if k2 > k {
            let m2 = (sections[k2 - 1].blocks.end as usize).max(m);
            self.keep_finished(&sections[k..k2], &blocks[m..m2], line);
        }
        Chain { sections, blocks, body_lines, footer: self.stats.footer(), media: Vec::new(), names: files }
    }

    /// Adds final sections and their blocks to [`Finished`]. A result's parts (text only) are
    /// replaced by the body they finished to, so that the two share one copy of the text.
    fn keep_finished(&mut self, sections: &[Section], blocks: &[Block], line: u32) {
        let m = self.finished.blocks.len();
        for (pending, block) in self.blocks[m..m + blocks.len()].iter_mut().zip(blocks) {
            if let PendingBody::ToolParts(parts) = &pending.body
                && parts.iter().all(|p| matches!(p, Part::Text(_)))
            {
                pending.body = PendingBody::Done(block.body.clone());
            }
        }
        let done = &mut self.finished;
        done.sections.extend_from_slice(sections);
        done.blocks.extend_from_slice(blocks);
        done.line = line;
    }

    /// Whether a closed section can no longer change (see [`Finished`]).
    fn is_final(&self, s: &PendingSection) -> bool {
        let named = match &s.header {
            PendingHeader::Done(_) => true,
            PendingHeader::Tool { explicit, .. } => explicit.is_some(),
        };
        named
            && self.blocks[s.block_indices()]
                .iter()
                .all(|b| b.tool_id_key.is_none() || self.explicit_name(b.section).is_some())
    }

    fn tool_name<'a>(&'a self, id_key: &str, explicit: Option<&'a String>) -> &'a str {
        match explicit {
            Some(name) => name,
            None => self.tool_names.get(id_key).map_or("unknown", String::as_str),
        }
    }

    fn resolve_section(&self, s: &PendingSection) -> Section {
        let header = match &s.header {
            PendingHeader::Done(h) => h.clone(),
            PendingHeader::Tool { is_error, id_key, id, explicit } => {
                let name = self.tool_name(id_key, explicit.as_ref());
                let role = if *is_error { "tool_error" } else { "tool" };
                format!("[{role}] {name}:{}", short_id(id)).into()
            }
        };
        Section {
            role: s.role.clone(),
            header,
            blocks: s.blocks.clone(),
            header_line: 0,
            last_line: 0,
            timestamp: s.timestamp.clone(),
        }
    }

    /// Whether a block is a result of `Read` (whose line-number prefixes are stripped).
    fn is_read(&self, b: &PendingBlock) -> bool {
        b.tool_id_key.as_deref().is_some_and(|key| self.tool_name(key, self.explicit_name(b.section)) == "Read")
    }

    fn explicit_name(&self, section: u32) -> Option<&String> {
        self.sections.get(section as usize).and_then(|s| match &s.header {
            PendingHeader::Tool { explicit, .. } => explicit.as_ref(),
            PendingHeader::Done(_) => None,
        })
    }
}

/// Media file names, in the order of `media`.
fn media_names<'a>(prefix: &'a str, media: &'a [PendingMedia]) -> impl Iterator<Item = String> + 'a {
    media.iter().map(move |m| format!("{prefix}_{}_{}.{}", m.kind.stem(), m.index, m.ext))
}

fn finish_block(b: &PendingBlock, media_names: &[String], media: &[PendingMedia], read: bool) -> Block {
    let body = match &b.body {
        PendingBody::Done(body) => body.clone(),
        PendingBody::Media(i) => Body::one(media_label(media[*i].kind, &media_names[*i])),
        PendingBody::ToolParts(parts) => Body::text(join_parts(parts, media_names, media, read)),
    };
    Block {
        kind: b.kind.clone(),
        body,
        section: b.section,
        first_line: 0,
        body_start: 0,
        last_line: 0,
        source_line: b.source_line,
    }
}

fn media_label(kind: MediaKind, name: &str) -> String {
    format!("[{}: {name}]", kind.label())
}

/// `_sanitize("\n\n".join(parts))`, with `Read`'s `"   12→"` prefixes stripped from text parts.
fn join_parts(parts: &[Part], names: &[String], media: &[PendingMedia], read: bool) -> String {
    let mut out = String::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str("\n\n");
        }
        match part {
            Part::Text(t) if read => strip_read_prefixes(t, &mut out),
            Part::Text(t) => out.push_str(t),
            Part::Media(m) => out.push_str(&media_label(media[*m].kind, &names[*m])),
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
