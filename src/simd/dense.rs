//! The dot products of the dense scan (`recall::dense`), one per stored format, chosen at run
//! time (the f32 one is the crate's, `super::dot`; its tests are here, beside the others), and
//! the f16 conversions of its compact copy.
//!
//! Each format has a portable kernel (plain Rust, vectorizable by the compiler) and x86-64
//! kernels compiled for wider instruction sets, used only on CPUs that report them:
//!
//! | format | AVX-512 | AVX2 | portable |
//! |---|---|---|---|
//! | f32 rows x f32 query | AVX-512F, 4 x 16 lanes, FMA | AVX2 + FMA, 16 accumulators | 16 accumulators |
//! | f16 rows x f32 query | AVX-512F (`vcvtph2ps`), FMA | F16C + FMA | bit conversion |
//! | i8 rows x i8 query | AVX-512 VNNI (`vpdpbusd`) | `vpmaddubsw` + `vpmaddwd` | i32 sums |
//!
//! The f32 and f16 kernels sum in different orders, so their results differ in the last bits
//! from one kernel to another (all are checked against the portable one); the one chosen on a
//! machine is the same for every query, so scores are reproducible there. The i8 kernels are
//! exact integer sums: every kernel returns the same value.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Accumulators in the portable f16 dot product (two AVX registers of 8 lanes).
const LANES: usize = 16;

#[cfg(test)]
use super::dot::{dot_f32_portable, f32_kernels};

/// f16 row (raw bits) x f32 query.
pub(crate) type DotF16 = fn(&[u16], &[f32]) -> f32;
/// i8 row x i8 query, both with codes in `-127..=127`: the exact sum (wrapping past `i32`,
/// which needs more than 133,000 dimensions of extreme codes).
pub(crate) type DotI8 = fn(&[i8], &[i8]) -> i32;

/// The compact formats' kernels of this CPU (the f32 one is `super::dot::kernel`). Each reads
/// `min(a.len(), b.len())` elements.
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    pub(crate) f16: DotF16,
    pub(crate) i8: DotI8,
}

impl Kernels {
    /// The fastest kernel of each format that this CPU runs (detected once).
    pub(crate) fn detect() -> Kernels {
        static KERNELS: OnceLock<Kernels> = OnceLock::new();
        *KERNELS.get_or_init(|| Kernels {
            f16: f16_kernels()[0].1,
            i8: i8_kernels()[0].1,
        })
    }
}

/// Every f16 kernel this CPU runs, fastest first; the portable one is last.
pub(crate) fn f16_kernels() -> Vec<(&'static str, DotF16)> {
    let mut out: Vec<(&'static str, DotF16)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx512f() {
            out.push(("avx512f", dot_f16_avx512));
        }
        if super::avx2_fma() && std::arch::is_x86_feature_detected!("f16c") {
            out.push(("avx2+fma+f16c", dot_f16_avx2));
        }
    }
    out.push(("portable", dot_f16_portable));
    out
}

/// Every i8 kernel this CPU runs, fastest first; the portable one is last.
pub(crate) fn i8_kernels() -> Vec<(&'static str, DotI8)> {
    let mut out: Vec<(&'static str, DotI8)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx512_vnni() {
            out.push(("avx512vnni", dot_i8_vnni512));
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            out.push(("avx2", dot_i8_avx2));
        }
    }
    out.push(("portable", dot_i8_portable));
    out
}

// ---------------------------------------------------------------------------------------------
// Portable kernels (the references the others are tested against).

/// `sum(f32(a[i]) * b[i])`, each f16 converted by [`f16_to_f32`].
pub(crate) fn dot_f16_portable(a: &[u16], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += f16_to_f32(x[i]) * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += f16_to_f32(*x) * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// `sum(a[i] * b[i])` in `i32` (wrapping, as the SIMD kernels do).
pub(crate) fn dot_i8_portable(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).fold(0i32, |s, (&x, &y)| {
        s.wrapping_add(i32::from(x) * i32::from(y))
    })
}

// f16 conversion by hand: the `half` crate is only a dependency of the `models` feature, and
// the model-free core needs just these two functions (the scan itself converts with F16C or
// AVX-512 instructions where the CPU has them; these are the portable path and the encoder).

/// The IEEE binary16 bits nearest to `x` (ties to even; overflow to infinity; NaN stays a
/// quiet NaN), as F16C's `vcvtps2ph` with round-to-nearest computes them.
pub(crate) fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        // infinity, or NaN (quiet, upper payload bits kept)
        let nan = if man != 0 {
            0x200 | (man >> 13) as u16
        } else {
            0
        };
        return sign | 0x7c00 | nan;
    }
    // the exponent re-biased for f16 (bias 15 instead of 127)
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // a subnormal f16 (or zero): units of 2^-24
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32; // 14..=24
        let h = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        let h = if rem > halfway || (rem == halfway && h & 1 == 1) {
            h + 1
        } else {
            h
        };
        return sign | h as u16;
    }
    let h = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    // rounding up may carry into the exponent, up to infinity: both are the right bits
    let h = if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h + 1
    } else {
        h
    };
    sign | h as u16
}

/// The f32 value of IEEE binary16 bits (exact).
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // subnormal: man x 2^-24, exact in f32
            let v = man as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        0x1f => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

// ---------------------------------------------------------------------------------------------
// x86-64 kernels. Each safe wrapper is only handed out by the `*_kernels` lists above after
// the CPU reported the features its inner function is compiled for.

/// f16 x f32 dot product with F16C conversions (8 halves at a time) and AVX2 FMAs.
#[cfg(target_arch = "x86_64")]
fn dot_f16_avx2(a: &[u16], b: &[f32]) -> f32 {
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn inner(a: &[u16], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: every load reads 8 halves / 8 floats starting at most at n - 8 in both
        // slices (unaligned loads).
        unsafe {
            while i + 32 <= n {
                for (j, s) in acc.iter_mut().enumerate() {
                    let h = _mm_loadu_si128(pa.add(i + 8 * j) as *const __m128i);
                    let y = _mm256_loadu_ps(pb.add(i + 8 * j));
                    *s = _mm256_fmadd_ps(_mm256_cvtph_ps(h), y, *s);
                }
                i += 32;
            }
            while i + 8 <= n {
                let h = _mm_loadu_si128(pa.add(i) as *const __m128i);
                let y = _mm256_loadu_ps(pb.add(i));
                acc[0] = _mm256_fmadd_ps(_mm256_cvtph_ps(h), y, acc[0]);
                i += 8;
            }
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds 8 floats (unaligned store).
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
        let mut tail = 0f32;
        for t in i..n {
            tail = f16_to_f32(a[t]).mul_add(b[t], tail);
        }
        lanes.iter().sum::<f32>() + tail
    }
    // SAFETY: only listed by `f16_kernels` after the CPU reported AVX2, FMA and F16C.
    unsafe { inner(a, b) }
}

/// f16 x f32 dot product with AVX-512F: 16 halves converted at a time, four accumulators.
#[cfg(target_arch = "x86_64")]
fn dot_f16_avx512(a: &[u16], b: &[f32]) -> f32 {
    #[target_feature(enable = "avx512f")]
    unsafe fn inner(a: &[u16], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: every load reads 16 halves / 16 floats starting at most at n - 16 in both
        // slices (unaligned loads).
        unsafe {
            while i + 64 <= n {
                for (j, s) in acc.iter_mut().enumerate() {
                    let h = _mm256_loadu_si256(pa.add(i + 16 * j) as *const __m256i);
                    let y = _mm512_loadu_ps(pb.add(i + 16 * j));
                    *s = _mm512_fmadd_ps(_mm512_cvtph_ps(h), y, *s);
                }
                i += 64;
            }
            while i + 16 <= n {
                let h = _mm256_loadu_si256(pa.add(i) as *const __m256i);
                let y = _mm512_loadu_ps(pb.add(i));
                acc[0] = _mm512_fmadd_ps(_mm512_cvtph_ps(h), y, acc[0]);
                i += 16;
            }
        }
        let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        let mut tail = 0f32;
        for t in i..n {
            tail = f16_to_f32(a[t]).mul_add(b[t], tail);
        }
        _mm512_reduce_add_ps(s) + tail
    }
    // SAFETY: only listed by `f16_kernels` after the CPU reported AVX-512F.
    unsafe { inner(a, b) }
}

/// i8 dot product with AVX2: `|b|` (unsigned) times `a` with `b`'s sign, in pairs to i16
/// (`vpmaddubsw`; exact, as `2 x 127 x 127 < 2^15` for codes in -127..=127), then to i32
/// (`vpmaddwd`).
#[cfg(target_arch = "x86_64")]
fn dot_i8_avx2(a: &[i8], b: &[i8]) -> i32 {
    #[target_feature(enable = "avx2")]
    unsafe fn inner(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); 2];
        let mut i = 0;
        // SAFETY: every load reads 32 bytes starting at most at n - 32 in both slices
        // (unaligned loads).
        unsafe {
            while i + 32 <= n {
                let j = (i / 32) % 2;
                let x = _mm256_loadu_si256(pa.add(i) as *const __m256i);
                let y = _mm256_loadu_si256(pb.add(i) as *const __m256i);
                let pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(y), _mm256_sign_epi8(x, y));
                acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(pairs, ones));
                i += 32;
            }
        }
        let mut lanes = [0i32; 8];
        // SAFETY: `lanes` holds 8 i32 (unaligned store).
        unsafe {
            _mm256_storeu_si256(
                lanes.as_mut_ptr() as *mut __m256i,
                _mm256_add_epi32(acc[0], acc[1]),
            )
        };
        let tail = dot_i8_portable(&a[i..n], &b[i..n]);
        lanes.iter().fold(tail, |s, &x| s.wrapping_add(x))
    }
    // SAFETY: only listed by `i8_kernels` after the CPU reported AVX2.
    unsafe { inner(a, b) }
}

/// i8 dot product with AVX-512 VNNI: `|b|` (unsigned) times `a` with `b`'s sign, four
/// products at a time into i32 (`vpdpbusd`), a masked tail.
#[cfg(target_arch = "x86_64")]
fn dot_i8_vnni512(a: &[i8], b: &[i8]) -> i32 {
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn inner(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let zero = _mm512_setzero_si512();
        let mut acc = [zero; 2];
        let mut i = 0;
        // SAFETY: every unmasked load reads 64 bytes starting at most at n - 64 in both
        // slices; the masked tail reads only the n - i < 64 bytes left (masked-off lanes are
        // not accessed).
        unsafe {
            while i < n {
                let mask: __mmask64 = if n - i >= 64 {
                    !0
                } else {
                    (1u64 << (n - i)) - 1
                };
                let x = _mm512_maskz_loadu_epi8(mask, pa.add(i));
                let y = _mm512_maskz_loadu_epi8(mask, pb.add(i));
                let negative = _mm512_movepi8_mask(y);
                let signed = _mm512_mask_sub_epi8(x, negative, zero, x);
                let j = (i / 64) % 2;
                acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_abs_epi8(y), signed);
                i += 64;
            }
        }
        _mm512_reduce_add_epi32(_mm512_add_epi32(acc[0], acc[1]))
    }
    // SAFETY: only listed by `i8_kernels` after the CPU reported AVX-512F, BW and VNNI.
    unsafe { inner(a, b) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference(a: &[f32], b: &[f32]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum()
    }

    /// Tolerance of an f32 sum of `n` products of magnitude <= 1.
    fn tol(n: usize) -> f64 {
        1e-6 * (n as f64 + 1.0)
    }

    #[test]
    fn the_lists_end_with_the_portable_kernel() {
        assert_eq!(f32_kernels().last().unwrap().0, "portable");
        assert_eq!(f16_kernels().last().unwrap().0, "portable");
        assert_eq!(i8_kernels().last().unwrap().0, "portable");
        eprintln!(
            "kernels: f32 {:?}, f16 {:?}, i8 {:?}",
            f32_kernels().iter().map(|k| k.0).collect::<Vec<_>>(),
            f16_kernels().iter().map(|k| k.0).collect::<Vec<_>>(),
            i8_kernels().iter().map(|k| k.0).collect::<Vec<_>>()
        );
    }

    #[test]
    fn f32_kernels_agree_with_a_plain_sum() {
        for n in [0, 1, 5, 15, 16, 17, 31, 63, 64, 65, 100, 127, 384, 1000] {
            let a: Vec<f32> = (0..n).map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5).collect();
            let want = reference(&a, &b);
            for (name, dot) in f32_kernels() {
                assert!((f64::from(dot(&a, &b)) - want).abs() < tol(n), "{name} {n}");
            }
        }
    }

    #[test]
    fn kernels_read_only_the_shorter_slice() {
        let a = vec![1f32; 40];
        let b = vec![1f32; 33];
        for (name, dot) in f32_kernels() {
            assert_eq!(dot(&a, &b), 33.0, "{name}");
        }
        let h = vec![f32_to_f16(1.0); 33];
        for (name, dot) in f16_kernels() {
            assert_eq!(dot(&h, &a), 33.0, "{name}");
        }
        let (x, y) = (vec![2i8; 130], vec![3i8; 129]);
        for (name, dot) in i8_kernels() {
            assert_eq!(dot(&x, &y), 6 * 129, "{name}");
        }
    }

    #[test]
    fn i8_kernels_are_exact_at_the_extremes() {
        for n in [1, 31, 32, 64, 65, 384, 1000] {
            for (p, q) in [(127i8, 127i8), (-127, 127), (-127, -127), (0, -127)] {
                let (a, b) = (vec![p; n], vec![q; n]);
                let want = i32::from(p) * i32::from(q) * n as i32;
                for (name, dot) in i8_kernels() {
                    assert_eq!(dot(&a, &b), want, "{name} {n} {p} {q}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn f32_kernels_match_the_portable_one(
            pairs in prop::collection::vec((-1f32..1f32, -1f32..1f32), 0..600)
        ) {
            let (a, b): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            let want = f64::from(dot_f32_portable(&a, &b));
            for (name, dot) in f32_kernels() {
                let got = f64::from(dot(&a, &b));
                prop_assert!((got - want).abs() < tol(a.len()), "{} {} {}", name, got, want);
            }
        }

        #[test]
        fn f16_kernels_match_the_portable_one(
            pairs in prop::collection::vec((-1f32..1f32, -1f32..1f32), 0..600)
        ) {
            let (a, b): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
            let h: Vec<u16> = a.iter().map(|&x| f32_to_f16(x)).collect();
            let want = f64::from(dot_f16_portable(&h, &b));
            let decoded: Vec<f32> = h.iter().map(|&x| f16_to_f32(x)).collect();
            prop_assert!((reference(&decoded, &b) - want).abs() < tol(a.len()));
            for (name, dot) in f16_kernels() {
                let got = f64::from(dot(&h, &b));
                prop_assert!((got - want).abs() < tol(a.len()), "{} {} {}", name, got, want);
            }
        }

        #[test]
        fn i8_kernels_equal_the_portable_one(
            pairs in prop::collection::vec((-127i8..=127, -127i8..=127), 0..700)
        ) {
            let (a, b): (Vec<i8>, Vec<i8>) = pairs.into_iter().unzip();
            let want: i32 = a.iter().zip(&b).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum();
            for (name, dot) in i8_kernels() {
                prop_assert_eq!(dot(&a, &b), want, "{}", name);
            }
        }
    }

    #[test]
    fn f16_round_trips_every_value() {
        for h in 0..=u16::MAX {
            let x = f16_to_f32(h);
            if x.is_nan() {
                assert!(f32_to_f16(x) & 0x7c00 == 0x7c00 && f32_to_f16(x) & 0x3ff != 0);
            } else {
                assert_eq!(f32_to_f16(x), h, "{h:#x} {x}");
            }
        }
    }

    #[test]
    fn f16_known_values() {
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00); // rounds up to infinity
        assert_eq!(f32_to_f16(1e-8), 0); // below half the smallest subnormal
        assert_eq!(f32_to_f16(2f32.powi(-24)), 1);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        assert_eq!(f32_to_f16(f32::INFINITY), 0x7c00);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        // ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
    }

    /// F16C's conversion (round to nearest even), where the CPU has it.
    #[cfg(target_arch = "x86_64")]
    fn hardware_f16(x: f32) -> Option<u16> {
        #[target_feature(enable = "f16c")]
        unsafe fn convert(x: f32) -> u16 {
            use std::arch::x86_64::*;
            let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set1_ps(x));
            _mm_extract_epi16::<0>(h) as u16
        }
        // SAFETY: called only after the CPU reported F16C.
        std::arch::is_x86_feature_detected!("f16c").then(|| unsafe { convert(x) })
    }

    proptest! {
        #[test]
        fn f16_encoding_matches_the_hardware(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            #[cfg(target_arch = "x86_64")]
            if let Some(h) = hardware_f16(x) {
                prop_assert_eq!(f32_to_f16(x), h, "{:#x}", bits);
            }
            // and it is the nearest: no f16 lies strictly closer
            let h = f32_to_f16(x);
            if x.is_finite() && x.abs() < 65504.0 {
                let y = f64::from(f16_to_f32(h));
                let err = (y - f64::from(x)).abs();
                for n in [h.wrapping_add(1), h.wrapping_sub(1)] {
                    let z = f64::from(f16_to_f32(n));
                    if z.is_finite() {
                        prop_assert!(err <= (z - f64::from(x)).abs());
                    }
                }
            }
        }
    }
}
