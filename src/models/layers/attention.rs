//! Scaled dot-product attention over a packed batch, the one the encoders share (BERT / XLM-R,
//! ModernBERT, GTE / NomicBERT): the tokens of all sequences are rows of one
//! `(tokens, 3 * hidden)` matrix of stacked queries, keys and values, and each token attends
//! to the keys of its own sequence only, all of them (global) or those within a window.
//!
//! One rayon task per (sequence, block of queries: [`QUERY_BLOCK`], or up to
//! [`FUSED_QUERY_BLOCK`] where the fused kernel runs without a window) computes every head of
//! its rows: the block's scores cover only the keys its queries can see (the whole sequence,
//! or the block widened by the window), so they stay in cache and a long sequence never fills a
//! `(length, length)` matrix; each head's output is written straight into the task's rows of
//! the context, at the head's columns. On AVX-512 or AVX2 (heads of 16, 32, 64 or 128 values,
//! blocks of at least 8 queries) each head is one fused kernel (`simd::attention`); elsewhere
//! two `gemm` products around a row softmax.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::models::layers::kernels::{
    matmul, simd, softmax_row, softmax_rows, threads, with_scratch, Mat, Threads,
};
#[cfg(target_arch = "x86_64")]
use crate::simd::{attention::Head, FloatIsa};
use pulp::{Simd, WithSimd};

use crate::{Error, Result};

/// Queries per attention task.
pub(crate) const QUERY_BLOCK: usize = 64;

/// The most queries per task for the fused kernel without a window. Each task packs the keys
/// and values of every head once for its queries, so larger blocks copy less (with blocks of
/// 64, the copies of 256-token sequences took 2 % of an encoder's time on AVX2); blocks stay
/// small enough to give every thread four tasks.
#[cfg(target_arch = "x86_64")]
const FUSED_QUERY_BLOCK: usize = 256;

/// The attention's shape: `heads` heads of `dim` values, `hidden` in all.
#[derive(Clone, Copy)]
pub(crate) struct Heads {
    pub hidden: usize,
    pub heads: usize,
    pub dim: usize,
}

/// The fewest queries a sequence runs the fused kernel for (a group of 8 or 16 queries costs
/// the same with fewer: one query per sequence, as a last layer that only needs the first
/// token's row, stays on the matrix-vector path). The choice is the sequence's, never a
/// block's: a token's context is the same however the batch is split into tasks.
#[cfg(target_arch = "x86_64")]
const FUSED_MIN_QUERIES: usize = 8;

thread_local! {
    /// Attention scores of one task, reused across calls on this thread.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A task's keys and values of one head, packed, and the fused kernel's scratch.
    #[cfg(target_arch = "x86_64")]
    static FUSED: RefCell<[Vec<f32>; 3]> =
        const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// Attention within each sequence of a packed batch (sequence `s` is rows
/// `starts[s]..starts[s] + lens[s]` of `qkv`, queries then keys then values in each row), all
/// heads, into `ctx`: one row per token, or per sequence with `first_only` (the query is the
/// sequence's first token). Every token of sequence `s` attends to its first `keys[s]` tokens
/// only (`keys == lens`, but for ColBERT's query expansion tokens, which are queries and never
/// keys). With a `window`, query `i` sees the keys `j` with `|i - j| <= window` only; a query
/// that sees no key gets a zero context.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    qkv: &[f32],
    ctx: &mut [f32],
    lens: &[usize],
    starts: &[usize],
    keys: &[usize],
    shape: Heads,
    window: Option<usize>,
    first_only: bool,
) {
    let Heads {
        hidden: h,
        heads,
        dim: d,
    } = shape;
    let all = Mat::new(qkv, lens.iter().sum(), 3 * h);
    let scale = 1.0 / (d as f32).sqrt();
    #[cfg(target_arch = "x86_64")]
    let isa = FloatIsa::detect();
    let queries = |len: usize| if first_only { 1 } else { len };
    #[cfg(target_arch = "x86_64")]
    let block = if window.is_none() && Head::supported(isa, d) {
        let rows: usize = lens.iter().map(|&len| queries(len)).sum();
        let per_task = match threads() {
            1 => rows,
            n => rows / (4 * n),
        };
        per_task.clamp(QUERY_BLOCK, FUSED_QUERY_BLOCK) / 8 * 8
    } else {
        QUERY_BLOCK
    };
    #[cfg(not(target_arch = "x86_64"))]
    let block = QUERY_BLOCK;
    // One task per (sequence, block of queries), with its rows of `ctx`.
    let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::new();
    let mut rest = ctx;
    for (s, &len) in lens.iter().enumerate() {
        let (mine, tail) = rest.split_at_mut(queries(len) * h);
        rest = tail;
        for (b, rows) in mine.chunks_mut(block * h).enumerate() {
            tasks.push((s, b * block, rows));
        }
    }
    tasks.into_par_iter().for_each(|(s, q0, out)| {
        let (start, len) = (starts[s], keys[s].min(lens[s]));
        let nq = out.len() / h;
        let q1 = q0 + nq;
        // The keys any query of the block sees.
        let (k0, k1) = match window {
            None => (0, len),
            Some(w) => (q0.saturating_sub(w).min(len), (q1 + w).min(len)),
        };
        let nk = k1 - k0;
        if nk == 0 {
            out.fill(0.0);
            return;
        }
        // The fused kernel's window is about the block's own rows, all of them keys.
        let partial = len < lens[s] && window.is_some();
        #[cfg(target_arch = "x86_64")]
        // Every block of a sequence of enough queries runs the fused kernel, a short last
        // block too, so that a token's context does not depend on how the batch was split.
        if queries(lens[s]) >= FUSED_MIN_QUERIES && Head::supported(isa, d) && !partial {
            let offset = q0 - k0;
            with_scratch(&FUSED, |[keys, values, scratch]| {
                let key_rows = Head::key_rows(nk);
                keys.resize(key_rows * d, 0.0);
                values.resize(nk * d, 0.0);
                for hd in 0..heads {
                    // Key or value `j` of this head (`part` 1 or 2 of the row).
                    let column = |part: usize, j: usize| {
                        let at = (start + k0 + j) * 3 * h + part * h + hd * d;
                        &qkv[at..at + d]
                    };
                    // The keys packed (the scores' kernel reads 8 keys at constant offsets),
                    // and the values (rows `3 * hidden` apart in place, a stride that maps
                    // them onto a few sets of the level-1 cache).
                    for (j, key) in keys.chunks_exact_mut(d).enumerate() {
                        match j < nk {
                            true => key.copy_from_slice(column(1, j)),
                            false => key.fill(0.0),
                        }
                    }
                    for (j, value) in values.chunks_exact_mut(d).enumerate() {
                        value.copy_from_slice(column(2, j));
                    }
                    Head {
                        q: &qkv[(start + q0) * 3 * h + hd * d..],
                        q_stride: 3 * h,
                        queries: nq,
                        keys,
                        values,
                        nk,
                        d,
                        scale,
                        window: window.map(|w| (w, offset)),
                        out: &mut out[hd * d..],
                        out_stride: h,
                    }
                    .run(isa, scratch);
                }
            });
            return;
        }
        // Each query's own keys (the fused kernel masks them lane by lane instead).
        let ranges: Vec<(usize, usize)> = match window {
            None => Vec::new(),
            Some(w) => (q0..q1)
                .map(|i| {
                    let hi = (i + w + 1).min(len);
                    (i.saturating_sub(w).min(hi) - k0, hi - k0)
                })
                .collect(),
        };
        with_scratch(&SCORES, |scores| {
            if scores.len() < nq * nk {
                scores.resize(nq * nk, 0.0);
            }
            let scores = &mut scores[..nq * nk];
            for hd in 0..heads {
                let q = all.block(start + q0, nq, hd * d, d);
                let k = all.block(start + k0, nk, h + hd * d, d);
                let v = all.block(start + k0, nk, 2 * h + hd * d, d);
                matmul(q, k.t(), scores, nk, scale, false, Threads::One);
                match window {
                    None => softmax_rows(scores, nk),
                    Some(_) => softmax_in_windows(scores, nk, &ranges),
                }
                let p = Mat::new(scores, nq, nk);
                matmul(p, v, &mut out[hd * d..], h, 1.0, false, Threads::One);
            }
        });
    });
}

/// The keys each sequence of `lens` tokens attends to: `keys` when given (one per sequence,
/// each between 1 and its length), else every token. An [`Error::InvalidInput`] otherwise.
pub(crate) fn check_keys(keys: Option<&[usize]>, lens: &[usize]) -> Result<Vec<usize>> {
    let Some(keys) = keys else {
        return Ok(lens.to_vec());
    };
    let fits = keys.len() == lens.len()
        && keys
            .iter()
            .zip(lens)
            .all(|(&k, &len)| (1..=len).contains(&k));
    if !fits {
        return Err(Error::InvalidInput(format!(
            "attended keys {keys:?} do not fit sequences of {lens:?} tokens (one count per \
             sequence, each between 1 and its length)"
        )));
    }
    Ok(keys.to_vec())
}

/// Softmax of `scores` (`(rows, width)`) with row `r` over its columns `ranges[r]` only, the
/// columns outside set to zero; vectorized.
fn softmax_in_windows(scores: &mut [f32], width: usize, ranges: &[(usize, usize)]) {
    struct Op<'a> {
        scores: &'a mut [f32],
        width: usize,
        ranges: &'a [(usize, usize)],
    }
    impl WithSimd for Op<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) {
            for (row, &(lo, hi)) in self.scores.chunks_exact_mut(self.width).zip(self.ranges) {
                row[..lo].fill(0.0);
                row[hi..].fill(0.0);
                softmax_row(&mut row[lo..hi]);
            }
        }
    }
    simd(Op {
        scores,
        width,
        ranges,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::noise;

    /// Attention of one head in float64, by the definition, with an optional window, over the
    /// first `visible` keys (a query that sees none gets zeros).
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        d: usize,
        window: Option<usize>,
        visible: usize,
    ) -> Vec<f64> {
        let n = q.len() / d;
        let mut out = vec![0.0; n * d];
        for i in 0..n {
            let keys: Vec<usize> = (0..visible)
                .filter(|&j| window.is_none_or(|w| i.abs_diff(j) <= w))
                .collect();
            let scores: Vec<f64> = keys
                .iter()
                .map(|&j| {
                    (0..d)
                        .map(|c| q[i * d + c] as f64 * k[j * d + c] as f64)
                        .sum::<f64>()
                        / (d as f64).sqrt()
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = scores.iter().map(|s| (s - max).exp()).sum();
            for (&j, s) in keys.iter().zip(&scores) {
                let p = (s - max).exp() / z;
                for c in 0..d {
                    out[i * d + c] += p * v[j * d + c] as f64;
                }
            }
        }
        out
    }

    /// Packed attention over sequences longer and shorter than the window and than a block of
    /// queries equals the per-sequence definition, globally and in a window, with every token
    /// a key or only the leading ones (queries past them, beyond the window, see none); the
    /// first-token rows equal the first rows of the whole.
    #[test]
    fn windowed_packed_attention_matches_the_definition() {
        // Heads of 4 values run the two products; of 32 and 64, the fused kernel where the
        // CPU has it (AVX-512 or AVX2; `simd::attention`'s test runs both).
        for (heads, d) in [(2, 4), (2, 32), (3, 64)] {
            packed_attention_matches_the_definition(heads, d);
        }
    }

    fn packed_attention_matches_the_definition(heads: usize, d: usize) {
        let h = heads * d;
        let lens = [150usize, 3, 70, 1];
        let total: usize = lens.iter().sum();
        let qkv = noise(total * 3 * h, 7);
        let starts = crate::models::packed_starts(&lens);
        let shape = Heads {
            hidden: h,
            heads,
            dim: d,
        };
        let some_keys = [100usize, 2, 70, 1];
        let cases = [None, Some(8), Some(500)]
            .into_iter()
            .flat_map(|w| [(w, &lens), (w, &some_keys)]);
        for (window, keys) in cases {
            let mut ctx = vec![0.0; total * h];
            attention(&qkv, &mut ctx, &lens, &starts, keys, shape, window, false);
            let mut first = vec![0.0; lens.len() * h];
            attention(&qkv, &mut first, &lens, &starts, keys, shape, window, true);
            for (s, (&start, &len)) in starts.iter().zip(&lens).enumerate() {
                for hd in 0..heads {
                    let pick = |part: usize| -> Vec<f32> {
                        (start..start + len)
                            .flat_map(|r| {
                                let c = part * h + hd * d;
                                qkv[r * 3 * h + c..r * 3 * h + c + d].to_vec()
                            })
                            .collect()
                    };
                    let want = reference(&pick(0), &pick(1), &pick(2), d, window, keys[s]);
                    for r in 0..len {
                        for c in 0..d {
                            let got = ctx[(start + r) * h + hd * d + c] as f64;
                            let w = want[r * d + c];
                            assert!(
                                (got - w).abs() < 1e-5,
                                "d {d} {window:?} seq {s} row {r}: {got} {w}"
                            );
                        }
                    }
                    // One query row runs gemm's matrix-vector path: the same up to rounding.
                    let got = &first[s * h + hd * d..][..d];
                    let all = &ctx[start * h + hd * d..][..d];
                    for (g, a) in got.iter().zip(all) {
                        assert!((g - a).abs() < 1e-6, "d {d} {window:?} seq {s}: {g} {a}");
                    }
                }
            }
        }
    }
}
