//! RMSNorm of rows, and the per-head RMSNorm and RoPE of fused QKV rows: the row-wise steps
//! of the decoder-style layers (Qwen3's and Qwen2's, and EmbeddingGemma's bidirectional
//! Gemma3 encoder), vectorized like `kernels` (each loop runs inside a `pulp` dispatch,
//! compiled for the widest instructions present).
//!
//! All buffers are row-major `f32`. The row functions run in parallel on the current rayon pool
//! ([`ROWS_PER_TASK`] rows a task); the `_row` functions are the single-row building blocks
//! (for a decode step, which has one row and must not wake the pool). Slice lengths are checked
//! with asserts: a mismatch is a bug in this crate, never the consequence of user input.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::kernels::simd;
use super::rope::{rope_head, Rope};

/// Rows per parallel task of the row-wise functions.
pub(crate) const ROWS_PER_TASK: usize = 8;

/// Lanes of the partial sums (float additions are not reassociated by the compiler; partial
/// sums are what lets the loops use vector instructions).
const LANES: usize = 8;

/// `Σ x²` in [`LANES`] partial sums.
#[inline(always)]
fn sum_squares(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v * v;
        }
    }
    acc.iter().sum::<f32>() + tail.iter().map(|&v| v * v).sum::<f32>()
}

/// `out = x / sqrt(mean(x²) + eps) * weight`, as `transformers`' `Qwen3RMSNorm` in float32.
#[inline(always)]
pub(crate) fn rms_norm_row(x: &[f32], out: &mut [f32], weight: &[f32], eps: f32) {
    let inv = 1.0 / (sum_squares(x) / x.len() as f32 + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = w * (v * inv);
    }
}

/// [`rms_norm_row`] in place.
#[inline(always)]
pub(crate) fn rms_norm_row_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let inv = 1.0 / (sum_squares(x) / x.len() as f32 + eps).sqrt();
    for (v, &w) in x.iter_mut().zip(weight) {
        *v = w * (*v * inv);
    }
}

/// `out[r] = rms_norm(x[r]) * weight` for every row of width `weight.len()`.
pub(crate) fn rms_norm_rows(x: &[f32], out: &mut [f32], weight: &[f32], eps: f32) {
    let width = weight.len();
    assert!(width > 0 && x.len().is_multiple_of(width) && out.len() == x.len());
    struct Op<'a> {
        x: &'a [f32],
        out: &'a mut [f32],
        weight: &'a [f32],
        eps: f32,
    }
    impl WithSimd for Op<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) {
            let w = self.weight.len();
            for (x, o) in self.x.chunks_exact(w).zip(self.out.chunks_exact_mut(w)) {
                rms_norm_row(x, o, self.weight, self.eps);
            }
        }
    }
    let chunk = width * ROWS_PER_TASK;
    x.par_chunks(chunk)
        .zip(out.par_chunks_mut(chunk))
        .for_each(|(x, out)| {
            simd(Op {
                x,
                out,
                weight,
                eps,
            })
        });
}

/// The layout of a fused QKV row: `q_heads` query heads, then `kv_heads` key heads, then as
/// many value heads, each `head_dim` wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QkvLayout {
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
}

impl QkvLayout {
    /// Width of the query part (`q_heads * head_dim`).
    pub fn q_width(&self) -> usize {
        self.q_heads * self.head_dim
    }

    /// Width of the key part, and of the value part (`kv_heads * head_dim`).
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Width of a fused row.
    pub fn width(&self) -> usize {
        self.q_width() + 2 * self.kv_width()
    }
}

/// The per-head RMSNorm weights of Qwen3's queries and keys, `(q_norm, k_norm)`, `head_dim`
/// values each (`None` for Qwen2, which has none).
pub(crate) type QkNormWeights<'a> = Option<(&'a [f32], &'a [f32])>;

/// The norms and rotation applied to one fused QKV row at position `pos`: every query head
/// through `q_norm` (when there is one) then RoPE, every key head through `k_norm` then RoPE;
/// values untouched.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn norm_rope_row(
    row: &mut [f32],
    layout: QkvLayout,
    norms: QkNormWeights<'_>,
    rope: &Rope,
    pos: usize,
    eps: f32,
) {
    let d = layout.head_dim;
    let (cos, sin) = rope.at(pos);
    let (q, rest) = row.split_at_mut(layout.q_width());
    let k = &mut rest[..layout.kv_width()];
    for head in q.chunks_exact_mut(d) {
        if let Some((q_norm, _)) = norms {
            rms_norm_row_in_place(head, q_norm, eps);
        }
        rope_head(head, cos, sin);
    }
    for head in k.chunks_exact_mut(d) {
        if let Some((_, k_norm)) = norms {
            rms_norm_row_in_place(head, k_norm, eps);
        }
        rope_head(head, cos, sin);
    }
}

/// [`norm_rope_row`] on every row of `qkv` (`positions.len()` rows of `layout.width()`), row
/// `r` at position `positions[r]` (which must be inside the RoPE tables).
pub(crate) fn norm_rope_rows(
    qkv: &mut [f32],
    positions: &[u32],
    layout: QkvLayout,
    norms: QkNormWeights<'_>,
    rope: &Rope,
    eps: f32,
) {
    let width = layout.width();
    assert_eq!(qkv.len(), positions.len() * width);
    if let Some((q_norm, k_norm)) = norms {
        assert!(q_norm.len() == layout.head_dim && k_norm.len() == layout.head_dim);
    }
    assert!(positions.iter().all(|&p| (p as usize) < rope.positions()));
    struct Op<'a> {
        rows: &'a mut [f32],
        positions: &'a [u32],
        layout: QkvLayout,
        norms: QkNormWeights<'a>,
        rope: &'a Rope,
        eps: f32,
    }
    impl WithSimd for Op<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) {
            let width = self.layout.width();
            for (row, &pos) in self.rows.chunks_exact_mut(width).zip(self.positions) {
                norm_rope_row(
                    row,
                    self.layout,
                    self.norms,
                    self.rope,
                    pos as usize,
                    self.eps,
                );
            }
        }
    }
    qkv.par_chunks_mut(width * ROWS_PER_TASK)
        .zip(positions.par_chunks(ROWS_PER_TASK))
        .for_each(|(rows, positions)| {
            simd(Op {
                rows,
                positions,
                layout,
                norms,
                rope,
                eps,
            })
        });
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

    fn rms64(x: &[f32], w: &[f32], eps: f64) -> Vec<f64> {
        let ms = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / x.len() as f64;
        let r = 1.0 / (ms + eps).sqrt();
        x.iter()
            .zip(w)
            .map(|(&v, &w)| v as f64 * r * w as f64)
            .collect()
    }

    fn close(got: f32, want: f64, tol: f64) -> bool {
        (got as f64 - want).abs() <= tol * want.abs().max(1.0)
    }

    #[test]
    fn rms_norm_rows_match_the_definition() {
        // 37 rows (not a multiple of the task size) of an odd width (a tail after the lanes).
        let (rows, width) = (37, 45);
        let x = noise(rows * width, 1);
        let w = noise(width, 2);
        let mut out = vec![0.0; x.len()];
        rms_norm_rows(&x, &mut out, &w, 1e-6);
        for (r, (xr, or)) in x.chunks(width).zip(out.chunks(width)).enumerate() {
            for (g, want) in or.iter().zip(rms64(xr, &w, 1e-6)) {
                assert!(close(*g, want, 1e-5), "row {r}: {g} vs {want}");
            }
        }
        let mut inplace = x[..width].to_vec();
        rms_norm_row_in_place(&mut inplace, &w, 1e-6);
        assert_eq!(inplace, out[..width]);
    }

    #[test]
    fn rope_tables_and_rotation_match_the_definition() {
        let (d, theta, positions) = (12, 10_000.0f64, 50);
        let rope = Rope::new(d, theta, positions);
        assert_eq!(rope.positions(), positions);
        for pos in [0, 1, 7, 49] {
            let head = noise(d, pos as u64 + 3);
            let mut got = head.clone();
            let (c, s) = rope.at(pos);
            rope_head(&mut got, c, s);
            for i in 0..d / 2 {
                let inv = 1.0 / theta.powf((2 * i) as f64 / d as f64);
                let (sn, cs) = (pos as f64 * inv).sin_cos();
                let (a, b) = (head[i] as f64, head[i + d / 2] as f64);
                assert!(close(got[i], a * cs - b * sn, 1e-5), "pos {pos} i {i}");
                assert!(
                    close(got[i + d / 2], b * cs + a * sn, 1e-5),
                    "pos {pos} i {i}"
                );
            }
        }
        // Position 0 is the identity.
        let head = noise(d, 9);
        let mut got = head.clone();
        let (c, s) = rope.at(0);
        rope_head(&mut got, c, s);
        assert_eq!(got, head);
    }

    #[test]
    fn norm_rope_rows_touch_q_and_k_heads_only() {
        let layout = QkvLayout {
            q_heads: 4,
            kv_heads: 2,
            head_dim: 8,
        };
        let rows = 19;
        let rope = Rope::new(8, 1e6, 32);
        let positions: Vec<u32> = (0..rows as u32).map(|r| (r * 5) % 32).collect();
        let qkv = noise(rows * layout.width(), 4);
        let (qn, kn) = (noise(8, 5), noise(8, 6));
        let mut got = qkv.clone();
        norm_rope_rows(&mut got, &positions, layout, Some((&qn, &kn)), &rope, 1e-6);
        for (r, (src, out)) in qkv
            .chunks(layout.width())
            .zip(got.chunks(layout.width()))
            .enumerate()
        {
            let (c, s) = rope.at(positions[r] as usize);
            for h in 0..layout.q_heads + layout.kv_heads {
                let norm = if h < layout.q_heads { &qn } else { &kn };
                let x = &src[h * 8..(h + 1) * 8];
                let n: Vec<f64> = rms64(x, norm, 1e-6);
                for i in 0..4 {
                    let (a, b) = (n[i], n[i + 4]);
                    let (c, s) = (c[i] as f64, s[i] as f64);
                    assert!(close(out[h * 8 + i], a * c - b * s, 1e-5));
                    assert!(close(out[h * 8 + i + 4], b * c + a * s, 1e-5));
                }
            }
            // Values are left as they were.
            let v = layout.q_width() + layout.kv_width();
            assert_eq!(&out[v..], &src[v..], "row {r}");
        }
    }

    #[test]
    fn without_qk_norms_heads_are_only_rotated() {
        let layout = QkvLayout {
            q_heads: 4,
            kv_heads: 2,
            head_dim: 8,
        };
        let rope = Rope::new(8, 1e4, 16);
        let positions: Vec<u32> = vec![0, 3, 15];
        let qkv = noise(positions.len() * layout.width(), 8);
        let mut got = qkv.clone();
        norm_rope_rows(&mut got, &positions, layout, None, &rope, 1e-6);
        for (r, (src, out)) in qkv
            .chunks(layout.width())
            .zip(got.chunks(layout.width()))
            .enumerate()
        {
            let (c, s) = rope.at(positions[r] as usize);
            let mut want = src.to_vec();
            for head in want[..layout.q_width() + layout.kv_width()].chunks_exact_mut(8) {
                rope_head(head, c, s);
            }
            assert_eq!(out, &want[..], "row {r}");
        }
    }
}
