//! Sequence classification models loaded from a [`ModelDir`]: `BertForSequenceClassification`
//! and `XLMRobertaForSequenceClassification`, on the packed [`Encoder`](super::encoder).
//!
//! Both heads read the first token (`[CLS]` / `<s>`): `logits = W2 tanh(W1 h + b1) + b2`, with
//! `W1` the BERT pooler (`bert.pooler.dense`) or the RoBERTa head's `classifier.dense`, and `W2`
//! `classifier` or `classifier.out_proj`.

use super::encoder::{Encoder, EncoderConfig, EncoderWeights, Output};
use crate::models::config::{Architecture, ClassifierConfig};
use crate::models::dir::{ModelDir, CONFIG_FILE};
use crate::models::layers::head::{pooled_logits, sequences, tanh};
use crate::models::layers::kernels::Linear;
use crate::models::pair::PairEncoding;
use crate::models::Precision;
use crate::{Error, Result};

/// A transformer encoder with a sequence-classification head, on the CPU in float32.
pub struct SequenceClassifier {
    encoder: Encoder,
    dense: Linear,
    out: Linear,
    config: ClassifierConfig,
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
    /// `dir`. Any other architecture, an unsupported config, or weights that do not match the
    /// config give an [`Error::Model`] naming the file.
    /// The encoder's linear layers are loaded in `precision`; the head stays in f32.
    pub fn load(dir: &ModelDir, precision: Precision) -> Result<Self> {
        let config_path = dir.path().join(CONFIG_FILE);
        let value = dir.config()?;
        let config = ClassifierConfig::from_value(&value, &config_path)?;
        let roberta = match &config.architecture {
            Architecture::BertForSequenceClassification => false,
            Architecture::XlmRobertaForSequenceClassification => true,
            other => {
                return Err(Error::model(format!(
                    "{}: unsupported architecture {other} for a cross-encoder (supported: \
                     BertForSequenceClassification, XLMRobertaForSequenceClassification)",
                    config_path.display()
                )))
            }
        };
        let enc_config = EncoderConfig::from_value(&value, &config_path, roberta)?;
        let (h, labels) = (enc_config.hidden, config.num_labels);
        let w = EncoderWeights::open(dir, &[if roberta { "roberta" } else { "bert" }])?;
        let encoder = Encoder::load(&w, enc_config, precision)?;
        let head = if roberta {
            "classifier.out_proj.weight"
        } else {
            "classifier.weight"
        };
        w.check_root_size("num_labels (or the size of id2label)", labels, head, 0)?;
        let (dense, out) = if roberta {
            (
                w.root_linear("classifier.dense", h, h)?,
                w.root_linear("classifier.out_proj", labels, h)?,
            )
        } else {
            (
                w.encoder_linear("pooler.dense", h, h)?,
                w.root_linear("classifier", labels, h)?,
            )
        };
        Ok(SequenceClassifier {
            encoder,
            dense,
            out,
            config,
        })
    }

    /// The facts read from `config.json`.
    pub fn config(&self) -> &ClassifierConfig {
        &self.config
    }

    /// The number format of the encoder's linear layers.
    pub fn precision(&self) -> Precision {
        self.encoder.precision()
    }

    /// `vocab_size` from `config.json`.
    pub fn vocab_size(&self) -> usize {
        self.encoder.config().vocab
    }

    /// The longest input the position embeddings cover (RoBERTa-style models lose
    /// `pad_token_id + 1` positions).
    pub fn max_length(&self) -> usize {
        self.encoder.config().max_length()
    }

    /// Logits, one row of `num_labels` per encoding, for encodings run as one packed batch.
    pub fn logits(&self, encodings: &[&PairEncoding]) -> Result<Vec<Vec<f32>>> {
        let first = self
            .encoder
            .forward(&sequences(encodings), Output::FirstToken)?;
        Ok(pooled_logits(&first, &self.dense, tanh, &self.out))
    }
}
