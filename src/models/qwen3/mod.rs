//! Qwen3 decoders (`Qwen3ForCausalLM`) on the shared CPU kernels: one home for the Qwen3 model
//! family, used by the reranker (`rerankers::qwen3`) and the chat generator.
//!
//! - [`Qwen3Config`] (`config`): the `config.json` keys the forward passes read, checked.
//! - `layers`: the weights in the kernels' layout: fused QKV and gate/up projections per
//!   layer, token embeddings read from the mapped file, the final norm (`Decoder`).
//! - `ops`: the vectorized row-wise steps: RMSNorm, per-head q/k RMSNorm fused with RoPE,
//!   `SiLU(gate) * up`, and the RoPE tables.
//! - `scorer`: the packed forward pass for yes/no scoring (`Qwen3Scorer`), used by
//!   `rerankers::qwen3`.
//!
//! Weights come from the one loader, `models::weights`; matrix products from
//! `models::kernels`.

mod config;
pub(crate) mod layers;
pub(crate) mod ops;
pub(crate) mod scorer;

pub use config::{Qwen3Config, ARCHITECTURE};
