//! What a Gemma3 text `config.json` (`model_type` `gemma3_text`) says, read the way
//! transformers 5 reads it, and refused where the crate cannot honour it.
//!
//! Two spellings of the rotary settings are in use: the one transformers 4.x wrote and the
//! published models have (`rope_theta` for the full-attention layers, `rope_local_base_freq`
//! for the sliding ones, `rope_scaling` for the full ones only) and the one transformers 5
//! saves (`rope_parameters` per layer type). Both are read with transformers 5's precedence;
//! the layer pattern comes from `layer_types`, else from `sliding_window_pattern` (every
//! sixth layer full by default).
//!
//! With `use_bidirectional_attention` (EmbeddingGemma), transformers turns `sliding_window`
//! into `sliding_window / 2 + 1` exclusive: a sliding layer's token sees the tokens at most
//! `sliding_window / 2` positions away on either side.

use std::path::Path;

use serde_json::{Map, Value};

use crate::models::layers::config::{
    activation, bad, flag, get, layer_types, non_negative, positive, theta,
};
use crate::models::layers::kernels::Act;
use crate::models::layers::rope::{RopeParameters, RopeScaling};
use crate::Result;

/// The model type of a Gemma3 text model.
pub const MODEL_TYPE: &str = "gemma3_text";

/// RoPE theta of the full-attention layers when the config gives none.
const DEFAULT_GLOBAL_THETA: f64 = 1_000_000.0;
/// RoPE theta of the sliding layers when the config gives none.
const DEFAULT_LOCAL_THETA: f64 = 10_000.0;
/// `sliding_window_pattern`'s default: layers 6, 12, ... attend globally.
const DEFAULT_PATTERN: u64 = 6;

/// One kind of layer's rotary settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LayerRope {
    pub theta: f64,
    pub scaling: RopeScaling,
}

/// The shape and options of a Gemma3 text encoder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Gemma3Config {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    /// The longest sequence (`max_position_embeddings`).
    pub max_positions: usize,
    pub eps: f32,
    /// The gated MLP's activation (`hidden_activation`).
    pub act: Act,
    /// Whether the q/k/v/o projections have biases (`attention_bias`).
    pub attention_bias: bool,
    /// `query_pre_attn_scalar`: attention scores are scaled by its inverse square root.
    pub query_scalar: f64,
    /// Per layer: `true` for full attention, `false` for a sliding window.
    pub global: Vec<bool>,
    /// How far a token of a sliding layer sees on either side (`sliding_window / 2`).
    pub window: usize,
    /// The full-attention layers' RoPE.
    pub global_rope: LayerRope,
    /// The sliding layers' RoPE.
    pub local_rope: LayerRope,
}

impl Gemma3Config {
    /// Reads a parsed `config.json` (`file` names it in errors).
    pub fn from_value(v: &Value, file: &Path) -> Result<Self> {
        let Value::Object(obj) = v else {
            return Err(bad(file, "model_type", "config.json is not a JSON object"));
        };
        match get(obj, "model_type").and_then(Value::as_str) {
            Some(MODEL_TYPE) => {}
            other => {
                return Err(bad(
                    file,
                    "model_type",
                    format!("{other:?} is not {MODEL_TYPE:?}"),
                ))
            }
        }
        let hidden = positive(obj, "hidden_size", None, file)?;
        let heads = positive(obj, "num_attention_heads", None, file)?;
        let kv_heads = positive(obj, "num_key_value_heads", Some(4), file)?;
        if heads % kv_heads != 0 {
            return Err(bad(
                file,
                "num_key_value_heads",
                format!("num_attention_heads {heads} is not a multiple of {kv_heads}"),
            ));
        }
        let head_dim = positive(obj, "head_dim", Some(256), file)?;
        if head_dim % 2 != 0 {
            return Err(bad(
                file,
                "head_dim",
                format!("{head_dim}: rotary embeddings need an even head size"),
            ));
        }
        let layers = positive(obj, "num_hidden_layers", None, file)?;
        if !flag(obj, "use_bidirectional_attention", file)? {
            return Err(bad(
                file,
                "use_bidirectional_attention",
                "false: a causal Gemma3 decoder is not an encoder (EmbeddingGemma sets it \
                 true); only bidirectional Gemma3 text models embed here",
            ));
        }
        if let Some(cap) = get(obj, "attn_logit_softcapping") {
            return Err(bad(
                file,
                "attn_logit_softcapping",
                format!("{cap}: capped attention scores are not supported (Gemma3 sets null)"),
            ));
        }
        let act = match get(obj, "hidden_activation") {
            None => Act::GeluTanh,
            Some(_) => activation(obj, "hidden_activation", file)?,
        };
        let query_scalar = match get(obj, "query_pre_attn_scalar") {
            None => 256.0,
            Some(t) => theta(t, "query_pre_attn_scalar", file)?,
        };
        let global = layer_pattern(obj, layers, file)?;
        let sliding_window = positive(obj, "sliding_window", Some(4096), file)?;
        let (global_rope, local_rope) = ropes(obj, file)?;
        Ok(Gemma3Config {
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim,
            intermediate: positive(obj, "intermediate_size", None, file)?,
            vocab: positive(obj, "vocab_size", None, file)?,
            max_positions: positive(obj, "max_position_embeddings", Some(131_072), file)?,
            eps: non_negative(obj, "rms_norm_eps", 1e-6, file)? as f32,
            act,
            attention_bias: flag(obj, "attention_bias", file)?,
            query_scalar,
            global,
            window: sliding_window / 2,
            global_rope,
            local_rope,
        })
    }
}

/// Which layers attend globally: `layer_types`, else every `sliding_window_pattern`-th layer.
fn layer_pattern(obj: &Map<String, Value>, layers: usize, file: &Path) -> Result<Vec<bool>> {
    if let Some(global) = layer_types(obj, layers, file)? {
        return Ok(global);
    }
    let every = positive(obj, "sliding_window_pattern", Some(DEFAULT_PATTERN), file)?;
    Ok((0..layers).map(|i| (i + 1) % every == 0).collect())
}

/// The RoPE of the full-attention and the sliding layers, as transformers 5's
/// `Gemma3TextConfig.convert_rope_params_to_dict` reads them.
fn ropes(obj: &Map<String, Value>, file: &Path) -> Result<(LayerRope, LayerRope)> {
    let params = match get(obj, "rope_parameters") {
        None => None,
        Some(Value::Object(m)) => Some(m),
        Some(v) => {
            return Err(bad(
                file,
                "rope_parameters",
                format!("expected an object, got {v}"),
            ))
        }
    };
    let read = |kind: &str, old_theta: &str, default_theta: f64| -> Result<LayerRope> {
        let mut key = format!("rope_parameters.{kind}");
        let mut p = match params.and_then(|m| get(m, kind)) {
            None => Map::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(v) => return Err(bad(file, &key, format!("expected an object, got {v}"))),
        };
        // transformers 4.x's rope_scaling applies to the full-attention layers only.
        if kind == "full_attention" && params.is_none() {
            if let Some(scaling) = get(obj, "rope_scaling") {
                let Value::Object(s) = scaling else {
                    return Err(bad(
                        file,
                        "rope_scaling",
                        format!("expected an object, got {scaling}"),
                    ));
                };
                p.extend(s.clone());
                key = "rope_scaling".into();
            }
        }
        let theta_value = match (get(&p, "rope_theta"), get(obj, old_theta)) {
            (Some(t), _) => theta(t, &format!("{key}.rope_theta"), file)?,
            (None, Some(t)) => theta(t, old_theta, file)?,
            (None, None) => default_theta,
        };
        let parsed: RopeParameters = serde_json::from_value(Value::Object(p))
            .map_err(|e| bad(file, &key, format!("unreadable: {e}")))?;
        let scaling = parsed.scaling(&key, None).map_err(|e| bad(file, &key, e))?;
        Ok(LayerRope {
            theta: theta_value,
            scaling,
        })
    };
    Ok((
        read("full_attention", "rope_theta", DEFAULT_GLOBAL_THETA)?,
        read(
            "sliding_attention",
            "rope_local_base_freq",
            DEFAULT_LOCAL_THETA,
        )?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::layers::config::assert_patches_refused;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "model_type": "gemma3_text", "hidden_size": 32, "num_hidden_layers": 6,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 48, "vocab_size": 512, "use_bidirectional_attention": true,
            "sliding_window": 6, "query_pre_attn_scalar": 24,
        })
    }

    fn read(v: &Value) -> Result<Gemma3Config> {
        Gemma3Config::from_value(v, Path::new("config.json"))
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = read(&base()).unwrap();
        // Every sixth layer is global; the window is half of sliding_window.
        assert_eq!(c.global, [false, false, false, false, false, true]);
        assert_eq!(c.window, 3);
        assert_eq!(c.act, Act::GeluTanh);
        assert_eq!((c.global_rope.theta, c.local_rope.theta), (1e6, 1e4));
        assert_eq!(c.global_rope.scaling, RopeScaling::Default);
        assert_eq!(
            (c.eps, c.max_positions, c.query_scalar),
            (1e-6, 131_072, 24.0)
        );
    }

    #[test]
    fn both_rope_spellings_are_read() {
        let mut old = base();
        old["rope_theta"] = json!(5e5);
        old["rope_local_base_freq"] = json!(2e4);
        old["rope_scaling"] = json!({"rope_type": "linear", "factor": 8.0});
        let c = read(&old).unwrap();
        assert_eq!((c.global_rope.theta, c.local_rope.theta), (5e5, 2e4));
        assert_eq!(c.global_rope.scaling, RopeScaling::Linear { factor: 8.0 });
        assert_eq!(c.local_rope.scaling, RopeScaling::Default);
        let mut new = base();
        new["rope_parameters"] = json!({
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 5e5},
            "sliding_attention": {"rope_type": "default", "rope_theta": 2e4},
        });
        assert_eq!(read(&new).unwrap(), c);
        // layer_types win over the pattern.
        new["layer_types"] = json!([
            "full_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "sliding_attention",
            "sliding_attention"
        ]);
        assert_eq!(
            read(&new).unwrap().global,
            [true, false, true, false, false, false]
        );
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_naming_the_key() {
        let parse = |v: Value| Gemma3Config::from_value(&v, Path::new("dir/config.json"));
        let cases = vec![
            (
                "use_bidirectional_attention",
                json!({"use_bidirectional_attention": false}),
            ),
            (
                "attn_logit_softcapping",
                json!({"attn_logit_softcapping": 50.0}),
            ),
            ("num_key_value_heads", json!({"num_key_value_heads": 3})),
            ("head_dim", json!({"head_dim": 15})),
            ("layer_types", json!({"layer_types": ["full_attention"]})),
            ("hidden_activation", json!({"hidden_activation": "gelu_10"})),
            (
                "rope_scaling",
                json!({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}),
            ),
            ("model_type", json!({"model_type": "gemma3"})),
        ];
        assert_patches_refused(base, parse, cases);
    }
}
