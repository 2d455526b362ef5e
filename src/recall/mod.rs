//! Step 6, stage 1 (recall): the [`Retriever`] trait and its implementations.
//!
//! - [`Bm25Index`] (`bm25`): in-memory Lucene-style BM25 over an
//!   [`Analyzer`](crate::text::Analyzer) you can replace;
//! - [`DenseIndex`] (`dense`): exact cosine top-k over embeddings from any
//!   [`Embedder`](crate::Embedder);
//! - [`Hybrid`] (`fusion`): fusion of any number of retrievers, by reciprocal rank
//!   ([`Fusion::Rrf`]), by weighted min-max normalized scores ([`Fusion::Weighted`]), or
//!   linearly over raw scores ([`Fusion::Linear`]);
//! - [`KeywordOverlap`] (`keyword`): the share of the query's content words a document has;
//! - `LateInteractionIndex` (`late_interaction`, feature `models`): MaxSim over every
//!   document's ColBERT token vectors, kept as f16: exact, or over the candidates that MUVERA's
//!   fixed-dimensional encodings (`muvera`) pick;
//! - [`MatryoshkaIndex`] (`matryoshka`): coarse search over truncated vectors, rescored with
//!   the full ones;
//! - `SparseIndex` (`sparse`, feature `models`): learned sparse (SPLADE) retrieval, an inverted
//!   index of [`SparseVector`](crate::embed::SparseVector) weights scored by the dot product;
//! - [`FallbackRetriever`] (`fallback`): recall from a second retriever when the first fails;
//! - `MilvusRetriever` (`milvus`, feature `milvus`): dense recall from a Milvus collection over
//!   its REST API, with the request's filters evaluated by Milvus.

mod bm25;
mod dense;
mod fallback;
mod fusion;
mod keyword;
#[cfg(feature = "models")]
mod late_interaction;
mod matryoshka;
#[cfg(feature = "milvus")]
mod milvus;
mod muvera;
#[cfg(feature = "models")]
mod sparse;
mod top_k;

use std::sync::Arc;

#[cfg(feature = "sqlite")]
pub(crate) use bm25::build::{analyze as analyze_docs, Analyzed};
#[cfg(feature = "sqlite")]
pub(crate) use bm25::Scorer;
pub use bm25::{Bm25Index, Bm25Params};
pub use dense::{DenseIndex, VectorStorage};
pub use fallback::FallbackRetriever;
pub use fusion::{linear_fuse, normalize_min_max, rrf_fuse, weighted_fuse, Fusion, Hybrid};
pub use keyword::{keyword_overlap, KeywordOverlap};
#[cfg(feature = "models")]
pub use late_interaction::LateInteractionIndex;
pub use matryoshka::MatryoshkaIndex;
#[cfg(feature = "milvus")]
pub use milvus::{MilvusBuilder, MilvusRetriever, MAX_TOP_K as MILVUS_MAX_TOP_K};
#[cfg(feature = "models")]
pub(crate) use muvera::check as check_muvera;
pub use muvera::MuveraConfig;
#[cfg(feature = "models")]
pub use sparse::SparseIndex;
#[cfg(feature = "sqlite")]
pub(crate) use top_k::top_slots;

use crate::Filter;
use crate::{Hit, Result};

/// What a retriever is asked for.
#[derive(Debug, Clone, Default)]
pub struct SearchQuery {
    /// The query text (for BM25 and for embedding when no `embedding` is given).
    pub text: String,
    /// A precomputed query embedding for dense retrieval (e.g. a HyDE embedding). When set,
    /// dense retrievers use it instead of embedding `text`; lexical retrievers ignore it.
    pub embedding: Option<Arc<Vec<f32>>>,
    /// The request's metadata filters. A retriever that can evaluate them at the source (a
    /// vector database) does, so its `k` hits all pass; the pipeline applies them to every
    /// hit again, so retrievers may ignore them.
    pub filters: Vec<Filter>,
}

impl SearchQuery {
    /// A query with text only.
    pub fn new(text: impl Into<String>) -> Self {
        SearchQuery {
            text: text.into(),
            embedding: None,
            filters: Vec::new(),
        }
    }

    /// Sets the embedding to use for dense recall.
    pub fn with_embedding(mut self, embedding: Vec<f32>) -> Self {
        self.embedding = Some(Arc::new(embedding));
        self
    }

    /// Sets the filters (see [`SearchQuery::filters`]).
    pub fn with_filters(mut self, filters: Vec<Filter>) -> Self {
        self.filters = filters;
        self
    }
}

/// A stage-1 retriever: returns up to `k` hits in descending score order.
///
/// Implement it to plug in your own store (Qdrant, Elasticsearch, Postgres, ...).
/// Implementations set [`Hit::score`] (and [`Hit::bm25_score`] / [`Hit::vector_score`] where
/// they apply); the pipeline assigns the stage-1 ranks.
pub trait Retriever: Send + Sync {
    /// Retrieves up to `k` hits for `query`, best first.
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>>;

    /// A short name for logs and responses (e.g. `"bm25"`).
    fn name(&self) -> &str {
        "retriever"
    }
}

impl<R: Retriever + ?Sized> Retriever for Arc<R> {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        (**self).retrieve(query, k)
    }
    fn name(&self) -> &str {
        (**self).name()
    }
}

impl<R: Retriever + ?Sized> Retriever for Box<R> {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        (**self).retrieve(query, k)
    }
    fn name(&self) -> &str {
        (**self).name()
    }
}
