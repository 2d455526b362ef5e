//! What the rotary encoders (ModernBERT, GTE / NomicBERT) share: packed batches with each
//! token's position ([`Batch`]), RoPE tables grown as inputs get longer ([`grown`]), layer
//! norms of whole rows, RoPE on every query and key head, and the gated MLP run in cache-sized
//! blocks of rows ([`gated_mlp`]).

use std::cell::RefCell;
use std::sync::{Arc, RwLock};

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::attention::{attention, check_keys, Heads};
use super::dense::Dense;
use super::encoder::Norm;
use super::kernels::{simd, with_scratch, Act, Then};
use super::quant::QuantRows;
use super::rope::{rope_head, Rope};
use crate::models::packed_starts;
use crate::Result;

/// Rows per task of the row-wise passes (norms, RoPE).
const ROWS_PER_TASK: usize = 16;

/// Where a packed batch's sequences are (GTE's encoder packs its batches the same way).
pub(crate) struct Batch {
    pub lens: Vec<usize>,
    /// Each sequence's first row.
    pub starts: Vec<usize>,
    /// How many leading tokens of each sequence are keys (all, but for ColBERT's query
    /// expansion tokens: see [`attention`]).
    pub keys: Vec<usize>,
    /// Each packed row's position within its sequence.
    pub positions: Vec<u32>,
}

impl Batch {
    /// The batch of sequences of `lens` tokens, packed in order.
    pub fn of(lens: Vec<usize>) -> Self {
        let starts = packed_starts(&lens);
        let positions = lens.iter().flat_map(|&l| 0..l as u32).collect();
        Batch {
            keys: lens.clone(),
            lens,
            starts,
            positions,
        }
    }

    /// The batch with sequence `i`'s tokens attending to its first `keys[i]` only (all of
    /// them without `keys`); an error when a count does not fit its sequence.
    pub fn attending(mut self, keys: Option<&[usize]>) -> Result<Self> {
        self.keys = check_keys(keys, &self.lens)?;
        Ok(self)
    }

    /// The number of packed rows.
    pub fn tokens(&self) -> usize {
        self.positions.len()
    }

    /// The longest sequence's length.
    pub fn longest(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(0)
    }

    /// A rotary layer's attention: RoPE on the queries and keys of `qkv` (one row of
    /// `3 * shape.hidden` per token), then attention within each sequence (over `window`
    /// neighbours only, with one) into `ctx`; with `first_only`, for each sequence's first
    /// token only. Returns the rows of `ctx` written.
    pub fn rotary_attention(
        &self,
        qkv: &mut [f32],
        ctx: &mut [f32],
        shape: Heads,
        rope: &Rope,
        window: Option<usize>,
        first_only: bool,
    ) -> usize {
        let h = shape.hidden;
        rope_rows(qkv, &self.positions, h, shape.dim, rope);
        let rows = if first_only {
            self.lens.len()
        } else {
            self.tokens()
        };
        let ctx = &mut ctx[..rows * h];
        attention(
            qkv,
            ctx,
            &self.lens,
            &self.starts,
            &self.keys,
            shape,
            window,
            first_only,
        );
        rows
    }

    /// Moves each sequence's first row of `x` (rows of `h`) to row `i`, the residual rows that
    /// a first-token-only layer keeps.
    pub fn firsts_to_front(&self, x: &mut [f32], h: usize) {
        // Row starts[i] moves to row i; starts[i] >= i, so no source is overwritten first.
        for (i, &s) in self.starts.iter().enumerate() {
            x.copy_within(s * h..(s + 1) * h, i * h);
        }
    }
}

/// The heads of a model `hidden` wide in `heads` heads of `hidden / heads` values.
pub(crate) fn heads_of(hidden: usize, heads: usize) -> Heads {
    Heads {
        hidden,
        heads,
        dim: hidden / heads,
    }
}

/// The tables in `slot` if they cover `positions` (`covered` says how many they do), else
/// new ones from `build(n)`, stored for the next call: `n` grows by doubling (so that longer
/// and longer inputs rebuild them a few times only), never past `max` positions. The RoPE
/// tables of the rotary encoders (ModernBERT, GTE), which no tensor sizes at load.
pub(crate) fn grown<T>(
    slot: &RwLock<Arc<T>>,
    covered: impl Fn(&T) -> usize,
    positions: usize,
    max: usize,
    build: impl FnOnce(usize) -> T,
) -> Arc<T> {
    let current = Arc::clone(&slot.read().unwrap_or_else(|e| e.into_inner()));
    if covered(&current) >= positions {
        return current;
    }
    let mut slot = slot.write().unwrap_or_else(|e| e.into_inner());
    if covered(&slot) >= positions {
        return Arc::clone(&slot);
    }
    let n = positions
        .next_power_of_two()
        .max(64)
        .min(max)
        .max(positions);
    let tables = Arc::new(build(n));
    *slot = Arc::clone(&tables);
    tables
}

/// Layer norm of every row of `rows` (whole rows of `norm`'s width), vectorized.
pub(crate) fn norm_rows(rows: &mut [f32], norm: &Norm, eps: f32) {
    struct Op<'a> {
        rows: &'a mut [f32],
        norm: &'a Norm,
        eps: f32,
    }
    impl WithSimd for Op<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) {
            for row in self.rows.chunks_exact_mut(self.norm.weight.len()) {
                self.norm.apply(row, self.eps);
            }
        }
    }
    simd(Op { rows, norm, eps })
}

/// RoPE on every query and key head of every row of `qkv` (`(rows, 3 * h)`, queries then keys
/// then values), row `r` at position `positions[r]`.
pub(crate) fn rope_rows(qkv: &mut [f32], positions: &[u32], h: usize, d: usize, rope: &Rope) {
    struct Op<'a> {
        rows: &'a mut [f32],
        positions: &'a [u32],
        h: usize,
        d: usize,
        rope: &'a Rope,
    }
    impl WithSimd for Op<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) {
            for (row, &p) in self.rows.chunks_exact_mut(3 * self.h).zip(self.positions) {
                let (cos, sin) = self.rope.at(p as usize);
                for head in row[..2 * self.h].chunks_exact_mut(self.d) {
                    rope_head(head, cos, sin);
                }
            }
        }
    }
    qkv.par_chunks_mut(3 * h * ROWS_PER_TASK)
        .zip(positions.par_chunks(ROWS_PER_TASK))
        .for_each(|(rows, positions)| {
            simd(Op {
                rows,
                positions,
                h,
                d,
                rope,
            })
        });
}

/// One block's MLP buffers: the normed rows, `[input | gate]`, the GeGLU's output, and their
/// quantized rows in int8.
#[derive(Default)]
struct MlpBlock {
    normed: Vec<f32>,
    wide: Vec<f32>,
    glu: Vec<f32>,
    quant: QuantRows,
}

thread_local! {
    /// The MLP block of this thread, reused across calls.
    static MLP_BLOCK: RefCell<MlpBlock> = RefCell::new(MlpBlock::default());
}

/// `out = then(wo (act(a) * g))` with `[a | g] = wi norm(x)` (`norm` the identity when
/// `pre_norm` is `None`) over `rows` rows, block by block of rows in parallel: a block's norm,
/// `(rows, 2 * inner)` products and gated activation stay in cache, and the whole intermediate
/// matrix is never written. ModernBERT's MLP (pre-norm, `then` adds the residual) and GTE's
/// (`then` adds the residual and layer-norms).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gated_mlp(
    wi: &Dense,
    wo: &Dense,
    act: Act,
    pre_norm: Option<(&Norm, f32)>,
    then: Then<'_>,
    x: &[f32],
    rows: usize,
    out: &mut [f32],
) {
    let (h, inner) = (wo.outputs(), wi.outputs() / 2);
    if rows == 0 {
        return;
    }
    let block = wi.block_rows(rows);
    out[..rows * h]
        .par_chunks_mut(block * h)
        .enumerate()
        .for_each(|(b, out)| {
            let (first, count) = (b * block, out.len() / h);
            let rows_x = &x[first * h..(first + count) * h];
            with_scratch(
                &MLP_BLOCK,
                |MlpBlock {
                     normed,
                     wide,
                     glu,
                     quant,
                 }| {
                    let input = match pre_norm {
                        Some((norm, eps)) => {
                            normed.clear();
                            normed.extend_from_slice(rows_x);
                            norm_rows(normed, norm, eps);
                            &normed[..]
                        }
                        None => rows_x,
                    };
                    wide.resize(count * 2 * inner, 0.0);
                    wi.forward_here(input, count, wide, quant, Then::Nothing, 0);
                    glu.resize(count * inner, 0.0);
                    geglu_rows(wide, glu, inner, act);
                    wo.forward_here(glu, count, out, quant, then, first);
                },
            );
        });
}

/// `out[j] = act(a[j]) * g[j]` for every row `[a | g]` of `wide` (`(rows, 2 * inner)`), into
/// `out` (`(rows, inner)`), on this thread, vectorized.
pub(crate) fn geglu_rows(wide: &[f32], out: &mut [f32], inner: usize, act: Act) {
    struct Op<'a> {
        wide: &'a [f32],
        out: &'a mut [f32],
        inner: usize,
        act: Act,
    }
    impl WithSimd for Op<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) {
            let n = self.inner;
            for (w, o) in self
                .wide
                .chunks_exact(2 * n)
                .zip(self.out.chunks_exact_mut(n))
            {
                let (a, g) = w.split_at(n);
                o.copy_from_slice(a);
                self.act.apply_here(o);
                o.iter_mut().zip(g).for_each(|(v, g)| *v *= g);
            }
        }
    }
    simd(Op {
        wide,
        out,
        inner,
        act,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::noise;

    #[test]
    fn geglu_is_act_of_the_first_half_times_the_second() {
        let (rows, inner) = (5, 11);
        let wide: Vec<f32> = noise(rows * 2 * inner, 3).iter().map(|v| v * 4.0).collect();
        for act in [Act::Gelu, Act::GeluTanh, Act::Relu, Act::Silu] {
            let mut out = vec![0.0; rows * inner];
            geglu_rows(&wide, &mut out, inner, act);
            for r in 0..rows {
                for j in 0..inner {
                    let mut a = [wide[r * 2 * inner + j]];
                    act.apply_here(&mut a);
                    let want = a[0] * wide[r * 2 * inner + inner + j];
                    assert_eq!(out[r * inner + j], want, "{act:?}");
                }
            }
        }
    }
}
