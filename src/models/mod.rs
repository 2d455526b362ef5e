//! Loading and running models (feature `models`).
//!
//! The public part is small: [`ModelOptions`] (one set of options for every model builder),
//! [`ModelDir`] (a local model directory: `config.json`, `tokenizer.json`, memory-mapped
//! `model.safetensors`), [`Architecture`] (what a `config.json` describes, to dispatch on) and,
//! with the `hf-hub` feature, [`HubModel`] to fetch a directory from the Hugging Face hub;
//! [`registry`]: the models the crate knows by hub name.
//!
//! The rest is internal, one folder per architecture on one shared layer:
//! - `layers/`: what no architecture owns: the reader of `config.json` values, the CPU kernels
//!   (`kernels`, `panels`, `quant`), the linear layers in their precision (`dense`), attention,
//!   what the post-norm and the rotary encoders share, the heads' steps, RoPE, the one weights
//!   loader, length batching, the MLM head, and (feature `candle`) candle's devices and padded
//!   batches;
//! - `bert/`: the packed (padding-free) BERT / XLM-R encoder and its sequence-classification
//!   head;
//! - `modernbert/`: the packed ModernBERT encoder (global and sliding-window attention, RoPE,
//!   GeGLU), its sequence-classification head and its candle port;
//! - `deberta/`: the packed DeBERTa-v2 / v3 encoder (disentangled attention over log-bucketed
//!   relative positions), its sequence-classification head and the tokenizer transformers
//!   builds for it;
//! - `distilbert/`: the packed DistilBERT encoder (BERT's post-norm layers under DistilBERT's
//!   names, no token types) and where its MLM head is;
//! - `gte/`: GTE and NomicBERT (BERT with RoPE and a gated MLP) and its head;
//! - `mpnet/`: the packed MPNet encoder (post-norm layers, positions after the padding index,
//!   a relative position bias shared by every layer);
//! - `gemma3/`: the packed bidirectional Gemma3 text encoder (EmbeddingGemma);
//! - `t5/`: the packed T5 / mT5 encoder (pre-norm RMSNorm blocks, a relative position bias) and
//!   the first step of its decoder (monoT5 rerankers);
//! - `qwen3/`: the Qwen3 (and Qwen2) decoder: config, weights in the kernels' layout, the
//!   packed forward pass (scoring, prefill), the KV-cached decode step (generation), its candle
//!   port;
//! - `engine/`: the one place that chooses the crate's kernels or candle: an embedder's
//!   `EncoderEngine`, a cross-encoder's `Classifier` (`load_classifier`);
//! - `pair`: (query, document) tokenization as sentence-transformers does it; `pooling`: the
//!   pooling modes; `chat_template`: a model's chat template rendered as transformers renders
//!   it (the chat generator's prompts, the embedders' `message` modality); `dir`, `options`, `device`, `hub`, `registry`: finding, opening and
//!   configuring a model.
//!
//! No architecture folder imports a sibling, and nothing here imports `embed` or `rerankers`
//! (`scripts/import_graph.py` checks both).
//!
//! No candle code runs: weights are read with `safetensors` + `memmap2`, and the products run
//! on the crate's own SIMD kernels and `gemm` (the kernels candle itself uses). The kernels
//! themselves (micro-kernels, one-row products in f32 or bf16, int8 sums), the `gemm` call
//! and the memory map are in `crate::simd`.

pub(crate) mod bert;
pub(crate) mod chat_template;
mod config;
pub(crate) mod deberta;
mod device;
mod dir;
pub(crate) mod distilbert;
pub(crate) mod engine;
pub(crate) mod gemma3;
pub(crate) mod gte;
#[cfg(feature = "hf-hub")]
mod hub;
pub(crate) mod layers;
pub(crate) mod modernbert;
pub(crate) mod mpnet;
mod options;
pub(crate) mod pair;
mod pooling;
pub(crate) mod qwen3;
pub mod registry;
pub(crate) mod t5;

pub use crate::Precision;
pub(crate) use bert::classifier::SequenceClassifier;
pub(crate) use config::ClassifierConfig;
pub use config::{Activation, Architecture};
pub(crate) use deberta::classifier::DebertaClassifier;
pub use device::{allow_tf32, Device};
pub use dir::{ModelDir, WEIGHTS_FILE};
pub(crate) use dir::{CONFIG_FILE, MODULES_FILE, TOKENIZER_FILE};
pub(crate) use gte::classifier::GteClassifier;
#[cfg(feature = "hf-hub")]
pub use hub::HubModel;
pub(crate) use layers::batch::{packed_starts, plan_batches, plan_packed_batches};
pub use layers::quant::int8_kernel;
pub(crate) use modernbert::classifier::ModernBertClassifier;
pub(crate) use options::ModelPool;
pub use options::{max_threads, ModelOptions, MAX_LENGTH};
#[doc(hidden)]
pub use pair::PairEncoding;
pub(crate) use pair::PairTokenizer;
pub use pooling::PoolingMode;
pub(crate) use pooling::{token_count, token_mean, token_sum};

/// `n` reproducible values in `[-1, 1)` from `seed` (a linear congruential generator): the
/// inputs and weights of the kernels' tests.
#[cfg(test)]
pub(crate) fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
