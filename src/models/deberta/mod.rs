//! DeBERTa-v2 / v3 (`model_type: deberta-v2`): the mxbai-rerank-base-v1 / -large-v1
//! cross-encoders (`DebertaV2ForSequenceClassification`), on the shared CPU kernels.
//!
//! - `config`: the `config.json` keys the forward pass reads, with transformers 5's defaults,
//!   and the relative positions (log buckets, clamping); what the crate cannot honour is
//!   refused naming the key;
//! - `encoder`: the weights (f32 panels or int8 linear layers, the position projections
//!   computed once at load) and the packed forward pass: embeddings, post-norm layers with
//!   disentangled (content, c2p, p2c) attention within each sequence;
//! - `candle`: the same encoder on candle's operations (a device's path: the disentangled
//!   terms as batched products gathered by relative row);
//! - `classifier`: `DebertaV2ForSequenceClassification`'s head (the `ContextPooler` on the
//!   first token, then the classifier), the cross-encoder's model;
//! - `tokenizer`: the tokenizer transformers 5 builds for `DebertaV2Tokenizer` from a
//!   `tokenizer.json`'s vocabulary.

#[cfg(feature = "candle")]
pub(crate) mod candle;
pub(crate) mod classifier;
pub(crate) mod config;
pub(crate) mod encoder;
pub(crate) mod tokenizer;
