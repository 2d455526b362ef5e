//! Scoring long documents by passages: the windows and their aggregation are
//! `crate::text::passages`; this is where a model reranker's scores go through them.

#![cfg_attr(not(feature = "models"), allow(dead_code))]

use super::RerankScores;
use crate::text::passages::{PassagePlan, Passages, Token};
use crate::Result;

/// A model reranker's [`Reranker::score_detailed`](crate::Reranker::score_detailed): without
/// `passages`, `score(docs)` (one score per document and how many were cut); with them, the
/// windows of every document (`room()` tokens beside the query, `tokens(doc)` its tokens)
/// scored in one `score` call and aggregated, with the winning ranges.
pub(crate) fn score_documents(
    passages: Option<&Passages>,
    docs: &[&str],
    name: &str,
    room: impl FnOnce() -> Result<usize>,
    tokens: impl Fn(&str) -> Result<Vec<Token>> + Sync,
    score: impl Fn(&[&str]) -> Result<(Vec<f32>, usize)>,
) -> Result<RerankScores> {
    let Some(passages) = passages else {
        let (scores, truncated) = score(docs)?;
        return Ok(RerankScores {
            truncated,
            ..RerankScores::new(scores, name)
        });
    };
    let plan = PassagePlan::new(passages, docs, room()?, tokens)?;
    let (window_scores, truncated) = score(&plan.texts(docs)?)?;
    let (scores, ranges) = plan.aggregate(docs.len(), &window_scores, passages.aggregate)?;
    Ok(RerankScores {
        truncated,
        passages: ranges,
        ..RerankScores::new(scores, name)
    })
}
