//! Rotary position embeddings: the cos/sin tables (with transformers' "linear" scaling; NTK
//! scaling is that of a larger theta) and the rotation of one head, as every rotary model here
//! (Qwen, ModernBERT, GTE / NomicBERT) applies them.

use serde::Deserialize;

use crate::{Error, Result};

/// RoPE cos/sin tables, `(positions, head_dim / 2)` each, computed like `transformers` in
/// float32: `inv_freq[i] = 1 / theta^(2i / head_dim)`, angle `= position * inv_freq[i]` rounded
/// to f32, then its cosine and sine.
#[derive(Debug, Clone)]
pub(crate) struct Rope {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
}

impl Rope {
    /// Tables for heads of `head_dim` (even) and positions `0..positions`.
    pub fn new(head_dim: usize, theta: f64, positions: usize) -> Self {
        Self::scaled(head_dim, theta, 1.0, positions)
    }

    /// Tables whose inverse frequencies are divided by `divisor` (transformers' "linear"
    /// scaling; GTE's NTK scaling is that of a larger theta).
    pub fn scaled(head_dim: usize, theta: f64, divisor: f64, positions: usize) -> Self {
        let divisor = divisor as f32;
        let inv: Vec<f32> = base_inv_freq(head_dim, theta)
            .into_iter()
            .map(|f| f / divisor)
            .collect();
        Self::from_inv_freq(&inv, 1.0, positions)
    }

    /// Tables for the inverse frequencies `inv` (one per pair of a head's values), each cosine
    /// and sine multiplied by `attention` (transformers' `attention_scaling`, 1 but for YaRN).
    pub fn from_inv_freq(inv: &[f32], attention: f32, positions: usize) -> Self {
        let half = inv.len();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for pos in 0..positions {
            for &f in inv {
                let angle = (pos as f32 * f) as f64;
                cos.push(angle.cos() as f32 * attention);
                sin.push(angle.sin() as f32 * attention);
            }
        }
        Rope { cos, sin, half }
    }

    /// The number of positions the tables cover.
    pub fn positions(&self) -> usize {
        self.cos.len().checked_div(self.half).unwrap_or(0)
    }

    /// The whole `(cos, sin)` tables, `(positions, head_dim / 2)` each, row-major.
    #[cfg(feature = "candle")]
    pub fn tables(&self) -> (&[f32], &[f32]) {
        (&self.cos, &self.sin)
    }

    /// `(cos, sin)` at `pos`, `head_dim / 2` values each.
    #[inline(always)]
    pub fn at(&self, pos: usize) -> (&[f32], &[f32]) {
        let r = pos * self.half..(pos + 1) * self.half;
        (&self.cos[r.clone()], &self.sin[r])
    }
}

/// Rotates one head in place at the angles `(cos, sin)` (rotate-half layout, as Qwen3's
/// `apply_rotary_pos_emb`): `x1' = x1 cos - x2 sin`, `x2' = x2 cos + x1 sin`, with `x1` and
/// `x2` the first and second halves.
#[inline(always)]
pub(crate) fn rope_head(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let (x1, x2) = head.split_at_mut(cos.len());
    for (((a, b), &c), &s) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
        let (u, v) = (*a, *b);
        *a = u * c - v * s;
        *b = v * c + u * s;
    }
}

/// `1 / theta^(2i / head_dim)` for `i` in `0..head_dim / 2`, in float32 as transformers computes
/// them.
fn base_inv_freq(head_dim: usize, theta: f64) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| {
            let exponent = (2 * i) as f32 / head_dim as f32;
            1.0f32 / (theta.powf(exponent as f64) as f32)
        })
        .collect()
}

/// How a model scales its RoPE frequencies (transformers' `rope_type` and its parameters).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RopeScaling {
    /// `default`, and `dynamic` within the model's positions (dynamic NTK changes the
    /// frequencies only past `max_position_embeddings`, which no input here reaches).
    Default,
    /// `linear`: every inverse frequency divided by `factor`.
    Linear { factor: f64 },
    /// `yarn`: low frequencies interpolated, high ones kept, a ramp between, cos and sin
    /// scaled by the attention factor.
    Yarn {
        factor: f64,
        original: f64,
        beta_fast: f64,
        beta_slow: f64,
        attention_factor: Option<f64>,
        mscale: Option<f64>,
        mscale_all_dim: Option<f64>,
        truncate: bool,
    },
    /// `llama3`: wavelengths beyond `original / low` divided by `factor`, below
    /// `original / high` kept, smoothed between.
    Llama3 {
        factor: f64,
        low: f64,
        high: f64,
        original: f64,
    },
}

impl RopeScaling {
    /// The tables of heads of `head_dim` for positions `0..positions`, as transformers'
    /// `ROPE_INIT_FUNCTIONS` compute the inverse frequencies and the attention scaling.
    pub fn rope(&self, head_dim: usize, theta: f64, positions: usize) -> Rope {
        let (inv, attention) = self.inv_freq(head_dim, theta);
        Rope::from_inv_freq(&inv, attention, positions)
    }

    /// The inverse frequencies and the attention scaling.
    pub fn inv_freq(&self, head_dim: usize, theta: f64) -> (Vec<f32>, f32) {
        let base = base_inv_freq(head_dim, theta);
        match *self {
            RopeScaling::Default => (base, 1.0),
            RopeScaling::Linear { factor } => {
                let factor = factor as f32;
                (base.into_iter().map(|f| f / factor).collect(), 1.0)
            }
            RopeScaling::Yarn {
                factor,
                original,
                beta_fast,
                beta_slow,
                attention_factor,
                mscale,
                mscale_all_dim,
                truncate,
            } => {
                let get_mscale = |scale: f64, m: f64| {
                    if scale <= 1.0 {
                        1.0
                    } else {
                        0.1 * m * scale.ln() + 1.0
                    }
                };
                let attention = match (attention_factor, mscale, mscale_all_dim) {
                    (Some(a), _, _) => a,
                    (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                        get_mscale(factor, m) / get_mscale(factor, all)
                    }
                    _ => get_mscale(factor, 1.0),
                };
                let dim = head_dim as f64;
                let correction = |rotations: f64| {
                    dim * (original / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * theta.ln())
                };
                let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
                if truncate {
                    low = low.floor();
                    high = high.ceil();
                }
                let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
                if low == high {
                    high += 0.001;
                }
                let (factor32, span) = (factor as f32, (high - low) as f32);
                let inv = (0..head_dim / 2)
                    .map(|i| {
                        // transformers: pos_freqs = theta^(2i/dim); 1/pos_freqs and
                        // 1/(factor * pos_freqs), mixed by a ramp, in float32.
                        let exponent = (2 * i) as f32 / head_dim as f32;
                        let pos_freq = theta.powf(exponent as f64) as f32;
                        let (extrapolation, interpolation) =
                            (1.0 / pos_freq, 1.0 / (factor32 * pos_freq));
                        let ramp = ((i as f32 - low as f32) / span).clamp(0.0, 1.0);
                        let keep = 1.0 - ramp;
                        interpolation * (1.0 - keep) + extrapolation * keep
                    })
                    .collect();
                (inv, attention as f32)
            }
            RopeScaling::Llama3 {
                factor,
                low,
                high,
                original,
            } => {
                let (low_wavelen, high_wavelen) = (original / low, original / high);
                let factor32 = factor as f32;
                let inv = base
                    .into_iter()
                    .map(|f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let scaled = if (wavelen as f64) > low_wavelen {
                            f / factor32
                        } else {
                            f
                        };
                        let medium =
                            (wavelen as f64) >= high_wavelen && (wavelen as f64) <= low_wavelen;
                        if medium {
                            let smooth = (original as f32 / wavelen - low as f32)
                                / (high as f32 - low as f32);
                            (1.0 - smooth) * scaled / factor32 + smooth * scaled
                        } else {
                            scaled
                        }
                    })
                    .collect();
                (inv, 1.0)
            }
        }
    }
}
/// `rope_parameters` (newer configs) or `rope_scaling` (older ones).
#[derive(Debug, Deserialize)]
pub(crate) struct RopeParameters {
    #[serde(default)]
    rope_type: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    factor: Option<f64>,
    #[serde(default)]
    original_max_position_embeddings: Option<f64>,
    #[serde(default)]
    beta_fast: Option<f64>,
    #[serde(default)]
    beta_slow: Option<f64>,
    #[serde(default)]
    attention_factor: Option<f64>,
    #[serde(default)]
    mscale: Option<f64>,
    #[serde(default)]
    mscale_all_dim: Option<f64>,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    low_freq_factor: Option<f64>,
    #[serde(default)]
    high_freq_factor: Option<f64>,
    #[serde(default)]
    partial_rotary_factor: Option<f64>,
}

impl RopeParameters {
    /// The scaling these parameters describe, as transformers 5 reads them
    /// (`modeling_rope_utils`); `max_positions` is `max_position_embeddings`, which YaRN and
    /// Llama 3 take for `original_max_position_embeddings` when it is absent. A type or a
    /// parameter the crate cannot compute is an error naming the key.
    pub fn scaling(&self, key: &str, max_positions: Option<usize>) -> Result<RopeScaling> {
        let kind = self.rope_type.as_deref().or(self.kind.as_deref());
        let bad = |what: String| Error::model(format!("{key}: {what}"));
        if let Some(p) = self.partial_rotary_factor.filter(|&p| p != 1.0) {
            return Err(bad(format!(
                "partial_rotary_factor {p}: RoPE on part of each head is not supported"
            )));
        }
        let positive = |name: &str, v: Option<f64>| -> Result<f64> {
            match v {
                Some(x) if x.is_finite() && x > 0.0 => Ok(x),
                Some(x) => Err(bad(format!("{name} {x} must be a positive number"))),
                None => Err(bad(format!("{kind:?} needs {name}"))),
            }
        };
        let original = || -> Result<f64> {
            let fallback = max_positions.map(|n| n as f64);
            positive(
                "original_max_position_embeddings",
                self.original_max_position_embeddings.or(fallback),
            )
        };
        Ok(match kind {
            None | Some("default") | Some("dynamic") => RopeScaling::Default,
            Some("linear") => RopeScaling::Linear {
                factor: positive("factor", self.factor)?,
            },
            Some("yarn") => {
                let original = original()?;
                let factor = match self.factor {
                    Some(f) => positive("factor", Some(f))?,
                    None => {
                        positive("max_position_embeddings", max_positions.map(|n| n as f64))?
                            / original
                    }
                };
                RopeScaling::Yarn {
                    factor,
                    original,
                    beta_fast: self.beta_fast.filter(|b| *b != 0.0).unwrap_or(32.0),
                    beta_slow: self.beta_slow.filter(|b| *b != 0.0).unwrap_or(1.0),
                    attention_factor: self.attention_factor,
                    mscale: self.mscale,
                    mscale_all_dim: self.mscale_all_dim,
                    truncate: self.truncate.unwrap_or(true),
                }
            }
            Some("llama3") => RopeScaling::Llama3 {
                factor: positive("factor", self.factor)?,
                low: positive("low_freq_factor", self.low_freq_factor)?,
                high: positive("high_freq_factor", self.high_freq_factor)?,
                original: original()?,
            },
            Some(other) => {
                return Err(bad(format!(
                    "rope_type {other:?} is not supported (supported: default, linear, \
                     dynamic, yarn, llama3)"
                )))
            }
        })
    }
}
