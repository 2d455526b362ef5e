//! The integration tests, as one test binary (one link instead of one per file).
//!
//! Each module is one area; `common` holds what they share: where the fixtures and models are,
//! and [`common::skip`], which fails instead of skipping when `RERANK_REQUIRE_FIXTURES=1` (CI).

mod answer;
mod beir_bm25;
mod bge_m3;
mod cache;
#[cfg(feature = "candle")]
mod candle;
mod cases;
mod classify;
mod cli;
mod cli_errors;
mod cli_help;
mod cli_query;
mod cli_reliability;
mod colbert;
mod common;
mod concurrency;
mod cross_encoder_parity;
mod deberta;
mod dense_beir;
mod dense_storage;
mod distilbert;
mod embed_models;
mod embed_parity;
mod fallback;
mod fuzz;
mod gemma3;
mod gte;
mod hyde;
#[cfg(feature = "pdf")]
mod ingest;
mod int8;
mod jina_v3;
mod load_reranker;
mod local_chat;
mod milvus;
mod model_fixtures;
mod modernbert;
mod mpnet;
mod mxbai_v2;
mod openai_embed;
mod openai_http;
mod passages;
mod pii;
mod pipeline;
mod properties;
mod protected;
mod qwen3_greedy;
mod qwen3_parity;
mod rank;
mod redis_cache;
mod reliability;
mod seq_cls;
mod serve;
mod splade;
mod st_chat;
mod st_embed_parity;
mod static_embedding;
mod store;
mod store_encoded;
mod sweep;
mod sweep_decoders;
mod systems;
mod t5;
mod trec_eval_parity;
mod two_phase;
