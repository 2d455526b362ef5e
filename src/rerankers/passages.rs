//! Scoring long documents by passages: the windows and their aggregation are
//! `crate::text::passages`; this is where a model reranker's scores go through them.

#![cfg_attr(not(feature = "models"), allow(dead_code))]

use std::ops::Range;

use super::RerankScores;
use crate::text::passages::{PassagePlan, Passages, Token};
use crate::{Error, Result};

/// A model reranker's `passage_windows` test hook: the byte ranges of `document` that
/// `passages` scores in the `room()` tokens beside a query (the whole text when it fits),
/// `tokens(document)` its tokens. An [`Error::Config`] naming `reranker` when passages are off.
pub(crate) fn passage_windows(
    passages: Option<Passages>,
    reranker: &str,
    document: &str,
    room: impl FnOnce() -> Result<usize>,
    tokens: impl FnOnce(&str) -> Result<Vec<Token>>,
) -> Result<Vec<Range<usize>>> {
    let passages =
        passages.ok_or_else(|| Error::Config(format!("passages are off for this {reranker}")))?;
    let room = room()?;
    Ok(passages.windows(document, &tokens(document)?, room))
}

/// The logistic function, without overflow at either end: a yes/no logit's probability.
pub(crate) fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

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
