//! The `bf16` panels' kernels (the layout is described in `models::layers::panels::bf16`): reading a
//! pair of rows as `f32` (the `bf16` values are the top halves of the lanes), widening a
//! panel's block to `f32` rows, the rounding of a product's inputs to `bf16` pairs, and the
//! AVX-512 `bf16` dot-product tile (`vdpbf16ps`).

#[cfg(target_arch = "x86_64")]
use std::arch::{asm, x86_64::*};

use super::{tile_rows, Isa, Out, PanelValue, MAX_MR, NR};
use crate::simd::gemv::{bf16_to_f32, f32_to_bf16};

/// `dst` = a block of pairs (`src`, a whole number of pairs) widened to `f32` rows of [`NR`]
/// (resized to `src`'s length): a panel's block before the `f32` tiles run over it. Every
/// thread widens every block of its product, once per block of rows, so this runs as often
/// as the tiles' loads do and must be as fast.
pub(crate) fn widen(isa: Isa, src: &[u16], dst: &mut Vec<f32>) {
    assert_eq!(src.len() % (2 * NR), 0, "whole pairs of rows");
    dst.resize(src.len(), 0.0);
    match isa {
        // SAFETY (both): an `Isa::Avx2` / `Isa::Avx512` is only made (`FloatIsa::detect`) on a
        // CPU with AVX2 / AVX-512F; each step reads and writes one pair of rows (`2 NR`
        // values) inside both slices, which are whole pairs long.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { widen_avx512(src, dst) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { widen_avx2(src, dst) },
        Isa::Portable => {
            for (pair, out) in src.chunks_exact(2 * NR).zip(dst.chunks_exact_mut(2 * NR)) {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = bf16_to_f32(pair[u16::at(i / NR, i % NR)]);
                }
            }
        }
    }
}

/// [`widen`] with AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn widen_avx512(src: &[u16], dst: &mut [f32]) {
    for (s, d) in src.chunks_exact(2 * NR).zip(dst.chunks_exact_mut(2 * NR)) {
        let [even, odd] = u16::pair_avx512(s.as_ptr());
        _mm512_storeu_ps(d.as_mut_ptr(), even);
        _mm512_storeu_ps(d.as_mut_ptr().add(NR), odd);
    }
}

/// [`widen`] with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn widen_avx2(src: &[u16], dst: &mut [f32]) {
    for (s, d) in src.chunks_exact(2 * NR).zip(dst.chunks_exact_mut(2 * NR)) {
        let rows = u16::pair_avx2(s.as_ptr());
        for (r, halves) in rows.iter().enumerate() {
            _mm256_storeu_ps(d.as_mut_ptr().add(r * NR), halves[0]);
            _mm256_storeu_ps(d.as_mut_ptr().add(r * NR + 8), halves[1]);
        }
    }
}

/// The layout of `bf16` panels (see `models::layers::panels::bf16`): the even row of a pair in the low half
/// of each 32-bit lane, the odd row in the high half.
impl PanelValue for u16 {
    fn at(l: usize, c: usize) -> usize {
        (l / 2) * 2 * NR + 2 * c + l % 2
    }

    fn len(k: usize) -> usize {
        k.next_multiple_of(2) * NR
    }

    fn to_f32(self) -> f32 {
        bf16_to_f32(self)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn pair_avx512(p: *const u16) -> [__m512; 2] {
        let lanes = _mm512_loadu_si512(p.cast());
        let even = _mm512_slli_epi32::<16>(lanes);
        let odd = _mm512_and_si512(lanes, _mm512_set1_epi32(0xffff_0000_u32 as i32));
        [_mm512_castsi512_ps(even), _mm512_castsi512_ps(odd)]
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn row_avx512(p: *const u16) -> __m512 {
        u16::pair_avx512(p)[0]
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn pair_avx2(p: *const u16) -> [[__m256; 2]; 2] {
        let high = _mm256_set1_epi32(0xffff_0000_u32 as i32);
        let lo = _mm256_loadu_si256(p.cast());
        let hi = _mm256_loadu_si256(p.add(NR).cast());
        let even = |v| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v));
        let odd = |v| _mm256_castsi256_ps(_mm256_and_si256(v, high));
        [[even(lo), even(hi)], [odd(lo), odd(hi)]]
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn row_avx2(p: *const u16) -> [__m256; 2] {
        u16::pair_avx2(p)[0]
    }
}

/// `dst[q]` = the `bf16` pair of `src[2q]` (low half) and `src[2q + 1]` (high half, zero past
/// the end).
pub(crate) fn to_pairs(src: &[f32], dst: &mut [u32]) {
    assert_eq!(dst.len(), src.len().div_ceil(2));
    let whole = src.len() / 32 * 32;
    #[cfg(target_arch = "x86_64")]
    if crate::simd::avx512_bf16() {
        // SAFETY: the CPU has AVX-512F and its `bf16` instructions (checked just above); every
        // step reads 32 values below `whole` from `src` and writes 16 pairs inside `dst`.
        unsafe { to_pairs_avx512(&src[..whole], &mut dst[..whole / 2]) };
    } else {
        to_pairs_portable(&src[..whole], &mut dst[..whole / 2]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    to_pairs_portable(&src[..whole], &mut dst[..whole / 2]);
    to_pairs_portable(&src[whole..], &mut dst[whole / 2..]);
}

fn to_pairs_portable(src: &[f32], dst: &mut [u32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks(2)) {
        let hi = s.get(1).map_or(0, |&v| f32_to_bf16(v));
        *d = u32::from(f32_to_bf16(s[0])) | (u32::from(hi) << 16);
    }
}

/// [`to_pairs`] over whole runs of 32 values with `vcvtne2ps2bf16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn to_pairs_avx512(src: &[f32], dst: &mut [u32]) {
    for (s, d) in src.chunks_exact(32).zip(dst.chunks_exact_mut(16)) {
        // The first argument's values go to the high half of the result.
        let lo = _mm512_loadu_ps(s.as_ptr());
        let hi = _mm512_loadu_ps(s.as_ptr().add(16));
        let halves: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(d.as_mut_ptr().cast(), halves);
    }
}

/// One tile of `bf16` dot products: the sums over `pairs` pairs of rows of `k` of the copied
/// rows of the left operand (in pairs) against a `bf16` panel block, into [`Out`].
pub(crate) struct DotTile<'a> {
    /// The kernel's rows ([`tile_rows`] of AVX-512) of `pairs` pairs, `lda` apart.
    pub a: &'a [u32],
    pub lda: usize,
    /// `pairs x 2 NR` values.
    pub b: &'a [u16],
    /// A block to prefetch, one line per pair (the next panel's, or `b`).
    pub next: &'a [u16],
    pub pairs: usize,
    pub out: Out<'a>,
}

impl DotTile<'_> {
    #[allow(unused_mut)]
    pub fn run(mut self) {
        #[cfg(target_arch = "x86_64")]
        {
            let mr = tile_rows(Isa::Avx512);
            self.out.check(mr);
            let (pairs, lda) = (self.pairs, self.lda);
            assert!(lda >= pairs && self.a.len() >= (mr - 1) * lda + pairs);
            assert!(self.b.len() >= pairs * 2 * NR && self.next.len() >= pairs * 2 * NR);
            assert!(
                crate::simd::avx512_bf16(),
                "bf16 dot products on a CPU without them"
            );
            let (a, b, next) = (self.a.as_ptr(), self.b.as_ptr(), self.next.as_ptr());
            // SAFETY: the CPU has AVX-512F and its `bf16` dot products (asserted above); the
            // asserts keep the reads (`pairs` x `mr` words, `pairs` x `2 NR` values) inside
            // `a` and `b`, and `Out::check` the writes inside `out`.
            unsafe {
                if self.out.cols == NR {
                    match self.out.rows {
                        1..=2 => self
                            .out
                            .store_avx512(&dot_sums::<2>(a, lda, b, next, pairs)),
                        3..=4 => self
                            .out
                            .store_avx512(&dot_sums::<4>(a, lda, b, next, pairs)),
                        5..=7 => self
                            .out
                            .store_avx512(&dot_sums::<7>(a, lda, b, next, pairs)),
                        _ => self
                            .out
                            .store_avx512(&dot_sums::<14>(a, lda, b, next, pairs)),
                    }
                    return;
                }
                let acc = dot_sums::<14>(a, lda, b, next, pairs);
                let mut sums = [[0.0f32; NR]; MAX_MR];
                for (s, v) in sums.iter_mut().zip(acc) {
                    _mm512_storeu_ps(s.as_mut_ptr(), v);
                }
                self.out.store(&sums);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("bf16 dot products are x86-64 only");
    }
}

/// The inner loop of the dot-product tile: `R` (up to 14) rows x 1 vector of sums over
/// `pairs` pairs of rows of `k`, prefetching one line of `next` per pair.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
#[inline]
unsafe fn dot_sums<const R: usize>(
    a: *const u32,
    lda: usize,
    b: *const u16,
    next: *const u16,
    pairs: usize,
) -> [__m512; R] {
    let mut acc = [_mm512_setzero_ps(); R];
    for q in 0..pairs {
        _mm_prefetch::<_MM_HINT_T0>(next.add(q * 2 * NR) as *const i8);
        let bq = _mm512_loadu_ps(b.add(q * 2 * NR).cast());
        let aq = a.add(q);
        for (r, v) in acc.iter_mut().enumerate() {
            // The row's pair is broadcast from memory inside the instruction (`{1to16}`):
            // written with the intrinsic, the broadcast comes out as an instruction of its
            // own, which takes a slot of the vector units and halves the tile's rate.
            asm!(
                "vdpbf16ps {acc}, {b}, dword ptr [{a}]{{1to16}}",
                acc = inout(zmm_reg) *v,
                b = in(zmm_reg) bq,
                a = in(reg) aq.add(r * lda),
                options(pure, readonly, nostack, preserves_flags),
            );
        }
    }
    acc
}
