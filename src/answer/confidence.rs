//! Confidence bands: a grounded answer's confidence as `high`, `medium` or `low`; the relevance
//! of its sources to the question ([`RelevanceMeasure`], [`relevance`]); and the short form of
//! its sources that a user sees.
//!
//! An answer has two figures, because it can fail in two ways. Grounding (the answer's
//! `confidence`) says whether what it claims is in its sources; relevance says whether those
//! sources are about the question at all. A quote from a passport note is perfectly grounded and
//! still no answer to "when is Sarah's weekly sync", so an answer's band is the weaker of the
//! two bands.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::ContextSource;
use crate::text::content_tokens;
use crate::{Error, Result};

/// A confidence band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfidenceBand {
    /// At or above [`ConfidenceBands::high`]: show the answer as is.
    High,
    /// At or above [`ConfidenceBands::medium`]: show it with a caution.
    Medium,
    /// Below: a possible hallucination; show the sources rather than the answer.
    Low,
}

impl ConfidenceBand {
    /// The weaker of two bands (`low` < `medium` < `high`).
    ///
    /// ```
    /// use rerank::answer::ConfidenceBand;
    /// assert_eq!(ConfidenceBand::High.weaker(ConfidenceBand::Low), ConfidenceBand::Low);
    /// assert_eq!(ConfidenceBand::Medium.weaker(ConfidenceBand::High), ConfidenceBand::Medium);
    /// ```
    pub fn weaker(self, other: ConfidenceBand) -> ConfidenceBand {
        let rank = |b: ConfidenceBand| match b {
            ConfidenceBand::Low => 0,
            ConfidenceBand::Medium => 1,
            ConfidenceBand::High => 2,
        };
        if rank(other) < rank(self) {
            other
        } else {
            self
        }
    }
}

/// Where the bands start.
///
/// ```
/// use rerank::answer::{ConfidenceBand, ConfidenceBands};
/// let bands = ConfidenceBands::default();
/// assert_eq!(bands.band(1.0), ConfidenceBand::High);
/// assert_eq!(bands.band(0.6), ConfidenceBand::Medium);
/// assert_eq!(bands.band(0.2), ConfidenceBand::Low);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConfidenceBands {
    /// The lowest `high` confidence (default 0.8).
    pub high: f32,
    /// The lowest `medium` confidence (default 0.5).
    pub medium: f32,
}

impl Default for ConfidenceBands {
    fn default() -> Self {
        ConfidenceBands {
            high: 0.8,
            medium: 0.5,
        }
    }
}

impl ConfidenceBands {
    /// Bands starting at `high` and `medium`; needs `0 <= medium <= high <= 1`.
    pub fn new(high: f32, medium: f32) -> Result<Self> {
        if !(0.0..=1.0).contains(&medium) || !(medium..=1.0).contains(&high) {
            return Err(Error::Config(format!(
                "confidence bands need 0 <= medium <= high <= 1, got medium {medium}, high {high}"
            )));
        }
        Ok(ConfidenceBands { high, medium })
    }

    /// The default bands of an answer's relevance: high from 0.6, medium from 0.4. With
    /// [`RelevanceMeasure::QueryTerms`]: high when the best source has at least 60% of the
    /// question's content terms, low under 40% (one term of three); with a reranker's
    /// probability, high from p = 0.6, low under p = 0.4.
    pub fn relevance() -> Self {
        ConfidenceBands {
            high: 0.6,
            medium: 0.4,
        }
    }

    /// The band of `confidence`.
    pub fn band(&self, confidence: f32) -> ConfidenceBand {
        if confidence >= self.high {
            ConfidenceBand::High
        } else if confidence >= self.medium {
            ConfidenceBand::Medium
        } else {
            ConfidenceBand::Low
        }
    }
}

/// How an answer's relevance (do its sources match the question?) is measured: a figure in
/// `[0, 1]` for the best source the generator was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelevanceMeasure {
    /// The share of the question's distinct content terms ([`content_tokens`]: function words
    /// dropped, Snowball-stemmed; with the full names of the people it names by alias) that
    /// the source's text contains. Model-free, so it means the same under every retriever and
    /// reranker (the lexical reranker's own score). The default.
    #[default]
    QueryTerms,
    /// The logistic sigmoid of the source's reranker score, for rerankers whose score is a
    /// logit (cross-encoders, mxbai-rerank-v2): 0.5 at logit 0.
    RerankerSigmoid,
    /// The source's reranker score as it is (clamped to `[0, 1]`), for rerankers whose score is
    /// a probability (Qwen3-Reranker's p(yes)).
    RerankerProbability,
}

/// One source as [`relevance`] sees it: its text and its reranker score, when stage 2 scored it.
#[derive(Debug, Clone, Copy)]
pub struct SourceScores<'a> {
    /// The source's full text (title included).
    pub text: &'a str,
    /// The reranker's score (`Hit::rerank_score`), when stage 2 scored the source.
    pub rerank_score: Option<f32>,
}

/// The relevance of `sources` to `question`: the best source's figure under `measure`, and the
/// measure actually used. A reranker measure needs every source's reranker score; when stage 2
/// did not score them (skipped, failed, beyond the rerank depth), the figure falls back to
/// [`RelevanceMeasure::QueryTerms`], and the measure returned says so. `None` without sources.
///
/// ```
/// use rerank::answer::{relevance, RelevanceMeasure, SourceScores};
/// let passport = SourceScores { text: "Passport renewal takes about six weeks.", rerank_score: None };
/// // One content term of three ("week"): a third.
/// let (r, used) = relevance(RelevanceMeasure::QueryTerms, "when is Sarah's weekly sync", &[passport]).unwrap();
/// assert!((r - 1.0 / 3.0).abs() < 1e-6);
/// assert_eq!(used, RelevanceMeasure::QueryTerms);
/// // A cross-encoder's logit of 2 is p = 0.88.
/// let scored = SourceScores { text: "anything", rerank_score: Some(2.0) };
/// let (r, _) = relevance(RelevanceMeasure::RerankerSigmoid, "q", &[scored]).unwrap();
/// assert!((r - 0.8808).abs() < 1e-3);
/// ```
pub fn relevance(
    measure: RelevanceMeasure,
    question: &str,
    sources: &[SourceScores<'_>],
) -> Option<(f32, RelevanceMeasure)> {
    if sources.is_empty() {
        return None;
    }
    let scores: Option<Vec<f32>> = sources
        .iter()
        .map(|s| s.rerank_score.filter(|x| x.is_finite()))
        .collect();
    let (figures, used): (Vec<f32>, _) = match (measure, scores) {
        (RelevanceMeasure::RerankerSigmoid, Some(scores)) => (
            scores.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect(),
            measure,
        ),
        (RelevanceMeasure::RerankerProbability, Some(scores)) => {
            (scores.iter().map(|&x| x.clamp(0.0, 1.0)).collect(), measure)
        }
        _ => {
            let wanted: HashSet<String> = content_tokens(question).into_iter().collect();
            let coverage = |text: &str| {
                if wanted.is_empty() {
                    return 0.0;
                }
                let have: HashSet<String> = content_tokens(text).into_iter().collect();
                wanted.intersection(&have).count() as f32 / wanted.len() as f32
            };
            (
                sources.iter().map(|s| coverage(s.text)).collect(),
                RelevanceMeasure::QueryTerms,
            )
        }
    };
    let best = figures.into_iter().fold(0.0f32, f32::max);
    Some((best, used))
}

/// A source as a user sees it: where, a short excerpt, a rounded score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceBrief {
    /// The source name (file, URL, or the document id).
    pub source: String,
    /// The page, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// At most [`EXCERPT_CHARS`] characters of the text, cut at a word, with `...` when cut.
    pub excerpt: String,
    /// The retrieval score rounded to 4 decimals.
    pub score: f32,
}

/// The length of a [`SourceBrief::excerpt`] in characters (500, as the PDF Q&A plan shows
/// them).
pub const EXCERPT_CHARS: usize = 500;

impl SourceBrief {
    /// The brief form of a prompt source.
    pub fn from_source(s: &ContextSource) -> Self {
        SourceBrief {
            source: s.source.clone(),
            page: s.page,
            excerpt: excerpt(&s.excerpt, EXCERPT_CHARS),
            score: round4(s.score),
        }
    }
}

/// `x` rounded to 4 decimals.
pub fn round4(x: f32) -> f32 {
    ((f64::from(x) * 10_000.0).round() / 10_000.0) as f32
}

/// The first `max` characters of `text` (whitespace collapsed), cut at the last word boundary,
/// with `...` when anything was cut.
pub fn excerpt(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i > max / 2 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}...", cut.trim_end_matches([',', ';', ':', '.', ' ']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_cut_at_words() {
        assert_eq!(excerpt("short  text\nhere", 50), "short text here");
        let e = excerpt("alpha beta gamma delta epsilon", 14);
        assert_eq!(e, "alpha beta...");
        assert_eq!(round4(0.123456), 0.1235);
        assert!(ConfidenceBands::new(0.4, 0.5).is_err());
    }

    #[test]
    fn relevance_takes_the_best_source_and_falls_back_to_query_terms() {
        let q = "database connection pool configuration";
        let pooling = SourceScores {
            text: "Dense recall uses mean pooling and L2 normalization.",
            rerank_score: Some(3.0),
        };
        let pool = SourceScores {
            text: "The database connection pool is configured in db.toml.",
            rerank_score: None,
        };
        // Query terms: the best of 1/4 and 4/4.
        let (r, used) = relevance(RelevanceMeasure::QueryTerms, q, &[pooling, pool]).unwrap();
        assert_eq!((r, used), (1.0, RelevanceMeasure::QueryTerms));
        // A reranker measure with a source stage 2 did not score: query terms, and it says so.
        let (r, used) = relevance(RelevanceMeasure::RerankerSigmoid, q, &[pooling, pool]).unwrap();
        assert_eq!((r, used), (1.0, RelevanceMeasure::QueryTerms));
        // Every source scored: the sigmoid of the best logit, or the probability clamped.
        let (r, used) = relevance(RelevanceMeasure::RerankerSigmoid, q, &[pooling]).unwrap();
        assert_eq!(used, RelevanceMeasure::RerankerSigmoid);
        assert!((r - 1.0 / (1.0 + (-3.0f32).exp())).abs() < 1e-6);
        let (r, _) = relevance(RelevanceMeasure::RerankerProbability, q, &[pooling]).unwrap();
        assert_eq!(r, 1.0);
        assert!(relevance(RelevanceMeasure::QueryTerms, q, &[]).is_none());
        // A question with no content term matches nothing.
        let (r, _) = relevance(RelevanceMeasure::QueryTerms, "what is it", &[pool]).unwrap();
        assert_eq!(r, 0.0);
    }
}
