//! MPNet (transformers' `MPNetModel`: the encoder of all-mpnet-base-v2 and
//! multi-qa-mpnet-base-dot-v1), BERT-like post-norm layers without token types, positions
//! numbered after the padding index 1, and a T5-style relative position bias shared by every
//! layer, on the shared CPU kernels.
//!
//! - `config`: `config.json` (`MPNetConfig`'s keys and defaults), checked;
//! - `encoder`: the relative buckets, the position ids, the weights (f32 panels or int8 linear
//!   layers) and the packed forward pass, its attention with the relative bias written here
//!   (the shared `layers::attention` has no bias input).

pub(crate) mod config;
pub(crate) mod encoder;
