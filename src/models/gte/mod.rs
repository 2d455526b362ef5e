//! GTE (Alibaba-NLP/new-impl's "new" model, transformers 5's `gte`):
//! gte-multilingual-reranker-base, on the shared CPU kernels.
//!
//! - `config`: both spellings of `config.json` (the hub's `model_type: "new"` with NTK-scaled
//!   RoPE, transformers 5's `rope_parameters`), checked;
//! - `encoder`: the weights (f32 panels or int8 linear layers) and the packed forward pass:
//!   post-norm layers as BERT's, RoPE, ModernBERT's packed attention, a gated GELU MLP;
//! - `classifier`: the sequence-classification head (BERT's pooler and classifier), the
//!   cross-encoder's model.

pub(crate) mod classifier;
pub(crate) mod config;
pub(crate) mod encoder;
