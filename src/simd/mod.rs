//! The crate's vector kernels and every `unsafe` block it has. The crate root denies
//! `unsafe_code`; this folder alone allows it, so that all the code whose soundness is checked
//! by hand, rather than by the compiler, is in one place, each part behind safe functions:
//!
//! - `dot` (the one f32 dot product of the crate), `dense` (the dense scan's f16 and i8 dot
//!   products, and its f16 conversions), and with the `models` feature `gemv` (one-row products over f32 / bf16
//!   weights), `panels` (the micro-kernels of the models' packed f32 / bf16 layers),
//!   `attention` (the encoders' fused attention) and `quant` (the int8 layers'
//!   integer kernels). They are `#[target_feature]` functions over
//!   `std::arch` intrinsics: calling one on a CPU without its instructions is undefined
//!   behaviour, so each is only called after this module's run-time detection reported them
//!   (the functions below, [`FloatIsa`], or a kernel list built from them). Their loads and
//!   stores go through raw pointers; each safe entry point asserts the slice lengths that keep
//!   them in bounds.
//! - `gemm` (feature `models`): the `gemm` crate's product takes raw pointers and strides;
//!   `gemm::matmul` checks that every element of its strided views lies inside its slices.
//! - `mmap` (feature `models`): mapping a file is unsafe because the file could be truncated
//!   or rewritten while mapped, and `madvise(MADV_DONTNEED)` because it drops pages that
//!   references may still point to; the weights loader (`models::layers::weights`) maps each file once,
//!   read-only, checks its length against its header, and releases only ranges it has copied.
//!
//! - `cublaslt` (feature `cuda`): the candle ports' linear layers on a CUDA device as one
//!   cuBLASLt product with the bias and the residual in it, and the attention's scores as one
//!   batched product with the padding mask in it, over raw device addresses; its safe entry
//!   points check every operand's device, format, shape and contiguity first, and hand
//!   anything else (and any product cuBLASLt cannot plan) back to candle's own operations.
//!   It also opens the crate's CUDA devices, each with one stream that every host thread
//!   queues to (cudarc's per-buffer events off: one stream orders every use).
//! - `fused` (feature `candle`): the candle ports' passes of our own (the attention's heads
//!   split, normed and rotated, then merged back; the gated activations), one pass each where
//!   candle runs several; on a CUDA device the kernels of `fused.cu` (feature `cuda`, compiled
//!   to PTX by the build script), launched on raw device addresses after every operand's
//!   shape, format and contiguity was checked.
//!
//! Not here: the models' element-wise loops (layer norm, softmax, activations, the int8
//! layers' row statistics), safe code that `pulp` compiles for the CPU's widest instructions.
//!
//! # CPU features
//!
//! Which vector instruction sets the hand-written kernels may use: what the CPU reports at run
//! time, with AVX-512 only when the crate was built with the `avx512` feature (on by default).
//!
//! Building without it (`default-features = false`) keeps every kernel on AVX2 + FMA, the
//! instruction set of CPUs without AVX-512 (AMD Zen 3, many Intel client parts). That is how
//! the AVX2 code paths are measured and profiled on a machine that has AVX-512 too: the `gemm`
//! crate's products and `pulp`'s element-wise loops follow the same feature.

#![allow(unsafe_code)]

#[cfg(all(target_arch = "x86_64", feature = "models"))]
pub(crate) mod attention;
#[cfg(feature = "candle")]
pub(crate) mod cublaslt;
pub(crate) mod dense;
pub(crate) mod dot;
#[cfg(feature = "candle")]
pub(crate) mod fused;
#[cfg(feature = "models")]
pub(crate) mod gemm;
#[cfg(feature = "models")]
pub(crate) mod gemv;
#[cfg(feature = "models")]
pub(crate) mod mmap;
#[cfg(feature = "models")]
pub(crate) mod panels;
#[cfg(feature = "models")]
pub(crate) mod quant;

/// Whether the AVX-512F kernels may run here.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx512f() -> bool {
    cfg!(feature = "avx512") && std::arch::is_x86_feature_detected!("avx512f")
}

/// Whether the AVX-512 VNNI integer kernels (`vpdpbusd`, with BW and VL) may run here.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx512_vnni() -> bool {
    avx512f()
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// Whether the AVX-512 bf16 dot products (`vdpbf16ps`, `vcvtne2ps2bf16`) may run here (the
/// models' bf16 panels are their only user).
#[cfg(all(target_arch = "x86_64", feature = "models"))]
pub(crate) fn avx512_bf16() -> bool {
    avx512f() && std::arch::is_x86_feature_detected!("avx512bf16")
}

/// Whether AVX2 with FMA is present (the baseline of the vector kernels).
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// The float kernels a CPU runs: the one three-way choice every hand-written f32 kernel makes
/// (`panels`' tiles and one-row products, `gemv`'s bf16 dot products).
/// A vector variant is only ever made on a CPU that has its instructions, which is what the
/// kernels' `unsafe` blocks rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatIsa {
    /// Plain Rust, whatever the compiler vectorizes.
    Portable,
    /// AVX2 + FMA, 256-bit.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512F, 512-bit (only with the `avx512` feature).
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl FloatIsa {
    /// The widest set this CPU runs (detected once).
    pub(crate) fn detect() -> FloatIsa {
        static ISA: std::sync::OnceLock<FloatIsa> = std::sync::OnceLock::new();
        *ISA.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if avx512f() {
                    return FloatIsa::Avx512;
                }
                if avx2_fma() {
                    return FloatIsa::Avx2;
                }
            }
            FloatIsa::Portable
        })
    }

    /// Every set this CPU runs, the portable one first (for the tests that compare kernels).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<FloatIsa> {
        #[allow(unused_mut)]
        let mut all = vec![FloatIsa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if avx2_fma() {
                all.push(FloatIsa::Avx2);
            }
            if avx512f() {
                all.push(FloatIsa::Avx512);
            }
        }
        all
    }

    /// Its name: `"avx512"`, `"avx2"` or `"portable"`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FloatIsa::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            FloatIsa::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            FloatIsa::Avx512 => "avx512",
        }
    }
}

/// The vector instruction set the crate's kernels run on here: `"avx512"`, `"avx2"` (with FMA),
/// or `"portable"` (plain Rust, whatever the compiler vectorizes). Worth logging next to any
/// timing, since the same build runs at different speeds on different CPUs.
///
/// ```
/// let isa = rerank::simd_isa();
/// assert!(["avx512", "avx2", "portable"].contains(&isa));
/// ```
pub fn simd_isa() -> &'static str {
    FloatIsa::detect().name()
}

/// The shortest of `runs` timed calls of `call`: how the kernels chosen by timing at first use
/// (the int8 products' vector width, the bf16 products' tiles) compare their candidates.
#[cfg(feature = "models")]
pub(crate) fn shortest_run(runs: usize, mut call: impl FnMut()) -> std::time::Duration {
    (0..runs)
        .map(|_| {
            let start = std::time::Instant::now();
            call();
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avx512_only_with_the_feature_and_the_cpu() {
        let isa = simd_isa();
        #[cfg(target_arch = "x86_64")]
        {
            let has = std::arch::is_x86_feature_detected!("avx512f");
            assert_eq!(isa == "avx512", cfg!(feature = "avx512") && has);
            if !has && avx2_fma() {
                assert_eq!(isa, "avx2");
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert_eq!(isa, "portable");
    }
}
