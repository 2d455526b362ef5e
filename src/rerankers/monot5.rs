//! monoT5 (castorini/monot5-base-msmarco and its siblings, unicamp-dl's mT5 rerankers): a T5
//! encoder-decoder asked whether a document is relevant to a query, scored as pygaggle (the
//! authors' package) scores it.
//!
//! The prompt is [`PROMPT`] with the query and the document in place, tokenized by the model's
//! `tokenizer.json` (which ends it with `</s>`) and cut from the end to `max_length` tokens
//! (512 by default: pygaggle's `truncation=True` at 512, `</s>` kept). The encoder reads it,
//! the decoder takes one step from its start token, and the logits of the "relevant" and "not
//! relevant" answer tokens decide: the score is `sigmoid(l_yes - l_no)`, the probability of
//! the first against the second (pygaggle ranks by its logarithm,
//! `log_softmax([l_no, l_yes])[1]`: the same order), and the raw score `l_yes - l_no`.
//!
//! The answer tokens are `▁true` / `▁false` for T5 checkpoints (`model_type` `t5`, castorini's)
//! and `▁yes` / `▁no` for mT5 ones (`mt5`, unicamp-dl's), as pygaggle's table gives them;
//! [`MonoT5RerankerBuilder::answer_tokens`] sets others (unicamp-dl's Portuguese ptt5
//! rerankers answer `▁sim` / `▁não`).

use std::path::PathBuf;

use rayon::prelude::*;
use tokenizers::{Tokenizer, TruncationParams};

use crate::models::t5::config::T5Config;
use crate::models::t5::scorer::{AnswerLogits, T5Scorer};
use crate::models::{ModelDir, ModelOptions, ModelPool, Precision};
use crate::rerankers::passages::{passage_windows, score_documents, sigmoid};
use crate::rerankers::{Passages, RerankQuery, RerankScores};
use crate::{Error, Reranker, Result};

/// The prompt, `{query}` and `{document}` replaced (pygaggle's `QueryDocumentBatchTokenizer`
/// pattern).
pub const PROMPT: &str = "Query: {query} Document: {document} Relevant:";

/// The default `max_length`: the most tokens of a prompt, `</s>` included (pygaggle's).
pub const DEFAULT_MAX_LENGTH: usize = 512;

/// The default number of tokens packed into one forward pass.
pub const DEFAULT_TOKEN_BUDGET: usize = 8192;

/// The answer tokens of T5 checkpoints: "relevant", "not relevant".
pub const T5_ANSWERS: (&str, &str) = ("▁true", "▁false");

/// The answer tokens of mT5 checkpoints.
pub const MT5_ANSWERS: (&str, &str) = ("▁yes", "▁no");

/// The prompt for one query and document.
pub fn format_prompt(query: &str, document: &str) -> String {
    format!("Query: {query} Document: {document} Relevant:")
}

/// The relevance of one document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MonoT5Score {
    /// `sigmoid(logit)`: what [`Reranker::score`] returns.
    pub score: f32,
    /// `l_yes - l_no`.
    pub logit: f32,
    /// The logit of the "relevant" token.
    pub yes: f32,
    /// The logit of the "not relevant" token.
    pub no: f32,
}

impl From<AnswerLogits> for MonoT5Score {
    fn from(l: AnswerLogits) -> Self {
        let logit = l.yes - l.no;
        MonoT5Score {
            score: sigmoid(logit),
            logit,
            yes: l.yes,
            no: l.no,
        }
    }
}

/// monoT5 on the crate's CPU kernels: pygaggle's prompt, truncation and score, packed
/// batches.
///
/// Loads a local `T5ForConditionalGeneration` (or `MT5ForConditionalGeneration`) directory:
/// `config.json`, `model.safetensors`, `tokenizer.json`. The encoder is the one
/// [`T5Embedder`](crate::T5Embedder) runs; of the decoder only its first step is computed
/// (self-attention over its start token, cross-attention over the prompt), and of the output
/// head only the rows of the two answer tokens. Prompts are sorted by length and packed into
/// forward passes of at most `token_budget` tokens (no padding). Linear layers run in f32 or
/// int8; bf16 and candle devices are refused.
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::rerankers::{MonoT5Reranker, RerankQuery};
/// use rerank::Reranker;
///
/// let reranker = MonoT5Reranker::builder("models/monot5-base-msmarco-10k")
///     .options(ModelOptions::default().threads(4))
///     .build()?;
/// let query = RerankQuery::new("Who wrote To Kill a Mockingbird?");
/// let docs = ["Harper Lee wrote To Kill a Mockingbird.", "Moby-Dick is by Melville."];
/// let scores = reranker.score(&query, &docs)?;
/// assert!(scores[0] > scores[1]);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct MonoT5Reranker {
    scorer: T5Scorer,
    /// Cuts prompts to `max_length`.
    tokenizer: Tokenizer,
    /// The same without truncation: a document's tokens for passages.
    plain: Tokenizer,
    answers: [(String, u32); 2],
    max_length: usize,
    token_budget: usize,
    max_batch_size: usize,
    pool: ModelPool,
    precision: Precision,
    passages: Option<Passages>,
}

impl std::fmt::Debug for MonoT5Reranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonoT5Reranker")
            .field("answers", &self.answers)
            .field("max_length", &self.max_length)
            .field("token_budget", &self.token_budget)
            .field("max_batch_size", &self.max_batch_size)
            .field("threads", &self.pool.threads())
            .field("precision", &self.precision)
            .field("passages", &self.passages)
            .finish_non_exhaustive()
    }
}

impl MonoT5Reranker {
    /// A builder for the model directory `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> MonoT5RerankerBuilder {
        MonoT5RerankerBuilder {
            dir: dir.into(),
            tokenizer: None,
            options: ModelOptions::default(),
            answers: None,
        }
    }

    /// Loads `dir` with the defaults.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// The "relevant" answer token and its id.
    pub fn yes_token(&self) -> (&str, u32) {
        (&self.answers[0].0, self.answers[0].1)
    }

    /// The "not relevant" answer token and its id.
    pub fn no_token(&self) -> (&str, u32) {
        (&self.answers[1].0, self.answers[1].1)
    }

    /// The most tokens of a prompt, `</s>` included.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// The number format of the linear layers (f32 or int8).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The prompt's token ids for one query and document, as the model reads them (cut to
    /// `max_length`), and whether it was cut.
    pub fn encode(&self, query: &str, document: &str) -> Result<(Vec<u32>, bool)> {
        let prompt = format_prompt(query, document);
        let encoding = self
            .tokenizer
            .encode_fast(prompt, true)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        let truncated = !encoding.get_overflowing().is_empty();
        Ok((encoding.get_ids().to_vec(), truncated))
    }

    /// Scores already-tokenized prompts in exactly one packed forward pass (no budget split).
    pub fn score_token_ids(&self, prompts: &[&[u32]]) -> Result<Vec<MonoT5Score>> {
        let logits = self.pool.install(|| self.scorer.logits(prompts))?;
        Ok(logits.into_iter().map(MonoT5Score::from).collect())
    }

    /// Scores `docs` against `query`: the score, the logit and both answer logits per
    /// document, in input order.
    pub fn score_with_logits(
        &self,
        query: &RerankQuery,
        docs: &[&str],
    ) -> Result<Vec<MonoT5Score>> {
        let pairs: Vec<(&RerankQuery, &str)> = docs.iter().map(|d| (query, *d)).collect();
        Ok(self.scores_counted(&pairs)?.0)
    }

    /// Scores (query, document) pairs whose queries may differ, all in the same packed
    /// batches: the score, the logit and both answer logits per pair, in input order.
    pub fn score_pairs_with_logits(
        &self,
        pairs: &[(&RerankQuery, &str)],
    ) -> Result<Vec<MonoT5Score>> {
        Ok(self.scores_counted(pairs)?.0)
    }

    /// The byte ranges of `document` that [`ModelOptions::passages`] scores beside `query`
    /// (the whole text when it fits); an error when passages are off (a test hook).
    #[doc(hidden)]
    pub fn passage_windows(
        &self,
        query: &RerankQuery,
        document: &str,
    ) -> Result<Vec<std::ops::Range<usize>>> {
        passage_windows(
            self.passages,
            "reranker",
            document,
            || self.room(&query.text),
            |d| crate::text::passages::document_tokens(&self.plain, d),
        )
    }

    /// The document tokens that fit in a prompt beside `query`: `max_length` less the prompt's
    /// tokens with an empty document.
    fn room(&self, query: &str) -> Result<usize> {
        let fixed = self
            .tokenizer
            .encode_fast(format_prompt(query, ""), true)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        let fixed = fixed.get_ids().len() + fixed.get_overflowing().first().map_or(0, |o| o.len());
        Ok(self.max_length.saturating_sub(fixed))
    }

    /// Every pair's score, in packed batches, and how many prompts were cut (logged at debug
    /// level).
    fn scores_counted(&self, pairs: &[(&RerankQuery, &str)]) -> Result<(Vec<MonoT5Score>, usize)> {
        if pairs.is_empty() {
            return Ok((Vec::new(), 0));
        }
        self.pool.install(|| {
            let prompts = pairs
                .par_iter()
                .map(|(q, d)| self.encode(&q.text, d))
                .collect::<Result<Vec<_>>>()?;
            let truncated = prompts.iter().filter(|p| p.1).count();
            if truncated > 0 {
                tracing::debug!(
                    stage = "rerank",
                    truncated,
                    pairs = pairs.len(),
                    max_length = self.max_length,
                    "prompts cut to max_length: the model judged their beginning only"
                );
            }
            let ids: Vec<Vec<u32>> = prompts.into_iter().map(|p| p.0).collect();
            let logits =
                self.scorer
                    .logits_in_batches(&ids, self.token_budget, self.max_batch_size)?;
            Ok((
                logits.into_iter().map(MonoT5Score::from).collect(),
                truncated,
            ))
        })
    }
}

impl Reranker for MonoT5Reranker {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(self.score_detailed(query, docs)?.scores)
    }

    /// The scores, and how many prompts were cut to `max_length`. With
    /// [`ModelOptions::passages`], a document longer than the room beside the query is scored
    /// by windows ([`Passages`]) and [`RerankScores::passages`] says which won.
    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        self.pool.install(|| {
            score_documents(
                self.passages.as_ref(),
                docs,
                self.name(),
                || self.room(&query.text),
                |d| crate::text::passages::document_tokens(&self.plain, d),
                |docs| {
                    let pairs: Vec<(&RerankQuery, &str)> =
                        docs.iter().map(|d| (query, *d)).collect();
                    let (scores, truncated) = self.scores_counted(&pairs)?;
                    Ok((scores.into_iter().map(|s| s.score).collect(), truncated))
                },
            )
        })
    }

    fn name(&self) -> &str {
        "monot5"
    }

    /// Every pair in the same packed batches (without passages; with them, per query).
    fn score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Vec<f32>> {
        if self.passages.is_some() {
            return crate::rerankers::score_pairs_by_query(self, pairs);
        }
        let scores = self.scores_counted(pairs)?.0;
        Ok(scores.into_iter().map(|s| s.score).collect())
    }

    /// Each pair's `l_yes - l_no`; `None` with passages on, where a score is the best of a
    /// document's windows rather than one logit.
    fn raw_score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Option<Vec<f32>>> {
        if self.passages.is_some() {
            return Ok(None);
        }
        let scores = self.scores_counted(pairs)?.0;
        Ok(Some(scores.into_iter().map(|s| s.logit).collect()))
    }

    fn token_count(&self, query: &RerankQuery, document: &str) -> Option<usize> {
        self.encode(&query.text, document)
            .ok()
            .map(|(ids, _)| ids.len())
    }
}

/// Configures and loads a [`MonoT5Reranker`]; [`MonoT5RerankerBuilder::build`] checks
/// everything.
#[derive(Debug, Clone)]
pub struct MonoT5RerankerBuilder {
    dir: PathBuf,
    tokenizer: Option<PathBuf>,
    options: ModelOptions,
    answers: Option<(String, String)>,
}

impl MonoT5RerankerBuilder {
    /// Uses this `tokenizer.json` instead of the model directory's.
    pub fn tokenizer(mut self, path: impl Into<PathBuf>) -> Self {
        self.tokenizer = Some(path.into());
        self
    }

    /// Sets the [`ModelOptions`]: `max_length` is the most tokens of a prompt (default 512),
    /// `token_budget` the most tokens packed into one forward pass (default 8192),
    /// `max_batch_size` the most prompts in one (default: no limit but the budget); with
    /// `threads`, tokenization and the forward passes run on a private pool of that size
    /// (default: the global rayon pool); `precision` f32 or int8; the device cpu.
    pub fn options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// The vocabulary entries of the "relevant" and "not relevant" answers (default:
    /// [`T5_ANSWERS`] for `model_type` `t5`, [`MT5_ANSWERS`] for `mt5`).
    pub fn answer_tokens(mut self, yes: impl Into<String>, no: impl Into<String>) -> Self {
        self.answers = Some((yes.into(), no.into()));
        self
    }

    /// Checks the options, loads the tokenizer and the weights.
    pub fn build(self) -> Result<MonoT5Reranker> {
        const NAME: &str = "monoT5 reranker";
        // The prompt's fixed words and `</s>` take about a dozen tokens.
        self.options.validate(NAME, 16)?;
        if !self.options.device.is_cpu() {
            return Err(Error::Config(format!(
                "{NAME}: T5 runs on the crate's CPU kernels only (device cpu), not {}",
                self.options.device
            )));
        }
        let dir = ModelDir::open(&self.dir)?;
        let config_file = dir.path().join(crate::models::CONFIG_FILE);
        let value = dir.config()?;
        let config = T5Config::from_value(&value, &config_file)?;
        let (mut tokenizer, tokenizer_path) = dir.tokenizer_or(self.tokenizer.as_deref())?;
        let plain = tokenizer.clone();
        let max_length = self.options.max_length.unwrap_or(DEFAULT_MAX_LENGTH);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length,
                ..TruncationParams::default()
            }))
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        let (yes, no) = match self.answers {
            Some(answers) => answers,
            None => {
                let mt5 = value.get("model_type").and_then(|t| t.as_str()) == Some("mt5");
                let (yes, no) = if mt5 { MT5_ANSWERS } else { T5_ANSWERS };
                (yes.to_string(), no.to_string())
            }
        };
        let id = |token: &str| -> Result<u32> {
            tokenizer.token_to_id(token).ok_or_else(|| {
                Error::tokenizer(format!(
                    "{}: the answer token {token:?} is not in the vocabulary (set the answer \
                     tokens the model was trained with: answer_tokens)",
                    tokenizer_path.display()
                ))
            })
        };
        let (yes_id, no_id) = (id(&yes)?, id(&no)?);
        if yes_id == no_id {
            return Err(Error::Config(format!(
                "{NAME}: the answer tokens {yes:?} and {no:?} are the same token {yes_id}"
            )));
        }
        let scorer = T5Scorer::load(&dir, config, [yes_id, no_id], self.options.precision)?;
        let pool = self.options.thread_pool("monot5-reranker")?;
        Ok(MonoT5Reranker {
            scorer,
            tokenizer,
            plain,
            answers: [(yes, yes_id), (no, no_id)],
            max_length,
            token_budget: self.options.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            max_batch_size: self.options.max_batch_size.unwrap_or(usize::MAX),
            pool,
            precision: self.options.precision,
            passages: self.options.passages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_is_pygaggle_s() {
        assert_eq!(
            format_prompt("q", "d"),
            PROMPT.replace("{query}", "q").replace("{document}", "d")
        );
        assert_eq!(format_prompt("", ""), "Query:  Document:  Relevant:");
    }

    #[test]
    fn the_score_is_the_yes_probability_against_no() {
        let s = MonoT5Score::from(AnswerLogits { yes: 2.0, no: -1.0 });
        assert_eq!(s.logit, 3.0);
        let log_softmax_yes = 2.0f64 - (2.0f64.exp() + (-1.0f64).exp()).ln();
        assert!((s.score as f64 - log_softmax_yes.exp()).abs() < 1e-7);
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MonoT5Reranker>();
    }
}
