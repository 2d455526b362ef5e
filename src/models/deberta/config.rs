//! What a DeBERTa-v2 / v3 `config.json` says, read as transformers 5's `DebertaV2Config` and
//! `modeling_deberta_v2.py` read it (their defaults for what it leaves out), and refused where
//! the crate cannot honour it.
//!
//! Honoured: relative attention with the content-to-position (`c2p`) and position-to-content
//! (`p2c`) terms in any combination (`pos_att_type`, a list or the older `"p2c|c2p"` string),
//! log-bucketed relative positions (`position_buckets`) or plain ones clamped to
//! `max_relative_positions` (`-1`: `max_position_embeddings`), the position projections shared
//! with the content ones (`share_att_key`) or their own, the relative embeddings layer-normed
//! (`norm_rel_ebd: "layer_norm"`) or not, absolute positions (`position_biased_input`), token
//! types (`type_vocab_size > 0`), an `embedding_size` other than `hidden_size` (projected), and
//! the pooler's activation. Refused, naming the key: no relative attention
//! (`relative_attention: false`, DeBERTa-v1-style absolute-only models), the convolution of
//! deberta-v2-xlarge / xxlarge (`conv_kernel_size > 0`), an unknown attention type or
//! `norm_rel_ebd`, a pooler wider or narrower than the encoder.

use std::path::Path;

use serde_json::{Map, Value};

use crate::models::layers::config::{
    activation, bad, flag_or, get, hidden_and_heads, non_negative, object_ref, positive,
};
pub(crate) use crate::models::layers::head::PoolerAct;
use crate::models::layers::kernels::Act;
use crate::Result;

/// `layer_norm_eps`' default.
const DEFAULT_EPS: f64 = 1e-7;
/// `max_position_embeddings`' default.
const DEFAULT_MAX_POSITIONS: u64 = 512;

/// How relative positions become rows of the relative embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RelativePositions {
    /// `position_buckets` when positive: log buckets beyond `buckets / 2` tokens apart.
    pub buckets: Option<usize>,
    /// `max_relative_positions`, or `max_position_embeddings` when below 1.
    pub max_relative: usize,
}

impl RelativePositions {
    /// Half the rows of the relative embeddings (`att_span` in transformers): a relative
    /// position `r` reads row `clamp(r + span, 0, 2 span - 1)`.
    pub fn span(&self) -> usize {
        self.buckets.unwrap_or(self.max_relative)
    }

    /// The relative position transformers gives query `i` and key `j` for `delta = i - j`
    /// (`make_log_bucket_position`, computed in float32 as torch does).
    pub fn bucket(&self, delta: i64) -> i64 {
        let Some(buckets) = self.buckets else {
            return delta;
        };
        let mid = (buckets / 2) as i64;
        let abs = if delta < mid && delta > -mid {
            mid - 1
        } else {
            delta.abs()
        };
        if abs <= mid {
            return delta;
        }
        // torch: ceil(log(abs / mid) / log(tensor((max - 1) / mid)) * (mid - 1)) + mid, in
        // float32 (the Python quotient is rounded to float32 before its log).
        let base = (((self.max_relative - 1) as f64) / mid as f64) as f32;
        let log_pos =
            ((abs as f32 / mid as f32).ln() / base.ln() * (mid - 1) as f32).ceil() + mid as f32;
        log_pos as i64 * delta.signum()
    }

    /// The row of the relative embeddings that query `i` and key `j` read, `delta = i - j`.
    pub fn row(&self, delta: i64) -> usize {
        let span = self.span() as i64;
        (self.bucket(delta) + span).clamp(0, 2 * span - 1) as usize
    }
}

/// The shape and options of a DeBERTa-v2 / v3 encoder and its classification head.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DebertaConfig {
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub vocab: usize,
    /// The width of the embeddings before `embed_proj` (`embedding_size`, default `hidden`).
    pub embedding: usize,
    /// `max_position_embeddings`: the longest input (and the absolute positions' rows).
    pub max_positions: usize,
    /// `type_vocab_size`: 0 for no token type embeddings.
    pub type_vocab: usize,
    /// Whether absolute position embeddings are added (`position_biased_input`).
    pub absolute_positions: bool,
    pub eps: f32,
    /// `hidden_act`.
    pub act: Act,
    /// The relative positions (`relative_attention` is required).
    pub relative: RelativePositions,
    /// The content-to-position term (`"c2p"` in `pos_att_type`).
    pub c2p: bool,
    /// The position-to-content term (`"p2c"` in `pos_att_type`).
    pub p2c: bool,
    /// Whether the position projections are the content ones (`share_att_key`).
    pub share_att_key: bool,
    /// Whether the relative embeddings are layer-normed (`norm_rel_ebd: "layer_norm"`).
    pub norm_rel: bool,
    /// `pooler_hidden_act`.
    pub pooler_act: PoolerAct,
}

/// A signed integer `key`, `default` when absent or null.
fn signed(obj: &Map<String, Value>, key: &str, default: i64, file: &Path) -> Result<i64> {
    match get(obj, key) {
        None => Ok(default),
        Some(v) => v
            .as_i64()
            .ok_or_else(|| bad(file, key, format!("expected an integer, got {v}"))),
    }
}

/// The entries of a `"a|b"` string or a list of strings, lower-cased and trimmed as
/// transformers reads `pos_att_type` and `norm_rel_ebd`.
fn names(obj: &Map<String, Value>, key: &str, file: &Path) -> Result<Vec<String>> {
    let list = match get(obj, key) {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => s.split('|').map(str::to_string).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(file, key, format!("expected a list of strings, got {i}")))
            })
            .collect::<Result<Vec<_>>>()?,
        Some(v) => {
            return Err(bad(
                file,
                key,
                format!("expected a string or a list of strings, got {v}"),
            ))
        }
    };
    Ok(list.iter().map(|s| s.trim().to_lowercase()).collect())
}

impl DebertaConfig {
    /// Reads a parsed `config.json` (`file` names it in errors).
    pub fn from_value(v: &Value, file: &Path) -> Result<Self> {
        let obj = object_ref(v, file)?;
        let (hidden, heads) = hidden_and_heads(obj, file)?;
        if let Some(d) =
            get(obj, "attention_head_size").filter(|d| d.as_u64() != Some((hidden / heads) as u64))
        {
            return Err(bad(
                file,
                "attention_head_size",
                format!(
                    "{d}: heads of another width than hidden_size / num_attention_heads ({}) \
                     are not supported",
                    hidden / heads
                ),
            ));
        }
        if !flag_or(obj, "relative_attention", false, file)? {
            return Err(bad(
                file,
                "relative_attention",
                "false (or absent): a DeBERTa without relative attention is not supported",
            ));
        }
        let conv = signed(obj, "conv_kernel_size", 0, file)?;
        if conv > 0 {
            return Err(bad(
                file,
                "conv_kernel_size",
                format!("{conv}: the convolution layer (deberta-v2-xlarge) is not supported"),
            ));
        }
        let (mut c2p, mut p2c) = (false, false);
        for t in names(obj, "pos_att_type", file)? {
            match t.as_str() {
                "c2p" => c2p = true,
                "p2c" => p2c = true,
                other => {
                    return Err(bad(
                        file,
                        "pos_att_type",
                        format!("unsupported attention type {other:?} (supported: c2p, p2c)"),
                    ))
                }
            }
        }
        let mut norm_rel = false;
        for n in names(obj, "norm_rel_ebd", file)? {
            match n.as_str() {
                "layer_norm" => norm_rel = true,
                "none" => {}
                other => {
                    return Err(bad(
                        file,
                        "norm_rel_ebd",
                        format!("unsupported value {other:?} (supported: none, layer_norm)"),
                    ))
                }
            }
        }
        let max_positions = positive(
            obj,
            "max_position_embeddings",
            Some(DEFAULT_MAX_POSITIONS),
            file,
        )?;
        let max_relative = match signed(obj, "max_relative_positions", -1, file)? {
            n if n < 1 => max_positions,
            n => usize::try_from(n)
                .map_err(|_| bad(file, "max_relative_positions", format!("{n} is too large")))?,
        };
        let buckets = match signed(obj, "position_buckets", -1, file)? {
            n if n < 1 => None,
            n => {
                let n = usize::try_from(n)
                    .map_err(|_| bad(file, "position_buckets", format!("{n} is too large")))?;
                // transformers' log buckets divide by log((max - 1) / (n / 2)): it must be > 0.
                if n < 2 || max_relative <= n / 2 + 1 {
                    return Err(bad(
                        file,
                        "position_buckets",
                        format!(
                            "{n} with max_relative_positions {max_relative}: log buckets need \
                             2 <= position_buckets and position_buckets / 2 + 1 < \
                             max_relative_positions"
                        ),
                    ));
                }
                Some(n)
            }
        };
        let pooler_act = match get(obj, "pooler_hidden_act") {
            Some(Value::String(s)) if s == "tanh" => PoolerAct::Tanh,
            _ => PoolerAct::Act(activation(obj, "pooler_hidden_act", file)?),
        };
        let pooler = positive(obj, "pooler_hidden_size", Some(hidden as u64), file)?;
        if pooler != hidden {
            return Err(bad(
                file,
                "pooler_hidden_size",
                format!("{pooler}, but the pooler reads hidden states of hidden_size {hidden}"),
            ));
        }
        let type_vocab = match signed(obj, "type_vocab_size", 0, file)? {
            n if n <= 0 => 0,
            n => usize::try_from(n)
                .map_err(|_| bad(file, "type_vocab_size", format!("{n} is too large")))?,
        };
        let eps = non_negative(obj, "layer_norm_eps", DEFAULT_EPS, file)?;
        Ok(DebertaConfig {
            hidden,
            heads,
            layers: positive(obj, "num_hidden_layers", None, file)?,
            intermediate: positive(obj, "intermediate_size", None, file)?,
            vocab: positive(obj, "vocab_size", None, file)?,
            embedding: positive(obj, "embedding_size", Some(hidden as u64), file)?,
            max_positions,
            type_vocab,
            absolute_positions: flag_or(obj, "position_biased_input", true, file)?,
            eps: eps as f32,
            act: activation(obj, "hidden_act", file)?,
            relative: RelativePositions {
                buckets,
                max_relative,
            },
            c2p,
            p2c,
            share_att_key: flag_or(obj, "share_att_key", false, file)?,
            norm_rel,
            pooler_act,
        })
    }

    /// The width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    /// transformers' `scale_factor`: 1, plus 1 for each of `c2p` and `p2c`; every attention
    /// term is divided by `sqrt(head_dim * scale_factor)`.
    pub fn scale_factor(&self) -> usize {
        1 + usize::from(self.c2p) + usize::from(self.p2c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::layers::config::assert_patches_refused;
    use serde_json::json;

    fn parse(v: Value) -> Result<DebertaConfig> {
        DebertaConfig::from_value(&v, Path::new("dir/config.json"))
    }

    /// mxbai-rerank-base-v1's config.json (DeBERTa-v3-base), the keys the encoder reads.
    fn v3_base() -> Value {
        json!({"architectures": ["DebertaV2ForSequenceClassification"], "hidden_act": "gelu",
               "hidden_size": 768, "intermediate_size": 3072, "layer_norm_eps": 1e-7,
               "max_position_embeddings": 512, "max_relative_positions": -1,
               "norm_rel_ebd": "layer_norm", "num_attention_heads": 12, "num_hidden_layers": 12,
               "pad_token_id": 0, "pooler_dropout": 0, "pooler_hidden_act": "gelu",
               "pooler_hidden_size": 768, "pos_att_type": ["p2c", "c2p"],
               "position_biased_input": false, "position_buckets": 256,
               "relative_attention": true, "share_att_key": true, "type_vocab_size": 0,
               "vocab_size": 128100})
    }

    #[test]
    fn deberta_v3_base_is_read() {
        let c = parse(v3_base()).unwrap();
        assert_eq!(
            (c.hidden, c.heads, c.layers, c.intermediate),
            (768, 12, 12, 3072)
        );
        assert_eq!((c.embedding, c.type_vocab, c.max_positions), (768, 0, 512));
        assert!(c.c2p && c.p2c && c.share_att_key && c.norm_rel && !c.absolute_positions);
        assert_eq!(
            c.relative,
            RelativePositions {
                buckets: Some(256),
                max_relative: 512
            }
        );
        assert_eq!(
            (c.relative.span(), c.scale_factor(), c.head_dim()),
            (256, 3, 64)
        );
        assert_eq!(c.pooler_act, PoolerAct::Act(Act::Gelu));
        assert_eq!(c.eps, 1e-7);
    }

    #[test]
    fn the_older_spellings_and_defaults_are_transformers_ones() {
        let mut v = v3_base();
        let o = v.as_object_mut().unwrap();
        for k in [
            "position_biased_input",
            "position_buckets",
            "norm_rel_ebd",
            "share_att_key",
            "type_vocab_size",
            "layer_norm_eps",
            "max_relative_positions",
        ] {
            o.remove(k);
        }
        o.insert("pos_att_type".into(), json!("C2P | p2c"));
        o.insert("pooler_hidden_act".into(), json!("tanh"));
        let c = parse(v).unwrap();
        assert!(c.c2p && c.p2c && !c.share_att_key && !c.norm_rel && c.absolute_positions);
        assert_eq!(
            c.relative,
            RelativePositions {
                buckets: None,
                max_relative: 512
            }
        );
        assert_eq!(
            (c.type_vocab, c.eps, c.pooler_act),
            (0, 1e-7, PoolerAct::Tanh)
        );
    }

    #[test]
    fn positions_are_bucketed_and_clamped() {
        let plain = RelativePositions {
            buckets: None,
            max_relative: 4,
        };
        let rows: Vec<usize> = (-6..=6).map(|d| plain.row(d)).collect();
        assert_eq!(rows, [0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 7, 7, 7]);
        let log = RelativePositions {
            buckets: Some(8),
            max_relative: 512,
        };
        // Within mid = 4 positions the relative position itself; beyond, log buckets up to
        // mid - 1 + mid = 7 at the farthest; odd-symmetric.
        assert_eq!((log.bucket(3), log.bucket(-4), log.bucket(5)), (3, -4, 5));
        assert_eq!((log.bucket(511), log.bucket(-511)), (7, -7));
        for d in 0..512 {
            assert_eq!(log.bucket(-d), -log.bucket(d));
        }
    }

    /// The buckets of every relative position of a 512-token sequence equal those of
    /// transformers' make_log_bucket_position (float32 torch), kept by
    /// tests/fixtures/deberta_ce_tiny/make.py for DeBERTa-v3-base's 256 buckets and the
    /// fixture's 8.
    #[test]
    fn buckets_are_transformers_ones() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/deberta_ce_tiny/v3/expected.json"
        );
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let tables = v["buckets"].as_array().unwrap();
        assert_eq!(tables.len(), 2);
        for t in tables {
            let rel = RelativePositions {
                buckets: Some(t["position_buckets"].as_u64().unwrap() as usize),
                max_relative: t["max_relative_positions"].as_u64().unwrap() as usize,
            };
            let from = t["from"].as_i64().unwrap();
            let want = t["buckets"].as_array().unwrap();
            assert_eq!(want.len(), 1023);
            for (i, w) in want.iter().enumerate() {
                let delta = from + i as i64;
                assert_eq!(rel.bucket(delta), w.as_i64().unwrap(), "{rel:?} at {delta}");
            }
        }
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_naming_the_key() {
        let cases: Vec<(&str, Value)> = vec![
            ("relative_attention", json!({"relative_attention": false})),
            ("relative_attention", json!({"relative_attention": null})),
            ("conv_kernel_size", json!({"conv_kernel_size": 3})),
            ("pos_att_type", json!({"pos_att_type": ["c2p", "p2p"]})),
            ("pos_att_type", json!({"pos_att_type": 3})),
            ("norm_rel_ebd", json!({"norm_rel_ebd": "layer_norm|rms"})),
            ("position_buckets", json!({"position_buckets": 1})),
            ("position_buckets", json!({"position_buckets": 1100})),
            ("pooler_hidden_size", json!({"pooler_hidden_size": 1024})),
            (
                "pooler_hidden_act",
                json!({"pooler_hidden_act": "quick_gelu"}),
            ),
            ("hidden_act", json!({"hidden_act": "quick_gelu"})),
            ("attention_head_size", json!({"attention_head_size": 32})),
            ("num_attention_heads", json!({"num_attention_heads": 7})),
            ("share_att_key", json!({"share_att_key": "yes"})),
            (
                "max_relative_positions",
                json!({"max_relative_positions": 1.5}),
            ),
            ("vocab_size", json!({"vocab_size": null})),
        ];
        assert_patches_refused(v3_base, parse, cases);
    }
}
