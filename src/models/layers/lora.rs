//! Low-rank corrections of a weight, applied beside its product instead of merged into it: how
//! one loaded jina-embeddings-v3 runs two task adapters. `weights::Weights::merge_lora` merges
//! the documents' adapter into the weights; a query's adapter differs from it by
//! `s · (B_q · A_q - B_d · A_d)`, a [`LowRank`] of twice the adapters' rank
//! (`Weights::lora_difference`), which the query's forward pass adds to each product
//! ([`LowRank::add_product`]) and to each embedding row ([`LowRank::add_row`]).

use rayon::prelude::*;

/// `ΔW = left · right`, `left` `(outputs, rank)` and `right` `(rank, inputs)`, row-major: the
/// correction of a linear layer's `(outputs, inputs)` weight, or of an embedding table's
/// `(rows, width)` (its rows the outputs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LowRank {
    pub outputs: usize,
    pub inputs: usize,
    pub rank: usize,
    pub left: Vec<f32>,
    pub right: Vec<f32>,
}

/// Rows per task of [`LowRank::add_product`].
const ROWS_PER_TASK: usize = 16;

impl LowRank {
    /// `out += x · ΔWᵀ` for `rows` rows: `x` `(rows, inputs)`, `out` `(rows, outputs)`, as
    /// `(x · rightᵀ) · leftᵀ` (`rank · (inputs + outputs)` multiply-adds a row).
    pub fn add_product(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        let (i, o, r) = (self.inputs, self.outputs, self.rank);
        out[..rows * o]
            .par_chunks_mut(ROWS_PER_TASK * o)
            .zip(x[..rows * i].par_chunks(ROWS_PER_TASK * i))
            .for_each(|(out, x)| {
                let mut t = vec![0.0f32; r];
                for (out, x) in out.chunks_exact_mut(o).zip(x.chunks_exact(i)) {
                    for (t, right) in t.iter_mut().zip(self.right.chunks_exact(i)) {
                        *t = x.iter().zip(right).map(|(a, b)| a * b).sum();
                    }
                    for (v, left) in out.iter_mut().zip(self.left.chunks_exact(r)) {
                        *v += left.iter().zip(&t).map(|(a, b)| a * b).sum::<f32>();
                    }
                }
            });
    }

    /// `row += ΔW[id]`: the correction of an embedding table's row `id` (`row` has `inputs`
    /// values).
    pub fn add_row(&self, id: usize, row: &mut [f32]) {
        let r = self.rank;
        let left = &self.left[id * r..][..r];
        for (k, &l) in left.iter().enumerate() {
            row.iter_mut()
                .zip(&self.right[k * self.inputs..][..self.inputs])
                .for_each(|(v, &b)| *v += l * b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn low_rank() -> LowRank {
        // ΔW (3 x 2) = left (3 x 2) · right (2 x 2).
        LowRank {
            outputs: 3,
            inputs: 2,
            rank: 2,
            left: vec![1.0, 0.0, 0.0, 1.0, 1.0, -1.0],
            right: vec![2.0, 3.0, -1.0, 0.5],
        }
    }

    #[test]
    fn the_correction_is_the_product_of_its_factors() {
        let c = low_rank();
        // ΔW = [[2, 3], [-1, 0.5], [3, 2.5]].
        let dw = [[2.0, 3.0], [-1.0, 0.5], [3.0, 2.5]];
        let x = [1.0, 2.0, -1.0, 0.0];
        let mut out = vec![1.0; 6];
        c.add_product(&x, 2, &mut out);
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
