//! # rerank
//!
//! Query-aware two-stage retrieval and grounded answers, embeddable in a Rust application.
//!
//! Build a [`Pipeline`] once, share it behind an `Arc`, and call it from any thread:
//!
//! - **recall** (stage 1): [`Bm25Index`], [`DenseIndex`], and [`Hybrid`] fusion (RRF or weighted);
//! - **precision** (stage 2): any [`Reranker`] — candle cross-encoders and Qwen3-Reranker with the
//!   `models` feature, embedding cosine, or your own;
//! - **query intelligence**: a [`QueryClassifier`] (factual vs semantic, intent, route, task type);
//! - **answers**: a [`Generator`] with citations and a grounding check;
//! - **evaluation**: IR metrics and a BEIR loader in [`eval`].
//!
//! ```
//! use rerank::{Bm25Index, Document, Pipeline};
//!
//! let index = Bm25Index::new();
//! index.add(vec![
//!     Document::new("1", "Rust is a systems programming language").with_source("rust.md"),
//!     Document::new("2", "BM25 is a lexical ranking function").with_source("bm25.md"),
//! ]);
//! let pipeline = Pipeline::builder().retriever(index).top_k(5).build()?;
//! let response = pipeline.search("what is bm25 ranking")?;
//! assert_eq!(response.hits[0].id(), "2");
//! # Ok::<(), rerank::Error>(())
//! ```
//!
//! ## Features
//! - `models` (default): candle-backed models (cross-encoder, BERT embedder, Qwen3).
//! - `hf-hub` (opt-in): download model directories from the Hugging Face hub.
//! - `http` (opt-in): an OpenAI-compatible chat-completions generator.
//!
//! Without default features the crate has no candle or tokenizers dependency.

#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod classify;
mod document;
pub mod embed;
mod error;
pub mod eval;
pub mod generate;
#[cfg(feature = "models")]
pub mod models;
pub mod pipeline;
pub mod query;
pub mod rerank;
pub mod retrieve;

pub use classify::{
    Classification, Intent, QueryClassifier, QueryKind, Route, RuleClassifier, TaskType,
};
pub use document::{sort_by_score_desc, Document, Hit, Metadata};
pub use embed::Embedder;
pub use error::{Error, Result};
pub use generate::{Generation, GenerationRequest, Generator, Message, Role};
pub use pipeline::{Pipeline, PipelineBuilder, SearchResponse};
pub use query::{PiiGuard, PiiKind, SemanticCache, TwoPhaseMode};
#[cfg(feature = "models")]
pub use rerank::Qwen3Reranker;
pub use rerank::{FallbackReranker, ProtectPolicy, RerankQuery, RerankScores, Reranker};
pub use retrieve::{
    Analyzer, Bm25Index, Bm25Params, DenseIndex, EnglishAnalyzer, Fusion, Hybrid, Retriever,
    SearchQuery,
};

/// The README's code examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
