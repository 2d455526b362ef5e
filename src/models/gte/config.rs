//! What a GTE or NomicBERT `config.json` says, in any of their spellings, and refused where
//! the crate cannot honour it. Both are BERT with rotary positions and a gated MLP (transformers
//! 5 builds `GteModel` and `NomicBertModel` on the same layer); their tensor names differ
//! ([`Layout`]).
//!
//! - GTE as the hub publishes it (`model_type: "new"`, Alibaba-NLP/new-impl's remote code:
//!   gte-multilingual-reranker-base, gte-multilingual-base, gte-base-en-v1.5): `rope_theta` and
//!   `rope_scaling: {"type": "ntk", "factor": f}`. new-impl's NTK scaling (without `mixed_b`)
//!   takes the base `rope_theta * f` and divides every inverse frequency by `f ^ (2 / head_dim)`
//!   when `f > 1`; the defaults are `NewConfig`'s.
//! - GTE as transformers 5 saves it (`model_type: "gte"`): `rope_parameters` with `rope_type`
//!   `"default"` or `"linear"` (inverse frequencies divided by `factor`); `GteConfig`'s defaults.
//! - NomicBERT as the hub publishes it (`model_type: "nomic_bert"` with nomic-bert-2048's
//!   GPT-style keys: nomic-embed-text-v1 / v1.5): `n_embd`, `n_head`, `n_layer`, `n_inner`,
//!   `rotary_emb_base`, `activation_function` (`swiglu` or `geglu`), `layer_norm_epsilon`.
//! - NomicBERT as transformers 5 saves it (`model_type: "nomic_bert"` with `hidden_size`, ...,
//!   `rope_parameters`); `NomicBertConfig`'s defaults.
//!
//! - jina's XLM-RoBERTa with rotary positions (`model_type: "xlm-roberta"`,
//!   `position_embedding_type: "rotary"`: jina-embeddings-v3's remote code): `rotary_emb_base`
//!   (10000 by default), BERT's other keys, and the task adapters (`lora_adaptations`,
//!   `task_instructions`, `lora_alpha`, `lora_rank`: [`Adapters`]); its checkpoint is read
//!   through `layers::encoder::read_flash_layout` under transformers' BERT names
//!   ([`Layout::Bert`]), its MLP not gated.
//!
//! Refused, naming the key: absolute position embeddings, RMS norms, the log-n attention scale,
//! NTK's `mixed_b`, unpacked q/k/v projections (`pack_qkv: false`), other RoPE types; for
//! NomicBERT, biases (`qkv_proj_bias`, `mlp_fc1_bias`, `mlp_fc2_bias`), pre-norm, partial,
//! interleaved or scaled rotary embeddings, and activations other than SwiGLU and GeGLU; for
//! jina's, interleaved, partial or scaled rotary embeddings.

use std::path::Path;

use serde_json::{Map, Value};

use crate::models::layers::config::{
    activation, bad, flag_or, get, non_negative, object_ref, positive, theta,
};
use crate::models::layers::kernels::Act;
use crate::Result;

/// `layer_norm_eps`' default (every spelling).
const DEFAULT_EPS: f64 = 1e-12;

/// Which spelling a config is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spelling {
    /// `model_type: "new"` (the hub's GTE remote code).
    New,
    /// `model_type: "gte"` (transformers 5).
    Gte,
    /// `model_type: "nomic_bert"` in nomic-bert-2048's keys (the hub's remote code).
    NomicHub,
    /// `model_type: "nomic_bert"` in transformers 5's keys.
    Nomic,
    /// `model_type: "xlm-roberta"` with `position_embedding_type: "rotary"`: jina's remote code
    /// for XLM-RoBERTa (jina-embeddings-v3), in flash-attention's layout with LoRA adapters.
    JinaRotary,
}

impl Spelling {
    /// The spelling of a parsed `config.json`, by its `model_type` (`None`: neither model).
    pub fn of(config: &Value) -> Option<Self> {
        match config.get("model_type").and_then(Value::as_str)? {
            "new" => Some(Spelling::New),
            "gte" => Some(Spelling::Gte),
            "nomic_bert" if config.get("n_embd").is_some() => Some(Spelling::NomicHub),
            "nomic_bert" => Some(Spelling::Nomic),
            "xlm-roberta"
                if config
                    .get("position_embedding_type")
                    .and_then(Value::as_str)
                    == Some("rotary") =>
            {
                Some(Spelling::JinaRotary)
            }
            _ => None,
        }
    }
}

/// Whose tensor names and biases a checkpoint has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// GTE: `encoder.layer.N.attention.qkv_proj`, `attn_ln`, `mlp.up_gate_proj` (`[up | gate]`),
    /// `mlp.down_proj`, `mlp_ln`, `embeddings.LayerNorm`; biases on q/k/v, o and down.
    Gte,
    /// NomicBERT: `encoder.layers.N.attn.Wqkv`, `attn.out_proj`, `norm1`, `mlp.fc11` (up),
    /// `mlp.fc12` (gate), `mlp.fc2`, `norm2`, `emb_ln`; no biases.
    Nomic,
    /// transformers' BERT names (`encoder.layer.N.attention.self.query`, ...,
    /// `intermediate.dense`, `output.dense`), as `layers::encoder::read_flash_layout` reads
    /// jina's flash-attention layout (`mixer.Wqkv`, ..., `mlp.fc1`, `mlp.fc2`); biases
    /// everywhere, and an MLP that is not gated (`output.dense · act(intermediate.dense · x)`).
    Bert,
}

/// A checkpoint's task adapters (jina-embeddings-v3's `lora_adaptations`): the tasks in the
/// order their LoRA factors are stacked, each one's instruction (`task_instructions`; empty
/// for none), the factors' rank (`lora_rank`) and scale (`lora_alpha / lora_rank`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Adapters {
    pub tasks: Vec<String>,
    pub instructions: Vec<String>,
    pub rank: usize,
    pub scale: f32,
}

impl Adapters {
    /// The index of `task`, or an error listing the tasks.
    pub fn index(&self, task: &str, file: &Path) -> Result<usize> {
        self.tasks.iter().position(|t| t == task).ok_or_else(|| {
            bad(
                file,
                "lora_adaptations",
                format!(
                    "has no task {task:?} (its tasks: {})",
                    self.tasks.join(", ")
                ),
            )
        })
    }
}

/// The shape and options of a GTE or NomicBERT encoder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GteConfig {
    pub layout: Layout,
    /// The keys of the config's spelling.
    pub keys: &'static Keys,
    pub hidden: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub vocab: usize,
    /// Token type embeddings' rows (`type_vocab_size`; 0: none, as gte-base-en-v1.5).
    pub type_vocab: usize,
    /// The longest sequence (`max_position_embeddings`, NomicBERT's `n_positions`).
    pub max_positions: usize,
    pub eps: f32,
    /// The gated MLP's activation, applied to the gate.
    pub act: Act,
    /// RoPE's base, after NTK scaling.
    pub rope_theta: f64,
    /// What RoPE's inverse frequencies are divided by (1 unscaled).
    pub rope_divisor: f64,
    /// The task adapters the checkpoint holds (`None`: none).
    pub adapters: Option<Adapters>,
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

/// `key` must be `want` (or absent, when `want` is the default): what the crate honours.
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

/// The hub GTE's RoPE: `(base, divisor)` from `rope_theta` and `rope_scaling`.
fn new_rope(obj: &Map<String, Value>, head_dim: f64, file: &Path) -> Result<(f64, f64)> {
    let base = number(obj, "rope_theta", 10_000.0, file)?;
    let scaling = match get(obj, "rope_scaling") {
        None => return Ok((base, 1.0)),
        Some(Value::Object(s)) => s,
        Some(v) => {
            return Err(bad(
                file,
                "rope_scaling",
                format!("expected an object, got {v}"),
            ))
        }
    };
    let kind = get(scaling, "type").or_else(|| get(scaling, "rope_type"));
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
    if let Some(b) = get(scaling, "mixed_b") {
        return Err(bad(
            file,
            "rope_scaling.mixed_b",
            format!("{b}: mixed NTK scaling is not supported"),
        ));
    }
    let f = required(scaling, "factor", "rope_scaling.factor", file)?;
    Ok(if f > 1.0 {
        (base * f, f.powf(2.0 / head_dim))
    } else {
        (base, 1.0)
    })
}

/// transformers 5's RoPE: `(base, divisor)` from `rope_parameters` (or a top-level
/// `rope_theta`), `default_theta` when neither gives one.
fn rope_parameters(
    obj: &Map<String, Value>,
    default_theta: f64,
    file: &Path,
) -> Result<(f64, f64)> {
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
    let base = match params.and_then(|p| get(p, "rope_theta")) {
        Some(t) => theta(t, "rope_parameters.rope_theta", file)?,
        None => number(obj, "rope_theta", default_theta, file)?,
    };
    let divisor = match (params, params.and_then(|p| get(p, "rope_type"))) {
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
    Ok((base, divisor))
}

/// jina's task adapters: `lora_adaptations` (a list of task names; absent, null or empty:
/// none), `task_instructions` (an instruction per task; absent: none), `lora_alpha` (1) over
/// `lora_rank` (4), the defaults of jina's config.
fn adapters(obj: &Map<String, Value>, file: &Path) -> Result<Option<Adapters>> {
    let tasks: Vec<String> = match get(obj, "lora_adaptations") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| t.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(file, "lora_adaptations", "expected a list of task names"))?,
        Some(v) => {
            return Err(bad(
                file,
                "lora_adaptations",
                format!("expected a list of task names, got {v}"),
            ))
        }
    };
    if tasks.is_empty() {
        return Ok(None);
    }
    let instructions = match get(obj, "task_instructions") {
        None | Some(Value::Null) => vec![String::new(); tasks.len()],
        Some(Value::Object(map)) => tasks
            .iter()
            .map(|t| match map.get(t) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v) => Err(bad(
                    file,
                    &format!("task_instructions.{t}"),
                    format!("expected a string, got {v}"),
                )),
            })
            .collect::<Result<_>>()?,
        Some(v) => {
            return Err(bad(
                file,
                "task_instructions",
                format!("expected an object, got {v}"),
            ))
        }
    };
    let alpha = number(obj, "lora_alpha", 1.0, file)?;
    let rank = positive(obj, "lora_rank", Some(4), file)?;
    Ok(Some(Adapters {
        tasks,
        instructions,
        rank,
        scale: (alpha / rank as f64) as f32,
    }))
}

/// The keys a spelling names the sizes with (errors name them as the file does).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    pub hidden: &'static str,
    pub heads: &'static str,
    pub layers: &'static str,
    pub intermediate: &'static str,
    pub positions: &'static str,
    pub eps: &'static str,
}

const BERT_KEYS: Keys = Keys {
    hidden: "hidden_size",
    heads: "num_attention_heads",
    layers: "num_hidden_layers",
    intermediate: "intermediate_size",
    positions: "max_position_embeddings",
    eps: "layer_norm_eps",
};

const GPT_KEYS: Keys = Keys {
    hidden: "n_embd",
    heads: "n_head",
    layers: "n_layer",
    intermediate: "n_inner",
    positions: "n_positions",
    eps: "layer_norm_epsilon",
};

impl GteConfig {
    /// Reads a parsed `config.json` in `spelling` (`file` names it in errors).
    pub fn from_value(v: &Value, spelling: Spelling, file: &Path) -> Result<Self> {
        let obj = object_ref(v, file)?;
        let keys = match spelling {
            Spelling::NomicHub => &GPT_KEYS,
            _ => &BERT_KEYS,
        };
        let hidden = positive(obj, keys.hidden, None, file)?;
        let heads = positive(obj, keys.heads, None, file)?;
        if hidden % heads != 0 || (hidden / heads) % 2 != 0 {
            return Err(bad(
                file,
                keys.heads,
                format!(
                    "{} {hidden} is not an even head size times {} {heads} (rotary embeddings \
                     need an even head size)",
                    keys.hidden, keys.heads
                ),
            ));
        }
        let head_dim = hidden / heads;
        if let Some(d) = get(obj, "head_dim").filter(|d| d.as_u64() != Some(head_dim as u64)) {
            return Err(bad(
                file,
                "head_dim",
                format!("{d}, but the hidden size over the heads is {head_dim}"),
            ));
        }
        let (layout, (rope_theta, rope_divisor), act, default_positions) = match spelling {
            Spelling::New => {
                must_be(obj, "position_embedding_type", &"rope".into(), file)?;
                must_be(obj, "layer_norm_type", &"layer_norm".into(), file)?;
                must_be(obj, "pack_qkv", &true.into(), file)?;
                if flag_or(obj, "logn_attention_scale", false, file)? {
                    return Err(bad(file, "logn_attention_scale", "true is not supported"));
                }
                let rope = new_rope(obj, head_dim as f64, file)?;
                let act = activation(obj, "hidden_act", file)?;
                (Layout::Gte, rope, act, 2048)
            }
            Spelling::Gte => {
                let rope = rope_parameters(obj, 160_000.0, file)?;
                let act = activation(obj, "hidden_act", file)?;
                (Layout::Gte, rope, act, 8192)
            }
            Spelling::NomicHub => {
                for key in [
                    "qkv_proj_bias",
                    "mlp_fc1_bias",
                    "mlp_fc2_bias",
                    "prenorm",
                    "rotary_emb_interleaved",
                    "use_rms_norm",
                    "parallel_block",
                    "causal",
                ] {
                    if flag_or(obj, key, false, file)? {
                        return Err(bad(file, key, "true is not supported"));
                    }
                }
                must_be(obj, "rotary_emb_fraction", &1.0.into(), file)?;
                for key in ["rotary_scaling_factor", "rotary_emb_scale_base"] {
                    if let Some(v) = get(obj, key) {
                        return Err(bad(
                            file,
                            key,
                            format!("{v}: scaled rotary embeddings are not supported"),
                        ));
                    }
                }
                let act = match get(obj, "activation_function").and_then(Value::as_str) {
                    Some("swiglu") => Act::Silu,
                    Some("geglu") => Act::Gelu,
                    _ => {
                        return Err(bad(
                            file,
                            "activation_function",
                            format!(
                                "{} is not supported (only \"swiglu\" and \"geglu\")",
                                get(obj, "activation_function").unwrap_or(&Value::Null)
                            ),
                        ))
                    }
                };
                let theta = number(obj, "rotary_emb_base", 10_000.0, file)?;
                (Layout::Nomic, (theta, 1.0), act, 2048)
            }
            Spelling::Nomic => {
                let rope = rope_parameters(obj, 1000.0, file)?;
                let act = match get(obj, "hidden_act") {
                    None => Act::Silu,
                    Some(_) => activation(obj, "hidden_act", file)?,
                };
                (Layout::Nomic, rope, act, 2048)
            }
            Spelling::JinaRotary => {
                if flag_or(obj, "rotary_emb_interleaved", false, file)? {
                    return Err(bad(file, "rotary_emb_interleaved", "true is not supported"));
                }
                must_be(obj, "rotary_emb_fraction", &1.0.into(), file)?;
                if let Some(v) = get(obj, "rotary_emb_scale_base") {
                    return Err(bad(
                        file,
                        "rotary_emb_scale_base",
                        format!("{v}: scaled rotary embeddings are not supported"),
                    ));
                }
                let theta = number(obj, "rotary_emb_base", 10_000.0, file)?;
                let act = activation(obj, "hidden_act", file)?;
                (Layout::Bert, (theta, 1.0), act, 8194)
            }
        };
        let eps = non_negative(obj, keys.eps, DEFAULT_EPS, file)?;
        let default_types = if layout == Layout::Nomic { 2 } else { 1 };
        let type_vocab = match get(obj, "type_vocab_size") {
            Some(Value::Number(n)) if n.as_u64() == Some(0) => 0,
            _ => positive(obj, "type_vocab_size", Some(default_types), file)?,
        };
        Ok(GteConfig {
            layout,
            keys,
            hidden,
            heads,
            layers: positive(obj, keys.layers, None, file)?,
            intermediate: positive(obj, keys.intermediate, None, file)?,
            vocab: positive(obj, "vocab_size", None, file)?,
            type_vocab,
            max_positions: positive(obj, keys.positions, Some(default_positions), file)?,
            eps: eps as f32,
            act,
            rope_theta,
            rope_divisor,
            adapters: match spelling {
                Spelling::JinaRotary => adapters(obj, file)?,
                _ => None,
            },
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
    fn nomic_is_read_in_its_hub_keys_and_in_transformers_ones() {
        let hub = json!({"n_embd": 32, "n_head": 2, "n_layer": 3, "n_inner": 48,
                         "vocab_size": 832, "rotary_emb_base": 1000,
                         "activation_function": "swiglu", "layer_norm_epsilon": 1e-12,
                         "n_positions": 8192, "type_vocab_size": 2,
                         "qkv_proj_bias": false, "rotary_emb_fraction": 1.0,
                         "rotary_scaling_factor": null, "model_type": "nomic_bert"});
        assert_eq!(Spelling::of(&hub), Some(Spelling::NomicHub));
        let a = parse(hub, Spelling::NomicHub).unwrap();
        let native = json!({"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 3,
                            "intermediate_size": 48, "vocab_size": 832,
                            "max_position_embeddings": 8192, "model_type": "nomic_bert",
                            "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0}});
        assert_eq!(Spelling::of(&native), Some(Spelling::Nomic));
        let b = parse(native, Spelling::Nomic).unwrap();
        assert_eq!(
            (a.layout, a.act, a.rope_theta, a.type_vocab),
            (Layout::Nomic, Act::Silu, 1000.0, 2)
        );
        assert_eq!(
            (a.hidden, a.heads, a.layers, a.intermediate, a.max_positions),
            (b.hidden, b.heads, b.layers, b.intermediate, b.max_positions)
        );
        assert_eq!((b.act, b.rope_theta, b.type_vocab), (Act::Silu, 1000.0, 2));
        assert_eq!(a.keys.intermediate, "n_inner");
        assert_eq!(b.keys.intermediate, "intermediate_size");
    }

    #[test]
    fn jinas_rotary_xlm_roberta_reads_its_base_and_task_adapters() {
        let mut v = base();
        v["model_type"] = json!("xlm-roberta");
        v["position_embedding_type"] = json!("rotary");
        v["rotary_emb_base"] = json!(20000.0);
        v["lora_adaptations"] = json!(["retrieval.query", "text-matching"]);
        v["task_instructions"] = json!({"retrieval.query": "Q: ", "text-matching": null});
        v["lora_alpha"] = json!(1);
        v["lora_rank"] = json!(4);
        assert_eq!(Spelling::of(&v), Some(Spelling::JinaRotary));
        let c = parse(v.clone(), Spelling::JinaRotary).unwrap();
        assert_eq!(
            (c.layout, c.rope_theta, c.type_vocab),
            (Layout::Bert, 20000.0, 1)
        );
        let a = c.adapters.unwrap();
        assert_eq!(a.tasks, ["retrieval.query", "text-matching"]);
        assert_eq!(a.instructions, ["Q: ", ""]);
        assert_eq!((a.rank, a.scale), (4, 0.25));
        assert_eq!(a.index("text-matching", Path::new("c")).unwrap(), 1);
        assert!(a.index("separation", Path::new("c")).is_err());
        // No adapters listed: none; an absolute XLM-R is not this spelling.
        v["lora_adaptations"] = Value::Null;
        assert_eq!(
            parse(v.clone(), Spelling::JinaRotary).unwrap().adapters,
            None
        );
        v["position_embedding_type"] = json!("absolute");
        assert_eq!(Spelling::of(&v), None);
        // What it cannot honour.
        for (key, value) in [
            ("rotary_emb_interleaved", json!(true)),
            ("rotary_emb_scale_base", json!(512)),
            ("lora_adaptations", json!("retrieval.query")),
            ("task_instructions", json!(["Q: "])),
        ] {
            let mut v = base();
            v["lora_adaptations"] = json!(["retrieval.query"]);
            v[key] = value;
            let e = parse(v, Spelling::JinaRotary).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
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
            (
                Spelling::Gte,
                "hidden_act",
                json!({"hidden_act": "quick_gelu"}),
            ),
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
