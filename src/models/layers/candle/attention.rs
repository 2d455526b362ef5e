//! The attention's scores with the padding mask added, in one product where the device allows
//! it.
//!
//! On a CUDA device the scores of every (row, head) of a batch are one cuBLASLt product whose
//! epilogue adds the mask, a bias per key (`simd::cublaslt::scores`): the scores are written
//! once, where candle's product and its broadcast addition of the mask pass over them twice.
//! Everywhere else (candle's CPU backend, Metal, strided inputs, the opt-out
//! `RERANK_CUDA_FUSED_LINEAR=0`), it is candle's product, then the additions.
//!
//! The mask is 0 for a key and [`mask_value`](super::mask_value) for padding, so a key's score
//! is the same whichever order the additions take; a padded key's is the large negative
//! number plus a little, which the softmax turns into 0 either way.

use candle_core::{DType, Tensor};

use super::additive_mask;

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
    /// t)` in rows padded to a multiple of [`ROW_ALIGN`] elements: what the product's epilogue
    /// takes (`None` elsewhere).
    #[cfg(feature = "cuda")]
    fused: Option<(crate::simd::cublaslt::Handle, Tensor)>,
}

impl KeyMask {
    /// The mask of `mask` `(b, t)` (1 for a key, 0 for padding) in `dtype`, for the scores of
    /// `heads` heads.
    pub fn new(mask: &Tensor, dtype: DType, heads: usize) -> candle_core::Result<Self> {
        let additive = additive_mask(mask, dtype)?;
        #[cfg(feature = "cuda")]
        let fused = match crate::simd::cublaslt::handle(&additive)? {
            Some(lt) => Some((lt, per_head(&additive, heads)?)),
            None => None,
        };
        #[cfg(not(feature = "cuda"))]
        let _ = heads;
        Ok(KeyMask {
            additive,
            #[cfg(feature = "cuda")]
            fused,
        })
    }

    /// The additive mask `(b, 1, 1, t)`: 0 for a key, [`mask_value`](super::mask_value) for
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
            if let Some(scores) = crate::simd::cublaslt::scores(lt, q, k, mask, plus)? {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn the_mask_per_head_repeats_each_rows_mask_in_aligned_rows() {
        let (b, heads, t) = (2, 3, 5);
        let dev = Device::Cpu;
        let mask = Tensor::from_slice(&[1u32, 1, 1, 1, 1, 1, 1, 0, 0, 0], (b, t), &dev).unwrap();
        let additive = additive_mask(&mask, DType::F32).unwrap();
        let rows = per_head(&additive, heads).unwrap();
        assert_eq!(rows.dims(), [b * heads, ROW_ALIGN]);
        let rows: Vec<Vec<f32>> = rows.to_vec2().unwrap();
        let masked = super::super::mask_value(DType::F32);
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
        let masked = super::super::mask_value(DType::F32);
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
