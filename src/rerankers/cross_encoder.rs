//! [`CrossEncoder`]: a cross-encoder reranker (BERT, XLM-RoBERTa, ModernBERT, DeBERTa-v2 / v3 or
//! GTE sequence classification), scoring exactly as sentence-transformers' `CrossEncoder.predict`.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::models::engine::{load_classifier, Classifier};
pub use crate::models::Activation;
#[cfg(feature = "hf-hub")]
use crate::models::HubModel;
use crate::models::{
    plan_batches, Architecture, ModelDir, ModelOptions, ModelPool, PairEncoding, PairTokenizer,
    Precision,
};
use crate::rerankers::passages::{passage_windows, score_documents};
use crate::rerankers::{Passages, RerankQuery, RerankScores};
use crate::{Error, Reranker, Result};

/// Default [`ModelOptions::token_budget`] (`pairs x longest pair`). Batches are packed (no
/// padding is computed) and attention runs per pair, so the budget only bounds the workspace
/// (`tokens x (intermediate_size + 6 x hidden_size)` floats, 64 MiB for a MiniLM-L6).
pub const DEFAULT_TOKEN_BUDGET: usize = 8192;
/// Default [`ModelOptions::max_batch_size`] (sentence-transformers' default batch size).
pub const DEFAULT_MAX_BATCH_SIZE: usize = 32;

/// The score of one (query, document) pair.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairScore {
    /// The logit after the cross-encoder's [`Activation`].
    pub score: f32,
    /// The raw logit.
    pub logit: f32,
}

/// A cross-encoder reranker (CPU, float32 or opt-in int8 ([`Precision::Int8`]); weights read by the one loader, forward pass on the
/// crate's packed encoder).
///
/// Loads `BertForSequenceClassification` (ms-marco-MiniLM style),
/// `XLMRobertaForSequenceClassification` (bge-reranker style), RoBERTa's and CamemBERT's
/// (XLM-R's head), `ElectraForSequenceClassification` (ms-marco-electra-base style),
/// `DistilBertForSequenceClassification`, `ModernBertForSequenceClassification` (gte-reranker-modernbert style: cls or mean pooling,
/// global and sliding-window attention), `DebertaV2ForSequenceClassification`
/// (mxbai-rerank-base-v1 / -large-v1 style: DeBERTa-v3's disentangled attention over
/// log-bucketed relative positions) or GTE's `NewForSequenceClassification` /
/// `GteForSequenceClassification` (gte-multilingual-reranker-base: RoPE, a gated MLP) from a
/// directory with
/// `config.json`, `tokenizer.json` and `model.safetensors` (memory-mapped). Pairs are built as
/// sentence-transformers builds them (`[CLS] q [SEP] d [SEP]`, `longest_first` truncation to
/// `max_length`), run in length-sorted batches under a token budget, each batch packed (no
/// padding is computed), and returned in input order. One instance can be shared by many threads (`&self` everywhere).
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::rerankers::RerankQuery;
/// use rerank::{CrossEncoder, Reranker};
///
/// let ce = CrossEncoder::builder("models/ms-marco-MiniLM-L-6-v2")
///     .options(ModelOptions::default().threads(2))
///     .build()?;
/// let scores = ce.score(&RerankQuery::new("what is bm25"), &["BM25 ranks documents", "cats"])?;
/// assert_eq!(scores.len(), 2);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct CrossEncoder {
    model: Box<dyn Classifier>,
    tokenizer: PairTokenizer,
    activation: Activation,
    token_budget: usize,
    max_batch_size: usize,
    pool: ModelPool,
    passages: Option<Passages>,
    path: PathBuf,
}

impl std::fmt::Debug for CrossEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossEncoder")
            .field("path", &self.path)
            .field("architecture", &self.model.config().architecture)
            .field("activation", &self.activation)
            .field("max_length", &self.tokenizer.max_length())
            .field("token_budget", &self.token_budget)
            .field("max_batch_size", &self.max_batch_size)
            .field("precision", &self.precision())
            .field("threads", &self.threads())
            .field("passages", &self.passages)
            .finish()
    }
}

impl CrossEncoder {
    /// Loads the model in `dir` with default options.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// A builder for the model in `dir`.
    pub fn builder(dir: impl AsRef<Path>) -> CrossEncoderBuilder {
        CrossEncoderBuilder::new(Source::Dir(dir.as_ref().to_path_buf()))
    }

    /// A builder for a model from the Hugging Face hub (the `hf-hub` feature).
    #[cfg(feature = "hf-hub")]
    pub fn builder_from_hub(model: HubModel) -> CrossEncoderBuilder {
        CrossEncoderBuilder::new(Source::Hub(model))
    }

    /// The model directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The model architecture.
    pub fn architecture(&self) -> &Architecture {
        &self.model.config().architecture
    }

    /// The activation applied to logits to get scores.
    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// The maximum pair length in tokens, special tokens included.
    pub fn max_length(&self) -> usize {
        self.tokenizer.max_length()
    }

    /// The number format of the encoder's linear layers ([`ModelOptions::precision`]).
    pub fn precision(&self) -> Precision {
        self.model.precision()
    }

    /// The size of the private thread pool, or `None` when running on the caller's pool.
    pub fn threads(&self) -> Option<usize> {
        self.pool.threads()
    }

    /// The model input for one pair, exactly as it is fed to the model (a parity-test hook).
    #[doc(hidden)]
    pub fn encode_pair(&self, query: &str, document: &str) -> Result<PairEncoding> {
        self.tokenizer.encode(query, document)
    }

    /// The byte ranges of `document` that [`ModelOptions::passages`] scores beside `query`
    /// (the whole text when it fits); an error when passages are off (a test hook).
    #[doc(hidden)]
    pub fn passage_windows(&self, query: &str, document: &str) -> Result<Vec<Range<usize>>> {
        passage_windows(
            self.passages,
            "cross-encoder",
            document,
            || self.tokenizer.room(query),
            |d| self.tokenizer.document_tokens(d),
        )
    }

    /// Raw logits, one per pair, in input order.
    pub fn logits(&self, pairs: &[(&str, &str)]) -> Result<Vec<f32>> {
        Ok(self.logits_counted(pairs)?.0)
    }

    /// Raw logits, one per pair, in input order, and how many pairs were cut to
    /// `max_length` (logged at debug level).
    fn logits_counted(&self, pairs: &[(&str, &str)]) -> Result<(Vec<f32>, usize)> {
        if pairs.is_empty() {
            return Ok((Vec::new(), 0));
        }
        self.pool.install(|| {
            let encodings = self.tokenizer.encode_all(pairs)?;
            let truncated = encodings.iter().filter(|e| e.truncated).count();
            if truncated > 0 {
                tracing::debug!(
                    stage = "rerank",
                    truncated,
                    pairs = pairs.len(),
                    max_length = self.max_length(),
                    "pairs cut to max_length: the model judged their beginning only"
                );
            }
            let lengths: Vec<usize> = encodings.iter().map(PairEncoding::len).collect();
            let plan = plan_batches(&lengths, self.token_budget, self.max_batch_size);
            let batches: Vec<Vec<&PairEncoding>> = plan
                .iter()
                .map(|b| b.indices.iter().map(|&i| &encodings[i]).collect())
                .collect();
            let mut out = vec![0f32; pairs.len()];
            self.model.logits_batches(&batches, &mut |n, rows| {
                let indices = &plan[n].indices;
                if rows.len() != indices.len() {
                    return Err(Error::model(format!(
                        "model returned {} rows for a batch of {}",
                        rows.len(),
                        indices.len()
                    )));
                }
                for (row, &i) in rows.iter().zip(indices) {
                    out[i] = row.first().copied().unwrap_or(f32::NAN);
                }
                Ok(())
            })?;
            Ok((out, truncated))
        })
    }

    /// Each document's score (after the activation) beside `query`, and how many were cut.
    fn scores(&self, query: &str, docs: &[&str]) -> Result<(Vec<f32>, usize)> {
        let pairs: Vec<(&str, &str)> = docs.iter().map(|d| (query, *d)).collect();
        let (logits, truncated) = self.logits_counted(&pairs)?;
        let scores = logits.iter().map(|&l| self.activation.apply(l)).collect();
        Ok((scores, truncated))
    }

    /// Score (after the activation) and raw logit for each pair, in input order.
    pub fn predict(&self, pairs: &[(&str, &str)]) -> Result<Vec<PairScore>> {
        Ok(self
            .logits(pairs)?
            .into_iter()
            .map(|logit| PairScore {
                score: self.activation.apply(logit),
                logit,
            })
            .collect())
    }
}

impl Reranker for CrossEncoder {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(self.score_detailed(query, docs)?.scores)
    }

    /// The scores, and how many documents were cut to `max_length` beside the query.
    /// With [`ModelOptions::passages`], a document longer than the room beside the query is
    /// scored by windows ([`Passages`]) and [`RerankScores::passages`] says which won.
    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        self.pool.install(|| {
            score_documents(
                self.passages.as_ref(),
                docs,
                self.name(),
                || self.tokenizer.room(&query.text),
                |d| self.tokenizer.document_tokens(d),
                |texts| self.scores(&query.text, texts),
            )
        })
    }

    fn name(&self) -> &str {
        "cross-encoder"
    }

    /// Every pair in the same packed batches, whatever its query (with passages on, one
    /// [`Reranker::score_detailed`] per query).
    fn score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Vec<f32>> {
        if self.passages.is_some() {
            return crate::rerankers::score_pairs_by_query(self, pairs);
        }
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(q, d)| (q.text.as_str(), *d)).collect();
        let (logits, _) = self.logits_counted(&pairs)?;
        Ok(logits.iter().map(|&l| self.activation.apply(l)).collect())
    }

    /// The logits (see [`logits`](Self::logits)); `None` with passages on, where a score is
    /// the best of a document's windows rather than one logit.
    fn raw_score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Option<Vec<f32>>> {
        if self.passages.is_some() {
            return Ok(None);
        }
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(q, d)| (q.text.as_str(), *d)).collect();
        Ok(Some(self.logits(&pairs)?))
    }

    /// The length of the pair's encoding ([`encode_pair`](Self::encode_pair)).
    fn token_count(&self, query: &RerankQuery, document: &str) -> Option<usize> {
        self.encode_pair(&query.text, document)
            .ok()
            .map(|e| e.len())
    }
}

enum Source {
    Dir(PathBuf),
    #[cfg(feature = "hf-hub")]
    Hub(HubModel),
}

/// Options for a [`CrossEncoder`], checked at [`CrossEncoderBuilder::build`].
pub struct CrossEncoderBuilder {
    source: Source,
    options: ModelOptions,
    activation: Option<Activation>,
}

impl CrossEncoderBuilder {
    fn new(source: Source) -> Self {
        CrossEncoderBuilder {
            source,
            options: ModelOptions::default(),
            activation: None,
        }
    }

    /// Sets the [`ModelOptions`]. For a cross-encoder, `max_length` is the longest (query,
    /// document) pair (default, as sentence-transformers: `model_max_length` in
    /// `tokenizer_config.json`, capped by the model's position embeddings; pairs longer are
    /// cut, `longest_first`, and counted in [`RerankScores::truncated`]), `token_budget` defaults to
    /// [`DEFAULT_TOKEN_BUDGET`] and `max_batch_size` to [`DEFAULT_MAX_BATCH_SIZE`]; with
    /// `threads`, every step of the forward pass runs on a private pool of that many threads.
    pub fn options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// The activation from logit to score (default: what `config.json` asks for, else sigmoid
    /// for one label).
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = Some(activation);
        self
    }

    /// Scores are raw logits (the same as `activation(Activation::Identity)`).
    pub fn raw_logits(self) -> Self {
        self.activation(Activation::Identity)
    }

    /// Validates the options, loads the model and returns the cross-encoder.
    pub fn build(self) -> Result<CrossEncoder> {
        self.options.validate("cross-encoder", 3)?;
        let dir = match &self.source {
            Source::Dir(path) => ModelDir::open(path)?,
            #[cfg(feature = "hf-hub")]
            Source::Hub(model) => model.fetch(&["tokenizer_config.json"])?,
        };
        let model = load_classifier(&dir, &self.options)?;
        let config = model.config().clone();
        if config.num_labels != 1 {
            return Err(Error::model(format!(
                "{}: the model has {} labels; a reranking cross-encoder needs exactly one",
                dir.path().join(crate::models::CONFIG_FILE).display(),
                config.num_labels
            )));
        }
        let tokenizer = dir.tokenizer_within(model.vocab_size())?;
        let limit = model.max_length();
        let max_length = match self.options.max_length {
            Some(n) if n > limit => {
                return Err(Error::Config(format!(
                    "max_length {n} exceeds what the model can encode ({limit} positions)"
                )))
            }
            Some(n) => n,
            // As sentence-transformers: the tokenizer's model_max_length, capped by the
            // position table (bge-reranker-v2-m3 takes 8192, not 512).
            None => {
                let tokenizer_max = dir
                    .optional_json("tokenizer_config.json")?
                    .and_then(|v| v.get("model_max_length").and_then(|m| m.as_u64()))
                    .map_or(usize::MAX, |m| m as usize);
                limit.min(tokenizer_max)
            }
        };
        let tokenizer = PairTokenizer::new(tokenizer, max_length)?;
        let pool = self.options.thread_pool("ce")?;
        Ok(CrossEncoder {
            activation: self
                .activation
                .unwrap_or_else(|| config.default_activation()),
            model,
            tokenizer,
            token_budget: self.options.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            max_batch_size: self
                .options
                .max_batch_size
                .unwrap_or(DEFAULT_MAX_BATCH_SIZE),
            pool,
            passages: self.options.passages,
            path: dir.path().to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<CrossEncoder>();
    }
}
