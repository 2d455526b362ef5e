//! The pooling modes of a sentence-transformers `1_Pooling/config.json`: how an embedder turns
//! an encoder's token states into one vector (the registry names them for the models it
//! knows; `embed` reads and applies them).

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
