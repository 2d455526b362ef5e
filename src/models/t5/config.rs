//! What a T5 `config.json` (`model_type` `t5` or `mt5`) says, read the way transformers 5's
//! `T5Config` reads it, and refused where the crate cannot honour it.
//!
//! Absent keys take `T5Config`'s defaults (`d_model` 512, `d_kv` 64, `d_ff` 2048, 6 layers of
//! 8 heads, 32 buckets up to distance 128, `layer_norm_epsilon` 1e-6, `feed_forward_proj`
//! `"relu"`). `feed_forward_proj` is `ACT` or `gated-ACT` (`"gated-gelu"` meaning the tanh
//! GELU, as transformers reads it for T5 v1.1's checkpoints).
//!
//! Whether the decoder's output is scaled by `d_model^-1/2` before the output head is
//! transformers 5's `scale_decoder_outputs`: for `t5`, that key where `config.json` has it (as
//! transformers 5 saves it), else `tie_word_embeddings` not `false` (T5 v1.0 scales, v1.1 does
//! not); never for `mt5`, whose modeling code has no such step.

use std::path::Path;

use serde_json::{Map, Value};

use crate::models::layers::config::{
    bad, count, flag, flag_or, non_negative, object_ref, positive,
};
use crate::models::layers::kernels::Act;
use crate::models::layers::relative::Buckets;
use crate::Result;

/// The model types read here: T5 and mT5 share the architecture.
pub const MODEL_TYPES: [&str; 2] = ["t5", "mt5"];

/// The feed-forward block of every layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FeedForward {
    /// The activation (`feed_forward_proj` without `gated-`).
    pub act: Act,
    /// `act(wi_0 · x) * (wi_1 · x)` (`gated-*`) instead of `act(wi · x)`.
    pub gated: bool,
}

/// The shape and options of a T5 encoder-decoder (or of its encoder alone).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct T5Config {
    /// `vocab_size`: the rows of the shared embedding (and of the output head).
    pub vocab: usize,
    /// `d_model`: the width of the hidden states.
    pub hidden: usize,
    /// `d_kv`: the width of one attention head (`num_heads * d_kv` need not be `d_model`).
    pub head_dim: usize,
    /// `num_heads`.
    pub heads: usize,
    /// `d_ff`: the feed-forward block's inner width.
    pub intermediate: usize,
    /// `num_layers`: the encoder's blocks.
    pub layers: usize,
    /// `num_decoder_layers` (`num_layers` when absent).
    pub decoder_layers: usize,
    /// The encoder's relative position buckets.
    pub buckets: Buckets,
    /// `layer_norm_epsilon`, for every norm.
    pub eps: f32,
    /// `feed_forward_proj`.
    pub ff: FeedForward,
    /// Whether the decoder's last hidden state is scaled by `d_model^-1/2` before the output
    /// head (see the module documentation).
    pub scale_decoder_outputs: bool,
    /// `decoder_start_token_id` (else `pad_token_id`, else 0): the decoder's first input.
    pub decoder_start: u32,
}

impl T5Config {
    /// Reads a parsed `config.json` (`file` names it in errors).
    pub fn from_value(v: &Value, file: &Path) -> Result<Self> {
        let obj = object_ref(v, file)?;
        let mt5 = match obj.get("model_type").and_then(Value::as_str) {
            Some(t) if MODEL_TYPES.contains(&t) => t == "mt5",
            other => {
                return Err(bad(
                    file,
                    "model_type",
                    format!("{other:?} is not a T5 model (\"t5\" or \"mt5\")"),
                ))
            }
        };
        let scale_decoder_outputs = match (mt5, obj.contains_key("scale_decoder_outputs")) {
            (true, _) => false,
            (false, true) => flag(obj, "scale_decoder_outputs", file)?,
            (false, false) => flag_or(obj, "tie_word_embeddings", true, file)?,
        };
        let layers = positive(obj, "num_layers", Some(6), file)?;
        let buckets = Buckets {
            count: positive(obj, "relative_attention_num_buckets", Some(32), file)?,
            max_distance: positive(obj, "relative_attention_max_distance", Some(128), file)?,
            bidirectional: true,
        };
        buckets
            .check()
            .map_err(|e| bad(file, "relative_attention_num_buckets", e))?;
        let decoder_start = match count(obj, "decoder_start_token_id", file)? {
            Some(id) => id,
            None => count(obj, "pad_token_id", file)?.unwrap_or(0),
        };
        let decoder_start = u32::try_from(decoder_start).map_err(|_| {
            bad(
                file,
                "decoder_start_token_id",
                format!("{decoder_start} is not a token id"),
            )
        })?;
        Ok(T5Config {
            vocab: positive(obj, "vocab_size", Some(32128), file)?,
            hidden: positive(obj, "d_model", Some(512), file)?,
            head_dim: positive(obj, "d_kv", Some(64), file)?,
            heads: positive(obj, "num_heads", Some(8), file)?,
            intermediate: positive(obj, "d_ff", Some(2048), file)?,
            layers,
            decoder_layers: positive(obj, "num_decoder_layers", Some(layers as u64), file)?,
            buckets,
            eps: non_negative(obj, "layer_norm_epsilon", 1e-6, file)? as f32,
            ff: feed_forward(obj, file)?,
            scale_decoder_outputs,
            decoder_start,
        })
    }

    /// The width of the attention's queries, keys and values (`num_heads * d_kv`).
    pub fn inner(&self) -> usize {
        self.heads * self.head_dim
    }
}

/// `feed_forward_proj`: `ACT` or `gated-ACT`, as `T5Config` splits it.
fn feed_forward(obj: &Map<String, Value>, file: &Path) -> Result<FeedForward> {
    const KEY: &str = "feed_forward_proj";
    let proj = match obj.get(KEY) {
        None | Some(Value::Null) => "relu",
        Some(Value::String(s)) => s.as_str(),
        Some(v) => return Err(bad(file, KEY, format!("expected a string, got {v}"))),
    };
    let (gated, name) = match proj.split_once('-') {
        None => (false, proj),
        Some(("gated", name)) if !name.contains('-') => (true, name),
        _ => {
            return Err(bad(
                file,
                KEY,
                format!("{proj:?} is neither ACT nor gated-ACT (e.g. \"relu\", \"gated-gelu\")"),
            ))
        }
    };
    // transformers reads "gated-gelu" (T5 v1.1, mT5, flan-t5) as the tanh approximation.
    let act = match proj {
        "gated-gelu" => Some(Act::GeluTanh),
        _ => Act::from_name(name),
    };
    let act = act.ok_or_else(|| {
        bad(
            file,
            KEY,
            format!(
                "unsupported activation {name:?} (supported: relu, gelu, gelu_new, \
                 gelu_pytorch_tanh, gelu_fast, silu, each alone or gated-)"
            ),
        )
    })?;
    Ok(FeedForward { act, gated })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::layers::config::assert_patches_refused;
    use serde_json::json;

    fn parse(v: Value) -> Result<T5Config> {
        T5Config::from_value(&v, Path::new("dir/config.json"))
    }

    #[test]
    fn defaults_are_t5config_s() {
        let c = parse(json!({"model_type": "t5"})).unwrap();
        assert_eq!(
            (c.vocab, c.hidden, c.head_dim, c.heads, c.intermediate),
            (32128, 512, 64, 8, 2048)
        );
        assert_eq!((c.layers, c.decoder_layers), (6, 6));
        assert_eq!((c.buckets.count, c.buckets.max_distance), (32, 128));
        assert_eq!(c.eps, 1e-6);
        assert_eq!(
            c.ff,
            FeedForward {
                act: Act::Relu,
                gated: false
            }
        );
        assert!(c.scale_decoder_outputs);
        assert_eq!(c.decoder_start, 0);
    }

    #[test]
    fn v1_1_and_mt5_read_as_transformers_reads_them() {
        let c = parse(json!({
            "model_type": "mt5", "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false,
            "num_layers": 8, "num_decoder_layers": 4, "d_kv": 80, "num_heads": 6,
            "decoder_start_token_id": 5, "pad_token_id": 0
        }))
        .unwrap();
        assert_eq!(
            c.ff,
            FeedForward {
                act: Act::GeluTanh,
                gated: true
            }
        );
        assert!(!c.scale_decoder_outputs);
        // transformers 5 saves scale_decoder_outputs beside a forced tie_word_embeddings true;
        // the key wins. mT5 never scales.
        let saved = json!({"model_type": "t5", "tie_word_embeddings": true,
            "scale_decoder_outputs": false});
        assert!(!parse(saved).unwrap().scale_decoder_outputs);
        let old = json!({"model_type": "t5", "tie_word_embeddings": false,
            "scale_decoder_outputs": true});
        assert!(parse(old).unwrap().scale_decoder_outputs);
        let tied_mt5 = json!({"model_type": "mt5", "tie_word_embeddings": true});
        assert!(!parse(tied_mt5).unwrap().scale_decoder_outputs);
        assert_eq!((c.layers, c.decoder_layers, c.inner()), (8, 4, 480));
        assert_eq!(c.decoder_start, 5);
        let silu = parse(
            json!({"model_type": "t5", "feed_forward_proj": "gated-silu",
            "pad_token_id": 3}),
        )
        .unwrap();
        assert_eq!(
            silu.ff,
            FeedForward {
                act: Act::Silu,
                gated: true
            }
        );
        assert_eq!(silu.decoder_start, 3);
        let gelu = parse(json!({"model_type": "t5", "feed_forward_proj": "gelu"})).unwrap();
        assert_eq!(gelu.ff.act, Act::Gelu);
    }

    #[test]
    fn what_the_crate_cannot_honour_is_refused_naming_the_key() {
        assert_patches_refused(
            || json!({"model_type": "t5"}),
            parse,
            vec![
                ("model_type", json!({"model_type": "umt5"})),
                (
                    "feed_forward_proj",
                    json!({"feed_forward_proj": "gated-gelu-x"}),
                ),
                (
                    "feed_forward_proj",
                    json!({"feed_forward_proj": "double-gelu"}),
                ),
                ("feed_forward_proj", json!({"feed_forward_proj": "tanh"})),
                ("feed_forward_proj", json!({"feed_forward_proj": 3})),
                (
                    "relative_attention_num_buckets",
                    json!({"relative_attention_num_buckets": 2}),
                ),
                (
                    "relative_attention_num_buckets",
                    json!({"relative_attention_max_distance": 8}),
                ),
                ("d_model", json!({"d_model": 0})),
                ("num_heads", json!({"num_heads": -1})),
                ("layer_norm_epsilon", json!({"layer_norm_epsilon": "small"})),
                ("tie_word_embeddings", json!({"tie_word_embeddings": "no"})),
                ("scale_decoder_outputs", json!({"scale_decoder_outputs": 1})),
                (
                    "decoder_start_token_id",
                    json!({"decoder_start_token_id": 1u64 << 40}),
                ),
            ],
        );
    }
}
