//! CPU kernels for the packed encoder: matrix products on the `gemm` crate (the one candle
//! uses, called through `simd::gemm`), and the row-wise and element-wise steps fused so that
//! each touches memory once.
//!
//! Matrices are row-major `f32` slices. Every function checks its slice lengths against the
//! shapes it is given and panics on a mismatch: those are programming errors inside this crate,
//! never a consequence of user input.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

pub(crate) use crate::simd::gemm::{matmul, Mat, Threads};

/// A linear layer as stored by torch: `weight` is `(out, in)`, `bias` is `(out)`: every model's
/// layers as read, before they are packed for their kernels (`models::layers::panels`,
/// `models::layers::quant`); kept as it is for the Qwen3 generator's output head and its `bf16`
/// layers, which run one row at a time.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    pub weight: Weight,
    pub bias: Vec<f32>,
    pub inputs: usize,
    pub outputs: usize,
}

/// The values of a [`Linear`] layer's weight matrix.
#[derive(Debug, Clone)]
pub(crate) enum Weight {
    /// `f32`, row-major `(outputs, inputs)` as torch stores it: each output's weights are
    /// contiguous, what a matrix-vector product (a decode step) streams.
    F32(Vec<f32>),
    /// `bf16` bit patterns, `(outputs, inputs)`: half the memory and the bandwidth of a decode
    /// step (a bf16 generator's output head); products over many rows widen the matrix first.
    Bf16(Vec<u16>),
}

impl Weight {
    /// The `f32` values, row-major `(outputs, inputs)`: the stored ones, or a widened copy.
    pub fn to_f32(&self) -> std::borrow::Cow<'_, [f32]> {
        match self {
            Weight::F32(w) => std::borrow::Cow::Borrowed(w),
            Weight::Bf16(w) => std::borrow::Cow::Owned(
                w.iter()
                    .map(|&b| crate::simd::gemv::bf16_to_f32(b))
                    .collect(),
            ),
        }
    }
}

thread_local! {
    /// Whether the work running on this thread is one of several run in parallel
    /// ([`on_own_thread`]).
    static OWN_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The threads a kernel splits its work for: the current rayon pool's, or 1 inside
/// [`on_own_thread`], where other threads are busy with other work of the same call.
pub(crate) fn threads() -> usize {
    match OWN_THREAD.get() {
        true => 1,
        false => rayon::current_num_threads(),
    }
}

/// Runs `f` as one of several pieces of work already spread over the pool (a batch of many):
/// the kernels it calls size their blocks for one thread ([`threads`]), so that a batch's
/// rows stay in this core's caches from one step to the next. Their parallel loops still
/// hand blocks to a thread that runs out of work.
pub(crate) fn on_own_thread<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the flag back as it was, also when `f` panics (the pool's thread lives on).
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            OWN_THREAD.set(self.0);
        }
    }
    let _restore = Restore(OWN_THREAD.replace(true));
    f()
}

/// Runs `f` on this thread's scratch buffer `key`, reused across calls; a call re-entered on
/// the same thread while the buffer is in use (rayon work stealing inside `f`) gets a fresh
/// buffer of its own instead.
pub(crate) fn with_scratch<T: Default, R>(
    key: &'static std::thread::LocalKey<std::cell::RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buffer) => f(&mut buffer),
        Err(_) => f(&mut T::default()),
    })
}

impl Linear {
    /// `out (rows, outputs) = x (rows, inputs) · weightᵀ + bias`.
    pub fn forward(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        self.forward_cols(x, rows, 0, self.outputs, out);
    }

    /// Outputs `start..start + n` only: `out (rows, n) = x · weight[start..start + n]ᵀ + bias`.
    pub fn forward_cols(&self, x: &[f32], rows: usize, start: usize, n: usize, out: &mut [f32]) {
        let out = &mut out[..rows * n];
        let bias = &self.bias[start..start + n];
        for row in out.chunks_exact_mut(n) {
            row.copy_from_slice(bias);
        }
        self.product(x, rows, start, n, out, n);
    }

    /// One input row: `out = weight · x + bias`, or `out += weight · x + bias` when
    /// `accumulate`; the weights stream once from memory (`simd::gemv`).
    pub fn gemv(&self, x: &[f32], out: &mut [f32], accumulate: bool) {
        assert!(x.len() == self.inputs && out.len() == self.outputs);
        let rows = match &self.weight {
            Weight::F32(w) => crate::simd::gemv::Rows::F32(w),
            Weight::Bf16(w) => crate::simd::gemv::Rows::Bf16(w),
        };
        crate::simd::gemv::gemv(rows, x, out, accumulate);
        self.add_bias(out);
    }

    fn add_bias(&self, out: &mut [f32]) {
        if self.bias.iter().any(|&b| b != 0.0) {
            for row in out.chunks_exact_mut(self.outputs) {
                row.iter_mut().zip(&self.bias).for_each(|(v, b)| *v += b);
            }
        }
    }

    /// The same layer with its weights rounded to `bf16` (round to nearest even).
    pub fn to_bf16(&self) -> Linear {
        let weight = match &self.weight {
            Weight::Bf16(w) => Weight::Bf16(w.clone()),
            w => Weight::Bf16(
                w.to_f32()
                    .par_iter()
                    .map(|&v| crate::simd::gemv::f32_to_bf16(v))
                    .collect(),
            ),
        };
        Linear {
            weight,
            bias: self.bias.clone(),
            inputs: self.inputs,
            outputs: self.outputs,
        }
    }

    /// `out (rows, n) += x · weight[start..start + n]ᵀ` (row stride `stride`), on the pool.
    fn product(
        &self,
        x: &[f32],
        rows: usize,
        start: usize,
        n: usize,
        out: &mut [f32],
        stride: usize,
    ) {
        let a = Mat::new(x, rows, self.inputs);
        match &self.weight {
            Weight::F32(w) => {
                let w = Mat::new(w, self.outputs, self.inputs).block(start, n, 0, self.inputs);
                matmul(a, w.t(), out, stride, 1.0, true, Threads::Pool);
            }
            Weight::Bf16(_) => {
                // Only an output head keeps bf16 rows, and it sees one row at a time
                // (`gemv`); a product over many rows widens the matrix first.
                let w = self.weight.to_f32();
                let w = Mat::new(&w, self.outputs, self.inputs).block(start, n, 0, self.inputs);
                matmul(a, w.t(), out, stride, 1.0, true, Threads::Pool);
            }
        }
    }
}

/// What runs on each block of output rows right after the product, while they are still in
/// cache (instead of another pass over the whole matrix).
#[derive(Clone, Copy)]
pub(crate) enum Then<'a> {
    /// Nothing.
    Nothing,
    /// The activation, element by element.
    Activate(Act),
    /// `out = layer_norm(out + residual)` row by row (`residual` has the output's shape).
    AddNorm {
        residual: &'a [f32],
        weight: &'a [f32],
        bias: &'a [f32],
        eps: f32,
    },
    /// `out += residual` (`residual` has the output's shape): the residual connection of a
    /// pre-norm layer (ModernBERT's), whose norm comes before the product.
    Add { residual: &'a [f32] },
}

impl Then<'_> {
    /// Runs the step on `out` as [`Then::apply_here`] does, compiled for the CPU's vector width.
    pub fn run(self, out: &mut [f32], first_value: usize) {
        simd(ThenStep {
            then: self,
            out,
            first_value,
        })
    }

    /// Runs the step on `out`, whole rows of a product's output starting at row
    /// `first_value / width` (the offset of `out` in the residual), on this thread; vectorized
    /// when inlined into a `pulp` kernel.
    #[inline(always)]
    pub fn apply_here(self, out: &mut [f32], first_value: usize) {
        match self {
            Then::Nothing => {}
            Then::Activate(act) => act.apply_here(out),
            Then::AddNorm {
                residual,
                weight,
                bias,
                eps,
            } => {
                let n = weight.len();
                let residual = &residual[first_value..][..out.len()];
                for (row, res) in out.chunks_exact_mut(n).zip(residual.chunks_exact(n)) {
                    row.iter_mut().zip(res).for_each(|(v, r)| *v += r);
                    layer_norm_row(row, weight, bias, eps);
                }
            }
            Then::Add { residual } => {
                let residual = &residual[first_value..][..out.len()];
                out.iter_mut().zip(residual).for_each(|(v, r)| *v += r);
            }
        }
    }
}

/// [`Then::run`] as a `pulp` kernel.
struct ThenStep<'a> {
    then: Then<'a>,
    out: &'a mut [f32],
    first_value: usize,
}

impl WithSimd for ThenStep<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        self.then.apply_here(self.out, self.first_value)
    }
}

/// Runs `op` compiled for the widest vector instructions this CPU has (AVX-512 or AVX2 on
/// x86-64, detected at run time): the loops of its `with_simd`, and the `#[inline(always)]`
/// functions they call, are vectorized for that set.
#[inline(always)]
pub(crate) fn simd<Op: WithSimd>(op: Op) -> Op::Output {
    pulp::Arch::new().dispatch(op)
}

/// Softmax of every `width`-long row.
struct Softmax<'a> {
    rows: &'a mut [f32],
    width: usize,
}

impl WithSimd for Softmax<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        for row in self.rows.chunks_exact_mut(self.width) {
            softmax_row(row);
        }
    }
}

/// Layer norm of one row in place.
#[inline(always)]
pub(crate) fn layer_norm_row(row: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum_by(row, |v| v) / n;
    let var = sum_by(row, |v| (v - mean) * (v - mean)) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
        *v = (*v - mean) * inv * w + b;
    }
}

/// The element-wise activation between the two feed-forward layers (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    /// `x Φ(x)` with the exact normal CDF (`"gelu"`).
    Gelu,
    /// The tanh approximation of GELU (`"gelu_new"`, `"gelu_pytorch_tanh"`).
    GeluTanh,
    /// `max(x, 0)`.
    Relu,
    /// `x / (1 + e^-x)` (`"silu"`, `"swish"`).
    Silu,
}

impl Act {
    /// The activation named by `hidden_act`, if supported.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "gelu" => Some(Act::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Act::GeluTanh),
            "relu" => Some(Act::Relu),
            "silu" | "swish" => Some(Act::Silu),
            _ => None,
        }
    }

    /// Applies the activation to every element on this thread, in whole vectors of the CPU's
    /// width (the last one partial): every element goes through the same instructions, so a
    /// value's result does not depend on where it sits in the slice.
    #[inline(always)]
    pub fn apply_here(self, x: &mut [f32]) {
        match self {
            Act::Relu => x.iter_mut().for_each(|v| *v = v.max(0.0)),
            act => simd(Activate { act, x }),
        }
    }
}

/// [`Act::apply_here`] as a `pulp` kernel.
struct Activate<'a> {
    act: Act,
    x: &'a mut [f32],
}

impl WithSimd for Activate<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        // (A closure here would not inherit the CPU features of this function, and its
        // intrinsics would become calls.)
        let act = self.act;
        let (head, tail) = S::as_mut_simd_f32s(self.x);
        for v in head {
            *v = activate(simd, act, *v);
        }
        if !tail.is_empty() {
            let v = simd.partial_load_f32s(tail);
            simd.partial_store_f32s(tail, activate(simd, act, v));
        }
    }
}

/// `act` on one vector (the match is hoisted out of the loops that call this).
#[inline(always)]
fn activate<S: Simd>(simd: S, act: Act, x: S::f32s) -> S::f32s {
    match act {
        Act::Gelu => gelu(simd, x),
        Act::GeluTanh => gelu_tanh(simd, x),
        Act::Relu => simd.max_f32s(x, simd.splat_f32s(0.0)),
        Act::Silu => silu(simd, x),
    }
}

/// `0.5 x (1 + erf(x / √2))`.
#[inline(always)]
fn gelu<S: Simd>(simd: S, x: S::f32s) -> S::f32s {
    let half = simd.mul_f32s(x, simd.splat_f32s(0.5));
    let e = erf(
        simd,
        simd.mul_f32s(x, simd.splat_f32s(std::f32::consts::FRAC_1_SQRT_2)),
    );
    simd.mul_add_f32s(half, e, half)
}

/// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
#[inline(always)]
fn gelu_tanh<S: Simd>(simd: S, x: S::f32s) -> S::f32s {
    const C: f32 = 0.797_884_6; // √(2/π)
    let x2 = simd.mul_f32s(x, x);
    let inner = simd.mul_add_f32s(x2, simd.splat_f32s(0.044_715), simd.splat_f32s(1.0));
    let two_u = simd.mul_f32s(simd.mul_f32s(x, inner), simd.splat_f32s(2.0 * C));
    // tanh(u) = 1 - 2 / (e^{2u} + 1), stable at both ends with `exp` clamped.
    let one = simd.splat_f32s(1.0);
    let e = simd.add_f32s(exp_vector(simd, two_u), one);
    let t = simd.sub_f32s(one, simd.div_f32s(simd.splat_f32s(2.0), e));
    let half = simd.mul_f32s(x, simd.splat_f32s(0.5));
    simd.mul_add_f32s(half, t, half)
}

/// `x / (1 + e^-x)`.
#[inline(always)]
fn silu<S: Simd>(simd: S, x: S::f32s) -> S::f32s {
    let e = exp_vector(simd, simd.sub_f32s(simd.splat_f32s(0.0), x));
    simd.div_f32s(x, simd.add_f32s(e, simd.splat_f32s(1.0)))
}

/// The error function with an absolute error below 4e-7 in float32: `x P(x²) / Q(x²)` for
/// `|x| <= 4` (and `x` clamped there, where erf is 1 within 2e-8), with `P` of degree 6 and `Q`
/// of degree 4 fitted to erf's values on `[0, 4]` for the smallest largest error (the fit is
/// `scripts/fit_erf.py`'s). Odd like erf, so no sign to restore; one division and eleven
/// multiply-adds, where the exponential form of Abramowitz & Stegun 7.1.26 took about twice
/// as many operations.
#[inline(always)]
fn erf<S: Simd>(simd: S, x: S::f32s) -> S::f32s {
    /// `P`'s and `Q`'s coefficients, highest degree first.
    const P: [f32; 7] = [
        1.921_691_3e-8,
        -1.990_336_4e-6,
        1.555_426_3e-4,
        4.293_299e-3,
        5.243_423e-2,
        2.139_504_3e-1,
        1.128_378_6,
    ];
    const Q: [f32; 5] = [
        1.098_097_7e-3,
        1.555_158_5e-2,
        1.208_019_9e-1,
        5.229_363e-1,
        1.0,
    ];
    let x = simd.min_f32s(
        simd.max_f32s(x, simd.splat_f32s(-4.0)),
        simd.splat_f32s(4.0),
    );
    let t = simd.mul_f32s(x, x);
    let mut p = simd.splat_f32s(P[0]);
    for c in &P[1..] {
        p = simd.mul_add_f32s(p, t, simd.splat_f32s(*c));
    }
    let mut q = simd.splat_f32s(Q[0]);
    for c in &Q[1..] {
        q = simd.mul_add_f32s(q, t, simd.splat_f32s(*c));
    }
    simd.div_f32s(simd.mul_f32s(x, p), q)
}

/// [`exp`] over vectors, with fused multiply-adds where the CPU has them (so the two may
/// differ in the last bit).
#[inline(always)]
fn exp_vector<S: Simd>(simd: S, x: S::f32s) -> S::f32s {
    const ROUND: f32 = 12_582_912.0;
    let x = simd.min_f32s(
        simd.max_f32s(x, simd.splat_f32s(-87.0)),
        simd.splat_f32s(88.0),
    );
    let t = simd.mul_add_f32s(
        x,
        simd.splat_f32s(std::f32::consts::LOG2_E),
        simd.splat_f32s(ROUND),
    );
    let n = simd.sub_f32s(t, simd.splat_f32s(ROUND));
    let r = simd.mul_add_f32s(n, simd.splat_f32s(-0.693_145_75), x);
    let r = simd.mul_add_f32s(n, simd.splat_f32s(-1.428_606_8e-6), r);
    let mut p = simd.splat_f32s(1.0 / 5040.0);
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = simd.mul_add_f32s(p, r, simd.splat_f32s(c));
    }
    // 2^n from the bits of t, as in `exp`.
    let bits = simd.transmute_u32s_f32s(t);
    let biased = simd.add_u32s(bits, simd.splat_u32s(127u32.wrapping_sub(ROUND.to_bits())));
    let scale = simd.wrapping_dyn_shl_u32s(biased, simd.splat_u32s(23));
    simd.mul_f32s(p, simd.transmute_f32s_u32s(scale))
}

/// `e^x` in float32 with a relative error below 2e-7 over the normal range; inputs are clamped
/// to `[-87, 88]`, so very negative inputs give about 1.6e-38 rather than 0. Branch-free (it
/// vectorizes), unlike the libm call.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in a part exact in float32 and the rest (Cody & Waite).
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    // t = 1.5 * 2^23 + n: its mantissa holds the integer n (|n| <= 127) in its low bits.
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // Taylor series of e^r for |r| <= ln2 / 2, to r^7 / 7!. The last term multiplies by
    // 1 / 5040 rather than dividing: a vector division is one instruction per 16 cycles on
    // Intel cores, and it set the pace of softmax and GELU.
    const C7: f32 = 1.0 / 5040.0;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * C7))))));
    // 2^n from the bits of t (no float-to-int conversion, which would not vectorize).
    let biased = t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127);
    let scale = f32::from_bits(biased << 23);
    p * scale
}

/// Softmax of every `width`-long row of `rows`, in place.
pub(crate) fn softmax_rows(rows: &mut [f32], width: usize) {
    simd(Softmax { rows, width })
}

/// Softmax of one row in place.
#[inline(always)]
pub(crate) fn softmax_row(row: &mut [f32]) {
    let max = max_of(row);
    // `e^(v - max)` written and summed in one pass, in the partial sums of `sum_by`.
    let mut acc = [0.0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *v = exp(*v - max);
            *a += *v;
        }
    }
    // The last partial chunk as a whole one, padded with -inf (each `e^-87` after the clamp,
    // about 1e-38, lost in a sum of at least 1): one vector of `exp` rather than up to 15
    // scalar ones, which took a third of the time at a row's typical length.
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let mut pad = [f32::NEG_INFINITY; LANES];
        pad[..rest.len()].copy_from_slice(rest);
        for (a, v) in acc.iter_mut().zip(&mut pad) {
            *v = exp(*v - max);
            *a += *v;
        }
        rest.copy_from_slice(&pad[..rest.len()]);
    }
    let inv = 1.0 / acc.iter().sum::<f32>();
    row.iter_mut().for_each(|v| *v *= inv);
}

/// Lanes of the partial sums below: float additions are not reassociated by the compiler, so
/// independent partial sums are what lets these loops use vector instructions. 16: one
/// AVX-512 register (8 left these loops at half width there: softmax took 4 % more of a
/// cross-encoder's time), two AVX2 ones.
const LANES: usize = 16;

/// `Σ f(x)` over `xs`, in [`LANES`] partial sums.
#[inline(always)]
fn sum_by(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    acc.iter().sum::<f32>() + tail.iter().map(|&v| f(v)).sum::<f32>()
}

/// The largest element (`-inf` for an empty slice), in [`LANES`] partial maxima.
#[inline(always)]
fn max_of(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    acc.iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_thread_work_sizes_for_one_thread_and_restores_after_a_panic() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            assert_eq!(threads(), 3);
            assert_eq!(on_own_thread(|| on_own_thread(threads)), 1);
            assert_eq!(threads(), 3, "nested scopes put the flag back");
            let caught = std::panic::catch_unwind(|| on_own_thread(|| panic!("inside")));
            assert!(caught.is_err());
            assert_eq!(threads(), 3, "a panic puts the flag back");
        });
    }

    /// erf in float64 by its Taylor series (|x| < 3) or the continued fraction of erfc.
    fn erf64(x: f64) -> f64 {
        if x.abs() < 3.0 {
            let mut sum = 0.0;
            let mut term = x;
            let mut n = 0.0;
            while term.abs() > 1e-17 {
                sum += term / (2.0 * n + 1.0);
                n += 1.0;
                term *= -x * x / n;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            let a = x.abs();
            // Lentz-free backward evaluation of the continued fraction.
            let mut f = 0.0;
            for k in (1..60).rev() {
                f = k as f64 / 2.0 / (a + f);
            }
            let erfc = (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f);
            (1.0 - erfc).copysign(x)
        }
    }

    /// [`erf`] over a slice, a vector at a time.
    fn erf_all(xs: &mut [f32]) {
        struct Op<'a>(&'a mut [f32]);
        impl WithSimd for Op<'_> {
            type Output = ();
            fn with_simd<S: Simd>(self, simd: S) {
                let (head, tail) = S::as_mut_simd_f32s(self.0);
                for v in head {
                    *v = erf(simd, *v);
                }
                if !tail.is_empty() {
                    let v = simd.partial_load_f32s(tail);
                    simd.partial_store_f32s(tail, erf(simd, v));
                }
            }
        }
        simd(Op(xs))
    }

    #[test]
    fn erf_is_within_its_bound() {
        let mut xs: Vec<f32> = (-60_000..=60_000).map(|i| i as f32 * 1e-4).collect();
        let inputs = xs.clone();
        erf_all(&mut xs);
        let mut worst = 0.0f64;
        for (&x, &got) in inputs.iter().zip(&xs) {
            worst = worst.max((got as f64 - erf64(x as f64)).abs());
        }
        assert!(worst < 4e-7, "max |erf error| {worst:e}");
        let mut ends = [0.0, 10.0, -10.0, -0.0, f32::MAX, f32::MIN];
        erf_all(&mut ends);
        let want = [0.0, 1.0, -1.0, 0.0, 1.0, -1.0];
        for (got, want) in ends.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{ends:?}");
        }
    }

    /// An element's activation is the same wherever it sits: in a whole vector or in the
    /// partial one at the end, alone or among others.
    #[test]
    fn activations_do_not_depend_on_the_position() {
        let xs: Vec<f32> = (0..37).map(|i| (i as f32 * 0.77).sin() * 5.0).collect();
        for act in [Act::Gelu, Act::GeluTanh, Act::Relu, Act::Silu] {
            let mut all = xs.clone();
            act.apply_here(&mut all);
            for (i, &x) in xs.iter().enumerate() {
                let mut one = [x];
                act.apply_here(&mut one);
                assert_eq!(one[0].to_bits(), all[i].to_bits(), "{act:?} at {i}");
            }
        }
    }

    #[test]
    fn exp_is_accurate_and_finite() {
        let mut worst = 0.0f64;
        // Inside the clamp range [-87, 88].
        for i in -86_999..=87_999 {
            let x = i as f32 * 1e-3;
            let want = (x as f64).exp();
            worst = worst.max(((exp(x) as f64) - want).abs() / want);
        }
        assert!(worst < 2e-7, "max relative exp error {worst:e}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) >= 0.0 && exp(-1000.0) < 1e-37);
        assert!(exp(1000.0).is_finite());
    }

    #[test]
    fn activations_match_their_definitions() {
        for i in -800..=800 {
            let x = i as f32 * 0.01;
            let x64 = x as f64;
            let exact = 0.5 * x64 * (1.0 + erf64(x64 / 2f64.sqrt()));
            let [mut gelu, mut gelu_tanh] = [[x]; 2];
            Act::Gelu.apply_here(&mut gelu);
            Act::GeluTanh.apply_here(&mut gelu_tanh);
            assert!((gelu[0] as f64 - exact).abs() < 1e-6, "gelu({x})");
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let tanh = 0.5 * x64 * (1.0 + (c * (x64 + 0.044715 * x64.powi(3))).tanh());
            assert!((gelu_tanh[0] as f64 - tanh).abs() < 1e-6, "gelu_tanh({x})");
            let mut silu = [x];
            Act::Silu.apply_here(&mut silu);
            let want = x64 / (1.0 + (-x64).exp());
            assert!(
                (silu[0] as f64 - want).abs() < 1e-6 * want.abs().max(1.0),
                "silu({x})"
            );
        }
        assert_eq!(Act::from_name("swish"), Some(Act::Silu));
    }

    #[test]
    fn softmax_and_layer_norm_rows() {
        let mut row = [1.0f32, 2.0, 3.0, -1000.0];
        softmax_row(&mut row);
        let z: f64 = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp()).sum();
        for (got, want) in row.iter().zip([1.0f64, 2.0, 3.0]) {
            assert!((*got as f64 - want.exp() / z).abs() < 1e-7);
        }
        assert!(row[3] < 1e-30);

        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        layer_norm_row(&mut x, &[1.0, 1.0, 2.0, 1.0], &[0.0, 0.0, 0.0, 0.5], 0.0);
        let sd = 1.25f32.sqrt();
        let want = [-1.5 / sd, -0.5 / sd, 2.0 * 0.5 / sd, 1.5 / sd + 0.5];
        for (g, w) in x.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{x:?}");
        }
    }

    /// The product of strided views against a naive triple loop.
    #[test]
    fn matmul_handles_strides_blocks_and_accumulation() {
        let a: Vec<f32> = (0..4 * 6).map(|v| (v as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..5 * 6).map(|v| (v as f32 * 0.11).cos()).collect();
        // a: rows 1..4, cols 2..5 of a (4, 6) matrix; b: the transpose of (5, 6) cols 1..4.
        let av = Mat::new(&a, 4, 6).block(1, 3, 2, 3);
        let bv = Mat::new(&b, 5, 6).block(0, 5, 1, 3).t();
        let mut out = vec![1.0f32; 3 * 7];
        matmul(av, bv, &mut out, 7, 0.5, true, Threads::Pool);
        for i in 0..3 {
            for j in 0..5 {
                let dot: f32 = (0..3)
                    .map(|l| a[(1 + i) * 6 + 2 + l] * b[j * 6 + 1 + l])
                    .sum();
                assert!((out[i * 7 + j] - (1.0 + 0.5 * dot)).abs() < 1e-5);
            }
            assert_eq!(&out[i * 7 + 5..i * 7 + 7], &[1.0, 1.0]);
        }
        let lin = Linear {
            weight: Weight::F32(b.clone()),
            bias: (0..5).map(|v| v as f32).collect(),
            inputs: 6,
            outputs: 5,
        };
        let x = &a[..2 * 6];
        let mut y = vec![0.0; 2 * 2];
        lin.forward_cols(x, 2, 3, 2, &mut y);
        for i in 0..2 {
            for j in 0..2 {
                let dot: f32 = (0..6).map(|l| x[i * 6 + l] * b[(3 + j) * 6 + l]).sum();
                assert!((y[i * 2 + j] - (dot + 3.0 + j as f32)).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn every_weight_format_computes_the_same_layer() {
        let (inputs, outputs, rows) = (70, 45, 9);
        let w: Vec<f32> = (0..inputs * outputs)
            .map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5)
            .collect();
        let x: Vec<f32> = (0..rows * inputs)
            .map(|i| ((i * 13) % 29) as f32 / 29.0 - 0.5)
            .collect();
        let rows_layer = Linear {
            weight: Weight::F32(w.clone()),
            bias: (0..outputs).map(|v| v as f32 * 0.1).collect(),
            inputs,
            outputs,
        };
        let mut want = vec![0.0; rows * outputs];
        rows_layer.forward(&x, rows, &mut want);
        // the bf16 layer widens before its product: compare it with the
        // same rounded weights in f32
        let bf16 = rows_layer.to_bf16();
        let rounded = Linear {
            weight: Weight::F32(bf16.weight.to_f32().into_owned()),
            ..rows_layer.clone()
        };
        let mut want_bf16 = vec![0.0; rows * outputs];
        rounded.forward(&x, rows, &mut want_bf16);
        for (layer, want) in [(&rows_layer, &want), (&bf16, &want_bf16)] {
            let mut got = vec![0.0; rows * outputs];
            layer.forward(&x, rows, &mut got);
            let mut part = vec![0.0; rows * 7];
            layer.forward_cols(&x, rows, 30, 7, &mut part);
            for r in 0..rows {
                for c in 0..outputs {
                    assert!((got[r * outputs + c] - want[r * outputs + c]).abs() < 1e-5);
                }
                for c in 0..7 {
                    assert!((part[r * 7 + c] - want[r * outputs + 30 + c]).abs() < 1e-5);
                }
            }
            // one row: the matrix-vector path, plain and accumulating
            let mut one = vec![1.0; outputs];
            layer.gemv(&x[..inputs], &mut one, true);
            for c in 0..outputs {
                assert!((one[c] - 1.0 - want[c]).abs() < 1e-5);
            }
            layer.gemv(&x[..inputs], &mut one, false);
            for c in 0..outputs {
                assert!((one[c] - want[c]).abs() < 1e-5);
            }
        }
    }
}
