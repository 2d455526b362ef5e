//! What a model directory's `config.json` says: the architecture, the number of labels, the
//! activation sentence-transformers would apply, and the sequence length limit.

use std::path::Path;

use serde_json::Value;

use crate::{Error, Result};

/// The model architecture named by `architectures[0]` in `config.json`.
///
/// Callers dispatch on it to pick a loader: a cross-encoder takes the encoders'
/// sequence-classification kinds, the Qwen3 reranker takes [`Architecture::Qwen3ForCausalLm`]
/// and [`Architecture::Qwen3ForSequenceClassification`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Architecture {
    /// `BertForSequenceClassification` (e.g. ms-marco-MiniLM cross-encoders).
    BertForSequenceClassification,
    /// `XLMRobertaForSequenceClassification` (e.g. bge-reranker-base / -large).
    XlmRobertaForSequenceClassification,
    /// `RobertaForSequenceClassification` (e.g. cross-encoder/stsb-roberta-base,
    /// cross-encoder/nli-distilroberta-base): XLM-R's classifier over a byte-level BPE
    /// vocabulary.
    RobertaForSequenceClassification,
    /// `CamembertForSequenceClassification` (French cross-encoders): XLM-R's classifier.
    CamembertForSequenceClassification,
    /// `ElectraForSequenceClassification` (e.g. cross-encoder/ms-marco-electra-base).
    ElectraForSequenceClassification,
    /// `DistilBertForSequenceClassification` (DistilBERT cross-encoders).
    DistilBertForSequenceClassification,
    /// `ModernBertForSequenceClassification` (e.g. gte-reranker-modernbert-base).
    ModernBertForSequenceClassification,
    /// `DebertaV2ForSequenceClassification` (e.g. mxbai-rerank-base-v1 / -large-v1).
    DebertaV2ForSequenceClassification,
    /// `NewForSequenceClassification`: GTE in the hub's remote-code spelling (e.g.
    /// gte-multilingual-reranker-base).
    NewForSequenceClassification,
    /// `GteForSequenceClassification`: GTE as transformers 5 saves it.
    GteForSequenceClassification,
    /// `Qwen3ForCausalLM` (Qwen3-Reranker, Qwen3 chat models).
    Qwen3ForCausalLm,
    /// `Qwen3ForSequenceClassification` (Qwen3-Reranker converted to sequence classification,
    /// e.g. tomaarsen/Qwen3-Reranker-0.6B-seq-cls).
    Qwen3ForSequenceClassification,
    /// `Qwen2ForCausalLM` (mxbai-rerank-v2).
    Qwen2ForCausalLm,
    /// `Qwen2ForSequenceClassification` (mxbai-rerank-v2 converted to sequence
    /// classification).
    Qwen2ForSequenceClassification,
    /// `BertModel` (a bare encoder, e.g. all-MiniLM-L6-v2).
    BertModel,
    /// Any other architecture, by its name.
    Other(String),
}

impl Architecture {
    /// Parses an architecture name as written in `config.json`.
    pub fn from_name(name: &str) -> Self {
        match name {
            "BertForSequenceClassification" => Architecture::BertForSequenceClassification,
            "XLMRobertaForSequenceClassification" => {
                Architecture::XlmRobertaForSequenceClassification
            }
            "RobertaForSequenceClassification" => Architecture::RobertaForSequenceClassification,
            "CamembertForSequenceClassification" => {
                Architecture::CamembertForSequenceClassification
            }
            "ElectraForSequenceClassification" => Architecture::ElectraForSequenceClassification,
            "DistilBertForSequenceClassification" => {
                Architecture::DistilBertForSequenceClassification
            }
            "ModernBertForSequenceClassification" => {
                Architecture::ModernBertForSequenceClassification
            }
            "DebertaV2ForSequenceClassification" => {
                Architecture::DebertaV2ForSequenceClassification
            }
            "NewForSequenceClassification" => Architecture::NewForSequenceClassification,
            "GteForSequenceClassification" => Architecture::GteForSequenceClassification,
            "Qwen3ForCausalLM" => Architecture::Qwen3ForCausalLm,
            "Qwen3ForSequenceClassification" => Architecture::Qwen3ForSequenceClassification,
            "Qwen2ForCausalLM" => Architecture::Qwen2ForCausalLm,
            "Qwen2ForSequenceClassification" => Architecture::Qwen2ForSequenceClassification,
            "BertModel" => Architecture::BertModel,
            other => Architecture::Other(other.to_string()),
        }
    }

    /// The name as written in `config.json`.
    pub fn name(&self) -> &str {
        match self {
            Architecture::BertForSequenceClassification => "BertForSequenceClassification",
            Architecture::XlmRobertaForSequenceClassification => {
                "XLMRobertaForSequenceClassification"
            }
            Architecture::RobertaForSequenceClassification => "RobertaForSequenceClassification",
            Architecture::CamembertForSequenceClassification => {
                "CamembertForSequenceClassification"
            }
            Architecture::ElectraForSequenceClassification => "ElectraForSequenceClassification",
            Architecture::DistilBertForSequenceClassification => {
                "DistilBertForSequenceClassification"
            }
            Architecture::ModernBertForSequenceClassification => {
                "ModernBertForSequenceClassification"
            }
            Architecture::DebertaV2ForSequenceClassification => {
                "DebertaV2ForSequenceClassification"
            }
            Architecture::NewForSequenceClassification => "NewForSequenceClassification",
            Architecture::GteForSequenceClassification => "GteForSequenceClassification",
            Architecture::Qwen3ForCausalLm => "Qwen3ForCausalLM",
            Architecture::Qwen3ForSequenceClassification => "Qwen3ForSequenceClassification",
            Architecture::Qwen2ForCausalLm => "Qwen2ForCausalLM",
            Architecture::Qwen2ForSequenceClassification => "Qwen2ForSequenceClassification",
            Architecture::BertModel => "BertModel",
            Architecture::Other(name) => name,
        }
    }

    /// Whether it is an encoder's sequence classifier, what the rerankers' `CrossEncoder`
    /// runs: BERT, XLM-R, RoBERTa, CamemBERT, ELECTRA, DistilBERT, ModernBERT, DeBERTa-v2/v3
    /// and GTE.
    pub fn is_cross_encoder(&self) -> bool {
        matches!(
            self,
            Architecture::BertForSequenceClassification
                | Architecture::XlmRobertaForSequenceClassification
                | Architecture::RobertaForSequenceClassification
                | Architecture::CamembertForSequenceClassification
                | Architecture::ElectraForSequenceClassification
                | Architecture::DistilBertForSequenceClassification
                | Architecture::ModernBertForSequenceClassification
                | Architecture::DebertaV2ForSequenceClassification
                | Architecture::NewForSequenceClassification
                | Architecture::GteForSequenceClassification
        )
    }

    /// Reads `architectures[0]` from a parsed `config.json` (`file` names it in errors).
    pub fn from_config(config: &Value, file: &Path) -> Result<Self> {
        let name = config
            .get("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::model(format!(
                    "{}: no `architectures` entry; cannot tell which model this is",
                    file.display()
                ))
            })?;
        Ok(Architecture::from_name(name))
    }
}

impl std::fmt::Display for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The function applied to a one-label cross-encoder's logit to get its score.
///
/// sentence-transformers' `CrossEncoder` applies `Sigmoid` by default when the model has one
/// label, unless `config.json` says otherwise (`sentence_transformers.activation_fn`, or the
/// legacy `sbert_ce_default_activation_function`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activation {
    /// `1 / (1 + e^-x)`: scores in (0, 1).
    #[default]
    Sigmoid,
    /// The raw logit.
    Identity,
    /// `tanh(x)`: scores in (-1, 1).
    Tanh,
}

impl Activation {
    /// Applies the activation to one logit.
    pub fn apply(self, logit: f32) -> f32 {
        match self {
            Activation::Sigmoid => 1.0 / (1.0 + (-logit).exp()),
            Activation::Identity => logit,
            Activation::Tanh => logit.tanh(),
        }
    }

    /// Parses a torch module path such as `torch.nn.modules.activation.Sigmoid` (or a bare
    /// `Sigmoid`, `Identity`, `Tanh`); `None` for anything else.
    pub fn from_torch_name(name: &str) -> Option<Self> {
        match name.rsplit('.').next().unwrap_or(name) {
            "Sigmoid" => Some(Activation::Sigmoid),
            "Identity" => Some(Activation::Identity),
            "Tanh" => Some(Activation::Tanh),
            _ => None,
        }
    }
}

/// The sequence-classification facts of a `config.json` that a cross-encoder needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifierConfig {
    /// The architecture.
    pub architecture: Architecture,
    /// Number of output labels (`len(id2label)`, else `num_labels`, else 2 as in transformers).
    pub num_labels: usize,
    /// The activation `config.json` asks for, if any (`None`: the default for the label count).
    pub activation: Option<Activation>,
}

impl ClassifierConfig {
    /// Extracts the facts from a parsed `config.json` (`file` names it in errors).
    pub fn from_value(config: &Value, file: &Path) -> Result<Self> {
        let architecture = Architecture::from_config(config, file)?;
        let num_labels = match config.get("id2label").and_then(Value::as_object) {
            Some(map) if !map.is_empty() => map.len(),
            _ => config
                .get("num_labels")
                .and_then(Value::as_u64)
                .map_or(2, |n| n as usize),
        };
        let activation_name = config
            .get("sentence_transformers")
            .and_then(|st| st.get("activation_fn"))
            .or_else(|| config.get("sbert_ce_default_activation_function"))
            .and_then(Value::as_str);
        let activation = match activation_name {
            None => None,
            Some(name) => Some(Activation::from_torch_name(name).ok_or_else(|| {
                Error::model(format!(
                    "{}: unsupported activation_fn {name:?} (supported: Sigmoid, Identity, \
                     Tanh); override it with the builder's `activation`",
                    file.display()
                ))
            })?),
        };
        Ok(ClassifierConfig {
            architecture,
            num_labels,
            activation,
        })
    }

    /// The activation sentence-transformers applies: the configured one, else sigmoid for one
    /// label and identity otherwise.
    pub fn default_activation(&self) -> Activation {
        self.activation.unwrap_or(if self.num_labels == 1 {
            Activation::Sigmoid
        } else {
            Activation::Identity
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ClassifierConfig> {
        ClassifierConfig::from_value(&v, Path::new("config.json"))
    }

    #[test]
    fn activation_resolution_follows_sentence_transformers() {
        let base = json!({"architectures": ["BertForSequenceClassification"],
            "id2label": {"0": "LABEL_0"}, "max_position_embeddings": 512});
        assert_eq!(
            parse(base.clone()).unwrap().default_activation(),
            Activation::Sigmoid
        );

        let mut v = base.clone();
        v["sentence_transformers"] = json!({"activation_fn": "torch.nn.modules.linear.Identity"});
        assert_eq!(parse(v).unwrap().default_activation(), Activation::Identity);

        let mut v = base.clone();
        v["sbert_ce_default_activation_function"] = json!("torch.nn.modules.linear.Identity");
        assert_eq!(parse(v).unwrap().default_activation(), Activation::Identity);

        // The new key wins over the legacy one.
        let mut v = base.clone();
        v["sentence_transformers"] =
            json!({"activation_fn": "torch.nn.modules.activation.Sigmoid"});
        v["sbert_ce_default_activation_function"] = json!("torch.nn.modules.linear.Identity");
        assert_eq!(parse(v).unwrap().default_activation(), Activation::Sigmoid);

        let mut v = base.clone();
        v["sentence_transformers"] = json!({"activation_fn": "torch.nn.modules.activation.ELU"});
        let e = parse(v).unwrap_err().to_string();
        assert!(e.contains("ELU") && e.contains("config.json"), "{e}");

        let mut v = base;
        v["id2label"] = json!({"0": "a", "1": "b", "2": "c"});
        let c = parse(v).unwrap();
        assert_eq!(c.num_labels, 3);
        assert_eq!(c.default_activation(), Activation::Identity);
    }

    #[test]
    fn architectures_are_detected() {
        for name in [
            "BertForSequenceClassification",
            "XLMRobertaForSequenceClassification",
            "RobertaForSequenceClassification",
            "CamembertForSequenceClassification",
            "ElectraForSequenceClassification",
            "DistilBertForSequenceClassification",
            "ModernBertForSequenceClassification",
            "DebertaV2ForSequenceClassification",
            "Qwen3ForCausalLM",
            "BertModel",
            "GPT2LMHeadModel",
        ] {
            let a = Architecture::from_config(&json!({"architectures": [name]}), Path::new("c"))
                .unwrap();
            assert_eq!(a.name(), name);
            // Every name above but the last is one the crate dispatches on.
            assert_eq!(
                matches!(a, Architecture::Other(_)),
                name == "GPT2LMHeadModel",
                "{name}"
            );
        }
        assert_eq!(
            Architecture::from_name("Qwen3ForCausalLM"),
            Architecture::Qwen3ForCausalLm
        );
        let e = Architecture::from_config(&json!({}), Path::new("dir/config.json")).unwrap_err();
        assert!(e.to_string().contains("dir/config.json"), "{e}");
    }

    #[test]
    fn activations_compute() {
        assert_eq!(Activation::Sigmoid.apply(0.0), 0.5);
        assert!((Activation::Sigmoid.apply(2.0) - 0.880_797_1).abs() < 1e-6);
        assert_eq!(Activation::Identity.apply(-1.5), -1.5);
        assert!((Activation::Tanh.apply(1.0) - 0.761_594_2).abs() < 1e-6);
        assert_eq!(Activation::from_torch_name("Tanh"), Some(Activation::Tanh));
        assert_eq!(Activation::from_torch_name("torch.nn.ReLU"), None);
    }
}
