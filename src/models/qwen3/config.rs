//! `config.json` of a `Qwen3ForCausalLM` (or `Qwen2ForCausalLM`) checkpoint: the keys the
//! forward passes need. The same decoders saved as `Qwen3ForSequenceClassification` /
//! `Qwen2ForSequenceClassification` (a one-row `score` head instead of the language-model
//! head: LLM rerankers converted to sequence classification) read the same keys.
//!
//! Qwen2 is the same decoder as Qwen3 but for two points, which [`DecoderFamily`] records:
//! its q/k/v projections always have biases (its `o_proj` never has one), and it has no
//! per-head q/k RMSNorm. Its `head_dim` is `hidden_size / num_attention_heads` unless the
//! config says otherwise, as in Qwen3. Llama and Mistral are the same decoder again, without
//! q/k norms: Llama's q/k/v/o projections have biases when `attention_bias` says so (its MLP
//! biases, `mlp_bias`, are refused), Mistral's never; Mistral's `sliding_window`, when set,
//! applies to every layer (or to those `layer_types` marks). Phi-3 is Mistral's decoder with
//! fused projections (`qkv_proj`, `gate_up_proj`).

use std::path::Path;

use serde::Deserialize;

use crate::models::layers::rope::{RopeParameters, RopeScaling};
use crate::{Error, Result};

/// Which decoder of the Qwen / Llama family a checkpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderFamily {
    /// `Qwen3ForCausalLM`: per-head q/k RMSNorm; biases on q/k/v/o when `attention_bias`.
    Qwen3,
    /// `Qwen2ForCausalLM`: biases on q/k/v (never on o), no q/k norm.
    Qwen2,
    /// `LlamaForCausalLM`: no q/k norm; biases on q/k/v/o when `attention_bias`.
    Llama,
    /// `MistralForCausalLM`: no q/k norm, no biases; a sliding window when `sliding_window`
    /// is set.
    Mistral,
    /// `Phi3ForCausalLM` (Phi-3 / Phi-3.5-mini): Mistral's decoder with its q/k/v projections
    /// saved as one `qkv_proj` and its gate and up projections as one `gate_up_proj`; a
    /// sliding window on every layer when `sliding_window` is set; RoPE on the whole head only
    /// (`partial_rotary_factor` 1).
    Phi3,
}

impl DecoderFamily {
    /// The architecture name in `config.json`.
    pub fn architecture(self) -> &'static str {
        match self {
            DecoderFamily::Qwen3 => ARCHITECTURE,
            DecoderFamily::Qwen2 => QWEN2_ARCHITECTURE,
            DecoderFamily::Llama => "LlamaForCausalLM",
            DecoderFamily::Mistral => "MistralForCausalLM",
            DecoderFamily::Phi3 => "Phi3ForCausalLM",
        }
    }

    /// The architecture name of the decoder saved without its output head (an embedding
    /// model: Qwen3-Embedding's `Qwen3Model`, e5-mistral's `MistralModel`), when the family
    /// loads one.
    pub fn bare_architecture(self) -> Option<&'static str> {
        match self {
            DecoderFamily::Qwen3 => Some(BARE_ARCHITECTURE),
            DecoderFamily::Qwen2 => None,
            DecoderFamily::Llama => Some("LlamaModel"),
            DecoderFamily::Mistral => Some("MistralModel"),
            DecoderFamily::Phi3 => Some("Phi3Model"),
        }
    }

    /// Every family.
    pub const ALL: [DecoderFamily; 5] = [
        DecoderFamily::Qwen3,
        DecoderFamily::Qwen2,
        DecoderFamily::Llama,
        DecoderFamily::Mistral,
        DecoderFamily::Phi3,
    ];

    /// The family whose `model_type` is `model_type` (`qwen3`, `qwen2`, `llama`, `mistral`).
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.model_type() == model_type)
    }

    /// The family of a causal language model's `config.json` text: the first of its
    /// `architectures` that is a family's `*ForCausalLM`, or, when it names no architecture, its
    /// `model_type`. `None` for anything else (a sequence classifier, a bare decoder, another
    /// architecture, text that is not JSON).
    pub fn of_causal_lm(text: &str) -> Option<Self> {
        #[derive(Deserialize)]
        struct Names {
            #[serde(default)]
            architectures: Vec<String>,
            model_type: Option<String>,
        }
        let names: Names = serde_json::from_str(text).ok()?;
        if names.architectures.is_empty() {
            return names.model_type.as_deref().and_then(Self::from_model_type);
        }
        names
            .architectures
            .iter()
            .find_map(|a| Self::ALL.into_iter().find(|f| f.architecture() == a))
    }

    /// The architecture name of the family's sequence classifier (the decoder with a `score`
    /// head).
    pub fn classifier_architecture(self) -> &'static str {
        match self {
            DecoderFamily::Qwen3 => CLASSIFIER_ARCHITECTURE,
            DecoderFamily::Qwen2 => QWEN2_CLASSIFIER_ARCHITECTURE,
            DecoderFamily::Llama => "LlamaForSequenceClassification",
            DecoderFamily::Mistral => "MistralForSequenceClassification",
            DecoderFamily::Phi3 => "Phi3ForSequenceClassification",
        }
    }

    /// The `model_type` in `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            DecoderFamily::Qwen3 => "qwen3",
            DecoderFamily::Qwen2 => "qwen2",
            DecoderFamily::Llama => "llama",
            DecoderFamily::Mistral => "mistral",
            DecoderFamily::Phi3 => "phi3",
        }
    }
}

/// The architecture hyper-parameters of a Qwen3 (or Qwen2, see [`DecoderFamily`]) causal LM,
/// read from `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen3Config {
    /// Qwen3 or Qwen2: which projections have biases, whether q/k are normed.
    pub family: DecoderFamily,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU feed-forward layer.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (grouped-query attention); divides `num_attention_heads`.
    pub num_key_value_heads: usize,
    /// Width of one head (independent of `hidden_size / num_attention_heads` in Qwen3).
    pub head_dim: usize,
    /// RoPE base.
    pub rope_theta: f64,
    /// How the RoPE frequencies are scaled (`rope_parameters` / `rope_scaling`).
    pub(crate) rope_scaling: RopeScaling,
    /// Epsilon of every RMSNorm.
    pub rms_norm_eps: f64,
    /// Whether the output head shares the input embedding matrix.
    pub tie_word_embeddings: bool,
    /// Whether the checkpoint is the family's sequence classifier
    /// ([`DecoderFamily::classifier_architecture`]): its head is `score.weight`, one row per
    /// label, read at the last token, instead of the language-model head.
    pub sequence_classifier: bool,
    /// Whether the attention projections have biases: q/k/v/o in Qwen3 and Llama
    /// (`attention_bias`), q/k/v only in Qwen2 (always true there; see
    /// [`Qwen3Config::o_bias`]), none in Mistral.
    pub attention_bias: bool,
    /// The vocabulary size the config announces (the weights decide the real row count).
    pub vocab_size: Option<usize>,
    /// The longest sequence the model was trained for, when the config says.
    pub max_position_embeddings: Option<usize>,
    /// How many keys a query of a sliding layer sees, itself included (`sliding_window` when
    /// `use_sliding_window` is true, or, in Mistral, when it is set; `None` when no layer
    /// slides).
    pub sliding_window: Option<usize>,
    /// Which layers attend within [`Qwen3Config::sliding_window`] (see
    /// [`Qwen3Config::window`]).
    pub(crate) sliding_layers: SlidingLayers,
}

/// Which layers of a decoder slide: those `layer_types` marks `"sliding_attention"` (one flag
/// per layer, as many as the config lists), or else, as transformers derives them, every layer
/// from `max_window_layers` on (no per-layer list: the layer count is only checked against
/// the weights later, so it sizes nothing here).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SlidingLayers {
    Listed(Vec<bool>),
    From(usize),
}

/// The raw JSON, with the optional keys optional.
#[derive(Debug, Deserialize)]
struct RawConfig {
    #[serde(default)]
    architectures: Vec<String>,
    #[serde(default)]
    model_type: Option<String>,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    #[serde(default)]
    num_key_value_heads: Option<usize>,
    #[serde(default)]
    head_dim: Option<usize>,
    #[serde(default)]
    rope_theta: Option<f64>,
    #[serde(default)]
    rope_parameters: Option<RopeParameters>,
    #[serde(default)]
    rope_scaling: Option<RopeParameters>,
    #[serde(default)]
    rms_norm_eps: Option<f64>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    attention_bias: Option<bool>,
    #[serde(default)]
    mlp_bias: Option<bool>,
    #[serde(default)]
    partial_rotary_factor: Option<f64>,
    #[serde(default)]
    hidden_act: Option<String>,
    #[serde(default)]
    use_sliding_window: Option<bool>,
    #[serde(default)]
    sliding_window: Option<usize>,
    #[serde(default)]
    max_window_layers: Option<usize>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default)]
    vocab_size: Option<usize>,
    #[serde(default)]
    max_position_embeddings: Option<usize>,
}

/// The window and the sliding layers, as transformers 5's Qwen2 / Qwen3 configs derive them:
/// the window is `sliding_window` (default 4096) when `use_sliding_window` is true;
/// `layer_types`, when
/// present, say which layers slide, else the layers from `max_window_layers` (default 28) on
/// do. A `"sliding_attention"` layer without a window, or a layer type the crate does not
/// know, is an error naming the key.
///
/// Mistral has no `use_sliding_window`: its `sliding_window`, when set, is the window of every
/// layer (of those `layer_types` marks sliding, when it lists them); Llama has none.
fn sliding(raw: &RawConfig, family: DecoderFamily) -> Result<(Option<usize>, SlidingLayers)> {
    let layers = raw.num_hidden_layers;
    let switched_on = match family {
        DecoderFamily::Qwen3 | DecoderFamily::Qwen2 => raw.use_sliding_window == Some(true),
        DecoderFamily::Mistral | DecoderFamily::Phi3 => raw.sliding_window.is_some(),
        DecoderFamily::Llama => false,
    };
    let window = match (switched_on, raw.sliding_window) {
        (true, Some(0)) => {
            return Err(Error::model(
                "sliding_window 0: a sliding layer must see at least its own token",
            ))
        }
        // transformers' default window.
        (true, w) => Some(w.unwrap_or(4096)),
        (false, _) => None,
    };
    let sliding_layers = match &raw.layer_types {
        Some(types) => {
            if types.len() != layers {
                return Err(Error::model(format!(
                    "layer_types has {} entries for {layers} layers",
                    types.len()
                )));
            }
            let mut kinds = Vec::with_capacity(types.len());
            for (i, t) in types.iter().enumerate() {
                kinds.push(match t.as_str() {
                    "full_attention" => false,
                    "sliding_attention" if window.is_some() => true,
                    "sliding_attention" => {
                        return Err(Error::model(format!(
                            "layer_types[{i}] is \"sliding_attention\" but sliding_window is \
                             off (use_sliding_window is not true, or no sliding_window)"
                        )))
                    }
                    other => {
                        return Err(Error::model(format!(
                            "layer_types[{i}] {other:?} is not supported (\"full_attention\", \
                             \"sliding_attention\")"
                        )))
                    }
                });
            }
            SlidingLayers::Listed(kinds)
        }
        None if matches!(family, DecoderFamily::Mistral | DecoderFamily::Phi3) => {
            SlidingLayers::From(0)
        }
        None => SlidingLayers::From(raw.max_window_layers.unwrap_or(28)),
    };
    let any = match &sliding_layers {
        SlidingLayers::Listed(kinds) => kinds.contains(&true),
        SlidingLayers::From(first) => *first < layers,
    };
    let window = window.filter(|_| any);
    Ok((window, sliding_layers))
}

/// The most positions a Qwen3 model is loaded for (`max_position_embeddings`, or a builder's
/// `max_length`): the RoPE table and the KV cache are sized by it, so a larger value from a
/// config file is an error, never an allocation of that size.
pub const MAX_POSITIONS: usize = crate::models::options::MAX_LENGTH;

/// The architecture name this module loads.
pub const ARCHITECTURE: &str = "Qwen3ForCausalLM";

/// The Qwen2 causal LM architecture (e.g. mxbai-rerank-v2), loaded with
/// [`DecoderFamily::Qwen2`].
pub const QWEN2_ARCHITECTURE: &str = "Qwen2ForCausalLM";

/// The Qwen3 decoder with a sequence-classification head (`score.weight`), e.g.
/// `tomaarsen/Qwen3-Reranker-0.6B-seq-cls`: Qwen3-Reranker with its head reduced to
/// `W[yes] - W[no]`.
pub const CLASSIFIER_ARCHITECTURE: &str = "Qwen3ForSequenceClassification";

/// The Qwen2 decoder with a sequence-classification head (mxbai-rerank-v2 converted the same
/// way, with `W[1] - W[0]`).
pub const QWEN2_CLASSIFIER_ARCHITECTURE: &str = "Qwen2ForSequenceClassification";

/// The decoder without its output head (an embedding model saved from transformers'
/// `Qwen3Model`); it loads as an embedder only.
pub const BARE_ARCHITECTURE: &str = "Qwen3Model";

impl Qwen3Config {
    /// Reads and checks the `config.json` of a Qwen3 checkpoint.
    pub fn from_file(path: &Path) -> Result<Self> {
        Self::from_file_for(path, DecoderFamily::Qwen3)
    }

    /// Reads and checks `config.json`, which must name `family`'s architecture; errors name
    /// the file.
    pub fn from_file_for(path: &Path, family: DecoderFamily) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_text_at(path, &text, family)
    }

    /// [`from_json_str_for`](Self::from_json_str_for) over `text`, the contents of the file at
    /// `path` that the caller has read; errors name the file.
    pub fn from_text_at(path: &Path, text: &str, family: DecoderFamily) -> Result<Self> {
        Self::from_json_str_for(text, family).map_err(|e| match e {
            Error::Parse { source, .. } => Error::parse(path.display().to_string(), source),
            Error::Model { message, source } => Error::Model {
                message: format!("{}: {message}", path.display()),
                source,
            },
            e => e,
        })
    }

    /// Parses and checks the JSON text of a Qwen3 `config.json`.
    pub fn from_json_str(text: &str) -> Result<Self> {
        Self::from_json_str_for(text, DecoderFamily::Qwen3)
    }

    /// Parses and checks the JSON text of a `config.json`, which must name `family`'s
    /// architecture (or, without `architectures`, its `model_type`).
    pub fn from_json_str_for(text: &str, family: DecoderFamily) -> Result<Self> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|e| Error::parse("config.json", e))?;
        let architecture = family.architecture();
        let bare = family.bare_architecture();
        let sequence_classifier = raw
            .architectures
            .iter()
            .any(|a| a == family.classifier_architecture());
        let is_family = sequence_classifier
            || raw
                .architectures
                .iter()
                .any(|a| a == architecture || Some(a.as_str()) == bare)
            || (raw.architectures.is_empty()
                && raw.model_type.as_deref() == Some(family.model_type()));
        if !is_family {
            return Err(Error::model(format!(
                "architectures {:?} (model_type {:?}) is not {architecture} (or {})",
                raw.architectures,
                raw.model_type,
                family.classifier_architecture()
            )));
        }
        if let Some(act) = raw.hidden_act.as_deref() {
            if act != "silu" {
                return Err(Error::model(format!(
                    "hidden_act {act:?} is not supported ({architecture} uses \"silu\")"
                )));
            }
        }
        // transformers 5 reads rope_parameters, else the older rope_scaling.
        let rope_scaling = match (&raw.rope_parameters, &raw.rope_scaling) {
            (Some(p), _) => p.scaling("rope_parameters", raw.max_position_embeddings)?,
            (None, Some(p)) => p.scaling("rope_scaling", raw.max_position_embeddings)?,
            (None, None) => RopeScaling::Default,
        };
        let heads = raw.num_attention_heads;
        let kv_heads = raw.num_key_value_heads.unwrap_or(heads);
        let positive = [
            ("hidden_size", raw.hidden_size),
            ("intermediate_size", raw.intermediate_size),
            ("num_hidden_layers", raw.num_hidden_layers),
            ("num_attention_heads", heads),
            ("num_key_value_heads", kv_heads),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(Error::model(format!("{name} must be at least 1")));
            }
        }
        if !heads.is_multiple_of(kv_heads) {
            return Err(Error::model(format!(
                "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
            )));
        }
        let head_dim = match raw.head_dim {
            Some(d) => d,
            None if raw.hidden_size.is_multiple_of(heads) => raw.hidden_size / heads,
            None => {
                return Err(Error::model(format!(
                    "no head_dim, and hidden_size {} is not a multiple of num_attention_heads \
                     {heads}",
                    raw.hidden_size
                )))
            }
        };
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(Error::model(format!(
                "head_dim {head_dim} must be even and positive (RoPE rotates halves)"
            )));
        }
        let rope_theta = raw
            .rope_theta
            .or_else(|| raw.rope_parameters.as_ref().and_then(|r| r.rope_theta))
            .unwrap_or(10_000.0);
        if !(rope_theta.is_finite() && rope_theta > 0.0) {
            return Err(Error::model(format!(
                "rope_theta {rope_theta} must be positive"
            )));
        }
        if let Some(n) = raw.max_position_embeddings.filter(|&n| n > MAX_POSITIONS) {
            return Err(Error::model(format!(
                "max_position_embeddings {n} is more than the {MAX_POSITIONS} positions a model \
                 is loaded for (its RoPE table is sized by it)"
            )));
        }
        let rms_norm_eps = raw.rms_norm_eps.unwrap_or(1e-6);
        if !(rms_norm_eps.is_finite() && rms_norm_eps >= 0.0) {
            return Err(Error::model(format!(
                "rms_norm_eps {rms_norm_eps} must be finite and non-negative"
            )));
        }
        if let Some(f) = raw.partial_rotary_factor.filter(|&f| f != 1.0) {
            return Err(Error::model(format!(
                "partial_rotary_factor {f}: RoPE on part of each head (Phi-4-mini) is not \
                 supported"
            )));
        }
        if raw.mlp_bias == Some(true) {
            return Err(Error::model(
                "mlp_bias true: biases on the MLP's projections are not supported",
            ));
        }
        let (sliding_window, sliding_layers) = sliding(&raw, family)?;
        let attention_bias = match family {
            DecoderFamily::Qwen3 | DecoderFamily::Llama => raw.attention_bias.unwrap_or(false),
            DecoderFamily::Qwen2 => true,
            DecoderFamily::Mistral | DecoderFamily::Phi3 => false,
        };
        Ok(Qwen3Config {
            family,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rope_theta,
            rope_scaling,
            rms_norm_eps,
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            sequence_classifier,
            attention_bias,
            vocab_size: raw.vocab_size,
            max_position_embeddings: raw.max_position_embeddings.filter(|&n| n > 0),
            sliding_window,
            sliding_layers,
        })
    }

    /// The window of layer `layer`'s attention: `Some(w)` when a query sees only the `w` keys
    /// ending at itself, `None` when it sees its whole prefix.
    pub fn window(&self, layer: usize) -> Option<usize> {
        let slides = match &self.sliding_layers {
            SlidingLayers::Listed(kinds) => kinds.get(layer).copied().unwrap_or(false),
            SlidingLayers::From(first) => layer >= *first,
        };
        self.sliding_window.filter(|_| slides)
    }

    /// Whether the q/k/v projections have biases.
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias
    }

    /// Whether the output projection `o_proj` has a bias (Qwen3 and Llama with
    /// `attention_bias`; never Qwen2).
    pub fn o_bias(&self) -> bool {
        self.attention_bias && self.family != DecoderFamily::Qwen2
    }

    /// Whether every query and key head goes through its own RMSNorm (`q_norm`, `k_norm`)
    /// before RoPE (Qwen3 only).
    pub fn qk_norm(&self) -> bool {
        self.family == DecoderFamily::Qwen3
    }

    /// Whether a `config.json` text names the `Qwen3ForCausalLM` architecture (for detection,
    /// e.g. by a CLI choosing between model kinds).
    pub fn is_qwen3_causal_lm(text: &str) -> bool {
        #[derive(Deserialize)]
        struct Arch {
            #[serde(default)]
            architectures: Vec<String>,
        }
        serde_json::from_str::<Arch>(text)
            .map(|a| a.architectures.iter().any(|a| a == ARCHITECTURE))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": true, "vocab_size": 151936, "hidden_act": "silu"}"#;

    #[test]
    fn reads_the_usual_keys() {
        let c = Qwen3Config::from_json_str(TINY).unwrap();
        assert_eq!(
            (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
            (4, 2, 8)
        );
        assert_eq!(c.rope_theta, 1e6);
        assert!(c.tie_word_embeddings);
        assert!(Qwen3Config::is_qwen3_causal_lm(TINY));
    }

    #[test]
    fn defaults_and_rope_parameters() {
        let c = Qwen3Config::from_json_str(
            r#"{"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 8,
            "num_hidden_layers": 1, "num_attention_heads": 4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0}}"#,
        )
        .unwrap();
        assert_eq!((c.num_key_value_heads, c.head_dim), (4, 16));
        assert_eq!(c.rope_theta, 5000.0);
        assert!(!c.tie_word_embeddings);
    }

    #[test]
    fn rejects_what_it_cannot_run() {
        let bad = [
            (
                TINY.replace("Qwen3ForCausalLM", "BertModel"),
                "architectures",
            ),
            (
                TINY.replace("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3"),
                "multiple",
            ),
            (TINY.replace("\"head_dim\": 8", "\"head_dim\": 7"), "even"),
            (TINY.replace("silu", "gelu"), "hidden_act"),
            (
                TINY.replace(
                    "\"vocab_size\"",
                    "\"rope_scaling\": {\"rope_type\": \"longrope\"}, \"vocab_size\"",
                ),
                "rope_scaling: rope_type \"longrope\" is not supported",
            ),
            (
                TINY.replace(
                    "\"vocab_size\"",
                    "\"rope_parameters\": {\"rope_type\": \"linear\"}, \"vocab_size\"",
                ),
                "rope_parameters: Some(\"linear\") needs factor",
            ),
            (
                TINY.replace(
                    "\"vocab_size\"",
                    "\"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8, \
                     \"low_freq_factor\": -1}, \"vocab_size\"",
                ),
                "low_freq_factor -1 must be a positive number",
            ),
        ];
        for (text, needle) in bad {
            let e = Qwen3Config::from_json_str(&text).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
        assert!(!Qwen3Config::is_qwen3_causal_lm(
            "{\"architectures\": [\"BertModel\"]}"
        ));
    }

    const QWEN2: &str = r#"{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 1000000.0,
        "tie_word_embeddings": true, "use_sliding_window": false, "sliding_window": 4096,
        "max_window_layers": 2, "hidden_act": "silu"}"#;

    #[test]
    fn reads_a_qwen2_config() {
        let c = Qwen3Config::from_json_str_for(QWEN2, DecoderFamily::Qwen2).unwrap();
        assert_eq!(c.family, DecoderFamily::Qwen2);
        assert_eq!(
            (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
            (4, 2, 16)
        );
        assert!(c.qkv_bias() && !c.o_bias() && !c.qk_norm());
        let q3 = Qwen3Config::from_json_str(TINY).unwrap();
        assert!(!q3.qkv_bias() && !q3.o_bias() && q3.qk_norm());
        // Each family refuses the other's checkpoints.
        let e = Qwen3Config::from_json_str(QWEN2).unwrap_err().to_string();
        assert!(e.contains("is not Qwen3ForCausalLM"), "{e}");
        let e = Qwen3Config::from_json_str_for(TINY, DecoderFamily::Qwen2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not Qwen2ForCausalLM"), "{e}");
        let sliding = QWEN2.replace(
            "\"use_sliding_window\": false",
            "\"use_sliding_window\": true",
        );
        let c = Qwen3Config::from_json_str_for(&sliding, DecoderFamily::Qwen2).unwrap();
        // max_window_layers 2 of 2 layers: no layer slides.
        assert_eq!(
            (c.sliding_window, c.window(0), c.window(1)),
            (None, None, None)
        );
        let sliding = sliding.replace("\"max_window_layers\": 2", "\"max_window_layers\": 1");
        let c = Qwen3Config::from_json_str_for(&sliding, DecoderFamily::Qwen2).unwrap();
        assert_eq!((c.window(0), c.window(1)), (None, Some(4096)));
        let typed = sliding.replace(
            "\"hidden_act\"",
            "\"layer_types\": [\"sliding_attention\", \"full_attention\"], \"hidden_act\"",
        );
        let c = Qwen3Config::from_json_str_for(&typed, DecoderFamily::Qwen2).unwrap();
        assert_eq!((c.window(0), c.window(1)), (Some(4096), None));
        for (config, key) in [
            (
                typed.replace("\"full_attention\"", "\"chunked_attention\""),
                "layer_types[1]",
            ),
            (
                typed.replace("\"sliding_attention\", ", ""),
                "layer_types has 1",
            ),
            (
                typed.replace(
                    "\"use_sliding_window\": true",
                    "\"use_sliding_window\": false",
                ),
                "layer_types[0]",
            ),
            (
                sliding.replace("\"sliding_window\": 4096", "\"sliding_window\": 0"),
                "sliding_window 0",
            ),
        ] {
            let e = Qwen3Config::from_json_str_for(&config, DecoderFamily::Qwen2)
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }

    const MISTRAL: &str = r#"{"architectures": ["MistralModel"], "model_type": "mistral",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 10000.0,
        "sliding_window": 4096, "hidden_act": "silu"}"#;

    #[test]
    fn reads_llama_and_mistral_configs() {
        let m = Qwen3Config::from_json_str_for(MISTRAL, DecoderFamily::Mistral).unwrap();
        assert!(!m.qkv_bias() && !m.o_bias() && !m.qk_norm());
        // Mistral's window is every layer's, without use_sliding_window.
        assert_eq!((m.window(0), m.window(1)), (Some(4096), Some(4096)));
        let off = MISTRAL.replace("\"sliding_window\": 4096", "\"sliding_window\": null");
        let m = Qwen3Config::from_json_str_for(&off, DecoderFamily::Mistral).unwrap();
        assert_eq!((m.window(0), m.window(1)), (None, None));
        let llama = MISTRAL
            .replace("MistralModel", "LlamaForCausalLM")
            .replace("\"mistral\"", "\"llama\"")
            .replace("\"sliding_window\": 4096", "\"attention_bias\": true");
        let l = Qwen3Config::from_json_str_for(&llama, DecoderFamily::Llama).unwrap();
        assert!(l.qkv_bias() && l.o_bias() && !l.qk_norm());
        assert_eq!(l.window(0), None);
        assert_eq!(
            DecoderFamily::from_model_type("llama"),
            Some(DecoderFamily::Llama)
        );
        assert_eq!(DecoderFamily::from_model_type("gemma"), None);
        let e = Qwen3Config::from_json_str_for(
            &llama.replace("\"hidden_act\"", "\"mlp_bias\": true, \"hidden_act\""),
            DecoderFamily::Llama,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mlp_bias"), "{e}");
        // Each family refuses the other's checkpoints.
        let e = Qwen3Config::from_json_str_for(MISTRAL, DecoderFamily::Llama)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not LlamaForCausalLM"), "{e}");
    }

    #[test]
    fn the_family_of_a_causal_lm_is_its_architecture_or_model_type() {
        let of = DecoderFamily::of_causal_lm;
        assert_eq!(of(TINY), Some(DecoderFamily::Qwen3));
        assert_eq!(
            of(r#"{"architectures": ["LlamaForCausalLM"], "model_type": "mistral"}"#),
            Some(DecoderFamily::Llama)
        );
        assert_eq!(
            of(r#"{"architectures": ["MistralForCausalLM"]}"#),
            Some(DecoderFamily::Mistral)
        );
        assert_eq!(of(r#"{"model_type": "qwen2"}"#), Some(DecoderFamily::Qwen2));
        for none in [
            r#"{"architectures": ["Qwen3ForSequenceClassification"], "model_type": "qwen3"}"#,
            r#"{"architectures": ["MistralModel"], "model_type": "mistral"}"#,
            r#"{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}"#,
            r#"{"model_type": "gpt2"}"#,
            "not json",
        ] {
            assert_eq!(of(none), None, "{none}");
        }
    }

    #[test]
    fn reads_phi3_configs_and_refuses_partial_rotary() {
        let phi3 = MISTRAL
            .replace("MistralModel", "Phi3ForCausalLM")
            .replace("\"mistral\"", "\"phi3\"")
            .replace("\"sliding_window\": 4096", "\"sliding_window\": 2047");
        let p = Qwen3Config::from_json_str_for(&phi3, DecoderFamily::Phi3).unwrap();
        assert!(!p.qkv_bias() && !p.o_bias() && !p.qk_norm());
        assert_eq!((p.window(0), p.window(1)), (Some(2047), Some(2047)));
        assert_eq!(
            DecoderFamily::of_causal_lm(&phi3),
            Some(DecoderFamily::Phi3)
        );
        let one = phi3.replace(
            "\"hidden_act\"",
            "\"partial_rotary_factor\": 1.0, \"hidden_act\"",
        );
        assert!(Qwen3Config::from_json_str_for(&one, DecoderFamily::Phi3).is_ok());
        let e = Qwen3Config::from_json_str_for(
            &phi3.replace(
                "\"hidden_act\"",
                "\"partial_rotary_factor\": 0.75, \"hidden_act\"",
            ),
            DecoderFamily::Phi3,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("partial_rotary_factor 0.75"), "{e}");
    }
}
