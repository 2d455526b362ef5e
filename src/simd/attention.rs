//! The encoders' attention for one head and one block of queries, fused: scores, softmax and
//! the weighted sum of the values without a `(queries, keys)` matrix in memory beyond a group
//! of queries' scores (in the level-1 cache). One kernel, written once over [`Vector`], runs
//! on AVX-512 (groups of 16 queries) and on AVX2 + FMA (groups of 8).
//!
//! A group of queries is one vector wide, a query per lane, so that:
//! - the scores are computed transposed, `sᵀ[j]` = the group's scores against key `j`: the
//!   group's queries, transposed once and scaled by `scale · log₂e`, are `d` vectors, and each
//!   multiply-add takes one of them and a key's value broadcast from memory (8 keys at a time,
//!   8 accumulators), the maxima taken on the way;
//! - the softmax runs down the keys, lane by lane, in powers of 2: maxima, exponentials and
//!   sums are element-wise over vectors, with no horizontal step and no partial vector at a
//!   row's end;
//! - the weighted sum runs in tiles of `QR` queries by `CV` vectors of values (8 to 16
//!   accumulators, what the registers hold beside a key's `CV` vectors and a broadcast
//!   weight), each query's weight broadcast from `sᵀ` at a constant offset, over blocks of
//!   keys whose values (16 KB) stay in the level-1 cache while every tile reads them; each
//!   output row is scaled by its query's `1 / Σ` at the end (the softmax's normalisation,
//!   moved after the sum).
//!
//! Against two matrix products around a row softmax (the `gemm` crate's kernels, whose small
//! products with `k = d` ran at about half the FMA peak), the scores never leave the cache and
//! the softmax's rows have no tails.

use std::arch::x86_64::*;

use super::FloatIsa;

/// Keys per step of the scores' kernel.
const KEYS: usize = 8;
/// The most lanes of any vector (the AVX-512 group).
const MAX_LANES: usize = 16;
/// Values (floats) per block of keys of the weighted sums: 16 KB, half of a 32 KB level-1
/// data cache.
const VALUE_BLOCK: usize = 4096;

/// One head's attention for a block of queries (see the module docs).
pub(crate) struct Head<'a> {
    /// Query `i` of the block is `q[i * q_stride..][..d]`.
    pub q: &'a [f32],
    pub q_stride: usize,
    pub queries: usize,
    /// The keys, packed: key `j` is `keys[j * d..][..d]`, `nk` of them then zero rows up to
    /// a multiple of 8 ([`Head::key_rows`]).
    pub keys: &'a [f32],
    /// The values, packed as the keys (`nk` rows): in place, rows a power of two of bytes
    /// apart would share a few sets of the level-1 cache.
    pub values: &'a [f32],
    pub nk: usize,
    pub d: usize,
    /// Multiplies the scores before the softmax (`1 / √d`).
    pub scale: f32,
    /// `(w, offset)`: query `i` sees key `j` only when `|i + offset - j| <= w` (a sliding
    /// window; `offset` is the block's first query minus the first key's position).
    pub window: Option<(usize, usize)>,
    /// Query `i`'s output is written to `out[i * out_stride..][..d]`.
    pub out: &'a mut [f32],
    pub out_stride: usize,
}

impl Head<'_> {
    /// Whether the fused kernel runs heads of `d` values with `isa`'s instructions: AVX-512 or
    /// AVX2 + FMA, `d` of 16, 32, 64 or 128.
    pub fn supported(isa: FloatIsa, d: usize) -> bool {
        isa != FloatIsa::Portable && matches!(d, 16 | 32 | 64 | 128)
    }

    /// Rows of the packed keys for `nk` keys (zero rows after the last).
    pub fn key_rows(nk: usize) -> usize {
        nk.next_multiple_of(KEYS)
    }

    /// Runs the head with `isa`'s instructions (what `FloatIsa::detect` or `available` gave);
    /// `scratch` holds a group's transposed queries and scores.
    ///
    /// Panics if [`Head::supported`] is false for `isa` and `d`, or if a slice is shorter than
    /// the shapes say (a bug in the caller).
    pub fn run(self, isa: FloatIsa, scratch: &mut Vec<f32>) {
        let (d, nk, n) = (self.d, self.nk, self.queries);
        assert!(Head::supported(isa, d), "no fused attention for d = {d}");
        assert!(nk >= 1 && n >= 1);
        assert!(self.q_stride >= d && self.q.len() >= (n - 1) * self.q_stride + d);
        assert!(self.keys.len() >= Head::key_rows(nk) * d);
        assert!(self.values.len() >= nk * d);
        assert!(self.out_stride >= d && self.out.len() >= (n - 1) * self.out_stride + d);
        let len = (d + Head::key_rows(nk)) * MAX_LANES;
        if scratch.len() < len {
            scratch.resize(len, 0.0);
        }
        // SAFETY: `supported` says `isa` is AVX-512 or AVX2, and a `FloatIsa` vector variant
        // is only made on a CPU that has its instructions; the asserts above keep every read
        // (`n` query rows, `key_rows(nk)` key rows, `nk` value rows of `d`) and write (`n`
        // output rows of `d`) inside the slices, and `scratch` holds `d` transposed queries
        // and `key_rows(nk)` scores of up to 16 lanes each.
        unsafe {
            match (isa, d) {
                (FloatIsa::Avx512, 16) => head_avx512::<16, 16, 1>(self, scratch),
                (FloatIsa::Avx512, 32) => head_avx512::<32, 8, 2>(self, scratch),
                (FloatIsa::Avx512, 64) => head_avx512::<64, 4, 4>(self, scratch),
                (FloatIsa::Avx512, _) => head_avx512::<128, 2, 8>(self, scratch),
                (_, 16) => head_avx2::<16, 4, 2>(self, scratch),
                (_, 32) => head_avx2::<32, 2, 4>(self, scratch),
                (_, 64) => head_avx2::<64, 2, 4>(self, scratch),
                (_, _) => head_avx2::<128, 2, 4>(self, scratch),
            }
        }
    }
}

/// [`head`] on AVX-512: a query per lane of 16.
#[target_feature(enable = "avx512f")]
unsafe fn head_avx512<const D: usize, const QR: usize, const CV: usize>(
    h: Head<'_>,
    scratch: &mut [f32],
) {
    head::<__m512, D, QR, CV>(h, scratch)
}

/// [`head`] on AVX2 + FMA: a query per lane of 8.
#[target_feature(enable = "avx2,fma")]
unsafe fn head_avx2<const D: usize, const QR: usize, const CV: usize>(
    h: Head<'_>,
    scratch: &mut [f32],
) {
    head::<__m256, D, QR, CV>(h, scratch)
}

/// The fused head for `D` values a head, over vectors `V`, the weighted sums in tiles of `QR`
/// queries by `CV` vectors of values (`QR` divides `V::LANES`, `CV` divides `D / V::LANES`).
///
/// # Safety
/// The CPU has `V`'s instructions and the caller enables them (this is inlined into a
/// `#[target_feature]` function); the slices hold what [`Head::run`] asserts.
#[inline(always)]
unsafe fn head<V: Vector, const D: usize, const QR: usize, const CV: usize>(
    h: Head<'_>,
    scratch: &mut [f32],
) {
    let (lanes_n, nk) = (V::LANES, h.nk);
    let (qt, st) = scratch.split_at_mut(D * lanes_n);
    let (keys, values) = (h.keys.as_ptr(), h.values.as_ptr());
    let st = st.as_mut_ptr();
    for g0 in (0..h.queries).step_by(lanes_n) {
        let lanes = lanes_n.min(h.queries - g0);
        // The group's queries transposed: `qt[l]` holds value `l` of each (zero lanes past
        // the last query).
        let mut rows = [&[][..]; MAX_LANES];
        for (row, i) in rows.iter_mut().zip(g0..g0 + lanes) {
            *row = &h.q[i * h.q_stride..][..D];
        }
        super::panels::interleave(V::ISA, &rows[..lanes], lanes_n, D, qt);
        // Scaled once here, by the softmax's `scale` and by log₂e (the softmax takes powers
        // of 2), rather than every score.
        let factor = V::splat(h.scale * std::f32::consts::LOG2_E);
        for l in 0..D {
            let p = qt.as_mut_ptr().add(l * lanes_n);
            V::load(p).mul(factor).store(p);
        }
        let qt = qt.as_ptr();

        // sᵀ[j] = the group's scores against key j, 8 keys at a time, and (without a
        // window) their maxima lane by lane, over the real keys only.
        let mut max = V::splat(f32::NEG_INFINITY);
        for j0 in (0..nk).step_by(KEYS) {
            let kp = keys.add(j0 * D);
            let mut acc = [V::zero(); KEYS];
            for l in 0..D {
                let qv = V::load(qt.add(l * lanes_n));
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = qv.mul_add(V::splat(*kp.add(i * D + l)), *a);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                a.store(st.add((j0 + i) * lanes_n));
            }
            if h.window.is_none() {
                for a in acc.iter().take(nk - j0) {
                    max = max.max(*a);
                }
            }
        }

        // The softmax down the keys, lane by lane, in powers of 2; a key outside a query's
        // window weighs 0. Positions fit in i32 (a block's keys are a slice's rows); a window
        // wider than that is every key.
        let window = h.window.map(|(w, offset)| {
            let w = w.min(i32::MAX as usize) as i32;
            (w, V::positions((g0 + offset) as i32))
        });
        if let Some((w, pos)) = window {
            for j in 0..nk {
                let s = V::load(st.add(j * lanes_n));
                max = max.max_where(V::within(pos, j as i32, w), s);
            }
        }
        // Four keys a step, four partial sums: each exponential is a chain of a dozen
        // dependent operations, and four side by side keep the pipes busy.
        let mut sums = [V::zero(); 4];
        let whole = nk / 4 * 4;
        for j in (0..whole).step_by(4) {
            let mut e = [V::zero(); 4];
            for (i, e) in e.iter_mut().enumerate() {
                *e = exp2(V::load(st.add((j + i) * lanes_n)).sub(max));
            }
            for (i, (e, s)) in e.iter_mut().zip(&mut sums).enumerate() {
                if let Some((w, pos)) = window {
                    *e = e.keep(V::within(pos, (j + i) as i32, w));
                }
                e.store(st.add((j + i) * lanes_n));
                *s = s.add(*e);
            }
        }
        for j in whole..nk {
            let mut e = exp2(V::load(st.add(j * lanes_n)).sub(max));
            if let Some((w, pos)) = window {
                e = e.keep(V::within(pos, j as i32, w));
            }
            e.store(st.add(j * lanes_n));
            sums[0] = sums[0].add(e);
        }
        let sum = sums[0].add(sums[1]).add(sums[2].add(sums[3]));
        let mut inv = [0.0f32; MAX_LANES];
        V::splat(1.0).div(sum).store(inv.as_mut_ptr());

        // The weighted sums of the values, `QR` queries by `CV` vectors at a time, over
        // blocks of keys whose values stay in the level-1 cache while every tile reads them;
        // a tile's sums wait in its output rows between blocks, and are scaled by 1 / Σ
        // after the last.
        let block = (VALUE_BLOCK / D).max(1);
        for j0 in (0..nk).step_by(block) {
            let (j1, first) = ((j0 + block).min(nk), j0 == 0);
            let last = j1 == nk;
            for r0 in (0..lanes).step_by(QR) {
                let rows = QR.min(lanes - r0);
                for c0 in (0..D).step_by(CV * lanes_n) {
                    let out = h.out.as_mut_ptr().add((g0 + r0) * h.out_stride + c0);
                    let mut acc = [[V::zero(); CV]; QR];
                    if !first {
                        for (r, row) in acc.iter_mut().enumerate().take(rows) {
                            for (c, a) in row.iter_mut().enumerate() {
                                *a = V::load(out.add(r * h.out_stride + c * lanes_n));
                            }
                        }
                    }
                    for j in j0..j1 {
                        let vp = values.add(j * D + c0);
                        let mut v = [V::zero(); CV];
                        for (c, vc) in v.iter_mut().enumerate() {
                            *vc = V::load(vp.add(c * lanes_n));
                        }
                        let pj = st.add(j * lanes_n + r0);
                        for (r, row) in acc.iter_mut().enumerate() {
                            let p = V::splat(*pj.add(r));
                            for (a, vc) in row.iter_mut().zip(&v) {
                                *a = p.mul_add(*vc, *a);
                            }
                        }
                    }
                    for (r, row) in acc.iter().enumerate().take(rows) {
                        let scale = V::splat(if last { inv[r0 + r] } else { 1.0 });
                        for (c, a) in row.iter().enumerate() {
                            a.mul(scale).store(out.add(r * h.out_stride + c * lanes_n));
                        }
                    }
                }
            }
        }
    }
}

/// `2^x` lane by lane: `x` clamped to `[-126, 127]` and split into an integer `n` (rounded to
/// nearest) and `r` in `[-1/2, 1/2]`; `2^r` by a polynomial of degree 5 fitted to minimize the
/// relative error over that interval (1.6e-7 in exact arithmetic, as low as the Taylor
/// polynomial of degree 6, with one multiply-add less in every exponential's chain; 2.1e-7 in
/// float32), times `2^n` built in the exponent's bits.
///
/// # Safety
/// As [`head`]: inlined where `V`'s instructions are enabled.
#[inline(always)]
unsafe fn exp2<V: Vector>(x: V) -> V {
    const ROUND: f32 = 12_582_912.0;
    /// The polynomial's coefficients, highest degree first.
    const POLY: [f32; 6] = [
        1.327_647_1e-3,
        9.675_541e-3,
        5.550_713e-2,
        2.402_212e-1,
        6.931_469_4e-1,
        1.000_000_1,
    ];
    let x = x.max(V::splat(-126.0)).min(V::splat(127.0));
    let t = x.add(V::splat(ROUND));
    let r = x.sub(t.sub(V::splat(ROUND)));
    let mut p = V::splat(POLY[0]);
    for c in &POLY[1..] {
        p = p.mul_add(r, V::splat(*c));
    }
    // `t`'s low bits hold `n` above ROUND's.
    p.mul(t.exponent_bits(127 - ROUND.to_bits() as i32))
}

/// The operations of the fused kernel on one vector of `LANES` floats. Every method is an
/// intrinsic of the instruction set, inlined into the `#[target_feature]` function that
/// calls the kernel.
///
/// # Safety
/// Each method may only run where the CPU has the type's instructions and they are enabled.
trait Vector: Copy {
    /// Floats per vector.
    const LANES: usize;
    /// The instruction set, for [`super::panels::interleave`].
    const ISA: FloatIsa;
    /// A set of lanes.
    type Mask: Copy;
    /// `LANES` 32-bit integers.
    type Ints: Copy;
    unsafe fn zero() -> Self;
    unsafe fn splat(x: f32) -> Self;
    /// `LANES` floats from `p` (unaligned).
    unsafe fn load(p: *const f32) -> Self;
    /// `LANES` floats to `p` (unaligned).
    unsafe fn store(self, p: *mut f32);
    unsafe fn add(self, b: Self) -> Self;
    unsafe fn sub(self, b: Self) -> Self;
    unsafe fn mul(self, b: Self) -> Self;
    unsafe fn div(self, b: Self) -> Self;
    unsafe fn min(self, b: Self) -> Self;
    unsafe fn max(self, b: Self) -> Self;
    /// `self * b + c`, fused.
    unsafe fn mul_add(self, b: Self, c: Self) -> Self;
    /// The float whose bits are `(bits(self) + bias) << 23`, lane by lane (wrapping).
    unsafe fn exponent_bits(self, bias: i32) -> Self;
    /// Lane `i` holds `first + i`.
    unsafe fn positions(first: i32) -> Self::Ints;
    /// The lanes whose `pos - j` lies in `[-w, w]`.
    unsafe fn within(pos: Self::Ints, j: i32, w: i32) -> Self::Mask;
    /// `max(self, x)` in the lanes of `mask`, `self` in the others.
    unsafe fn max_where(self, mask: Self::Mask, x: Self) -> Self;
    /// `self` in the lanes of `mask`, zero in the others.
    unsafe fn keep(self, mask: Self::Mask) -> Self;
}

impl Vector for __m512 {
    const LANES: usize = 16;
    const ISA: FloatIsa = FloatIsa::Avx512;
    type Mask = __mmask16;
    type Ints = __m512i;
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm512_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        _mm512_add_ps(self, b)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        _mm512_sub_ps(self, b)
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        _mm512_mul_ps(self, b)
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        _mm512_div_ps(self, b)
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        _mm512_min_ps(self, b)
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        _mm512_max_ps(self, b)
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        _mm512_fmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn exponent_bits(self, bias: i32) -> Self {
        let biased = _mm512_add_epi32(_mm512_castps_si512(self), _mm512_set1_epi32(bias));
        _mm512_castsi512_ps(_mm512_slli_epi32::<23>(biased))
    }
    #[inline(always)]
    unsafe fn positions(first: i32) -> Self::Ints {
        let index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        _mm512_add_epi32(index, _mm512_set1_epi32(first))
    }
    #[inline(always)]
    unsafe fn within(pos: Self::Ints, j: i32, w: i32) -> Self::Mask {
        let diff = _mm512_sub_epi32(pos, _mm512_set1_epi32(j));
        _mm512_cmple_epi32_mask(diff, _mm512_set1_epi32(w))
            & _mm512_cmpge_epi32_mask(diff, _mm512_set1_epi32(-w))
    }
    #[inline(always)]
    unsafe fn max_where(self, mask: Self::Mask, x: Self) -> Self {
        _mm512_mask_max_ps(self, mask, self, x)
    }
    #[inline(always)]
    unsafe fn keep(self, mask: Self::Mask) -> Self {
        _mm512_maskz_mov_ps(mask, self)
    }
}

impl Vector for __m256 {
    const LANES: usize = 8;
    const ISA: FloatIsa = FloatIsa::Avx2;
    /// All ones in the lanes of the set, zero in the others.
    type Mask = __m256;
    type Ints = __m256i;
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm256_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        _mm256_add_ps(self, b)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        _mm256_sub_ps(self, b)
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        _mm256_mul_ps(self, b)
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        _mm256_div_ps(self, b)
    }
    #[inline(always)]
    unsafe fn min(self, b: Self) -> Self {
        _mm256_min_ps(self, b)
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        _mm256_max_ps(self, b)
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        _mm256_fmadd_ps(self, b, c)
    }
    #[inline(always)]
    unsafe fn exponent_bits(self, bias: i32) -> Self {
        let biased = _mm256_add_epi32(_mm256_castps_si256(self), _mm256_set1_epi32(bias));
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(biased))
    }
    #[inline(always)]
    unsafe fn positions(first: i32) -> Self::Ints {
        let index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_add_epi32(index, _mm256_set1_epi32(first))
    }
    #[inline(always)]
    unsafe fn within(pos: Self::Ints, j: i32, w: i32) -> Self::Mask {
        let diff = _mm256_sub_epi32(pos, _mm256_set1_epi32(j));
        let outside = _mm256_or_si256(
            _mm256_cmpgt_epi32(diff, _mm256_set1_epi32(w)),
            _mm256_cmpgt_epi32(_mm256_set1_epi32(-w), diff),
        );
        _mm256_castsi256_ps(_mm256_xor_si256(outside, _mm256_set1_epi32(-1)))
    }
    #[inline(always)]
    unsafe fn max_where(self, mask: Self::Mask, x: Self) -> Self {
        _mm256_blendv_ps(self, _mm256_max_ps(self, x), mask)
    }
    #[inline(always)]
    unsafe fn keep(self, mask: Self::Mask) -> Self {
        _mm256_and_ps(self, mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::noise;

    /// Every instruction set's kernel, every head size, against the definition in float64:
    /// groups of queries whole and partial, keys fewer and more than a step of 8, globally and
    /// in windows, with query and output rows strided as in a `(tokens, 3 * hidden)` matrix.
    #[test]
    fn every_instruction_set_matches_the_definition() {
        let cases = [
            (8, 8, None),
            (13, 20, Some((3, 2))),
            (16, 16, Some((0, 0))),
            (21, 1, None),
            (40, 70, None),
            (40, 70, Some((5, 10))),
        ];
        let mut ran = 0;
        for isa in FloatIsa::available() {
            for d in [16, 32, 64, 128] {
                if !Head::supported(isa, d) {
                    continue;
                }
                for &(nq, nk, window) in &cases {
                    check(isa, d, nq, nk, window);
                    ran += 1;
                }
            }
        }
        // AVX2 + FMA is the baseline of the machines this crate is tested on.
        assert!(ran >= 4 * cases.len(), "{ran} cases ran");
    }

    /// The exponential's relative error, on every instruction set's vectors, over the range
    /// a softmax gives it (`x <= 0`), and its clamp below.
    #[test]
    fn exp2_is_within_its_bound() {
        let xs: Vec<f32> = (0..=126_000).map(|i| -(i as f32) * 1e-3).collect();
        let mut worst = 0.0f64;
        for isa in FloatIsa::available() {
            if isa == FloatIsa::Portable {
                continue;
            }
            let mut out = vec![0.0f32; xs.len()];
            // SAFETY: `available` lists only instruction sets this CPU has; every load and
            // store stays in `xs` and `out`, 16 floats at a time over whole chunks.
            let run = |x: &[f32], o: &mut [f32]| unsafe {
                match isa {
                    FloatIsa::Avx512 => exp2_chunk_avx512(x, o),
                    FloatIsa::Avx2 => exp2_chunk_avx2(x, o),
                    FloatIsa::Portable => unreachable!("skipped above"),
                }
            };
            for (x, o) in xs.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
                run(x, o);
            }
            for (&x, &got) in xs.iter().zip(&out).take(xs.len() / 16 * 16) {
                let want = 2f64.powf(x as f64);
                worst = worst.max((got as f64 - want).abs() / want);
            }
            let mut under = [0.0f32; 16];
            run(&[-1000.0; 16], &mut under);
            assert!(
                under.iter().all(|&v| v > 0.0 && v < 1e-37),
                "{isa:?}: {under:?}"
            );
        }
        assert!(worst < 2.5e-7, "max relative 2^x error {worst:e}");
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn exp2_chunk_avx512(x: &[f32], out: &mut [f32]) {
        exp2::<__m512>(__m512::load(x.as_ptr())).store(out.as_mut_ptr())
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp2_chunk_avx2(x: &[f32], out: &mut [f32]) {
        for i in [0, 8] {
            exp2::<__m256>(__m256::load(x.as_ptr().add(i))).store(out.as_mut_ptr().add(i))
        }
    }

    fn check(isa: FloatIsa, d: usize, nq: usize, nk: usize, window: Option<(usize, usize)>) {
        let stride = 3 * d + 5;
        let q = noise(nq * stride, 1);
        let v = noise(nk * d, 2);
        let k = noise(nk * d, 3);
        let mut keys = k.clone();
        keys.resize(Head::key_rows(nk) * d, 0.0);
        let scale = 1.0 / (d as f32).sqrt();
        let mut out = vec![f32::NAN; nq * stride];
        Head {
            q: &q,
            q_stride: stride,
            queries: nq,
            keys: &keys,
            values: &v,
            nk,
            d,
            scale,
            window,
            out: &mut out,
            out_stride: stride,
        }
        .run(isa, &mut Vec::new());
        for i in 0..nq {
            let seen: Vec<usize> = (0..nk)
                .filter(|&j| window.is_none_or(|(w, offset)| (i + offset).abs_diff(j) <= w))
                .collect();
            let score = |j: usize| -> f64 {
                let dot: f64 = (0..d)
                    .map(|c| q[i * stride + c] as f64 * k[j * d + c] as f64)
                    .sum();
                dot * scale as f64
            };
            let max = seen.iter().map(|&j| score(j)).fold(f64::MIN, f64::max);
            let z: f64 = seen.iter().map(|&j| (score(j) - max).exp()).sum();
            for c in 0..d {
                let want: f64 = seen
                    .iter()
                    .map(|&j| (score(j) - max).exp() / z * v[j * d + c] as f64)
                    .sum();
                let got = out[i * stride + c] as f64;
                assert!(
                    (got - want).abs() < 1e-5,
                    "{isa:?} d {d} {nq}x{nk} {window:?} query {i} value {c}: {got} {want}"
                );
            }
            // Nothing written past the head's values.
            assert!(
                out[i * stride + d].is_nan(),
                "{isa:?} d {d}: wrote past the row"
            );
        }
    }
}
