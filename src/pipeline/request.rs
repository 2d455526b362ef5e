//! [`SearchRequest`]: one call's query and overrides.

use super::Filter;

/// Per-call overrides for [`Pipeline::search_with`](super::Pipeline::search_with).
#[derive(Debug, Clone, Default)]
pub struct SearchRequest {
    /// The query text.
    pub query: String,
    /// Overrides the pipeline's `top_k`.
    pub top_k: Option<usize>,
    /// Extra filters, added to the pipeline's.
    pub filters: Vec<Filter>,
    /// An instruction for instruction-aware rerankers.
    pub instruction: Option<String>,
    /// Query variants to retrieve as well, fused with the query's own hits by RRF
    /// (multi-query expansion); the reranker still judges against the query.
    pub variants: Vec<String>,
    /// The recall mode: `"bm25"`, `"vector"`, `"keyword"`, `"hybrid"` or the name of a host
    /// retriever the pipeline holds (default: the pipeline's default retriever). See
    /// [`PipelineBuilder::recall_mode`](super::PipelineBuilder::recall_mode).
    pub mode: Option<String>,
    /// The vector side's weight in `[0, 1]` of the hybrid mode (the lexical side gets
    /// `1 - w`; for linear fusion it is `alpha`). Setting it selects the hybrid mode when no
    /// mode is named.
    pub fusion_weight: Option<f32>,
    /// Overrides the pipeline's `score_threshold`.
    pub score_threshold: Option<f32>,
    /// Overrides the pipeline's `rerank_depth`: rerank only the first N candidates, the rest
    /// keep their stage-1 order after them.
    pub rerank_depth: Option<usize>,
}

impl SearchRequest {
    /// A request for `query` with the pipeline's defaults.
    pub fn new(query: impl Into<String>) -> Self {
        SearchRequest {
            query: query.into(),
            ..Default::default()
        }
    }

    /// Overrides `top_k`.
    pub fn top_k(mut self, top_k: usize) -> Self {
        self.top_k = Some(top_k);
        self
    }

    /// Adds a filter.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filters.push(filter);
        self
    }

    /// Sets the reranker instruction.
    pub fn instruction(mut self, instruction: impl Into<String>) -> Self {
        self.instruction = Some(instruction.into());
        self
    }

    /// Picks the recall mode (`"bm25"`, `"vector"`, `"hybrid"`, or a host retriever's name).
    pub fn mode(mut self, mode: impl Into<String>) -> Self {
        self.mode = Some(mode.into());
        self
    }

    /// Sets the vector side's weight of the hybrid mode.
    pub fn fusion_weight(mut self, weight: f32) -> Self {
        self.fusion_weight = Some(weight);
        self
    }

    /// Overrides the score threshold.
    pub fn score_threshold(mut self, threshold: f32) -> Self {
        self.score_threshold = Some(threshold);
        self
    }

    /// Reranks only the first `depth` candidates.
    pub fn rerank_depth(mut self, depth: usize) -> Self {
        self.rerank_depth = Some(depth);
        self
    }

    /// Keeps documents whose `source_type` metadata is one of `types` (see [`Filter::SourceType`]).
    pub fn source_types<S: Into<String>>(self, types: impl IntoIterator<Item = S>) -> Self {
        self.filter(Filter::source_type(types))
    }

    /// Keeps documents whose `language` metadata is one of `languages`.
    pub fn languages<S: Into<String>>(self, languages: impl IntoIterator<Item = S>) -> Self {
        self.filter(Filter::language(languages))
    }

    /// Keeps documents whose path (`path` metadata, else `source`) starts with `prefix`.
    pub fn path_prefix(self, prefix: impl Into<String>) -> Self {
        self.filter(Filter::path_prefix(prefix))
    }

    /// Sets query variants for multi-query expansion.
    pub fn variants<S: Into<String>>(mut self, variants: impl IntoIterator<Item = S>) -> Self {
        self.variants = variants.into_iter().map(Into::into).collect();
        self
    }
}
