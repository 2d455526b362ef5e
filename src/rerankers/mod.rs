//! Step 7, stage 2 (precision): the [`Reranker`] trait and its implementations.
//!
//! - [`CrossEncoder`] (`cross_encoder`, feature `models`): BERT / XLM-R sequence
//!   classification;
//! - [`Qwen3Reranker`] (`qwen3`, feature `models`): instruction-aware yes/no scoring, with its
//!   prompt template and [`qwen3::Instructions`];
//! - [`EmbeddingReranker`] (`embedding`): cosine between query and document embeddings;
//! - [`LexicalReranker`] (`lexical`): model-free coverage of the query's content words;
//! - [`FallbackReranker`] (`fallback`): a primary scorer with a fallback and a latency budget;
//! - [`load_reranker`] (`load`, feature `models`): picks one of the above from `config.json`;
//! - [`ProtectPolicy`] (`protect`): keeps the exact lexical matches of factual queries on top.

mod embedding;
mod lexical;
mod protect;

use std::sync::Arc;

pub use embedding::{EmbeddingReranker, VectorSource};
pub use lexical::LexicalReranker;
pub use protect::ProtectPolicy;

use crate::Result;

#[cfg(feature = "models")]
mod cross_encoder;
#[cfg(feature = "models")]
mod load;
#[cfg(feature = "models")]
pub use cross_encoder::{
    Activation, CrossEncoder, CrossEncoderBuilder, PairScore, DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_TOKEN_BUDGET,
};

mod fallback;
pub mod qwen3;

pub use fallback::{FallbackReranker, FallbackRerankerBuilder};
#[cfg(feature = "models")]
pub use load::load_reranker;
#[cfg(feature = "models")]
pub use qwen3::Qwen3Reranker;

/// What a reranker scores documents against.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RerankQuery {
    /// The query (or, for two-phase queries, the task context) to judge relevance against.
    pub text: String,
    /// An optional instruction for instruction-aware rerankers (Qwen3-Reranker); others ignore it.
    pub instruction: Option<String>,
}

impl RerankQuery {
    /// A query without instruction.
    pub fn new(text: impl Into<String>) -> Self {
        RerankQuery {
            text: text.into(),
            instruction: None,
        }
    }

    /// Sets the instruction.
    pub fn with_instruction(mut self, instruction: impl Into<String>) -> Self {
        self.instruction = Some(instruction.into());
        self
    }
}

/// Scores from [`Reranker::score_detailed`], with what produced them.
#[derive(Debug, Clone, PartialEq)]
pub struct RerankScores {
    /// One score per document, in input order.
    pub scores: Vec<f32>,
    /// The name of the scorer that produced `scores` (a fallback may stand in for the primary).
    pub scorer: String,
    /// When a fallback produced the scores: why the primary scorer did not.
    pub fallback_reason: Option<String>,
}

/// A stage-2 reranker: one score per document, in input order, higher is more relevant.
pub trait Reranker: Send + Sync {
    /// Scores each of `docs` against `query`; the result has `docs.len()` entries.
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>>;

    /// Like [`Reranker::score`], and says which scorer produced the scores. Composite rerankers
    /// (e.g. one with a fallback) override it; the pipeline calls this method.
    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        Ok(RerankScores {
            scores: self.score(query, docs)?,
            scorer: self.name().to_string(),
            fallback_reason: None,
        })
    }

    /// A short name for responses (e.g. `"cross-encoder"`).
    fn name(&self) -> &str {
        "reranker"
    }
}

impl<R: Reranker + ?Sized> Reranker for Arc<R> {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        (**self).score(query, docs)
    }
    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        (**self).score_detailed(query, docs)
    }
    fn name(&self) -> &str {
        (**self).name()
    }
}

impl<R: Reranker + ?Sized> Reranker for Box<R> {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        (**self).score(query, docs)
    }
    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        (**self).score_detailed(query, docs)
    }
    fn name(&self) -> &str {
        (**self).name()
    }
}
