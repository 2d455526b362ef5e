//! What an MPNet `config.json` says (transformers' `MPNetConfig`, in the spelling transformers
//! 4.x saved all-mpnet-base-v2's in and in transformers 5's), checked, and refused where the
//! crate cannot honour it. Absent keys take `MPNetConfig`'s defaults; every size is checked
//! against the tensors before it sizes anything (`encoder::check_config`).
//!
//! Refused, naming the key: a `hidden_size` that is not a multiple of `num_attention_heads`, a
//! `relative_attention_num_buckets` below 32 (transformers always computes 32 buckets and reads
//! past a smaller table: an `IndexError` there), a `max_position_embeddings` that leaves no
//! position for a token (positions start at 2), a `layer_norm_eps` that is not a number, and
//! activations the kernels do not have.
//!
//! `pad_token_id` is not read: transformers' `MPNetEmbeddings` numbers positions after the
//! literal padding index 1, whatever the config says.

use std::path::Path;

use serde_json::Value;

use crate::models::layers::config::{activation, bad, non_negative, object_of_type, positive};
use crate::models::layers::kernels::Act;
use crate::Result;

/// The id transformers' `MPNetEmbeddings` numbers positions after (its hard-coded
/// `padding_idx`): a token with this id gets position 1 and does not advance the count.
pub(crate) const PADDING_IDX: u32 = 1;

/// The buckets of the relative position bias transformers computes, whatever
/// `relative_attention_num_buckets` says (`MPNetEncoder.compute_position_bias`'s default): half
/// for keys at or before the query, half for keys after it.
pub(crate) const NUM_BUCKETS: usize = 32;

/// The distance from which every key falls into the last bucket of its side
/// (`relative_position_bucket`'s default `max_distance`).
pub(crate) const MAX_DISTANCE: usize = 128;

/// `layer_norm_eps`' default (`MPNetConfig`'s).
const DEFAULT_EPS: f64 = 1e-12;

/// The shape and options of an MPNet encoder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MpnetConfig {
    /// `hidden_size`.
    pub hidden: usize,
    /// `num_attention_heads`.
    pub heads: usize,
    /// `num_hidden_layers`.
    pub layers: usize,
    /// `intermediate_size`.
    pub intermediate: usize,
    /// `vocab_size`: the rows of the word embeddings.
    pub vocab: usize,
    /// `max_position_embeddings`: the rows of the position embeddings (positions start at 2,
    /// so two fewer tokens fit: [`max_length`](Self::max_length)).
    pub positions: usize,
    /// `relative_attention_num_buckets`: the rows of the relative attention bias table (at
    /// least [`NUM_BUCKETS`]; only the first 32 are read).
    pub buckets: usize,
    /// `layer_norm_eps`, for every layer norm.
    pub eps: f32,
    /// `hidden_act`, between the feed-forward layers.
    pub act: Act,
}

impl MpnetConfig {
    /// Reads a parsed `config.json` (`file` names it in errors).
    pub fn from_value(v: &Value, file: &Path) -> Result<Self> {
        let obj = object_of_type(v, "mpnet", "an MPNet model", file)?;
        let hidden = positive(&obj, "hidden_size", Some(768), file)?;
        let heads = positive(&obj, "num_attention_heads", Some(12), file)?;
        if hidden % heads != 0 {
            return Err(bad(
                file,
                "num_attention_heads",
                format!("hidden_size {hidden} is not a multiple of {heads} heads"),
            ));
        }
        let buckets = positive(&obj, "relative_attention_num_buckets", Some(32), file)?;
        if buckets < NUM_BUCKETS {
            return Err(bad(
                file,
                "relative_attention_num_buckets",
                format!(
                    "{buckets} is fewer than the {NUM_BUCKETS} buckets MPNet's attention reads \
                     (transformers computes {NUM_BUCKETS} whatever the config says, and fails \
                     on a smaller table)"
                ),
            ));
        }
        let positions = positive(&obj, "max_position_embeddings", Some(512), file)?;
        if positions <= PADDING_IDX as usize + 1 {
            return Err(bad(
                file,
                "max_position_embeddings",
                format!(
                    "{positions} leaves no position for a token (MPNet's positions start at \
                     {})",
                    PADDING_IDX + 1
                ),
            ));
        }
        let eps = non_negative(&obj, "layer_norm_eps", DEFAULT_EPS, file)?;
        Ok(MpnetConfig {
            hidden,
            heads,
            layers: positive(&obj, "num_hidden_layers", Some(12), file)?,
            intermediate: positive(&obj, "intermediate_size", Some(3072), file)?,
            vocab: positive(&obj, "vocab_size", Some(30527), file)?,
            positions,
            buckets,
            eps: eps as f32,
            act: activation(&obj, "hidden_act", file)?,
        })
    }

    /// The longest sequence the position embeddings cover: positions run from 2 to
    /// `max_position_embeddings - 1`.
    pub fn max_length(&self) -> usize {
        self.positions - (PADDING_IDX as usize + 1)
    }

    /// The width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(v: Value) -> Result<MpnetConfig> {
        MpnetConfig::from_value(&v, Path::new("config.json"))
    }

    /// all-mpnet-base-v2's config.json.
    fn published() -> Value {
        json!({"architectures": ["MPNetForMaskedLM"], "attention_probs_dropout_prob": 0.1,
               "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
               "intermediate_size": 3072, "layer_norm_eps": 1e-05,
               "max_position_embeddings": 514, "model_type": "mpnet",
               "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1,
               "relative_attention_num_buckets": 32, "transformers_version": "4.8.2",
               "vocab_size": 30527})
    }

    #[test]
    fn the_published_config_reads_and_absent_keys_take_mpnet_configs_defaults() {
        let c = parse(published()).unwrap();
        assert_eq!(
            (c.hidden, c.heads, c.layers, c.intermediate, c.vocab),
            (768, 12, 12, 3072, 30527)
        );
        assert_eq!((c.positions, c.max_length(), c.buckets), (514, 512, 32));
        assert_eq!((c.eps, c.act, c.head_dim()), (1e-5, Act::Gelu, 64));
        let d = parse(json!({"model_type": "mpnet"})).unwrap();
        assert_eq!((d.positions, d.max_length(), d.eps), (512, 510, 1e-12));
        assert_eq!((d.hidden, d.heads, d.buckets), (768, 12, 32));
        // A larger table is read: only its first 32 rows are used.
        let mut v = published();
        v["relative_attention_num_buckets"] = json!(64);
        assert_eq!(parse(v).unwrap().buckets, 64);
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_naming_config_json_and_the_key() {
        let cases: [(&str, Value); 8] = [
            ("relative_attention_num_buckets", json!(16)),
            ("relative_attention_num_buckets", json!(0)),
            ("num_attention_heads", json!(5)),
            ("max_position_embeddings", json!(2)),
            ("layer_norm_eps", json!("small")),
            ("hidden_act", json!("quick_gelu")),
            ("hidden_size", json!(-1)),
            ("model_type", json!("bert")),
        ];
        for (key, value) in cases {
            let mut v = published();
            v[key] = value;
            let e = parse(v).unwrap_err().to_string();
            assert!(e.contains("config.json") && e.contains(key), "{key}: {e}");
        }
    }
}
