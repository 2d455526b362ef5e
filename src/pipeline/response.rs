//! What a pipeline search returns.

use serde::{Deserialize, Serialize};

use super::UsedInstruction;
use crate::classify::Classification;
use crate::Hit;

/// Milliseconds spent in each stage of one search. Stages that did not run are `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timings {
    /// Query classification.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classify_ms: Option<f64>,
    /// Semantic cache lookup (embedding the query included), when a cache is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_ms: Option<f64>,
    /// HyDE and query-variant generation, when they ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expand_ms: Option<f64>,
    /// Stage 1 (recall).
    #[serde(default)]
    pub retrieve_ms: f64,
    /// Stage 2 (rerank), when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank_ms: Option<f64>,
    /// Threshold, dedup, filters and top-k.
    #[serde(default)]
    pub postprocess_ms: f64,
    /// The whole search.
    pub total_ms: f64,
}

/// The result of [`Pipeline::search`](super::Pipeline::search). It reads back from its JSON, so
/// a cache can keep it outside the process (Redis, SQLite).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SearchResponse {
    /// The query as given.
    pub query: String,
    /// The final hits, best first (at most `top_k`).
    pub hits: Vec<Hit>,
    /// How many candidates stage 1 returned.
    pub candidates: usize,
    /// Whether stage 2 reordered the candidates.
    pub reranked: bool,
    /// What produced the final order: the reranker's name, or `"stage1"`.
    pub scorer: String,
    /// True when the reranker failed and stage-1 order was kept.
    pub rerank_fallback: bool,
    /// The reranker's error message, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_error: Option<String>,
    /// The query classification, when a classifier is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classification: Option<Classification>,
    /// Per-stage timings.
    pub timings: Timings,
    /// True when the response came from the semantic cache.
    pub cache_hit: bool,
    /// True when dense recall used a HyDE embedding.
    pub hyde: bool,
    /// The query variants retrieved and fused with the query (multi-query expansion).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<String>,
    /// The recall mode the request used (`None`: the pipeline's default retriever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// How many candidates the reranker scored (at most the rerank depth).
    #[serde(default)]
    pub reranked_candidates: usize,
    /// The reranker instructions used, with where each came from and for how many candidates
    /// (empty when no instruction was passed on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<UsedInstruction>,
    /// Why stage 2 did not rerank, when it did not: no reranker is configured, stage 1
    /// returned nothing, or [`SearchOptions::skip_rerank_within_top_k`](super::SearchOptions::skip_rerank_within_top_k)
    /// applied. `None` when it reranked, or when it failed (see `rerank_error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage2_skipped: Option<String>,
    /// A hint to reformulate the query, when the best hit scores below
    /// [`SearchOptions::reformulate_below`](super::SearchOptions::reformulate_below) or nothing
    /// was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reformulate: Option<String>,
}

/// How the queries of a pipeline with two-phase queries on
/// ([`PipelineBuilder::two_phase`](super::PipelineBuilder::two_phase)) used the format, counted
/// by [`Pipeline::search_with`](super::Pipeline::search_with) (and so by `answer`) since the
/// pipeline was built: [`Pipeline::two_phase_stats`](super::Pipeline::two_phase_stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TwoPhaseStats {
    /// Queries in the `[SEARCH] ... [TASK] ...` format, parsed.
    pub parsed: u64,
    /// Queries that did not parse: refused in strict mode, searched whole in lenient mode.
    pub parse_failures: u64,
}

impl TwoPhaseStats {
    /// The format's adoption: the share of queries that used it (0 before any query).
    pub fn adoption(&self) -> f64 {
        let total = self.parsed + self.parse_failures;
        if total == 0 {
            0.0
        } else {
            self.parsed as f64 / total as f64
        }
    }
}

/// The counters behind [`TwoPhaseStats`].
#[derive(Debug, Default)]
pub(super) struct TwoPhaseCounters {
    parsed: std::sync::atomic::AtomicU64,
    failures: std::sync::atomic::AtomicU64,
}

impl TwoPhaseCounters {
    /// Counts one query: parsed or not.
    pub(super) fn count(&self, parsed: bool) {
        let counter = if parsed { &self.parsed } else { &self.failures };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The counts so far.
    pub(super) fn stats(&self) -> TwoPhaseStats {
        TwoPhaseStats {
            parsed: self.parsed.load(std::sync::atomic::Ordering::Relaxed),
            parse_failures: self.failures.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}
