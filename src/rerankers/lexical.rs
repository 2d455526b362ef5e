//! A model-free reranker: how much of the query's content a document covers.

use std::collections::HashSet;

use super::{RerankQuery, Reranker};
use crate::text::content_tokens;
use crate::Result;

/// Scores each document by the share of the query's distinct content tokens it contains
/// ([`content_tokens`]: function words dropped, Snowball-stemmed), in `[0, 1]`.
///
/// It needs no weights, so a pipeline can rerank offline; it rewards documents that cover the
/// whole question over documents that repeat one of its words, which BM25 alone does not. A
/// model ([`CrossEncoder`](crate::CrossEncoder), [`Qwen3Reranker`](crate::Qwen3Reranker),
/// [`EmbeddingReranker`](super::EmbeddingReranker)) judges meaning and is far better when one
/// is available. The instruction of a [`RerankQuery`] is ignored.
///
/// ```
/// use rerank::rerankers::{LexicalReranker, RerankQuery};
/// use rerank::Reranker;
///
/// let scores = LexicalReranker.score(
///     &RerankQuery::new("rollback a failed deployment"),
///     &["A failed deployment needs a rollback.", "Deployment deployment."],
/// )?;
/// assert_eq!(scores, [1.0, 1.0 / 3.0]);
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct LexicalReranker;

impl Reranker for LexicalReranker {
    fn score(&self, query: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        let wanted: HashSet<String> = content_tokens(&query.text).into_iter().collect();
        if wanted.is_empty() {
            return Ok(vec![0.0; docs.len()]);
        }
        Ok(docs
            .iter()
            .map(|doc| {
                let have: HashSet<String> = content_tokens(doc).into_iter().collect();
                wanted.intersection(&have).count() as f32 / wanted.len() as f32
            })
            .collect())
    }

    fn name(&self) -> &str {
        "lexical"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_coverage_in_input_order() {
        let q = RerankQuery::new("hotel receipt rules");
        let docs = [
            "Keep the hotel receipt.",
            "nothing here",
            "Rules for hotels and receipts",
        ];
        let s = LexicalReranker.score(&q, &docs).unwrap();
        assert_eq!(s.len(), 3);
        assert!((s[0] - 2.0 / 3.0).abs() < 1e-6, "{s:?}");
        assert_eq!(s[1], 0.0);
        assert_eq!(s[2], 1.0);
    }

    #[test]
    fn a_query_without_content_scores_zero_everywhere() {
        let s = LexicalReranker
            .score(&RerankQuery::new("what is it"), &["a", "b"])
            .unwrap();
        assert_eq!(s, [0.0, 0.0]);
        assert!(LexicalReranker
            .score(&RerankQuery::new("x"), &[])
            .unwrap()
            .is_empty());
    }
}
