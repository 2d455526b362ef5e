//! BERT-family sentence embeddings (sentence-transformers bi-encoders such as all-MiniLM-L6-v2,
//! bge-small-en-v1.5, e5-small-v2, and on XLM-RoBERTa multilingual-e5 and bge-m3's dense
//! vector) on the packed encoder, with the pooling, projection,
//! normalization and prompts their directory declares (see `layout`).

use std::path::{Path, PathBuf};

use ndarray::Array2;

use super::builder::EmbedderBuilder;
use super::layout::PoolingMode;
use super::packed::PackedTexts;
use super::{Embedder, Role};
use crate::models::bert::encoder::{Encoder, EncoderConfig, EncoderWeights, Output, Sequence};
use crate::models::engine::{EncoderEngine, EncoderFamily, PackedEncoder};
use crate::models::{ModelDir, ModelPool, Precision, CONFIG_FILE};
use crate::{Error, Result};

/// Default [`ModelOptions::token_budget`](crate::models::ModelOptions::token_budget) (texts x longest text; no padding is computed).
pub const DEFAULT_TOKEN_BUDGET: usize = 8192;

/// Default [`ModelOptions::max_batch_size`](crate::models::ModelOptions::max_batch_size).
pub const DEFAULT_MAX_BATCH_SIZE: usize = 128;

/// A BERT bi-encoder loaded from a local sentence-transformers (or plain transformers)
/// directory.
///
/// The directory holds `config.json` (a BERT config), `tokenizer.json` and
/// `model.safetensors` (memory-mapped while loading), and, for a sentence-transformers model:
/// - `modules.json`: Transformer, Pooling, then any Dense and Normalize modules, in order;
/// - `1_Pooling/config.json`: pooling modes `cls`, `mean`, `max`, `mean_sqrt_len_tokens`,
///   `lasttoken` (several are concatenated, as sentence-transformers does), and
///   `include_prompt`;
/// - a Dense module's `config.json` (`in_features`, `out_features`, `bias`,
///   `activation_function` Identity or Tanh) and `model.safetensors`;
/// - `sentence_bert_config.json`: `max_seq_length`, `do_lower_case`;
/// - `config_sentence_transformers.json`: `prompts` (the query prompt is `prompts.query`, the
///   document prompt `prompts.document`, `passage` or `corpus`, either falling back to
///   `default_prompt_name`) and `similarity_fn_name`.
///
/// Without `modules.json` it does what sentence-transformers does with a plain transformers
/// directory: mean pooling, no normalization, no prompts, `max_seq_length` the smaller of
/// `max_position_embeddings` and `model_max_length` in `tokenizer_config.json`. Anything it
/// cannot reproduce (another module, pooling mode or activation, a similarity that does not
/// rank as cosine) is refused at load with an [`Error::Model`] naming the file and the key.
///
/// Each text is prefixed with its role's prompt ([`Role`]; builder methods override the
/// prompts), lower-cased if the model says so, tokenized as `[CLS] text [SEP]` and
/// truncated on the right to `max_seq_length` tokens (the truncation and padding baked into
/// `tokenizer.json` are ignored, as sentence-transformers does), run through the encoder,
/// pooled over its real tokens (leaving the prompt's tokens out when `include_prompt` is
/// false), then projected and normalized as the modules say. Texts are sorted by length and
/// grouped into batches under a token budget; each batch runs *packed* (the texts' tokens
/// concatenated, attention within each text), so no compute goes to padding. Rows come back
/// in input order.
///
/// One instance can be shared (`Arc`) and called from many threads at once. With
/// [`ModelOptions::threads`](crate::models::ModelOptions::threads) the work runs in a dedicated thread pool of that size;
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
/// let q = embedder.embed_query("what ranks documents?")?;
/// assert_eq!(q.len(), 384);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct BertEmbedder {
    encoder: EncoderEngine<Encoder>,
    /// The layout, tokenizer and batching (shared with the other encoder embedders).
    text: PackedTexts,
    pool: ModelPool,
    /// The model directory, for [`Embedder::id`].
    dir: PathBuf,
    family: Family,
    /// [`Embedder::id`], computed on first use (it reads the weights once).
    id: std::sync::OnceLock<Option<String>>,
}

/// Options for [`BertEmbedder`]; checked by [`build`](EmbedderBuilder::build).
pub type BertEmbedderBuilder = EmbedderBuilder<BertEmbedder>;

impl EmbedderBuilder<BertEmbedder> {
    /// Checks the options, then loads the model directory.
    pub fn build(self) -> Result<BertEmbedder> {
        self.options.validate("BertEmbedder", 2)?;
        BertEmbedder::load(self)
    }
}

impl BertEmbedder {
    /// Loads a model directory with default options (see [`BertEmbedder::builder`]).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// A builder for a model directory.
    pub fn builder(dir: impl AsRef<Path>) -> BertEmbedderBuilder {
        EmbedderBuilder::new(dir.as_ref())
    }

    fn load(builder: BertEmbedderBuilder) -> Result<Self> {
        let options = &builder.options;
        let model_dir = ModelDir::open(&builder.dir)?;
        let dir = model_dir.path();
        let config_path = dir.join(CONFIG_FILE);
        let value = model_dir.config()?;
        let family = Family::of(&value, &config_path)?;
        let config = EncoderConfig::from_value(&value, &config_path, family.roberta_positions())?;
        let text = PackedTexts::load(
            &builder,
            &model_dir,
            config.hidden,
            config.max_length(),
            config.vocab,
        )?;
        let engine_family = match family {
            Family::Bert => EncoderFamily::Bert,
            Family::Roberta => EncoderFamily::Roberta,
        };
        let encoder = EncoderEngine::load(options, &model_dir, engine_family, || {
            let weights = EncoderWeights::open(&model_dir, &[family.prefix()])?;
            Encoder::load(&weights, config, options.precision)
        })?;

        let pool = options.thread_pool("bert")?;

        Ok(BertEmbedder {
            encoder,
            text,
            pool,
            dir: dir.to_path_buf(),
            family,
            id: std::sync::OnceLock::new(),
        })
    }

    /// The longest input in tokens, `[CLS]` and `[SEP]` included; longer texts are truncated.
    pub fn max_length(&self) -> usize {
        self.text.layout.max_seq_length
    }

    /// The number format of the encoder's linear layers ([`ModelOptions::precision`](crate::models::ModelOptions::precision)).
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

    /// `similarity_fn_name` of `config_sentence_transformers.json` (`None` when absent). The
    /// crate ranks by cosine; a model that asks for `dot` or `euclidean` loads only when its
    /// vectors are normalized (where those rank as cosine does).
    pub fn similarity_fn_name(&self) -> Option<&str> {
        self.text.layout.similarity.as_deref()
    }

    /// Whether the directory is a sentence-transformers one (has `modules.json`).
    pub fn is_sentence_transformers(&self) -> bool {
        self.text.layout.sentence_transformers
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

impl PackedEncoder for Encoder {
    fn hidden(&self) -> usize {
        self.config().hidden
    }

    /// One token type (0) per token: the embedders encode single texts.
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

/// The BERT-family encoders the embedder runs, told apart by `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `bert` (all-MiniLM, bge-*-en, e5-*-v2, arctic, mxbai-embed).
    Bert,
    /// `xlm-roberta` (multilingual-e5, bge-m3) and `roberta`: BERT's layers with positions
    /// numbered from `pad_token_id + 1` and one token type.
    Roberta,
}

impl Family {
    /// The family `config.json` names (`model_type`; a config without one is read as BERT).
    fn of(config: &serde_json::Value, file: &Path) -> Result<Self> {
        match config.get("model_type").and_then(|v| v.as_str()) {
            None | Some("bert") => Ok(Family::Bert),
            Some("xlm-roberta" | "roberta") => Ok(Family::Roberta),
            Some(other) => Err(Error::model(format!(
                "{}: unsupported model_type {other:?}; BertEmbedder loads bert, xlm-roberta \
                 and roberta encoders (load_embedder picks the loader for qwen3 and \
                 modernbert)",
                file.display()
            ))),
        }
    }

    /// Whether positions start after the padding id (RoBERTa's numbering).
    fn roberta_positions(self) -> bool {
        self == Family::Roberta
    }

    /// The prefix of the encoder's tensors in a checkpoint with a head (a bare encoder has
    /// none).
    fn prefix(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::Roberta => "roberta",
        }
    }

    /// The prefix of [`Embedder::id`].
    fn id_prefix(self) -> &'static str {
        match self {
            Family::Bert => "bert",
            Family::Roberta => "xlmr",
        }
    }
}

impl Embedder for BertEmbedder {
    fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
        self.pool
            .install(|| self.text.embed(&self.encoder, texts, role))
    }

    fn dim(&self) -> usize {
        self.text.layout.dim()
    }

    /// `bert-` (`xlmr-` for XLM-RoBERTa and RoBERTa) and the first 16 bytes (hex) of the
    /// SHA-256 of `config.json`, `tokenizer.json`, `model.safetensors` and `max_length`: the
    /// same for the same model and settings on any machine. `None` when a file cannot be read.
    ///
    /// Unless the model is mean pooling + normalization with no prompts (all-MiniLM, whose id
    /// is unchanged), the hash also covers the pooling, the Dense and Normalize steps (with
    /// the Dense weights), lower-casing and both prompts, so changing a prompt changes the id.
    /// With [`Precision::Int8`] it also covers the precision (int8 vectors are close to f32
    /// ones, not equal), so stored vectors of one are never read as the other.
    fn id(&self) -> Option<String> {
        self.id
            .get_or_init(|| {
                let (family, precision) = (self.family.id_prefix(), self.encoder.precision());
                self.text.id(family, &self.dir, precision)
            })
            .clone()
    }
}

impl std::fmt::Debug for BertEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertEmbedder")
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
    use crate::models::{plan_batches, ModelOptions};

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
