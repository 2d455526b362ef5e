//! Late interaction: ColBERT models, which give one vector per token, scored by MaxSim.
//!
//! - [`ColbertEncoder`]: a ColBERT model of PyLate's layout (answerai-colbert-small-v1,
//!   GTE-ModernColBERT-v1, mxbai-edge-colbert) or Stanford's (colbertv2.0) on a BERT or
//!   ModernBERT encoder, or BAAI/bge-m3's ColBERT head on its XLM-R encoder, on the crate's
//!   kernels or candle (`layout` reads the directory);
//! - [`maxsim`]: the late-interaction score of a query's vectors against a document's.

mod layout;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use self::layout::ColbertLayout;
use super::bge_m3;
use super::builder::model_id;
use super::layout::l2_normalize;
use super::load::load_token_encoder;
use super::{Role, DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET};
use crate::models::engine::{EncoderEngine, PackedEncoder};
use crate::models::layers::dense::Output;
use crate::models::{plan_batches, ModelDir, ModelOptions, ModelPool, Precision};
use crate::simd::gemm::{matmul, Mat, Threads};
use crate::{Error, Result};

/// The late-interaction score of a query against a document: for each query vector, its
/// largest dot product with a document vector, summed (ColBERT's MaxSim; PyLate's
/// `colbert_scores` on unpadded vectors). Rows are token vectors; a document without vectors
/// scores 0, and vectors of different widths NaN.
///
/// ```
/// use ndarray::array;
/// let q = array![[1.0f32, 0.0], [0.0, 1.0]];
/// let d = array![[0.6f32, 0.8], [1.0, 0.0]];
/// assert!((rerank::embed::maxsim(q.view(), d.view()) - 1.8).abs() < 1e-6);
/// ```
pub fn maxsim(query: ArrayView2<'_, f32>, document: ArrayView2<'_, f32>) -> f32 {
    if query.ncols() != document.ncols() {
        return f32::NAN;
    }
    if document.nrows() == 0 {
        return 0.0;
    }
    let (query, document) = (query.as_standard_layout(), document.as_standard_layout());
    let (rows, cols, width) = (query.nrows(), document.nrows(), document.ncols());
    let (Some(q), Some(d)) = (query.as_slice(), document.as_slice()) else {
        return f32::NAN;
    };
    // Every query vector against every document vector in one product, then each row's best.
    let mut scores = vec![0.0f32; rows * cols];
    let (q, d) = (Mat::new(q, rows, width), Mat::new(d, cols, width));
    matmul(q, d.t(), &mut scores, cols, 1.0, false, Threads::One);
    scores
        .chunks_exact(cols)
        .map(|row| row.iter().copied().fold(f32::NEG_INFINITY, f32::max))
        .sum()
}

/// Options for a [`ColbertEncoder`]; checked by [`build`](ColbertBuilder::build).
#[derive(Debug, Clone)]
pub struct ColbertBuilder {
    dir: PathBuf,
    options: ModelOptions,
    query_length: Option<usize>,
    document_length: Option<usize>,
}

impl ColbertBuilder {
    /// The model options (threads, batching, precision, device).
    pub fn options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// Tokens per query, prefix and expansion included (default: the model's
    /// `query_length` / `query_maxlen`).
    pub fn query_length(mut self, tokens: usize) -> Self {
        self.query_length = Some(tokens);
        self
    }

    /// The most tokens of a document, prefix included (default: the model's
    /// `document_length` / `doc_maxlen`).
    pub fn document_length(mut self, tokens: usize) -> Self {
        self.document_length = Some(tokens);
        self
    }

    /// Checks the options, then loads the model directory.
    pub fn build(self) -> Result<ColbertEncoder> {
        self.options.validate("ColbertEncoder", 2)?;
        ColbertEncoder::load(self)
    }
}

/// A ColBERT model: one normalized vector per token of a text, queries and documents each
/// with their own prefix token and length, scored by [`maxsim`].
///
/// The directory is PyLate's (sentence-transformers files: `modules.json` with the
/// Transformer and PyLate `Dense` modules, `config_sentence_transformers.json` with
/// `query_prefix`, `document_prefix`, `query_length`, `document_length`,
/// `attend_to_expansion_tokens`, `skiplist_words`) or Stanford's (a BERT checkpoint with
/// `linear.weight` and `artifact.metadata`), over a BERT, XLM-R or ModernBERT encoder; or a
/// BGE-M3 folder (BAAI/bge-m3: an XLM-R encoder with `colbert_linear.safetensors`, which
/// `scripts/convert_bge_m3_heads.py` writes from the published `colbert_linear.pt`).
///
/// BGE-M3 is read as FlagEmbedding 1.4.0's `BGEM3FlagModel` encodes (`layout()` is
/// `bge-m3`): the text as `tokenizer.json` tokenizes it (not stripped, no prefix, no query
/// expansion), cut to 512 tokens by default (FlagEmbedding's `query_max_length` and
/// `passage_max_length`; the builder's lengths change them), every token but the first
/// (`<s>`) giving `normalize(colbert_linear(state))`, `</s>` included. FlagEmbedding's
/// `colbert_score` divides the MaxSim sum by the query's vector count; [`maxsim`] (and the
/// ColBERT reranker) keep the sum, which ranks the documents of one query the same (divide by
/// `query.nrows()` for FlagEmbedding's number).
///
/// A PyLate or Stanford text is stripped, tokenized as `[CLS] text [SEP]` cut to one token
/// short of its length, and its prefix token put after `[CLS]`. A query is then padded to
/// `query_length` with `[MASK]` (query expansion): those tokens attend to the text but are
/// not keys of it unless the model attends to them (`attend_to_expansion_tokens`), and every
/// query position gives a vector. A document gives one vector per token except the
/// skiplist's (punctuation). Each vector is the encoder's state projected by the model's
/// Dense layers (or `linear`) and L2-normalized: what PyLate's `encode` returns.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// ```no_run
/// use rerank::embed::{maxsim, ColbertEncoder};
/// use rerank::Role;
/// let colbert = ColbertEncoder::from_dir("models/answerai-colbert-small-v1")?;
/// let q = colbert.encode(&["what is late interaction?"], Role::Query)?;
/// let d = colbert.encode(&["ColBERT scores every query token against the document."], Role::Document)?;
/// let score = maxsim(q[0].view(), d[0].view());
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct ColbertEncoder {
    encoder: EncoderEngine<Box<dyn PackedEncoder>>,
    /// Tokenizers truncating to one token short of the query and document lengths.
    tokenizers: [Tokenizer; 2],
    layout: ColbertLayout,
    dim: usize,
    pool: ModelPool,
    token_budget: usize,
    max_batch_size: usize,
    dir: PathBuf,
    id: OnceLock<Option<String>>,
}

impl ColbertEncoder {
    /// A builder for a model directory.
    pub fn builder(dir: impl AsRef<Path>) -> ColbertBuilder {
        ColbertBuilder {
            dir: dir.as_ref().to_path_buf(),
            options: ModelOptions::default(),
            query_length: None,
            document_length: None,
        }
    }

    /// Loads a model directory with default options.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// Whether `dir` holds a ColBERT model: PyLate's (`model_type` `ColBERT` in
    /// `config_sentence_transformers.json`) or Stanford's (`artifact.metadata`). A BGE-M3
    /// folder is not one here: it is a dense embedder first ([`load_embedder`] and the
    /// rerankers read it so); [`ColbertEncoder::from_dir`] reads its ColBERT head
    /// ([`is_bge_m3_dir`] tells such a folder).
    ///
    /// [`load_embedder`]: crate::load_embedder
    /// [`is_bge_m3_dir`]: crate::embed::is_bge_m3_dir
    pub fn is_colbert_dir(dir: impl AsRef<Path>) -> bool {
        let dir = dir.as_ref();
        if dir.join("artifact.metadata").is_file() {
            return true;
        }
        std::fs::read_to_string(dir.join("config_sentence_transformers.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v.get("model_type").and_then(|m| m.as_str()) == Some("ColBERT"))
    }

    fn load(builder: ColbertBuilder) -> Result<Self> {
        let options = &builder.options;
        let model_dir = ModelDir::open(&builder.dir)?;
        let value = model_dir.config()?;
        let (spec, encoder) = load_token_encoder(&model_dir, &value, options)?;
        // BGE-M3's texts are tokenized as FlagEmbedding's transformers 4.x does: the file as
        // saved.
        let tokenizer = match bge_m3::is_bge_m3_dir(model_dir.path()) {
            true => bge_m3::tokenizer(&model_dir, spec.vocab, None)?,
            false => model_dir.tokenizer_within(spec.vocab)?,
        };
        let mut layout =
            ColbertLayout::read(&model_dir, &tokenizer, spec.hidden, spec.max_positions)?;
        if let Some(n) = builder.query_length {
            layout.query_length = n;
        }
        if let Some(n) = builder.document_length {
            layout.document_length = n;
        }
        for (name, n) in [
            ("query_length", layout.query_length),
            ("document_length", layout.document_length),
        ] {
            if !(3..=spec.max_positions).contains(&n) {
                return Err(Error::Config(format!(
                    "{name} {n} must be between 3 and the encoder's {} positions",
                    spec.max_positions
                )));
            }
        }
        let truncated = |tokens: usize| -> Result<Tokenizer> {
            let mut t = tokenizer.clone();
            t.with_padding(None);
            t.with_truncation(Some(TruncationParams {
                max_length: tokens,
                strategy: TruncationStrategy::LongestFirst,
                direction: TruncationDirection::Right,
                stride: 0,
            }))
            .map_err(|e| Error::tokenizer(e.to_string()))?;
            Ok(t)
        };
        // Room for the prefix token, where there is one.
        let room = |prefix: &Option<(String, u32)>| usize::from(prefix.is_some());
        let tokenizers = [
            truncated(layout.query_length - room(&layout.query_prefix))?,
            truncated(layout.document_length - room(&layout.document_prefix))?,
        ];
        let dim = layout.projection.dim(spec.hidden);
        Ok(ColbertEncoder {
            encoder,
            tokenizers,
            layout,
            dim,
            pool: options.thread_pool("colbert")?,
            token_budget: options.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            max_batch_size: options.max_batch_size.unwrap_or(DEFAULT_MAX_BATCH_SIZE),
            dir: model_dir.path().to_path_buf(),
            id: OnceLock::new(),
        })
    }

    /// The width of a token vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Tokens per query (every one gives a vector).
    pub fn query_length(&self) -> usize {
        self.layout.query_length
    }

    /// The most tokens of a document.
    pub fn document_length(&self) -> usize {
        self.layout.document_length
    }

    /// The number format of the encoder's linear layers.
    pub fn precision(&self) -> Precision {
        self.encoder.precision()
    }

    /// The layout the directory is in: `pylate`, `stanford` or `bge-m3`.
    pub fn layout(&self) -> &'static str {
        self.layout.kind
    }

    /// The token ids the model sees for `text` as `role` (prefix and query expansion
    /// included), and how many of them are attended as keys.
    pub fn token_ids(&self, text: &str, role: Role) -> Result<(Vec<u32>, usize)> {
        let mut rows = self.tokenize(&[text], role)?;
        Ok(rows.remove(0))
    }

    /// Runs `work` in the encoder's thread pool (the caller's when none was configured).
    pub(crate) fn install<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.pool.install(work)
    }

    /// Each text's token vectors as `role`: a `(tokens, dim)` matrix per text, in input order.
    pub fn encode(&self, texts: &[&str], role: Role) -> Result<Vec<Array2<f32>>> {
        self.pool.install(|| self.encode_here(texts, role))
    }

    /// An id of the model and the settings that change its vectors (`colbert-` and a hash), so
    /// that stored vectors of one model are never read as another's; `None` when a file
    /// cannot be read.
    pub fn id(&self) -> Option<String> {
        self.id
            .get_or_init(|| {
                let precision = match self.precision() {
                    Precision::F32 => "",
                    other => other.as_str(),
                };
                let layout = self.layout.describe();
                model_id(
                    "colbert",
                    &self.dir,
                    &[precision.as_bytes(), layout.as_bytes()],
                )
            })
            .clone()
    }

    /// `(ids, keys)` per text: the prefix (if any) after the first token; queries padded with
    /// `[MASK]` when the model expands them.
    fn tokenize(&self, texts: &[&str], role: Role) -> Result<Vec<(Vec<u32>, usize)>> {
        let query = role == Role::Query;
        let tokenizer = &self.tokenizers[usize::from(!query)];
        let stripped: Vec<&str> = match self.layout.strip {
            true => texts.iter().map(|t| t.trim()).collect(),
            false => texts.to_vec(),
        };
        let encodings = tokenizer
            .encode_batch_fast(stripped, true)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        let (prefix, length) = match query {
            true => (&self.layout.query_prefix, self.layout.query_length),
            false => (&self.layout.document_prefix, self.layout.document_length),
        };
        Ok(encodings
            .into_iter()
            .map(|e| {
                let mut ids = e.get_ids().to_vec();
                if let Some((_, prefix)) = prefix {
                    ids.insert(ids.len().min(1), *prefix);
                }
                let real = ids.len();
                if query && self.layout.query_expansion && real < length {
                    ids.resize(length, self.layout.mask_id);
                    let keys = if self.layout.attend_to_expansion {
                        length
                    } else {
                        real
                    };
                    return (ids, keys);
                }
                (ids, real)
            })
            .collect())
    }

    fn encode_here(&self, texts: &[&str], role: Role) -> Result<Vec<Array2<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.tokenize(texts, role)?;
        let lengths: Vec<usize> = rows.iter().map(|(ids, _)| ids.len()).collect();
        let mut out: Vec<Option<Array2<f32>>> = vec![None; texts.len()];
        let h = self.encoder.hidden();
        for batch in plan_batches(&lengths, self.token_budget, self.max_batch_size) {
            let ids: Vec<&[u32]> = batch.indices.iter().map(|&i| &rows[i].0[..]).collect();
            let keys: Vec<usize> = batch.indices.iter().map(|&i| rows[i].1).collect();
            let states = self.encoder.encode_keys(&ids, &keys, Output::AllTokens)?;
            // each text's slice of the states, then its vectors, texts in parallel
            let mut slices = Vec::with_capacity(ids.len());
            let mut start = 0;
            for row in &ids {
                slices.push(&states[start * h..(start + row.len()) * h]);
                start += row.len();
            }
            let vectors: Vec<Array2<f32>> = ids
                .par_iter()
                .zip(&slices)
                .map(|(row, states)| self.vectors(row, states, role))
                .collect();
            for (&i, v) in batch.indices.iter().zip(vectors) {
                out[i] = Some(v);
            }
        }
        Ok(out.into_iter().map(|m| m.unwrap_or_default()).collect())
    }

    /// The kept tokens' vectors of one text: projected and normalized; a document's skiplist
    /// tokens left out, and the first token's when the layout drops it.
    fn vectors(&self, ids: &[u32], states: &[f32], role: Role) -> Array2<f32> {
        let h = states.len() / ids.len().max(1);
        let kept: Vec<f32> = ids
            .iter()
            .zip(states.chunks_exact(h.max(1)))
            .skip(usize::from(self.layout.skip_first))
            .filter(|(id, _)| role == Role::Query || !self.layout.skiplist.contains(id))
            .flat_map(|(_, state)| state.iter().copied())
            .collect();
        let mut vectors = self.layout.projection.apply_rows(kept);
        for v in vectors.chunks_exact_mut(self.dim.max(1)) {
            l2_normalize(v);
        }
        let n = vectors.len() / self.dim.max(1);
        Array2::from_shape_vec((n, self.dim), vectors)
            .unwrap_or_else(|_| Array2::zeros((0, self.dim)))
    }
}

impl std::fmt::Debug for ColbertEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColbertEncoder")
            .field("layout", &self.layout.kind)
            .field("dim", &self.dim)
            .field("query_length", &self.layout.query_length)
            .field("document_length", &self.layout.document_length)
            .field("attend_to_expansion", &self.layout.attend_to_expansion)
            .field("precision", &self.precision())
            .finish()
    }
}
