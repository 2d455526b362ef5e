//! The element-wise and row-wise steps of a Qwen3 decoder, vectorized like `models::layers::kernels`
//! (each loop runs inside a `pulp` dispatch, compiled for the widest instructions present):
//! `SiLU(gate) * up` here; RMSNorm of rows and the per-head q/k RMSNorm fused with RoPE are
//! the shared layer's (`models::layers::rms`), re-exported.
//!
//! All buffers are row-major `f32`. The row functions run in parallel on the current rayon pool
//! ([`ROWS_PER_TASK`] rows a task); the `_row` functions are the single-row building blocks
//! (for a decode step, which has one row and must not wake the pool). Slice lengths are checked
//! with asserts: a mismatch is a bug in this crate, never the consequence of user input.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::models::layers::kernels::{exp, simd};
pub(crate) use crate::models::layers::rms::{
    norm_rope_row, norm_rope_rows, rms_norm_row, rms_norm_rows, QkNormWeights, QkvLayout,
    ROWS_PER_TASK,
};
pub(crate) use crate::models::layers::rope::Rope;

/// `out[j] = silu(gate[j]) * up[j]` for one fused row `[gate | up]` (`2 * out.len()` values),
/// with `silu(g) = g / (1 + e^-g)`.
#[inline(always)]
pub(crate) fn silu_mul_row(gate_up: &[f32], out: &mut [f32]) {
    let (gate, up) = gate_up.split_at(out.len());
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + exp(-g)) * u;
    }
}

/// [`silu_mul_row`] on every row: `gate_up` is `(rows, 2 * ffn)`, `out` is `(rows, ffn)`.
pub(crate) fn silu_mul_rows(gate_up: &[f32], out: &mut [f32], ffn: usize) {
    assert!(ffn > 0 && out.len().is_multiple_of(ffn) && gate_up.len() == 2 * out.len());
    struct Op<'a> {
        gate_up: &'a [f32],
        out: &'a mut [f32],
        ffn: usize,
    }
    impl WithSimd for Op<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) {
            let f = self.ffn;
            for (gu, o) in self
                .gate_up
                .chunks_exact(2 * f)
                .zip(self.out.chunks_exact_mut(f))
            {
                silu_mul_row(gu, o);
            }
        }
    }
    gate_up
        .par_chunks(2 * ffn * ROWS_PER_TASK)
        .zip(out.par_chunks_mut(ffn * ROWS_PER_TASK))
        .for_each(|(gate_up, out)| simd(Op { gate_up, out, ffn }));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in `[-2, 2)`: the shared test noise, doubled (exactly).
    fn noise(n: usize, seed: u64) -> Vec<f32> {
        crate::models::noise(n, seed)
            .iter()
            .map(|v| v * 2.0)
            .collect()
    }

    fn close(got: f32, want: f64, tol: f64) -> bool {
        (got as f64 - want).abs() <= tol * want.abs().max(1.0)
    }

    #[test]
    fn silu_mul_matches_the_definition() {
        let (rows, ffn) = (21, 13);
        let gu: Vec<f32> = noise(rows * 2 * ffn, 7).iter().map(|v| v * 5.0).collect();
        let mut out = vec![0.0; rows * ffn];
        silu_mul_rows(&gu, &mut out, ffn);
        for r in 0..rows {
            for j in 0..ffn {
                let g = gu[r * 2 * ffn + j] as f64;
                let u = gu[r * 2 * ffn + ffn + j] as f64;
                let want = g / (1.0 + (-g).exp()) * u;
                assert!(close(out[r * ffn + j], want, 1e-6), "{r} {j}");
            }
        }
    }
}
