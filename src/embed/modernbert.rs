//! ModernBERT sentence embeddings (gte-modernbert-base, modernbert-embed-base) on the packed
//! ModernBERT encoder, with the pooling, projection, normalization and prompts their
//! directory declares (the text side is the BERT embedders', `packed`).

use std::path::{Path, PathBuf};

use ndarray::Array2;

use super::builder::EmbedderBuilder;
use super::layout::PoolingMode;
use super::packed::PackedTexts;
use super::{Embedder, Role};
use crate::models::engine::{EncoderEngine, EncoderFamily, PackedEncoder};
use crate::models::layers::dense::Output;
use crate::models::modernbert::config::ModernBertConfig;
use crate::models::modernbert::encoder::{ModernBertEncoder, ModernBertWeights};
use crate::models::{ModelDir, ModelPool, Precision, CONFIG_FILE};
use crate::{Error, Result};

/// A ModernBERT bi-encoder loaded from a local sentence-transformers (or plain transformers)
/// directory: `config.json` with `model_type` `modernbert` (the transformers 4.x spelling of
/// the attention pattern and rotary thetas, or transformers 5's `layer_types` and
/// `rope_parameters`), `tokenizer.json`, `model.safetensors` (a bare `ModernBertModel`, or a
/// task model's `model.*` tensors), and the sentence-transformers modules
/// [`BertEmbedder`](super::BertEmbedder) reads, with the same rules: pooling modes, Dense and
/// Normalize modules, `max_seq_length`, prompts by [`Role`] and what is refused.
///
/// The encoder is transformers 5's `ModernBertModel`: token embeddings and a layer norm, then
/// pre-norm layers with rotary position embeddings (a theta for the global layers and one for
/// the sliding-window layers), global attention every `global_attn_every_n_layers` layers and
/// attention within `local_attention / 2` tokens on either side in the others, a GeGLU MLP,
/// and a final norm. Texts are prefixed with their role's prompt, tokenized as `[CLS] text
/// [SEP]`, cut on the right to `max_seq_length` tokens and run *packed* (no padding is
/// computed; attention stays within each text, windows counted from its first token), in
/// batches under a token budget; rows come back in input order. Linear layers run in f32 or,
/// with [`Precision::Int8`], in int8; bf16 is refused.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// ```no_run
/// use rerank::{Embedder, ModernBertEmbedder};
/// let embedder = ModernBertEmbedder::from_dir("models/gte-modernbert-base")?;
/// let q = embedder.embed_query("what is the capital of China?")?;
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!(q.len(), d.len());
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct ModernBertEmbedder {
    encoder: EncoderEngine<ModernBertEncoder>,
    /// The layout, tokenizer and batching (shared with the other encoder embedders).
    text: PackedTexts,
    pool: ModelPool,
    /// The model directory, for [`Embedder::id`].
    dir: PathBuf,
    /// [`Embedder::id`], computed on first use (it reads the weights once).
    id: std::sync::OnceLock<Option<String>>,
}

/// Options for [`ModernBertEmbedder`]; checked by [`build`](EmbedderBuilder::build).
pub type ModernBertEmbedderBuilder = EmbedderBuilder<ModernBertEmbedder>;

impl EmbedderBuilder<ModernBertEmbedder> {
    /// Checks the options, then loads the model directory.
    pub fn build(self) -> Result<ModernBertEmbedder> {
        self.options.validate("ModernBertEmbedder", 2)?;
        ModernBertEmbedder::load(self)
    }
}

impl ModernBertEmbedder {
    /// Loads a model directory with default options (see [`ModernBertEmbedder::builder`]).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// A builder for a model directory.
    pub fn builder(dir: impl AsRef<Path>) -> ModernBertEmbedderBuilder {
        EmbedderBuilder::new(dir.as_ref())
    }

    fn load(builder: ModernBertEmbedderBuilder) -> Result<Self> {
        let options = &builder.options;
        let model_dir = ModelDir::open(&builder.dir)?;
        let dir = model_dir.path();
        let config_path = dir.join(CONFIG_FILE);
        let value = model_dir.config()?;
        match value.get("model_type").and_then(|v| v.as_str()) {
            Some("modernbert") => {}
            other => {
                return Err(Error::model(format!(
                    "{}: model_type {other:?} is not modernbert (load_embedder picks the \
                     loader for each model_type)",
                    config_path.display()
                )))
            }
        }
        let config = ModernBertConfig::from_value(&value, &config_path)?;
        // The sizes config.json gives are checked against the weights before anything
        // (the sentence-transformers modules included) is read with them.
        let weights = ModernBertWeights::open(&model_dir)?;
        weights.check_config(&config)?;
        let (hidden, positions, vocab) = (config.hidden, config.max_positions, config.vocab);
        let text = PackedTexts::load(&builder, &model_dir, hidden, positions, vocab)?;
        let encoder = EncoderEngine::load(options, &model_dir, EncoderFamily::ModernBert, || {
            ModernBertEncoder::load(&weights, config, options.precision)
        })?;
        Ok(ModernBertEmbedder {
            encoder,
            text,
            pool: options.thread_pool("modernbert")?,
            dir: dir.to_path_buf(),
            id: std::sync::OnceLock::new(),
        })
    }

    /// The longest input in tokens, `[CLS]` and `[SEP]` included; longer texts are truncated.
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

    /// The token ids the model sees for `text` as a document (`[CLS] ... [SEP]`, truncated).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        self.token_ids_as(text, Role::Document)
    }

    /// The token ids the model sees for `text` as `role`: its prompt, then the text.
    pub fn token_ids_as(&self, text: &str, role: Role) -> Result<Vec<u32>> {
        self.text.token_ids_as(text, role)
    }
}

impl PackedEncoder for ModernBertEncoder {
    fn hidden(&self) -> usize {
        self.config().hidden
    }

    fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        self.forward(rows, output)
    }
}

impl Embedder for ModernBertEmbedder {
    fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
        self.pool
            .install(|| self.text.embed(&self.encoder, texts, role))
    }

    fn dim(&self) -> usize {
        self.text.layout.dim()
    }

    /// `modernbert-` and the first 16 bytes (hex) of the SHA-256 of `config.json`,
    /// `tokenizer.json`, `model.safetensors`, `max_length`, the precision (unless f32) and,
    /// unless the model is mean pooling + normalization with no prompts, the pooling, the
    /// steps after it, lower-casing and both prompts (as [`BertEmbedder`](super::BertEmbedder)'s).
    fn id(&self) -> Option<String> {
        self.id
            .get_or_init(|| {
                self.text
                    .id("modernbert", &self.dir, self.encoder.precision())
            })
            .clone()
    }
}

impl std::fmt::Debug for ModernBertEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModernBertEmbedder")
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
        check::<ModernBertEmbedder>();
    }
}
