//! `bf16` panels: their paired layout and the rounding of a product's inputs. The kernels that
//! read the layout (widening, the AVX-512 `bf16` dot-product tile) are in `simd::panels::bf16`.
//!
//! Layout. A `bf16` panel stores its rows in pairs: rows `2q` and `2q + 1` of column `c` are
//! the two halves of one 32-bit lane, `[(2q, 0), (2q + 1, 0), (2q, 1), (2q + 1, 1), ...]`,
//! 64 bytes a pair of rows (an odd `k` gets a zero padding row). That is the operand layout
//! of `vdpbf16ps`, which adds, in each of 16 `f32` lanes, the products of a pair of `bf16`
//! values with another pair: one instruction does the work of two `f32` multiply-adds. The
//! left operand's row is copied as pairs too (two `bf16` columns in a 32-bit word, broadcast
//! to every lane), so a tile step covers two rows of `k`.
//!
//! Widening a pair to `f32` costs two instructions (the even row is the lane shifted left by
//! 16 bits, the odd row the lane with its low half cleared), so the paths without `vdpbf16ps`
//! (AVX2, AVX-512F without `bf16`, plain Rust) read the same layout: a product over many rows
//! widens each block into `f32` rows for the `f32` tiles, a one-row product widens in
//! registers.
//!
//! Every path rounds the product's inputs to `bf16` (ties to even) and multiplies exact
//! `bf16` products; they differ only in the order of the `f32` sums.

use rayon::prelude::*;

use super::{Copied, Rows};
use crate::simd::gemv::{bf16_to_f32, f32_to_bf16};
use crate::simd::panels::bf16::to_pairs;
use crate::simd::panels::{PanelValue, NR};

/// `f32` panels of `k` rows (`v`, panel after panel) rounded to `bf16`, in pairs.
pub(super) fn pairs(v: &[f32], k: usize) -> Vec<u16> {
    let (from, to) = (k * NR, k.next_multiple_of(2) * NR);
    let panels = v.len().checked_div(from).unwrap_or(0);
    let mut out = vec![0u16; panels * to];
    out.par_chunks_mut(to.max(1))
        .zip(v.par_chunks(from.max(1)))
        .for_each(|(dst, src)| {
            for l in 0..k {
                for c in 0..NR {
                    dst[u16::at(l, c)] = f32_to_bf16(src[f32::at(l, c)]);
                }
            }
        });
    out
}

/// Rounds every value to the nearest `bf16` (ties to even, NaN stays NaN).
pub(super) fn round(v: &mut [f32]) {
    for x in v {
        *x = bf16_to_f32(f32_to_bf16(*x));
    }
}

/// Copies columns `k0..k0 + kb` of `a`'s rows into `packed` as `bf16` pairs (one `u32` per
/// two columns, the even column in the low half; a zero past an odd `kb`), rows an odd number
/// of cache lines apart, zero rows after the last one up to `rows`. Only on the dot-product
/// path, on a CPU with AVX-512 `bf16` (the conversion is `vcvtne2ps2bf16`).
pub(super) fn copy_pairs<'a>(
    a: Rows<'_>,
    k0: usize,
    kb: usize,
    rows: usize,
    packed: &'a mut Vec<u32>,
) -> Copied<'a> {
    let pairs = kb.div_ceil(2);
    let lda = super::row_stride(pairs, 16);
    packed.resize(rows * lda, 0);
    for (r, row) in packed.chunks_exact_mut(lda).take(rows).enumerate() {
        match a.data.get(r * a.stride + k0..).filter(|_| r < a.rows) {
            Some(src) => to_pairs(&src[..kb], &mut row[..pairs]),
            None => row[..pairs].fill(0),
        }
    }
    Copied { data: packed, lda }
}
