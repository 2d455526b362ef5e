//! The f32 dot product, one kernel for the whole crate (the dense scan, `embed::cosine`, the
//! Qwen3 scorer's head, the decode steps' attention and matrix-vector products), picked at run
//! time: AVX-512F, AVX2 + FMA, or a portable loop the compiler vectorizes. The kernels sum in
//! different orders, so their results differ in the last bits from one to another (each is
//! tested against the portable one, in `dense`'s tests); the one chosen on a machine is always
//! the same, so results are reproducible there.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Accumulators of the portable loop (two AVX registers of 8 lanes).
const LANES: usize = 16;

/// An f32 dot product over `min(a.len(), b.len())` elements.
pub(crate) type DotF32 = fn(&[f32], &[f32]) -> f32;

/// The fastest f32 kernel of this CPU (detected once), for loops that call it many times.
pub(crate) fn kernel() -> DotF32 {
    static KERNEL: OnceLock<DotF32> = OnceLock::new();
    *KERNEL.get_or_init(|| f32_kernels()[0].1)
}

/// `Σ a[i] b[i]` over `min(a.len(), b.len())` elements, on [`kernel`].
#[inline]
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    kernel()(a, b)
}

/// Every f32 kernel this CPU runs, fastest first; the portable one is last.
pub(crate) fn f32_kernels() -> Vec<(&'static str, DotF32)> {
    let mut out: Vec<(&'static str, DotF32)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if super::avx512f() {
            out.push(("avx512f", dot_f32_avx512));
        }
        if super::avx2_fma() {
            out.push(("avx2+fma", dot_f32_avx2));
        }
    }
    out.push(("portable", dot_f32_portable));
    out
}

/// `sum(a[i] * b[i])` with [`LANES`] independent accumulators (vectorizable).
#[inline(always)]
pub(crate) fn dot_f32_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

// x86-64 kernels, each handed out by `f32_kernels` only after the CPU reported the features its
// inner function is compiled for.

/// [`dot_f32_portable`]'s loop with fused multiply-adds, compiled for AVX2 + FMA.
#[cfg(target_arch = "x86_64")]
fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn inner(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; LANES];
        let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
        let (ra, rb) = (ca.remainder(), cb.remainder());
        for (x, y) in ca.zip(cb) {
            for i in 0..LANES {
                acc[i] = x[i].mul_add(y[i], acc[i]);
            }
        }
        let mut tail = 0f32;
        for (x, y) in ra.iter().zip(rb) {
            tail = x.mul_add(*y, tail);
        }
        acc.iter().sum::<f32>() + tail
    }
    // SAFETY: only listed by `f32_kernels` after the CPU reported AVX2 and FMA.
    unsafe { inner(a, b) }
}

/// f32 dot product with AVX-512F: four 16-lane FMA accumulators, a masked tail.
#[cfg(target_arch = "x86_64")]
fn dot_f32_avx512(a: &[f32], b: &[f32]) -> f32 {
    #[target_feature(enable = "avx512f")]
    unsafe fn inner(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: every unmasked load reads 16 floats starting at most at n - 16 in both
        // slices; the masked tail reads only the n - i < 16 lanes left (masked-off lanes are
        // not accessed).
        unsafe {
            while i + 64 <= n {
                for (j, s) in acc.iter_mut().enumerate() {
                    let x = _mm512_loadu_ps(pa.add(i + 16 * j));
                    let y = _mm512_loadu_ps(pb.add(i + 16 * j));
                    *s = _mm512_fmadd_ps(x, y, *s);
                }
                i += 64;
            }
            while i + 16 <= n {
                let x = _mm512_loadu_ps(pa.add(i));
                let y = _mm512_loadu_ps(pb.add(i));
                acc[0] = _mm512_fmadd_ps(x, y, acc[0]);
                i += 16;
            }
            if i < n {
                let mask: __mmask16 = ((1u32 << (n - i)) - 1) as u16;
                let x = _mm512_maskz_loadu_ps(mask, pa.add(i));
                let y = _mm512_maskz_loadu_ps(mask, pb.add(i));
                acc[1] = _mm512_fmadd_ps(x, y, acc[1]);
            }
        }
        let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_reduce_add_ps(s)
    }
    // SAFETY: only listed by `f32_kernels` after the CPU reported AVX-512F.
    unsafe { inner(a, b) }
}
