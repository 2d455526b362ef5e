//! Step 7, stage 2 (precision): the [`Reranker`] trait and its implementations.
//!
//! - [`CrossEncoder`] (`cross_encoder`, feature `models`): BERT / XLM-R / ModernBERT /
//!   DeBERTa-v2 / v3 sequence classification;
//! - [`Qwen3Reranker`] (`qwen3`, feature `models`): instruction-aware yes/no scoring, with its
//!   prompt template and [`qwen3::Instructions`];
//! - [`MxbaiReranker`] ([`mxbai`], feature `models`): mxbai-rerank-v2 (a Qwen2 decoder) as
//!   mixedbread's `mxbai-rerank` package scores it;
//! - [`MonoT5Reranker`] ([`monot5`], feature `models`): monoT5 (a T5 encoder-decoder asked
//!   "Relevant:", true or false) as pygaggle scores it;
//! - [`EmbeddingReranker`] (`embedding`): cosine between query and document embeddings;
//! - [`ColbertReranker`] (`late_interaction`, feature `models`): MaxSim of ColBERT token
//!   vectors;
//! - [`LexicalReranker`] (`lexical`): model-free coverage of the query's content words;
//! - [`FallbackReranker`] (`fallback`): a primary scorer with a fallback and a latency budget;
//! - [`load_reranker`] (`load`, feature `models`): picks one of the above from `config.json`;
//! - [`ProtectPolicy`] (`protect`): keeps the exact lexical matches of factual queries on top;
//! - [`Passages`] (`passages`): long documents scored by overlapping windows (opt-in).

mod embedding;
mod lexical;
pub(crate) mod passages;
mod protect;

use std::sync::Arc;

pub use crate::text::passages::{PassageAggregate, Passages};
pub use embedding::{EmbeddingReranker, VectorSource};
pub use lexical::LexicalReranker;
pub use protect::ProtectPolicy;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

#[cfg(feature = "models")]
mod cross_encoder;
#[cfg(feature = "models")]
mod late_interaction;
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
pub use late_interaction::ColbertReranker;
#[cfg(feature = "models")]
pub use load::load_reranker;
#[cfg(feature = "models")]
pub use qwen3::Qwen3Reranker;
#[cfg(feature = "models")]
pub mod mxbai;
#[cfg(feature = "models")]
pub use mxbai::{MxbaiReranker, MxbaiRerankerBuilder};
#[cfg(feature = "models")]
pub mod monot5;
#[cfg(feature = "models")]
pub use monot5::{MonoT5Reranker, MonoT5RerankerBuilder};

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

impl From<&str> for RerankQuery {
    fn from(text: &str) -> Self {
        RerankQuery::new(text)
    }
}

impl From<String> for RerankQuery {
    fn from(text: String) -> Self {
        RerankQuery::new(text)
    }
}

impl From<&String> for RerankQuery {
    fn from(text: &String) -> Self {
        RerankQuery::new(text.as_str())
    }
}

/// One document of a [`Reranker::rank`] result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    /// The document's position in the input.
    pub index: usize,
    /// Its score: higher is more relevant (the scale is the reranker's).
    pub score: f32,
    /// The document's text, from [`Reranker::rank_with_documents`]; `None` from
    /// [`Reranker::rank`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
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
    /// How many documents were cut to the model's `max_length` beside the query (the model
    /// judged their beginning only); 0 when the scorer cannot tell. With [`Passages`] on,
    /// the windows that were cut (normally none).
    pub truncated: usize,
    /// With [`Passages`] on, one per document: the byte range of its text whose window gave
    /// its score (the whole text when it fit beside the query). Empty otherwise.
    pub passages: Vec<std::ops::Range<usize>>,
}

impl RerankScores {
    /// Scores from `scorer`, with nothing else to say (no fallback, nothing truncated).
    pub fn new(scores: Vec<f32>, scorer: impl Into<String>) -> Self {
        RerankScores {
            scores,
            scorer: scorer.into(),
            fallback_reason: None,
            truncated: 0,
            passages: Vec::new(),
        }
    }

    /// These scores, or an [`Error::Rerank`] when they are not one per document (a host
    /// reranker's bug), which names the scorer.
    pub(crate) fn one_per_document(self, documents: usize) -> Result<Self> {
        if self.scores.len() == documents {
            return Ok(self);
        }
        Err(Error::rerank(format!(
            "{} returned {} scores for {documents} documents",
            self.scorer,
            self.scores.len(),
        )))
    }
}

/// A stage-2 reranker: one score per document, in input order, higher is more relevant.
pub trait Reranker: Send + Sync {
    /// Scores each of `docs` against `query`; the result has `docs.len()` entries.
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>>;

    /// Like [`Reranker::score`], and says which scorer produced the scores. Composite rerankers
    /// (e.g. one with a fallback) override it; the pipeline calls this method.
    fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
        Ok(RerankScores::new(self.score(query, docs)?, self.name()))
    }

    /// A short name for responses (e.g. `"cross-encoder"`).
    fn name(&self) -> &str {
        "reranker"
    }

    /// Scores (query, document) pairs whose queries may differ, one score per pair in input
    /// order: how a server scores the requests of many clients in one go. The default scores
    /// each distinct query's documents with [`Reranker::score_detailed`]; the model rerankers
    /// pack every pair into the same batches.
    fn score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Vec<f32>> {
        score_pairs_by_query(self, pairs)
    }

    /// The pairs' scores before the model's final activation (a cross-encoder's logits, whose
    /// sigmoid is the score), one per pair in input order: what text-embeddings-inference's
    /// `raw_scores` returns. `Ok(None)` (the default) when the reranker has no such scores,
    /// whatever the pairs, so a call with no pairs tells whether it has them.
    fn raw_score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Option<Vec<f32>>> {
        let _ = pairs;
        Ok(None)
    }

    /// How many tokens the model computes for `document` beside `query` (special tokens
    /// included, after truncation): what a server reports as usage and bounds its batches by.
    /// `None` (the default) when the reranker cannot tell or the texts cannot be tokenized.
    fn token_count(&self, query: &RerankQuery, document: &str) -> Option<usize> {
        let _ = (query, document);
        None
    }

    /// Scores `documents` against `query` and returns them best first, as indices into
    /// `documents` with their scores: the shape of sentence-transformers' `CrossEncoder.rank`.
    /// `top_n` keeps only the best N (`None`: all). Equal scores keep input order; a NaN
    /// score ranks last.
    ///
    /// ```
    /// use rerank::rerankers::LexicalReranker;
    /// use rerank::Reranker;
    ///
    /// let docs = ["Cats sleep a lot", "BM25 ranks documents by term statistics", "Dogs bark"];
    /// let ranked = LexicalReranker.rank("how does bm25 rank documents", &docs, Some(2))?;
    /// assert_eq!(ranked[0].index, 1);
    /// assert_eq!(ranked.len(), 2);
    /// # Ok::<(), rerank::Error>(())
    /// ```
    fn rank<S: AsRef<str>>(
        &self,
        query: impl Into<RerankQuery>,
        documents: &[S],
        top_n: Option<usize>,
    ) -> Result<Vec<Ranked>>
    where
        Self: Sized,
    {
        rank_by_scores(self, &query.into(), documents, top_n)
    }

    /// Like [`Reranker::rank`], with each document's text in [`Ranked::document`].
    fn rank_with_documents<S: AsRef<str>>(
        &self,
        query: impl Into<RerankQuery>,
        documents: &[S],
        top_n: Option<usize>,
    ) -> Result<Vec<Ranked>>
    where
        Self: Sized,
    {
        let mut ranked = rank_by_scores(self, &query.into(), documents, top_n)?;
        for r in &mut ranked {
            r.document = Some(documents[r.index].as_ref().to_string());
        }
        Ok(ranked)
    }
}

/// [`Reranker::rank`] for any reranker, `dyn` ones included.
fn rank_by_scores<R: Reranker + ?Sized, S: AsRef<str>>(
    reranker: &R,
    query: &RerankQuery,
    documents: &[S],
    top_n: Option<usize>,
) -> Result<Vec<Ranked>> {
    if documents.is_empty() || top_n == Some(0) {
        return Ok(Vec::new());
    }
    let docs: Vec<&str> = documents.iter().map(AsRef::as_ref).collect();
    let scores = reranker
        .score_detailed(query, &docs)?
        .one_per_document(docs.len())?
        .scores;
    let mut ranked: Vec<Ranked> = scores
        .into_iter()
        .enumerate()
        .map(|(index, score)| Ranked {
            index,
            score,
            document: None,
        })
        .collect();
    // Best first; NaN last; ties in input order (the sort is stable).
    ranked.sort_by(|a, b| match (a.score.is_nan(), b.score.is_nan()) {
        (false, false) => b.score.total_cmp(&a.score),
        (a_nan, b_nan) => a_nan.cmp(&b_nan),
    });
    ranked.truncate(top_n.unwrap_or(usize::MAX));
    Ok(ranked)
}

/// [`Reranker::score_pairs`] as one [`Reranker::score_detailed`] call per distinct query.
pub(crate) fn score_pairs_by_query<R: Reranker + ?Sized>(
    reranker: &R,
    pairs: &[(&RerankQuery, &str)],
) -> Result<Vec<f32>> {
    let mut groups: Vec<(&RerankQuery, Vec<usize>)> = Vec::new();
    for (i, (query, _)) in pairs.iter().enumerate() {
        match groups.iter_mut().find(|(q, _)| q == query) {
            Some((_, members)) => members.push(i),
            None => groups.push((query, vec![i])),
        }
    }
    let mut out = vec![f32::NAN; pairs.len()];
    for (query, members) in groups {
        let docs: Vec<&str> = members.iter().map(|&i| pairs[i].1).collect();
        let scores = reranker
            .score_detailed(query, &docs)?
            .one_per_document(docs.len())?
            .scores;
        for (i, s) in members.into_iter().zip(scores) {
            out[i] = s;
        }
    }
    Ok(out)
}

/// `Reranker` for references and smart pointers to a reranker: every method forwards.
macro_rules! forward_reranker {
    ($($pointer:ty),*) => {$(
        impl<R: Reranker + ?Sized> Reranker for $pointer {
            fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
                (**self).score(query, docs)
            }
            fn score_detailed(&self, query: &RerankQuery, docs: &[&str]) -> Result<RerankScores> {
                (**self).score_detailed(query, docs)
            }
            fn name(&self) -> &str {
                (**self).name()
            }
            fn score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Vec<f32>> {
                (**self).score_pairs(pairs)
            }
            fn raw_score_pairs(
                &self,
                pairs: &[(&RerankQuery, &str)],
            ) -> Result<Option<Vec<f32>>> {
                (**self).raw_score_pairs(pairs)
            }
            fn token_count(&self, query: &RerankQuery, document: &str) -> Option<usize> {
                (**self).token_count(query, document)
            }
        }
    )*};
}

forward_reranker!(&R, Arc<R>, Box<R>);
