//! Int8 linear layers for the BERT-family encoders and the Qwen3 reranker
//! ([`Precision::Int8`]): dynamic quantization as onnxruntime's `quantize_dynamic` does it,
//! with finer scales.
//!
//! - **Weights**, once at load: per output channel, symmetric, `q = round(w / s)` with
//!   `s = max |w| / m`: `m = 127` (8 bits) for the kernels that sum in i32 (VNNI, scalar),
//!   `m = 63` (7 bits) for AVX2. That range is what keeps AVX2's `vpmaddubsw` exact: it adds
//!   two u8 x i8 products into an i16 with saturation, and the kernel adds two of those
//!   sums in i16 before widening them. onnxruntime's `reduce_range` makes the same choice
//!   for the same reason. So int8 results differ a little between a CPU with VNNI and one
//!   without (as float results differ between kernels), and are closer to f32 with VNNI.
//! - **Activations**, at every call: per row, asymmetric, `u = round(x / s) + z` in
//!   `[0, top]` with `s = (max - min) / top` over the row (zero included in the range, so
//!   it is exact); `top = 255`, except for the encoders on AVX2 ([`QuantLinear::new`]):
//!   127, where `2 x (2 x 127 x 63) = 32004` lets two groups' pairs share an i16 and saves
//!   one multiply in four (the multiplies bound that kernel). With the outliers out (below),
//!   the eighth bit matters little to an encoder: on all-MiniLM-L6-v2 the smallest cosine
//!   of int8 to f32 embeddings over 64 SciFact documents went 0.99492 -> 0.99512 and SciFact
//!   nDCG@10 0.6463 -> 0.6489 (f32: 0.6451), the random-head cross-encoder's Spearman with
//!   f32 0.9978 -> 0.9966, for 13 % less time. A decoder's is another matter: on the tiny
//!   random Qwen3 fixture the largest logit error grew 0.48 -> 0.70 (largest logit 3.2) and
//!   Spearman fell 0.989 -> 0.984, so Qwen3 keeps 8-bit activations
//!   ([`QuantLinear::with_8bit_activations`]).
//!   Unsigned is what `vpmaddubsw` and `vpdpbusd` take as their first operand; the
//!   zero point comes out of the sum exactly: `Σ u q = Σ (x/s + z) q`, so
//!   `x · w ≈ s_x s_w (Σ u q - z Σ q)`, with `Σ q` per output kept from load.
//! - **Outliers**, per row: BERT-family hidden states have a few channels far larger than the
//!   rest (and the `[CLS]` / `[SEP]` rows of short inputs are dominated by them); one scale
//!   per row would spend the 8 bits on them and round everything else coarsely. Up to
//!   [`MAX_OUTLIERS`] values per row above [`OUTLIER_RATIO`] times the row's root mean
//!   square are taken out before quantizing (their slots become exact zeros) and added back
//!   in the epilogue against the same int8 weights (`v s_w q[j][c]`), in f32. The choice
//!   depends on the row alone, so a text embeds the same alone or in any batch (the idea of
//!   LLM.int8()'s mixed-precision decomposition, without its per-batch column choice).
//! - **Products**: 32-bit integer sums in the kernels of `simd::quant` (AVX-512 VNNI,
//!   AVX-VNNI or AVX2, picked at run time; a scalar fallback elsewhere), then one float
//!   epilogue that applies the scales and adds the bias.
//!
//! Layer norm, softmax, GELU, attention and the embeddings stay in f32.
//!
//! [`Precision::Int8`]: crate::models::Precision::Int8

use rayon::prelude::*;

#[cfg(test)]
use super::kernels::Weight;
use super::kernels::{threads, Linear, Then};
use crate::simd::quant::{tiles, Group, Isa, Sums, GROUP, MR, NR};

/// Most values per row kept out of the 8-bit range and added back in f32.
const MAX_OUTLIERS: usize = 8;

/// A value is an outlier above this multiple of its row's root mean square.
const OUTLIER_RATIO: f32 = 6.0;

/// Most rows one parallel task quantizes or multiplies.
const MAX_CHUNK_ROWS: usize = 64;

/// The integer kernel [`Precision::Int8`](crate::models::Precision::Int8) runs the encoders
/// on with this CPU: `avx512-vnni`, `avx-vnni`, `avx2-pairs` (AVX2, 7-bit activations) or
/// `scalar` (for benchmark reports).
pub fn int8_kernel() -> &'static str {
    Isa::detect().seven_bit().name()
}

/// A linear layer with int8 weights: `out = x · wᵀ + bias`, `x` quantized per row on the fly.
#[derive(Debug, Clone)]
pub(crate) struct QuantLinear {
    /// `panels x groups` groups: panel `p` holds outputs `16p..16p + 16` (zero past the end).
    panels: Vec<Group>,
    /// Groups of four inputs per panel (`ceil(inputs / 4)`; the padding weights are zero).
    groups: usize,
    /// Per output: the weight scale. This and `sums` and `bias` are zero-padded to whole
    /// panels, so the epilogue works on fixed-width rows of [`NR`].
    scales: Vec<f32>,
    /// Per output: the sum of its quantized weights (the zero-point correction).
    sums: Vec<i32>,
    /// The quantized weights transposed, `(inputs, outputs)`: the column an outlier meets.
    columns: Vec<i8>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
    isa: Isa,
    /// The largest activation code.
    activation_max: u8,
}

impl QuantLinear {
    /// Quantizes a float layer of an encoder, for the fastest kernel this CPU has (on AVX2
    /// the one that takes 7-bit activations; see the module notes).
    pub fn new(linear: &Linear) -> Self {
        let isa = Isa::detect().seven_bit();
        Self::with_isa(linear, isa, (isa.weight_max(), isa.activation_max()))
    }

    /// Quantizes a float layer for the best kernel this CPU has that keeps 8-bit
    /// activations: a decoder's (Qwen3's) layers, whose logits 7 bits move too far.
    pub fn with_8bit_activations(linear: &Linear) -> Self {
        let isa = Isa::detect();
        Self::with_isa(linear, isa, (isa.weight_max(), isa.activation_max()))
    }

    /// Quantizes for the kernel `isa`, weights to `[-weight_max, weight_max]`, activations
    /// to `0..=activation_max` (what `isa` takes, or less).
    fn with_isa(linear: &Linear, isa: Isa, (weight_max, activation_max): (f32, u8)) -> Self {
        let (inputs, outputs) = (linear.inputs, linear.outputs);
        let groups = inputs.div_ceil(4);
        let panels = outputs.div_ceil(NR);
        let mut quantized = vec![0i8; outputs * inputs];
        let mut scales = Vec::with_capacity(outputs);
        let mut sums = Vec::with_capacity(outputs);
        let weight = linear.weight.to_f32();
        for (row, q) in weight
            .chunks_exact(inputs)
            .zip(quantized.chunks_exact_mut(inputs))
        {
            let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = if max > 0.0 { max / weight_max } else { 1.0 };
            for (q, &w) in q.iter_mut().zip(row) {
                *q = (w / scale).round().clamp(-weight_max, weight_max) as i8;
            }
            scales.push(scale);
            sums.push(q.iter().map(|&v| v as i32).sum());
        }
        // The transpose in tiles of 64 x 64: a tile's writes touch 64 lines, which stay in
        // the level-1 cache (a plain loop wrote one byte per line, every line a miss: most of
        // the load time of an int8 Qwen3).
        const TILE: usize = 64;
        let mut columns = vec![0i8; inputs * outputs];
        for j0 in (0..outputs).step_by(TILE) {
            for k0 in (0..inputs).step_by(TILE) {
                for j in j0..outputs.min(j0 + TILE) {
                    let row = &quantized[j * inputs..][..inputs];
                    for k in k0..inputs.min(k0 + TILE) {
                        columns[k * outputs + j] = row[k];
                    }
                }
            }
        }
        let mut packed = vec![Group([0; GROUP]); panels * groups];
        for p in 0..panels {
            for c in 0..NR.min(outputs - p * NR) {
                let row = &quantized[(p * NR + c) * inputs..][..inputs];
                for (k, &q) in row.iter().enumerate() {
                    packed[p * groups + k / 4].0[c * 4 + k % 4] = q;
                }
            }
        }
        scales.resize(panels * NR, 0.0);
        sums.resize(panels * NR, 0);
        let mut bias = linear.bias.clone();
        bias.resize(panels * NR, 0.0);
        QuantLinear {
            panels: packed,
            groups,
            scales,
            sums,
            columns,
            bias,
            inputs,
            outputs,
            isa,
            activation_max,
        }
    }

    /// Outputs per row.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Inputs per row.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// `out (rows, outputs) = x (rows, inputs) · weightᵀ + bias`, with `scratch` holding the
    /// quantized rows of `x` (grown as needed, reused across calls).
    pub fn forward(
        &self,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        scratch: &mut QuantRows,
        then: Then<'_>,
    ) {
        let n = self.outputs;
        assert!(x.len() >= rows * self.inputs && out.len() >= rows * n);
        if let Then::AddNorm { residual, .. } | Then::Add { residual } = then {
            assert!(residual.len() >= rows * n, "residual too short");
        }
        if rows == 0 {
            return;
        }
        self.quantize_input(x, rows, scratch, false);
        let chunk = chunk_rows(rows);
        let a = &*scratch;
        out[..rows * n]
            .par_chunks_mut(chunk * n)
            .enumerate()
            .for_each(|(ci, out)| {
                super::kernels::simd(ChunkProduct {
                    layer: self,
                    a,
                    first: ci * chunk,
                    residual_first: ci * chunk,
                    out,
                    then,
                })
            });
    }

    /// Quantizes rows `..rows` of `x` into `scratch` as this layer's kernel reads them (rows
    /// of whole groups, codes up to its activation range), in parallel unless `serial`.
    fn quantize_input(&self, x: &[f32], rows: usize, scratch: &mut QuantRows, serial: bool) {
        let shape = (rows, self.inputs, self.groups * 4);
        scratch.quantize(&x[..rows * self.inputs], shape, self.activation_max, serial);
    }

    /// Rows per block for [`QuantLinear::forward_here`] over `rows` rows: whole kernel rows,
    /// at most [`MAX_CHUNK_ROWS`], fewer when that would leave a thread idle.
    pub fn block_rows(&self, rows: usize) -> usize {
        rows.div_ceil(threads())
            .clamp(1, MAX_CHUNK_ROWS)
            .next_multiple_of(MR)
    }

    /// The same on this thread, for rows that are rows `first..` of the whole output (where
    /// `then` finds their residual): the feed-forward layers' blocks.
    pub fn forward_here(
        &self,
        x: &[f32],
        rows: usize,
        out: &mut [f32],
        scratch: &mut QuantRows,
        then: Then<'_>,
        first: usize,
    ) {
        let n = self.outputs;
        assert!(x.len() >= rows * self.inputs && out.len() >= rows * n);
        if rows == 0 {
            return;
        }
        self.quantize_input(x, rows, scratch, true);
        super::kernels::simd(ChunkProduct {
            layer: self,
            a: scratch,
            first: 0,
            residual_first: first,
            out: &mut out[..rows * n],
            then,
        })
    }
}

/// The rows `first..` of a product, into `out` (whole rows): the integer tiles, their float
/// epilogue, then the outliers. A [`pulp::WithSimd`] so that the float loops are compiled for
/// the CPU's vector width.
struct ChunkProduct<'a> {
    layer: &'a QuantLinear,
    a: &'a QuantRows,
    /// The first row of `a`.
    first: usize,
    /// The first row in `then`'s residual.
    residual_first: usize,
    out: &'a mut [f32],
    then: Then<'a>,
}

impl pulp::WithSimd for ChunkProduct<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let ChunkProduct {
            layer,
            a,
            first,
            residual_first,
            out,
            then,
        } = self;
        let n = layer.outputs;
        let stride = layer.groups * 4;
        let count = out.len() / n;
        let mut tile: Vec<Sums> = vec![[0; NR]; count];
        let rows = &a.data[first * stride..];
        for (p, panel) in layer.panels.chunks_exact(layer.groups).enumerate() {
            let c0 = p * NR;
            let width = NR.min(n - c0);
            let scales: &[f32; NR] = layer.scales[c0..c0 + NR].try_into().expect("padded");
            let sums: &[i32; NR] = layer.sums[c0..c0 + NR].try_into().expect("padded");
            let bias: &[f32; NR] = layer.bias[c0..c0 + NR].try_into().expect("padded");
            tiles(layer.isa, rows, stride, count, panel, &mut tile);
            for (i, acc) in tile.iter().enumerate() {
                let (sx, z) = (a.scales[first + i], a.zeros[first + i]);
                let value = |c: usize| sx * scales[c] * (acc[c] - z * sums[c]) as f32 + bias[c];
                let o = &mut out[i * n + c0..][..width];
                match o.first_chunk_mut::<NR>() {
                    // A whole panel: fixed width, one vector.
                    Some(o) => (0..NR).for_each(|c| o[c] = value(c)),
                    None => (0..width).for_each(|c| o[c] = value(c)),
                }
            }
        }
        // The outliers, row by row: `v s_w q[., k]` over every output.
        for (r, o) in out.chunks_exact_mut(n).enumerate() {
            for &(k, v) in a.outliers(first + r) {
                let col = &layer.columns[k as usize * n..][..n];
                for ((o, &q), &s) in o.iter_mut().zip(col).zip(&layer.scales) {
                    *o += v * s * q as f32;
                }
            }
        }
        then.apply_here(out, residual_first * n);
    }
}

/// Rows per parallel task: enough tasks for every thread (four each), in whole kernel rows,
/// at most [`MAX_CHUNK_ROWS`].
fn chunk_rows(rows: usize) -> usize {
    let tasks = 4 * threads();
    rows.div_ceil(tasks)
        .next_multiple_of(MR)
        .clamp(MR, MAX_CHUNK_ROWS)
}

/// Rows of activations quantized to u8, one scale and zero point per row, and each row's
/// outliers (index, value), kept in f32.
#[derive(Debug, Default)]
pub(crate) struct QuantRows {
    data: Vec<u8>,
    scales: Vec<f32>,
    zeros: Vec<i32>,
    /// [`MAX_OUTLIERS`] slots per row.
    outliers: Vec<(u32, f32)>,
    /// How many slots of each row are used.
    counts: Vec<u8>,
}

impl QuantRows {
    fn outliers(&self, row: usize) -> &[(u32, f32)] {
        &self.outliers[row * MAX_OUTLIERS..][..self.counts[row] as usize]
    }
}

impl QuantRows {
    /// Quantizes `rows` rows of `cols` floats into rows of `stride` bytes (zero-padded), codes
    /// `0..=top`, in parallel unless `serial`.
    fn quantize(
        &mut self,
        x: &[f32],
        (rows, cols, stride): (usize, usize, usize),
        top: u8,
        serial: bool,
    ) {
        self.data.resize(rows * stride, 0);
        self.scales.resize(rows, 0.0);
        self.zeros.resize(rows, 0);
        self.outliers.resize(rows * MAX_OUTLIERS, (0, 0.0));
        self.counts.resize(rows, 0);
        // One block of rows on this thread (the caller runs blocks in parallel), else chunks
        // on the pool.
        let chunk = if serial { rows } else { chunk_rows(rows) };
        self.data[..rows * stride]
            .par_chunks_mut(chunk * stride)
            .zip(x.par_chunks(chunk * cols))
            .zip(self.scales.par_chunks_mut(chunk))
            .zip(self.zeros.par_chunks_mut(chunk))
            .zip(self.outliers.par_chunks_mut(chunk * MAX_OUTLIERS))
            .zip(self.counts.par_chunks_mut(chunk))
            .for_each(|(((((q, x), scales), zeros), outliers), counts)| {
                super::kernels::simd(QuantizeRows {
                    q,
                    x,
                    scales,
                    zeros,
                    outliers,
                    counts,
                    cols,
                    stride,
                    top: top as f32,
                })
            });
    }
}

/// The per-row quantization of a block of rows, vectorized by [`pulp`].
struct QuantizeRows<'a> {
    q: &'a mut [u8],
    x: &'a [f32],
    scales: &'a mut [f32],
    zeros: &'a mut [i32],
    outliers: &'a mut [(u32, f32)],
    counts: &'a mut [u8],
    cols: usize,
    stride: usize,
    /// The largest code.
    top: f32,
}

impl pulp::WithSimd for QuantizeRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let rows = self.q.chunks_exact_mut(self.stride);
        let xs = self.x.chunks_exact(self.cols);
        let slots = self.outliers.chunks_exact_mut(MAX_OUTLIERS);
        let rows = rows.zip(xs).zip(self.scales).zip(self.zeros);
        for ((((q, x), scale), zero), (slots, count)) in rows.zip(slots.zip(self.counts)) {
            let Stats {
                mut lo,
                mut hi,
                squares,
            } = stats(simd, x);
            let limit = OUTLIER_RATIO * (squares / x.len().max(1) as f32).sqrt();
            let mut n = 0;
            if lo < -limit || hi > limit {
                (n, lo, hi) = take_outliers(simd, x, limit, slots);
            }
            *count = n as u8;
            let (lo, hi) = (lo.min(0.0), hi.max(0.0));
            let top = self.top;
            let s = if hi > lo { (hi - lo) / top } else { 1.0 };
            let inv = 1.0 / s;
            // The zero point: where 0.0 lands, rounded (exact for 0.0 itself).
            let z = (-lo * inv + 0.5).floor().clamp(0.0, top);
            for (q, &v) in q.iter_mut().zip(x) {
                *q = round_to_u8((v * inv + z).clamp(0.0, top));
            }
            // An outlier's slot holds the zero point, the code of 0.0: it is added back in
            // f32.
            for &(k, _) in &slots[..n] {
                q[k as usize] = z as u8;
            }
            q[self.cols..].fill(0);
            *scale = s;
            *zero = z as i32;
        }
    }
}

/// `v` (in `0.0..=255.0`) rounded to the nearest integer, ties to even.
///
/// Adding 2^23 leaves the integer in the low mantissa bits, so this is a float add and a
/// narrowing move, which vectorize; `(v + 0.5) as u8` is a saturating conversion that the
/// compiler does one lane at a time.
#[inline(always)]
fn round_to_u8(v: f32) -> u8 {
    (v + 8_388_608.0).to_bits() as u8
}

/// The smallest and largest element of a row and its sum of squares.
struct Stats {
    lo: f32,
    hi: f32,
    squares: f32,
}

/// [`Stats`] of `xs` in one pass over `simd`'s vectors. The squares are summed in four
/// independent chains: in one, every multiply-add waits for the one before.
#[inline(always)]
fn stats<S: pulp::Simd>(simd: S, xs: &[f32]) -> Stats {
    let (head, tail) = S::as_simd_f32s(xs);
    let mut lo = simd.splat_f32s(f32::INFINITY);
    let mut hi = simd.splat_f32s(f32::NEG_INFINITY);
    let mut squares = [simd.splat_f32s(0.0); 4];
    let (quads, rest) = head.as_chunks::<4>();
    for quad in quads {
        for (s, &v) in squares.iter_mut().zip(quad) {
            lo = simd.min_f32s(lo, v);
            hi = simd.max_f32s(hi, v);
            *s = simd.mul_add_e_f32s(v, v, *s);
        }
    }
    for &v in rest {
        lo = simd.min_f32s(lo, v);
        hi = simd.max_f32s(hi, v);
        squares[0] = simd.mul_add_e_f32s(v, v, squares[0]);
    }
    let [a, b, c, d] = squares;
    let squares = simd.add_f32s(simd.add_f32s(a, b), simd.add_f32s(c, d));
    let mut out = Stats {
        lo: simd.reduce_min_f32s(lo),
        hi: simd.reduce_max_f32s(hi),
        squares: simd.reduce_sum_f32s(squares),
    };
    for &v in tail {
        out.lo = out.lo.min(v);
        out.hi = out.hi.max(v);
        out.squares += v * v;
    }
    out
}

/// Takes the outliers out of a row: the (index, value) of the largest-magnitude values of `x`
/// beyond `limit`, at most `slots.len()`, go into `slots`. Returns how many, and the smallest
/// and largest of the values that stay (`INFINITY` and `-INFINITY` if none stays).
///
/// One pass over the row: a block of values all within the limit (most of them) is folded
/// into the range on vectors; a block with a value beyond it is walked one value at a time.
#[inline(always)]
fn take_outliers<S: pulp::Simd>(
    simd: S,
    x: &[f32],
    limit: f32,
    slots: &mut [(u32, f32)],
) -> (usize, f32, f32) {
    const BLOCK: usize = 32;
    let mut n = 0;
    let mut lo_v = simd.splat_f32s(f32::INFINITY);
    let mut hi_v = simd.splat_f32s(f32::NEG_INFINITY);
    // The range of the values that stay in the blocks walked one at a time.
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    for (b, block) in x.chunks(BLOCK).enumerate() {
        let (head, tail) = S::as_simd_f32s(block);
        let mut block_lo = simd.splat_f32s(f32::INFINITY);
        let mut block_hi = simd.splat_f32s(f32::NEG_INFINITY);
        for &v in head {
            block_lo = simd.min_f32s(block_lo, v);
            block_hi = simd.max_f32s(block_hi, v);
        }
        let largest = simd.max_f32s(block_hi, simd.neg_f32s(block_lo));
        if simd.reduce_max_f32s(largest) <= limit && tail.iter().all(|v| v.abs() <= limit) {
            lo_v = simd.min_f32s(lo_v, block_lo);
            hi_v = simd.max_f32s(hi_v, block_hi);
            for &v in tail {
                lo = lo.min(v);
                hi = hi.max(v);
            }
            continue;
        }
        for (i, &v) in block.iter().enumerate() {
            // The value that stays in the row: `v`, or an outlier `v` displaces.
            let stays = if v.abs() <= limit {
                v
            } else if n < slots.len() {
                slots[n] = ((b * BLOCK + i) as u32, v);
                n += 1;
                continue;
            } else {
                match slots
                    .iter_mut()
                    .min_by(|s, t| s.1.abs().total_cmp(&t.1.abs()))
                {
                    Some(smallest) if smallest.1.abs() < v.abs() => {
                        std::mem::replace(smallest, ((b * BLOCK + i) as u32, v)).1
                    }
                    _ => v,
                }
            };
            lo = lo.min(stays);
            hi = hi.max(stays);
        }
    }
    (
        n,
        lo.min(simd.reduce_min_f32s(lo_v)),
        hi.max(simd.reduce_max_f32s(hi_v)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 20_001) as f32 / 10_000.0 - 1.0
            })
            .collect()
    }

    fn layer(inputs: usize, outputs: usize) -> Linear {
        Linear {
            weight: Weight::F32(random(inputs * outputs, 7)),
            bias: random(outputs, 11),
            inputs,
            outputs,
        }
    }

    /// Shapes with ragged edges (inputs not a multiple of 4, outputs not of 16, rows not of
    /// 4), with 7-bit and 8-bit activations: the int8 product stays within the error its
    /// scales allow of the float one, and the detected kernel gives exactly the scalar
    /// kernel's floats.
    #[test]
    fn int8_linear_tracks_the_float_layer() {
        let shapes = [(384, 1152, 37), (7, 5, 1), (130, 33, 9), (1536, 40, 70)];
        let makers: [fn(&Linear) -> QuantLinear; 2] =
            [QuantLinear::new, QuantLinear::with_8bit_activations];
        for ((inputs, outputs, rows), make) in
            shapes.into_iter().flat_map(|s| makers.map(|m| (s, m)))
        {
            let lin = layer(inputs, outputs);
            let mut x = random(rows * inputs, 3);
            // An outlier feature, as real activations have.
            x[0] = 8.0;
            let mut want = vec![0.0; rows * outputs];
            lin.forward(&x, rows, &mut want);
            let mut got = vec![0.0; rows * outputs];
            let mut scratch = QuantRows::default();
            let q = make(&lin);
            q.forward(&x, rows, &mut got, &mut scratch, Then::Nothing);
            let mut scalar = vec![0.0; rows * outputs];
            QuantLinear::with_isa(&lin, Isa::Scalar, (q.isa.weight_max(), q.activation_max))
                .forward(&x, rows, &mut scalar, &mut scratch, Then::Nothing);
            assert_eq!(got, scalar, "{} vs scalar", q.isa.name());
            for r in 0..rows {
                let xr = &x[r * inputs..][..inputs];
                let row_range = xr.iter().fold(0.0f32, |m, v| m.max(v.abs())) * 2.0;
                for c in 0..outputs {
                    let wr = &lin.weight.to_f32()[c * inputs..][..inputs];
                    let wmax = wr.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    // Rounding errors: half a step of each factor, summed over the inputs
                    // (a loose bound; the typical error is far below it).
                    let bound = inputs as f32
                        * (0.5 * row_range / q.activation_max as f32 * wmax
                            + 0.5 * wmax / q.isa.weight_max() * row_range / 2.0);
                    let e = (got[r * outputs + c] - want[r * outputs + c]).abs();
                    assert!(e <= bound, "row {r} col {c}: error {e} > {bound}");
                }
            }
            // And on average the error is small relative to the outputs' spread.
            let rms = |v: &[f32]| (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
            let diff: Vec<f32> = got.iter().zip(&want).map(|(a, b)| a - b).collect();
            assert!(
                rms(&diff) < 0.02 * rms(&want),
                "{inputs}x{outputs}: rms error too large"
            );
        }
    }

    /// Rows with a few huge values (as BERT's outlier features): those are added back in f32,
    /// so such a row is about as accurate as the others, and each row's output is the same
    /// alone or in a batch.
    #[test]
    fn outliers_are_kept_exact_and_rows_are_independent() {
        let (inputs, outputs, rows) = (256, 20, 5);
        let lin = layer(inputs, outputs);
        let mut x = random(rows * inputs, 5);
        x[3] = 40.0;
        x[inputs + 10] = -55.0;
        x[inputs + 11] = 30.0;
        let q = QuantLinear::new(&lin);
        let mut scratch = QuantRows::default();
        let mut all = vec![0.0; rows * outputs];
        q.forward(&x, rows, &mut all, &mut scratch, Then::Nothing);
        assert_eq!(scratch.outliers(0), &[(3, 40.0)]);
        assert_eq!(scratch.outliers(1), &[(10, -55.0), (11, 30.0)]);
        assert!(scratch.outliers(2).is_empty());
        let mut want = vec![0.0; rows * outputs];
        lin.forward(&x, rows, &mut want);
        let rms = |v: &[f32]| (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
        for r in 0..rows {
            let (got, exact) = (
                &all[r * outputs..][..outputs],
                &want[r * outputs..][..outputs],
            );
            let diff: Vec<f32> = got.iter().zip(exact).map(|(a, b)| a - b).collect();
            assert!(
                rms(&diff) < 0.02 * rms(exact),
                "row {r}: {} vs {}",
                rms(&diff),
                rms(exact)
            );
            let mut one = vec![0.0; outputs];
            q.forward(
                &x[r * inputs..][..inputs],
                1,
                &mut one,
                &mut scratch,
                Then::Nothing,
            );
            assert_eq!(one, got, "row {r} alone");
        }
        // More outliers than slots: the largest ones are kept, the others stay in the range.
        let mut row = vec![0.01f32; 64];
        for (i, v) in row.iter_mut().take(12).enumerate() {
            *v = 10.0 + i as f32;
        }
        row[40] = -0.5;
        let mut slots = [(0u32, 0.0f32); MAX_OUTLIERS];
        let (n, lo, hi) = take_outliers(pulp::Scalar::new(), &row, 1.0, &mut slots);
        assert_eq!((n, lo, hi), (MAX_OUTLIERS, -0.5, 13.0));
        let mut kept: Vec<u32> = slots.iter().map(|s| s.0).collect();
        kept.sort_unstable();
        assert_eq!(kept, (4..12).collect::<Vec<u32>>());
    }

    /// The quantization as first written, one step at a time: statistics, the outliers,
    /// a copy of the row with their slots zeroed, its statistics, then the codes.
    fn quantize_reference(
        x: &[f32],
        stride: usize,
        top: f32,
    ) -> (Vec<u8>, f32, i32, Vec<(u32, f32)>) {
        let rms = (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
        let limit = OUTLIER_RATIO * rms;
        let mut slots: Vec<(u32, f32)> = Vec::new();
        for (k, &v) in x.iter().enumerate() {
            if v.abs() <= limit {
                continue;
            }
            if slots.len() < MAX_OUTLIERS {
                slots.push((k as u32, v));
            } else if let Some(smallest) = slots
                .iter_mut()
                .min_by(|s, t| s.1.abs().total_cmp(&t.1.abs()))
                .filter(|s| s.1.abs() < v.abs())
            {
                *smallest = (k as u32, v);
            }
        }
        let mut rest = x.to_vec();
        for &(k, _) in &slots {
            rest[k as usize] = 0.0;
        }
        let lo = rest.iter().fold(0.0f32, |m, &v| m.min(v));
        let hi = rest.iter().fold(0.0f32, |m, &v| m.max(v));
        let s = if hi > lo { (hi - lo) / top } else { 1.0 };
        let inv = 1.0 / s;
        let z = (-lo * inv + 0.5).floor().clamp(0.0, top);
        let mut q: Vec<u8> = rest
            .iter()
            .map(|&v| (v * inv + z).clamp(0.0, top).round_ties_even() as u8)
            .collect();
        q.resize(stride, 0);
        (q, s, z as i32, slots)
    }

    /// The one-pass quantization gives the reference's codes, scales, zero points and
    /// outliers, on rows with no outlier, a few, more than the slots, and in every block
    /// position (whole blocks, a ragged end).
    #[test]
    fn quantization_matches_the_step_by_step_reference() {
        for (cols, stride) in [(384, 384), (1536, 1536), (70, 72), (5, 8)] {
            let rows = 24;
            let mut x = random(rows * cols, cols as u64);
            for r in 0..rows {
                // Row r gets r % 11 outliers of either sign, some in the same block.
                for j in 0..r % 11 {
                    let k = (r * 37 + j * 29 + j % 2) % cols;
                    x[r * cols + k] = if j % 2 == 0 {
                        9.0 + j as f32
                    } else {
                        -20.0 - r as f32
                    };
                }
            }
            for top in [255, 127] {
                let mut got = QuantRows::default();
                got.quantize(&x, (rows, cols, stride), top, false);
                for r in 0..rows {
                    let row = &x[r * cols..][..cols];
                    let (q, s, z, slots) = quantize_reference(row, stride, top as f32);
                    let at = format!("{cols} columns, codes to {top}, row {r}");
                    let mut kept = got.outliers(r).to_vec();
                    kept.sort_by_key(|s| s.0);
                    let mut want = slots;
                    want.sort_by_key(|s| s.0);
                    assert_eq!(kept, want, "{at}");
                    assert_eq!(&got.data[r * stride..][..stride], &q[..], "{at}");
                    assert_eq!((got.scales[r], got.zeros[r]), (s, z), "{at}");
                }
            }
        }
    }

    /// The add-2^23 rounding is round-half-to-even over the whole quantized range.
    #[test]
    fn rounding_to_u8_is_half_to_even() {
        let grid = (0..=255 * 8).map(|i| i as f32 / 8.0);
        let awkward = random(4096, 13).into_iter().map(|v| (v + 1.0) * 127.5);
        for v in grid.chain(awkward).chain([0.0, 0.49999997, 254.5, 255.0]) {
            assert_eq!(round_to_u8(v), v.round_ties_even() as u8, "{v}");
        }
    }

    /// The one-pass row statistics agree with plain folds on every vector width.
    #[test]
    fn row_statistics_match_a_plain_fold() {
        for n in [0, 1, 7, 16, 33, 384, 1536] {
            let x = random(n, n as u64 + 1);
            let lo = x.iter().fold(f32::INFINITY, |m, &v| m.min(v));
            let hi = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let squares: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
            let got = super::super::kernels::simd(Measure(&x));
            assert_eq!((got.lo, got.hi), (lo, hi), "n = {n}");
            assert!((got.squares as f64 - squares).abs() <= 1e-5 * squares.max(1.0));
        }
    }

    /// [`stats`] of a row, on the CPU's vectors.
    struct Measure<'a>(&'a [f32]);

    impl pulp::WithSimd for Measure<'_> {
        type Output = Stats;
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, simd: S) -> Stats {
            stats(simd, self.0)
        }
    }

    #[test]
    fn zero_rows_and_zero_weights() {
        let mut lin = layer(8, 3);
        if let Weight::F32(w) = &mut lin.weight {
            w[..8].fill(0.0);
        }
        let q = QuantLinear::new(&lin);
        let mut out = vec![0.0; 2 * 3];
        let mut x = vec![0.0; 2 * 8];
        x[8..].copy_from_slice(&[0.5, -1.0, 2.0, 0.0, 3.0, -0.25, 1.0, 1.5]);
        q.forward(&x, 2, &mut out, &mut QuantRows::default(), Then::Nothing);
        // A zero input row gives the bias exactly; so does a zero weight row for any input.
        assert_eq!(&out[..3], &lin.bias[..]);
        assert_eq!(out[3], lin.bias[0]);
        assert_ne!(out[4], lin.bias[1]);
        q.forward(&x, 0, &mut [], &mut QuantRows::default(), Then::Nothing);
    }
}
