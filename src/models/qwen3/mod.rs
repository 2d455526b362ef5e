//! Qwen3 decoders (`Qwen3ForCausalLM`) on the shared CPU kernels: one home for the Qwen3 model
//! family, used by the reranker (`rerankers::qwen3`) and the chat generator.
//!
//! - [`Qwen3Config`] (`config`): the `config.json` keys the forward passes read, checked.
//! - `layers`: the weights in the kernels' layout: fused QKV and gate/up projections per
//!   layer, token embeddings read from the mapped file, the final norm (`Decoder`).
//! - `ops`: the vectorized row-wise steps: RMSNorm, per-head q/k RMSNorm fused with RoPE,
//!   `SiLU(gate) * up`, and the RoPE tables.
//!
//! Weights come from the one loader, `models::weights`; matrix products from
//! `models::kernels`.

mod config;
// Until the packed scorer and the generator's decoder are built on them.
#[allow(dead_code)]
pub(crate) mod layers;
#[allow(dead_code)]
pub(crate) mod ops;

pub use config::{Qwen3Config, ARCHITECTURE};
