//! A reranker that scores documents by late interaction: the MaxSim of their ColBERT token
//! vectors against the query's.

use std::sync::Arc;

use rayon::prelude::*;

use super::{RerankQuery, Reranker};
use crate::embed::{maxsim, ColbertEncoder};
use crate::models::ModelOptions;
use crate::recall::LateInteractionIndex;
use crate::{Result, Role};

/// Scores each document by [`maxsim`] of its token vectors against the query's, both from one
/// [`ColbertEncoder`] (the documents' vectors computed on the fly). Scores lie in
/// `[-q, q]` for a query of `q` vectors; the instruction of a [`RerankQuery`] is ignored.
///
/// ```no_run
/// use rerank::rerankers::{ColbertReranker, RerankQuery};
/// use rerank::Reranker;
/// let reranker = ColbertReranker::from_dir("models/answerai-colbert-small-v1", &Default::default())?;
/// let scores = reranker.score(&RerankQuery::new("what is bm25"), &["BM25 ranks", "cats"])?;
/// assert_eq!(scores.len(), 2);
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Clone)]
pub struct ColbertReranker {
    encoder: Arc<ColbertEncoder>,
    index: Option<Arc<LateInteractionIndex>>,
}

impl std::fmt::Debug for ColbertReranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColbertReranker")
            .field("encoder", &self.encoder)
            .field("index", &self.index.as_ref().map(|i| i.len()))
            .finish()
    }
}

impl ColbertReranker {
    /// A reranker over `encoder` (an `Arc` shares one encoder with other users).
    pub fn new(encoder: impl Into<Arc<ColbertEncoder>>) -> Self {
        ColbertReranker {
            encoder: encoder.into(),
            index: None,
        }
    }

    /// A reranker over `index`'s encoder that reads the candidates' token vectors from the
    /// index when it holds them (a candidate whose text is an indexed document's
    /// [`full_text`](crate::Document::full_text)), so that only the query and the others are
    /// encoded. The stored vectors are f16: scores differ from freshly encoded ones by f16
    /// rounding.
    pub fn with_index(index: Arc<LateInteractionIndex>) -> Self {
        ColbertReranker {
            encoder: index.encoder_arc(),
            index: Some(index),
        }
    }

    /// Loads the ColBERT model of `dir` with `options`.
    pub fn from_dir(dir: impl AsRef<std::path::Path>, options: &ModelOptions) -> Result<Self> {
        let encoder = ColbertEncoder::builder(dir)
            .options(options.clone())
            .build()?;
        Ok(Self::new(encoder))
    }

    /// The encoder.
    pub fn encoder(&self) -> &ColbertEncoder {
        &self.encoder
    }
}

impl Reranker for ColbertReranker {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        if docs.is_empty() {
            return Ok(Vec::new());
        }
        let q = self.encoder.encode(&[query.text.as_str()], Role::Query)?;
        let stored = match &self.index {
            Some(index) => index.vectors_of_texts(docs),
            None => vec![None; docs.len()],
        };
        let missing: Vec<&str> = docs
            .iter()
            .zip(&stored)
            .filter(|(_, s)| s.is_none())
            .map(|(d, _)| *d)
            .collect();
        let mut fresh = self.encoder.encode(&missing, Role::Document)?.into_iter();
        let d: Vec<ndarray::Array2<f32>> = stored
            .into_iter()
            .map(|s| s.or_else(|| fresh.next()).unwrap_or_default())
            .collect();
        let q = q[0].view();
        Ok(self
            .encoder
            .install(|| d.par_iter().map(|d| maxsim(q, d.view())).collect()))
    }

    fn name(&self) -> &str {
        "colbert"
    }

    /// The scores themselves: MaxSim has no activation to leave out.
    fn raw_score_pairs(&self, pairs: &[(&RerankQuery, &str)]) -> Result<Option<Vec<f32>>> {
        self.score_pairs(pairs).map(Some)
    }

    /// The query's token ids (padded with `[MASK]` to the query length, as encoded) and the
    /// document's ([`ColbertEncoder::token_ids`]).
    fn token_count(&self, query: &RerankQuery, document: &str) -> Option<usize> {
        let (q, _) = self.encoder.token_ids(&query.text, Role::Query).ok()?;
        let (d, _) = self.encoder.token_ids(document, Role::Document).ok()?;
        Some(q.len() + d.len())
    }
}
