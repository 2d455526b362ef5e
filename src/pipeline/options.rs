//! Search options: candidate depth, stage 2, threshold, dedup and the metadata filters
//! ([`Filter`], defined in `crate::filter`).

use serde::{Deserialize, Serialize};

use crate::{Document, Error, Filter, Result};

/// How many candidates stage 1 fetches and what stage 2 and post-processing keep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchOptions {
    /// Hits returned (default 10).
    pub top_k: usize,
    /// Stage 1 fetches `top_k * candidate_multiplier` candidates (default 10)...
    pub candidate_multiplier: usize,
    /// ...capped at `max_candidates` (default 100), but never fewer than `top_k`.
    pub max_candidates: usize,
    /// Hits whose final score is below this are dropped (default: none).
    pub score_threshold: Option<f32>,
    /// Keeps only the best hit per key (default: source + page).
    pub dedup: DedupKey,
    /// Every filter must match for a hit to be kept (default: none).
    pub filters: Vec<Filter>,
    /// Rerank only the first N candidates; the rest keep their stage-1 order after them
    /// (default: none, every candidate is reranked). A request can override it. In a
    /// [`PipelineConfig`](super::PipelineConfig) it is `reranker.depth`.
    #[serde(skip)]
    pub rerank_depth: Option<usize>,
    /// Skips stage 2 when stage 1 returns no more candidates than `top_k` (default: false;
    /// stage 2 runs whenever a reranker is set, since the order of a short list matters too).
    /// It saves model time where the stage-1 order of a short list is good enough; the response
    /// says when it applied ([`SearchResponse::stage2_skipped`](super::SearchResponse::stage2_skipped)).
    /// In a [`PipelineConfig`](super::PipelineConfig) it is `reranker.skip_within_top_k`.
    #[serde(skip)]
    pub skip_rerank_within_top_k: bool,
    /// When the best hit scores below this (or nothing is found), the response carries a hint
    /// to reformulate the query ([`SearchResponse::reformulate`](super::SearchResponse::reformulate);
    /// default: none). The floor is on the final score, so it depends on the scorer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reformulate_below: Option<f32>,
    /// The hybrid final ranking of the reranked candidates: `reranker x 0.6 + stage 1 x 0.3 +
    /// recency x 0.1` by default, each term normalized to `[0, 1]` ([`FinalBlend`](super::FinalBlend);
    /// default: none, the reranker's score orders them). `final_blend: {}` in a config is the
    /// two-phase knowledge base plan's weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_blend: Option<super::FinalBlend>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            top_k: 10,
            candidate_multiplier: 10,
            max_candidates: 100,
            score_threshold: None,
            dedup: DedupKey::default(),
            filters: Vec::new(),
            rerank_depth: None,
            skip_rerank_within_top_k: false,
            reformulate_below: None,
            final_blend: None,
        }
    }
}

impl SearchOptions {
    /// The number of stage-1 candidates for `top_k`:
    /// `max(top_k, min(top_k * candidate_multiplier, max_candidates))`.
    pub fn candidates_for(&self, top_k: usize) -> usize {
        top_k
            .saturating_mul(self.candidate_multiplier)
            .min(self.max_candidates)
            .max(top_k)
    }

    /// Checks the values (called by the pipeline builder).
    pub fn validate(&self) -> Result<()> {
        if self.top_k == 0 {
            return Err(Error::Config("top_k must be at least 1".into()));
        }
        if self.candidate_multiplier == 0 {
            return Err(Error::Config(
                "candidate_multiplier must be at least 1".into(),
            ));
        }
        if self.max_candidates == 0 {
            return Err(Error::Config("max_candidates must be at least 1".into()));
        }
        if let Some(t) = self.score_threshold {
            if t.is_nan() {
                return Err(Error::Config("score_threshold must not be NaN".into()));
            }
        }
        for f in &self.filters {
            f.validate()?;
        }
        if let Some(blend) = &self.final_blend {
            blend.validate()?;
        }
        if self.rerank_depth == Some(0) {
            return Err(Error::Config(
                "rerank_depth must be at least 1 (leave it out to rerank every candidate)".into(),
            ));
        }
        Ok(())
    }
}

/// Which hits count as duplicates of each other.
///
/// In configs it is a string: `"none"`, `"id"`, `"source"`, `"source_page"` or
/// `"metadata:FIELD"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(try_from = "String", into = "String")]
pub enum DedupKey {
    /// No dedup.
    None,
    /// Same document id.
    Id,
    /// Same source (documents without a source are never duplicates).
    Source,
    /// Same source and page (the default; documents without a source are never duplicates).
    #[default]
    SourcePage,
    /// Same value of this metadata field (documents without it are never duplicates).
    Metadata(String),
}

impl TryFrom<String> for DedupKey {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Self, String> {
        match s.as_str() {
            "none" => Ok(DedupKey::None),
            "id" => Ok(DedupKey::Id),
            "source" => Ok(DedupKey::Source),
            "source_page" => Ok(DedupKey::SourcePage),
            other => match other.strip_prefix("metadata:") {
                Some(field) if !field.is_empty() => Ok(DedupKey::Metadata(field.to_string())),
                _ => Err(format!(
                    "unknown dedup key {other:?}: use none, id, source, source_page or metadata:FIELD"
                )),
            },
        }
    }
}

impl From<DedupKey> for String {
    fn from(k: DedupKey) -> String {
        match k {
            DedupKey::None => "none".into(),
            DedupKey::Id => "id".into(),
            DedupKey::Source => "source".into(),
            DedupKey::SourcePage => "source_page".into(),
            DedupKey::Metadata(f) => format!("metadata:{f}"),
        }
    }
}

impl DedupKey {
    /// The key of `doc`, or `None` when it has no key (and so is never a duplicate).
    pub fn key_of(&self, doc: &Document) -> Option<String> {
        match self {
            DedupKey::None => None,
            DedupKey::Id => Some(doc.id.clone()),
            DedupKey::Source => doc.source.clone(),
            DedupKey::SourcePage => doc.source.as_ref().map(|s| match doc.page {
                Some(p) => format!("{s}\u{1f}{p}"),
                None => s.clone(),
            }),
            DedupKey::Metadata(field) => doc.metadata.get(field).map(|v| v.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_depth_is_multiplied_capped_and_at_least_top_k() {
        let o = SearchOptions::default();
        assert_eq!(o.candidates_for(3), 30);
        assert_eq!(o.candidates_for(10), 100);
        assert_eq!(o.candidates_for(20), 100);
        assert_eq!(o.candidates_for(150), 150);
        let o = SearchOptions {
            candidate_multiplier: 4,
            max_candidates: 50,
            ..SearchOptions::default()
        };
        assert_eq!(o.candidates_for(5), 20);
        assert_eq!(o.candidates_for(usize::MAX), usize::MAX);
    }

    #[test]
    fn dedup_keys() {
        let a = Document::new("1", "").with_source("a.pdf").with_page(1);
        let b = Document::new("2", "").with_source("a.pdf").with_page(2);
        let c = Document::new("3", "");
        let k = DedupKey::SourcePage;
        assert_ne!(k.key_of(&a), k.key_of(&b));
        assert_eq!(k.key_of(&c), None);
        assert_eq!(DedupKey::Source.key_of(&a), DedupKey::Source.key_of(&b));
        assert_eq!(DedupKey::None.key_of(&a), None);
    }

    #[test]
    fn validation() {
        assert!(SearchOptions::default().validate().is_ok());
        let bad = SearchOptions {
            top_k: 0,
            ..SearchOptions::default()
        };
        assert!(bad.validate().is_err());
        let bad = SearchOptions {
            filters: vec![Filter::eq("", 1)],
            ..SearchOptions::default()
        };
        assert!(bad.validate().is_err());
    }
}
