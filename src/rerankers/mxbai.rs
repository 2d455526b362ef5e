//! mxbai-rerank-v2 (`mixedbread-ai/mxbai-rerank-base-v2`, `-large-v2`): a Qwen2 causal LM
//! that answers "1" (relevant) or "0", scored as mixedbread's own Python package
//! (`mxbai-rerank` 0.1.6, `MxbaiRerankV2`) scores it.
//!
//! The prompt, token by token (each part tokenized on its own, without special tokens added):
//!
//! ```text
//! PREFIX  query  SEP  document  SEP  TASK_PROMPT  SUFFIX
//! ```
//!
//! with `query` the tokens of `"query: {query}"` (or `"instruction: {instruction}\nquery:
//! {query}"` when there is an instruction) and `document` those of `"document: {document}"`.
//! The score is `l_1 - l_0`, the logit of "1" minus that of "0" at the last position (the
//! package's `predict`, whose default is the raw difference); [`MxbaiRerankerBuilder::normalize`]
//! gives the package's `normalize=True` instead.
//!
//! Truncation is the package's, with `max_length` (default 8192) the most tokens of
//! `query SEP document` and `model_max_length` the checkpoint's `max_position_embeddings`:
//! `max_length` is first lowered to `model_max_length - fixed` (the fixed parts: prefix, task
//! prompt, suffix and one `SEP`) when it would not fit; the query keeps at most
//! `max_length * 3 / 4` tokens; the document at most `min(model_max_length - query - fixed,
//! max_length)`; then `SEP document` is cut from the end so that `query SEP document` has at
//! most `max_length` tokens. Tokens are cut from the end in every step.

use std::path::PathBuf;

use rayon::prelude::*;
use tokenizers::Tokenizer;

use crate::models::engine::DecoderEngine;
use crate::models::qwen3::scorer::Qwen3Scorer;
use crate::models::{ModelDir, ModelOptions, ModelPool, Precision, CONFIG_FILE};
use crate::rerankers::passages::{passage_windows, score_documents, sigmoid};
use crate::rerankers::{Passages, RerankQuery, RerankScores};
use crate::{Error, Reranker, Result};

pub use crate::models::qwen3::QWEN2_ARCHITECTURE as ARCHITECTURE;
pub use crate::models::qwen3::{DecoderFamily, Qwen3Config};

/// The system turn and the opening of the user turn (the package's `chat_template["prefix"]`).
pub const PREFIX: &str = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a \
helpful assistant.<|im_end|>\n<|im_start|>user\n";

/// The end of the user turn and the opening of the assistant turn (`chat_template["suffix"]`).
pub const SUFFIX: &str = "<|im_end|>\n<|im_start|>assistant\n";

/// The task, after the query and the document (`task_prompt`).
pub const TASK_PROMPT: &str = "You are a search relevance expert who evaluates how well \
documents match search queries. For each query-document pair, carefully analyze the semantic \
relationship between them, then provide your binary relevance judgment (0 for not relevant, 1 \
for relevant).\nRelevance:";

/// The separator between the query, the document and the task prompt (`sep`).
pub const SEP: &str = "\n";

/// The token whose logit means "relevant".
pub const YES_TOKEN: &str = "1";

/// The token whose logit means "not relevant".
pub const NO_TOKEN: &str = "0";

/// The default `max_length`: the most tokens of the query and the document together (the
/// package's default).
pub const DEFAULT_MAX_LENGTH: usize = 8192;

/// `model_max_length` when `config.json` has no `max_position_embeddings` (transformers'
/// `Qwen2Config` default).
pub const DEFAULT_MODEL_MAX_LENGTH: usize = 32768;

/// The default number of tokens packed into one forward pass.
pub const DEFAULT_TOKEN_BUDGET: usize = 8192;

/// The package's `estimated_max` for mxbai-rerank-base-v2 (see [`MxbaiRerankerBuilder::normalize`]).
pub const BASE_ESTIMATED_MAX: f32 = 9.0;

/// The package's `estimated_max` for mxbai-rerank-large-v2, and for any other model.
pub const LARGE_ESTIMATED_MAX: f32 = 12.0;

/// The query part of the prompt: `"query: {query}"`, after `"instruction: {instruction}\n"`
/// when there is an instruction (an empty one counts as none, as in the package).
pub fn format_query(instruction: Option<&str>, query: &str) -> String {
    match instruction.filter(|i| !i.is_empty()) {
        Some(instruction) => format!("instruction: {instruction}{SEP}query: {query}"),
        None => format!("query: {query}"),
    }
}

/// The document part of the prompt: `"document: {document}"`.
pub fn format_document(document: &str) -> String {
    format!("document: {document}")
}

/// The relevance of one document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MxbaiScore {
    /// What [`Reranker::score`] returns: the logit, or with
    /// [`MxbaiRerankerBuilder::normalize`] `sigmoid(logit - estimated_max / 2)`.
    pub score: f32,
    /// `l_1 - l_0` at the last prompt position (the package's `predict`).
    pub logit: f32,
}

/// One prompt's token ids, and whether the query or the document was cut to fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MxbaiPrompt {
    /// The whole prompt, as the model reads it.
    pub ids: Vec<u32>,
    /// Whether the query lost tokens (it keeps at most `max_length * 3 / 4`).
    pub query_truncated: bool,
    /// Whether the document lost tokens.
    pub document_truncated: bool,
}

impl MxbaiPrompt {
    /// Whether anything was cut.
    pub fn truncated(&self) -> bool {
        self.query_truncated || self.document_truncated
    }
}

/// Tokenizes prompts as the package does (see the module documentation).
struct PromptEncoder {
    tokenizer: Tokenizer,
    prefix: Vec<u32>,
    sep: Vec<u32>,
    task: Vec<u32>,
    suffix: Vec<u32>,
    /// The package's `max_length` once lowered to fit `model_max_length`.
    max_length: usize,
    model_max_length: usize,
    yes: u32,
    no: u32,
}

impl PromptEncoder {
    /// Takes `tokenizer` (its own truncation and padding turned off), tokenizes the fixed
    /// parts, looks up the yes/no ids and lowers `max_length` as the package does; `path`
    /// names the tokenizer in errors.
    fn new(
        mut tokenizer: Tokenizer,
        path: &std::path::Path,
        max_length: usize,
        model_max_length: usize,
    ) -> Result<Self> {
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        tokenizer.with_padding(None);
        let encode = |text: &str| encode(&tokenizer, text);
        let (prefix, sep, task, suffix) = (
            encode(PREFIX)?,
            encode(SEP)?,
            encode(TASK_PROMPT)?,
            encode(SUFFIX)?,
        );
        // The package takes the first id of each digit's encoding.
        let digit = |token: &str| -> Result<u32> {
            encode(token)?.first().copied().ok_or_else(|| {
                Error::tokenizer(format!("{}: {token:?} has no tokens", path.display()))
            })
        };
        let (yes, no) = (digit(YES_TOKEN)?, digit(NO_TOKEN)?);
        if yes == no {
            return Err(Error::tokenizer(format!(
                "{}: \"1\" and \"0\" map to the same id {yes}",
                path.display()
            )));
        }
        let fixed = prefix.len() + task.len() + suffix.len() + sep.len();
        let max_length = max_length.min(model_max_length.saturating_sub(fixed));
        if max_length == 0 {
            return Err(Error::Config(format!(
                "max_position_embeddings {model_max_length} leaves {max_length} tokens for the \
                 query and the document: the prompt's fixed parts take {fixed}"
            )));
        }
        Ok(PromptEncoder {
            tokenizer,
            prefix,
            sep,
            task,
            suffix,
            max_length,
            model_max_length,
            yes,
            no,
        })
    }

    /// The tokens of the fixed parts (prefix, task prompt, suffix, one separator).
    fn fixed_len(&self) -> usize {
        self.prefix.len() + self.task.len() + self.suffix.len() + self.sep.len()
    }

    /// Every id of the fixed parts.
    fn fixed_ids(&self) -> impl Iterator<Item = u32> + '_ {
        [&self.prefix, &self.sep, &self.task, &self.suffix]
            .into_iter()
            .flatten()
            .copied()
    }

    /// The longest prompt this encoder makes.
    fn max_prompt_len(&self) -> usize {
        self.fixed_len() + self.max_length
    }

    fn encode(
        &self,
        instruction: Option<&str>,
        query: &str,
        document: &str,
    ) -> Result<MxbaiPrompt> {
        let max_length = self.max_length;
        let query_ids = encode(&self.tokenizer, &format_query(instruction, query))?;
        let query_kept = query_ids.len().min(max_length * 3 / 4);
        let doc_ids = encode(&self.tokenizer, &format_document(document))?;
        let available = self
            .model_max_length
            .saturating_sub(query_kept + self.fixed_len());
        let doc_kept = doc_ids.len().min(available.min(max_length));
        // `SEP document`, cut from the end so that `query SEP document` fits `max_length`
        // (transformers' `prepare_for_model(..., truncation="only_second")`).
        let second_kept = (self.sep.len() + doc_kept).min(max_length - query_kept);
        let second = self
            .sep
            .iter()
            .chain(&doc_ids[..doc_kept])
            .take(second_kept);
        let mut ids = Vec::with_capacity(self.fixed_len() + query_kept + second_kept);
        ids.extend_from_slice(&self.prefix);
        ids.extend_from_slice(&query_ids[..query_kept]);
        ids.extend(second);
        ids.extend_from_slice(&self.sep);
        ids.extend_from_slice(&self.task);
        ids.extend_from_slice(&self.suffix);
        Ok(MxbaiPrompt {
            ids,
            query_truncated: query_kept < query_ids.len(),
            document_truncated: second_kept < self.sep.len() + doc_ids.len(),
        })
    }
}

impl PromptEncoder {
    /// How many document tokens fit in a prompt beside `query` (and its instruction) without
    /// cutting it: what [`PromptEncoder::encode`] leaves the document, less its `document: `
    /// label.
    fn room(&self, instruction: Option<&str>, query: &str) -> Result<usize> {
        let query_ids = encode(&self.tokenizer, &format_query(instruction, query))?;
        let query_kept = query_ids.len().min(self.max_length * 3 / 4);
        let available = self
            .model_max_length
            .saturating_sub(query_kept + self.fixed_len())
            .min(self.max_length);
        let second = (self.max_length - query_kept).saturating_sub(self.sep.len());
        let label = encode(&self.tokenizer, &format_document(""))?.len();
        Ok(available.min(second).saturating_sub(label))
    }

    /// The tokens `document` alone has, with their byte ranges (for passages).
    fn document_tokens(&self, document: &str) -> Result<Vec<crate::text::passages::Token>> {
        crate::text::passages::document_tokens(&self.tokenizer, document)
    }
}

/// The ids of `text`, no special tokens added.
fn encode(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    tokenizer
        .encode_fast(text, false)
        .map(|e| e.get_ids().to_vec())
        .map_err(|e| Error::tokenizer(e.to_string()))
}

/// mxbai-rerank-v2 on the crate's CPU kernels: the package's prompt, truncation and score,
/// packed batches.
///
/// Loads a local `Qwen2ForCausalLM` directory (`config.json`, `model.safetensors` or a
/// sharded index, `tokenizer.json`). The score is `l_1 - l_0` at the last position, computed
/// with the single vector `W["1"] - W["0"]` of the output head (see the
/// [module documentation](self) for the prompt and its truncation). A
/// `Qwen2ForSequenceClassification` directory (the model converted to sequence classification,
/// as vLLM's `convert_model_to_seq_cls.py` does) loads the same way, its one-row
/// `score.weight` being that vector. The documents of one query
/// share the prompt's beginning, which a batch runs through the model once. Prompts are
/// sorted by length and packed into forward passes of at most `token_budget` tokens (no
/// padding).
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::rerankers::{MxbaiReranker, RerankQuery};
/// use rerank::Reranker;
///
/// let reranker = MxbaiReranker::builder("models/mxbai-rerank-base-v2")
///     .options(ModelOptions::default().threads(4))
///     .build()?;
/// let query = RerankQuery::new("Who wrote To Kill a Mockingbird?");
/// let docs = ["Harper Lee wrote To Kill a Mockingbird.", "Moby-Dick is by Melville."];
/// let scores = reranker.score(&query, &docs)?;
/// assert!(scores[0] > scores[1]);
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct MxbaiReranker {
    scorer: Qwen3Scorer,
    encoder: PromptEncoder,
    instruction: Option<String>,
    estimated_max: Option<f32>,
    token_budget: usize,
    max_batch_size: usize,
    pool: ModelPool,
    precision: Precision,
    passages: Option<Passages>,
}

impl std::fmt::Debug for MxbaiReranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MxbaiReranker")
            .field("config", self.config())
            .field("yes_id", &self.yes_id())
            .field("no_id", &self.no_id())
            .field("max_length", &self.max_length())
            .field("token_budget", &self.token_budget)
            .field("max_batch_size", &self.max_batch_size)
            .field("threads", &self.pool.threads())
            .field("precision", &self.precision)
            .field("instruction", &self.instruction)
            .field("estimated_max", &self.estimated_max)
            .field("passages", &self.passages)
            .finish_non_exhaustive()
    }
}

impl MxbaiReranker {
    /// A builder for the model directory `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> MxbaiRerankerBuilder {
        MxbaiRerankerBuilder {
            dir: dir.into(),
            tokenizer: None,
            options: ModelOptions::default(),
            instruction: None,
            estimated_max: None,
        }
    }

    /// Loads `dir` with the defaults.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<Self> {
        Self::builder(dir).build()
    }

    /// The model's configuration ([`DecoderFamily::Qwen2`]).
    pub fn config(&self) -> &Qwen3Config {
        self.scorer.config()
    }

    /// The number format of the decoder's matrices (f32, bf16 or int8).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The token id of `"1"` (16 in Qwen2's tokenizer).
    pub fn yes_id(&self) -> u32 {
        self.encoder.yes
    }

    /// The token id of `"0"` (15 in Qwen2's tokenizer).
    pub fn no_id(&self) -> u32 {
        self.encoder.no
    }

    /// The most tokens of the query and the document together: the builder's `max_length`,
    /// lowered (as the package does) when it and the prompt's fixed parts would not fit in
    /// `max_position_embeddings`.
    pub fn max_length(&self) -> usize {
        self.encoder.max_length
    }

    /// The instruction used when a query has none (`None` by default).
    pub fn default_instruction(&self) -> Option<&str> {
        self.instruction.as_deref()
    }

    /// The prompt for one (instruction, query, document), as the model reads it; `None`
    /// takes the reranker's default instruction.
    pub fn encode(
        &self,
        instruction: Option<&str>,
        query: &str,
        document: &str,
    ) -> Result<MxbaiPrompt> {
        let instruction = instruction.or(self.instruction.as_deref());
        self.encoder.encode(instruction, query, document)
    }

    /// Scores `docs` against `query` (its instruction, else the default one): the score and
    /// the logit per document, in input order, and how many prompts were cut.
    pub fn score_with_logits(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<MxbaiScore>> {
        Ok(self.score_counted(query, docs)?.0)
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
        let instruction = query.instruction.as_deref().or(self.instruction.as_deref());
        self.encoder.room(instruction, &query.text)
    }

    /// Scores already-tokenized prompts in exactly one packed forward pass (no budget split).
    pub fn score_token_ids(&self, prompts: &[&[u32]]) -> Result<Vec<MxbaiScore>> {
        let logits = self.pool.install(|| self.scorer.logits(prompts))?;
        Ok(logits.into_iter().map(|l| self.to_score(l)).collect())
    }

    fn to_score(&self, logit: f32) -> MxbaiScore {
        let score = match self.estimated_max {
            Some(max) => sigmoid(logit - max / 2.0),
            None => logit,
        };
        MxbaiScore { score, logit }
    }

    fn score_counted(
        &self,
        query: &RerankQuery,
        docs: &[&str],
    ) -> Result<(Vec<MxbaiScore>, usize)> {
        let pairs: Vec<(&RerankQuery, &str)> = docs.iter().map(|d| (query, *d)).collect();
        let (logits, truncated) = self.logits_counted(&pairs)?;
        Ok((
            logits.into_iter().map(|l| self.to_score(l)).collect(),
            truncated,
        ))
    }

    /// Each pair's logit `l_1 - l_0` (its query's instruction, else the default one), all in
    /// packed batches, and how many prompts were cut to `max_length` (logged at debug level).
    fn logits_counted(&self, pairs: &[(&RerankQuery, &str)]) -> Result<(Vec<f32>, usize)> {
        if pairs.is_empty() {
            return Ok((Vec::new(), 0));
        }
        self.pool.install(|| {
            let prompts = pairs
                .par_iter()
                .map(|(q, d)| self.encode(q.instruction.as_deref(), &q.text, d))
                .collect::<Result<Vec<_>>>()?;
            let truncated = prompts.iter().filter(|p| p.truncated()).count();
            if truncated > 0 {
                tracing::debug!(
                    stage = "rerank",
                    truncated,
                    pairs = pairs.len(),
                    max_length = self.max_length(),
                    "pairs cut to max_length: the model judged their beginning only"
                );
            }
            let ids: Vec<Vec<u32>> = prompts.into_iter().map(|p| p.ids).collect();
            let logits =
                self.scorer
                    .logits_in_batches(&ids, self.token_budget, self.max_batch_size)?;
            Ok((logits, truncated))
        })
    }
}

impl Reranker for MxbaiReranker {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(self.score_detailed(query, docs)?.scores)
    }

    /// The scores, and how many prompts had their query or document cut to `max_length`.
    /// With [`ModelOptions::passages`], a document longer than the room beside the query is
    /// scored by windows ([`Passages`]) and [`RerankScores::passages`] says which won.
    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        self.pool.install(|| {
            score_documents(
                self.passages.as_ref(),
                docs,
                self.name(),
                || self.room(query),
                |d| self.encoder.document_tokens(d),
                |docs| {
                    let (scores, truncated) = self.score_counted(query, docs)?;
                    Ok((scores.into_iter().map(|s| s.score).collect(), truncated))
                },
            )
        })
    }

    fn name(&self) -> &str {
        "mxbai-rerank-v2"
    }

    /// Each pair's logit `l_1 - l_0` (its query's instruction, else the default one), whether
    /// or not the scores are [normalized](MxbaiRerankerBuilder::normalize); `None` with
    /// passages on, where a score is the best of a document's windows rather than one logit.
    fn raw_score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Option<Vec<f32>>> {
        if self.passages.is_some() {
            return Ok(None);
        }
        Ok(Some(self.logits_counted(pairs)?.0))
    }
}

/// Configures and loads an [`MxbaiReranker`]; [`MxbaiRerankerBuilder::build`] checks
/// everything.
#[derive(Debug, Clone)]
pub struct MxbaiRerankerBuilder {
    dir: PathBuf,
    tokenizer: Option<PathBuf>,
    options: ModelOptions,
    instruction: Option<String>,
    estimated_max: Option<f32>,
}

impl MxbaiRerankerBuilder {
    /// Uses this `tokenizer.json` instead of the model directory's.
    pub fn tokenizer(mut self, path: impl Into<PathBuf>) -> Self {
        self.tokenizer = Some(path.into());
        self
    }

    /// Sets the [`ModelOptions`]. For mxbai-rerank-v2, `max_length` is the most tokens of the
    /// query and the document together (default 8192, the package's; see the
    /// [module documentation](self) for how they are cut), `token_budget` the most tokens
    /// packed into one forward pass (default 8192), `max_batch_size` the most prompts in one
    /// (default: no limit but the budget); with `threads`, tokenization and the forward passes
    /// run on a private pool of that size (default: the global rayon pool).
    pub fn options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// The instruction for queries without one (default: none, as the package).
    pub fn instruction(mut self, instruction: impl Into<String>) -> Self {
        self.instruction = Some(instruction.into());
        self
    }

    /// Scores become `sigmoid(logit - estimated_max / 2)`, in (0, 1), as the package's
    /// `predict(normalize=True)`: [`BASE_ESTIMATED_MAX`] for mxbai-rerank-base-v2,
    /// [`LARGE_ESTIMATED_MAX`] for -large-v2. By default scores are the raw logits.
    pub fn normalize(mut self, estimated_max: f32) -> Self {
        self.estimated_max = Some(estimated_max);
        self
    }

    /// Checks the options, loads the tokenizer and the weights.
    pub fn build(self) -> Result<MxbaiReranker> {
        self.options.validate("mxbai-rerank-v2", 1)?;
        if let Some(max) = self.estimated_max.filter(|m| !m.is_finite()) {
            return Err(Error::Config(format!(
                "estimated_max {max} must be a finite number"
            )));
        }
        let (precision, device) = (self.options.precision, self.options.device);
        let dir = ModelDir::open(&self.dir)?;
        let config =
            Qwen3Config::from_file_for(&dir.path().join(CONFIG_FILE), DecoderFamily::Qwen2)?;
        let model_max_length = config
            .max_position_embeddings
            .unwrap_or(DEFAULT_MODEL_MAX_LENGTH);
        let (tokenizer, tokenizer_path) = dir.tokenizer_or(self.tokenizer.as_deref())?;
        let max_length = self.options.max_length.unwrap_or(DEFAULT_MAX_LENGTH);
        let encoder = PromptEncoder::new(tokenizer, &tokenizer_path, max_length, model_max_length)?;
        let max_positions = encoder.max_prompt_len();
        let model =
            DecoderEngine::load(dir.path(), config, max_positions, precision, device, true)?;
        let scorer = Qwen3Scorer::new(model, encoder.yes, encoder.no)?;
        let rows = scorer.vocab_rows();
        if let Some(id) = encoder.fixed_ids().find(|&id| id as usize >= rows) {
            return Err(Error::model(format!(
                "the prompt's token id {id} is outside the embedding matrix ({rows} rows): \
                 the tokenizer does not belong to these weights"
            )));
        }
        let pool = self.options.thread_pool("mxbai-reranker")?;
        Ok(MxbaiReranker {
            scorer,
            encoder,
            instruction: self.instruction,
            estimated_max: self.estimated_max,
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
    fn query_and_document_parts_are_the_packages() {
        assert_eq!(format_query(None, "q"), "query: q");
        assert_eq!(format_query(Some(""), "q"), "query: q");
        assert_eq!(format_query(Some("I"), "q"), "instruction: I\nquery: q");
        assert_eq!(format_document(""), "document: ");
        assert!(PREFIX.ends_with("<|im_end|>\n<|im_start|>user\n"));
        assert!(TASK_PROMPT.ends_with(", 1 for relevant).\nRelevance:"));
    }
}
