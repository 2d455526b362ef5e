//! A reranker that scores documents by late interaction: the MaxSim of their ColBERT token
//! vectors against the query's.

use std::sync::Arc;

use rayon::prelude::*;

use super::{RerankQuery, Reranker};
use crate::embed::{maxsim, ColbertEncoder};
use crate::models::ModelOptions;
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
#[derive(Debug, Clone)]
pub struct ColbertReranker {
    encoder: Arc<ColbertEncoder>,
}

impl ColbertReranker {
    /// A reranker over `encoder` (an `Arc` shares one encoder with other users).
    pub fn new(encoder: impl Into<Arc<ColbertEncoder>>) -> Self {
        ColbertReranker {
            encoder: encoder.into(),
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
        let d = self.encoder.encode(docs, Role::Document)?;
        let q = q[0].view();
        Ok(self
            .encoder
            .install(|| d.par_iter().map(|d| maxsim(q, d.view())).collect()))
    }

    fn name(&self) -> &str {
        "colbert"
    }
}
