//! GTE (Alibaba-NLP/new-impl's "new" model, transformers 5's `gte`: gte-multilingual-reranker-base,
//! gte-multilingual-base, gte-en-v1.5) and NomicBERT (nomic-embed-text), BERT with rotary
//! positions and a gated MLP, on the shared CPU kernels.
//!
//! - `config`: every spelling of `config.json` (the hub's `model_type: "new"` with NTK-scaled
//!   RoPE, nomic-bert-2048's GPT-style keys, transformers 5's `rope_parameters`), checked, and
//!   whose tensor names a checkpoint has (`Layout`);
//! - `encoder`: the weights (f32 panels or int8 linear layers) and the packed forward pass:
//!   post-norm layers as BERT's, RoPE, the shared packed attention, a gated MLP (GELU or SiLU);
//! - `classifier`: the sequence-classification head (BERT's pooler and classifier), the
//!   cross-encoder's model.

pub(crate) mod classifier;
pub(crate) mod config;
pub(crate) mod encoder;
