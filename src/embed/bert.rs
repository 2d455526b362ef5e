//! BERT sentence embeddings (sentence-transformers bi-encoders such as all-MiniLM-L6-v2) on the
//! packed encoder: mean pooling over each text's tokens, then L2 normalization.

use std::path::{Path, PathBuf};

use ndarray::Array2;
use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use super::Embedder;
use crate::models::bert::encoder::{
    mean_pool, Encoder, EncoderConfig, EncoderWeights, Output, Sequence,
};
use crate::models::{
    plan_batches, ModelDir, ModelOptions, ModelPool, Precision, CONFIG_FILE, TOKENIZER_FILE,
};
use crate::{Error, Result};

/// Default [`ModelOptions::token_budget`] (texts x longest text; no padding is computed).
pub const DEFAULT_TOKEN_BUDGET: usize = 8192;

/// Default [`ModelOptions::max_batch_size`].
pub const DEFAULT_MAX_BATCH_SIZE: usize = 128;

/// `max_seq_length` when the directory has no `sentence_bert_config.json`.
const FALLBACK_MAX_SEQ_LENGTH: usize = 512;

/// Torch's `F.normalize` epsilon: norms below it are clamped.
const NORMALIZE_EPS: f32 = 1e-12;

/// A BERT bi-encoder loaded from a local sentence-transformers directory.
///
/// The directory holds `config.json` (a BERT config), `tokenizer.json`, `model.safetensors`
/// (memory-mapped while loading), and optionally `sentence_bert_config.json`
/// (`max_seq_length`) and `1_Pooling/config.json` (must ask for mean pooling).
///
/// Each text is tokenized as `[CLS] text [SEP]`, truncated on the right to `max_seq_length`
/// tokens (the truncation and padding baked into `tokenizer.json` are ignored, as
/// sentence-transformers does), run through the encoder, mean-pooled over its real tokens and
/// L2-normalized. Texts are sorted by length and grouped into batches under a token budget;
/// each batch runs *packed* (the texts' tokens concatenated, attention within each text), so
/// no compute goes to padding. Rows come back in input order.
///
/// One instance can be shared (`Arc`) and called from many threads at once. With
/// [`ModelOptions::threads`] the work runs in a dedicated thread pool of that size;
/// otherwise in the caller's rayon pool (the global one by default).
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::{BertEmbedder, Embedder};
/// let embedder = BertEmbedder::builder("models/all-MiniLM-L6-v2")
///     .options(ModelOptions::default().threads(4))
///     .build()?;
/// let m = embedder.embed(&["hello world", "BM25 is a ranking function"])?;
/// assert_eq!(m.shape(), &[2, 384]);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct BertEmbedder {
    encoder: Encoder,
    tokenizer: Tokenizer,
    dim: usize,
    max_seq_length: usize,
    token_budget: usize,
    max_batch_size: usize,
    pool: ModelPool,
    /// The model directory, for [`Embedder::id`].
    dir: PathBuf,
    /// [`Embedder::id`], computed on first use (it reads the weights once).
    id: std::sync::OnceLock<Option<String>>,
}

/// Options for [`BertEmbedder`]; checked by [`BertEmbedderBuilder::build`].
#[derive(Debug, Clone)]
pub struct BertEmbedderBuilder {
    dir: PathBuf,
    options: ModelOptions,
}

impl BertEmbedderBuilder {
    /// Sets the [`ModelOptions`]. For an embedder, `max_length` is the longest text, `[CLS]`
    /// and `[SEP]` included (default: `max_seq_length` in `sentence_bert_config.json`, else
    /// `min(512, max_position_embeddings)`); `token_budget` defaults to
    /// [`DEFAULT_TOKEN_BUDGET`] and `max_batch_size` to [`DEFAULT_MAX_BATCH_SIZE`].
    pub fn options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// Checks the options, then loads the model directory.
    pub fn build(self) -> Result<BertEmbedder> {
        self.options.validate("BertEmbedder", 2)?;
        BertEmbedder::load(self)
    }
}

/// The fields of `sentence_bert_config.json` this embedder reads.
#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

/// The fields of `1_Pooling/config.json` this embedder reads.
#[derive(Deserialize)]
struct PoolingConfig {
    word_embedding_dimension: Option<usize>,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

/// sentence-transformers' pooling settings, relative to the model directory.
const POOLING_FILE: &str = "1_Pooling/config.json";
/// sentence-transformers' `max_seq_length`, relative to the model directory.
const SENTENCE_BERT_FILE: &str = "sentence_bert_config.json";

/// Reads the fields of `T` from a parsed JSON file (`path` names it in errors).
fn from_value<T: serde::de::DeserializeOwned>(v: serde_json::Value, path: &Path) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::model(format!("{}: {e}", path.display())))
}

impl BertEmbedder {
    /// Loads a model directory with default options (see [`BertEmbedder::builder`]).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// A builder for a model directory.
    pub fn builder(dir: impl AsRef<Path>) -> BertEmbedderBuilder {
        BertEmbedderBuilder {
            dir: dir.as_ref().to_path_buf(),
            options: ModelOptions::default(),
        }
    }

    fn load(builder: BertEmbedderBuilder) -> Result<Self> {
        let options = builder.options;
        let model_dir = ModelDir::open(&builder.dir)?;
        let dir = model_dir.path();
        let config_path = dir.join(CONFIG_FILE);
        let value = model_dir.config()?;
        if let Some(model_type) = value.get("model_type").and_then(|v| v.as_str()) {
            if model_type != "bert" {
                return Err(Error::model(format!(
                    "{}: unsupported model_type {model_type:?}; BertEmbedder loads BERT models",
                    config_path.display()
                )));
            }
        }
        let config = EncoderConfig::from_value(&value, &config_path, false)?;

        let pooling_path = dir.join(POOLING_FILE);
        if let Some(pooling) = model_dir.optional_json(POOLING_FILE)? {
            let pooling: PoolingConfig = from_value(pooling, &pooling_path)?;
            let mean_only = pooling.pooling_mode_mean_tokens
                && !pooling.pooling_mode_cls_token
                && !pooling.pooling_mode_max_tokens
                && !pooling.pooling_mode_mean_sqrt_len_tokens;
            if !mean_only {
                return Err(Error::model(format!(
                    "{}: only mean pooling (pooling_mode_mean_tokens alone) is supported",
                    pooling_path.display()
                )));
            }
            if let Some(d) = pooling.word_embedding_dimension {
                if d != config.hidden {
                    return Err(Error::model(format!(
                        "{}: word_embedding_dimension {d} does not match hidden_size {} in \
                         config.json",
                        pooling_path.display(),
                        config.hidden
                    )));
                }
            }
        }

        let from_st = match model_dir.optional_json(SENTENCE_BERT_FILE)? {
            Some(v) => {
                from_value::<SentenceBertConfig>(v, &dir.join(SENTENCE_BERT_FILE))?.max_seq_length
            }
            None => None,
        };
        let max_seq_length = options
            .max_length
            .or(from_st)
            .unwrap_or(FALLBACK_MAX_SEQ_LENGTH.min(config.max_length()));
        if max_seq_length > config.max_length() || max_seq_length < 2 {
            return Err(Error::model(format!(
                "max_length {max_seq_length} must be between 2 and max_position_embeddings \
                 {} ({})",
                config.max_length(),
                config_path.display()
            )));
        }

        let tokenizer = load_tokenizer(&model_dir, max_seq_length, config.vocab)?;
        let weights = EncoderWeights::open(&model_dir, "bert")?;
        let dim = config.hidden;
        let encoder = Encoder::load(&weights, config, options.precision)?;

        let pool = options.thread_pool("bert")?;

        Ok(BertEmbedder {
            encoder,
            tokenizer,
            dim,
            max_seq_length,
            token_budget: options.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            max_batch_size: options.max_batch_size.unwrap_or(DEFAULT_MAX_BATCH_SIZE),
            pool,
            dir: dir.to_path_buf(),
            id: std::sync::OnceLock::new(),
        })
    }

    /// The longest input in tokens, `[CLS]` and `[SEP]` included; longer texts are truncated.
    pub fn max_length(&self) -> usize {
        self.max_seq_length
    }

    /// The number format of the encoder's linear layers ([`ModelOptions::precision`]).
    pub fn precision(&self) -> Precision {
        self.encoder.precision()
    }

    /// The number of threads of the dedicated pool, if one was configured.
    pub fn threads(&self) -> Option<usize> {
        self.pool.threads()
    }

    /// The token ids the model sees for `text` (`[CLS] ... [SEP]`, truncated).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode_fast(text, true)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    fn embed_in_pool(&self, texts: &[&str]) -> Result<Array2<f32>> {
        let mut out = Array2::zeros((texts.len(), self.dim));
        if texts.is_empty() {
            return Ok(out);
        }
        let encodings = self
            .tokenizer
            .encode_batch_fast(texts.to_vec(), true)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let lengths: Vec<usize> = ids.iter().map(|row| row.len()).collect();
        for batch in plan_batches(&lengths, self.token_budget, self.max_batch_size) {
            let rows: Vec<&[u32]> = batch.indices.iter().map(|&i| ids[i]).collect();
            let pooled = self.forward(&rows)?;
            for (row, &i) in pooled.iter().zip(&batch.indices) {
                out.row_mut(i)
                    .iter_mut()
                    .zip(row)
                    .for_each(|(o, v)| *o = *v);
            }
        }
        Ok(out)
    }

    /// One packed forward pass; returns one normalized embedding per row.
    fn forward(&self, rows: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let zeros = vec![0u32; longest];
        let seqs: Vec<Sequence<'_>> = rows
            .iter()
            .map(|ids| Sequence {
                ids,
                types: &zeros[..ids.len()],
            })
            .collect();
        let hidden = self.encoder.forward(&seqs, Output::AllTokens)?;
        let lens: Vec<usize> = rows.iter().map(|r| r.len()).collect();
        let mut pooled = mean_pool(&hidden, &lens, self.dim);
        for row in &mut pooled {
            l2_normalize(row);
        }
        Ok(pooled)
    }
}

/// Loads `tokenizer.json` with its baked-in padding removed and truncation set to
/// `max_seq_length` tokens (special tokens included), on the right.
fn load_tokenizer(dir: &ModelDir, max_seq_length: usize, vocab_size: usize) -> Result<Tokenizer> {
    let path = dir.path().join(TOKENIZER_FILE);
    let mut tokenizer = dir.tokenizer_within(vocab_size)?;
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_seq_length,
            strategy: TruncationStrategy::LongestFirst,
            direction: TruncationDirection::Right,
            stride: 0,
        }))
        .map_err(|e| Error::tokenizer(format!("{}: {e}", path.display())))?;
    Ok(tokenizer)
}

/// Divides `v` by its L2 norm (clamped below at [`NORMALIZE_EPS`], as torch does).
fn l2_normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(NORMALIZE_EPS);
    v.iter_mut().for_each(|x| *x /= norm);
}

impl Embedder for BertEmbedder {
    fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
        self.pool.install(|| self.embed_in_pool(texts))
    }

    fn dim(&self) -> usize {
        self.dim
    }

    /// `bert-` and the first 16 bytes (hex) of the SHA-256 of `config.json`, `tokenizer.json`,
    /// `model.safetensors` and `max_length`: the same for the same model and settings on any
    /// machine. `None` when a file cannot be read.
    ///
    /// With [`Precision::Int8`] the hash also covers the precision (int8 vectors are close to
    /// f32 ones, not equal), so stored vectors of one are never read as the other; f32 ids are
    /// unchanged.
    fn id(&self) -> Option<String> {
        self.id
            .get_or_init(|| {
                use sha2::{Digest, Sha256};
                let mut hash = Sha256::new();
                for file in [CONFIG_FILE, TOKENIZER_FILE, crate::models::WEIGHTS_FILE] {
                    let mut f = std::fs::File::open(self.dir.join(file)).ok()?;
                    std::io::copy(&mut f, &mut hash).ok()?;
                }
                hash.update((self.max_seq_length as u64).to_le_bytes());
                let precision = self.encoder.precision();
                if precision != Precision::F32 {
                    hash.update(precision.as_str().as_bytes());
                }
                let digest = hash.finalize();
                let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                Some(format!("bert-{hex}"))
            })
            .clone()
    }
}

impl std::fmt::Debug for BertEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertEmbedder")
            .field("dim", &self.dim)
            .field("max_length", &self.max_seq_length)
            .field("token_budget", &self.token_budget)
            .field("max_batch_size", &self.max_batch_size)
            .field("precision", &self.precision())
            .field("threads", &self.threads())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_respect_budget_and_cover_every_index_once() {
        let lens = [5usize, 1, 9, 9, 3, 7, 2, 20, 4];
        let batches: Vec<Vec<usize>> = plan_batches(&lens, 18, 3)
            .into_iter()
            .map(|b| b.indices)
            .collect();
        // longest first: 20 alone (over budget), then 9+9 (2x9 = 18), 7+5 (3x7 = 21 > 18),
        // 4+3+2 (3x4 = 12, then max_batch), 1
        assert_eq!(
            batches,
            vec![vec![7], vec![2, 3], vec![5, 0], vec![8, 4, 6], vec![1]]
        );
        let mut seen: Vec<usize> = batches.concat();
        seen.sort_unstable();
        assert_eq!(seen, (0..lens.len()).collect::<Vec<_>>());
        for b in &batches {
            let longest = b.iter().map(|&i| lens[i]).max().unwrap();
            assert!(b.len() == 1 || b.len() * longest <= 18);
            assert!(b.len() <= 3);
        }
    }

    #[test]
    fn no_batches_for_no_input() {
        assert!(plan_batches(&[], 10, 10).is_empty());
    }

    #[test]
    fn normalize_matches_torch_eps() {
        let mut v = [3.0f32, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = [0.0f32, 0.0];
        l2_normalize(&mut z);
        assert_eq!(z, [0.0, 0.0]);
    }

    #[test]
    fn mean_pool_averages_each_sequence_of_a_packed_batch() {
        // Two sequences of 2 and 3 rows, width 2.
        let hidden = [1f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        let pooled = mean_pool(&hidden, &[2, 3], 2);
        assert_eq!(pooled, vec![vec![2.0, 3.0], vec![7.0, 8.0]]);
    }

    #[test]
    fn missing_directory_and_files_are_named() {
        let e = BertEmbedder::from_dir("does/not/exist").unwrap_err();
        assert!(matches!(e, Error::Model { .. }));
        assert!(e.to_string().contains("does/not/exist"), "{e}");
        let dir = std::env::temp_dir().join(format!("rerank-bert-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = BertEmbedder::from_dir(&dir).unwrap_err();
        assert!(e.to_string().contains("config.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn builder_rejects_bad_options() {
        for b in [
            BertEmbedder::builder(".").options(ModelOptions::default().threads(0)),
            BertEmbedder::builder(".").options(ModelOptions::default().token_budget(0)),
            BertEmbedder::builder(".").options(ModelOptions::default().max_batch_size(0)),
            BertEmbedder::builder(".").options(ModelOptions::default().max_length(1)),
        ] {
            assert!(matches!(b.build(), Err(Error::Config(_))));
        }
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<BertEmbedder>();
    }
}
