//! Qwen3 decoders (`Qwen3ForCausalLM`) on the shared CPU kernels: one home for the Qwen3 model
//! family, used by the reranker (`rerankers::qwen3`) and the chat generator
//! (`answer::local_chat`). The same code runs Qwen2 decoders (`Qwen2ForCausalLM`, for
//! mxbai-rerank-v2 in `rerankers::mxbai`): [`DecoderFamily`] says which, and the two differ
//! only in q/k/v biases (Qwen2) and per-head q/k norms (Qwen3).
//!
//! - [`Qwen3Config`] (`config`): the `config.json` keys the forward passes read, checked.
//! - `layers`: the weights in the kernels' layout: fused QKV and gate/up projections per
//!   layer (f32 panels; bf16 panels or, for scoring, int8 as options), token
//!   embeddings read from the mapped file, the final norm (`Decoder`).
//! - `ops`: the vectorized row-wise steps: RMSNorm, per-head q/k RMSNorm fused with RoPE,
//!   `SiLU(gate) * up`, and the RoPE tables.
//! - `forward`: the packed forward pass over whole prompts (`Qwen3Model`), which both uses of
//!   the model share.
//! - `scorer`: yes/no scoring (`Qwen3Scorer`): the packed pass and one head vector.
//! - `kv_cache`: every layer's keys and values for the positions so far.
//! - `generate`: generation (`CausalLm`): the packed pass fills a KV cache (prefill), then one
//!   token at a time through matrix-vector products that allocate nothing (decode).
//!
//! Weights come from the one loader, `models::layers::weights`; matrix products from
//! `models::layers::panels` (the layers in f32 or bf16), `models::layers::quant` (int8), `models::layers::kernels`
//! (attention) and `simd::gemv` (the output head).

#[cfg(feature = "candle")]
pub(crate) mod candle;
pub(crate) mod config;
pub(crate) mod forward;
pub(crate) mod generate;
mod kv_cache;
pub(crate) mod layers;
pub(crate) mod ops;
pub(crate) mod scorer;

pub use config::{DecoderFamily, Qwen3Config, ARCHITECTURE, QWEN2_ARCHITECTURE};
