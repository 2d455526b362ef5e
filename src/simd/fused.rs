//! The candle ports' passes of our own, one pass each where candle takes several (feature
//! `candle`; kernels of our own on a CUDA device with feature `cuda`, `fused.cu`), for the
//! decoders (Qwen3, Qwen2) and the encoders (ModernBERT, DeBERTa, and BERT where cuBLASLt does
//! not read its heads in place):
//! - [`split_heads`]: the stacked Q, K, V projection `(b · t, (heads + 2 kv) · d)` into
//!   Q `(b, heads, tq, d)`, K and V `(b, kv, p + t, d)`, each Q and K head RMS-normed (Qwen3's
//!   `q_norm` / `k_norm`) and rotated (RoPE, rotate-half), a shared prefix's `p` keys and
//!   values in front of each prompt's, in one pass: candle needs a strided copy per part, then
//!   a norm and a rotation each for Q and K, and with a prefix two concatenations (seven
//!   kernels and more, the copies' index arithmetic their slowest part on a GPU);
//! - [`merge_heads`]: the context `(b, heads, tq, d)` into the rows `(b · tq, heads · d)` that
//!   the output projection reads, and [`heads_first`]: heads `(b, heads, t, d)` as
//!   `(heads, b, t, d)`, each head's rows together (DeBERTa's products with the relative
//!   positions): candle's strided copies, without their index arithmetic per element and per
//!   dimension (both are one pass, `swap_axes`);
//! - [`glu`]: `act(gate) · up` from the stacked gate and up projection `(rows, 2 · I)`
//!   (SwiGLU, GeGLU), where candle runs the activation and the product as two passes over two
//!   products' outputs;
//! - [`position_bias`]: DeBERTa's two relative-position terms of the attention's scores,
//!   gathered and added in one pass, where candle copies each term into place, gathers it and
//!   adds the second transposed.
//!
//! Every backend runs the same definition: the CPU loops below (what candle's CPU backend
//! runs, and what the parity tests check against the references), and on a CUDA device the
//! kernels of `fused.cu`, written to follow them: each value in f32 (for the heads,
//! `x · (1 / sqrt(mean(x²) + eps)) · w`, then `(a cos - b sin, b cos + a sin)` for the pair
//! (`i`, `i + d/2`); for the gated activations, `act(g) · u`), rounded once to the activations'
//! format. A Metal device, which has no kernels of these, runs candle's operations, and so
//! does every backend under `RERANK_CUDA_FUSED_KERNELS=0` (read once), a check for the GPU
//! runs ([`runs_on`]: [`split_heads`], [`merge_heads`] and [`heads_first`] then run them,
//! `layers::candle::glu` runs candle's in place of [`glu`], and the decoders keep gate and up
//! apart).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Storage, StorageRef, Tensor, WithDType};

use crate::models::layers::kernels::Act;

/// The most a head may hold (the kernels keep a head row's pairs in registers).
const MAX_HEAD_DIM: usize = 512;

/// Whether the models run these operations on `device`: on the CPU and on CUDA devices
/// (there are no Metal kernels: a Metal device runs candle's operations), unless
/// `RERANK_CUDA_FUSED_KERNELS` is `0` (read once).
pub(crate) fn runs_on(device: &candle_core::Device) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| {
        std::env::var("RERANK_CUDA_FUSED_KERNELS").map_or(true, |v| v.trim() != "0")
    });
    on && (device.is_cpu() || device.is_cuda())
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

    /// The warps `split_heads_*` runs: one for every row of the projection, and one for every
    /// copy of a prefix's key or value row.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn warps(&self) -> usize {
        self.rows * self.tokens * (self.heads + 2 * self.kv) + 2 * self.rows * self.kv * self.prefix
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
/// `RERANK_CUDA_FUSED_KERNELS=0`).
pub(crate) fn split_heads(split: HeadSplit) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    split.check()?;
    match runs_on(split.all.device()) {
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
    /// `RERANK_CUDA_FUSED_KERNELS=0`, and what the tests check the one pass against).
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
/// `RERANK_CUDA_FUSED_KERNELS=0`).
pub(crate) fn merge_heads(x: &Tensor) -> candle_core::Result<Tensor> {
    let (rows, heads, queries, d) = x.dims4()?;
    if !x.is_contiguous() {
        candle_core::bail!("merge_heads: the context is not contiguous");
    }
    let merged = match runs_on(x.device()) {
        true => x.apply_op1_no_bwd(&Swap {
            outer: rows,
            swapped: (heads, queries),
            inner: 1,
        })?,
        false => x.transpose(1, 2)?,
    };
    merged.reshape((rows * queries, heads * d))
}

/// The heads `x` `(b, heads, t, d)` (contiguous) as `(heads, b, t, d)`: each head's rows of
/// every batch row together, as a product per head over the batch reads them (candle's
/// transposed copy under `RERANK_CUDA_FUSED_KERNELS=0`).
pub(crate) fn heads_first(x: &Tensor) -> candle_core::Result<Tensor> {
    let (b, heads, t, d) = x.dims4()?;
    if !x.is_contiguous() {
        candle_core::bail!("heads_first: the heads are not contiguous");
    }
    match runs_on(x.device()) {
        true => x
            .apply_op1_no_bwd(&Swap {
                outer: 1,
                swapped: (b, heads),
                inner: t,
            })?
            .reshape((heads, b, t, d)),
        false => x.transpose(0, 1)?.contiguous(),
    }
}

/// `act(gate) · up` `(rows, inputs)` of the stacked gate and up projection `gate_up`
/// `(rows, 2 · inputs)` (contiguous; each row's gate, then its up): Qwen3's SwiGLU (`act`
/// SiLU), ModernBERT's GeGLU (GELU). On the devices of [`runs_on`] only:
/// `layers::candle::glu` runs candle's activation and product elsewhere.
pub(crate) fn glu(gate_up: &Tensor, act: Act) -> candle_core::Result<Tensor> {
    let (_, both) = gate_up.dims2()?;
    if !gate_up.is_contiguous() || both % 2 != 0 {
        candle_core::bail!(
            "glu: {:?} is not a contiguous stacked gate and up projection",
            gate_up.dims()
        );
    }
    gate_up.apply_op1_no_bwd(&Glu(act))
}

/// DeBERTa's relative-position scores of a batch of `b` rows of `t` tokens, `(b, heads, t, t)`:
/// for query `i` and key `j` of row `bi`, head `h`, `c2p[h, bi · t + i, r_ij] + p2c[h, bi · t + j,
/// r_ij]` with `r_ij = index[i, j]`, each term where given (at least one): `c2p`, the queries
/// against the relative rows (content to position), and `p2c`, the keys against them (position
/// to content), each `(heads, b · t, r)` contiguous; `index` `(t, t)` u32, the relative row of
/// each (query, key), past `r - 1` read as `r - 1`. Summed in f32 and rounded once.
pub(crate) fn position_bias(
    c2p: Option<&Tensor>,
    p2c: Option<&Tensor>,
    index: &Tensor,
    (b, heads, t): (usize, usize, usize),
) -> candle_core::Result<Tensor> {
    let Some(main) = c2p.or(p2c) else {
        candle_core::bail!("position_bias: neither term is given");
    };
    let r = main.dims().last().copied().unwrap_or(0);
    let fits = |x: &Tensor| {
        x.dims() == [heads, b * t, r]
            && x.dtype() == main.dtype()
            && x.is_contiguous()
            && x.device().same_device(main.device())
    };
    let index_fits = index.dims() == [t, t]
        && index.dtype() == candle_core::DType::U32
        && index.is_contiguous()
        && index.device().same_device(main.device());
    if r == 0 || !c2p.is_none_or(fits) || !p2c.is_none_or(fits) || !index_fits {
        candle_core::bail!(
            "position_bias: terms {:?} / {:?} and index {:?} do not fit {b} rows of {t} tokens, \
             {heads} heads",
            c2p.map(Tensor::dims),
            p2c.map(Tensor::dims),
            index.dims()
        );
    }
    let op = Bias {
        sizes: (b, heads, t),
        c2p: c2p.is_some(),
        p2c: c2p.and(p2c).cloned(),
        index: index.clone(),
    };
    main.apply_op1_no_bwd(&op)
}

/// [`position_bias`]'s operation on its first term (`c2p`, else `p2c`).
struct Bias {
    /// `(b, heads, t)`.
    sizes: (usize, usize, usize),
    /// Whether the operation's input is `c2p` (else it is `p2c`).
    c2p: bool,
    /// `p2c` beside a `c2p` input.
    p2c: Option<Tensor>,
    index: Tensor,
}

impl Bias {
    fn shape(&self) -> Shape {
        let (b, heads, t) = self.sizes;
        Shape::from((b, heads, t, t))
    }

    /// Whether `p2c` is read: as the input, or beside it.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn reads_p2c(&self) -> bool {
        !self.c2p || self.p2c.is_some()
    }
}

impl OnHost for Bias {
    const NAME: &'static str = "position_bias";

    /// The definition on the host: each score's one or two gathered terms in f32, summed,
    /// rounded once to `T`.
    fn on_host<T: WithDType>(&self, x: &[T], layout: &Layout) -> candle_core::Result<Vec<T>> {
        let (b, heads, t) = self.sizes;
        let r = layout.shape().dims3()?.2;
        let side = self.p2c.as_ref().map(Tensor::storage_and_layout);
        let side = match &side {
            Some((storage, layout)) => Some(host::<T>(storage, layout)?),
            None => None,
        };
        let (index, index_layout) = self.index.storage_and_layout();
        let index = host::<u32>(&index, index_layout)?;
        let (c2p, p2c) = match self.c2p {
            true => (Some(x), side),
            false => (None, Some(x)),
        };
        let mut out = Vec::with_capacity(b * heads * t * t);
        for bi in 0..b {
            for h in 0..heads {
                let rows = (h * b + bi) * t;
                for i in 0..t {
                    for j in 0..t {
                        let at = (index[i * t + j] as usize).min(r - 1);
                        let mut v = 0f32;
                        if let Some(c2p) = c2p {
                            v += f32_of(c2p[(rows + i) * r + at]);
                        }
                        if let Some(p2c) = p2c {
                            v += f32_of(p2c[(rows + j) * r + at]);
                        }
                        out.push(T::from_f64(f64::from(v)));
                    }
                }
            }
        }
        Ok(out)
    }
}

impl CustomOp1 for Bias {
    fn name(&self) -> &'static str {
        "rerank-position-bias"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((on_cpu(self, storage, layout)?, self.shape()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        Ok((device::position_bias(self, storage, layout)?, self.shape()))
    }
}

/// [`glu`]'s operation.
struct Glu(Act);

impl Glu {
    /// The activation's code in `fused.cu` (`glu_T`'s `act`).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn code(&self) -> u32 {
        match self.0 {
            Act::Gelu => 0,
            Act::GeluTanh => 1,
            Act::Relu => 2,
            Act::Silu => 3,
        }
    }
}

impl OnHost for Glu {
    const NAME: &'static str = "glu";

    /// The definition on the host, in f32, rounded once: `g / (1 + exp(-g))` (SiLU),
    /// `0.5 g (1 + tanh(√(2/π) (g + 0.044715 g³)))`, `max(g, 0)`, each with the platform's
    /// `exp` / `tanh`; and for GELU `0.5 g (1 + erf(g / √2))` in f64 with candle's erf (Rust's
    /// standard library has none), as candle's own GELU computes half-precision values. Then
    /// times `u`.
    fn on_host<T: WithDType>(&self, x: &[T], layout: &Layout) -> candle_core::Result<Vec<T>> {
        const C: f32 = 0.797_884_6; // √(2/π)
        let inputs = layout.shape().dims2()?.1 / 2;
        let mut out = Vec::with_capacity(x.len() / 2);
        let act = |g: f32| match self.0 {
            Act::Silu => g / (1.0 + (-g).exp()),
            Act::GeluTanh => 0.5 * g * (1.0 + (C * (g + 0.044_715 * g * g * g)).tanh()),
            Act::Relu => g.max(0.0),
            Act::Gelu => {
                let g = f64::from(g);
                let erf = candle_core::cpu::erf::erf_f64(g * std::f64::consts::FRAC_1_SQRT_2);
                (0.5 * g * (1.0 + erf)) as f32
            }
        };
        for row in x.chunks_exact(2 * inputs) {
            let (gate, up) = row.split_at(inputs);
            out.extend(
                gate.iter()
                    .zip(up)
                    .map(|(&g, &u)| T::from_f64(f64::from(act(f32_of(g)) * f32_of(u)))),
            );
        }
        Ok(out)
    }
}

impl CustomOp1 for Glu {
    fn name(&self) -> &'static str {
        "rerank-glu"
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
        let out = device::glu(storage, layout, (rows, both / 2), self.code())?;
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

/// [`merge_heads`]' and [`heads_first`]'s operation: a contiguous `x` seen as
/// `(outer, b, c, inner, d)` (`swapped` = `(b, c)`), written as `(outer, c, b, inner, d)`,
/// flat (the callers give it its shape). The input's shape is 4-D, its last axis `d`
/// (`merge_heads`: `(rows, heads, queries, d)`, `inner` 1; `heads_first`: `(b, heads, t, d)`,
/// `outer` 1).
struct Swap {
    outer: usize,
    swapped: (usize, usize),
    inner: usize,
}

impl Swap {
    /// The rows of `d` it moves, one warp each on a device: `outer · b · c · inner`.
    fn rows(&self) -> usize {
        let (b, c) = self.swapped;
        self.outer * b * c * self.inner
    }

    /// The head size `d` of an input of `layout`, checked against the sizes.
    fn d(&self, layout: &Layout) -> candle_core::Result<usize> {
        let (a, b, c, d) = layout.shape().dims4()?;
        let (sb, sc) = self.swapped;
        if a * b * c != self.rows() {
            candle_core::bail!(
                "swap_axes: {:?} is not ({}, {sb}, {sc}, {}, d)",
                layout.dims(),
                self.outer,
                self.inner
            );
        }
        Ok(d)
    }
}

/// `t`'s elements of `T` on the host, from its layout's offset (contiguous: checked by the
/// callers).
fn host<'a, T: WithDType>(storage: &'a Storage, layout: &Layout) -> candle_core::Result<&'a [T]> {
    let Storage::Cpu(cpu) = storage else {
        candle_core::bail!("fused pass: an operand is not on the CPU");
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("fused pass: an operand is not contiguous");
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

impl OnHost for Swap {
    const NAME: &'static str = "swap_axes";

    /// The definition on the host: row `(a, b, c, t)` of `x` to row `(a, c, b, t)`.
    fn on_host<T: WithDType>(&self, x: &[T], layout: &Layout) -> candle_core::Result<Vec<T>> {
        let d = self.d(layout)?;
        let ((sb, sc), inner) = (self.swapped, self.inner);
        let mut out = vec![T::zero(); x.len()];
        if d == 0 {
            return Ok(out);
        }
        for (row, src) in x.chunks_exact(d).enumerate() {
            let (t, abc) = (row % inner, row / inner);
            let (c, ab) = (abc % sc, abc / sc);
            let (b, a) = (ab % sb, ab / sb);
            let at = (((a * sc + c) * sb + b) * inner + t) * d;
            out[at..at + d].copy_from_slice(src);
        }
        Ok(out)
    }
}

impl CustomOp1 for Swap {
    fn name(&self) -> &'static str {
        "rerank-swap-axes"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((
            on_cpu(self, storage, layout)?,
            layout.shape().elem_count().into(),
        ))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let out = device::swap(self, storage, layout)?;
        Ok((out, layout.shape().elem_count().into()))
    }
}

/// A launch's blocks and threads per block (1-D).
type Grid = (u32, u32);

/// Head rows per block: one warp each (`WARPS_PER_BLOCK` in `fused.cu`).
const ROWS_PER_BLOCK: usize = 4;

/// Threads per block of the kernels that give a block to each row ([`block_per_row`]).
const ROW_THREADS: u32 = 256;

/// The launch of `split_heads_*` and `swap_axes_*`: a warp for each of `rows` rows.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn warp_per_row(rows: usize) -> candle_core::Result<Grid> {
    match u32::try_from(rows.div_ceil(ROWS_PER_BLOCK)) {
        Ok(blocks) => Ok((blocks.max(1), 32 * ROWS_PER_BLOCK as u32)),
        Err(_) => candle_core::bail!("fused kernel: {rows} rows are too many for one launch"),
    }
}

/// The launch of `glu_*`: a block of [`ROW_THREADS`] for each of `rows` rows.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn block_per_row(rows: usize) -> candle_core::Result<Grid> {
    match u32::try_from(rows) {
        Ok(blocks) => Ok((blocks.max(1), ROW_THREADS)),
        Err(_) => candle_core::bail!("fused kernel: {rows} rows are too many for one launch"),
    }
}

/// The launch of `position_bias_*`: a thread for each of `n` elements, in blocks of
/// [`ROW_THREADS`].
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn thread_per_element(n: usize) -> candle_core::Result<Grid> {
    match u32::try_from(n.div_ceil(ROW_THREADS as usize)) {
        Ok(blocks) => Ok((blocks.max(1), ROW_THREADS)),
        Err(_) => candle_core::bail!("fused kernel: {n} elements are too many for one launch"),
    }
}

/// The kernels of `fused.cu` on a CUDA device.
#[cfg(feature = "cuda")]
mod device {
    use candle_core::backend::BackendStorage;
    use candle_core::cuda_backend::cudarc::driver::{
        CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
    };
    use candle_core::cuda_backend::{CudaDType, WrapErr};
    use candle_core::{CudaDevice, CudaStorage, DType, Layout, Storage, StorageRef};

    use super::{
        block_per_row, locked, thread_per_element, warp_per_row, Bias, Grid, HeadSizes, Split, Swap,
    };

    /// The PTX build.rs made of `fused.cu`.
    const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused.ptx"));
    /// The module's name among the device's loaded modules.
    const MODULE: &str = "rerank_fused";

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

    /// A launch of `(blocks, threads)` ([`Grid`]).
    fn config((blocks, threads): Grid) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// A size as the kernels take it.
    fn u32_of(n: usize) -> candle_core::Result<u32> {
        u32::try_from(n).map_err(|_| candle_core::Error::Msg(format!("fused kernel: {n} > u32")))
    }

    /// `t`'s elements on the device from its offset (contiguous: checked by the callers).
    fn view<'a, T: CudaDType>(
        storage: &'a CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<CudaView<'a, T>> {
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("fused kernel: an operand is not contiguous");
        };
        Ok(storage.as_cuda_slice::<T>()?.slice(start..end))
    }

    /// A side operand's storage, locked for reading, and its layout.
    type Locked<'a> = (StorageRef<'a>, &'a candle_core::Layout);

    fn cuda<'a>(locked: &'a Locked<'_>) -> candle_core::Result<&'a CudaStorage> {
        match &*locked.0 {
            Storage::Cuda(s) => Ok(s),
            _ => candle_core::bail!("fused kernel: an operand is not on the CUDA device"),
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
        let config = config(warp_per_row(s.warps())?);
        // SAFETY: the arguments are the kernel's, in its order and types; every operand holds
        // what the kernel reads of it (`split_heads` checked the shapes) and `out` what it
        // writes; all are on the device's one stream.
        unsafe { builder.launch(config) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(out, device.clone()))
    }

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

    pub(super) fn glu(
        storage: &CudaStorage,
        layout: &Layout,
        (rows, inputs): (usize, usize),
        act: u32,
    ) -> candle_core::Result<CudaStorage> {
        let config = config(block_per_row(rows)?);
        let sizes = [u32_of(inputs)?, act];
        per_format!(storage.dtype(), "glu", |T, kernel| {
            // SAFETY: `glu_*(x, out, inputs, act)`, one block per row: `x` holds `rows` rows
            // of `2 · inputs` (`glu` checked), `out` gets `rows` of `inputs`; `act` is one of
            // the kernel's codes (`Glu::code`).
            unsafe { one_input::<T>(storage, layout, (kernel, config, &sizes), rows * inputs) }
        })
    }

    pub(super) fn position_bias(
        op: &Bias,
        storage: &CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<CudaStorage> {
        per_format!(storage.dtype(), "position_bias", |T, kernel| {
            bias::<T>(op, storage, layout, kernel)
        })
    }

    fn bias<T: CudaDType + DeviceRepr>(
        op: &Bias,
        storage: &CudaStorage,
        layout: &Layout,
        kernel: &str,
    ) -> candle_core::Result<CudaStorage> {
        let (b, heads, t) = op.sizes;
        let r = layout.shape().dims3()?.2;
        let device: &CudaDevice = storage.device();
        let main = view::<T>(storage, layout)?;
        let side = op.p2c.as_ref().map(|p| p.storage_and_layout());
        // An absent second term stands in with the input; the kernel is told not to read it.
        let p2c = match &side {
            Some(locked) => view::<T>(cuda(locked)?, locked.1)?,
            None => view::<T>(storage, layout)?,
        };
        let index = op.index.storage_and_layout();
        let index = view::<u32>(cuda(&index)?, index.1)?;
        let len = b * heads * t * t;
        // SAFETY: the kernel writes every element, one thread each.
        let mut out: CudaSlice<T> = unsafe { device.alloc::<T>(len)? };
        let func = device.get_or_load_custom_func(kernel, MODULE, PTX)?;
        let sizes = [
            u32_of(b)?,
            u32_of(heads)?,
            u32_of(t)?,
            u32_of(r)?,
            u32::from(op.c2p),
            u32::from(op.reads_p2c()),
        ];
        let mut builder = func.builder();
        builder.arg(&main);
        builder.arg(&p2c);
        builder.arg(&index);
        builder.arg(&mut out);
        for n in &sizes {
            builder.arg(n);
        }
        // SAFETY: `position_bias_*(c2p, p2c, index, out, b, heads, t, r, has_c2p, has_p2c)`:
        // the terms are `(heads, b · t, r)` and the index `(t, t)` (`position_bias` checked;
        // the kernel clamps each index to `r - 1`), `out` gets `b · heads · t · t`, a thread
        // each; all on the device's one stream.
        unsafe { builder.launch(config(thread_per_element(len)?)) }.w()?;
        Ok(CudaStorage::wrap_cuda_slice(out, device.clone()))
    }

    pub(super) fn swap(
        op: &Swap,
        storage: &CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<CudaStorage> {
        let d = op.d(layout)?;
        let (b, c) = op.swapped;
        let config = config(warp_per_row(op.rows())?);
        let sizes = [
            u32_of(op.outer)?,
            u32_of(b)?,
            u32_of(c)?,
            u32_of(op.inner)?,
            u32_of(d)?,
        ];
        let len = layout.shape().elem_count();
        per_format!(storage.dtype(), "swap_axes", |T, kernel| {
            // SAFETY: `swap_axes_*(x, out, a, b, c, t, d)`, a warp per row of `d`: `x` is
            // contiguous and holds `a · b · c · t` rows of `d` (`Swap::d` checked), `out`
            // gets as many elements.
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

    /// The head splits the tests run, `(rows, tokens, heads, kv, d, queries, prefix)`: grouped
    /// and not, queries for every token or the last ones only (whole warps leave on a device),
    /// a prefix or none, a head of fewer pairs than a warp's lanes, one of several pairs per
    /// lane (160) and the largest (512), and a count of rows that leaves a device's last
    /// block part empty.
    const SPLITS: [(usize, usize, usize, usize, usize, usize, usize); 6] = [
        (2, 5, 4, 2, 8, 5, 0),
        (3, 4, 2, 2, 6, 1, 0),
        (1, 3, 6, 1, 160, 2, 0),
        (3, 4, 4, 2, 8, 4, 3),
        (2, 2, 2, 1, 70, 1, 5),
        (1, 2, 1, 1, 512, 2, 1),
    ];

    /// Calls `check(case, dtype, split)` for every case of [`SPLITS`] in f32, f16 and bf16,
    /// with and without norms and rotation: the stacked rows are values seeded by
    /// `seed + case`, times `scale`; norms near 1, rotation tables and prefix seeded apart.
    fn each_split(scale: f32, seed: u32, mut check: impl FnMut(usize, DType, HeadSplit<'_>)) {
        let dev = Device::Cpu;
        for (n, &(rows, tokens, heads, kv, d, queries, prefix)) in SPLITS.iter().enumerate() {
            let sizes = HeadSizes {
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
            let rows_of = values(rows * tokens * line, seed + n as u32);
            let all = t(
                rows_of.into_iter().map(|x| x * scale).collect(),
                &[rows * tokens, line],
            );
            let qn = t(values(d, 7).iter().map(|v| 1.0 + v).collect(), &[d]);
            let kn = t(values(d, 8).iter().map(|v| 1.0 - v / 2.0).collect(), &[d]);
            let cos = t(values(rows * tokens * d / 2, 9), &[rows, tokens, d / 2]);
            let sin = t(values(rows * tokens * d / 2, 10), &[rows, tokens, d / 2]);
            let pk = t(values(kv * prefix * d, 11), &[1, kv, prefix, d]);
            let pv = t(values(kv * prefix * d, 12), &[1, kv, prefix, d]);
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let c = |x: &Tensor| x.to_dtype(dtype).unwrap();
                let (all, qn, kn, cos, sin) = (c(&all), c(&qn), c(&kn), c(&cos), c(&sin));
                let (pk, pv) = (c(&pk), c(&pv));
                let prefix_kv = (prefix > 0).then_some((&pk, &pv));
                for (norms, rope) in [
                    (Some((&qn, &kn)), Some((&cos, &sin))),
                    (None, Some((&cos, &sin))),
                    (Some((&qn, &kn)), None),
                    (None, None),
                ] {
                    let split = HeadSplit {
                        all: &all,
                        sizes,
                        norms,
                        rope,
                        prefix_kv,
                        eps: 1e-6,
                    };
                    check(n, dtype, split);
                }
            }
        }
    }

    #[test]
    fn split_heads_is_candles_copies_norms_and_rotations_in_one_pass() {
        each_split(1.0, 0, |n, dtype, split| {
            let bound = match dtype {
                DType::F32 => 1e-5,
                DType::F16 => 2e-2,
                _ => 1.2e-1,
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
        });
    }

    /// DeBERTa's position terms of [`SPLITS`]-like sizes: `(b, heads, t, r)` each, terms
    /// `(heads, b · t, r)` and an index `(t, t)` whose last rows reach past `r` (clamped).
    const BIASES: [(usize, usize, usize, usize); 3] = [(2, 3, 5, 8), (1, 1, 1, 2), (3, 2, 7, 6)];

    /// The terms and index of a [`BIASES`] case.
    fn bias_inputs((b, heads, t, r): (usize, usize, usize, usize)) -> (Tensor, Tensor, Tensor) {
        let dev = Device::Cpu;
        let term = |seed| {
            Tensor::from_vec(values(heads * b * t * r, seed), (heads, b * t, r), &dev).unwrap()
        };
        let index: Vec<u32> = (0..t * t)
            .map(|e| ((e * 7 + e / t) % (r + 2)) as u32)
            .collect();
        let index = Tensor::from_vec(index, (t, t), &dev).unwrap();
        (term(30), term(31), index)
    }

    #[test]
    fn position_bias_is_candles_gathers_and_sum() {
        for case in BIASES {
            let (b, heads, t, r) = case;
            let (c2p, p2c, index) = bias_inputs(case);
            // candle's operations (`deberta::candle` without the fused passes), on an index
            // clamped as the pass clamps it.
            let clamped = index.clamp(0u32, (r - 1) as u32).unwrap();
            let full = |i: &Tensor| i.broadcast_as((b, heads, t, t)).unwrap().contiguous();
            let (by_query, by_key) = (
                full(&clamped).unwrap(),
                full(&clamped.t().unwrap()).unwrap(),
            );
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let (c2p, p2c) = (c2p.to_dtype(dtype).unwrap(), p2c.to_dtype(dtype).unwrap());
                let gathered = |x: &Tensor, by: &Tensor| {
                    x.reshape((heads, b, t, r))
                        .unwrap()
                        .permute((1, 0, 2, 3))
                        .unwrap()
                        .contiguous()
                        .unwrap()
                        .gather(by, 3)
                        .unwrap()
                };
                let c = gathered(&c2p, &by_query);
                let p = gathered(&p2c, &by_key).t().unwrap();
                for (terms, theirs) in [
                    ((Some(&c2p), None), c.clone()),
                    ((None, Some(&p2c)), p.contiguous().unwrap()),
                    ((Some(&c2p), Some(&p2c)), (&c + &p).unwrap()),
                ] {
                    let ours = position_bias(terms.0, terms.1, &index, (b, heads, t)).unwrap();
                    assert_eq!(ours.dims(), [b, heads, t, t]);
                    // One addition at most, in f32 then rounded, as candle's: equal.
                    assert_eq!(max_diff(&ours, &theirs), 0.0, "{case:?} {dtype:?}");
                }
            }
            // What does not fit is refused.
            assert!(position_bias(None, None, &index, (b, heads, t)).is_err());
            assert!(position_bias(Some(&c2p), None, &index, (b + 1, heads, t)).is_err());
            let wide = index.to_dtype(DType::F32).unwrap();
            assert!(position_bias(Some(&c2p), None, &wide, (b, heads, t)).is_err());
            let f16 = p2c.to_dtype(DType::F16).unwrap();
            assert!(position_bias(Some(&c2p), Some(&f16), &index, (b, heads, t)).is_err());
        }
    }

    #[test]
    fn glu_is_candles_activation_times_up() {
        let dev = Device::Cpu;
        let (rows, inputs) = (3, 70);
        let x = Tensor::from_vec(values(rows * 2 * inputs, 5), (rows, 2 * inputs), &dev).unwrap();
        let x = (x * 6.0).unwrap();
        // Relative to the value (up to about 36 here): each format's rounding, twice for
        // candle's (the activation, then the product).
        for act in [Act::Gelu, Act::GeluTanh, Act::Relu, Act::Silu] {
            for (dtype, bound) in [
                (DType::F32, 1e-6),
                (DType::F16, 2e-3),
                (DType::BF16, 1.6e-2),
            ] {
                let x = x.to_dtype(dtype).unwrap();
                let ours = glu(&x, act).unwrap();
                let theirs = crate::models::layers::candle::glu_by_candle(&x, act).unwrap();
                let e = max_diff(
                    &((&ours - &theirs).unwrap() / theirs.abs().unwrap().maximum(1.0).unwrap())
                        .unwrap(),
                    &ours.zeros_like().unwrap(),
                );
                assert!(e <= bound, "{act:?} {dtype:?}: {e}");
            }
        }
        assert!(glu(&x.narrow(1, 0, 3).unwrap(), Act::Silu).is_err());
        assert!(glu(&x.t().unwrap(), Act::Silu).is_err());
    }

    #[test]
    fn split_heads_refuses_what_does_not_fit_and_merge_heads_and_heads_first_are_transposes() {
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

        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (b, heads, t, d) in [(2, 3, 5, 4), (1, 4, 3, 2), (3, 2, 1, 8), (2, 1, 4, 3)] {
                let x = Tensor::from_vec(values(b * heads * t * d, 3), (b, heads, t, d), &dev)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let ours = merge_heads(&x).unwrap();
                let theirs = x.transpose(1, 2).unwrap().reshape((b * t, heads * d));
                assert_eq!(max_diff(&ours, &theirs.unwrap()), 0.0);
                let ours = heads_first(&x).unwrap();
                assert_eq!(ours.dims(), &[heads, b, t, d]);
                let theirs = x.transpose(0, 1).unwrap().contiguous().unwrap();
                assert_eq!(max_diff(&ours, &theirs), 0.0);
            }
        }
        let x = Tensor::zeros((2, 3, 5, 4), DType::F32, &dev).unwrap();
        assert!(merge_heads(&x.transpose(2, 3).unwrap()).is_err());
        assert!(heads_first(&x.transpose(2, 3).unwrap()).is_err());
    }

    /// `fused.cu`'s kernels, compiled by g++ against `tests/cuda_host` (an emulation of the
    /// CUDA built-ins they use: threads, warps and their shuffles, the half formats) and run
    /// on the host with the launches `device` makes, against the host definitions above. No GPU
    /// is needed to find a kernel that reads or writes the wrong element, reduces over the
    /// wrong lanes or rounds differently; what this cannot check (the device's own arithmetic:
    /// its fused multiply-adds, its `expf`) the parity tests on a device do.
    mod kernels_on_the_host {
        use super::*;
        use std::path::{Path, PathBuf};
        use std::sync::OnceLock;

        /// The harness, built once per test process (`$CXX`, else g++).
        fn harness() -> &'static Path {
            static BUILT: OnceLock<PathBuf> = OnceLock::new();
            BUILT.get_or_init(|| {
                let root = Path::new(env!("CARGO_MANIFEST_DIR"));
                // Beside the build's own outputs (build.rs gives the crate an `OUT_DIR`),
                // built under a name of this process's and then moved into place, so that
                // test processes at once never run a half-written harness.
                let dir = Path::new(env!("OUT_DIR")).join("cuda-host");
                std::fs::create_dir_all(&dir).unwrap();
                let exe = dir.join("fused_host");
                let building = dir.join(format!("fused_host.{}", std::process::id()));
                let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".to_string());
                // No contraction into fused multiply-adds: the host definition rounds each
                // product, and so must the emulation that is compared with it.
                let out = std::process::Command::new(&cxx)
                    .args(["-std=c++20", "-O1", "-pthread", "-ffp-contract=off"])
                    .args(["-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas", "-I"])
                    .arg(root.join("tests/cuda_host"))
                    .arg(root.join("tests/cuda_host/fused_main.cpp"))
                    .arg("-o")
                    .arg(&building)
                    .output()
                    .unwrap_or_else(|e| panic!("`{cxx}` (a C++20 compiler) could not run: {e}"));
                assert!(
                    out.status.success(),
                    "fused_main.cpp did not compile:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                std::fs::rename(&building, &exe).unwrap();
                exe
            })
        }

        /// A tensor's elements as the kernels read them (little-endian, in its format).
        fn raw(t: &Tensor) -> Vec<u8> {
            let t = t.flatten_all().unwrap();
            match t.dtype() {
                DType::F32 => t
                    .to_vec1::<f32>()
                    .unwrap()
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                DType::F16 => t
                    .to_vec1::<half::f16>()
                    .unwrap()
                    .iter()
                    .flat_map(|v| v.to_bits().to_le_bytes())
                    .collect(),
                DType::BF16 => t
                    .to_vec1::<half::bf16>()
                    .unwrap()
                    .iter()
                    .flat_map(|v| v.to_bits().to_le_bytes())
                    .collect(),
                DType::U32 => t
                    .to_vec1::<u32>()
                    .unwrap()
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                other => panic!("no kernel for {other:?}"),
            }
        }

        /// The output of `kernel` (its name without the format) in `dtype`, launched as
        /// `grid` with `args` (the sizes after `GRID BLOCK OUT_LEN`) on `inputs`, as a flat
        /// tensor of `len` elements.
        fn run(
            kernel: &str,
            dtype: DType,
            (grid, len): (Grid, usize),
            args: &str,
            inputs: &[(&str, &Tensor)],
        ) -> Tensor {
            static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let exe = harness();
            let dir = exe.with_file_name(format!("call-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let format = match dtype {
                DType::F32 => "f32",
                DType::F16 => "f16",
                _ => "bf16",
            };
            let line = format!("{kernel}_{format} {} {} {len}\n{args}\n", grid.0, grid.1);
            std::fs::write(dir.join("args"), line).unwrap();
            for (name, t) in inputs {
                // (Indices are u32 in every format.)
                assert!(t.dtype() == dtype || t.dtype() == DType::U32, "{name}");
                std::fs::write(dir.join(format!("{name}.bin")), raw(t)).unwrap();
            }
            let out = std::process::Command::new(exe).arg(&dir).output().unwrap();
            assert!(
                out.status.success(),
                "{kernel} ({format}) on the host: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let bytes = std::fs::read(dir.join("out.bin")).unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
            let dev = Device::Cpu;
            let t = match dtype {
                DType::F32 => {
                    let v = bytes
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes(b.try_into().unwrap()));
                    Tensor::from_vec(v.collect::<Vec<_>>(), len, &dev)
                }
                DType::F16 => {
                    let v = bytes
                        .chunks_exact(2)
                        .map(|b| half::f16::from_le_bytes(b.try_into().unwrap()));
                    Tensor::from_vec(v.collect::<Vec<_>>(), len, &dev)
                }
                _ => {
                    let v = bytes
                        .chunks_exact(2)
                        .map(|b| half::bf16::from_le_bytes(b.try_into().unwrap()));
                    Tensor::from_vec(v.collect::<Vec<_>>(), len, &dev)
                }
            };
            t.unwrap()
        }

        /// The elements where `kernel` and `host` differ by more than `ulps` units in the last
        /// place of `dtype` (at `host`'s magnitude) and the element's own `slack`: none when
        /// they agree.
        fn differences(
            kernel: &Tensor,
            host: &Tensor,
            dtype: DType,
            ulps: f32,
            slack: &[f32],
        ) -> Vec<(usize, f32, f32)> {
            let mantissa = match dtype {
                DType::F32 => 23,
                DType::F16 => 10,
                _ => 7,
            };
            let smallest_exponent = match dtype {
                DType::F16 => -14,
                _ => -126,
            };
            let f = |t: &Tensor| {
                t.to_dtype(DType::F32)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
            };
            let (k, h) = (f(kernel), f(host));
            assert_eq!(k.len(), h.len());
            k.iter()
                .zip(&h)
                .enumerate()
                .filter(|&(i, (&a, &b))| {
                    let exponent = (b.abs().log2().floor() as i32).max(smallest_exponent);
                    let ulp = 2f32.powi(exponent - mantissa);
                    let allowed = ulps * ulp + slack.get(i).copied().unwrap_or(0.0);
                    (a - b).abs() > allowed || a.is_nan() != b.is_nan()
                })
                .map(|(i, (&a, &b))| (i, a, b))
                .collect()
        }

        #[test]
        fn split_heads_kernel_gives_the_host_definition() {
            each_split(3.0, 20, |n, dtype, split| {
                let HeadSizes {
                    rows,
                    tokens,
                    heads,
                    kv,
                    d,
                    queries,
                    prefix,
                } = split.sizes;
                let (all, norms, rope, prefix_kv) =
                    (split.all, split.norms, split.rope, split.prefix_kv);
                let (q, k, v) = split.in_one_pass().unwrap();
                let host = Tensor::cat(
                    &[
                        q.flatten_all().unwrap(),
                        k.flatten_all().unwrap(),
                        v.flatten_all().unwrap(),
                    ],
                    0,
                )
                .unwrap();
                let mut inputs = vec![("all", all)];
                if let Some((a, b)) = norms {
                    inputs.extend([("q_norm", a), ("k_norm", b)]);
                }
                if let Some((a, b)) = rope {
                    inputs.extend([("cos", a), ("sin", b)]);
                }
                if let Some((a, b)) = prefix_kv {
                    inputs.extend([("prefix_k", a), ("prefix_v", b)]);
                }
                let args = format!(
                    "{rows} {tokens} {heads} {kv} {d} {} {prefix} {} {} 1e-6",
                    tokens - queries,
                    u32::from(norms.is_some()),
                    u32::from(rope.is_some()),
                );
                let grid = warp_per_row(split.sizes.warps()).unwrap();
                let kernel = run(
                    "split_heads",
                    dtype,
                    (grid, host.elem_count()),
                    &args,
                    &inputs,
                );
                // The norm sums a head's squares in another order (lanes, then a
                // warp's butterfly), so its scale may be an ulp or two of f32 apart,
                // which the rotation's difference of two products (each at most about
                // 3 here) can show in a smaller result: 2e-6 apart at most, and a
                // value rounded the other way to a half format; equal without a norm.
                let (ulps, slack) = match norms {
                    Some(_) => (1.0, vec![2e-6; host.elem_count()]),
                    None => (0.0, Vec::new()),
                };
                let wrong = differences(&kernel, &host, dtype, ulps, &slack);
                assert!(
                    wrong.is_empty(),
                    "case {n} {dtype:?} norms {} rope {}: {} of {} differ, first {:?}",
                    norms.is_some(),
                    rope.is_some(),
                    wrong.len(),
                    host.elem_count(),
                    &wrong[..wrong.len().min(4)]
                );
            });
        }

        #[test]
        fn position_bias_kernel_gives_the_host_definition() {
            for case in BIASES {
                let (b, heads, t, r) = case;
                let (c2p, p2c, index) = bias_inputs(case);
                for dtype in [DType::F32, DType::F16, DType::BF16] {
                    let (c2p, p2c) = (c2p.to_dtype(dtype).unwrap(), p2c.to_dtype(dtype).unwrap());
                    for (has_c2p, has_p2c) in [(true, false), (false, true), (true, true)] {
                        let terms = (has_c2p.then_some(&c2p), has_p2c.then_some(&p2c));
                        let host = position_bias(terms.0, terms.1, &index, (b, heads, t)).unwrap();
                        // On a device the first term given is the input, the other stands
                        // in with it when absent.
                        let first = terms.0.or(terms.1).unwrap();
                        let inputs = [
                            ("c2p", first),
                            ("p2c", terms.1.unwrap_or(first)),
                            ("index", &index),
                        ];
                        let args = format!(
                            "{b} {heads} {t} {r} {} {}",
                            u32::from(has_c2p),
                            u32::from(has_p2c)
                        );
                        let len = host.elem_count();
                        let grid = thread_per_element(len).unwrap();
                        let kernel = run("position_bias", dtype, (grid, len), &args, &inputs);
                        let wrong = differences(&kernel, &host, dtype, 0.0, &[]);
                        assert!(
                            wrong.is_empty(),
                            "{case:?} {dtype:?} c2p {has_c2p} p2c {has_p2c}: {:?}",
                            &wrong[..wrong.len().min(4)]
                        );
                    }
                }
            }
        }

        #[test]
        fn swap_axes_and_glu_kernels_give_the_host_definitions() {
            let dev = Device::Cpu;
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                // (b, heads, t, d): merge_heads swaps heads and t, heads_first b and heads.
                for (b, heads, t, d) in [(2, 3, 5, 8), (1, 16, 7, 128), (3, 1, 1, 6), (5, 2, 3, 64)]
                {
                    let x = Tensor::from_vec(values(b * heads * t * d, 4), (b, heads, t, d), &dev)
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap();
                    let merge = Swap {
                        outer: b,
                        swapped: (heads, t),
                        inner: 1,
                    };
                    let first = Swap {
                        outer: 1,
                        swapped: (b, heads),
                        inner: t,
                    };
                    for op in [merge, first] {
                        let host = x.apply_op1_no_bwd(&op).unwrap();
                        let (sb, sc) = op.swapped;
                        let grid = warp_per_row(op.rows()).unwrap();
                        let args = format!("{} {sb} {sc} {} {d}", op.outer, op.inner);
                        let kernel = run(
                            "swap_axes",
                            dtype,
                            (grid, x.elem_count()),
                            &args,
                            &[("x", &x)],
                        );
                        assert!(
                            differences(&kernel, &host, dtype, 0.0, &[]).is_empty(),
                            "swap_axes {dtype:?} {args}"
                        );
                    }
                }
                for (rows, inputs) in [(3, 70), (2, 600), (1, 1)] {
                    let x =
                        Tensor::from_vec(values(rows * 2 * inputs, 5), (rows, 2 * inputs), &dev)
                            .unwrap();
                    let x = (x * 9.0).unwrap().to_dtype(dtype).unwrap();
                    for act in [Act::Gelu, Act::GeluTanh, Act::Relu, Act::Silu] {
                        let host = glu(&x, act).unwrap();
                        let grid = block_per_row(rows).unwrap();
                        let args = format!("{inputs} {}", Glu(act).code());
                        let kernel = run("glu", dtype, (grid, rows * inputs), &args, &[("x", &x)]);
                        // GELU: the kernel's erf is the platform's in f32 (erff) and its
                        // products round in f32, the host's is candle's in f64: a few ulps of
                        // f32 apart, at the scale of `g · u`.
                        let slack = match act {
                            Act::Gelu => {
                                let (g, u) = (
                                    x.narrow(1, 0, inputs).unwrap(),
                                    x.narrow(1, inputs, inputs).unwrap(),
                                );
                                let gu = (g.to_dtype(DType::F32).unwrap()
                                    * u.to_dtype(DType::F32).unwrap())
                                .unwrap();
                                let gu = gu.abs().unwrap().flatten_all().unwrap();
                                gu.to_vec1::<f32>()
                                    .unwrap()
                                    .iter()
                                    .map(|v| v * 2e-7)
                                    .collect()
                            }
                            _ => vec![0.0; rows * inputs],
                        };
                        let ulps = if matches!(act, Act::Gelu) { 1.0 } else { 0.0 };
                        let wrong = differences(&kernel, &host, dtype, ulps, &slack);
                        assert!(
                            wrong.is_empty(),
                            "glu {act:?} {dtype:?} {rows}x{inputs}: {:?}",
                            &wrong[..wrong.len().min(4)]
                        );
                    }
                }
            }
        }
    }
}
