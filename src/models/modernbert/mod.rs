//! ModernBERT (`model_type: modernbert`): gte-modernbert-base, modernbert-embed-base and the
//! gte-reranker-modernbert-base cross-encoder, on the shared CPU kernels.
//!
//! - `config`: the `config.json` keys the forward pass reads (both the transformers 4.x and 5
//!   spellings of the attention pattern and the rotary thetas), checked;
//! - `encoder`: the weights (f32 panels or int8 linear layers) and the packed forward pass:
//!   pre-norm layers, RoPE with a theta per layer kind, global and sliding-window attention
//!   within each sequence, GeGLU;
//! - `classifier`: `ModernBertForSequenceClassification`'s head (cls or mean pooling, then
//!   dense, activation, norm and the classifier), the cross-encoder's model.

#[cfg(feature = "candle")]
pub(crate) mod candle;
pub(crate) mod classifier;
pub(crate) mod config;
pub(crate) mod encoder;
