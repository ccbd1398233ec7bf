//! A pack's layout as recorded beside it (`context_packs.layout`), with what it is valid for:
//! the session's next pack keeps it in place only when it is built the same way.
use memex_pack::{AgentRole, Budgets, Layout, PackParams};
use memex_tokens::Tokenizer;

/// A pack's layout as recorded beside it, with what it is valid for.
#[derive(serde::Serialize, serde::Deserialize)]
struct LayoutRecord {
    key: String,
    layout: Layout,
}

/// What a layout is valid for: packs of another tokenizer, task, role or budgets lay out afresh.
pub(crate) fn layout_key(
    tokenizer: Tokenizer,
    task: Option<&str>,
    role: AgentRole,
    b: &Budgets,
    p: &PackParams,
) -> String {
    format!(
        "1|{}|{}|{role:?}|{}|{}|{}|{}",
        tokenizer.name(),
        task.unwrap_or(""),
        b.tail,
        b.retrieval,
        p.stable_share,
        p.tail_refill
    )
}

/// The recorded layout, if it is for `key`. One that does not parse (a later format) is
/// ignored: the pack is laid out afresh, never refused.
pub(crate) fn read_layout(bytes: &[u8], key: &str) -> Option<Layout> {
    serde_json::from_slice::<LayoutRecord>(bytes).ok().filter(|r| r.key == key).map(|r| r.layout)
}

pub(crate) fn write_layout(key: &str, layout: &Layout) -> Option<Vec<u8>> {
    serde_json::to_vec(&LayoutRecord { key: key.to_owned(), layout: layout.clone() }).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_is_read_back_only_for_packs_built_the_same_way() {
        let layout = Layout { tail_from: Some((41, true)), stable: Vec::new(), terms: vec!["checksum".into()] };
        let p = PackParams::default();
        let key = layout_key(Tokenizer::O200kBase, Some("t"), AgentRole::Solo, &Budgets::default(), &p);
        let bytes = write_layout(&key, &layout).expect("serializes");
        assert_eq!(read_layout(&bytes, &key), Some(layout));
        let other_budget = Budgets { tail: 4000, ..Budgets::default() };
        for other in [
            layout_key(Tokenizer::Cl100kBase, Some("t"), AgentRole::Solo, &Budgets::default(), &p),
            layout_key(Tokenizer::O200kBase, None, AgentRole::Solo, &Budgets::default(), &p),
            layout_key(Tokenizer::O200kBase, Some("t"), AgentRole::Planner, &Budgets::default(), &p),
            layout_key(Tokenizer::O200kBase, Some("t"), AgentRole::Solo, &other_budget, &p),
            layout_key(
                Tokenizer::O200kBase,
                Some("t"),
                AgentRole::Solo,
                &Budgets::default(),
                &PackParams { tail_refill: 1.0, ..p },
            ),
        ] {
            assert_eq!(read_layout(&bytes, &other), None, "{other}");
        }
        // A record that does not parse is no layout, not an error.
        assert_eq!(read_layout(b"{\"v\": 9}", &key), None);
    }
}
