//! # rerank
//!
//! Query-aware two-stage retrieval and grounded answers, embeddable in a Rust application.
//!
//! Build a [`Pipeline`] once, share it behind an `Arc`, and call it from any thread. A query
//! flows through these stages, each a folder of the crate, each optional but recall:
//!
//! 1. [`guard`]: the PII guard refuses a query holding personal data;
//! 2. [`parse`]: a two-phase `[SEARCH] ... [TASK] ...` query is split into its recall and
//!    rerank parts;
//! 3. [`classify`]: a [`QueryClassifier`] says factual or semantic, intent, route, task type;
//! 4. [`cache`]: the [`SemanticCache`] answers a query close enough to an earlier one;
//! 5. [`expand`]: HyDE and multi-query expansion;
//! 6. [`recall`] (stage 1): a [`Retriever`] — [`Bm25Index`], [`DenseIndex`], [`Hybrid`] fusion;
//! 7. [`rerankers`] (stage 2): a [`Reranker`] — [`CrossEncoder`] and [`Qwen3Reranker`] with the
//!    `models` feature, [`EmbeddingReranker`], [`FallbackReranker`]; exact matches of factual
//!    queries stay on top;
//! 8. [`pipeline`]: post-processing (threshold, dedup, top-k) into a [`SearchResponse`];
//! 9. [`answer`]: a [`Generator`] writes an [`Answer`] with citations and a grounding check.
//!
//! Shared by all: [`text`] (analysis), [`embed`] ([`Embedder`]s), [`Document`] and [`Hit`],
//! one [`Error`]. With the `sqlite` feature (default), `store` keeps a corpus, its indexes,
//! embeddings and cache entries in one SQLite file. [`ingest`] turns files (PDFs with the `pdf`
//! feature) into chunked documents. [`eval`] scores runs with IR metrics on BEIR collections. `ARCHITECTURE.md`
//! walks a query through these folders.
//!
//! ```
//! use rerank::{Bm25Index, Document, Pipeline};
//!
//! let index = Bm25Index::new();
//! index.add(vec![
//!     Document::new("1", "Rust is a systems programming language").with_source("rust.md"),
//!     Document::new("2", "BM25 is a lexical ranking function").with_source("bm25.md"),
//! ])?;
//! let pipeline = Pipeline::builder().retriever(index).top_k(5).build()?;
//! let response = pipeline.search("what is bm25 ranking")?;
//! assert_eq!(response.hits[0].id(), "2");
//! # Ok::<(), rerank::Error>(())
//! ```
//!
//! ## Features
//! - `models` (default): the models (cross-encoder, BERT embedder, Qwen3 reranker and chat
//!   generator) on the crate's CPU kernels, with `tokenizers`.
//! - `hf-hub` (opt-in): download model directories from the Hugging Face hub.
//! - `sqlite` (default): the persistent `Store` (bundled SQLite).
//! - `http` (opt-in): an OpenAI-compatible chat-completions generator.
//! - `milvus` (opt-in): `recall::MilvusRetriever`, dense recall from a Milvus cluster.
//! - `redis` (opt-in): `cache::RedisCacheStore`, a semantic cache shared by many processes.
//! - `pdf` (opt-in): PDF ingestion ([`ingest`]).
//!
//! Without default features the crate has no model code and no tokenizers dependency.

#![warn(missing_docs)]
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod document;
mod error;
mod filter;
#[cfg(any(feature = "http", feature = "milvus"))]
mod http;
mod precision;
mod simd;

pub mod text;

pub mod answer;
pub mod cache;
pub mod classify;
pub mod expand;
pub mod guard;
pub mod parse;
pub mod pipeline;
pub mod recall;
pub mod rerankers;

pub mod embed;
pub mod eval;
pub mod ingest;
#[cfg(feature = "models")]
pub mod models;
#[cfg(feature = "sqlite")]
pub mod store;

pub use document::{read_bounded_lines, Document, Hit, Metadata, MAX_LINE_BYTES};
pub use error::{BoxError, Error, Result};
pub use filter::Filter;
pub use precision::Precision;
pub use simd::simd_isa;

// The five traits.
pub use answer::Generator;
pub use classify::QueryClassifier;
pub use embed::{Embedder, Role};
pub use recall::Retriever;
pub use rerankers::Reranker;

// The pipeline and what goes in and out of it.
pub use pipeline::{
    Answer, Pipeline, PipelineBuilder, PipelineConfig, SearchRequest, SearchResponse,
};

// The concrete stages a host builds.
pub use answer::Extractive;
#[cfg(feature = "models")]
pub use answer::LocalChat;
#[cfg(feature = "http")]
pub use answer::OpenAiCompatible;
pub use cache::SemanticCache;
pub use classify::RuleClassifier;
#[cfg(feature = "models")]
pub use embed::{
    load_embedder, load_embedder_with_tasks, BertEmbedder, ColbertEncoder, DistilBertEmbedder,
    Gemma3Embedder, GteEmbedder, ModernBertEmbedder, MpnetEmbedder, Qwen3Embedder, SparseEncoder,
    StaticEmbedder, T5Embedder,
};
pub use guard::PiiGuard;
pub use recall::{Bm25Index, DenseIndex, Hybrid};
#[cfg(feature = "models")]
pub use rerankers::{CrossEncoder, MonoT5Reranker, MxbaiReranker, Qwen3Reranker};
pub use rerankers::{EmbeddingReranker, FallbackReranker};
#[cfg(feature = "sqlite")]
pub use store::Store;

/// The README's code examples, compiled and run as doctests (the cross-encoder one needs the
/// `models` feature).
#[cfg(all(doctest, feature = "models"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
