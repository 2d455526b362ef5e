//! The decoders' passes of our own, one pass each where candle takes several (feature
//! `candle`; kernels of our own on a CUDA device with feature `cuda`, `decoder.cu`):
//! - [`split_heads`]: the stacked Q, K, V projection `(b · t, (heads + 2 kv) · d)` into
//!   Q `(b, heads, tq, d)`, K and V `(b, kv, p + t, d)`, each Q and K head RMS-normed (Qwen3's
//!   `q_norm` / `k_norm`) and rotated (RoPE, rotate-half), a shared prefix's `p` keys and
//!   values in front of each prompt's, in one pass: candle needs a strided copy per part, then
//!   a norm and a rotation each for Q and K, and with a prefix two concatenations (seven
//!   kernels and more, the copies' index arithmetic their slowest part on a GPU);
//! - [`merge_heads`]: the context `(b, heads, tq, d)` into the rows `(b · tq, heads · d)` that
//!   the output projection reads: candle's strided copy, without its index arithmetic per
//!   element and per dimension;
//! - [`swiglu`]: `silu(gate) · up` from the stacked gate and up projection `(rows, 2 · I)`,
//!   where candle runs SiLU and the product as two passes over two products' outputs.
//!
//! Every backend runs the same definition: the CPU loops below (what candle's CPU backend
//! runs, and what the parity tests check against the references), and on a CUDA device the
//! kernels of `decoder.cu`, written to follow them: each value in f32 (for the heads,
//! `x · (1 / sqrt(mean(x²) + eps)) · w`, then `(a cos - b sin, b cos + a sin)` for the pair
//! (`i`, `i + d/2`); for SwiGLU, `g / (1 + exp(-g)) · u`), rounded once to the activations'
//! format. `RERANK_CUDA_DECODER_KERNELS=0` (read once) leaves the decoders to candle's
//! operations on every backend ([`enabled`]: [`split_heads`] and [`merge_heads`] then run
//! them; the caller stacks gate and up or not), a check for the GPU runs.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Storage, StorageRef, Tensor, WithDType};

/// The most a head may hold (the kernels keep a head row's pairs in registers).
const MAX_HEAD_DIM: usize = 512;

/// Whether the decoders run these operations: unless `RERANK_CUDA_DECODER_KERNELS` is `0`
/// (read once).
pub(crate) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("RERANK_CUDA_DECODER_KERNELS").map_or(true, |v| v.trim() != "0")
    })
}

/// The sizes of a batch's heads: `rows` prompts of `tokens` tokens, `heads` query heads and
/// `kv` key/value heads of `d`, queries for the last `queries` tokens of each prompt, and the
/// keys and values of a shared `prefix` of tokens before each prompt's own (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadSizes {
    pub rows: usize,
    pub tokens: usize,
    pub heads: usize,
    pub kv: usize,
    pub d: usize,
    pub queries: usize,
    pub prefix: usize,
}

impl HeadSizes {
    /// The elements of Q, then of K (V has as many as K).
    fn parts(&self) -> (usize, usize) {
        (
            self.rows * self.heads * self.queries * self.d,
            self.rows * self.kv * self.keys() * self.d,
        )
    }

    /// The keys each prompt's queries see: the prefix's, then its own.
    fn keys(&self) -> usize {
        self.prefix + self.tokens
    }

    /// The first token that has a query.
    fn q_from(&self) -> usize {
        self.tokens - self.queries
    }
}

/// What [`split_heads`] takes: the stacked projection `all` `(rows · tokens, (heads + 2 kv) ·
/// d)` of a batch of `sizes`, Q's and K's `norms` weights `(d)` and RoPE's `(cos, sin)`, each
/// `(rows, tokens, d / 2)`, when there are, and a shared prefix's keys and values
/// `prefix_kv`, `(1, kv, prefix, d)` each (already normed and rotated), when `sizes.prefix`
/// is not 0.
#[derive(Clone, Copy)]
pub(crate) struct HeadSplit<'a> {
    pub all: &'a Tensor,
    pub sizes: HeadSizes,
    pub norms: Option<(&'a Tensor, &'a Tensor)>,
    pub rope: Option<(&'a Tensor, &'a Tensor)>,
    pub prefix_kv: Option<(&'a Tensor, &'a Tensor)>,
    pub eps: f64,
}

/// Q `(rows, heads, queries, d)`, K and V `(rows, kv, prefix + tokens, d)` of `split`: Q and
/// K each normed, then rotated, when it says so; V as it is. Q for the last `queries` tokens
/// of each prompt only; each prompt's keys and values start with the shared prefix's. In one
/// pass, the three contiguous parts of one new buffer (candle's operations under
/// `RERANK_CUDA_DECODER_KERNELS=0`).
pub(crate) fn split_heads(split: HeadSplit) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    split.check()?;
    match enabled() {
        true => split.in_one_pass(),
        false => split.by_candle(),
    }
}

impl HeadSplit<'_> {
    /// An error unless every operand is as [`HeadSplit`] says, contiguous, in one format on
    /// one device, with an even head size of at most [`MAX_HEAD_DIM`].
    fn check(&self) -> candle_core::Result<()> {
        let HeadSizes {
            rows,
            tokens,
            heads,
            kv,
            d,
            queries,
            prefix,
        } = self.sizes;
        let all = self.all;
        let like = |t: &Tensor, dims: &[usize]| {
            t.dims() == dims
                && t.dtype() == all.dtype()
                && t.is_contiguous()
                && t.device().same_device(all.device())
        };
        let pair = |p: Option<(&Tensor, &Tensor)>, dims: &[usize]| {
            p.is_none_or(|(a, b)| like(a, dims) && like(b, dims))
        };
        let fits = d > 0
            && d % 2 == 0
            && d <= MAX_HEAD_DIM
            && heads > 0
            && kv > 0
            && (1..=tokens).contains(&queries)
            && like(all, &[rows * tokens, (heads + 2 * kv) * d])
            && pair(self.norms, &[d])
            && pair(self.rope, &[rows, tokens, d / 2])
            && self.prefix_kv.is_some() == (prefix > 0)
            && pair(self.prefix_kv, &[1, kv, prefix, d]);
        if !fits {
            candle_core::bail!(
                "split_heads: the operands do not match {:?} (a stacked projection of {:?}, \
                 contiguous, in one format on one device, an even head size of at most \
                 {MAX_HEAD_DIM})",
                self.sizes,
                all.dims()
            );
        }
        Ok(())
    }

    /// [`split_heads`] as one operation ([`Split`]), on checked operands.
    fn in_one_pass(&self) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let s = self.sizes;
        let owned = |p: Option<(&Tensor, &Tensor)>| p.map(|(a, b)| (a.clone(), b.clone()));
        let flat = self.all.apply_op1_no_bwd(&Split {
            sizes: s,
            norms: owned(self.norms),
            rope: owned(self.rope),
            prefix_kv: owned(self.prefix_kv),
            eps: self.eps as f32,
        })?;
        let ((nq, nk), keys) = (s.parts(), s.keys());
        Ok((
            flat.narrow(0, 0, nq)?
                .reshape((s.rows, s.heads, s.queries, s.d))?,
            flat.narrow(0, nq, nk)?.reshape((s.rows, s.kv, keys, s.d))?,
            flat.narrow(0, nq + nk, nk)?
                .reshape((s.rows, s.kv, keys, s.d))?,
        ))
    }

    /// [`split_heads`] on candle's operations: a strided copy of each part, candle's RMS norm
    /// and its RoPE kernel, then the prefix's keys and values concatenated before each
    /// prompt's (what the decoder ran before [`Self::in_one_pass`]; what runs under
    /// `RERANK_CUDA_DECODER_KERNELS=0`, and what the tests check the one pass against).
    fn by_candle(&self) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let s = self.sizes;
        let all = self
            .all
            .reshape((s.rows, s.tokens, s.heads + 2 * s.kv, s.d))?;
        let part = |first: usize, n: usize, norm: Option<&Tensor>, from: usize| {
            let z = all
                .narrow(1, from, s.tokens - from)?
                .narrow(2, first, n)?
                .transpose(1, 2)?
                .contiguous()?;
            let z = match norm {
                Some(w) => candle_nn::ops::rms_norm(&z, w, self.eps as f32)?,
                None => z,
            };
            match (first < s.heads + s.kv, self.rope) {
                (true, Some((cos, sin))) => {
                    let (c, si) = (
                        cos.narrow(1, from, s.tokens - from)?.contiguous()?,
                        sin.narrow(1, from, s.tokens - from)?.contiguous()?,
                    );
                    candle_nn::rotary_emb::rope(&z, &c, &si)
                }
                _ => Ok(z),
            }
        };
        let (k, v) = (
            part(s.heads, s.kv, self.norms.map(|(_, k)| k), 0)?,
            part(s.heads + s.kv, s.kv, None, 0)?,
        );
        let (k, v) = match self.prefix_kv {
            None => (k, v),
            Some((pk, pv)) => {
                let shape = (s.rows, s.kv, s.prefix, s.d);
                (
                    Tensor::cat(&[&pk.expand(shape)?, &k], 2)?.contiguous()?,
                    Tensor::cat(&[&pv.expand(shape)?, &v], 2)?.contiguous()?,
                )
            }
        };
        let q = part(0, s.heads, self.norms.map(|(q, _)| q), s.q_from())?;
        Ok((q, k, v))
    }
}

/// The context `x` `(rows, heads, queries, d)` (contiguous) as `(rows · queries, heads · d)`:
/// each query's heads side by side (candle's transposed copy under
/// `RERANK_CUDA_DECODER_KERNELS=0`).
pub(crate) fn merge_heads(x: &Tensor) -> candle_core::Result<Tensor> {
    let (rows, heads, queries, d) = x.dims4()?;
    if !x.is_contiguous() {
        candle_core::bail!("merge_heads: the context is not contiguous");
    }
    let merged = match enabled() {
        true => x.apply_op1_no_bwd(&Merge)?,
        false => x.transpose(1, 2)?,
    };
    merged.reshape((rows * queries, heads * d))
}

/// `silu(gate) · up` `(rows, inputs)` of the stacked gate and up projection `gate_up`
/// `(rows, 2 · inputs)` (contiguous; each row's gate, then its up).
pub(crate) fn swiglu(gate_up: &Tensor) -> candle_core::Result<Tensor> {
    let (_, both) = gate_up.dims2()?;
    if !gate_up.is_contiguous() || both % 2 != 0 {
        candle_core::bail!(
            "swiglu: {:?} is not a contiguous stacked gate and up projection",
            gate_up.dims()
        );
    }
    gate_up.apply_op1_no_bwd(&SwiGlu)
}

/// [`swiglu`]'s operation.
struct SwiGlu;

impl OnHost for SwiGlu {
    const NAME: &'static str = "swiglu";

    /// The definition on the host: `g / (1 + exp(-g)) · u` in f32, rounded once.
    fn on_host<T: WithDType>(&self, x: &[T], layout: &Layout) -> candle_core::Result<Vec<T>> {
        let inputs = layout.shape().dims2()?.1 / 2;
        let mut out = Vec::with_capacity(x.len() / 2);
        for row in x.chunks_exact(2 * inputs) {
            let (gate, up) = row.split_at(inputs);
            out.extend(gate.iter().zip(up).map(|(&g, &u)| {
                let g = f32_of(g);
                T::from_f64(f64::from(g / (1.0 + (-g).exp()) * f32_of(u)))
            }));
        }
        Ok(out)
    }
}

impl CustomOp1 for SwiGlu {
    fn name(&self) -> &'static str {
        "rerank-swiglu"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, both) = layout.shape().dims2()?;
        Ok((
            on_cpu(self, storage, layout)?,
            Shape::from((rows, both / 2)),
        ))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let (rows, both) = layout.shape().dims2()?;
        let out = device::swiglu(storage, layout, (rows, both / 2))?;
        Ok((out, Shape::from((rows, both / 2))))
    }
}

/// [`split_heads`]'s operation on `all`.
struct Split {
    sizes: HeadSizes,
    norms: Option<(Tensor, Tensor)>,
    rope: Option<(Tensor, Tensor)>,
    prefix_kv: Option<(Tensor, Tensor)>,
    eps: f32,
}

/// [`merge_heads`]'s operation on the context.
struct Merge;

/// `t`'s elements of `T` on the host, from its layout's offset (contiguous: checked by the
/// callers).
fn host<'a, T: WithDType>(storage: &'a Storage, layout: &Layout) -> candle_core::Result<&'a [T]> {
    let Storage::Cpu(cpu) = storage else {
        candle_core::bail!("split_heads: an operand is not on the CPU");
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("split_heads: an operand is not contiguous");
    };
    Ok(&cpu.as_slice::<T>()?[start..end])
}

impl OnHost for Split {
    const NAME: &'static str = "split_heads";

    /// The definition on the host: for each row of `all` (prompt, token, head), the head's
    /// `d` values in f32, normed and rotated as the module says, rounded once to `T`.
    fn on_host<T: WithDType>(&self, all: &[T], _: &Layout) -> candle_core::Result<Vec<T>> {
        let s = self.sizes;
        let (nq, nk) = s.parts();
        let half = s.d / 2;
        let norm_guards = locked(&self.norms);
        let rope_guards = locked(&self.rope);
        let prefix_guards = locked(&self.prefix_kv);
        let norms = pair_on_host::<T>(&norm_guards)?;
        let rope = pair_on_host::<T>(&rope_guards)?;
        let mut out = vec![T::zero(); nq + 2 * nk];
        let (keys, p) = (s.keys(), s.prefix);
        // Each prompt's first keys and values: the prefix's.
        if let Some((pk, pv)) = pair_on_host::<T>(&prefix_guards)? {
            for (base, src) in [(nq, pk), (nq + nk, pv)] {
                for bg in 0..s.rows * s.kv {
                    let (g, at) = (bg % s.kv, base + bg * keys * s.d);
                    out[at..at + p * s.d].copy_from_slice(&src[g * p * s.d..(g + 1) * p * s.d]);
                }
            }
        }
        let (mut lo, mut hi) = (vec![0f32; half], vec![0f32; half]);
        let line = s.heads + 2 * s.kv;
        for (row, x) in all.chunks_exact(s.d).enumerate() {
            let (token, h) = (row / line, row % line);
            let (b, t) = (token / s.tokens, token % s.tokens);
            let (at, norm, rotate) = if h < s.heads {
                if t < s.q_from() {
                    continue;
                }
                let at = ((b * s.heads + h) * s.queries + (t - s.q_from())) * s.d;
                (at, norms.map(|(q, _)| q), true)
            } else if h < s.heads + s.kv {
                let at = nq + ((b * s.kv + (h - s.heads)) * keys + p + t) * s.d;
                (at, norms.map(|(_, k)| k), true)
            } else {
                let at = nq + nk + ((b * s.kv + (h - s.heads - s.kv)) * keys + p + t) * s.d;
                (at, None, false)
            };
            for i in 0..half {
                lo[i] = f32_of(x[i]);
                hi[i] = f32_of(x[i + half]);
            }
            if let Some(w) = norm {
                let sum: f32 = lo.iter().chain(&hi).map(|v| v * v).sum();
                let scale = 1.0 / (sum / s.d as f32 + self.eps).sqrt();
                for i in 0..half {
                    lo[i] = lo[i] * scale * f32_of(w[i]);
                    hi[i] = hi[i] * scale * f32_of(w[i + half]);
                }
            }
            let out = &mut out[at..at + s.d];
            for i in 0..half {
                let (mut a, mut c) = (lo[i], hi[i]);
                if let (true, Some((cos, sin))) = (rotate, rope) {
                    let (co, si) = (f32_of(cos[token * half + i]), f32_of(sin[token * half + i]));
                    a = lo[i] * co - hi[i] * si;
                    c = hi[i] * co + lo[i] * si;
                }
                out[i] = T::from_f64(f64::from(a));
                out[i + half] = T::from_f64(f64::from(c));
            }
        }
        Ok(out)
    }
}

/// A pair of side operands (the norms' weights, RoPE's tables), each locked for reading.
type LockedPair<'a> = Option<((StorageRef<'a>, &'a Layout), (StorageRef<'a>, &'a Layout))>;

fn locked(pair: &Option<(Tensor, Tensor)>) -> LockedPair<'_> {
    pair.as_ref()
        .map(|(a, b)| (a.storage_and_layout(), b.storage_and_layout()))
}

/// The host elements of a locked pair.
#[allow(clippy::type_complexity)]
fn pair_on_host<'a, T: WithDType>(
    pair: &'a LockedPair<'_>,
) -> candle_core::Result<Option<(&'a [T], &'a [T])>> {
    match pair {
        None => Ok(None),
        Some(((a, la), (b, lb))) => Ok(Some((host::<T>(a, la)?, host::<T>(b, lb)?))),
    }
}

/// An operation's definition on the host, over its input's elements in their own format.
trait OnHost {
    /// The operation's name in errors.
    const NAME: &'static str;

    /// The output's elements from the input's `x` (contiguous, of `layout`'s shape).
    fn on_host<T: WithDType>(&self, x: &[T], layout: &Layout) -> candle_core::Result<Vec<T>>;
}

/// `op` on candle's CPU backend: its definition in the input's format (f32, f16 or bf16).
fn on_cpu<P: OnHost>(
    op: &P,
    storage: &CpuStorage,
    layout: &Layout,
) -> candle_core::Result<CpuStorage> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{}: the input is not contiguous", P::NAME);
    };
    Ok(match storage {
        CpuStorage::F32(v) => CpuStorage::F32(op.on_host(&v[start..end], layout)?),
        CpuStorage::F16(v) => CpuStorage::F16(op.on_host(&v[start..end], layout)?),
        CpuStorage::BF16(v) => CpuStorage::BF16(op.on_host(&v[start..end], layout)?),
        other => candle_core::bail!("{}: no kernel for {:?}", P::NAME, other.dtype()),
    })
}

/// A value in f32 (exact from f16 and bf16).
fn f32_of<T: WithDType>(v: T) -> f32 {
    v.to_f64() as f32
}

/// The output's shape: one flat buffer of Q, K and V.
fn flat_shape(s: &HeadSizes) -> Shape {
    let (nq, nk) = s.parts();
    Shape::from(nq + 2 * nk)
}

impl CustomOp1 for Split {
    fn name(&self) -> &'static str {
        "rerank-split-heads"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((on_cpu(self, storage, layout)?, flat_shape(&self.sizes)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let out = device::split(self, storage, layout)?;
        Ok((out, flat_shape(&self.sizes)))
    }
}

impl OnHost for Merge {
    const NAME: &'static str = "merge_heads";

    /// The definition on the host: row `(b, h, q)` of `x` to row `(b, q, h)`.
    fn on_host<T: WithDType>(&self, x: &[T], layout: &Layout) -> candle_core::Result<Vec<T>> {
        let (_, heads, queries, d) = layout.shape().dims4()?;
        let mut out = vec![T::zero(); x.len()];
        for (row, src) in x.chunks_exact(d).enumerate() {
            let (q, bh) = (row % queries, row / queries);
            let (h, b) = (bh % heads, bh / heads);
            let at = ((b * queries + q) * heads + h) * d;
            out[at..at + d].copy_from_slice(src);
        }
        Ok(out)
    }
}

impl CustomOp1 for Merge {
    fn name(&self) -> &'static str {
        "rerank-merge-heads"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, heads, queries, d) = layout.shape().dims4()?;
        let out = on_cpu(self, storage, layout)?;
        Ok((out, Shape::from((rows, queries, heads, d))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let (rows, heads, queries, d) = layout.shape().dims4()?;
        let out = device::merge(storage, layout, (rows, heads, queries, d))?;
        Ok((out, Shape::from((rows, queries, heads, d))))
    }
}

/// The kernels of `decoder.cu` on a CUDA device.
#[cfg(feature = "cuda")]
mod device {
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{
        CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
    };
    use candle_core::cuda_backend::{CudaDType, WrapErr};
    use candle_core::{CudaDevice, CudaStorage, DType, Layout, Storage, StorageRef};

    use super::{locked, HeadSizes, Split};

    /// The PTX build.rs made of `decoder.cu`.
    const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/decoder.ptx"));
    /// The module's name among the device's loaded modules.
    const MODULE: &str = "rerank_decoder";
    /// Head rows per block: one warp each (`WARPS_PER_BLOCK` in `decoder.cu`).
    const ROWS_PER_BLOCK: u64 = 4;

    /// `$body` with `$t` the element type of `$dtype` and `$kernel` the name of `$name`'s
    /// kernel for it (`$name` then `_f32`, `_f16` or `_bf16`); an error for other formats.
    macro_rules! per_format {
        ($dtype:expr, $name:literal, |$t:ident, $kernel:ident| $body:expr) => {
            match $dtype {
                DType::F32 => {
                    type $t = f32;
                    let $kernel = concat!($name, "_f32");
                    $body
                }
                DType::F16 => {
                    type $t = half::f16;
                    let $kernel = concat!($name, "_f16");
                    $body
                }
                DType::BF16 => {
                    type $t = half::bf16;
                    let $kernel = concat!($name, "_bf16");
                    $body
                }
                other => candle_core::bail!("{}: no kernel for {other:?}", $name),
            }
        };
    }

    /// The launch of `rows` warps, one per head row.
    fn blocks(rows: usize) -> candle_core::Result<LaunchConfig> {
        let blocks = (rows as u64).div_ceil(ROWS_PER_BLOCK);
        let Ok(grid) = u32::try_from(blocks) else {
            candle_core::bail!("decoder kernel: {rows} rows are too many for one launch");
        };
        Ok(LaunchConfig {
            grid_dim: (grid.max(1), 1, 1),
            block_dim: (32 * ROWS_PER_BLOCK as u32, 1, 1),
            shared_mem_bytes: 0,
        })
    }

    /// A size as the kernels take it.
    fn u32_of(n: usize) -> candle_core::Result<u32> {
        u32::try_from(n).map_err(|_| candle_core::Error::Msg(format!("decoder kernel: {n} > u32")))
    }

    /// `t`'s elements on the device from its offset (contiguous: checked by the callers).
    fn view<'a, T: CudaDType>(
        storage: &'a CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<CudaView<'a, T>> {
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("decoder kernel: an operand is not contiguous");
        };
        Ok(storage.as_cuda_slice::<T>()?.slice(start..end))
    }

    /// A side operand's storage, locked for reading, and its layout.
    type Locked<'a> = (StorageRef<'a>, &'a candle_core::Layout);

    fn cuda<'a>(locked: &'a Locked<'_>) -> candle_core::Result<&'a CudaStorage> {
        match &*locked.0 {
            Storage::Cuda(s) => Ok(s),
            _ => candle_core::bail!("decoder kernel: an operand is not on the CUDA device"),
        }
    }

    /// The views of a pair of side operands, and 1; or, for an absent pair, two views of the
    /// main operand (`storage` at `layout`) that stand in for it, and 0: the kernel is told
    /// not to read them.
    #[allow(clippy::type_complexity)]
    fn pair<'a, T: CudaDType>(
        p: &'a Option<(Locked<'_>, Locked<'_>)>,
        storage: &'a CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CudaView<'a, T>, CudaView<'a, T>, u32)> {
        match p {
            Some((a, b)) => Ok((view::<T>(cuda(a)?, a.1)?, view::<T>(cuda(b)?, b.1)?, 1)),
            None => Ok((view::<T>(storage, layout)?, view::<T>(storage, layout)?, 0)),
        }
    }

    pub(super) fn split(
        op: &Split,
        storage: &CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<CudaStorage> {
        let sides = [locked(&op.norms), locked(&op.rope), locked(&op.prefix_kv)];
        per_format!(storage.dtype(), "split_heads", |T, kernel| run::<T>(
            op, storage, layout, &sides, kernel
        ))
    }

    fn run<T: CudaDType + DeviceRepr>(
        op: &Split,
        storage: &CudaStorage,
        layout: &Layout,
        [norms, rope, prefix_kv]: &[Option<(Locked<'_>, Locked<'_>)>; 3],
        kernel: &str,
    ) -> candle_core::Result<CudaStorage> {
        let s: HeadSizes = op.sizes;
        let device: &CudaDevice = storage.device();
        let all = view::<T>(storage, layout)?;
        let (q_norm, k_norm, has_norm) = pair::<T>(norms, storage, layout)?;
        let (cos, sin, has_rope) = pair::<T>(rope, storage, layout)?;
        let (prefix_k, prefix_v, _) = pair::<T>(prefix_kv, storage, layout)?;
        let (nq, nk) = s.parts();
        // SAFETY: the kernel writes every element of Q (the last `queries` tokens' heads),
        // K and V.
        let mut out: CudaSlice<T> = unsafe { device.alloc::<T>(nq + 2 * nk)? };
        let func = device.get_or_load_custom_func(kernel, MODULE, PTX)?;
        let (b, t, heads, kv, d, q_from, p) = (
            u32_of(s.rows)?,
            u32_of(s.tokens)?,
            u32_of(s.heads)?,
            u32_of(s.kv)?,
            u32_of(s.d)?,
            u32_of(s.q_from())?,
            u32_of(s.prefix)?,
        );
        let eps = op.eps;
        let mut builder = func.builder();
        builder.arg(&all);
        builder.arg(&q_norm);
        builder.arg(&k_norm);
        builder.arg(&cos);
        builder.arg(&sin);
        builder.arg(&prefix_k);
        builder.arg(&prefix_v);
        builder.arg(&mut out);
        for n in [&b, &t, &heads, &kv, &d, &q_from, &p, &has_norm, &has_rope] {
            builder.arg(n);
        }
        builder.arg(&eps);
        // A warp for every row of `all`, and for every copy of a prefix's key and value row.
        let own = s.rows * s.tokens * (s.heads + 2 * s.kv);
        let config = blocks(own + 2 * s.rows * s.kv * s.prefix)?;
        // SAFETY: the arguments are the kernel's, in its order and types; every operand holds
        // what the kernel reads of it (`split_heads` checked the shapes) and `out` what it
        // writes; all are on the device's one stream.
        unsafe { builder.launch(config) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(out, device.clone()))
    }

    /// Threads per block of [`swiglu`]'s kernel (one block per row).
    const ROW_THREADS: u32 = 256;

    /// `kernel` `(x, out, sizes...)` on `storage` at `layout` in `T`, writing a new output of
    /// `len` elements.
    ///
    /// # Safety
    /// `kernel` must take exactly those arguments, read only what `x` holds and write only
    /// (and all of) the `len` elements of `out` when launched as `config`.
    unsafe fn one_input<T: CudaDType + DeviceRepr>(
        storage: &CudaStorage,
        layout: &Layout,
        (kernel, config, sizes): (&str, LaunchConfig, &[u32]),
        len: usize,
    ) -> candle_core::Result<CudaStorage> {
        let device = storage.device();
        let x = view::<T>(storage, layout)?;
        // SAFETY: the kernel writes every element (the caller's promise).
        let mut out: CudaSlice<T> = unsafe { device.alloc::<T>(len)? };
        let func = device.get_or_load_custom_func(kernel, MODULE, PTX)?;
        let mut builder = func.builder();
        builder.arg(&x);
        builder.arg(&mut out);
        for n in sizes {
            builder.arg(n);
        }
        // SAFETY: the arguments are the kernel's, in its order and types (the caller's
        // promise); both buffers are on the device's one stream.
        unsafe { builder.launch(config) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(out, device.clone()))
    }

    pub(super) fn swiglu(
        storage: &CudaStorage,
        layout: &Layout,
        (rows, inputs): (usize, usize),
    ) -> candle_core::Result<CudaStorage> {
        let config = LaunchConfig {
            grid_dim: (u32_of(rows)?.max(1), 1, 1),
            block_dim: (ROW_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let sizes = [u32_of(inputs)?];
        per_format!(storage.dtype(), "swiglu", |T, kernel| {
            // SAFETY: `swiglu_*(x, out, inputs)`, one block per row: `x` holds `rows` rows of
            // `2 · inputs` (`swiglu` checked), `out` gets `rows` of `inputs`.
            unsafe { one_input::<T>(storage, layout, (kernel, config, &sizes), rows * inputs) }
        })
    }

    pub(super) fn merge(
        storage: &CudaStorage,
        layout: &Layout,
        (rows, heads, queries, d): (usize, usize, usize, usize),
    ) -> candle_core::Result<CudaStorage> {
        let config = blocks(rows * heads * queries)?;
        let sizes = [u32_of(rows)?, u32_of(heads)?, u32_of(queries)?, u32_of(d)?];
        let len = rows * heads * queries * d;
        per_format!(storage.dtype(), "merge_heads", |T, kernel| {
            // SAFETY: `merge_heads_*(x, out, b, heads, tq, d)`, a warp per row of `d`: `x` is
            // the contiguous context of those sizes, `out` gets as many elements.
            unsafe { one_input::<T>(storage, layout, (kernel, config, &sizes), len) }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    /// Deterministic values in [-1, 1), `n` of them.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| {
                let x = i
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(seed.wrapping_mul(40_503));
                (x >> 8) as f32 / (1u32 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        assert_eq!(a.dims(), b.dims());
        let a = a.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
        let b = b.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
        let (a, b) = (a.to_vec1::<f32>().unwrap(), b.to_vec1::<f32>().unwrap());
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn split_heads_is_candles_copies_norms_and_rotations_in_one_pass() {
        let dev = Device::Cpu;
        // (rows, tokens, heads, kv, d, queries, prefix): grouped and not, every query or the
        // last one, with a shared prefix and without, a head smaller than a warp's pairs and
        // one larger.
        let cases = [
            (2, 5, 4, 2, 8, 5, 0),
            (3, 4, 2, 2, 6, 1, 0),
            (1, 3, 6, 1, 160, 2, 0),
            (3, 4, 4, 2, 8, 4, 3),
            (2, 2, 2, 1, 70, 1, 5),
        ];
        for (n, &(rows, tokens, heads, kv, d, queries, prefix)) in cases.iter().enumerate() {
            let s = HeadSizes {
                rows,
                tokens,
                heads,
                kv,
                d,
                queries,
                prefix,
            };
            let line = (heads + 2 * kv) * d;
            let t = |v: Vec<f32>, shape: &[usize]| Tensor::from_vec(v, shape, &dev).unwrap();
            let all = t(
                values(rows * tokens * line, n as u32),
                &[rows * tokens, line],
            );
            let qn = t(values(d, 7).iter().map(|v| 1.0 + v).collect(), &[d]);
            let kn = t(values(d, 8).iter().map(|v| 1.0 - v / 2.0).collect(), &[d]);
            let cos = t(values(rows * tokens * d / 2, 9), &[rows, tokens, d / 2]);
            let sin = t(values(rows * tokens * d / 2, 10), &[rows, tokens, d / 2]);
            let pk = t(values(kv * prefix * d, 11), &[1, kv, prefix, d]);
            let pv = t(values(kv * prefix * d, 12), &[1, kv, prefix, d]);
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let bound = match dtype {
                    DType::F32 => 1e-5,
                    DType::F16 => 2e-2,
                    _ => 1.2e-1,
                };
                let c = |x: &Tensor| x.to_dtype(dtype).unwrap();
                let (all, qn, kn, cos, sin) = (c(&all), c(&qn), c(&kn), c(&cos), c(&sin));
                let (pk, pv) = (c(&pk), c(&pv));
                let prefix_kv = (prefix > 0).then_some((&pk, &pv));
                for (norms, rope) in [
                    (Some((&qn, &kn)), Some((&cos, &sin))),
                    (None, Some((&cos, &sin))),
                    (Some((&qn, &kn)), None),
                ] {
                    let split = HeadSplit {
                        all: &all,
                        sizes: s,
                        norms,
                        rope,
                        prefix_kv,
                        eps: 1e-6,
                    };
                    split.check().unwrap();
                    let ours = split.in_one_pass().unwrap();
                    let theirs = split.by_candle().unwrap();
                    for (part, (a, b)) in [(&ours.0, &theirs.0), (&ours.1, &theirs.1)]
                        .into_iter()
                        .enumerate()
                    {
                        let e = max_diff(a, b);
                        assert!(e <= bound, "case {n} {dtype:?} part {part}: {e}");
                    }
                    // V is copied, not computed.
                    assert_eq!(max_diff(&ours.2, &theirs.2), 0.0, "case {n} {dtype:?} V");
                    assert!(ours.0.is_contiguous() && ours.1.is_contiguous());
                }
            }
        }
    }

    #[test]
    fn swiglu_is_candles_silu_times_up() {
        let dev = Device::Cpu;
        let (rows, inputs) = (3, 70);
        let x = Tensor::from_vec(values(rows * 2 * inputs, 5), (rows, 2 * inputs), &dev).unwrap();
        let x = (x * 6.0).unwrap();
        // Relative to the value (up to about 36 here): each format's rounding, twice for
        // candle's (SiLU, then the product).
        for (dtype, bound) in [
            (DType::F32, 1e-6),
            (DType::F16, 2e-3),
            (DType::BF16, 1.6e-2),
        ] {
            let x = x.to_dtype(dtype).unwrap();
            let ours = swiglu(&x).unwrap();
            let (gate, up) = (
                x.narrow(1, 0, inputs).unwrap(),
                x.narrow(1, inputs, inputs).unwrap(),
            );
            let theirs = (candle_nn::ops::silu(&gate.contiguous().unwrap()).unwrap()
                * up.contiguous().unwrap())
            .unwrap();
            let e = max_diff(
                &((&ours - &theirs).unwrap() / theirs.abs().unwrap().maximum(1.0).unwrap())
                    .unwrap(),
                &ours.zeros_like().unwrap(),
            );
            assert!(e <= bound, "{dtype:?}: {e}");
        }
        assert!(swiglu(&x.narrow(1, 0, 3).unwrap()).is_err());
        assert!(swiglu(&x.t().unwrap()).is_err());
    }

    #[test]
    fn split_heads_refuses_what_does_not_fit_and_merge_heads_is_a_transpose() {
        let dev = Device::Cpu;
        let s = HeadSizes {
            rows: 2,
            tokens: 3,
            heads: 2,
            kv: 1,
            d: 4,
            queries: 3,
            prefix: 0,
        };
        let all = Tensor::zeros((6, 16), DType::F32, &dev).unwrap();
        let split = |sizes, rope, prefix_kv| {
            split_heads(HeadSplit {
                all: &all,
                sizes,
                norms: None,
                rope,
                prefix_kv,
                eps: 1e-6,
            })
        };
        for bad in [
            HeadSizes { d: 3, ..s },
            HeadSizes { queries: 0, ..s },
            HeadSizes { queries: 4, ..s },
            HeadSizes { kv: 2, ..s },
            HeadSizes { prefix: 2, ..s },
        ] {
            assert!(split(bad, None, None).is_err(), "{bad:?}");
        }
        let wrong_rope = Tensor::zeros((2, 3, 3), DType::F32, &dev).unwrap();
        let rope = Some((&wrong_rope, &wrong_rope));
        assert!(split(s, rope, None).is_err());
        let prefix = Tensor::zeros((1, 1, 2, 4), DType::F32, &dev).unwrap();
        let prefix_kv = Some((&prefix, &prefix));
        assert!(split(s, None, prefix_kv).is_err());
        let with_prefix = HeadSizes { prefix: 2, ..s };
        assert!(split(with_prefix, None, prefix_kv).is_ok());
        assert!(split(s, None, None).is_ok());

        let x = Tensor::from_vec(values(2 * 3 * 5 * 4, 3), (2, 3, 5, 4), &dev).unwrap();
        let ours = x
            .apply_op1_no_bwd(&Merge)
            .unwrap()
            .reshape((10, 12))
            .unwrap();
        let theirs = x.transpose(1, 2).unwrap().reshape((10, 12)).unwrap();
        assert_eq!(max_diff(&ours, &theirs), 0.0);
        assert!(merge_heads(&x.transpose(2, 3).unwrap()).is_err());
    }
}
