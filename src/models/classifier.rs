//! Sequence classification models loaded from a [`ModelDir`]: BERT (our head on candle's
//! encoder) and XLM-RoBERTa (candle's own head).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{bert, xlm_roberta};
use serde_json::Value;

use super::batch::PaddedBatch;
use super::bert_head::BertForSequenceClassification;
use super::config::{Architecture, ClassifierConfig};
use super::dir::{ModelDir, CONFIG_FILE, WEIGHTS_FILE};
use super::{candle_message, model_error};
use crate::{Error, Result};

enum Inner {
    Bert(BertForSequenceClassification),
    XlmRoberta(xlm_roberta::XLMRobertaForSequenceClassification),
}

/// A transformer encoder with a sequence-classification head, on the CPU in float32.
pub struct SequenceClassifier {
    inner: Inner,
    config: ClassifierConfig,
    vocab_size: usize,
}

impl std::fmt::Debug for SequenceClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceClassifier")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SequenceClassifier {
    /// Loads a `BertForSequenceClassification` or `XLMRobertaForSequenceClassification` from
    /// `dir`. Any other architecture, a config candle cannot read, or weights that do not match
    /// the config give an [`Error::Model`] naming the file.
    pub fn load(dir: &ModelDir) -> Result<Self> {
        let config_path = dir.path().join(CONFIG_FILE);
        let value = dir.config()?;
        let config = ClassifierConfig::from_value(&value, &config_path)?;
        let shape = Shape::from_value(&value, &config_path)?;
        match &config.architecture {
            Architecture::BertForSequenceClassification
            | Architecture::XlmRobertaForSequenceClassification => {}
            other => {
                return Err(Error::Model(format!(
                    "{}: unsupported architecture {other} for a cross-encoder (supported: \
                     BertForSequenceClassification, XLMRobertaForSequenceClassification)",
                    config_path.display()
                )))
            }
        }
        let device = Device::Cpu;
        let vb = dir.weights(DType::F32, &device)?;
        let weights_path = dir.path().join(WEIGHTS_FILE);
        let mismatch = |e: candle_core::Error| {
            Error::Model(format!(
                "{}: weights do not match {}: {}",
                weights_path.display(),
                config_path.display(),
                candle_message(&e)
            ))
        };
        let inner = match config.architecture {
            Architecture::BertForSequenceClassification => {
                let cfg: bert::Config = parse_config(&value, &config_path, "BERT")?;
                let prefix = bert_prefix(&vb).ok_or_else(|| {
                    Error::Model(format!(
                        "{}: no BERT encoder tensors (expected \
                         bert.embeddings.word_embeddings.weight)",
                        weights_path.display()
                    ))
                })?;
                Inner::Bert(
                    BertForSequenceClassification::load(vb, &cfg, prefix, config.num_labels)
                        .map_err(mismatch)?,
                )
            }
            _ => {
                // transformers 5 no longer writes this key; candle requires it.
                let mut value = value.clone();
                if let Some(map) = value.as_object_mut() {
                    map.entry("position_embedding_type")
                        .or_insert_with(|| "absolute".into());
                }
                let cfg: xlm_roberta::Config = parse_config(&value, &config_path, "XLM-RoBERTa")?;
                Inner::XlmRoberta(
                    xlm_roberta::XLMRobertaForSequenceClassification::new(
                        config.num_labels,
                        &cfg,
                        vb,
                    )
                    .map_err(mismatch)?,
                )
            }
        };
        Ok(SequenceClassifier {
            inner,
            config,
            vocab_size: shape.vocab_size,
        })
    }

    /// The facts read from `config.json`.
    pub fn config(&self) -> &ClassifierConfig {
        &self.config
    }

    /// `vocab_size` from `config.json`.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Logits of shape `(batch, num_labels)`.
    pub fn forward(&self, batch: &PaddedBatch) -> Result<Tensor> {
        let out = match &self.inner {
            Inner::Bert(m) => m.forward(
                &batch.input_ids,
                &batch.token_type_ids,
                &batch.attention_mask,
            ),
            Inner::XlmRoberta(m) => m.forward(
                &batch.input_ids,
                &batch.attention_mask,
                &batch.token_type_ids,
            ),
        };
        out.map_err(model_error)
    }

    /// Logits as rows, one per batch input: `(batch, num_labels)`.
    pub fn logits(&self, batch: &PaddedBatch) -> Result<Vec<Vec<f32>>> {
        self.forward(batch)?
            .to_dtype(DType::F32)
            .and_then(|t| t.to_vec2::<f32>())
            .map_err(model_error)
    }
}

/// The sizes every encoder config must have, checked before any weight is read.
struct Shape {
    vocab_size: usize,
}

impl Shape {
    fn from_value(value: &Value, path: &std::path::Path) -> Result<Self> {
        let get = |key: &str| -> Result<usize> {
            value
                .get(key)
                .and_then(Value::as_u64)
                .filter(|&v| v > 0)
                .map(|v| v as usize)
                .ok_or_else(|| {
                    Error::Model(format!(
                        "{}: missing or invalid `{key}` (a positive integer)",
                        path.display()
                    ))
                })
        };
        let hidden = get("hidden_size")?;
        let heads = get("num_attention_heads")?;
        if hidden % heads != 0 {
            return Err(Error::Model(format!(
                "{}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}",
                path.display()
            )));
        }
        Ok(Shape {
            vocab_size: get("vocab_size")?,
        })
    }
}

fn parse_config<T: serde::de::DeserializeOwned>(
    value: &Value,
    path: &std::path::Path,
    what: &str,
) -> Result<T> {
    serde_json::from_value(value.clone()).map_err(|e| {
        Error::Model(format!(
            "{}: not a valid {what} config: {e}",
            path.display()
        ))
    })
}

/// Where the BERT encoder sits in the weights: under `bert.` (transformers' sequence
/// classification layout) or at the root.
fn bert_prefix(vb: &VarBuilder) -> Option<&'static str> {
    if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
        Some("bert")
    } else if vb.contains_tensor("embeddings.word_embeddings.weight") {
        Some("")
    } else {
        None
    }
}
