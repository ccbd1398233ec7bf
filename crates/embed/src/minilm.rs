//! all-MiniLM-L6-v2 (sentence-transformers) run locally with candle on the CPU: BERT, masked mean
//! pooling, L2 normalisation — the sentence-transformers recipe, checked against an independent
//! numpy forward pass to 4 decimals (notes/rust-stack.md §3.2).
//!
//! The packaged `tokenizer.json` pads every input to 128 tokens; mean-pooling over those PAD
//! positions makes unrelated sentences look alike (cos ≈ 0.9). We override it: pad each batch only
//! to its longest member, and pool with the attention mask.

use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use futures::future::BoxFuture;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::{EmbedError, Embedder, ModelInfo};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiniLmOptions {
    /// The name vectors are tagged with.
    pub name: String,
    /// Inputs are truncated to this many tokens (sentence-transformers uses 256 for this model).
    pub max_tokens: usize,
    /// Texts per forward pass; inputs are sorted by length first so a batch pads little.
    pub batch_size: usize,
}

impl Default for MiniLmOptions {
    fn default() -> Self {
        MiniLmOptions { name: "all-MiniLM-L6-v2".into(), max_tokens: 256, batch_size: 32 }
    }
}

/// The local model. Cheap to clone; embedding runs on tokio's blocking pool.
#[derive(Clone)]
pub struct MiniLm {
    inner: Arc<Inner>,
    info: ModelInfo,
}

struct Inner {
    model: BertModel,
    tokenizer: Tokenizer,
    batch_size: usize,
}

fn load_err(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(e.to_string())
}

fn infer_err(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Inference(e.to_string())
}

impl MiniLm {
    /// Loads `config.json`, `tokenizer.json` and `model.safetensors` from `dir` (memory-mapped:
    /// about 0.1 s).
    pub fn load(dir: &Path, opts: MiniLmOptions) -> Result<MiniLm, EmbedError> {
        let read =
            |f: &str| std::fs::read(dir.join(f)).map_err(|e| load_err(format!("{}: {e}", dir.join(f).display())));
        let config: Config = serde_json::from_slice(&read("config.json")?).map_err(load_err)?;
        let tokenizer = Tokenizer::from_bytes(read("tokenizer.json")?).map_err(load_err)?;
        let weights = dir.join("model.safetensors");
        if !weights.is_file() {
            return Err(load_err(format!("{} is missing; run scripts/fetch-model.sh", weights.display())));
        }
        // candle's mmap loader is `unsafe` (the file must not change while mapped); reading the
        // 91 MB into memory once costs ~50 ms and keeps the workspace's `unsafe_code = deny`.
        let bytes = std::fs::read(&weights).map_err(load_err)?;
        let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu).map_err(load_err)?;
        let model = BertModel::load(vb, &config).map_err(load_err)?;
        MiniLm::from_parts(model, tokenizer, config.hidden_size, opts)
    }

    /// A model from parts: tests build a tiny random BERT with a `VarMap`.
    pub fn from_parts(
        model: BertModel,
        mut tokenizer: Tokenizer,
        dim: usize,
        opts: MiniLmOptions,
    ) -> Result<MiniLm, EmbedError> {
        tokenizer.with_padding(Some(PaddingParams { strategy: PaddingStrategy::BatchLongest, ..Default::default() }));
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: opts.max_tokens, ..Default::default() }))
            .map_err(load_err)?;
        Ok(MiniLm {
            inner: Arc::new(Inner { model, tokenizer, batch_size: opts.batch_size.max(1) }),
            info: ModelInfo { name: opts.name, dim },
        })
    }

    /// Embeds on the calling thread (CPU-bound: call from a blocking context).
    pub fn embed_sync(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed(texts)
    }

    /// Vectors of token-id sequences of equal length (special tokens included), as
    /// [`MiniLm::embed_sync`] would give for texts that tokenize to them: what distils a static
    /// table ([`crate::StaticTable`]).
    pub fn embed_ids(&self, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.forward_ids(batch)
    }

    /// The tokenizer, as `tokenizer.json` text (a static table distilled from this model tokenizes
    /// the same way).
    pub fn tokenizer_json(&self) -> Result<String, EmbedError> {
        self.inner.tokenizer.to_string(false).map_err(load_err)
    }

    /// Tokens the model sees for `texts` after truncation, for throughput figures.
    pub fn count_tokens(&self, texts: &[&str]) -> Result<usize, EmbedError> {
        let mut n = 0;
        for t in texts {
            n += self.inner.tokenizer.encode(*t, true).map_err(infer_err)?.get_ids().len();
        }
        Ok(n)
    }
}

impl Inner {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Sort by length so each batch pads to a similar length; answer in the caller's order.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for idx in order.chunks(self.batch_size) {
            let batch: Vec<&str> = idx.iter().map(|&i| texts[i]).collect();
            for (&i, v) in idx.iter().zip(self.forward(&batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    fn forward(&self, batch: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let encodings = self.tokenizer.encode_batch(batch.to_vec(), true).map_err(infer_err)?;
        let dev = &Device::Cpu;
        let ids = encodings
            .iter()
            .map(|e| Tensor::new(e.get_ids(), dev))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(infer_err)?;
        let masks = encodings
            .iter()
            .map(|e| Tensor::new(e.get_attention_mask(), dev))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(infer_err)?;
        self.pooled(ids, masks)
    }

    /// Token ids of equal length, all attended to.
    fn forward_ids(&self, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let dev = &Device::Cpu;
        let ids = batch.iter().map(|b| Tensor::new(b.as_slice(), dev)).collect::<candle_core::Result<Vec<_>>>();
        let masks = batch
            .iter()
            .map(|b| Tensor::new(vec![1u32; b.len()].as_slice(), dev))
            .collect::<candle_core::Result<Vec<_>>>();
        self.pooled(ids.map_err(infer_err)?, masks.map_err(infer_err)?)
    }

    /// Masked mean pooling of the model's output, L2-normalised.
    fn pooled(&self, ids: Vec<Tensor>, masks: Vec<Tensor>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::stack(&ids, 0)?;
            let mask = Tensor::stack(&masks, 0)?;
            let ys = self.model.forward(&ids, &ids.zeros_like()?, Some(&mask))?;
            let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = ys.broadcast_mul(&m)?.sum(1)?;
            let counts = m.sum(1)?.clamp(1e-9, f64::MAX)?;
            let mean = summed.broadcast_div(&counts)?;
            let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
            mean.broadcast_div(&norms)?.to_vec2::<f32>()
        };
        run().map_err(infer_err)
    }
}

impl Embedder for MiniLm {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                inner.embed(&refs)
            })
            .await
            .map_err(infer_err)?
        })
    }
}

/// A tiny BERT with random weights and a word-level tokenizer over `vocab`, for tests that need an
/// embedder but not a meaningful one. The weights are random per call: compare its vectors only
/// with vectors from the same instance.
pub fn tiny_random(name: &str, dim: usize, vocab: &[&str]) -> Result<MiniLm, EmbedError> {
    use std::collections::HashMap;

    use candle_nn::VarMap;
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::pre_tokenizers::whitespace::Whitespace;

    let mut words: HashMap<String, u32> = HashMap::new();
    for (i, w) in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"].iter().chain(vocab).enumerate() {
        words.insert((*w).to_owned(), i as u32);
    }
    let config = Config {
        vocab_size: words.len(),
        hidden_size: dim,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        intermediate_size: dim * 2,
        max_position_embeddings: 64,
        ..Config::default()
    };
    let model_ =
        WordLevel::builder().vocab(words.into_iter().collect()).unk_token("[UNK]".into()).build().map_err(load_err)?;
    let mut tokenizer = Tokenizer::new(model_);
    tokenizer.with_pre_tokenizer(Some(Whitespace {}));
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    let model = BertModel::load(vb, &config).map_err(load_err)?;
    MiniLm::from_parts(model, tokenizer, dim, MiniLmOptions { name: name.into(), max_tokens: 60, batch_size: 8 })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use memex_rank::cosine;

    #[test]
    fn tiny_model_gives_unit_vectors_independent_of_batch_padding() {
        let m = tiny_random("tiny", 16, &["the", "cat", "sat", "stock", "prices", "fell", "on", "mat"]).unwrap();
        let alone = m.embed_sync(&["the cat sat"]).unwrap();
        let batched = m.embed_sync(&["the cat sat", "stock prices fell on the mat the cat sat"]).unwrap();
        assert_eq!(alone[0].len(), 16);
        let norm: f32 = alone[0].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
        // Padding to the batch's longest member must not change a vector (masked pooling).
        assert!(cosine(&alone[0], &batched[0]) > 0.9999, "padding leaked into pooling");
    }

    #[test]
    fn real_model_matches_the_reference_numbers() {
        let Some(dir) = crate::test_model_dir() else { return };
        let m = MiniLm::load(&dir, MiniLmOptions::default()).unwrap();
        assert_eq!(m.info().dim, 384);
        let v = m
            .embed_sync(&["the cat sat", "a cat was sitting", "stock prices fell", "the feline rested on the rug"])
            .unwrap();
        // notes/rust-stack.md §3.2, checked there against a numpy forward pass.
        assert!((cosine(&v[0], &v[1]) - 0.8578).abs() < 2e-3, "{}", cosine(&v[0], &v[1]));
        assert!((cosine(&v[0], &v[2]) - 0.0976).abs() < 2e-3, "{}", cosine(&v[0], &v[2]));
        assert!((cosine(&v[0], &v[3]) - 0.5107).abs() < 2e-3, "{}", cosine(&v[0], &v[3]));
        // One at a time equals batched (the padding gotcha of notes §3.4).
        let one = m.embed_sync(&["the cat sat"]).unwrap();
        assert!(cosine(&one[0], &v[0]) > 0.9999);
    }
}
