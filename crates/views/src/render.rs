//! The view use cases: render a compiled session's full, UI, adaptive or index view, and read a
//! pointer's lines.
use std::collections::HashMap;

use memex_event::{NamespaceId, Seq, SessionId};
use memex_pointer::{LineRange, Pointer};
use memex_vcc::{Chain, LineInfo, Predicate, PredicateSpec, RoleFilter, TransposedEntry, UiOptions};

use crate::predicate::{Bm25Blocks, ScoredBlocks};
use crate::{CompiledSession, ViewError, Views};

/// Most lines one `read_lines` returns.
pub const MAX_READ_LINES: u32 = 20_000;

/// Which view to render.
#[derive(Debug, Clone)]
pub enum ViewKind {
    Full,
    Ui(UiOptions),
    /// The blocks a query selects, with pointers into the full view.
    Adaptive,
    /// The transposed view: every chain's hits in one listing.
    Index,
}

/// What the adaptive and index views select.
#[derive(Debug, Clone)]
pub enum ViewQuery {
    /// A line predicate (regex, literal, terms), with its role filter.
    Lines(PredicateSpec),
    /// Ranked blocks.
    Ranked(RankedQuery),
}

/// Blocks ranked by a query: BM25 over the chain's blocks, or scores computed elsewhere (the
/// search index's embedding similarity), by seq.
#[derive(Debug, Clone)]
pub enum RankedQuery {
    Bm25 { query: String, top_k: usize, roles: Vec<String> },
    Scored { scores: HashMap<Seq, f64>, top_k: usize, roles: Vec<String> },
}

#[derive(Debug, Clone)]
pub struct ViewRequest {
    pub kind: ViewKind,
    /// 1-based chain of the full, UI and adaptive views (0 means 1).
    pub chain: u32,
    /// Required by the adaptive and index views.
    pub query: Option<ViewQuery>,
}

/// A rendered view and what it was rendered from.
#[derive(Debug, Clone)]
pub struct RenderedView {
    pub text: bytes::Bytes,
    /// The file `memex view` would write it to (empty for the index view).
    pub file_name: String,
    pub chains: u32,
    /// Lines of the rendered chain's full view.
    pub full_lines: u32,
    /// The session version it was compiled at.
    pub version: u64,
}

/// The lines a pointer names, with context.
#[derive(Debug, Clone)]
pub struct LinesRead {
    pub lines: Vec<LineInfo>,
    /// 1-based.
    pub chain: u32,
    pub full_lines: u32,
}

impl ViewQuery {
    /// Checks what can be checked before the session is compiled (a regex that does not build).
    pub fn validate(&self) -> Result<(), ViewError> {
        match self {
            ViewQuery::Lines(spec) => {
                spec.build().map(|_| ()).map_err(|e| ViewError::invalid("predicate", e.to_string()))
            }
            ViewQuery::Ranked(_) => Ok(()),
        }
    }
}

fn chain_index(chain: u32, n: usize) -> Result<usize, ViewError> {
    let i = chain.max(1) as usize - 1;
    if i >= n {
        return Err(ViewError::invalid("chain", format!("{chain} is out of range; the trace has {n} chain(s)")));
    }
    Ok(i)
}

impl Views {
    /// Renders a view of the session's current version.
    pub async fn render(
        &self,
        ns: NamespaceId,
        session: SessionId,
        req: ViewRequest,
    ) -> Result<RenderedView, ViewError> {
        let needs_query = matches!(req.kind, ViewKind::Adaptive | ViewKind::Index);
        if needs_query && req.query.is_none() {
            return Err(ViewError::invalid(
                "predicate",
                "the adaptive and index views need a regex, literal, terms or a ranker",
            ));
        }
        if let Some(q) = &req.query {
            q.validate()?;
        }
        let compiled = self.compiled(ns, session).await?;
        let chains = compiled.trace.chains();
        let n = chains.len();
        let version = compiled.session.event_count;
        if n == 0 {
            let empty =
                RenderedView { text: bytes::Bytes::new(), file_name: String::new(), chains: 0, full_lines: 0, version };
            return Ok(empty);
        }
        let predicates = match (&req.query, needs_query) {
            (Some(q), true) => self.predicates(ns, &compiled, q).await?,
            _ => Vec::new(),
        };
        let (text, chain, file_name) = match req.kind {
            ViewKind::Index => {
                let views: Vec<(&Chain, Vec<memex_vcc::Hit>)> =
                    chains.iter().zip(&predicates).map(|(c, p)| (c, c.adaptive_view(p.as_ref()).hits)).collect();
                let entries: Vec<TransposedEntry<'_>> = views
                    .iter()
                    .map(|(c, hits)| TransposedEntry { reference: c.files().full.clone(), chain: c, hits })
                    .collect();
                (bytes::Bytes::from(memex_vcc::transposed_view(&entries)), &chains[0], String::new())
            }
            kind => {
                let i = chain_index(req.chain, n)?;
                let chain = &chains[i];
                match kind {
                    ViewKind::Full => {
                        let before = compiled.weight();
                        let text = compiled.full_view(i).unwrap_or_default();
                        self.reweigh(&compiled, before).await;
                        (text, chain, chain.files().full.clone())
                    }
                    ViewKind::Ui(opts) => {
                        (bytes::Bytes::from(chain.ui_view(&opts).text), chain, chain.files().ui.clone())
                    }
                    _ => {
                        let p = predicates.get(i).ok_or_else(|| ViewError::invalid("predicate", "required"))?;
                        let text = bytes::Bytes::from(chain.adaptive_view(p.as_ref()).text);
                        (text, chain, chain.files().adaptive.clone())
                    }
                }
            }
        };
        Ok(RenderedView { text, file_name, chains: n as u32, full_lines: chain.full_line_count(), version })
    }

    /// The lines a pointer names, widened by `context` lines on each side (within the view).
    pub async fn read_lines(&self, ns: NamespaceId, pointer: Pointer, context: u32) -> Result<LinesRead, ViewError> {
        let LineRange { first, last } = pointer.range;
        if first == 0 {
            return Err(ViewError::invalid("first_line", "lines are numbered from 1"));
        }
        if last < first {
            return Err(ViewError::invalid("last_line", format!("{last} is before first_line {first}")));
        }
        if last - first >= MAX_READ_LINES {
            return Err(ViewError::invalid("last_line", format!("at most {MAX_READ_LINES} lines per call")));
        }
        let compiled = self.compiled(ns, pointer.session).await?;
        let chains = compiled.trace.chains();
        let i = chain_index(pointer.chain, chains.len())?;
        let c = &chains[i];
        let full_lines = c.full_line_count();
        let from = first.saturating_sub(context).max(1);
        let to = last.saturating_add(context).min(full_lines);
        let lines = if from > to { Vec::new() } else { c.read_lines(LineRange { first: from, last: to }) };
        Ok(LinesRead { lines, chain: i as u32 + 1, full_lines })
    }

    /// One predicate per chain of the compiled session.
    async fn predicates(
        &self,
        ns: NamespaceId,
        compiled: &CompiledSession,
        query: &ViewQuery,
    ) -> Result<Vec<Box<dyn Predicate>>, ViewError> {
        let chains = compiled.trace.chains();
        let with_roles = |p: Box<dyn Predicate>, roles: &[String]| -> Box<dyn Predicate> {
            if roles.is_empty() { p } else { Box::new(RoleFilter { roles: roles.to_vec(), inner: p }) }
        };
        match query {
            ViewQuery::Lines(spec) => chains
                .iter()
                .map(|_| {
                    spec.build()
                        .map_err(|e| ViewError::invalid("predicate", e.to_string()))?
                        .ok_or_else(|| ViewError::invalid("predicate", "give exactly one of regex, literal or terms"))
                })
                .collect(),
            ViewQuery::Ranked(RankedQuery::Bm25 { query, top_k, roles }) => chains
                .iter()
                .map(|_| {
                    let p = Bm25Blocks::new(query, *top_k).ok_or_else(|| {
                        ViewError::invalid("predicate.query", "no searchable term (punctuation only)")
                    })?;
                    Ok(with_roles(Box::new(p), roles))
                })
                .collect(),
            ViewQuery::Ranked(RankedQuery::Scored { scores, top_k, roles }) => {
                // Scores are by event; blocks know the input record they came from.
                let seqs: Vec<Seq> = scores.keys().copied().collect();
                let mut by_line: HashMap<u32, f64> = HashMap::new();
                for (seq, line) in
                    self.source_lines(ns, SessionId(compiled.session.id), compiled.is_imported(), &seqs).await?
                {
                    if let Some(&score) = scores.get(&seq) {
                        by_line.entry(line).and_modify(|s| *s = s.max(score)).or_insert(score);
                    }
                }
                Ok(chains
                    .iter()
                    .map(|chain| {
                        let by_block: HashMap<usize, f64> = chain
                            .blocks()
                            .iter()
                            .enumerate()
                            .filter_map(|(i, b)| Some((i, *by_line.get(&b.source_line())?)))
                            .collect();
                        with_roles(Box::new(ScoredBlocks { scores: by_block, top_k: *top_k }), roles)
                    })
                    .collect())
            }
        }
    }
}
