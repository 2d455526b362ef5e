//! What a ModernBERT `config.json` says, read the way transformers 5 reads it, and refused
//! where the crate cannot honour it.
//!
//! Two spellings of the attention pattern and the rotary thetas are in use: the one
//! transformers 4.x wrote and the published models have (`global_attn_every_n_layers`,
//! `global_rope_theta`, `local_rope_theta`) and the one transformers 5 saves (`layer_types`,
//! `rope_parameters` per layer type). Both are read, with transformers 5's precedence:
//! `layer_types` over `global_attn_every_n_layers`, `rope_parameters.*.rope_theta` over the
//! old thetas, and the defaults of `ModernBertConfig` for what neither gives.

use std::path::Path;

use serde_json::Value;

use crate::models::layers::config::{
    activation, bad, flag, get, hidden_and_heads, layer_types, non_negative, object_ref, positive,
    theta,
};
use crate::models::layers::kernels::Act;
use crate::Result;

/// `global_attn_every_n_layers` when the config gives neither it nor `layer_types`.
const DEFAULT_GLOBAL_EVERY: u64 = 3;
/// `global_rope_theta`'s default.
const DEFAULT_GLOBAL_THETA: f64 = 160_000.0;
/// `local_rope_theta`'s default.
const DEFAULT_LOCAL_THETA: f64 = 10_000.0;
/// `local_attention`'s default.
const DEFAULT_LOCAL_ATTENTION: u64 = 128;
/// `max_position_embeddings`' default.
const DEFAULT_MAX_POSITIONS: u64 = 8192;
/// `norm_eps`' default.
const DEFAULT_NORM_EPS: f64 = 1e-5;

/// How a sequence-classification head pools the last hidden states (`classifier_pooling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassifierPooling {
    /// The first token (`[CLS]`).
    Cls,
    /// The mean over the sequence's tokens.
    Mean,
}

/// The shape and options of a ModernBERT encoder and its classification head.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ModernBertConfig {
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub vocab: usize,
    /// The longest sequence (`max_position_embeddings`: the rotary tables' positions).
    pub max_positions: usize,
    pub eps: f32,
    /// Whether the layer norms have a bias (`norm_bias`).
    pub norm_bias: bool,
    /// Whether `Wqkv` and the attention's `Wo` have biases (`attention_bias`).
    pub attention_bias: bool,
    /// Whether the MLP's `Wi` and `Wo` have biases (`mlp_bias`).
    pub mlp_bias: bool,
    /// The GeGLU's activation (`hidden_activation`).
    pub act: Act,
    /// Per layer: `true` for global attention (`full_attention`), `false` for a sliding window.
    pub global: Vec<bool>,
    /// How far a token of a sliding layer sees on either side: `local_attention / 2`.
    pub window: usize,
    /// RoPE theta of the global layers.
    pub global_theta: f64,
    /// RoPE theta of the sliding layers.
    pub local_theta: f64,
    /// The classification head's pooling (`classifier_pooling`).
    pub classifier_pooling: ClassifierPooling,
    /// Whether the head's dense layer has a bias (`classifier_bias`).
    pub classifier_bias: bool,
    /// The head's activation (`classifier_activation`).
    pub classifier_act: Act,
}

impl ModernBertConfig {
    /// Reads a parsed `config.json` (`file` names it in errors).
    pub fn from_value(v: &Value, file: &Path) -> Result<Self> {
        let obj = object_ref(v, file)?;
        let (hidden, heads) = hidden_and_heads(obj, file)?;
        let head_dim = hidden / heads;
        if head_dim % 2 != 0 {
            return Err(bad(
                file,
                "num_attention_heads",
                format!("heads of {head_dim} values: rotary embeddings need an even head size"),
            ));
        }
        if let Some(d) = get(obj, "head_dim").filter(|d| d.as_u64() != Some(head_dim as u64)) {
            return Err(bad(
                file,
                "head_dim",
                format!("{d}, but hidden_size / num_attention_heads is {head_dim}"),
            ));
        }
        let layers = positive(obj, "num_hidden_layers", None, file)?;
        let global = match layer_types(obj, layers, file)? {
            Some(global) => global,
            None => {
                let every = positive(
                    obj,
                    "global_attn_every_n_layers",
                    Some(DEFAULT_GLOBAL_EVERY),
                    file,
                )?;
                (0..layers).map(|i| i % every == 0).collect()
            }
        };
        if let Some(v) = get(obj, "rope_scaling") {
            return Err(bad(
                file,
                "rope_scaling",
                format!("{v}: scaled rotary embeddings are not supported"),
            ));
        }
        let rope = match get(obj, "rope_parameters") {
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
        let mut thetas = [DEFAULT_GLOBAL_THETA, DEFAULT_LOCAL_THETA];
        for (i, (kind, old)) in [
            ("full_attention", "global_rope_theta"),
            ("sliding_attention", "local_rope_theta"),
        ]
        .into_iter()
        .enumerate()
        {
            let params = rope.and_then(|m| get(m, kind));
            let key = format!("rope_parameters.{kind}");
            let params = match params {
                None => None,
                Some(Value::Object(p)) => Some(p),
                Some(v) => return Err(bad(file, &key, format!("expected an object, got {v}"))),
            };
            if let Some(p) = params {
                match get(p, "rope_type").and_then(Value::as_str) {
                    None | Some("default") => {}
                    Some(other) => {
                        return Err(bad(
                            file,
                            &format!("{key}.rope_type"),
                            format!("{other:?} is not supported (only \"default\")"),
                        ))
                    }
                }
            }
            // transformers 5: the per-type theta, else the old key, else the default (an old
            // key present but null would leave no theta at all: refused).
            let new = params.and_then(|p| p.get("rope_theta"));
            thetas[i] = match (new, obj.get(old)) {
                (Some(t), _) => theta(t, &format!("{key}.rope_theta"), file)?,
                (None, Some(t)) => theta(t, old, file)?,
                (None, None) => thetas[i],
            };
        }
        let local_attention =
            positive(obj, "local_attention", Some(DEFAULT_LOCAL_ATTENTION), file)?;
        let eps = non_negative(obj, "norm_eps", DEFAULT_NORM_EPS, file)?;
        let classifier_pooling = match get(obj, "classifier_pooling").map(|v| (v, v.as_str())) {
            None | Some((_, Some("cls"))) => ClassifierPooling::Cls,
            Some((_, Some("mean"))) => ClassifierPooling::Mean,
            Some((v, _)) => {
                return Err(bad(
                    file,
                    "classifier_pooling",
                    format!("unsupported pooling {v} (supported: \"cls\", \"mean\")"),
                ))
            }
        };
        Ok(ModernBertConfig {
            hidden,
            heads,
            layers,
            intermediate: positive(obj, "intermediate_size", None, file)?,
            vocab: positive(obj, "vocab_size", None, file)?,
            max_positions: positive(
                obj,
                "max_position_embeddings",
                Some(DEFAULT_MAX_POSITIONS),
                file,
            )?,
            eps: eps as f32,
            norm_bias: flag(obj, "norm_bias", file)?,
            attention_bias: flag(obj, "attention_bias", file)?,
            mlp_bias: flag(obj, "mlp_bias", file)?,
            act: activation(obj, "hidden_activation", file)?,
            global,
            window: local_attention / 2,
            global_theta: thetas[0],
            local_theta: thetas[1],
            classifier_pooling,
            classifier_bias: flag(obj, "classifier_bias", file)?,
            classifier_act: activation(obj, "classifier_activation", file)?,
        })
    }

    /// The width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::layers::config::assert_patches_refused;
    use serde_json::json;

    fn parse(v: Value) -> Result<ModernBertConfig> {
        ModernBertConfig::from_value(&v, Path::new("dir/config.json"))
    }

    fn base() -> Value {
        json!({"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 4,
               "intermediate_size": 48, "vocab_size": 640})
    }

    #[test]
    fn defaults_are_transformers_ones() {
        let c = parse(base()).unwrap();
        assert_eq!(c.global, [true, false, false, true]);
        assert_eq!((c.global_theta, c.local_theta), (160_000.0, 10_000.0));
        assert_eq!((c.window, c.max_positions, c.eps), (64, 8192, 1e-5));
        assert!(!c.norm_bias && !c.attention_bias && !c.mlp_bias && !c.classifier_bias);
        assert_eq!((c.act, c.classifier_act), (Act::Gelu, Act::Gelu));
        assert_eq!(c.classifier_pooling, ClassifierPooling::Cls);
        assert_eq!(c.head_dim(), 16);
    }

    #[test]
    fn both_spellings_of_layers_and_thetas_are_read() {
        let mut old = base();
        old["global_attn_every_n_layers"] = json!(2);
        old["global_rope_theta"] = json!(1000.0);
        old["local_rope_theta"] = json!(50.0);
        old["local_attention"] = json!(16);
        let c = parse(old).unwrap();
        assert_eq!(c.global, [true, false, true, false]);
        assert_eq!((c.global_theta, c.local_theta, c.window), (1000.0, 50.0, 8));
        let mut new = base();
        new["layer_types"] = json!([
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "sliding_attention"
        ]);
        new["global_attn_every_n_layers"] = json!(2);
        new["rope_parameters"] = json!({
            "full_attention": {"rope_type": "default", "rope_theta": 7.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 3.0}});
        new["global_rope_theta"] = json!(1000.0);
        let c = parse(new).unwrap();
        assert_eq!(c.global, [false, true, false, false]);
        assert_eq!((c.global_theta, c.local_theta), (7.0, 3.0));
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_naming_the_key() {
        let cases: Vec<(&str, Value)> = vec![
            ("hidden_activation", json!({"hidden_activation": "swiglu"})),
            (
                "classifier_activation",
                json!({"classifier_activation": "tanh"}),
            ),
            ("classifier_pooling", json!({"classifier_pooling": "max"})),
            ("layer_types", json!({"layer_types": ["full_attention"]})),
            (
                "layer_types",
                json!({"layer_types": ["full_attention", "chunked_attention",
                                                   "full_attention", "full_attention"]}),
            ),
            (
                "rope_scaling",
                json!({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
            ),
            (
                "rope_parameters.sliding_attention.rope_type",
                json!({"rope_parameters": {"sliding_attention": {"rope_type": "yarn"}}}),
            ),
            ("local_rope_theta", json!({"local_rope_theta": null})),
            ("global_rope_theta", json!({"global_rope_theta": -1.0})),
            ("num_attention_heads", json!({"num_attention_heads": 3})),
            ("num_attention_heads", json!({"num_attention_heads": 32})),
            ("head_dim", json!({"head_dim": 8})),
            ("norm_bias", json!({"norm_bias": "yes"})),
            ("local_attention", json!({"local_attention": 0})),
            ("vocab_size", json!({"vocab_size": null})),
        ];
        assert_patches_refused(base, parse, cases);
    }
}
