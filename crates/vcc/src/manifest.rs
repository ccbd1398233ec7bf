//! Machine-readable output (`memex view --format json`): each chain's views plus the pointer
//! metadata behind them. Serialisation is deterministic (struct field order, chain order).

use crate::compile::ChainViews;
use memex_pointer::LineRange;

use crate::ir::{BlockKind, Chain, ChainFiles, SectionRole};
use crate::lower::{AdaptiveView, UiPointer};
use serde::Serialize;

/// A range as this JSON has always named its ends, `{"start": 18, "end": 21}` (it predates the
/// shared `LineRange`, whose ends are `first` and `last`).
pub(crate) mod start_end {
    use memex_pointer::LineRange;
    use serde::{Serialize, Serializer};

    #[derive(Serialize)]
    struct Wire {
        start: u32,
        end: u32,
    }

    pub fn range<S: Serializer>(r: &LineRange, s: S) -> Result<S::Ok, S::Error> {
        Wire { start: r.first, end: r.last }.serialize(s)
    }

    pub fn opt<S: Serializer>(r: &Option<LineRange>, s: S) -> Result<S::Ok, S::Error> {
        r.map(|r| Wire { start: r.first, end: r.last }).serialize(s)
    }
}

/// Everything about one chain.
#[derive(Debug, Serialize)]
pub struct ChainManifest<'a> {
    /// 0-based chain index within the input.
    pub chain: usize,
    pub files: &'a ChainFiles,
    pub full: ViewText<'a>,
    pub ui: ViewText<'a>,
    /// Pointers printed in the UI view.
    pub ui_pointers: &'a [UiPointer],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveManifest<'a>>,
    pub sections: Vec<SectionEntry<'a>>,
    pub blocks: Vec<BlockEntry<'a>>,
    pub media: Vec<MediaEntry<'a>>,
}

#[derive(Debug, Serialize)]
pub struct ViewText<'a> {
    pub lines: u32,
    pub words: usize,
    pub text: &'a str,
}

#[derive(Debug, Serialize)]
pub struct AdaptiveManifest<'a> {
    pub lines: u32,
    pub text: &'a str,
    pub hits: Vec<HitEntry>,
}

/// A selected block: where its pointer is printed, the body range it cites and the full-view
/// numbers of the lines shown.
#[derive(Debug, Serialize)]
pub struct HitEntry {
    pub block: usize,
    pub pointer_line: u32,
    #[serde(serialize_with = "start_end::opt")]
    pub body: Option<LineRange>,
    pub lines: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct SectionEntry<'a> {
    pub role: &'a SectionRole,
    pub header: &'a str,
    /// Header line through the last content line.
    #[serde(serialize_with = "start_end::range")]
    pub range: LineRange,
    pub blocks: std::ops::Range<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub struct BlockEntry<'a> {
    pub section: usize,
    /// The role of the block's section.
    pub role: &'a SectionRole,
    pub node_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<&'a str>,
    /// The whole block, delimiters included.
    #[serde(serialize_with = "start_end::range")]
    pub range: LineRange,
    /// The searchable body (what adaptive pointers cite).
    #[serde(serialize_with = "start_end::opt")]
    pub body: Option<LineRange>,
}

#[derive(Debug, Serialize)]
pub struct MediaEntry<'a> {
    pub name: &'a str,
    pub bytes: usize,
}

/// Builds the manifest of chain `index` from its rendered views.
pub fn chain_manifest<'a>(index: usize, chain: &'a Chain, views: &'a ChainViews) -> ChainManifest<'a> {
    ChainManifest {
        chain: index,
        files: chain.files(),
        full: ViewText { lines: views.full_lines, words: views.full_words, text: &views.full },
        ui: ViewText { lines: views.ui.lines, words: views.ui_words, text: &views.ui.text },
        ui_pointers: &views.ui.pointers,
        adaptive: views.adaptive.as_ref().map(|a| adaptive(chain, a)),
        sections: sections(chain),
        blocks: blocks(chain),
        media: chain.media().iter().map(|m| MediaEntry { name: &m.name, bytes: m.bytes.len() }).collect(),
    }
}

fn adaptive<'a>(chain: &Chain, view: &'a AdaptiveView) -> AdaptiveManifest<'a> {
    let hits = view
        .hits
        .iter()
        .zip(&view.pointer_lines)
        .map(|(h, &pointer_line)| {
            let body = chain.blocks()[h.block].body_range();
            let start = body.map_or(0, |r| r.first);
            HitEntry {
                block: h.block,
                pointer_line,
                body,
                lines: h.lines.iter().map(|l| start + l).collect(),
                score: h.score,
            }
        })
        .collect();
    AdaptiveManifest { lines: view.lines, text: &view.text, hits }
}

fn sections(chain: &Chain) -> Vec<SectionEntry<'_>> {
    chain
        .sections()
        .iter()
        .map(|s| SectionEntry {
            role: s.role(),
            header: s.header(),
            range: s.range(),
            blocks: s.block_indices(),
            timestamp: s.timestamp(),
        })
        .collect()
}

fn blocks(chain: &Chain) -> Vec<BlockEntry<'_>> {
    chain
        .blocks()
        .iter()
        .map(|b| {
            let (tool_name, tool_id) = match b.kind() {
                BlockKind::ToolCall { name, id, .. } => (Some(name.as_str()), Some(id.as_str())),
                _ => (None, None),
            };
            BlockEntry {
                section: b.section(),
                role: chain.sections()[b.section()].role(),
                node_type: b.kind().node_type(),
                tool_name,
                tool_id,
                range: b.range(),
                body: b.body_range(),
            }
        })
        .collect()
}
