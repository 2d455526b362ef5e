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

    /// Sets query variants for multi-query expansion.
    pub fn variants<S: Into<String>>(mut self, variants: impl IntoIterator<Item = S>) -> Self {
        self.variants = variants.into_iter().map(Into::into).collect();
        self
    }
}
