//! Tests of the shared-prefix measurement (`pack_prefix`).
use super::*;

#[test]
fn the_common_prefix_ends_on_a_character_boundary() {
    assert_eq!(common_prefix("abcdef", "abcxyz"), 3);
    assert_eq!(common_prefix("", "abc"), 0);
    assert_eq!(common_prefix("abc", "abc"), 3);
    assert_eq!(common_prefix("abc", "abcd"), 3);
    // é is C3 A9, è is C3 A8: the shared lead byte is not a character of its own.
    assert_eq!(common_prefix("café au lait", "cafè au lait"), 3);
    // Past the eight-byte steps, and a four-byte character differing in its last byte.
    let long = "0123456789abcdefghij";
    assert_eq!(common_prefix(&format!("{long}😀x"), &format!("{long}😁x")), long.len());
    assert_eq!(common_prefix(&format!("{long}😀x"), &format!("{long}😀y")), long.len() + 4);
    let (a, b) = ("日本語のテキスト", "日本語の文章");
    let n = common_prefix(a, b);
    assert_eq!(&a[..n], "日本語の");
    assert!(b.is_char_boundary(n));
}

#[test]
fn fraction_stats_give_the_mean_and_nearest_rank_quantiles() {
    let mut s = FractionStats::default();
    assert_eq!((s.mean(), s.quantile(0.5)), (None, None));
    for f in [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0] {
        s.add(f);
    }
    assert_eq!(s.count(), 10);
    assert!((s.mean().expect("values") - 0.55).abs() < 1e-12);
    assert_eq!(s.quantile(0.5), Some(0.5));
    assert_eq!(s.quantile(0.1), Some(0.1));
    assert_eq!(s.quantile(0.11), Some(0.2));
    assert_eq!(s.quantile(1.0), Some(1.0));
    // Out of range values are clamped; quantiles are kept to the basis point.
    let mut t = FractionStats::default();
    t.add(1.7);
    t.add(-0.2);
    t.add(0.123_456);
    assert_eq!(t.quantile(1.0), Some(1.0));
    assert_eq!(t.quantile(0.0), Some(0.0));
    assert_eq!(t.quantile(0.5), Some(0.1235));
}

#[test]
fn a_window_pairs_neighbouring_turns_even_one_out_of_order() {
    let mut w: VecDeque<(u32, char)> = VecDeque::new();
    assert!(window_insert(&mut w, 0, 'a').is_empty());
    assert_eq!(window_insert(&mut w, 1, 'b'), vec![('a', 'b')]);
    // Turn 3 answered before turn 2: turn 2 then pairs with both.
    assert!(window_insert(&mut w, 3, 'd').is_empty());
    assert_eq!(window_insert(&mut w, 2, 'c'), vec![('b', 'c'), ('c', 'd')]);
    assert_eq!(w.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![2, 3]);
    // A turn that failed (4) breaks the chain: 3 and 5 are not consecutive.
    assert!(window_insert(&mut w, 5, 'f').is_empty());
    assert_eq!(window_insert(&mut w, 6, 'g'), vec![('f', 'g')]);
    // Two out of order: turn 7 comes after 8 and 9; 9 pushed 7's predecessor 6 out of the
    // window, so only (7, 8) is counted.
    window_insert(&mut w, 8, 'i');
    window_insert(&mut w, 9, 'j');
    assert_eq!(window_insert(&mut w, 7, 'h'), vec![('h', 'i')]);
}

fn pack(text: &str, blocks: &[(&str, &str, u32)], tokens: u32) -> pb::Pack {
    pb::Pack {
        text: text.to_owned(),
        tokens,
        tokenizer: "o200k_base".into(),
        blocks: blocks
            .iter()
            .map(|(kind, text, tokens)| pb::PackBlock {
                kind: (*kind).to_owned(),
                text: (*text).to_owned(),
                tokens: *tokens,
                budget: 0,
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn the_first_difference_is_placed_in_its_block_by_bytes_in_full_answers() {
    let t = Tokenizer::O200kBase;
    let blocks = |tail: &str, user: &str| {
        let system = "## system\nbe brief\n";
        let text = format!("{system}\n{tail}\n{user}");
        let tokens = t.count(&text) as u32;
        let b = [("system", system, t.count(system) as u32), ("memory", "", 0), ("tail", tail, 5), ("user", user, 5)];
        Seen::of(pack(&text, &b, tokens))
    };
    let a = blocks("## recent turns\nran the tests\n", "## user\nwhat now? q1\n");
    let b = blocks("## recent turns\nran the tests\nfixed it\n", "## user\nwhat now? q2\n");
    assert_eq!(a.layout.kinds(), vec!["system", "tail", "user"]);
    let m = measure(&a, &b);
    assert_eq!(m.first_difference, "tail");
    let shared = "## system\nbe brief\n\n## recent turns\nran the tests\n";
    assert_eq!(m.shared_tokens, t.count(shared));
    assert_eq!(m.pack_tokens, b.tokens);
    assert!((m.fraction() - t.count(shared) as f64 / f64::from(b.tokens)).abs() < 1e-12);
    // Only the user message differs.
    let c = blocks("## recent turns\nran the tests\nfixed it\n", "## user\nwhat now? q3\n");
    let bc = measure(&b, &c);
    assert_eq!(bc.first_difference, "user");
    // Block by block: system and tail unchanged, the user message shares its first 19 bytes.
    let same: Vec<(&str, bool)> = bc.reuse.iter().map(|r| (r.kind.as_str(), r.same)).collect();
    assert_eq!(same, vec![("system", true), ("tail", true), ("user", false)]);
    assert!((bc.reuse[2].prefix - 19.0 / 21.0).abs() < 1e-12);
    // The tail grew: its old text is its prefix.
    let grown = measure(&a, &b).reuse[1].prefix;
    assert!((grown - "## recent turns\nran the tests\n".len() as f64 / 39.0).abs() < 1e-12);
    // Basic answers carry no block texts: no block-by-block figures.
    let basic = |text: &str| Seen::of(pack(text, &[("system", "", 3), ("user", "", 4)], 8));
    assert!(measure(&basic("ab"), &basic("ac")).reuse.is_empty());
    assert_eq!(measure(&c, &c).first_difference, IDENTICAL);
    assert_eq!(measure(&c, &c).fraction(), 1.0);
}

#[test]
fn basic_answers_place_the_first_difference_by_token_position() {
    // Blocks of 100, 50 and 20 tokens; the pack's 172 tokens give the separators 1 each.
    let layout =
        Layout::of(&pack("x", &[("system", "", 100), ("task_state", "", 0), ("tail", "", 50), ("user", "", 20)], 172));
    assert_eq!(layout.kinds(), vec!["system", "tail", "user"]);
    assert_eq!(layout.block_at(0, 40, 172), "system");
    assert_eq!(layout.block_at(0, 100, 172), "system");
    assert_eq!(layout.block_at(0, 102, 172), "tail");
    assert_eq!(layout.block_at(0, 151, 172), "tail");
    assert_eq!(layout.block_at(0, 160, 172), "user");
    assert_eq!(layout.block_at(0, 500, 172), "user");
    assert_eq!(Layout::of(&pack("x", &[], 1)).block_at(0, 0, 1), END);
}

#[test]
fn prefix_stats_sum_up_pairs() {
    let mut s = PrefixStats::default();
    assert!(s.lines().contains("no pair"));
    let blocks = vec![("system".to_owned(), 100), ("tail".to_owned(), 300)];
    let reuse = |same: bool, prefix: f64| vec![BlockReuse { kind: "tail".into(), same, prefix }];
    s.add(&PairMeasure {
        shared_tokens: 300,
        pack_tokens: 400,
        first_difference: "tail".into(),
        blocks: blocks.clone(),
        reuse: reuse(false, 0.2),
    });
    s.add(&PairMeasure {
        shared_tokens: 100,
        pack_tokens: 400,
        first_difference: "system".into(),
        blocks: blocks.clone(),
        reuse: reuse(true, 1.0),
    });
    let j = s.json();
    assert_eq!(j["pairs"], 2);
    assert_eq!(j["mean"], 0.5);
    assert_eq!(j["p50"], 0.25);
    assert_eq!(j["p10"], 0.25);
    assert_eq!(j["first_difference"]["tail"], 1);
    assert_eq!(j["first_difference"]["system"], 1);
    assert_eq!(j["block_tokens_mean"]["tail"], 300.0);
    assert_eq!(j["shared_tokens_mean"], 200.0);
    assert_eq!(j["block_reuse"]["tail"]["same"], 0.5);
    assert_eq!(j["block_reuse"]["tail"]["prefix"], 0.6);
    assert!(s.lines().contains("mean 50.0% of the pack's tokens"));
    assert!(s.lines().contains("tail 50% (prefix 60%)"), "{}", s.lines());
}
