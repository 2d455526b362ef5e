//! Matrix-vector products for decoding: `y = W x` (or `y += W x`) with one input row, over
//! weights stored as `f32` or `bf16`.
//!
//! A decode step multiplies every weight once by a single activation row, so it is bound by
//! how fast the weights stream from memory, not by arithmetic: a general matrix product (which
//! packs panels of the weights for reuse) only adds copies there. These kernels read each
//! weight row once, straight from where it is stored, against an input row that stays in L1,
//! with the widest fused multiply-add the CPU has (AVX-512F or AVX2 + FMA, detected at run
//! time, with a portable fallback); output rows are split over the rayon pool. `bf16` weights
//! are widened to `f32` in registers (a bf16 value is the top half of an f32), so they halve the
//! bytes streamed per token at the cost of the weights' precision only: activations and sums
//! stay `f32`.
//!
//! Hand-written rather than a crate's: `gemm` has no `bf16 x f32` product and no single-row
//! path that avoids packing; the kernels are a few lines per instruction set.

use rayon::prelude::*;

use super::FloatIsa;

/// How a matrix's values are stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Rows<'a> {
    /// `f32` values, row-major.
    F32(&'a [f32]),
    /// `bf16` bit patterns, row-major.
    Bf16(&'a [u16]),
}

impl Rows<'_> {
    fn len(&self) -> usize {
        match self {
            Rows::F32(w) => w.len(),
            Rows::Bf16(w) => w.len(),
        }
    }
}

/// Output rows per parallel task: large enough that a task streams ~100 KB or more of weights.
fn rows_per_task(cols: usize) -> usize {
    (32_768 / cols.max(1)).clamp(4, 256)
}

/// `out[r] = Σ_c w[r][c] x[c]` (or `+=` when `accumulate`) for the `out.len()` rows of `w`, each
/// `x.len()` wide, on the current rayon pool.
///
/// Panics when `w` does not hold exactly `out.len() * x.len()` values (a programming error
/// inside the crate).
pub(crate) fn gemv(w: Rows<'_>, x: &[f32], out: &mut [f32], accumulate: bool) {
    let cols = x.len();
    assert_eq!(w.len(), out.len() * cols, "gemv: weight shape");
    if cols == 0 {
        if !accumulate {
            out.fill(0.0);
        }
        return;
    }
    let isa = FloatIsa::detect();
    let per = rows_per_task(cols);
    out.par_chunks_mut(per).enumerate().for_each(|(task, out)| {
        let first = task * per;
        for (i, o) in out.iter_mut().enumerate() {
            let r = first + i;
            let d = match w {
                Rows::F32(w) => super::dot::dot_f32(&w[r * cols..(r + 1) * cols], x),
                Rows::Bf16(w) => dot_bf16(isa, &w[r * cols..(r + 1) * cols], x),
            };
            if accumulate {
                *o += d;
            } else {
                *o = d;
            }
        }
    });
}

/// `Σ w x` over `bf16` weights, on the `isa` kernel.
#[inline]
pub(crate) fn dot_bf16(isa: FloatIsa, w: &[u16], x: &[f32]) -> f32 {
    assert_eq!(w.len(), x.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a vector `FloatIsa` is only made on a CPU with its features; the lengths
        // are equal (asserted above), and the kernels read only within them.
        FloatIsa::Avx512 => unsafe { x86::dot_bf16_avx512(w, x) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        FloatIsa::Avx2 => unsafe { x86::dot_bf16_avx2(w, x) },
        _ => dot_bf16_portable(w, x),
    }
}

/// The `f32` value of a `bf16` bit pattern.
#[inline(always)]
pub(crate) fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// The `bf16` nearest to `v` (round to nearest, ties to even; NaN stays NaN), as PyTorch
/// rounds.
pub(crate) fn f32_to_bf16(v: f32) -> u16 {
    let bits = v.to_bits();
    if v.is_nan() {
        return ((bits >> 16) as u16) | 0x40;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

fn dot_bf16_portable(w: &[u16], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (cw, cx) = (w.chunks_exact(8), x.chunks_exact(8));
    let tail: f32 = cw
        .remainder()
        .iter()
        .zip(cx.remainder())
        .map(|(&a, b)| bf16_to_f32(a) * b)
        .sum();
    for (a, b) in cw.zip(cx) {
        for i in 0..8 {
            acc[i] += bf16_to_f32(a[i]) * b[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The x86-64 kernels: four independent accumulators per call, unaligned loads, the tail
    //! in scalar code. Callers guarantee the CPU features and `w.len() == x.len()`.

    use std::arch::x86_64::*;

    use super::bf16_to_f32;

    /// # Safety
    /// The CPU must support `avx512f`, and `w.len() == x.len()`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_bf16_avx512(w: &[u16], x: &[f32]) -> f32 {
        let n = x.len();
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (every load below): i + 16 * (j + 1) <= n; 16 bf16 values are 32 bytes.
        while i + 64 <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                let o = i + 16 * j;
                let bits = unsafe { _mm256_loadu_si256(pw.add(o) as *const __m256i) };
                let wide =
                    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)));
                *a = _mm512_fmadd_ps(wide, unsafe { _mm512_loadu_ps(px.add(o)) }, *a);
            }
            i += 64;
        }
        while i + 16 <= n {
            let bits = unsafe { _mm256_loadu_si256(pw.add(i) as *const __m256i) };
            let wide = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)));
            acc[0] = _mm512_fmadd_ps(wide, unsafe { _mm512_loadu_ps(px.add(i)) }, acc[0]);
            i += 16;
        }
        let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        let mut s = _mm512_reduce_add_ps(sum);
        for k in i..n {
            s += bf16_to_f32(w[k]) * x[k];
        }
        s
    }

    /// # Safety
    /// The CPU must support `avx2` and `fma`, and `w.len() == x.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_bf16_avx2(w: &[u16], x: &[f32]) -> f32 {
        let n = x.len();
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY (every load below): i + 8 * (j + 1) <= n; 8 bf16 values are 16 bytes.
        while i + 32 <= n {
            for (j, a) in acc.iter_mut().enumerate() {
                let o = i + 8 * j;
                let bits = unsafe { _mm_loadu_si128(pw.add(o) as *const __m128i) };
                let wide =
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits)));
                *a = _mm256_fmadd_ps(wide, unsafe { _mm256_loadu_ps(px.add(o)) }, *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            let bits = unsafe { _mm_loadu_si128(pw.add(i) as *const __m128i) };
            let wide = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits)));
            acc[0] = _mm256_fmadd_ps(wide, unsafe { _mm256_loadu_ps(px.add(i)) }, acc[0]);
            i += 8;
        }
        let mut s = hsum256(_mm256_add_ps(
            _mm256_add_ps(acc[0], acc[1]),
            _mm256_add_ps(acc[2], acc[3]),
        ));
        for k in i..n {
            s += bf16_to_f32(w[k]) * x[k];
        }
        s
    }

    #[target_feature(enable = "avx2")]
    fn hsum256(v: __m256) -> f32 {
        let pair = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let quad = _mm_add_ps(pair, _mm_movehl_ps(pair, pair));
        let one = _mm_add_ss(quad, _mm_shuffle_ps::<1>(quad, quad));
        _mm_cvtss_f32(one)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::noise;

    fn dot64(w: impl Iterator<Item = f32>, x: &[f32]) -> f64 {
        w.zip(x).map(|(a, &b)| a as f64 * b as f64).sum()
    }

    #[test]
    fn every_kernel_matches_a_float64_dot_product_at_every_length() {
        for n in [
            0,
            1,
            7,
            8,
            15,
            16,
            17,
            31,
            33,
            63,
            64,
            65,
            100,
            1024,
            3072 + 5,
        ] {
            let w = noise(n, n as u64 + 1);
            let x = noise(n, n as u64 + 99);
            let wb: Vec<u16> = w.iter().map(|&v| f32_to_bf16(v)).collect();
            let want = dot64(w.iter().copied(), &x);
            let want_b = dot64(wb.iter().map(|&b| bf16_to_f32(b)), &x);
            // the f32 kernels' own tests are in `simd::dense`
            let got = crate::simd::dot::dot_f32(&w, &x) as f64;
            assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "f32 n={n}");
            for k in FloatIsa::available() {
                let got = dot_bf16(k, &wb, &x) as f64;
                assert!(
                    (got - want_b).abs() <= 1e-4 * (1.0 + want_b.abs()),
                    "{k:?} bf16 n={n}"
                );
            }
        }
    }

    #[test]
    fn gemv_writes_or_accumulates_every_row() {
        let (rows, cols) = (1000, 77);
        let w = noise(rows * cols, 5);
        let x = noise(cols, 6);
        let mut out = vec![1.0f32; rows];
        gemv(Rows::F32(&w), &x, &mut out, true);
        for (r, &o) in out.iter().enumerate() {
            let want = 1.0 + dot64(w[r * cols..(r + 1) * cols].iter().copied(), &x);
            assert!((o as f64 - want).abs() < 1e-4, "row {r}");
        }
        let wb: Vec<u16> = w.iter().map(|&v| f32_to_bf16(v)).collect();
        gemv(Rows::Bf16(&wb), &x, &mut out, false);
        for (r, &o) in out.iter().enumerate() {
            let row = wb[r * cols..(r + 1) * cols].iter().map(|&b| bf16_to_f32(b));
            assert!((o as f64 - dot64(row, &x)).abs() < 1e-4, "row {r}");
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(f32_to_bf16(-2.5)), -2.5);
        // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0).
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // Just above halfway rounds up.
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0 + 1.0 / 65536.0), 0x3f81);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(bf16_to_f32(f32_to_bf16(f32::INFINITY)), f32::INFINITY);
    }
}
