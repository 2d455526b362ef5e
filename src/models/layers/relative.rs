//! Attention with a learned relative position bias (T5's, which MPNet reuses): the score of
//! query `i` for key `j` gets `table[bucket(j - i)][head]` added, one table shared by every
//! layer that reads it.
//!
//! - [`Buckets`]: how a key offset maps to a bucket (transformers'
//!   `_relative_position_bucket`): offsets below a half-range each have their own bucket, longer
//!   ones share logarithmically wider buckets up to `max_distance`, past which all share the
//!   last; bidirectional buckets give keys after the query the upper half.
//! - [`PositionBias`]: a batch's biases, per head and key offset, built once per batch.
//! - [`biased_attention`]: attention within each sequence of a packed batch with that bias
//!   added to the scores (the shared `layers::attention` has no bias input).
//!
//! Attention runs one task per (sequence, block of queries), every head: the block's scores
//! over its sequence's keys, the bias row of each query added (for query `i`, the keys' biases
//! are a contiguous run of the per-offset table), a row softmax and the product with the
//! values, each head written straight into the context. With `first_only`, each sequence's
//! first token is its only query.

use std::cell::RefCell;

use rayon::prelude::*;

use super::attention::QUERY_BLOCK;
use super::kernels::{matmul, softmax_rows, with_scratch, Mat, Threads};

/// How key offsets map to the rows of a relative bias table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Buckets {
    /// The rows of the table (`relative_attention_num_buckets`).
    pub count: usize,
    /// The offset from which every key shares its side's last bucket
    /// (`relative_attention_max_distance`).
    pub max_distance: usize,
    /// Whether keys after the query have buckets of their own (the upper half): encoders'
    /// attention; a decoder's sees no key after its query.
    pub bidirectional: bool,
}

impl Buckets {
    /// The exactly-kept offsets: `count / 2` (of each side's half when bidirectional).
    fn exact(self) -> usize {
        self.side_count() / 2
    }

    /// The buckets of one side.
    fn side_count(self) -> usize {
        match self.bidirectional {
            true => self.count / 2,
            false => self.count,
        }
    }

    /// Whether transformers can compute these buckets: at least one exact offset per side,
    /// and a `max_distance` past it (the logarithmic buckets divide by `ln(max_distance /
    /// exact)`). The reason when not.
    pub fn check(self) -> std::result::Result<(), String> {
        let exact = self.exact();
        if exact == 0 {
            let least = if self.bidirectional { 4 } else { 2 };
            return Err(format!(
                "{} buckets leave no exact offset (at least {least})",
                self.count
            ));
        }
        if self.max_distance <= exact {
            return Err(format!(
                "max_distance {} must be above the {exact} exactly-kept offsets of {} buckets",
                self.max_distance, self.count
            ));
        }
        Ok(())
    }

    /// The bucket of key `j` for query `i`, `rel = j - i`, as transformers'
    /// `_relative_position_bucket`: with `m = |rel|` (a bidirectional table gives `rel > 0` the
    /// upper half; a unidirectional one counts keys after the query as `m = 0`), `m` below
    /// `exact` is its own bucket, and from `exact` on
    /// `exact + floor(ln(m / exact) / ln(max_distance / exact) * (side - exact))`, at most the
    /// side's last bucket.
    ///
    /// The logarithm is taken in f64 and a value within 1e-9 of an integer counts as that
    /// integer: torch's float32 gives the integer where the exact value is one (at the powers
    /// of two of 32 buckets and distance 128: offsets 16, 32, 64, checked against the integer
    /// form in the tests), where a plain f64 quotient can fall just below it.
    pub fn of(self, rel: i64) -> usize {
        let side = self.side_count();
        let (base, m) = match self.bidirectional {
            true => (if rel > 0 { side } else { 0 }, rel.unsigned_abs()),
            false => (0, if rel < 0 { rel.unsigned_abs() } else { 0 }),
        };
        let exact = self.exact();
        if m < exact as u64 {
            return base + m as usize;
        }
        let span = (side - exact) as f64;
        let r =
            (m as f64 / exact as f64).ln() / (self.max_distance as f64 / exact as f64).ln() * span;
        let steps = match (r - r.round()).abs() < 1e-9 * r.abs().max(1.0) {
            true => r.round(),
            false => r.floor(),
        };
        // `steps` is at least 0 (m >= exact) and capped before the cast.
        base + exact + (steps.min(span) as usize).min(side - 1 - exact)
    }
}

/// The relative position bias of a batch: per head, the bias of every key offset
/// `j - i` in `1 - longest ..= longest - 1`, at `j - i + longest - 1`.
pub(crate) struct PositionBias {
    /// `(heads, width)`.
    values: Vec<f32>,
    /// `2 * longest - 1`.
    width: usize,
    /// The batch's longest sequence.
    longest: usize,
}

impl PositionBias {
    /// The biases a batch whose longest sequence has `longest` tokens needs, read from
    /// `table` (`(buckets.count, heads)`, row-major, as transformers' `nn.Embedding`).
    pub fn new(table: &[f32], heads: usize, buckets: Buckets, longest: usize) -> Self {
        let width = 2 * longest.max(1) - 1;
        let mut values = vec![0.0f32; heads * width];
        for (at, rel) in (1 - longest.max(1) as i64..longest as i64).enumerate() {
            let row = &table[buckets.of(rel) * heads..][..heads];
            for (hd, &b) in row.iter().enumerate() {
                values[hd * width + at] = b;
            }
        }
        PositionBias {
            values,
            width,
            longest: longest.max(1),
        }
    }

    /// The biases of head `hd` for query `i` and the keys `0..n` of its sequence, in order.
    fn keys(&self, hd: usize, i: usize, n: usize) -> &[f32] {
        &self.values[hd * self.width + self.longest - 1 - i..][..n]
    }
}

/// Where a batch's sequences are, their relative bias, and whether the queries are their
/// first tokens only.
pub(crate) struct BiasedBatch<'a> {
    pub lens: &'a [usize],
    pub starts: &'a [usize],
    pub bias: &'a PositionBias,
    pub first_only: bool,
}

thread_local! {
    /// Attention scores of one task, reused across calls on this thread.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Attention with the relative bias within each sequence, `heads` heads of `d` values, into
/// `ctx`: scores `scale · Q Kᵀ + bias`, a row softmax, the product with the values. `qkv`'s
/// rows are `[q | k | v]`, each `heads * d` wide; `ctx` gets one row per token (or per
/// sequence with `first_only`, whose query is the sequence's first token). One task per
/// (sequence, block of [`QUERY_BLOCK`] queries), with its rows of `ctx`.
pub(crate) fn biased_attention(
    qkv: &[f32],
    ctx: &mut [f32],
    batch: &BiasedBatch<'_>,
    (heads, d): (usize, usize),
    scale: f32,
) {
    let h = heads * d;
    let lens = batch.lens;
    let all = Mat::new(qkv, lens.iter().sum(), 3 * h);
    let queries = |len: usize| if batch.first_only { 1 } else { len };
    let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::new();
    let mut rest = ctx;
    for (s, &len) in lens.iter().enumerate() {
        let (mine, tail) = rest.split_at_mut(queries(len) * h);
        rest = tail;
        for (b, rows) in mine.chunks_mut(QUERY_BLOCK * h).enumerate() {
            tasks.push((s, b * QUERY_BLOCK, rows));
        }
    }
    let bias = batch.bias;
    tasks.into_par_iter().for_each(|(s, q0, out)| {
        let (start, n) = (batch.starts[s], lens[s]);
        let nq = out.len() / h;
        with_scratch(&SCORES, |scores| {
            scores.resize(nq * n, 0.0);
            let scores = &mut scores[..nq * n];
            for hd in 0..heads {
                let q = all.block(start + q0, nq, hd * d, d);
                let k = all.block(start, n, h + hd * d, d);
                let v = all.block(start, n, 2 * h + hd * d, d);
                matmul(q, k.t(), scores, n, scale, false, Threads::One);
                for (r, row) in scores.chunks_exact_mut(n).enumerate() {
                    let b = bias.keys(hd, q0 + r, n);
                    row.iter_mut().zip(b).for_each(|(s, b)| *s += b);
                }
                softmax_rows(scores, n);
                let p = Mat::new(scores, nq, n);
                matmul(p, v, &mut out[hd * d..], h, 1.0, false, Threads::One);
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MPNet's buckets (and T5's defaults): 32, max distance 128, bidirectional.
    const T5: Buckets = Buckets {
        count: 32,
        max_distance: 128,
        bidirectional: true,
    };

    /// The reference's table: (first distance, last distance, bucket) for keys at or before
    /// the query.
    const TABLE: [(u64, u64, usize); 8] = [
        (8, 11, 8),
        (12, 15, 9),
        (16, 22, 10),
        (23, 31, 11),
        (32, 45, 12),
        (46, 63, 13),
        (64, 90, 14),
        (91, u64::MAX, 15),
    ];

    fn from_table(rel: i64) -> usize {
        let m = rel.unsigned_abs();
        let side = if rel > 0 { 16 } else { 0 };
        if m < 8 {
            return side + m as usize;
        }
        let (_, _, b) = TABLE
            .iter()
            .find(|(lo, hi, _)| *lo <= m && m <= *hi)
            .unwrap();
        side + b
    }

    #[test]
    fn buckets_follow_the_table_at_every_boundary_on_both_sides() {
        // Keys before the query (rel < 0) and at it share the lower half; keys after it take
        // 16 more.
        let boundaries: [(i64, usize); 21] = [
            (0, 0),
            (1, 1),
            (7, 7),
            (8, 8),
            (11, 8),
            (12, 9),
            (15, 9),
            (16, 10),
            (22, 10),
            (23, 11),
            (31, 11),
            (32, 12),
            (45, 12),
            (46, 13),
            (63, 13),
            (64, 14),
            (90, 14),
            (91, 15),
            (127, 15),
            (128, 15),
            (100_000, 15),
        ];
        for (m, bucket) in boundaries {
            assert_eq!(T5.of(-m), bucket, "key {m} before the query");
            let after = if m == 0 { 0 } else { 16 + bucket };
            assert_eq!(T5.of(m), after, "key {m} after the query");
        }
        assert_eq!(T5.of(i64::MIN), 15);
        assert_eq!(T5.of(i64::MAX), 31);
        for rel in -4096..=4096 {
            assert_eq!(T5.of(rel), from_table(rel), "{rel}");
        }
    }

    /// For 32 buckets and distance 128 the bucket is `2 + floor(log2(m²))` on integers (the
    /// boundaries exact); the f64 form with its snap to integers gives the same everywhere.
    #[test]
    fn the_float_form_is_the_integer_form_at_t5_s_defaults() {
        for m in 8u64..128 {
            let integer = (2 + (m * m).ilog2() as usize).min(15);
            assert_eq!(T5.of(-(m as i64)), integer, "{m}");
        }
    }

    /// The f64 form is transformers' formula evaluated in float64 (as the MPNet fixture's
    /// reference.py does).
    #[test]
    fn buckets_are_transformers_formula() {
        for m in 8i64..=4096 {
            let large = 8 + ((m as f64 / 8.0).ln() / 16f64.ln() * 8.0) as usize;
            assert_eq!(T5.of(-m), large.min(15), "{m}");
        }
    }

    #[test]
    fn unidirectional_buckets_count_keys_after_the_query_as_the_query() {
        let decoder = Buckets {
            count: 32,
            max_distance: 128,
            bidirectional: false,
        };
        for rel in 0..50 {
            assert_eq!(decoder.of(rel), 0, "{rel}");
        }
        for m in 1i64..16 {
            assert_eq!(decoder.of(-m), m as usize);
        }
        // ln(m / 16) / ln(8) * 16: 16 at m = 16, 31 from 128 on.
        assert_eq!(decoder.of(-16), 16);
        assert_eq!(decoder.of(-127), 31);
        assert_eq!(decoder.of(-100_000), 31);
        for m in 1i64..4096 {
            assert!(decoder.of(-m) <= decoder.of(-m - 1), "monotone at {m}");
        }
    }

    #[test]
    fn small_tables_are_refused_and_every_bucket_is_inside_the_table() {
        let b = |count, max_distance| Buckets {
            count,
            max_distance,
            bidirectional: true,
        };
        assert!(b(2, 10).check().unwrap_err().contains("at least 4"));
        assert!(b(8, 2).check().unwrap_err().contains("max_distance 2"));
        for (count, max_distance) in [(4, 3), (8, 10), (16, 20), (17, 24), (32, 128), (64, 512)] {
            let buckets = b(count, max_distance);
            buckets.check().unwrap();
            for rel in -2000..2000 {
                assert!(buckets.of(rel) < count, "{count} {max_distance} {rel}");
            }
        }
    }

    #[test]
    fn the_bias_of_a_query_is_its_offsets_run_of_the_table() {
        let (heads, longest) = (2, 5);
        let table: Vec<f32> = (0..T5.count * heads).map(|v| v as f32).collect();
        let bias = PositionBias::new(&table, heads, T5, longest);
        for hd in 0..heads {
            for i in 0..longest {
                let keys = bias.keys(hd, i, longest);
                for (j, &b) in keys.iter().enumerate() {
                    let bucket = T5.of(j as i64 - i as i64);
                    assert_eq!(b, table[bucket * heads + hd], "head {hd} query {i} key {j}");
                }
            }
        }
    }
}
