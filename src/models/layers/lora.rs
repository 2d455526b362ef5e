//! Low-rank corrections of a weight, applied beside its product instead of merged into it: how
//! one loaded jina-embeddings-v3 runs two task adapters. `weights::Weights::merge_lora` merges
//! the documents' adapter into the weights; a query's adapter differs from it by
//! `s · (B_q · A_q - B_d · A_d)`, a [`LowRank`] of twice the adapters' rank
//! (`Weights::lora_difference`), which the query's forward pass adds to each product
//! ([`LowRank::add_product`], with the step that would have followed the product: the
//! activation, or the residual and the norm) and to each embedding row ([`LowRank::add_row`]).

use rayon::prelude::*;

use pulp::{Simd, WithSimd};

use super::kernels::{simd, Then};
use crate::simd::dot::dot_f32_portable;

/// `ΔW = left · right`, `left` `(outputs, rank)` and `right` `(rank, inputs)`, row-major: the
/// correction of a linear layer's `(outputs, inputs)` weight, or of an embedding table's
/// `(rows, width)` (its rows the outputs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LowRank {
    pub outputs: usize,
    pub inputs: usize,
    pub rank: usize,
    /// `left` transposed, `(rank, outputs)`: what a product adds, one contiguous row a rank.
    left_t: Vec<f32>,
    right: Vec<f32>,
}

/// Rows per task of [`LowRank::add_product`].
const ROWS_PER_TASK: usize = 16;

impl LowRank {
    /// `left · right` of `outputs x rank` and `rank x inputs` (row-major).
    pub fn new(
        outputs: usize,
        inputs: usize,
        rank: usize,
        left: Vec<f32>,
        right: Vec<f32>,
    ) -> Self {
        assert!(left.len() == outputs * rank && right.len() == rank * inputs);
        let mut left_t = vec![0.0; rank * outputs];
        for (o, row) in left.chunks_exact(rank).enumerate() {
            for (k, &v) in row.iter().enumerate() {
                left_t[k * outputs + o] = v;
            }
        }
        LowRank {
            outputs,
            inputs,
            rank,
            left_t,
            right,
        }
    }

    /// `out += x · ΔWᵀ` for `rows` rows, then `then` on them: `x` `(rows, inputs)`, `out`
    /// `(rows, outputs)` (the product's output, before the step that would have followed it),
    /// as `(x · rightᵀ) · leftᵀ` (`rank · (inputs + outputs)` multiply-adds a row), block by
    /// block of rows in parallel, each block's step while it is in cache.
    pub fn add_product(&self, x: &[f32], rows: usize, out: &mut [f32], then: Then<'_>) {
        let (i, o) = (self.inputs, self.outputs);
        out[..rows * o]
            .par_chunks_mut(ROWS_PER_TASK * o)
            .zip(x[..rows * i].par_chunks(ROWS_PER_TASK * i))
            .enumerate()
            .for_each(|(b, (out, x))| {
                let first = b * ROWS_PER_TASK * o;
                simd(Correction {
                    low: self,
                    x,
                    out,
                    then,
                    first,
                })
            });
    }

    /// `row += ΔW[id]`: the correction of an embedding table's row `id` (`row` has `inputs`
    /// values).
    pub fn add_row(&self, id: usize, row: &mut [f32]) {
        let (i, o) = (self.inputs, self.outputs);
        for (left, right) in self.left_t.chunks_exact(o).zip(self.right.chunks_exact(i)) {
            let l = left[id];
            row.iter_mut().zip(right).for_each(|(v, &b)| *v += l * b);
        }
    }
}

/// One block of [`LowRank::add_product`], compiled for the CPU's vector width.
struct Correction<'a> {
    low: &'a LowRank,
    x: &'a [f32],
    out: &'a mut [f32],
    then: Then<'a>,
    first: usize,
}

impl WithSimd for Correction<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let low = self.low;
        let (i, o, r) = (low.inputs, low.outputs, low.rank);
        let mut t = vec![0.0f32; r];
        for (out, x) in self.out.chunks_exact_mut(o).zip(self.x.chunks_exact(i)) {
            for (t, right) in t.iter_mut().zip(low.right.chunks_exact(i)) {
                *t = dot_f32_portable(x, right);
            }
            for (&t, left) in t.iter().zip(low.left_t.chunks_exact(o)) {
                out.iter_mut().zip(left).for_each(|(v, &l)| *v += t * l);
            }
        }
        self.then.apply_here(self.out, self.first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn low_rank() -> LowRank {
        // ΔW (3 x 2) = left (3 x 2) · right (2 x 2).
        LowRank::new(
            3,
            2,
            2,
            vec![1.0, 0.0, 0.0, 1.0, 1.0, -1.0],
            vec![2.0, 3.0, -1.0, 0.5],
        )
    }

    #[test]
    fn the_correction_is_the_product_of_its_factors() {
        let c = low_rank();
        // ΔW = [[2, 3], [-1, 0.5], [3, 2.5]].
        let dw = [[2.0, 3.0], [-1.0, 0.5], [3.0, 2.5]];
        let x = [1.0, 2.0, -1.0, 0.0];
        let mut out = vec![1.0; 6];
        c.add_product(&x, 2, &mut out, Then::Nothing);
        for (r, xr) in x.chunks(2).enumerate() {
            for (o, w) in dw.iter().enumerate() {
                let want = 1.0 + xr[0] * w[0] + xr[1] * w[1];
                assert_eq!(out[r * 3 + o], want, "row {r}, output {o}");
            }
        }
        let mut row = vec![0.5, 0.5];
        c.add_row(2, &mut row);
        assert_eq!(row, [3.5, 3.0]);
    }
}
