//! Gemma3 text encoders (`model_type: gemma3_text` with bidirectional attention):
//! EmbeddingGemma, on the shared CPU kernels.
//!
//! - `config`: the `config.json` keys the forward pass reads (both the transformers 4.x and 5
//!   spellings of the rotary settings), checked;
//! - `encoder`: the weights (f32 panels or int8 linear layers) and the packed forward pass:
//!   scaled embeddings, sandwich-normed layers (RMSNorm before and after attention and the
//!   MLP), grouped-query attention with per-head q/k norms, RoPE per layer kind, global and
//!   sliding-window attention within each sequence, a GeGLU MLP.

pub(crate) mod config;
pub(crate) mod encoder;
