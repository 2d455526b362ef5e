//! The attention's scores with their mask added, in one product where the device allows it:
//! the encoders' key (padding) mask ([`KeyMask`]) and the decoders' mask per query and key
//! ([`QueryMask`]).
//!
//! On a CUDA device the scores of every (row, head) of a batch are one cuBLASLt product
//! (`simd::cublaslt::scores`) that adds the mask: a key mask as its epilogue's bias, one per
//! key; a decoder's mask, repeated once per batch for every head, as its `C` operand. The
//! scores are written once, where candle's product and its broadcast addition of the mask pass
//! over them twice (the addition with the index arithmetic of a broadcast).
//! Everywhere else (candle's CPU backend, Metal, strided inputs, the opt-out
//! `RERANK_CUDA_FUSED_LINEAR=0`), it is candle's product, then the additions.
//!
//! A mask is 0 for a key a query sees and [`mask_value`] (or -inf, in the
//! decoders) for one it does not, so a seen key's score is the same whichever order the
//! additions take; an unseen key's is the large negative number plus a little (or -inf), which
//! the softmax turns into 0 either way.

use candle_core::{DType, Tensor};

use super::mask_value;

/// The additive key mask `(b, 1, 1, t)` in `dtype` of a `(b, t)` mask (1 for a key, 0 for
/// padding): 0 for a key, [`mask_value`] for padding, so that a row whose keys are all masked
/// averages instead of turning into NaN.
fn additive_mask(mask: &Tensor, dtype: DType) -> candle_core::Result<Tensor> {
    let (b, t) = mask.dims2()?;
    let big = f64::from(mask_value(dtype));
    mask.to_dtype(DType::F32)?
        .affine(-big, big)?
        .to_dtype(dtype)?
        .reshape((b, 1, 1, t))
}

/// The additive mask `(b, 1, 1, t)` as rows `(b, width)`, zeros after each row's `t` keys,
/// `width` the multiple of [`ROW_ALIGN`] at or above `t`: what one head's scores over the
/// batch take ([`KeyMask::attend`]).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn per_row(additive: &Tensor) -> candle_core::Result<Tensor> {
    let (b, _, _, t) = additive.dims4()?;
    additive
        .reshape((b, t))?
        .pad_with_zeros(1, 0, t.next_multiple_of(ROW_ALIGN) - t)?
        .contiguous()
}

/// The mask rows handed to cuBLASLt start this many elements apart (256 bytes in f16): its
/// heuristic reads the bias's alignment from the first row's address alone.
const ROW_ALIGN: usize = 128;

/// The additive mask `(b, 1, 1, t)` once per (row, head), as the scores' product takes it:
/// `(b · heads, width)`, row `r · heads + h` row `r`'s mask in its first `t` columns and zeros
/// after them, `width` the multiple of [`ROW_ALIGN`] at or above `t`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn per_head(additive: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let (b, _, _, t) = additive.dims4()?;
    let width = t.next_multiple_of(ROW_ALIGN);
    additive
        .reshape((b, 1, t))?
        .broadcast_as((b, heads, t))?
        .pad_with_zeros(2, 0, width - t)?
        .contiguous()?
        .reshape((b * heads, width))
}

/// A batch's additive key mask, built once and read by every layer's scores.
pub(crate) struct KeyMask {
    /// `(b, 1, 1, t)`: what candle's broadcast addition takes.
    additive: Tensor,
    /// cuBLASLt on the mask's CUDA device, and the mask once per (row, head), `(b · heads,
    /// width)`: `t` keys in rows padded to a multiple of [`ROW_ALIGN`] elements ([`per_head`]),
    /// what the product's epilogue takes (`None` elsewhere).
    #[cfg(feature = "cuda")]
    fused: Option<(crate::simd::cublaslt::Handle, Tensor)>,
    /// On a CUDA device, the mask once per row, `(b, width)` ([`per_row`]): what one head's
    /// scores over the batch take ([`KeyMask::attend`]).
    #[cfg(feature = "cuda")]
    rows: Option<Tensor>,
}

impl KeyMask {
    /// The mask of `mask` `(b, t)` (1 for a key, 0 for padding) in `dtype`, for the scores of
    /// `heads` heads.
    pub fn new(mask: &Tensor, dtype: DType, heads: usize) -> candle_core::Result<Self> {
        let additive = additive_mask(mask, dtype)?;
        #[cfg(feature = "cuda")]
        let (fused, rows) = match crate::simd::cublaslt::handle(&additive)? {
            Some(lt) => (
                Some((lt, per_head(&additive, heads)?)),
                Some(per_row(&additive)?),
            ),
            None => (None, None),
        };
        #[cfg(not(feature = "cuda"))]
        let _ = heads;
        Ok(KeyMask {
            additive,
            #[cfg(feature = "cuda")]
            fused,
            #[cfg(feature = "cuda")]
            rows,
        })
    }

    /// The additive mask `(b, 1, 1, t)`: 0 for a key, [`mask_value`] for
    /// padding.
    pub fn additive(&self) -> &Tensor {
        &self.additive
    }

    /// `q · kᵀ (+ plus) + mask` for `q` `(b, heads, queries, d)` and `k` `(b, heads, keys, d)`
    /// (`keys` the mask's `t`), `plus` of the scores' shape: `(b, heads, queries, keys)`.
    pub fn scores(
        &self,
        q: &Tensor,
        k: &Tensor,
        plus: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some((lt, mask)) = &self.fused {
            if let Some(scores) = crate::simd::cublaslt::scores(lt, q, k, Some(mask), plus)? {
                return Ok(scores);
            }
        }
        let scores = q.matmul(&k.t()?)?;
        let scores = match plus {
            Some(plus) => (scores + plus)?,
            None => scores,
        };
        scores.broadcast_add(&self.additive)
    }

    /// Self-attention of `heads` heads over the output `qkv` `(b · t, 3 · hidden)` of a stacked
    /// Q, K, V projection ([`stacked_qkv`](super::stacked_qkv); the query's rows carry the
    /// attention scale): `softmax(q · kᵀ + mask) · v` for every head, as the context `(b ·
    /// queries, hidden)` that the output projection reads, `queries` each row's `t` tokens or,
    /// with `first_only`, its first token alone.
    ///
    /// On a CUDA device each head's scores and context are one cuBLASLt product over the batch
    /// that reads Q, K and V where the projection wrote them and writes the context in place
    /// (`simd::cublaslt::head_scores` / `head_context`): no copy puts the heads in place, and
    /// none puts them back. Elsewhere (or when cuBLASLt declines), one pass puts the heads in
    /// place ([`split_heads`](super::split_heads)), then batched products and one pass back
    /// (`simd::fused::merge_heads`).
    pub fn attend(
        &self,
        qkv: &Tensor,
        (b, t): (usize, usize),
        heads: usize,
        first_only: bool,
        softmax_in_f32: bool,
    ) -> candle_core::Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let (Some((lt, _)), Some(rows)) = (&self.fused, &self.rows) {
            use crate::simd::cublaslt::{head_context, head_scores};
            let queries = if first_only { 1 } else { t };
            if let Some(scores) = head_scores(lt, qkv, rows, (b, t), heads, queries)? {
                let probs = super::softmax(&scores, softmax_in_f32)?;
                if let Some(context) = head_context(lt, &probs, qkv)? {
                    return Ok(context);
                }
            }
        }
        let (q, k, v) = super::split_heads(qkv, (b, t), heads, None)?;
        let q = match first_only {
            true => q.narrow(2, 0, 1)?.contiguous()?,
            false => q,
        };
        let scores = self.scores(&q, &k, None)?;
        let probs = super::softmax(&scores, softmax_in_f32)?;
        crate::simd::fused::merge_heads(&probs.matmul(&v)?)
    }
}

/// The largest decoder mask repeated for the scores' product ([`QueryMask`]): past it (very
/// long prompts in large batches), candle's broadcast addition runs instead, so that the
/// repeated mask never holds more memory than this beside one layer's scores (which are as
/// large: 1 GiB is a batch of 128 prompts of about 500 tokens for Qwen3-Reranker-0.6B, whose
/// scores and probabilities take as much each).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const QUERY_MASK_MAX_BYTES: usize = 1 << 30;

/// A decoder batch's additive mask per query and key (causal, padding, sliding window), built
/// once and read by every layer's grouped-query scores, in which `group` query heads share
/// each of `kv` key/value heads.
pub(crate) struct QueryMask {
    /// `(b, 1, 1, queries, keys)`: what candle's broadcast addition takes.
    additive: Tensor,
    kv: usize,
    group: usize,
    /// cuBLASLt on the mask's CUDA device, and the mask repeated for every (key/value head,
    /// query head of its group), `(b, kv, group · queries, keys)`: the `C` operand of the
    /// scores' product (`None` elsewhere, and past [`QUERY_MASK_MAX_BYTES`]).
    #[cfg(feature = "cuda")]
    fused: Option<(crate::simd::cublaslt::Handle, Tensor)>,
}

impl QueryMask {
    /// The mask `additive` `(b, 1, 1, queries, keys)` (0 or a large negative number or
    /// -inf), for the scores of `kv` key/value heads of `group` query heads each.
    pub fn new(additive: Tensor, kv: usize, group: usize) -> candle_core::Result<Self> {
        #[cfg(feature = "cuda")]
        let fused = match crate::simd::cublaslt::handle(&additive)? {
            Some(lt) => {
                let (b, _, _, queries, keys) = additive.dims5()?;
                let bytes = b * kv * group * queries * keys * additive.dtype().size_in_bytes();
                match bytes <= QUERY_MASK_MAX_BYTES {
                    true => Some((lt, repeated(&additive, kv, group)?)),
                    false => {
                        tracing::debug!(
                            target: "rerank::device",
                            bytes,
                            "the decoder's mask repeated for every head would pass its bound; \
                             candle's broadcast addition adds it"
                        );
                        None
                    }
                }
            }
            None => None,
        };
        Ok(QueryMask {
            additive,
            kv,
            group,
            #[cfg(feature = "cuda")]
            fused,
        })
    }

    /// The mask of the last query alone: `(b, 1, 1, 1, keys)`.
    pub fn last_query(&self) -> candle_core::Result<Self> {
        let queries = self.additive.dim(3)?;
        let last = self.additive.narrow(3, queries.saturating_sub(1), 1)?;
        Self::new(last, self.kv, self.group)
    }

    /// The scores `q · kᵀ + mask` of `q` `(b, kv, group · queries, d)` (the query heads of a
    /// group one after the other) against `k` `(b, kv, keys, d)`: `(b, kv, group · queries,
    /// keys)`.
    pub fn scores(&self, q: &Tensor, k: &Tensor) -> candle_core::Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some((lt, mask)) = &self.fused {
            if let Some(scores) = crate::simd::cublaslt::scores(lt, q, k, None, Some(mask))? {
                return Ok(scores);
            }
        }
        let (b, kv, rows, _) = q.dims4()?;
        let keys = k.dim(2)?;
        q.matmul(&k.t()?)?
            .reshape((b, kv, self.group, rows / self.group.max(1), keys))?
            .broadcast_add(&self.additive)?
            .reshape((b, kv, rows, keys))
    }
}

/// `additive` `(b, 1, 1, queries, keys)` repeated for every (key/value head, query head of its
/// group): `(b, kv, group · queries, keys)`, contiguous.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn repeated(additive: &Tensor, kv: usize, group: usize) -> candle_core::Result<Tensor> {
    let (b, _, _, queries, keys) = additive.dims5()?;
    additive
        .broadcast_as((b, kv, group, queries, keys))?
        .contiguous()?
        .reshape((b, kv, group * queries, keys))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn a_decoder_mask_reaches_every_query_head_of_every_group_and_its_last_query_alone() {
        let (b, kv, group, queries, keys, d) = (2, 2, 3, 4, 5, 2);
        let dev = Device::Cpu;
        let values = |n: usize, s: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 5 + 1) % 13) as f32 * s - 1.5)
                .collect()
        };
        let q_v = values(b * kv * group * queries * d, 0.25);
        let k_v = values(b * kv * keys * d, 0.5);
        // Causal, and row 1's first key is padding.
        let seen = |r: usize, i: usize, j: usize| j <= i + 1 && !(r == 1 && j == 0);
        let mask_v: Vec<f32> = (0..b * queries * keys)
            .map(|x| (x / (queries * keys), x / keys % queries, x % keys))
            .map(|(r, i, j)| {
                if seen(r, i, j) {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        let mask = Tensor::from_slice(&mask_v, (b, 1, 1, queries, keys), &dev).unwrap();
        let q = Tensor::from_slice(&q_v, (b, kv, group * queries, d), &dev).unwrap();
        let k = Tensor::from_slice(&k_v, (b, kv, keys, d), &dev).unwrap();
        let full = QueryMask::new(mask, kv, group).unwrap();
        let flat = |t: Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
        let scores = flat(full.scores(&q, &k).unwrap());
        // The last query of every head, scored with the last query's mask alone.
        let q_last = q
            .reshape((b, kv, group, queries, d))
            .unwrap()
            .narrow(3, queries - 1, 1)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape((b, kv, group, d))
            .unwrap();
        let last = flat(full.last_query().unwrap().scores(&q_last, &k).unwrap());
        for (r, h, g, i, j) in (0..b * kv * group * queries * keys).map(|x| {
            let (rest, j) = (x / keys, x % keys);
            let (rest, i) = (rest / queries, rest % queries);
            let (rest, g) = (rest / group, rest % group);
            (rest / kv, rest % kv, g, i, j)
        }) {
            let row = ((r * kv + h) * group + g) * queries + i;
            let dot: f32 = (0..d)
                .map(|p| q_v[row * d + p] * k_v[((r * kv + h) * keys + j) * d + p])
                .sum();
            let got = scores[row * keys + j];
            match seen(r, i, j) {
                true => assert_eq!(got, dot, "{r} {h} {g} {i} {j}"),
                false => assert_eq!(got, f32::NEG_INFINITY, "{r} {h} {g} {i} {j}"),
            }
            if i == queries - 1 {
                assert_eq!(last[((r * kv + h) * group + g) * keys + j], got);
            }
        }
        let repeated = repeated(&full.additive, kv, group).unwrap();
        let direct = flat(full.additive.clone());
        for (x, v) in flat(repeated.clone()).into_iter().enumerate() {
            // Row (r, h, g, i) of the repeated mask is row (r, i) of the mask.
            let (rest, j) = (x / keys, x % keys);
            let (r, i) = (rest / (kv * group * queries), rest % queries);
            assert_eq!(v, direct[(r * queries + i) * keys + j]);
        }
        assert_eq!(repeated.dims(), [b, kv, group * queries, keys]);
    }

    #[test]
    fn the_mask_per_head_repeats_each_rows_mask_in_aligned_rows() {
        let (b, heads, t) = (2, 3, 5);
        let dev = Device::Cpu;
        let mask = Tensor::from_slice(&[1u32, 1, 1, 1, 1, 1, 1, 0, 0, 0], (b, t), &dev).unwrap();
        let additive = additive_mask(&mask, DType::F32).unwrap();
        let rows = per_head(&additive, heads).unwrap();
        assert_eq!(rows.dims(), [b * heads, ROW_ALIGN]);
        let rows: Vec<Vec<f32>> = rows.to_vec2().unwrap();
        let masked = mask_value(DType::F32);
        for (i, row) in rows.iter().enumerate() {
            let keys = if i / heads == 0 { t } else { 2 };
            for (j, &v) in row.iter().enumerate() {
                let want = if j < keys || j >= t { 0.0 } else { masked };
                assert_eq!(v, want, "row {i}, column {j}");
            }
        }
    }

    #[test]
    fn the_scores_are_the_products_plus_the_term_with_padded_keys_masked() {
        let (b, heads, queries, keys, d) = (2, 3, 4, 5, 2);
        let dev = Device::Cpu;
        let values = |n: usize, s: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i * 7 + 3) % 11) as f32 * s - 1.0)
                .collect()
        };
        let q_v = values(b * heads * queries * d, 0.25);
        let k_v = values(b * heads * keys * d, 0.5);
        let plus_v = values(b * heads * queries * keys, 0.125);
        // Row 0 has every key, row 1 its first three.
        let seen = [keys, 3];
        let mask: Vec<u32> = (0..b * keys)
            .map(|i| u32::from(i % keys < seen[i / keys]))
            .collect();
        let q = Tensor::from_slice(&q_v, (b, heads, queries, d), &dev).unwrap();
        let k = Tensor::from_slice(&k_v, (b, heads, keys, d), &dev).unwrap();
        let plus = Tensor::from_slice(&plus_v, (b, heads, queries, keys), &dev).unwrap();
        let mask = Tensor::from_slice(&mask, (b, keys), &dev).unwrap();
        let key_mask = KeyMask::new(&mask, DType::F32, heads).unwrap();
        let flat = |t: Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
        let with = flat(key_mask.scores(&q, &k, Some(&plus)).unwrap());
        let without = flat(key_mask.scores(&q, &k, None).unwrap());
        let masked = mask_value(DType::F32);
        for (r, &seen) in seen.iter().enumerate() {
            for h in 0..heads {
                let m = r * heads + h;
                for i in 0..queries {
                    for j in 0..keys {
                        let dot: f32 = (0..d)
                            .map(|p| q_v[(m * queries + i) * d + p] * k_v[(m * keys + j) * d + p])
                            .sum();
                        let at = (m * queries + i) * keys + j;
                        let (got, term) = ((with[at], without[at]), plus_v[at]);
                        match j < seen {
                            true => assert_eq!(got, (dot + term, dot), "{r} {h} {i} {j}"),
                            false => assert!(got.0 <= masked / 2.0 && got.1 <= masked / 2.0),
                        }
                    }
                }
            }
        }
    }
}
