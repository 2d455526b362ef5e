//! What a GTE `config.json` says, in either of its two spellings, and refused where the crate
//! cannot honour it.
//!
//! - The hub's (`model_type: "new"`, Alibaba-NLP/new-impl's remote code, which
//!   gte-multilingual-reranker-base and gte-multilingual-base name): `rope_theta` and
//!   `rope_scaling: {"type": "ntk", "factor": f}`. new-impl's NTK scaling (without `mixed_b`)
//!   takes the base `rope_theta * f` and divides every inverse frequency by `f ^ (2 / head_dim)`
//!   when `f > 1`; its defaults are `NewConfig`'s.
//! - transformers 5's (`model_type: "gte"`, `GteConfig`): `rope_parameters` with `rope_type`
//!   `"default"` or `"linear"` (inverse frequencies divided by `factor`); its defaults are
//!   `GteConfig`'s.
//!
//! Refused, naming the key: absolute position embeddings, RMS norms, the log-n attention scale,
//! NTK's `mixed_b`, unpacked q/k/v projections (`pack_qkv: false`), any other RoPE type.

use std::path::Path;

use serde_json::{Map, Value};

use crate::models::kernels::Act;
use crate::models::modernbert::config::{activation, bad, flag_or, get, positive, theta};
use crate::{Error, Result};

/// `layer_norm_eps`' default (both spellings).
const DEFAULT_EPS: f64 = 1e-12;

/// Which of the two spellings a config is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spelling {
    /// `model_type: "new"` (the hub's remote code).
    New,
    /// `model_type: "gte"` (transformers 5).
    Gte,
}

/// The shape and options of a GTE encoder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GteConfig {
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub vocab: usize,
    /// Token type embeddings' rows (`type_vocab_size`; 0: none, as gte-base-en-v1.5).
    pub type_vocab: usize,
    /// The longest sequence (`max_position_embeddings`).
    pub max_positions: usize,
    pub eps: f32,
    /// The gated MLP's activation (`hidden_act`), applied to the gate.
    pub act: Act,
    /// RoPE's base, after NTK scaling.
    pub rope_theta: f64,
    /// What RoPE's inverse frequencies are divided by (1 unscaled).
    pub rope_divisor: f64,
}

/// A positive finite number `key` of `obj`, `default` when absent.
fn number(obj: &Map<String, Value>, key: &str, default: f64, file: &Path) -> Result<f64> {
    get(obj, key).map_or(Ok(default), |v| theta(v, key, file))
}

/// A positive finite number `key` of `obj` that must be there (`what` names it in errors).
fn required(obj: &Map<String, Value>, key: &str, what: &str, file: &Path) -> Result<f64> {
    match get(obj, key) {
        Some(v) => theta(v, what, file),
        None => Err(bad(file, what, "missing (a positive number)")),
    }
}

/// `value` must be `want` (or absent, when `want` is the default): what the crate honours.
fn must_be(obj: &Map<String, Value>, key: &str, want: &Value, file: &Path) -> Result<()> {
    match get(obj, key) {
        Some(v) if v != want => Err(bad(
            file,
            key,
            format!("{v} is not supported (only {want})"),
        )),
        _ => Ok(()),
    }
}

impl GteConfig {
    /// Reads a parsed `config.json` in `spelling` (`file` names it in errors).
    pub fn from_value(v: &Value, spelling: Spelling, file: &Path) -> Result<Self> {
        let Value::Object(obj) = v else {
            return Err(Error::model(format!(
                "{}: expected a JSON object",
                file.display()
            )));
        };
        let hidden = positive(obj, "hidden_size", None, file)?;
        let heads = positive(obj, "num_attention_heads", None, file)?;
        if hidden % heads != 0 || (hidden / heads) % 2 != 0 {
            return Err(bad(
                file,
                "num_attention_heads",
                format!(
                    "hidden_size {hidden} is not an even head size times num_attention_heads \
                     {heads} (rotary embeddings need an even head size)"
                ),
            ));
        }
        let head_dim = (hidden / heads) as f64;
        let (rope_theta, rope_divisor, default_positions) = match spelling {
            Spelling::New => {
                must_be(obj, "position_embedding_type", &"rope".into(), file)?;
                must_be(obj, "layer_norm_type", &"layer_norm".into(), file)?;
                must_be(obj, "pack_qkv", &true.into(), file)?;
                if flag_or(obj, "logn_attention_scale", false, file)? {
                    return Err(bad(file, "logn_attention_scale", "true is not supported"));
                }
                let base = number(obj, "rope_theta", 10_000.0, file)?;
                match get(obj, "rope_scaling") {
                    None => (base, 1.0, 2048),
                    Some(Value::Object(s)) => {
                        let kind = get(s, "type").or_else(|| get(s, "rope_type"));
                        if kind.and_then(Value::as_str) != Some("ntk") {
                            return Err(bad(
                                file,
                                "rope_scaling.type",
                                format!(
                                    "{} is not supported (only \"ntk\")",
                                    kind.unwrap_or(&Value::Null)
                                ),
                            ));
                        }
                        if let Some(b) = get(s, "mixed_b") {
                            return Err(bad(
                                file,
                                "rope_scaling.mixed_b",
                                format!("{b}: mixed NTK scaling is not supported"),
                            ));
                        }
                        let f = required(s, "factor", "rope_scaling.factor", file)?;
                        if f > 1.0 {
                            (base * f, f.powf(2.0 / head_dim), 2048)
                        } else {
                            (base, 1.0, 2048)
                        }
                    }
                    Some(v) => {
                        return Err(bad(
                            file,
                            "rope_scaling",
                            format!("expected an object, got {v}"),
                        ))
                    }
                }
            }
            Spelling::Gte => {
                let params = match get(obj, "rope_parameters") {
                    None => None,
                    Some(Value::Object(p)) => Some(p),
                    Some(v) => {
                        return Err(bad(
                            file,
                            "rope_parameters",
                            format!("expected an object, got {v}"),
                        ))
                    }
                };
                let theta_of =
                    |p: Option<&Map<String, Value>>| match p.and_then(|p| get(p, "rope_theta")) {
                        Some(t) => theta(t, "rope_parameters.rope_theta", file),
                        None => number(obj, "rope_theta", 160_000.0, file),
                    };
                let base = theta_of(params)?;
                let kind = params.and_then(|p| get(p, "rope_type"));
                let divisor = match (params, kind) {
                    (_, None) => 1.0,
                    (_, Some(k)) if k == "default" => 1.0,
                    (Some(p), Some(k)) if k == "linear" => {
                        required(p, "factor", "rope_parameters.factor", file)?
                    }
                    (_, Some(k)) => {
                        return Err(bad(
                            file,
                            "rope_parameters.rope_type",
                            format!("{k} is not supported (only \"default\" and \"linear\")"),
                        ))
                    }
                };
                (base, divisor, 8192)
            }
        };
        let eps = match get(obj, "layer_norm_eps") {
            None => DEFAULT_EPS,
            Some(v) => v
                .as_f64()
                .filter(|e| e.is_finite() && *e >= 0.0)
                .ok_or_else(|| {
                    bad(
                        file,
                        "layer_norm_eps",
                        format!("expected a number, got {v}"),
                    )
                })?,
        };
        let type_vocab = match get(obj, "type_vocab_size") {
            Some(Value::Number(n)) if n.as_u64() == Some(0) => 0,
            _ => positive(obj, "type_vocab_size", Some(1), file)?,
        };
        Ok(GteConfig {
            hidden,
            heads,
            layers: positive(obj, "num_hidden_layers", None, file)?,
            intermediate: positive(obj, "intermediate_size", None, file)?,
            vocab: positive(obj, "vocab_size", None, file)?,
            type_vocab,
            max_positions: positive(
                obj,
                "max_position_embeddings",
                Some(default_positions),
                file,
            )?,
            eps: eps as f32,
            act: activation(obj, "hidden_act", file)?,
            rope_theta,
            rope_divisor,
        })
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

    fn parse(v: Value, spelling: Spelling) -> Result<GteConfig> {
        GteConfig::from_value(&v, spelling, Path::new("config.json"))
    }

    fn base() -> Value {
        json!({"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 3,
               "intermediate_size": 48, "vocab_size": 800})
    }

    #[test]
    fn ntk_scaling_is_a_larger_base_and_a_divisor() {
        let mut v = base();
        v["rope_theta"] = json!(20000);
        v["rope_scaling"] = json!({"type": "ntk", "factor": 8.0});
        let c = parse(v.clone(), Spelling::New).unwrap();
        assert_eq!(c.rope_theta, 160_000.0);
        assert!((c.rope_divisor - 8f64.powf(2.0 / 16.0)).abs() < 1e-15);
        assert_eq!((c.type_vocab, c.max_positions), (1, 2048));
        // A factor of 1 or less scales nothing.
        v["rope_scaling"]["factor"] = json!(1.0);
        let c = parse(v, Spelling::New).unwrap();
        assert_eq!((c.rope_theta, c.rope_divisor), (20000.0, 1.0));
        // No scaling: NewConfig's theta.
        let c = parse(base(), Spelling::New).unwrap();
        assert_eq!((c.rope_theta, c.rope_divisor), (10000.0, 1.0));
    }

    #[test]
    fn transformers_spelling_reads_rope_parameters() {
        let c = parse(base(), Spelling::Gte).unwrap();
        assert_eq!(
            (c.rope_theta, c.rope_divisor, c.max_positions),
            (160_000.0, 1.0, 8192)
        );
        let mut v = base();
        v["rope_parameters"] = json!({"rope_type": "linear", "rope_theta": 5.0, "factor": 2.0});
        v["type_vocab_size"] = json!(0);
        let c = parse(v, Spelling::Gte).unwrap();
        assert_eq!((c.rope_theta, c.rope_divisor, c.type_vocab), (5.0, 2.0, 0));
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_naming_the_key() {
        let cases: [(Spelling, &str, Value); 9] = [
            (
                Spelling::New,
                "position_embedding_type",
                json!({"position_embedding_type": "absolute"}),
            ),
            (
                Spelling::New,
                "layer_norm_type",
                json!({"layer_norm_type": "rms_norm"}),
            ),
            (Spelling::New, "pack_qkv", json!({"pack_qkv": false})),
            (
                Spelling::New,
                "logn_attention_scale",
                json!({"logn_attention_scale": true}),
            ),
            (
                Spelling::New,
                "rope_scaling.type",
                json!({"rope_scaling": {"type": "linear", "factor": 2.0}}),
            ),
            (
                Spelling::New,
                "rope_scaling.mixed_b",
                json!({"rope_scaling": {"type": "ntk", "factor": 2.0, "mixed_b": 0.7}}),
            ),
            (
                Spelling::New,
                "rope_scaling.factor",
                json!({"rope_scaling": {"type": "ntk"}}),
            ),
            (
                Spelling::Gte,
                "rope_parameters.rope_type",
                json!({"rope_parameters": {"rope_type": "yarn"}}),
            ),
            (Spelling::Gte, "hidden_act", json!({"hidden_act": "swish"})),
        ];
        for (spelling, key, edit) in cases {
            let mut v = base();
            for (k, x) in edit.as_object().unwrap() {
                v[k] = x.clone();
            }
            let e = parse(v, spelling).unwrap_err().to_string();
            assert!(e.contains("config.json") && e.contains(key), "{key}: {e}");
        }
    }
}
