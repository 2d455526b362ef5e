//! The encoders' attention for one head and one block of queries, fused, on AVX-512: scores,
//! softmax and the weighted sum of the values without a `(queries, keys)` matrix in memory
//! beyond a group of 16 queries' scores (in the level-1 cache).
//!
//! A group of 16 queries is one 512-bit vector wide, a query per lane, so that:
//! - the scores are computed transposed, `sᵀ[j]` = the 16 queries' scores against key `j`:
//!   the group's queries, transposed once, are `d` vectors, and each multiply-add takes one of
//!   them and a key's value broadcast from memory (8 keys at a time, 8 accumulators);
//! - the softmax runs down the keys, lane by lane: maxima, exponentials and sums are
//!   element-wise over vectors, with no horizontal step and no partial vector at a row's end;
//! - the weighted sum takes a few queries at a time (`16 / (d / 16)` of them, 16 accumulators
//!   in all), each key's row of values in `d / 16` vectors and each query's weight broadcast
//!   from `sᵀ` at a constant offset; each output row is scaled by its query's `1 / Σ` at the
//!   end (the softmax's normalisation, moved after the sum).
//!
//! Against two matrix products around a row softmax (the `gemm` crate's kernels, whose small
//! products with `k = d` ran at about half the FMA peak), the scores never leave the cache and
//! the softmax's rows have no tails.

use std::arch::x86_64::*;

/// Values per vector: queries per group.
const LANES: usize = 16;
/// Keys per step of the scores' kernel.
const KEYS: usize = 8;

/// One head's attention for a block of queries (see the module docs).
pub(crate) struct Head<'a> {
    /// Query `i` of the block is `q[i * q_stride..][..d]`.
    pub q: &'a [f32],
    pub q_stride: usize,
    pub queries: usize,
    /// The keys, packed: key `j` is `keys[j * d..][..d]`, `nk` of them then zero rows up to
    /// a multiple of 8 ([`Head::key_rows`]).
    pub keys: &'a [f32],
    /// The values: key `j`'s are `values[j * v_stride..][..d]` (read in place).
    pub values: &'a [f32],
    pub v_stride: usize,
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
    /// Whether the fused kernel runs heads of `d` values on this CPU: AVX-512, `d` of 16, 32,
    /// 64 or 128.
    pub fn supported(d: usize) -> bool {
        super::FloatIsa::detect() == super::FloatIsa::Avx512 && matches!(d, 16 | 32 | 64 | 128)
    }

    /// Rows of the packed keys for `nk` keys (zero rows after the last).
    pub fn key_rows(nk: usize) -> usize {
        nk.next_multiple_of(KEYS)
    }

    /// Runs the head; `scratch` holds a group's transposed queries and scores.
    ///
    /// Panics if [`Head::supported`] is false for `d`, or if a slice is shorter than the
    /// shapes say (a bug in the caller).
    pub fn run(self, scratch: &mut Vec<f32>) {
        let (d, nk, n) = (self.d, self.nk, self.queries);
        assert!(Head::supported(d), "no fused attention for d = {d}");
        assert!(nk >= 1 && n >= 1);
        assert!(self.q_stride >= d && self.q.len() >= (n - 1) * self.q_stride + d);
        assert!(self.keys.len() >= Head::key_rows(nk) * d);
        assert!(self.v_stride >= d && self.values.len() >= (nk - 1) * self.v_stride + d);
        assert!(self.out_stride >= d && self.out.len() >= (n - 1) * self.out_stride + d);
        let len = d * LANES + Head::key_rows(nk) * LANES;
        if scratch.len() < len {
            scratch.resize(len, 0.0);
        }
        // SAFETY: `supported` says the CPU has AVX-512F; the asserts above keep every read
        // (`n` query rows, `key_rows(nk)` key rows, `nk` value rows of `d`) and write (`n` output
        // rows of `d`) inside the slices, and `scratch` holds `d x 16` transposed queries and
        // `key_rows(nk) x 16` scores.
        unsafe {
            match d {
                16 => head_avx512::<16, 1, 16>(self, scratch),
                32 => head_avx512::<32, 2, 8>(self, scratch),
                64 => head_avx512::<64, 4, 4>(self, scratch),
                _ => head_avx512::<128, 8, 2>(self, scratch),
            }
        }
    }
}

/// The fused head for `D` values a head, `DV = D / 16` vectors a row of values, `QR = 16 / DV`
/// queries per pass of the weighted sum.
#[target_feature(enable = "avx512f")]
unsafe fn head_avx512<const D: usize, const DV: usize, const QR: usize>(
    h: Head<'_>,
    scratch: &mut [f32],
) {
    let nk = h.nk;
    let (qt, st) = scratch.split_at_mut(D * LANES);
    let (keys, values) = (h.keys.as_ptr(), h.values.as_ptr());
    let st = st.as_mut_ptr();
    let lane_index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for g0 in (0..h.queries).step_by(LANES) {
        let lanes = LANES.min(h.queries - g0);
        // The group's queries transposed: `qt[l]` holds value `l` of each (zero lanes past
        // the last query).
        let mut rows = [&[][..]; LANES];
        for (row, i) in rows.iter_mut().zip(g0..g0 + lanes) {
            *row = &h.q[i * h.q_stride..][..D];
        }
        super::panels::interleave(super::FloatIsa::Avx512, &rows[..lanes], LANES, D, qt);
        let qt = qt.as_ptr();

        // sᵀ[j] = the group's scores against key j, 8 keys at a time.
        for j0 in (0..nk).step_by(KEYS) {
            let kp = keys.add(j0 * D);
            let mut acc = [_mm512_setzero_ps(); KEYS];
            for l in 0..D {
                let qv = _mm512_loadu_ps(qt.add(l * LANES));
                for (i, a) in acc.iter_mut().enumerate() {
                    *a = _mm512_fmadd_ps(qv, _mm512_set1_ps(*kp.add(i * D + l)), *a);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(st.add((j0 + i) * LANES), *a);
            }
        }

        // The softmax down the keys, lane by lane; a key outside a query's window weighs 0.
        let positions = match h.window {
            Some((w, offset)) => {
                let first = _mm512_set1_epi32((g0 + offset) as i32);
                Some((w, _mm512_add_epi32(lane_index, first)))
            }
            None => None,
        };
        let mut max = _mm512_set1_ps(f32::NEG_INFINITY);
        for j in 0..nk {
            let s = _mm512_loadu_ps(st.add(j * LANES));
            max = _mm512_mask_max_ps(max, visible(positions, j), max, s);
        }
        let scale = _mm512_set1_ps(h.scale);
        let mut sum = _mm512_setzero_ps();
        for j in 0..nk {
            let p = st.add(j * LANES);
            let x = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(p), max), scale);
            let e = _mm512_maskz_mov_ps(visible(positions, j), exp(x));
            _mm512_storeu_ps(p, e);
            sum = _mm512_add_ps(sum, e);
        }
        let mut inv = [0.0f32; LANES];
        _mm512_storeu_ps(inv.as_mut_ptr(), _mm512_div_ps(_mm512_set1_ps(1.0), sum));

        // The weighted sums of the values, `QR` queries at a time, each scaled by 1 / Σ.
        for r0 in (0..lanes).step_by(QR) {
            let mut acc = [[_mm512_setzero_ps(); DV]; QR];
            for j in 0..nk {
                let vp = values.add(j * h.v_stride);
                let mut v = [_mm512_setzero_ps(); DV];
                for (c, vc) in v.iter_mut().enumerate() {
                    *vc = _mm512_loadu_ps(vp.add(c * LANES));
                }
                let pj = st.add(j * LANES + r0);
                for (r, row) in acc.iter_mut().enumerate() {
                    let p = _mm512_set1_ps(*pj.add(r));
                    for (a, vc) in row.iter_mut().zip(&v) {
                        *a = _mm512_fmadd_ps(p, *vc, *a);
                    }
                }
            }
            for (r, row) in acc.iter().enumerate().take(lanes - r0) {
                let out = h.out.as_mut_ptr().add((g0 + r0 + r) * h.out_stride);
                let inv = _mm512_set1_ps(inv[r0 + r]);
                for (c, a) in row.iter().enumerate() {
                    _mm512_storeu_ps(out.add(c * LANES), _mm512_mul_ps(*a, inv));
                }
            }
        }
    }
}

/// The lanes whose query sees key `j`: all without a window, else those whose position (in
/// `positions`, with the window `w`) is within `w` of `j`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn visible(positions: Option<(usize, __m512i)>, j: usize) -> __mmask16 {
    match positions {
        None => 0xFFFF,
        Some((w, pos)) => {
            // Positions fit in i32 (a block's keys are a slice's rows); a window wider than
            // that is every key.
            let w = w.min(i32::MAX as usize) as i32;
            let diff = _mm512_sub_epi32(pos, _mm512_set1_epi32(j as i32));
            _mm512_cmple_epi32_mask(diff, _mm512_set1_epi32(w))
                & _mm512_cmpge_epi32_mask(diff, _mm512_set1_epi32(-w))
        }
    }
}

/// `e^x` lane by lane, as `models::kernels::exp` (the same reduction and polynomial, with
/// fused multiply-adds): inputs clamped to `[-87, 88]`, relative error below 2e-7.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn exp(x: __m512) -> __m512 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0;
    let x = _mm512_min_ps(
        _mm512_max_ps(x, _mm512_set1_ps(-87.0)),
        _mm512_set1_ps(88.0),
    );
    let t = _mm512_fmadd_ps(x, _mm512_set1_ps(LOG2E), _mm512_set1_ps(ROUND));
    let n = _mm512_sub_ps(t, _mm512_set1_ps(ROUND));
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(1.0 / 5040.0);
    for c in [720.0, 120.0, 24.0, 6.0, 2.0, 1.0, 1.0] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0 / c));
    }
    let biased = _mm512_add_epi32(
        _mm512_sub_epi32(
            _mm512_castps_si512(t),
            _mm512_set1_epi32(ROUND.to_bits() as i32),
        ),
        _mm512_set1_epi32(127),
    );
    _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(biased)))
}
