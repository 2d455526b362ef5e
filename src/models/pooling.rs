//! The pooling modes of a sentence-transformers `1_Pooling/config.json`: how an embedder turns
//! an encoder's token states into one vector (the registry names them for the models it
//! knows; `embed` reads and applies them), and mean pooling itself ([`token_mean`]), which the
//! candle engine also runs on a device.

/// sentence-transformers' clamp on the token count of mean pooling.
pub(crate) const MEAN_POOL_MIN_COUNT: f32 = 1e-9;

/// The sum of a sequence's token states (`len` rows of `h` values, row-major) over its tokens
/// past the first `skip` (`include_prompt: false`), in order.
pub(crate) fn token_sum(rows: &[f32], len: usize, skip: usize, h: usize) -> Vec<f32> {
    let skip = skip.min(len);
    let mut sum = vec![0.0f32; h];
    for row in rows[skip * h..len * h].chunks_exact(h.max(1)) {
        sum.iter_mut().zip(row).for_each(|(s, v)| *s += v);
    }
    sum
}

/// The count of tokens [`token_sum`] adds, clamped to [`MEAN_POOL_MIN_COUNT`] as
/// sentence-transformers clamps it.
pub(crate) fn token_count(len: usize, skip: usize) -> f32 {
    ((len - skip.min(len)) as f32).max(MEAN_POOL_MIN_COUNT)
}

/// The mean of a sequence's token states over its tokens past the first `skip`, as
/// sentence-transformers takes it: [`token_sum`] divided by [`token_count`] (zeros when no
/// token is left).
pub(crate) fn token_mean(rows: &[f32], len: usize, skip: usize, h: usize) -> Vec<f32> {
    let n = token_count(len, skip);
    let sum = token_sum(rows, len, skip, h);
    sum.into_iter().map(|s| s / n).collect()
}

/// One pooling mode of `1_Pooling/config.json`. With several, their vectors are concatenated
/// in the order the config lists them (for the older `pooling_mode_*` flags: cls, max, mean,
/// mean_sqrt_len_tokens, lasttoken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolingMode {
    /// The first token (`[CLS]`): `pooling_mode_cls_token`.
    Cls,
    /// The element-wise maximum over the tokens: `pooling_mode_max_tokens`.
    Max,
    /// The mean over the tokens: `pooling_mode_mean_tokens`.
    Mean,
    /// The sum over the tokens divided by the square root of their count:
    /// `pooling_mode_mean_sqrt_len_tokens`.
    MeanSqrtLen,
    /// The last token (`[SEP]` for BERT): `pooling_mode_lasttoken`.
    LastToken,
}

impl PoolingMode {
    /// Every mode with its flag in older pooling configs, in the order sentence-transformers
    /// concatenates flagged modes.
    pub(crate) const LEGACY_KEYS: [(PoolingMode, &'static str); 5] = [
        (PoolingMode::Cls, "pooling_mode_cls_token"),
        (PoolingMode::Max, "pooling_mode_max_tokens"),
        (PoolingMode::Mean, "pooling_mode_mean_tokens"),
        (
            PoolingMode::MeanSqrtLen,
            "pooling_mode_mean_sqrt_len_tokens",
        ),
        (PoolingMode::LastToken, "pooling_mode_lasttoken"),
    ];

    /// The mode called `name` in a `pooling_mode` setting.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        [
            PoolingMode::Cls,
            PoolingMode::Max,
            PoolingMode::Mean,
            PoolingMode::MeanSqrtLen,
            PoolingMode::LastToken,
        ]
        .into_iter()
        .find(|m| m.as_str() == name)
    }

    /// The mode's name as sentence-transformers spells it (`cls`, `max`, `mean`,
    /// `mean_sqrt_len_tokens`, `lasttoken`).
    pub fn as_str(self) -> &'static str {
        match self {
            PoolingMode::Cls => "cls",
            PoolingMode::Max => "max",
            PoolingMode::Mean => "mean",
            PoolingMode::MeanSqrtLen => "mean_sqrt_len_tokens",
            PoolingMode::LastToken => "lasttoken",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_mean_leaves_the_skipped_tokens_out_and_is_zero_without_tokens() {
        // Three tokens of width 2.
        let rows = [1.0f32, -2.0, 3.0, 4.0, -5.0, 0.0];
        assert_eq!(token_mean(&rows, 3, 0, 2), [-1.0 / 3.0, 2.0 / 3.0]);
        assert_eq!(token_mean(&rows, 3, 1, 2), [-1.0, 2.0]);
        assert_eq!(token_mean(&rows, 2, 0, 2), [2.0, 1.0]);
        assert_eq!(token_mean(&rows, 3, 3, 2), [0.0, 0.0]);
        assert_eq!(token_mean(&rows, 3, 9, 2), [0.0, 0.0]);
    }
}
