//! What the candle engine (feature `candle`) shares: the same models on candle's tensors, on a CPU, CUDA
//! or Metal device ([`Device`]).
//!
//! What it shares with the crate's own kernels: the model directory, the one weights loader
//! (`models::layers::weights`: every tensor is read there, converted to f32, then handed to candle in
//! the device's number format), the tokenizers, truncation, prompts, pooling and heads' inputs.
//! What differs is the forward pass, written on candle's operations for a device (candle's
//! fused softmax and norms, one product for Q, K and V, one mask per batch), each in its
//! architecture's folder: `bert::candle` (BERT, XLM-R), `deberta::candle` (DeBERTa-v2 / v3),
//! `modernbert::candle`, and the decoders of `qwen3::candle` (Qwen3, and Qwen2 for
//! mxbai-rerank-v2, scored as a padded batch behind `&self`). transformers' sequence
//! classification heads are in `models::engine::candle`.
//!
//! Batches are padded (a device has no use for the CPU path's packing) to their longest input:
//! candle compiles nothing per shape, so rounding lengths up would only add padded work.
//!
//! A caller with several batches runs them through [`pipeline`]: the host prepares batch n+1
//! while the device runs batch n, and does what is left of batch n once n+1 is on its way.

use std::collections::HashMap;

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

mod attention;
mod linear;

pub(crate) use attention::{KeyMask, QueryMask};
pub(crate) use linear::Linear;

use super::kernels::Act;
use super::weights::Weights;
use crate::models::{Device, Precision};
use crate::simd::fused::{self, HeadSizes, HeadSplit};
use crate::{Error, Result};

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
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => crate::simd::cublaslt::open_device(n),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(n) => candle_core::Device::new_cuda(n),
        Device::Metal(n) => candle_core::Device::new_metal(n),
    };
    let context = format!("cannot open device {device}");
    opened.map_err(err(&context))
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

/// The attention scale folded into the queries' weights as they are read, so that the scores
/// come out scaled without a pass of their own: the tensors whose checkpoint names end in one
/// of `suffixes` are multiplied by `scale` in f32, before the conversion to the device's
/// format (a half-precision weight is rounded once, not once more after the scaling).
///
/// With `rows`, only a tensor's first `rows` rows (entries of a bias) are scaled: the query's
/// part of a fused Q, K, V projection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fold {
    pub suffixes: &'static [&'static str],
    pub scale: f64,
    pub rows: Option<usize>,
}

impl Fold {
    /// Scales the tensor `name` of `shape` read as `values`, if it is one of the fold's.
    fn apply(&self, name: &str, shape: &[usize], values: &mut [f32]) {
        if !self.suffixes.iter().any(|s| name.ends_with(s)) {
            return;
        }
        let per_row = shape.iter().skip(1).product::<usize>();
        let end = self
            .rows
            .map_or(values.len(), |r| (r * per_row).min(values.len()));
        let by = self.scale;
        values[..end]
            .iter_mut()
            .for_each(|v| *v = (f64::from(*v) * by) as f32);
    }
}

/// Every tensor of `weights` (read by the one loader, as f32), renamed by `rename` (`None`
/// leaves a tensor out) and scaled as `fold` says, as a candle `VarBuilder` in `dtype` on
/// `device`.
pub(crate) fn var_builder(
    weights: &Weights,
    dtype: DType,
    device: &candle_core::Device,
    rename: impl Fn(&str) -> Option<String>,
    fold: Option<Fold>,
) -> Result<VarBuilder<'static>> {
    let mut tensors = HashMap::new();
    for name in weights.names() {
        // Integer buffers (`position_ids`) are not weights.
        if !weights.is_float(name) {
            continue;
        }
        let Some(key) = rename(name) else { continue };
        let shape = weights.shape(name)?.to_vec();
        let mut values = weights.f32(name, &shape)?;
        if let Some(fold) = fold {
            fold.apply(name, &shape, &mut values);
        }
        let tensor = Tensor::from_vec(values, shape, &candle_core::Device::Cpu)
            .and_then(|t| t.to_dtype(dtype))
            .and_then(|t| t.to_device(device))
            .map_err(err(name))?;
        tensors.insert(key, tensor);
    }
    Ok(VarBuilder::from_tensors(tensors, dtype, device))
}

/// Rows of token ids padded on the right with a pad id to the longest row, on the host: the
/// ids and the attention mask (1 for a token, 0 for padding), and the token types when the
/// model reads them, each `rows x len` row-major. What [`HostBatch::upload`] copies to a
/// device, one copy per tensor.
pub(crate) struct HostBatch {
    ids: Vec<u32>,
    mask: Vec<u32>,
    types: Option<Vec<u32>>,
    rows: usize,
    /// The padded length (the longest row's).
    pub len: usize,
}

impl HostBatch {
    /// `rows` padded with `pad`, row `i`'s mask 1 on its first `keys[i]` tokens only (every
    /// token without `keys`, or for a row past the end of `keys`): the rest are queries,
    /// never keys. `types[i]` are row `i`'s token types (zeros past them, and for a row
    /// without them); no types are kept without `types`.
    pub fn new(
        rows: &[&[u32]],
        keys: Option<&[usize]>,
        types: Option<&[&[u32]]>,
        pad: u32,
    ) -> Self {
        let len = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(rows.len() * len);
        let mut mask = Vec::with_capacity(rows.len() * len);
        for (i, row) in rows.iter().enumerate() {
            let seen = keys
                .and_then(|k| k.get(i))
                .map_or(row.len(), |&k| k.min(row.len()));
            ids.extend_from_slice(row);
            ids.extend(std::iter::repeat_n(pad, len - row.len()));
            mask.extend(std::iter::repeat_n(1u32, seen));
            mask.extend(std::iter::repeat_n(0u32, len - seen));
        }
        let types = types.map(|types| {
            let mut out = vec![0u32; rows.len() * len];
            for (row, types) in out.chunks_exact_mut(len.max(1)).zip(types) {
                let n = types.len().min(row.len());
                row[..n].copy_from_slice(&types[..n]);
            }
            out
        });
        HostBatch {
            ids,
            mask,
            types,
            rows: rows.len(),
            len,
        }
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The batch on `device`: one host-to-device copy per tensor.
    pub fn upload(self, device: &candle_core::Device) -> Result<Padded> {
        let shape = (self.rows, self.len);
        let to = |v: Vec<u32>| upload(v, shape, device).map_err(err("a padded batch"));
        Ok(Padded {
            ids: to(self.ids)?,
            mask: to(self.mask)?,
            types: self.types.map(to).transpose()?,
            len: self.len,
        })
    }
}

/// A [`HostBatch`] on a device: the ids `(rows, len)`, the attention mask and the token types
/// (when the host batch had them), all u32.
pub(crate) struct Padded {
    pub ids: Tensor,
    pub mask: Tensor,
    pub types: Option<Tensor>,
    /// The padded length.
    pub len: usize,
}

/// One call at a time on a model's device queue: [`pipeline`] takes a turn for the whole of a
/// call (every batch's upload, forward pass and read-back), so that calls from several host
/// threads queue their batches one call after another instead of interleaved on the device's
/// one stream. Sequential calls are what the parity tests check on a GPU; interleaved ones
/// gave wrong DeBERTa scores on an H200 (the threads test failed 8 times in 8 with the
/// cuBLASLt products on, none in 8 with them off; the cause is not established:
/// `docs/devices.md`). The device runs one call's work at a time either way; what a caller
/// waits for is the host's part of the call before its turn. On candle's CPU backend, whose
/// operations run when they are called, there are no turns. `RERANK_CUDA_CONCURRENT_CALLS=1`
/// (read once) lifts them on a device too, for the GPU checks that look for the cause.
#[derive(Debug)]
pub(crate) struct Turns(Option<std::sync::Mutex<()>>);

impl Turns {
    /// Turns on `device`'s queue (none on candle's CPU backend).
    pub fn on(device: &candle_core::Device) -> Self {
        static CONCURRENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let concurrent = set_to_one(&CONCURRENT, "RERANK_CUDA_CONCURRENT_CALLS");
        match device.is_cpu() || concurrent {
            true => Turns(None),
            false => Turns(Some(std::sync::Mutex::new(()))),
        }
    }

    /// Waits for this call's turn; the turn ends when the guard drops. A call that panicked
    /// in its turn leaves nothing half-done on the device for the next one, which takes its
    /// turn as usual.
    fn take(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        self.0
            .as_ref()
            .map(|lock| lock.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Runs `batches` on a device with the host's work beside the device's: for each batch,
/// `prepare` (host only: padding, masks), `launch` (copies it to the device and queues its
/// forward pass), `read` (waits for its results and copies them back), then `finish(n, ..)`
/// (host only: unpadding, pooling, storing), batch `n` of `batches`.
///
/// The order is: prepare batch n+1 while the device runs batch n, read batch n, launch batch
/// n+1 at once, then finish batch n while the device runs batch n+1. A device with one queue
/// (a CUDA device has one stream: `simd::cublaslt::open_device`) runs a read after every
/// operation queued before it, so batch n is read before batch n+1 is launched: reading it
/// later would wait for batch n+1 too. On candle's CPU backend every operation runs when it
/// is called, so the stages run one after the other, with the same results. `finish` sees
/// the batches in order; the first error stops the run. The call holds its turn on the
/// device's queue ([`Turns`]) throughout.
pub(crate) fn pipeline<B, H, P, R>(
    turns: &Turns,
    batches: &[B],
    prepare: impl Fn(&B) -> Result<H>,
    launch: impl Fn(H) -> Result<P>,
    read: impl Fn(P) -> Result<R>,
    mut finish: impl FnMut(usize, R) -> Result<()>,
) -> Result<()> {
    let Some((first, rest)) = batches.split_first() else {
        return Ok(());
    };
    let _turn = turns.take();
    let mut time = StageTimes::default();
    let prepare = |b: &B, t: &mut StageTimes| t.time(0, || prepare(b));
    let launch = |h: H, t: &mut StageTimes| t.time(1, || launch(h));
    let read = |p: P, t: &mut StageTimes| t.time(2, || read(p));
    let first = prepare(first, &mut time)?;
    let mut running = launch(first, &mut time)?;
    for (n, batch) in rest.iter().enumerate() {
        let next = prepare(batch, &mut time)?;
        let results = read(running, &mut time)?;
        running = launch(next, &mut time)?;
        time.time(3, || finish(n, results))?;
    }
    let results = read(running, &mut time)?;
    time.time(3, || finish(rest.len(), results))?;
    time.log(batches.len());
    Ok(())
}

/// Where a [`pipeline`] call's time went, in seconds: `[prepare, launch, read, finish]`.
/// `read` is the time the host waited for the device (and copied results back): when it is
/// small beside the rest, the host side bounds the throughput, when it dominates the device
/// does. Logged at debug level under the target `rerank::device` (`device_bench --stages`).
#[derive(Default)]
struct StageTimes([f64; 4]);

impl StageTimes {
    fn time<T>(&mut self, stage: usize, f: impl FnOnce() -> T) -> T {
        let start = std::time::Instant::now();
        let out = f();
        self.0[stage] += start.elapsed().as_secs_f64();
        out
    }

    fn log(&self, batches: usize) {
        let ms = |s: f64| (s * 1e4).round() / 10.0;
        let [prepare, launch, read, finish] = self.0.map(ms);
        tracing::debug!(
            target: "rerank::device",
            batches,
            prepare_ms = prepare,
            launch_ms = launch,
            read_ms = read,
            finish_ms = finish,
            "pipelined batches"
        );
    }
}

/// `t` as a flat f32 tensor: the conversion queued on the device, so that reading it back
/// ([`read_f32`]) is a copy and nothing else.
pub(crate) fn flat_f32(t: &Tensor) -> candle_core::Result<Tensor> {
    t.to_dtype(DType::F32)?.flatten_all()
}

/// The values of a flat f32 tensor ([`flat_f32`]) on the host: waits for the device.
pub(crate) fn read_f32(t: &Tensor) -> Result<Vec<f32>> {
    let values = t.to_vec1::<f32>().map_err(err("reading results back"))?;
    settle(t.device()).map_err(err("waiting for the device's copies"))?;
    Ok(values)
}

/// `values` as a tensor of `shape` on `device`: one copy from the host, waited for under
/// `RERANK_CUDA_SYNC_COPIES=1` ([`settle`]). What every upload of a batch's values goes
/// through.
pub(crate) fn upload<D: candle_core::WithDType>(
    values: Vec<D>,
    shape: impl Into<candle_core::Shape>,
    device: &candle_core::Device,
) -> candle_core::Result<Tensor> {
    let tensor = Tensor::from_vec(values, shape, device)?;
    settle(device)?;
    Ok(tensor)
}

/// With `RERANK_CUDA_SYNC_COPIES=1` (read once), waits until `device` has run everything
/// queued on it; otherwise returns at once. A check for the GPU runs (`gpu_check.sh`): the
/// copies of a batch to and from the host's own (pageable) memory are asynchronous calls that
/// CUDA documents as "might be synchronous", and this makes each upload and each read return
/// only once its copy is done, so that a failure that goes away with it points at them.
fn settle(device: &candle_core::Device) -> candle_core::Result<()> {
    static SYNC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    match set_to_one(&SYNC, "RERANK_CUDA_SYNC_COPIES") {
        true => device.synchronize(),
        false => Ok(()),
    }
}

/// While what this returns lives, candle's kernels on a CUDA `device` that read strided
/// operands (a transposed copy, a broadcast addition) take their shapes and strides from
/// buffers uploaded once per layout and kept for the process (candle's parameter cache, made
/// for CUDA graphs) instead of an allocation and a copy from the host for each operation; the
/// thread must upload nothing else meanwhile (candle then also caches small uploads by
/// content). Opt-in with `RERANK_CUDA_PARAM_CACHE=1` (read once), because the cache keeps one
/// buffer for every layout it ever sees: a check for the GPU runs of what those copies cost
/// the host. `None` otherwise, and off CUDA devices.
pub(crate) fn cached_params(device: &candle_core::Device) -> Option<Box<dyn std::any::Any>> {
    #[cfg(feature = "cuda")]
    if let candle_core::Device::Cuda(cuda) = device {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if set_to_one(&ON, "RERANK_CUDA_PARAM_CACHE") {
            return Some(Box::new(cuda.enable_cuda_graph_htod_cache()));
        }
    }
    let _ = device;
    None
}

/// Whether the switch `name` is set to `1`, read once into `cell`: the opt-in switches of the
/// GPU checks ([`Turns`], [`settle`], [`cached_params`]).
fn set_to_one(cell: &std::sync::OnceLock<bool>, name: &str) -> bool {
    *cell.get_or_init(|| std::env::var(name).is_ok_and(|v| v.trim() == "1"))
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

/// RoPE's `(cos, sin)` tables `(positions, d / 2)` ([`rope_tables`]) for a batch of `b` rows
/// of `t` tokens, each row's token `i` at position `i`: `(b, t, d / 2)` each, what
/// [`split_heads`] rotates by.
pub(crate) fn rope_rows(
    (cos, sin): &(Tensor, Tensor),
    (b, t): (usize, usize),
) -> candle_core::Result<(Tensor, Tensor)> {
    let rows = |table: &Tensor| {
        let half = table.dim(1)?;
        table
            .narrow(0, 0, t)?
            .unsqueeze(0)?
            .broadcast_as((b, t, half))?
            .contiguous()
    };
    Ok((rows(cos)?, rows(sin)?))
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

/// A layer norm's weight and bias, on candle's fused kernel.
pub(crate) struct Norm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl Norm {
    /// `{name}.weight` and `{name}.bias` of width `h` under `vb`.
    pub fn load(vb: &VarBuilder, h: usize, eps: f32, name: &str) -> Result<Self> {
        let vb = vb.pp(name);
        Ok(Norm {
            weight: vb.get(h, "weight").map_err(err(name))?,
            bias: vb.get(h, "bias").map_err(err(name))?,
            eps,
        })
    }

    /// [`Norm::load`], or without a bias (`{name}.weight` only) unless `bias`: a zero bias
    /// then, so that the norm is candle's fused kernel (candle_nn's `LayerNorm` without a bias
    /// takes about ten kernels).
    pub fn load_maybe_bias(
        vb: &VarBuilder,
        h: usize,
        eps: f32,
        name: &str,
        bias: bool,
    ) -> Result<Self> {
        if bias {
            return Self::load(vb, h, eps, name);
        }
        let weight = vb.pp(name).get(h, "weight").map_err(err(name))?;
        let bias = weight.zeros_like().map_err(err(name))?;
        Ok(Norm { weight, bias, eps })
    }

    /// The norm of each row of `x` (contiguous).
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::layer_norm(x, &self.weight, &self.bias, self.eps)
    }
}

/// The linear layer `{name}.weight` `(outputs, inputs)` under `vb`, with `{name}.bias` when
/// `bias`.
pub(crate) fn linear(
    vb: &VarBuilder,
    inputs: usize,
    outputs: usize,
    bias: bool,
    name: &str,
) -> Result<Linear> {
    let vb = vb.pp(name);
    let weight = vb.get((outputs, inputs), "weight").map_err(err(name))?;
    let bias = match bias {
        true => Some(vb.get(outputs, "bias").map_err(err(name))?),
        false => None,
    };
    Linear::new(weight, bias).map_err(err(name))
}

/// A self-attention's three `hidden`-wide projections `{q}`, `{k}`, `{v}` under `vb` stacked
/// into one linear layer of `3 · hidden` outputs: one product instead of three (the query's
/// rows carry the attention scale when the weights were read with a [`Fold`]).
pub(crate) fn stacked_qkv(vb: &VarBuilder, hidden: usize, [q, k, v]: [&str; 3]) -> Result<Linear> {
    stacked(vb, hidden, &[(q, hidden), (k, hidden), (v, hidden)], true)
}

/// The linear layers `parts` under `vb`, each `(name, outputs)` and all `inputs` wide, with
/// their biases when `bias`, stacked in that order into one layer of all their outputs: one
/// product instead of one per part, whose output holds each part's columns after the one
/// before (the weights are read as `vb` reads them, a [`Fold`] included).
pub(crate) fn stacked(
    vb: &VarBuilder,
    inputs: usize,
    parts: &[(&str, usize)],
    bias: bool,
) -> Result<Linear> {
    let first = parts.first().map_or("a stacked layer", |(name, _)| name);
    let stack = |kind: &str, with_inputs: bool| -> Result<Tensor> {
        let tensors = parts
            .iter()
            .map(|&(name, outputs)| {
                let tensor = match with_inputs {
                    true => vb.get((outputs, inputs), &format!("{name}.{kind}")),
                    false => vb.get(outputs, &format!("{name}.{kind}")),
                };
                tensor.map_err(err(name))
            })
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&tensors, 0).map_err(err(first))
    };
    let weight = stack("weight", true)?;
    let bias = match bias {
        true => Some(stack("bias", false)?),
        false => None,
    };
    Linear::new(weight, bias).map_err(err(first))
}

/// `x` `(b · t, hidden)` through a stacked Q, K, V layer ([`stacked_qkv`]), as Q, K and V of
/// `(b, heads, t, d)` each, Q and K rotated by `rope` when given ([`split_heads`]).
pub(crate) fn heads_of(
    qkv: &Linear,
    x: &Tensor,
    (b, t): (usize, usize),
    heads: usize,
    rope: Option<(&Tensor, &Tensor)>,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    split_heads(&qkv.forward(x)?, (b, t), heads, rope)
}

/// The output `(b · t, 3 · hidden)` of a stacked Q, K, V layer ([`stacked_qkv`]) as Q, K and V
/// of `(b, heads, t, d)` each, rotated by RoPE's `(cos, sin)` tables `(b, t, d / 2)` when
/// given: one pass of our own (`simd::fused::split_heads`), or for a head of an odd size,
/// which that pass does not take (and RoPE does not rotate), one copy of candle's.
pub(crate) fn split_heads(
    qkv: &Tensor,
    (b, t): (usize, usize),
    heads: usize,
    rope: Option<(&Tensor, &Tensor)>,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let d = qkv.dim(1)? / (3 * heads);
    if d.is_multiple_of(2) || rope.is_some() {
        let sizes = HeadSizes {
            rows: b,
            tokens: t,
            heads,
            kv: heads,
            d,
            queries: t,
            prefix: 0,
        };
        return fused::split_heads(HeadSplit {
            all: qkv,
            sizes,
            norms: None,
            rope,
            prefix_kv: None,
            eps: 0.0,
        });
    }
    let all = qkv
        .reshape((b, t, 3, heads, d))?
        .permute((2, 0, 3, 1, 4))?
        .contiguous()?;
    Ok((all.get(0)?, all.get(1)?, all.get(2)?))
}

/// What an additive mask adds to a score to mask it out in `dtype`: a large negative number,
/// finite in every format (f16 tops out at 65,504), and so is the sum of two; the scores it
/// is added to are far smaller.
pub(crate) fn mask_value(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => -3e4,
        _ => -1e30,
    }
}

/// Whether a model's softmax runs in f32 on `vb`'s device: half-precision activations on
/// candle's CPU backend, whose softmax sums in the activations' format (bf16 cost the BERT
/// fixture `ce_tiny_a` 0.14 against PyTorch's 0.026). candle's CUDA kernel sums in f32 for
/// f16 and bf16 alike, so a GPU runs the fused softmax in the activations' format.
pub(crate) fn softmax_in_f32(vb: &VarBuilder) -> bool {
    vb.device().is_cpu() && vb.dtype() != DType::F32
}

/// candle's fused softmax over the last dimension, in f32 when `in_f32`
/// ([`softmax_in_f32`]), the result in the scores' format.
pub(crate) fn softmax(scores: &Tensor, in_f32: bool) -> candle_core::Result<Tensor> {
    match in_f32 {
        true => candle_nn::ops::softmax_last_dim(&scores.to_dtype(DType::F32)?)?
            .to_dtype(scores.dtype()),
        false => candle_nn::ops::softmax_last_dim(scores),
    }
}

/// What follows the attention in a post-norm encoder layer (BERT's and DeBERTa's names):
/// `x = LN(x + O · context)` (`attention.output.dense` / `.LayerNorm`), then
/// `x = LN(x + W2 · act(W1 · x))` (`intermediate.dense`, `output.dense` / `.LayerNorm`).
pub(crate) struct PostNorm {
    out: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    ffn_norm: Norm,
}

impl PostNorm {
    /// Layer `l`'s tensors, `hidden` wide with `intermediate` in the feed-forward part.
    pub fn load(l: &VarBuilder, hidden: usize, intermediate: usize, eps: f32) -> Result<Self> {
        let a = l.pp("attention");
        Ok(PostNorm {
            out: linear(&a, hidden, hidden, true, "output.dense")?,
            attn_norm: Norm::load(&a, hidden, eps, "output.LayerNorm")?,
            up: linear(l, hidden, intermediate, true, "intermediate.dense")?,
            down: linear(l, intermediate, hidden, true, "output.dense")?,
            ffn_norm: Norm::load(l, hidden, eps, "output.LayerNorm")?,
        })
    }

    /// The layer's output rows from the attention's `context` and the layer's input rows
    /// `residual` (the same rows).
    pub fn forward(
        &self,
        context: &Tensor,
        residual: &Tensor,
        act: Act,
    ) -> candle_core::Result<Tensor> {
        let x = self
            .attn_norm
            .forward(&self.out.forward_add(context, residual)?)?;
        let y = activate(&self.up.forward(&x)?, act)?;
        self.ffn_norm.forward(&self.down.forward_add(&y, &x)?)
    }
}

/// `act(gate) · up` `(rows, inputs)` of a stacked gate and up projection `gate_up`
/// `(rows, 2 · inputs)` (each row's gate, then its up): one pass of our own
/// (`simd::fused::glu`) on the devices it runs on, else [`glu_by_candle`].
pub(crate) fn glu(gate_up: &Tensor, act: Act) -> candle_core::Result<Tensor> {
    match fused::runs_on(gate_up.device()) {
        true => fused::glu(gate_up, act),
        false => glu_by_candle(gate_up, act),
    }
}

/// [`glu`] on candle's operations: both halves narrowed, [`activate`] on the gate, then the
/// product (what runs on Metal and under `RERANK_CUDA_FUSED_KERNELS=0`, and what the tests
/// check the pass against).
pub(crate) fn glu_by_candle(gate_up: &Tensor, act: Act) -> candle_core::Result<Tensor> {
    let half = gate_up.dim(candle_core::D::Minus1)? / 2;
    let gate = activate(&gate_up.narrow(candle_core::D::Minus1, 0, half)?, act)?;
    gate * gate_up.narrow(candle_core::D::Minus1, half, half)?
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn a_fold_scales_the_tensors_it_names_and_only_their_leading_rows_when_asked() {
        let fold = Fold {
            suffixes: &[".q.weight"],
            scale: 0.5,
            rows: None,
        };
        let mut values = [2.0f32, 4.0, 6.0, 8.0];
        fold.apply("layer.0.k.weight", &[2, 2], &mut values);
        assert_eq!(values, [2.0, 4.0, 6.0, 8.0]);
        fold.apply("layer.0.q.weight", &[2, 2], &mut values);
        assert_eq!(values, [1.0, 2.0, 3.0, 4.0]);
        let first_row = Fold {
            rows: Some(1),
            ..fold
        };
        first_row.apply("layer.0.q.weight", &[2, 2], &mut values);
        assert_eq!(values, [0.5, 1.0, 3.0, 4.0]);
        // A bias: its first entries.
        let mut bias = [2.0f32, 2.0, 2.0];
        first_row.apply("x.q.weight", &[3], &mut bias);
        assert_eq!(bias, [1.0, 2.0, 2.0]);
    }

    #[test]
    fn a_stacked_layer_gives_each_parts_outputs_side_by_side_and_names_a_missing_one() {
        let dev = candle_core::Device::Cpu;
        let (rows, inputs) = (3, 4);
        let parts = [("q", 4), ("k", 2), ("v", 2)];
        let value = |i: usize, s: f32| ((i * 7 + 3) % 11) as f32 * s - 1.0;
        let mut tensors = HashMap::new();
        for (n, &(name, outputs)) in parts.iter().enumerate() {
            let w: Vec<f32> = (0..outputs * inputs).map(|i| value(i + n, 0.25)).collect();
            let b: Vec<f32> = (0..outputs).map(|i| value(i + 2 * n, 0.5)).collect();
            let w = Tensor::from_vec(w, (outputs, inputs), &dev).unwrap();
            tensors.insert(format!("{name}.weight"), w);
            tensors.insert(
                format!("{name}.bias"),
                Tensor::from_vec(b, outputs, &dev).unwrap(),
            );
        }
        let vb = VarBuilder::from_tensors(tensors.clone(), DType::F32, &dev);
        let x: Vec<f32> = (0..rows * inputs).map(|i| value(i, 0.125)).collect();
        let x = Tensor::from_vec(x, (rows, inputs), &dev).unwrap();
        let all: Vec<Vec<f32>> = stacked(&vb, inputs, &parts, true)
            .unwrap()
            .forward(&x)
            .unwrap()
            .to_vec2()
            .unwrap();
        let mut column = 0;
        for &(name, outputs) in &parts {
            let one: Vec<Vec<f32>> = linear(&vb, inputs, outputs, true, name)
                .unwrap()
                .forward(&x)
                .unwrap()
                .to_vec2()
                .unwrap();
            for r in 0..rows {
                assert_eq!(
                    all[r][column..column + outputs],
                    one[r][..],
                    "{name}, row {r}"
                );
            }
            column += outputs;
        }
        assert_eq!(column, all[0].len());
        // Without biases the products alone; a part that is missing is named.
        let plain = stacked(&vb, inputs, &parts, false).unwrap();
        assert!(plain.forward(&x).is_ok());
        tensors.remove("k.weight");
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &dev);
        let e = stacked(&vb, inputs, &parts, true).unwrap_err().to_string();
        assert!(
            e.starts_with("model error: k: ") && e.contains("k.weight"),
            "{e}"
        );
    }

    #[test]
    fn a_host_batch_pads_to_its_longest_row() {
        let (a, b) = ([5u32, 6, 7], [8u32]);
        let batch = HostBatch::new(&[&a, &b], Some(&[2]), Some(&[&[0, 1, 1], &[1]]), 9);
        assert_eq!((batch.rows(), batch.len), (2, 3));
        assert_eq!(batch.ids, [5, 6, 7, 8, 9, 9]);
        // Row 0 keeps 2 keys; row 1 has no key count: every token is a key.
        assert_eq!(batch.mask, [1, 1, 0, 1, 0, 0]);
        assert_eq!(batch.types.as_deref(), Some(&[0, 1, 1, 1, 0, 0][..]));
        let padded = batch.upload(&candle_core::Device::Cpu).unwrap();
        assert_eq!(padded.ids.dims(), [2, 3]);
        // Token types longer than their row are cut, not a panic; no rows is no batch.
        let long = HostBatch::new(&[&b], None, Some(&[&[1, 1, 1]]), 0);
        assert_eq!(long.types.as_deref(), Some(&[1][..]));
        let none = HostBatch::new(&[], None, None, 0);
        assert_eq!((none.rows(), none.len), (0, 0));
    }

    #[test]
    fn the_pipeline_reads_a_batch_before_it_launches_the_next_and_finishes_in_order() {
        let log = RefCell::new(Vec::new());
        let mut results = Vec::new();
        pipeline(
            &Turns::on(&candle_core::Device::Cpu),
            &[10, 20, 30],
            |&b| {
                log.borrow_mut().push(format!("prepare {b}"));
                Ok(b)
            },
            |b| {
                log.borrow_mut().push(format!("launch {b}"));
                Ok(b + 1)
            },
            |p| {
                log.borrow_mut().push(format!("read {}", p - 1));
                Ok(p * 2)
            },
            |n, r| {
                log.borrow_mut().push(format!("finish {n}"));
                results.push((n, r));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(results, [(0, 22), (1, 42), (2, 62)]);
        let want = [
            "prepare 10",
            "launch 10",
            "prepare 20",
            "read 10",
            "launch 20",
            "finish 0",
            "prepare 30",
            "read 20",
            "launch 30",
            "finish 1",
            "read 30",
            "finish 2",
        ];
        assert_eq!(log.into_inner(), want);
    }

    #[test]
    fn calls_on_a_device_queue_take_turns_and_calls_on_the_cpu_do_not() {
        assert!(Turns::on(&candle_core::Device::Cpu).0.is_none());
        // A device queue's turns: two threads' calls, each of three batches whose launches
        // sleep (time for the other thread to come in), never interleave.
        let turns = Turns(Some(std::sync::Mutex::new(())));
        let log = std::sync::Mutex::new(Vec::new());
        let call = |who: char| {
            pipeline(
                &turns,
                &[0, 1, 2],
                |&b| Ok(b),
                |b| {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    log.lock().unwrap().push(who);
                    Ok(b)
                },
                Ok,
                |_, _| Ok(()),
            )
        };
        std::thread::scope(|s| {
            let a = s.spawn(|| call('a'));
            let b = s.spawn(|| call('b'));
            a.join().unwrap().unwrap();
            b.join().unwrap().unwrap();
        });
        let log: String = log.into_inner().unwrap().into_iter().collect();
        assert!(
            log == "aaabbb" || log == "bbbaaa",
            "calls interleaved: {log}"
        );
    }

    #[test]
    fn the_pipeline_stops_at_the_first_error_and_runs_nothing_for_no_batches() {
        let finished = RefCell::new(Vec::new());
        let turns = Turns::on(&candle_core::Device::Cpu);
        let run = |fail: usize| {
            finished.borrow_mut().clear();
            pipeline(
                &turns,
                &[0usize, 1, 2, 3],
                |&b| match b == fail {
                    true => Err(Error::model("bad batch")),
                    false => Ok(b),
                },
                Ok,
                Ok,
                |n, _| {
                    finished.borrow_mut().push(n);
                    Ok(())
                },
            )
        };
        assert!(run(2).is_err());
        // Batch 2 failed while batch 1 ran: batch 0 was finished, nothing after.
        assert_eq!(*finished.borrow(), [0]);
        assert!(run(9).is_ok());
        assert_eq!(*finished.borrow(), [0, 1, 2, 3]);
        let none: [usize; 0] = [];
        pipeline(
            &turns,
            &none,
            |_| Ok(()),
            Ok,
            Ok,
            |_, ()| panic!("no batch"),
        )
        .unwrap();
    }
}
