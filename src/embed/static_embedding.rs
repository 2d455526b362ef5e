//! Static embeddings (sentence-transformers' `StaticEmbedding`: static-retrieval-mrl-en-v1,
//! model2vec's potion models): a text's vector is the mean of its tokens' trained vectors, no
//! transformer, then the Dense and Normalize modules the directory declares.

use ndarray::Array2;
use rayon::prelude::*;
use tokenizers::Tokenizer;

use super::builder::{model_id, EmbedderBuilder};
use super::layout::{Layout, MODULES_FILE};
use super::{Embedder, Role};
use crate::models::layers::weights::Weights;
use crate::models::{ModelDir, ModelPool, TOKENIZER_FILE};
use crate::{Error, Result};

/// Options for a [`StaticEmbedder`]; checked by [`build`](EmbedderBuilder::build).
pub type StaticEmbedderBuilder = EmbedderBuilder<StaticEmbedder>;

/// A static-embedding model loaded from a local sentence-transformers directory whose
/// `modules.json` starts with a `StaticEmbedding` module: its `tokenizer.json` and
/// `model.safetensors` at the directory's root (as sentence-transformers 6 saves it) or in the
/// module's folder (`0_StaticEmbedding/`, as the published models have it), then any Dense and
/// Normalize modules, and the prompts of `config_sentence_transformers.json`.
///
/// As sentence-transformers computes it: the text (after its role's prompt) is tokenized
/// without special tokens and without truncation (a `max_length` option truncates), and its
/// vector is the mean of its tokens' rows of `embedding.weight` (`nn.EmbeddingBag` in mean
/// mode; a text without tokens gets zeros). Weights saved in model2vec's keys are folded as
/// sentence-transformers folds them: row `t` is `embeddings[mapping[t]] * weights[t]`.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// ```no_run
/// use rerank::{Embedder, StaticEmbedder};
/// let embedder = StaticEmbedder::from_dir("models/static-retrieval-mrl-en-v1")?;
/// let v = embedder.embed_query("what is the capital of China?")?;
/// assert_eq!(v.len(), 1024);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct StaticEmbedder {
    tokenizer: Tokenizer,
    /// `(vocab, dim)`, row-major.
    table: Vec<f32>,
    dim: usize,
    layout: Layout,
    pool: ModelPool,
    id: Option<String>,
}

/// The embedder is shared between threads.
const _: fn() = || {
    fn check<T: Send + Sync>() {}
    check::<StaticEmbedder>();
};

impl EmbedderBuilder<StaticEmbedder> {
    /// Checks the options, then loads the model directory.
    pub fn build(self) -> Result<StaticEmbedder> {
        self.options.validate("StaticEmbedder", 2)?;
        self.no_tasks("StaticEmbedder")?;
        StaticEmbedder::load(self)
    }
}

impl StaticEmbedder {
    /// Loads a model directory with default options (see `builder`).
    pub fn from_dir(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// A builder for a model directory.
    pub fn builder(dir: impl AsRef<std::path::Path>) -> StaticEmbedderBuilder {
        EmbedderBuilder::new(dir.as_ref())
    }

    fn load(builder: StaticEmbedderBuilder) -> Result<Self> {
        if !builder.options.device.is_cpu() {
            return Err(Error::Config(format!(
                "device {}: a static-embedding model runs on the CPU only (it averages rows \
                 of a table)",
                builder.options.device
            )));
        }
        let dir = ModelDir::folder(&builder.dir)?;
        let path = dir.static_embedding_module()?.ok_or_else(|| {
            Error::model(format!(
                "{}: not a static-embedding model (its first module is not a StaticEmbedding)",
                dir.path().join(MODULES_FILE).display()
            ))
        })?;
        let module = ModelDir::folder(dir.path().join(&path))?;
        let tokenizer_path = module.file(TOKENIZER_FILE)?;
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| Error::tokenizer(format!("{}: {e}", tokenizer_path.display())))?;
        tokenizer.with_padding(None);
        let vocab = tokenizer.get_vocab_size(true);
        let weights = Weights::open(module.path())?;
        let (table, dim) = read_table(&weights, vocab)?;
        let mut layout = Layout::read_static(&dir, dim)?;
        builder.apply(&mut layout);
        if layout.max_seq_length == 0 {
            return Err(Error::Config("max_length must be at least 1".into()));
        }
        let id = static_id(&module, &layout);
        Ok(StaticEmbedder {
            tokenizer,
            table,
            dim,
            layout,
            pool: builder.options.thread_pool("StaticEmbedder")?,
            id,
        })
    }

    /// The token ids averaged for `text` as `role`: its prompt, then the text, without
    /// special tokens.
    pub fn token_ids_as(&self, text: &str, role: Role) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode_fast(self.layout.prepare(text, role), false)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        let mut ids = enc.get_ids().to_vec();
        ids.truncate(self.layout.max_seq_length);
        Ok(ids)
    }

    /// The prompt put before texts of `role` (`None`: none).
    pub fn prompt(&self, role: Role) -> Option<&str> {
        self.layout.prompts.get(role)
    }

    /// `similarity_fn_name` of `config_sentence_transformers.json` (`None` when absent).
    pub fn similarity_fn_name(&self) -> Option<&str> {
        self.layout.similarity.as_deref()
    }

    /// The mean of `ids`' rows, then the Dense and Normalize steps.
    fn vector(&self, ids: &[u32]) -> Vec<f32> {
        let d = self.dim;
        let mut sum = vec![0.0f32; d];
        for &id in ids {
            let row = &self.table[id as usize * d..][..d];
            sum.iter_mut().zip(row).for_each(|(s, v)| *s += v);
        }
        if !ids.is_empty() {
            let n = ids.len() as f32;
            sum.iter_mut().for_each(|s| *s /= n);
        }
        self.layout.finish_pooled(sum)
    }
}

/// The `(vocab, dim)` table of the checkpoint, `dim` and all: `embedding.weight`, or model2vec's
/// `embeddings` (with `mapping` and `weights` when present) folded into it. A table of another
/// height than the tokenizer's vocabulary is an [`Error::Model`] naming the tensor.
fn read_table(w: &Weights, vocab: usize) -> Result<(Vec<f32>, usize)> {
    let folder = w
        .config_path()
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let label = |name: &str| format!("tensor {name} of {folder}");
    // `(rows, dim)` of the 2-D tensor `name`.
    let matrix = |name: &str| -> Result<(usize, usize)> {
        match w.shape(name)? {
            &[rows, dim] => Ok((rows, dim)),
            shape => Err(Error::model(format!(
                "{}: shape {shape:?} is not 2-D",
                label(name)
            ))),
        }
    };
    if w.has("embedding.weight") {
        let (rows, dim) = matrix("embedding.weight")?;
        if rows != vocab {
            return Err(Error::model(format!(
                "{}: {rows} rows, but the tokenizer has {vocab} tokens",
                label("embedding.weight")
            )));
        }
        return Ok((w.f32("embedding.weight", &[rows, dim])?, dim));
    }
    if !w.has("embeddings") {
        return Err(Error::model(format!(
            "{folder}: no embedding.weight (nor model2vec's embeddings)"
        )));
    }
    let (rows, dim) = matrix("embeddings")?;
    let embeddings = w.f32("embeddings", &[rows, dim])?;
    let mapping = match w.has("mapping") {
        true => w.indices("mapping", vocab)?,
        false if rows == vocab => (0..vocab).collect(),
        false => {
            return Err(Error::model(format!(
                "{}: {rows} rows and no mapping, but the tokenizer has {vocab} tokens",
                label("embeddings")
            )))
        }
    };
    if let Some(bad) = mapping.iter().find(|&&m| m >= rows) {
        return Err(Error::model(format!(
            "{}: maps a token to row {bad} of {rows}",
            label("mapping")
        )));
    }
    let scale = match w.has("weights") {
        true => Some(w.f32("weights", &[vocab])?),
        false => None,
    };
    let mut table = vec![0.0f32; vocab * dim];
    table.par_chunks_mut(dim).enumerate().for_each(|(t, row)| {
        row.copy_from_slice(&embeddings[mapping[t] * dim..][..dim]);
        if let Some(s) = &scale {
            row.iter_mut().for_each(|v| *v *= s[t]);
        }
    });
    Ok((table, dim))
}

/// `static-` and a hash of the module's `tokenizer.json` and `model.safetensors` and of the
/// layout (steps, prompts, `max_length`) (`builder::model_id`); `None` when a file cannot be
/// read.
fn static_id(module: &ModelDir, layout: &Layout) -> Option<String> {
    let max_length = format!(";max_length={}", layout.max_seq_length);
    let describe = layout.describe();
    model_id(
        "static",
        module.path(),
        &[describe.as_bytes(), max_length.as_bytes()],
    )
}

impl Embedder for StaticEmbedder {
    fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
        let rows = self.pool.install(|| {
            texts
                .par_iter()
                .map(|t| self.token_ids_as(t, role).map(|ids| self.vector(&ids)))
                .collect::<Result<Vec<_>>>()
        })?;
        let dim = self.layout.dim();
        let flat: Vec<f32> = rows.into_iter().flatten().collect();
        Array2::from_shape_vec((texts.len(), dim), flat)
            .map_err(|e| Error::model(format!("static embeddings: {e}")))
    }

    fn dim(&self) -> usize {
        self.layout.dim()
    }

    /// `static-` and a hash of the module's `tokenizer.json` and `model.safetensors`, the
    /// Dense and Normalize steps, the prompts and `max_length`: the same for the same model and
    /// settings on any machine.
    fn id(&self) -> Option<String> {
        self.id.clone()
    }

    /// The length of [`token_ids_as`](Self::token_ids_as).
    fn token_count(&self, text: &str, role: Role) -> Option<usize> {
        self.token_ids_as(text, role).ok().map(|ids| ids.len())
    }
}

impl std::fmt::Debug for StaticEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticEmbedder")
            .field("dim", &self.layout.dim())
            .field("vocab", &(self.table.len() / self.dim.max(1)))
            .field("query_prompt", &self.layout.prompts.get(Role::Query))
            .field("document_prompt", &self.layout.prompts.get(Role::Document))
            .field("threads", &self.pool.threads())
            .finish()
    }
}
