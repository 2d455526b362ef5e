//! GTE and NomicBERT sentence embeddings (gte-multilingual-base, gte-base-en-v1.5,
//! nomic-embed-text-v1.5) on the packed GTE encoder, with the pooling, projection,
//! normalization and prompts their directory declares (the text side is the BERT embedders',
//! `packed`).

use std::path::{Path, PathBuf};

use ndarray::Array2;

use super::builder::EmbedderBuilder;
use super::layout::PoolingMode;
use super::packed::PackedTexts;
use super::{Embedder, Role};
use crate::models::engine::{EncoderEngine, EncoderFamily, PackedEncoder};
use crate::models::gte::config::{GteConfig, Spelling};
use crate::models::gte::encoder::GteEncoder;
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{EncoderWeights, Sequence};
use crate::models::{ModelDir, ModelPool, Precision, CONFIG_FILE};
use crate::{Error, Result};

/// A GTE or NomicBERT bi-encoder loaded from a local sentence-transformers (or plain
/// transformers) directory: `config.json` with `model_type` `new` (the hub's GTE remote code:
/// gte-multilingual-base, gte-base-en-v1.5 / -large-en-v1.5), `gte` (transformers 5's GTE) or
/// `nomic_bert` (nomic-embed-text-v1 / v1.5, in nomic's keys or transformers 5's),
/// `tokenizer.json`, `model.safetensors`, and the sentence-transformers modules
/// [`BertEmbedder`](super::BertEmbedder) reads, with the same rules: pooling modes, Dense and
/// Normalize modules, `max_seq_length`, prompts by [`Role`] and what is refused.
///
/// The encoder is BERT with rotary position embeddings and a gated MLP, post-norm: token (and
/// token type) embeddings and a layer norm, then per layer
/// `x = LN(x + O · attention(RoPE(Q x), RoPE(K x), V x))` and
/// `x = LN(x + down · (act(gate · x) * (up · x)))` (GELU for GTE, SiLU for NomicBERT's
/// SwiGLU). GTE's NTK-scaled RoPE is read as new-impl computes it. Texts are prefixed with their
/// role's prompt, tokenized, cut on the right to `max_seq_length` tokens and run *packed* (no
/// padding is computed), in batches under a token budget; rows come back in input order. Linear
/// layers run in f32 or, with [`Precision::Int8`], in int8; bf16 and the candle engine are
/// refused.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// ```no_run
/// use rerank::{Embedder, GteEmbedder};
/// let embedder = GteEmbedder::from_dir("models/nomic-embed-text-v1.5")?;
/// let q = embedder.embed_query("what is the capital of China?")?; // "search_query: ..."
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!(q.len(), d.len());
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct GteEmbedder {
    encoder: EncoderEngine<GteEncoder>,
    /// The layout, tokenizer and batching (shared with the other encoder embedders).
    text: PackedTexts,
    pool: ModelPool,
    /// The model directory, for [`Embedder::id`].
    dir: PathBuf,
    /// [`Embedder::id`], computed on first use (it reads the weights once).
    id: std::sync::OnceLock<Option<String>>,
}

/// Options for [`GteEmbedder`]; checked by [`build`](EmbedderBuilder::build).
pub type GteEmbedderBuilder = EmbedderBuilder<GteEmbedder>;

impl EmbedderBuilder<GteEmbedder> {
    /// Checks the options, then loads the model directory.
    pub fn build(self) -> Result<GteEmbedder> {
        self.options.validate("GteEmbedder", 2)?;
        GteEmbedder::load(self)
    }
}

impl GteEmbedder {
    /// Loads a model directory with default options (see [`GteEmbedder::builder`]).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// A builder for a model directory.
    pub fn builder(dir: impl AsRef<Path>) -> GteEmbedderBuilder {
        EmbedderBuilder::new(dir.as_ref())
    }

    fn load(builder: GteEmbedderBuilder) -> Result<Self> {
        let options = &builder.options;
        let model_dir = ModelDir::open(&builder.dir)?;
        let dir = model_dir.path();
        let config_path = dir.join(CONFIG_FILE);
        let value = model_dir.config()?;
        let spelling = Spelling::of(&value).ok_or_else(|| {
            Error::model(format!(
                "{}: model_type {:?} is not new, gte or nomic_bert (load_embedder picks the \
                 loader for each model_type)",
                config_path.display(),
                value.get("model_type")
            ))
        })?;
        let config = GteConfig::from_value(&value, spelling, &config_path)?;
        let text = PackedTexts::load(
            &builder,
            &model_dir,
            config.hidden,
            config.max_positions,
            config.vocab,
        )?;
        let encoder = EncoderEngine::load(options, &model_dir, EncoderFamily::Gte, || {
            let weights = EncoderWeights::open(&model_dir, config.layout.prefixes())?;
            GteEncoder::load(&weights, config, options.precision)
        })?;
        Ok(GteEmbedder {
            encoder,
            text,
            pool: options.thread_pool("gte")?,
            dir: dir.to_path_buf(),
            id: std::sync::OnceLock::new(),
        })
    }

    /// The longest input in tokens, special tokens included; longer texts are truncated.
    pub fn max_length(&self) -> usize {
        self.text.layout.max_seq_length
    }

    /// The number format of the encoder's linear layers.
    pub fn precision(&self) -> Precision {
        self.encoder.precision()
    }

    /// The number of threads of the dedicated pool, if one was configured.
    pub fn threads(&self) -> Option<usize> {
        self.pool.threads()
    }

    /// The pooling modes, in the order their vectors are concatenated.
    pub fn pooling(&self) -> &[PoolingMode] {
        &self.text.layout.modes
    }

    /// The prompt put before texts of `role` (`None`: none).
    pub fn prompt(&self, role: Role) -> Option<&str> {
        self.text.layout.prompts.get(role)
    }

    /// `similarity_fn_name` of `config_sentence_transformers.json` (`None` when absent).
    pub fn similarity_fn_name(&self) -> Option<&str> {
        self.text.layout.similarity.as_deref()
    }

    /// The token ids the model sees for `text` as a document (special tokens included,
    /// truncated).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        self.token_ids_as(text, Role::Document)
    }

    /// The token ids the model sees for `text` as `role`: its prompt, then the text.
    pub fn token_ids_as(&self, text: &str, role: Role) -> Result<Vec<u32>> {
        self.text.token_ids_as(text, role)
    }
}

impl PackedEncoder for GteEncoder {
    fn hidden(&self) -> usize {
        self.config().hidden
    }

    /// Single texts: every token of type 0.
    fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let zeros = vec![0u32; longest];
        let seqs: Vec<Sequence<'_>> = rows
            .iter()
            .map(|ids| Sequence {
                ids,
                types: &zeros[..ids.len()],
            })
            .collect();
        self.forward(&seqs, output)
    }
}

impl Embedder for GteEmbedder {
    fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
        self.pool
            .install(|| self.text.embed(&self.encoder, texts, role))
    }

    fn dim(&self) -> usize {
        self.text.layout.dim()
    }

    /// `gte-` and the first 16 bytes (hex) of the SHA-256 of `config.json`, `tokenizer.json`,
    /// `model.safetensors`, `max_length`, the precision (unless f32) and, unless the model is
    /// mean pooling + normalization with no prompts, the pooling, the steps after it,
    /// lower-casing and both prompts (as [`BertEmbedder`](super::BertEmbedder)'s).
    fn id(&self) -> Option<String> {
        self.id
            .get_or_init(|| self.text.id("gte", &self.dir, self.encoder.precision()))
            .clone()
    }
}

impl std::fmt::Debug for GteEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GteEmbedder")
            .field("dim", &self.text.layout.dim())
            .field("max_length", &self.text.layout.max_seq_length)
            .field("pooling", &self.text.layout.modes)
            .field("query_prompt", &self.prompt(Role::Query))
            .field("document_prompt", &self.prompt(Role::Document))
            .field("token_budget", &self.text.token_budget)
            .field("max_batch_size", &self.text.max_batch_size)
            .field("precision", &self.precision())
            .field("threads", &self.threads())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<GteEmbedder>();
    }
}
