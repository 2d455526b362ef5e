//! [`Qwen3Reranker`]: loading, batching by length, and the [`Reranker`] implementation.

use std::path::PathBuf;

use rayon::prelude::*;

use super::instructions::Instructions;
use super::template::{PromptEncoder, DEFAULT_MAX_LENGTH};
use crate::models::engine::DecoderEngine;
use crate::models::qwen3::scorer::Qwen3Scorer;
use crate::models::qwen3::Qwen3Config;
use crate::models::{ModelDir, ModelOptions, ModelPool, Precision};
use crate::rerankers::passages::{passage_windows, score_documents, sigmoid};
use crate::rerankers::{Passages, RerankQuery, RerankScores};
use crate::{Error, Reranker, Result};

/// The default number of tokens packed into one forward pass.
pub const DEFAULT_TOKEN_BUDGET: usize = 8192;

/// One (instruction, query, document) triple to score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScoreInput<'a> {
    /// The instruction; `None` means the reranker's default (an empty string is kept as is).
    pub instruction: Option<&'a str>,
    /// The query.
    pub query: &'a str,
    /// The document.
    pub document: &'a str,
}

impl<'a> ScoreInput<'a> {
    /// A triple without an explicit instruction.
    pub fn new(query: &'a str, document: &'a str) -> Self {
        ScoreInput {
            instruction: None,
            query,
            document,
        }
    }

    /// Sets the instruction.
    pub fn with_instruction(mut self, instruction: &'a str) -> Self {
        self.instruction = Some(instruction);
        self
    }
}

/// The relevance of one document: `score = sigmoid(logit)`, `logit = l_yes - l_no`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Qwen3Score {
    /// Probability-like relevance in `[0, 1]`: the softmax of `[l_no, l_yes]` at `yes`.
    pub score: f32,
    /// `l_yes - l_no` at the last prompt position.
    pub logit: f32,
}

impl Qwen3Score {
    fn from_logit(logit: f32) -> Self {
        Qwen3Score {
            score: sigmoid(logit),
            logit,
        }
    }
}

/// Qwen3-Reranker on the crate's CPU kernels: the official yes/no prompt, packed batches.
///
/// Loads a local `Qwen3ForCausalLM` directory (`config.json`, `model.safetensors` or a sharded
/// index, and `tokenizer.json` unless one is given). Each document is judged with the model
/// card's prompt; the score is `sigmoid(l_yes - l_no)` at the last position, computed with the
/// single vector `W[yes] - W[no]` instead of a full-vocabulary projection. A
/// `Qwen3ForSequenceClassification` directory (Qwen3-Reranker converted to sequence
/// classification, e.g. `tomaarsen/Qwen3-Reranker-0.6B-seq-cls`) loads the same way: its
/// one-row `score.weight` is that vector, and the prompt is the same. Prompts are sorted
/// by length and packed into forward passes of at most `token_budget` tokens (no padding, no
/// KV cache).
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::rerankers::RerankQuery;
/// use rerank::{Qwen3Reranker, Reranker};
///
/// let reranker = Qwen3Reranker::builder("models/Qwen3-Reranker-0.6B")
///     .options(ModelOptions::default().threads(4))
///     .build()?;
/// let query = RerankQuery::new("What is the capital of China?");
/// let scores = reranker.score(&query, &["The capital of China is Beijing.", "Gravity."])?;
/// assert!(scores[0] > scores[1]);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct Qwen3Reranker {
    scorer: Qwen3Scorer,
    encoder: PromptEncoder,
    default_instruction: String,
    instructions: Instructions,
    token_budget: usize,
    max_batch_size: usize,
    pool: ModelPool,
    precision: Precision,
    passages: Option<Passages>,
}

impl std::fmt::Debug for Qwen3Reranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qwen3Reranker")
            .field("config", self.config())
            .field("yes_id", &self.yes_id())
            .field("no_id", &self.no_id())
            .field("max_length", &self.scorer.max_positions())
            .field("token_budget", &self.token_budget)
            .field("max_batch_size", &self.max_batch_size)
            .field("threads", &self.pool.threads())
            .field("precision", &self.precision)
            .field("default_instruction", &self.default_instruction)
            .finish_non_exhaustive()
    }
}

impl Qwen3Reranker {
    /// A builder for the model directory `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> Qwen3RerankerBuilder {
        Qwen3RerankerBuilder {
            dir: dir.into(),
            tokenizer: None,
            options: ModelOptions::default(),
            instructions: Instructions::default(),
            entity_type: None,
        }
    }

    /// Loads `dir` with the defaults.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// The number format of the decoder's matrices ([`ModelOptions::precision`]: f32, bf16
    /// or int8).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The model's configuration.
    pub fn config(&self) -> &Qwen3Config {
        self.scorer.config()
    }

    /// The token id of `"yes"` (9693 in the Qwen3 tokenizer; a sequence classifier's head
    /// is its `score` row, and the id is not read).
    pub fn yes_id(&self) -> u32 {
        self.encoder.yes_id()
    }

    /// The token id of `"no"` (2152 in the Qwen3 tokenizer).
    pub fn no_id(&self) -> u32 {
        self.encoder.no_id()
    }

    /// The instruction used when a query has none.
    pub fn default_instruction(&self) -> &str {
        &self.default_instruction
    }

    /// The instruction registry (task-type and entity-type instructions).
    pub fn instructions(&self) -> &Instructions {
        &self.instructions
    }

    /// The prompt's token ids for one triple: prefix, body cut to fit `max_length`, suffix.
    pub fn encode(
        &self,
        instruction: Option<&str>,
        query: &str,
        document: &str,
    ) -> Result<Vec<u32>> {
        let instruction = instruction.unwrap_or(&self.default_instruction);
        Ok(self.encoder.encode(instruction, query, document)?.0)
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
            || self.room(query),
            |d| self.encoder.document_tokens(d),
        )
    }

    /// The document tokens that fit in a prompt beside `query` and its instruction.
    fn room(&self, query: &RerankQuery) -> Result<usize> {
        let instruction = query
            .instruction
            .as_deref()
            .unwrap_or(&self.default_instruction);
        self.encoder.room(instruction, &query.text)
    }

    /// Scores triples (each with its own instruction and query), in input order.
    pub fn score_inputs(&self, inputs: &[ScoreInput<'_>]) -> Result<Vec<Qwen3Score>> {
        Ok(self.score_inputs_counted(inputs)?.0)
    }

    /// [`Qwen3Reranker::score_inputs`], and how many documents were cut to fit `max_length`
    /// (logged at debug level).
    fn score_inputs_counted(&self, inputs: &[ScoreInput<'_>]) -> Result<(Vec<Qwen3Score>, usize)> {
        self.pool.install(|| {
            let encoded = inputs
                .par_iter()
                .map(|i| {
                    let instruction = i.instruction.unwrap_or(&self.default_instruction);
                    self.encoder.encode(instruction, i.query, i.document)
                })
                .collect::<Result<Vec<_>>>()?;
            let truncated = encoded.iter().filter(|(_, cut)| *cut).count();
            if truncated > 0 {
                tracing::debug!(
                    stage = "rerank",
                    truncated,
                    documents = inputs.len(),
                    "documents cut to max_length: the model judged their beginning only"
                );
            }
            let prompts: Vec<Vec<u32>> = encoded.into_iter().map(|(ids, _)| ids).collect();
            Ok((self.score_batched(&prompts)?, truncated))
        })
    }

    /// Scores `docs` against one query, returning both the score and the logit per document.
    pub fn score_with_logits(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<Qwen3Score>> {
        Ok(self.score_query(query, docs)?.0)
    }

    /// Scores `docs` against `query`, and says how many were cut.
    fn score_query(&self, query: &RerankQuery, docs: &[&str]) -> Result<(Vec<Qwen3Score>, usize)> {
        let inputs: Vec<ScoreInput<'_>> = docs
            .iter()
            .map(|d| ScoreInput {
                instruction: query.instruction.as_deref(),
                query: &query.text,
                document: d,
            })
            .collect();
        self.score_inputs_counted(&inputs)
    }

    /// Scores already-tokenized prompts in exactly one packed forward pass (no budget split).
    pub fn score_token_ids(&self, prompts: &[&[u32]]) -> Result<Vec<Qwen3Score>> {
        let logits = self.pool.install(|| self.scorer.logits(prompts))?;
        Ok(logits.into_iter().map(Qwen3Score::from_logit).collect())
    }

    /// Sorts prompts by length, packs them into forward passes of at most `token_budget` real
    /// tokens (a longer prompt goes alone; `models::plan_packed_batches`), and returns the
    /// scores in input order.
    fn score_batched(&self, prompts: &[Vec<u32>]) -> Result<Vec<Qwen3Score>> {
        let logits =
            self.scorer
                .logits_in_batches(prompts, self.token_budget, self.max_batch_size)?;
        Ok(logits.into_iter().map(Qwen3Score::from_logit).collect())
    }
}

impl Reranker for Qwen3Reranker {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(self.score_detailed(query, docs)?.scores)
    }

    /// The scores and how many documents were cut to `max_length`. With
    /// [`ModelOptions::passages`], a document longer than the room beside the instruction and
    /// query is scored by windows ([`Passages`]) and [`RerankScores::passages`] says which won.
    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        self.pool.install(|| {
            score_documents(
                self.passages.as_ref(),
                docs,
                self.name(),
                || self.room(query),
                |d| self.encoder.document_tokens(d),
                |docs| {
                    let (scores, truncated) = self.score_query(query, docs)?;
                    Ok((scores.into_iter().map(|s| s.score).collect(), truncated))
                },
            )
        })
    }

    fn name(&self) -> &str {
        "qwen3-reranker"
    }

    /// Each pair's logit `l_yes - l_no` (the score is its sigmoid), all pairs in the same
    /// packed batches; `None` with passages on, where a score is the best of a document's
    /// windows rather than one logit.
    fn raw_score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Option<Vec<f32>>> {
        if self.passages.is_some() {
            return Ok(None);
        }
        let scores = self.score_inputs(&pair_inputs(pairs))?;
        Ok(Some(scores.into_iter().map(|s| s.logit).collect()))
    }

    /// Every pair in the same packed batches, each with its query's instruction (with
    /// passages on, one [`Reranker::score_detailed`] per query).
    fn score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Vec<f32>> {
        if self.passages.is_some() {
            return crate::rerankers::score_pairs_by_query(self, pairs);
        }
        Ok(self
            .score_inputs(&pair_inputs(pairs))?
            .into_iter()
            .map(|s| s.score)
            .collect())
    }
}

/// Each pair as a triple with its query's instruction.
fn pair_inputs<'a>(pairs: &[(&'a RerankQuery, &'a str)]) -> Vec<ScoreInput<'a>> {
    pairs
        .iter()
        .map(|(q, d)| ScoreInput {
            instruction: q.instruction.as_deref(),
            query: &q.text,
            document: d,
        })
        .collect()
}

/// Configures and loads a [`Qwen3Reranker`]; [`Qwen3RerankerBuilder::build`] checks everything.
#[derive(Debug, Clone)]
pub struct Qwen3RerankerBuilder {
    dir: PathBuf,
    tokenizer: Option<PathBuf>,
    options: ModelOptions,
    instructions: Instructions,
    entity_type: Option<String>,
}

impl Qwen3RerankerBuilder {
    /// Uses this `tokenizer.json` (needed when the model directory has none, e.g. the one
    /// `scripts/fetch_qwen3_tokenizer.sh` downloads).
    pub fn tokenizer(mut self, path: impl Into<PathBuf>) -> Self {
        self.tokenizer = Some(path.into());
        self
    }

    /// Sets the [`ModelOptions`]. For Qwen3-Reranker, `max_length` is the longest prompt,
    /// prefix and suffix included (default 8192; only the `<Instruct>/<Query>/<Document>` body
    /// is cut to fit), `token_budget` the most tokens packed into one forward pass (default
    /// 8192), `max_batch_size` the most prompts in one (default: no limit but the budget); with
    /// `threads`, tokenization and the forward passes run on a private pool of that size
    /// (default: the global rayon pool).
    pub fn options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// Replaces the instruction registry.
    pub fn instructions(mut self, instructions: Instructions) -> Self {
        self.instructions = instructions;
        self
    }

    /// Declares what the reranked documents are (a key of the registry's entity instructions,
    /// e.g. `"manual"`); its instruction becomes the default for queries without one.
    pub fn entity_type(mut self, entity: impl Into<String>) -> Self {
        self.entity_type = Some(entity.into());
        self
    }

    /// Checks the options, loads the tokenizer and the weights.
    pub fn build(self) -> Result<Qwen3Reranker> {
        self.options.validate("Qwen3-Reranker", 1)?;
        let (precision, device) = (self.options.precision, self.options.device);
        let max_length = self.options.max_length.unwrap_or(DEFAULT_MAX_LENGTH);
        let default_instruction = match &self.entity_type {
            Some(entity) => self
                .instructions
                .for_entity(entity)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "no instruction for entity type {entity:?}; known: {:?}",
                        self.instructions.entities.keys().collect::<Vec<_>>()
                    ))
                })?
                .to_string(),
            None => self.instructions.default_instruction().to_string(),
        };
        let dir = self.dir.as_path();
        // Says whether the directory does not exist, is not one, or has no config.json.
        let config = Qwen3Config::from_file(&ModelDir::open(dir)?.path().join("config.json"))?;
        let tokenizer = match &self.tokenizer {
            Some(path) => path.clone(),
            None => dir.join("tokenizer.json"),
        };
        if !tokenizer.is_file() {
            return Err(Error::tokenizer(format!(
                "{} not found: pass a Qwen3 tokenizer.json with .tokenizer(path) \
                 (scripts/fetch_qwen3_tokenizer.sh downloads the official one)",
                tokenizer.display()
            )));
        }
        // The tokenizer (about 0.35 s for Qwen3's) loads while the layers do.
        let (encoder, model) = rayon::join(
            || PromptEncoder::from_file(&tokenizer, max_length),
            || DecoderEngine::load(dir, config, max_length, precision, device, true),
        );
        let encoder = encoder?;
        let scorer = Qwen3Scorer::new(model?, encoder.yes_id(), encoder.no_id())?;
        let rows = scorer.vocab_rows();
        if let Some(id) = encoder.fixed_ids().find(|&id| id as usize >= rows) {
            return Err(Error::model(format!(
                "the prompt's token id {id} is outside the embedding matrix ({rows} rows): \
                 the tokenizer does not belong to these weights"
            )));
        }
        let pool = self.options.thread_pool("qwen3-reranker")?;
        Ok(Qwen3Reranker {
            scorer,
            encoder,
            default_instruction,
            instructions: self.instructions,
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
    fn sigmoid_is_stable_at_the_extremes() {
        assert_eq!(sigmoid(0.0), 0.5);
        assert!((sigmoid(2.0) - 0.880_797).abs() < 1e-6);
        assert!(sigmoid(-200.0) >= 0.0 && sigmoid(-200.0) < 1e-30);
        assert_eq!(sigmoid(200.0), 1.0);
    }
}
