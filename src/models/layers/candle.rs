//! What the candle engine (feature `candle`) shares: the same models on candle's tensors, on a CPU, CUDA
//! or Metal device ([`Device`]).
//!
//! What it shares with the crate's own kernels: the model directory, the one weights loader
//! (`models::layers::weights`: every tensor is read there, converted to f32, then handed to candle in
//! the device's number format), the tokenizers, truncation, prompts, pooling and heads' inputs.
//! What differs is the forward pass:
//! - the encoders (`models::engine::candle`) are candle-transformers' `bert` and `xlm_roberta`, and its
//!   `debertav2` encoder under embeddings written here (candle's size the token-type table by
//!   `hidden_size`), with transformers' sequence-classification heads written here;
//! - ModernBERT (`modernbert::candle`) is written on candle's operations: candle-transformers'
//!   has no biases and one pattern of global layers, and its classifier applies a softmax;
//! - the decoders (Qwen3, and Qwen2 for mxbai-rerank-v2) are written here on candle's
//!   operations (`qwen3::candle`): candle-transformers' keep a KV cache in the model (`&mut self`)
//!   and have no padding mask, so a batch of prompts could not be scored at once.
//!
//! Batches are padded (a device has no use for the CPU path's packing) to the next multiple of
//! [`BUCKET`] tokens, so that a device sees few distinct shapes.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

use super::kernels::Act;
use super::weights::Weights;
use crate::models::{Device, Precision};
use crate::{Error, Result};

/// Padded batch lengths are rounded up to a multiple of this many tokens.
pub(crate) const BUCKET: usize = 16;

/// An [`Error::Model`] for a candle failure, saying where it happened (candle's message
/// without the backtrace it carries when `RUST_BACKTRACE` is set).
pub(crate) fn err(context: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| {
        let message = e.to_string();
        let first = message.lines().next().unwrap_or_default();
        Error::model(format!("{context}: candle: {first}"))
    }
}

/// The candle device for `device` (an error when this build or this machine has none).
pub(crate) fn candle_device(device: Device) -> Result<candle_core::Device> {
    device.check_available()?;
    let opened = match device {
        Device::Cpu | Device::CandleCpu => Ok(candle_core::Device::Cpu),
        Device::Cuda(n) => candle_core::Device::new_cuda(n),
        Device::Metal(n) => candle_core::Device::new_metal(n),
    };
    opened.map_err(|e| Error::model(format!("cannot open device {device}: {e}")))
}

/// The number format the weights and activations take on a device.
pub(crate) fn dtype(precision: Precision) -> Result<DType> {
    match precision {
        Precision::F32 => Ok(DType::F32),
        Precision::F16 => Ok(DType::F16),
        Precision::Bf16 => Ok(DType::BF16),
        Precision::Int8 => Err(Error::Config(
            "precision int8 runs on the crate's own CPU kernels only (device cpu)".into(),
        )),
    }
}

/// Every tensor of `weights` (read by the one loader, as f32), renamed by `rename` (`None`
/// leaves a tensor out), as a candle `VarBuilder` in `dtype` on `device`.
pub(crate) fn var_builder(
    weights: &Weights,
    dtype: DType,
    device: &candle_core::Device,
    rename: impl Fn(&str) -> Option<String>,
) -> Result<VarBuilder<'static>> {
    let mut tensors = HashMap::new();
    for name in weights.names() {
        // Integer buffers (`position_ids`) are not weights.
        if !weights.is_float(name) {
            continue;
        }
        let Some(key) = rename(name) else { continue };
        let shape = weights.shape(name)?.to_vec();
        let values = weights.f32(name, &shape)?;
        let tensor = Tensor::from_vec(values, shape, &candle_core::Device::Cpu)
            .and_then(|t| t.to_dtype(dtype))
            .and_then(|t| t.to_device(device))
            .map_err(err(name))?;
        tensors.insert(key, tensor);
    }
    Ok(VarBuilder::from_tensors(tensors, dtype, device))
}

/// Rows of token ids padded on the right with `pad` to the longest row rounded up to
/// [`BUCKET`] (at most `max_len`): the ids `(rows, len)` as u32 and the attention mask (1 for
/// a token, 0 for padding) as u32.
pub(crate) struct Padded {
    pub ids: Tensor,
    pub mask: Tensor,
    /// The padded length.
    pub len: usize,
}

impl Padded {
    /// The padded batch of `rows`, row `i`'s mask 1 on its first `keys[i]` tokens only (every
    /// token without `keys`): the rest are queries, never keys.
    pub fn attending(
        rows: &[&[u32]],
        keys: Option<&[usize]>,
        pad: u32,
        max_len: usize,
        device: &candle_core::Device,
    ) -> Result<Self> {
        let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let len = longest
            .div_ceil(BUCKET)
            .saturating_mul(BUCKET)
            .min(max_len.max(longest));
        let mut ids = Vec::with_capacity(rows.len() * len);
        let mut mask = Vec::with_capacity(rows.len() * len);
        for (i, row) in rows.iter().enumerate() {
            let padding = len - row.len();
            let seen = keys.map_or(row.len(), |k| k[i].min(row.len()));
            ids.extend_from_slice(row);
            mask.extend(std::iter::repeat_n(1u32, seen));
            ids.extend(std::iter::repeat_n(pad, padding));
            mask.extend(std::iter::repeat_n(0u32, len - seen));
        }
        let shape = (rows.len(), len);
        let to = |v: Vec<u32>| Tensor::from_vec(v, shape, device).map_err(err("a padded batch"));
        Ok(Padded {
            ids: to(ids)?,
            mask: to(mask)?,
            len,
        })
    }

    /// Token type ids the same shape, `types[i]` for row `i` (zeros past each row).
    pub fn types(rows: &[&[u32]], len: usize, device: &candle_core::Device) -> Result<Tensor> {
        let mut out = vec![0u32; rows.len() * len];
        for (row, types) in out.chunks_exact_mut(len).zip(rows) {
            row[..types.len()].copy_from_slice(types);
        }
        Tensor::from_vec(out, (rows.len(), len), device).map_err(err("token types"))
    }
}

/// The values of `t` as f32 on the host, row-major.
pub(crate) fn to_host(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(err("reading results back"))
}

/// The CPU path's RoPE tables (`layers::rope::Rope`: the same angles, rounded as transformers
/// rounds them) for heads of `d` and `positions` positions: `(cos, sin)`, each
/// `(positions, d / 2)`, the layout of candle's fused kernel
/// ([`candle_nn::rotary_emb::rope`]: `x cos + rotate_half(x) sin`, transformers' `rotate_half`
/// pairing of the two halves of a head).
pub(crate) fn rope_tables(
    d: usize,
    theta: f64,
    positions: usize,
    dtype: DType,
    device: &candle_core::Device,
) -> Result<(Tensor, Tensor)> {
    let rope = super::rope::Rope::new(d, theta, positions);
    rope_tensors(&rope, d, positions, dtype, device)
}

/// `rope`'s tables (heads of `d`, `positions` positions) as candle tensors, as
/// [`rope_tables`] gives them.
pub(crate) fn rope_tensors(
    rope: &super::rope::Rope,
    d: usize,
    positions: usize,
    dtype: DType,
    device: &candle_core::Device,
) -> Result<(Tensor, Tensor)> {
    let table = |half: &[f32]| -> Result<Tensor> {
        Tensor::from_slice(half, (positions, d / 2), device)
            .and_then(|t| t.to_dtype(dtype))
            .map_err(err("RoPE"))
    };
    let (cos, sin) = rope.tables();
    Ok((table(cos)?, table(sin)?))
}

/// `act` on candle: GELU exact (erf) or tanh-approximated, ReLU or SiLU.
pub(crate) fn activate(x: &Tensor, act: Act) -> candle_core::Result<Tensor> {
    match act {
        Act::Gelu => x.gelu_erf(),
        Act::GeluTanh => x.gelu(),
        Act::Relu => x.relu(),
        Act::Silu => x.silu(),
    }
}
