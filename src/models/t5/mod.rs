//! T5 and mT5 (`model_type: t5` / `mt5`): the encoder of sentence-t5 and GTR embedders, and
//! the encoder-decoder of monoT5 rerankers read at the decoder's first step, on the shared
//! CPU kernels.
//!
//! - `config`: `T5Config`'s keys and defaults (`feed_forward_proj`, the relative buckets,
//!   whether the decoder's output is scaled), checked;
//! - `encoder`: the packed encoder (pre-norm blocks with T5's RMSNorm, unscaled attention with
//!   the relative position bias of `layers::relative`, plain or gated feed-forward), and the
//!   bias-free linear layers and feed-forward block the decoder shares;
//! - `decoder`: the decoder's first step from its start token (self-attention over that one
//!   position, cross-attention over each sequence's encoder states);
//! - `scorer`: the two answer tokens' logits of packed batches of prompts (monoT5).

pub(crate) mod config;
pub(crate) mod decoder;
pub(crate) mod encoder;
pub(crate) mod scorer;
