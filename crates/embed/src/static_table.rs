//! A static embedding table distilled from all-MiniLM-L6-v2 (the model2vec recipe): each
//! vocabulary token's vector is MiniLM's output for that token alone, less the table's mean; a
//! text's vector is the mean of its tokens' vectors, L2-normalised. No transformer runs at
//! embedding time, so a text costs microseconds instead of tens of milliseconds: what lets every
//! pack of a fleet carry a query vector, and a backlog of a million events drain in minutes.
//! It keeps about half of MiniLM's nearest neighbours (notes/rust-stack.md §3.5): a first tier,
//! with MiniLM's vectors computed behind it.
//!
//! Distillation (about 25 s on 2 cores) runs once, from the MiniLM weights on disk; the table is
//! written next to them in the model2vec layout (`model.safetensors` holding `embeddings`
//! [vocab × dim], `tokenizer.json`, `config.json`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{Device, Tensor};
use futures::future::BoxFuture;
use tokenizers::{Tokenizer, TruncationParams};

use crate::{EmbedError, Embedder, MiniLm, ModelInfo};

/// Tokens of a text that count (a tool output's first few hundred tokens say what it is about).
const MAX_TOKENS: usize = 512;
/// Texts embedded inline; larger batches go to the blocking pool.
const INLINE_TEXTS: usize = 4;
/// The tensor name of the model2vec layout.
const TENSOR: &str = "embeddings";

/// The static table. Cheap to clone.
#[derive(Clone)]
pub struct StaticTable {
    inner: Arc<Table>,
    info: ModelInfo,
}

struct Table {
    /// Row `i` is token `i`'s vector: `vectors[i * dim .. (i + 1) * dim]`.
    vectors: Vec<f32>,
    dim: usize,
    tokens: Prefixes,
}

/// A text's first [`MAX_TOKENS`] token ids, exactly those `tokenizer.encode(text, false)` would
/// give, without tokenizing all of a long text. The tokenizer reads a whole text before it
/// truncates, and a tool output can be megabytes; this tokenizes a prefix cut at ASCII whitespace
/// (4 KiB first, four times longer each round) until it holds the first [`MAX_TOKENS`] tokens.
/// A BERT tokenizer gives a prefix cut at whitespace the whole text's first ids, since its
/// normaliser maps each character alone (keeping these four as a space) and its pre-tokenizer
/// splits at every space, so no token spans one; the test `prefixes_give_the_ids_of_the_whole_text`
/// checks it over real traces. Another tokenizer (a SentencePiece one marks a word's leading
/// space in its tokens) reads the whole text.
struct Prefixes {
    tokenizer: Tokenizer,
    /// Whether a prefix cut at whitespace gives the whole text's first ids: a BERT normaliser
    /// (or none) and a pre-tokenizer that splits at whitespace.
    by_prefix: bool,
    /// [`FIRST_PREFIX`]; tests cut shorter prefixes, so that cuts fall everywhere.
    first: usize,
}

/// The first prefix tokenized, in bytes: about twice what 512 tokens of prose or code take.
const FIRST_PREFIX: usize = 4096;

impl Prefixes {
    fn new(tokenizer: Tokenizer) -> Prefixes {
        use tokenizers::normalizers::NormalizerWrapper as N;
        use tokenizers::pre_tokenizers::PreTokenizerWrapper as P;
        let by_prefix = matches!(tokenizer.get_normalizer(), None | Some(N::BertNormalizer(_)))
            && matches!(
                tokenizer.get_pre_tokenizer(),
                Some(P::BertPreTokenizer(_) | P::Whitespace(_) | P::WhitespaceSplit(_))
            );
        Prefixes { tokenizer, by_prefix, first: FIRST_PREFIX }
    }

    fn ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let mut cut = self.first;
        loop {
            if !self.by_prefix || cut >= text.len() {
                return self.encode(text);
            }
            // An ASCII byte is never inside a multi-byte character, so `end` is a boundary.
            let end = text.as_bytes()[cut..]
                .iter()
                .position(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                .map_or(text.len(), |i| cut + i);
            let ids = self.encode(&text[..end])?;
            if ids.len() >= MAX_TOKENS || end == text.len() {
                return Ok(ids);
            }
            cut = cut.saturating_mul(4);
        }
    }

    /// Truncated to [`MAX_TOKENS`] by the tokenizer's own settings.
    fn encode(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let enc = self.tokenizer.encode(text, false).map_err(|e| EmbedError::Inference(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }
}

/// The table's tokenizer settings: no padding (a PAD row would join the mean), the first
/// [`MAX_TOKENS`] tokens.
fn table_settings(mut tokenizer: Tokenizer) -> Result<Tokenizer, EmbedError> {
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..Default::default() }))
        .map_err(load_err)?;
    Ok(tokenizer)
}

fn load_err(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(e.to_string())
}

impl StaticTable {
    /// The name a table distilled from `model` tags its vectors with.
    pub fn name_for(model: &str) -> String {
        format!("{model}-static")
    }

    /// Loads a table written by [`StaticTable::distill`] (or any model2vec directory with a
    /// WordPiece tokenizer).
    pub fn load(dir: &Path, name: String) -> Result<StaticTable, EmbedError> {
        let read =
            |f: &str| std::fs::read(dir.join(f)).map_err(|e| load_err(format!("{}: {e}", dir.join(f).display())));
        let tokenizer = table_settings(Tokenizer::from_bytes(read("tokenizer.json")?).map_err(load_err)?)?;
        let tensors =
            candle_core::safetensors::load_buffer(&read("model.safetensors")?, &Device::Cpu).map_err(load_err)?;
        let table = tensors.get(TENSOR).ok_or_else(|| load_err(format!("{}: no `{TENSOR}` tensor", dir.display())))?;
        let (rows, dim) = table.dims2().map_err(load_err)?;
        let vectors = table.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(load_err)?;
        if rows == 0 || dim == 0 || tokenizer.get_vocab_size(true) > rows {
            return Err(load_err(format!("{}: a {rows} x {dim} table does not cover the vocabulary", dir.display())));
        }
        Ok(StaticTable {
            inner: Arc::new(Table { vectors, dim, tokens: Prefixes::new(tokenizer) }),
            info: ModelInfo { name, dim },
        })
    }

    /// The table at `dir`, distilled from `minilm` (loaded from `minilm_dir`) first when `dir`
    /// holds none. Concurrent callers each distill and the first rename wins: the tables are equal.
    pub fn load_or_distill(dir: &Path, minilm_dir: &Path, name: String) -> Result<StaticTable, EmbedError> {
        // A table written once is never changed (`distill` renames it into place whole), so it is
        // read without the lock: its directory may be read-only (a container image ships it).
        if dir.join("model.safetensors").is_file() {
            return StaticTable::load(dir, name);
        }
        // One distillation at a time per table (processes starting together wait for the first).
        let lock_path = PathBuf::from(format!("{}.lock", dir.display()));
        if let Some(parent) = lock_path.parent() {
            std::fs::create_dir_all(parent).map_err(load_err)?;
        }
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| load_err(format!("{}: {e}", lock_path.display())))?;
        lock.lock().map_err(load_err)?;
        if !dir.join("model.safetensors").is_file() {
            let minilm = MiniLm::load(minilm_dir, crate::MiniLmOptions::default())?;
            tracing::info!(from = %minilm_dir.display(), to = %dir.display(), "distilling the static embedding table (once)");
            let started = std::time::Instant::now();
            StaticTable::distill(&minilm, dir)?;
            tracing::info!(secs = started.elapsed().as_secs_f64(), "static embedding table written");
        }
        StaticTable::load(dir, name)
    }

    /// Distils a table from `minilm`: every vocabulary token run alone (`[CLS] token [SEP]`),
    /// pooled, less the mean of all rows. Written to a temporary directory, then renamed to `out`.
    pub fn distill(minilm: &MiniLm, out: &Path) -> Result<(), EmbedError> {
        let tokenizer_json = minilm.tokenizer_json()?;
        let tokenizer = Tokenizer::from_bytes(tokenizer_json.as_bytes()).map_err(load_err)?;
        let id = |t: &str| tokenizer.token_to_id(t).ok_or_else(|| load_err(format!("the tokenizer has no {t}")));
        let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
        let vocab = tokenizer.get_vocab_size(true) as u32;
        let mut rows: Vec<f32> = Vec::with_capacity(vocab as usize * minilm.info().dim);
        for start in (0..vocab).step_by(512) {
            let batch: Vec<Vec<u32>> = (start..(start + 512).min(vocab)).map(|t| vec![cls, t, sep]).collect();
            for v in minilm.embed_ids(&batch)? {
                rows.extend(v);
            }
        }
        let dim = minilm.info().dim;
        let mut mean = vec![0f64; dim];
        for row in rows.chunks(dim) {
            for (m, x) in mean.iter_mut().zip(row) {
                *m += f64::from(*x);
            }
        }
        mean.iter_mut().for_each(|m| *m /= f64::from(vocab.max(1)));
        for row in rows.chunks_mut(dim) {
            for (x, m) in row.iter_mut().zip(&mean) {
                *x -= *m as f32;
            }
        }
        let table = Tensor::from_vec(rows, (vocab as usize, dim), &Device::Cpu).map_err(load_err)?;
        let tmp = PathBuf::from(format!("{}.tmp-{}", out.display(), std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(load_err)?;
        candle_core::safetensors::save(&HashMap::from([(TENSOR.to_owned(), table)]), tmp.join("model.safetensors"))
            .map_err(load_err)?;
        std::fs::write(tmp.join("tokenizer.json"), &tokenizer_json).map_err(load_err)?;
        std::fs::write(tmp.join("config.json"), br#"{"normalize": true, "distilled_from": "all-MiniLM-L6-v2"}"#)
            .map_err(load_err)?;
        match std::fs::rename(&tmp, out) {
            Ok(()) => Ok(()),
            // Another process finished first: its table is the same.
            Err(_) if out.join("model.safetensors").is_file() => {
                let _ = std::fs::remove_dir_all(&tmp);
                Ok(())
            }
            Err(e) => Err(load_err(format!("{}: {e}", out.display()))),
        }
    }

    /// Embeds on the calling thread (cheap: a tokenizer pass and a mean of rows).
    pub fn embed_sync(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|t| self.inner.embed_one(t)).collect()
    }
}

impl Table {
    fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut v = vec![0f32; self.dim];
        let mut n = 0usize;
        for id in self.tokens.ids(text)? {
            let at = id as usize * self.dim;
            if let Some(row) = self.vectors.get(at..at + self.dim) {
                v.iter_mut().zip(row).for_each(|(a, b)| *a += b);
                n += 1;
            }
        }
        if n > 0 {
            crate::normalize(&mut v);
        }
        Ok(v)
    }
}

impl Embedder for StaticTable {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move {
            if texts.len() <= INLINE_TEXTS {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                return self.embed_sync(&refs);
            }
            let inner = self.inner.clone();
            tokio::task::spawn_blocking(move || texts.iter().map(|t| inner.embed_one(t)).collect())
                .await
                .map_err(|e| EmbedError::Inference(e.to_string()))?
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use memex_rank::cosine;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("memex-static-{name}-{}-{}", std::process::id(), rand_suffix()))
    }

    fn rand_suffix() -> u128 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    }

    #[test]
    fn a_distilled_table_reloads_and_embeds_as_the_mean_of_its_tokens() {
        let m = crate::minilm::tiny_random("tiny", 8, &["the", "cat", "sat", "stock", "fell"]).unwrap();
        let dir = tmp("tiny");
        StaticTable::distill(&m, &dir).unwrap();
        let t = StaticTable::load(&dir, "tiny-static".into()).unwrap();
        assert_eq!(t.info(), &ModelInfo { name: "tiny-static".into(), dim: 8 });
        let v = t.embed_sync(&["the cat sat", "cat", "the cat sat"]).unwrap();
        let norm: f32 = v[0].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        assert_eq!(v[0], v[2], "deterministic");
        assert!(cosine(&v[0], &v[1]) < 0.9999, "a text is not its one token");
        // Distilling again gives the same table, byte for byte.
        let again = tmp("tiny-again");
        StaticTable::distill(&m, &again).unwrap();
        assert_eq!(
            std::fs::read(dir.join("model.safetensors")).unwrap(),
            std::fs::read(again.join("model.safetensors")).unwrap()
        );
        for d in [dir, again] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// The real table keeps MiniLM's sense of similarity (about half of its neighbours, §3.5).
    #[test]
    fn the_table_of_minilm_ranks_paraphrases_above_unrelated_text() {
        let Some(model_dir) = crate::test_model_dir() else { return };
        // Where `memex model distill` (make test) puts it: distilled here only if it is not there.
        let dir = PathBuf::from(format!("{}-static", model_dir.display()));
        let t = StaticTable::load_or_distill(&dir, &model_dir, "all-MiniLM-L6-v2-static".into()).unwrap();
        let v = t
            .embed_sync(&["the cat sat on the rug", "a kitten was resting on the carpet", "stock prices fell sharply"])
            .unwrap();
        assert!(
            cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]) + 0.1,
            "{} vs {}",
            cosine(&v[0], &v[1]),
            cosine(&v[0], &v[2])
        );
    }

    /// The real tokenizer with the table's settings, as `StaticTable::load` sets them.
    fn real_tokenizer() -> Option<Tokenizer> {
        let dir = crate::test_model_dir()?;
        Some(table_settings(Tokenizer::from_file(dir.join("tokenizer.json")).unwrap()).unwrap())
    }

    fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            serde_json::Value::Object(o) => o.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }

    /// Prefixes give exactly the ids the tokenizer gives the whole text (truncated to MAX_TOKENS),
    /// over the strings of the first 400 records of each VCC fixture trace (messages, tool
    /// outputs, code) and the characters where a cut could differ: Unicode spaces, control
    /// characters the normaliser removes, combining marks after a space, CJK, special tokens,
    /// over-long words and texts.
    #[test]
    fn prefixes_give_the_ids_of_the_whole_text() {
        let Some(tokenizer) = real_tokenizer() else { return };
        let prefixes = Prefixes::new(tokenizer.clone());
        assert!(prefixes.by_prefix, "MiniLM's tokenizer is a BERT one");
        // Cuts after 2, 8, 32... bytes: every text is read in several prefixes.
        let short = Prefixes { first: 2, ..Prefixes::new(tokenizer.clone()) };
        let mut texts: Vec<String> = vec![
            String::new(),
            " \t\n\r ".into(),
            "a\u{85}b c\u{a0}d e\u{2003}f g\u{3000}h".into(),
            "x\u{0}y \u{1}z \u{fffd}w \u{1c}v\u{1f}u".into(),
            "caf\u{e9} cafe\u{301} \u{301}accent \u{301} tail\u{301}".into(),
            "\u{4e2d}\u{6587}\u{5b57} mixed\u{4e2d}text".into(),
            "[CLS] a[SEP]b [MASK] [PAD][UNK] [sep]".into(),
            format!("{} short", "a".repeat(150)),
            "\u{130}stanbul \u{3a3}\u{39f}\u{3a3} straße ﬁne".into(),
            "don't \"quoted\" (paren) path/to/file.rs:12:3 foo::bar() x=1;y=2".into(),
            "word ".repeat(700),
            // A first prefix with few tokens (one over-long word): the next, longer, is read.
            format!("{} {}", "x".repeat(5_000), "more words ".repeat(400)),
            format!("{}\u{e9}{}", "y".repeat(4_095), " z".repeat(600)),
            "alpha\tbeta\r\ngamma\n\ndelta".into(),
        ];
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vcc/tests/fixtures/traces");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
            .unwrap()
            .map(|d| d.unwrap().path())
            .filter(|d| d.is_dir())
            .flat_map(|d| std::fs::read_dir(d).unwrap())
            .map(|f| f.unwrap().path())
            .filter(|f| f.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        files.sort();
        for f in files.iter().take(40) {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            for line in text.lines().take(400) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
                    strings(&v, &mut texts);
                }
            }
        }
        assert!(texts.len() > 5_000, "{} texts", texts.len());
        let mut long = 0;
        for (i, t) in texts.iter().enumerate() {
            let whole = tokenizer.encode(t.as_str(), false).unwrap();
            long += usize::from(whole.get_ids().len() == MAX_TOKENS);
            for p in [&prefixes, &short] {
                assert_eq!(
                    p.ids(t).unwrap(),
                    whole.get_ids(),
                    "text {i}: {:?}",
                    t.chars().take(200).collect::<String>()
                );
            }
        }
        assert!(long > 10, "texts cut at MAX_TOKENS: {long}");
    }
}
