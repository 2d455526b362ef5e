//! Qwen3 as an embedder (Qwen3-Embedding): the reranker's decoder without its head, the
//! final-normed hidden state of each text's last token, then the directory's modules.

use std::path::{Path, PathBuf};

use ndarray::Array2;

use super::builder::{
    encode_texts, load_tokenizer, model_id, token_ids, EmbedderBuilder, TextTokenizer,
};
use super::layout::{Layout, PoolingMode};
use super::{Embedder, Role, DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET};
use crate::models::engine::DecoderEngine;
use crate::models::qwen3::{DecoderFamily, Qwen3Config};
use crate::models::{plan_packed_batches, ModelDir, ModelPool, Precision};
use crate::{Error, Result};

/// A Qwen3 embedding model (Qwen3-Embedding-0.6B / 4B / 8B) loaded from a local
/// sentence-transformers directory.
///
/// The directory holds `config.json` (`Qwen3ForCausalLM` or `Qwen3Model`), `tokenizer.json`
/// and `model.safetensors` (or shards; tensor names with or without the `model.` prefix), and
/// the sentence-transformers modules: a `lasttoken` Pooling (the only pooling a causal model's
/// embedding is defined by here), then any Dense and Normalize modules; the prompts of
/// `config_sentence_transformers.json` by [`Role`] (Qwen3-Embedding: an
/// `Instruct: ...\nQuery:` prompt on queries, none on documents).
///
/// The same decoder family loads Qwen2 (`model_type` `qwen2`: gte-Qwen2, q/k/v biases),
/// Llama (`llama`: `LlamaModel` or `LlamaForCausalLM`, biases when `attention_bias`) and
/// Mistral (`mistral`: `MistralModel` as intfloat/e5-mistral-7b-instruct publishes it, or
/// `MistralForCausalLM`; `sliding_window` on every layer) embedders, without Qwen3's q/k norms.
///
/// Each text is prefixed with its role's prompt, tokenized with the tokenizer's own special
/// tokens (Qwen3-Embedding's appends `<|endoftext|>`, whose state is the embedding) and cut on
/// the right to `max_seq_length` tokens, as sentence-transformers does. Texts are packed
/// (no padding, so left and right padding give the same vectors) into forward passes under a
/// token budget; texts that start with the same tokens (queries behind one instruction) share
/// them within a pass. Only each text's last token is carried through the last layer.
///
/// ```no_run
/// use rerank::{Embedder, Qwen3Embedder};
/// let embedder = Qwen3Embedder::from_dir("models/Qwen3-Embedding-0.6B")?;
/// let q = embedder.embed_query("what is the capital of China?")?;
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!(q.len(), d.len());
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct Qwen3Embedder {
    model: DecoderEngine,
    tokenizer: TextTokenizer,
    layout: Layout,
    precision: Precision,
    token_budget: usize,
    max_batch_size: usize,
    pool: ModelPool,
    /// The model directory, for [`Embedder::id`].
    dir: PathBuf,
    /// [`Embedder::id`], computed on first use (it reads the weights once).
    id: std::sync::OnceLock<Option<String>>,
}

/// Options for [`Qwen3Embedder`]; checked by [`build`](EmbedderBuilder::build).
pub type Qwen3EmbedderBuilder = EmbedderBuilder<Qwen3Embedder>;

impl EmbedderBuilder<Qwen3Embedder> {
    /// Checks the options, then loads the model directory.
    pub fn build(self) -> Result<Qwen3Embedder> {
        self.options.validate("Qwen3Embedder", 1)?;
        self.no_tasks("Qwen3Embedder")?;
        Qwen3Embedder::load(self)
    }
}

impl Qwen3Embedder {
    /// Loads a model directory with default options (see [`Qwen3Embedder::builder`]).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// A builder for a model directory.
    pub fn builder(dir: impl AsRef<Path>) -> Qwen3EmbedderBuilder {
        EmbedderBuilder::new(dir.as_ref())
    }

    fn load(builder: Qwen3EmbedderBuilder) -> Result<Self> {
        let options = &builder.options;
        let model_dir = ModelDir::open(&builder.dir)?;
        let dir = model_dir.path();
        let (config_path, config_text, raw) = model_dir.config_text()?;
        // Qwen2 (gte-Qwen2), Llama and Mistral (e5-mistral) decoders are the same family with
        // other biases and norms.
        let family = raw
            .get("model_type")
            .and_then(|v| v.as_str())
            .and_then(DecoderFamily::from_model_type)
            .unwrap_or(DecoderFamily::Qwen3);
        let config = Qwen3Config::from_text_at(&config_path, &config_text, family)?;
        if config.sequence_classifier {
            return Err(Error::model(format!(
                "{}: {} is a sequence classifier (an LLM reranker converted to sequence \
                 classification), not an embedding model; it loads as a reranker (load_reranker)",
                config_path.display(),
                family.classifier_architecture()
            )));
        }
        let positions = config
            .max_position_embeddings
            .unwrap_or(crate::models::qwen3::config::MAX_POSITIONS);
        let mut layout = Layout::read(&model_dir, config.hidden_size, positions)?;
        builder.apply(&mut layout);
        if layout.modes != [PoolingMode::LastToken] {
            let modes: Vec<&str> = layout.modes.iter().map(|m| m.as_str()).collect();
            return Err(Error::model(format!(
                "{}: pooling {modes:?} is not supported for a Qwen3 embedder (only lasttoken, \
                 as Qwen3-Embedding's 1_Pooling/config.json says); a directory without \
                 modules.json is not an embedding model",
                dir.display()
            )));
        }
        let max_seq_length = layout.max_seq_length;
        if max_seq_length > positions || max_seq_length < 1 {
            return Err(Error::model(format!(
                "max_length {max_seq_length} must be between 1 and max_position_embeddings \
                 {positions} ({})",
                config_path.display()
            )));
        }
        let (precision, device) = (options.precision, options.device);
        let vocab = config.vocab_size.unwrap_or(usize::MAX);
        let (tokenizer, model) = rayon::join(
            || load_tokenizer(&model_dir, &layout, vocab),
            || DecoderEngine::load(dir, config, max_seq_length, precision, device, false),
        );
        Ok(Qwen3Embedder {
            model: model?,
            tokenizer: tokenizer?,
            layout,
            precision: options.precision,
            token_budget: options.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            max_batch_size: options.max_batch_size.unwrap_or(DEFAULT_MAX_BATCH_SIZE),
            pool: options.thread_pool("qwen3-embedder")?,
            dir: dir.to_path_buf(),
            id: std::sync::OnceLock::new(),
        })
    }

    /// The longest input in tokens, special tokens included; longer texts are truncated.
    pub fn max_length(&self) -> usize {
        self.layout.max_seq_length
    }

    /// The number format of the decoder's matrices.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The prompt put before texts of `role`, if any.
    pub fn prompt(&self, role: Role) -> Option<&str> {
        self.layout.prompts.get(role)
    }

    /// The token ids the model sees for `text` as `role` (prompt and special tokens
    /// included, truncated): a parity-test hook.
    pub fn token_ids_as(&self, text: &str, role: Role) -> Result<Vec<u32>> {
        token_ids(&self.tokenizer, &self.layout, text, role)
    }

    fn embed_in_pool(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
        let mut out = Array2::zeros((texts.len(), self.layout.dim()));
        if texts.is_empty() {
            return Ok(out);
        }
        let encodings = encode_texts(&self.tokenizer, &self.layout, texts, role)?;
        let ids: Vec<&[u32]> = encodings.iter().map(Vec::as_slice).collect();
        if let Some(i) = ids.iter().position(|row| row.is_empty()) {
            return Err(Error::InvalidInput(format!(
                "text {i} has no tokens (the tokenizer adds no end token): a Qwen3 embedding \
                 is the state of a text's last token"
            )));
        }
        let lengths: Vec<usize> = ids.iter().map(|row| row.len()).collect();
        let h = self.model.config().hidden_size;
        let plan = plan_packed_batches(&lengths, self.token_budget, self.max_batch_size);
        let batches: Vec<Vec<&[u32]>> = plan
            .iter()
            .map(|b| b.indices.iter().map(|&i| ids[i]).collect())
            .collect();
        self.model.last_rows_batches(&batches, &mut |n, last| {
            for (state, &i) in last.chunks_exact(h).zip(&plan[n].indices) {
                let v = self.layout.finish(state, 1, 0);
                out.row_mut(i).iter_mut().zip(v).for_each(|(o, v)| *o = v);
            }
            Ok(())
        })?;
        Ok(out)
    }
}

impl Embedder for Qwen3Embedder {
    fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
        self.pool.install(|| self.embed_in_pool(texts, role))
    }

    fn dim(&self) -> usize {
        self.layout.dim()
    }

    /// `qwen3emb-` and the first 16 bytes (hex) of the SHA-256 of `config.json`,
    /// `tokenizer.json`, the weights (or their shard index), `max_length`, the precision, the
    /// pooling and steps after it and both prompts.
    fn id(&self) -> Option<String> {
        self.id
            .get_or_init(|| {
                let length = (self.layout.max_seq_length as u64).to_le_bytes();
                let layout = self.layout.describe();
                let extra = [
                    &length[..],
                    self.precision.as_str().as_bytes(),
                    layout.as_bytes(),
                ];
                model_id("qwen3emb", &self.dir, &extra)
            })
            .clone()
    }

    /// The length of [`token_ids_as`](Self::token_ids_as).
    fn token_count(&self, text: &str, role: Role) -> Option<usize> {
        self.token_ids_as(text, role).ok().map(|ids| ids.len())
    }
}

impl std::fmt::Debug for Qwen3Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qwen3Embedder")
            .field("dim", &self.layout.dim())
            .field("max_length", &self.layout.max_seq_length)
            .field("precision", &self.precision)
            .field("dir", &self.dir)
            .finish()
    }
}
