//! Sequence classification models loaded from a [`ModelDir`]: `BertForSequenceClassification`
//! and `XLMRobertaForSequenceClassification`, on the packed [`Encoder`](super::encoder).
//!
//! Both heads read the first token (`[CLS]` / `<s>`): `logits = W2 tanh(W1 h + b1) + b2`, with
//! `W1` the BERT pooler (`bert.pooler.dense`) or the RoBERTa head's `classifier.dense`, and `W2`
//! `classifier` or `classifier.out_proj` (the shared [`PooledClassifier`]).

use super::encoder::{Encoder, EncoderConfig, EncoderWeights, Output, Sequence};
use crate::models::config::Architecture;
use crate::models::dir::ModelDir;
use crate::models::layers::head::{
    head_config, FirstTokens, PooledClassifier, BERT_HEAD, XLMR_HEAD,
};
use crate::models::Precision;
use crate::{Error, Result};

/// A BERT or XLM-RoBERTa encoder with its sequence-classification head, on the CPU.
pub(crate) type SequenceClassifier = PooledClassifier<Encoder>;

impl PooledClassifier<Encoder> {
    /// Loads a `BertForSequenceClassification` or `XLMRobertaForSequenceClassification` from
    /// `dir`. Any other architecture, an unsupported config, or weights that do not match the
    /// config give an [`Error::Model`] naming the file.
    /// The encoder's linear layers are loaded in `precision`; the head stays in f32.
    pub fn load(dir: &ModelDir, precision: Precision) -> Result<Self> {
        let (config_path, value, config) = head_config(dir)?;
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
        let h = enc_config.hidden;
        let w = EncoderWeights::open(dir, &[if roberta { "roberta" } else { "bert" }])?;
        let encoder = Encoder::load(&w, enc_config, precision)?;
        let head = if roberta { &XLMR_HEAD } else { &BERT_HEAD };
        PooledClassifier::with_tanh_head(encoder, &w, h, config, head)
    }
}

impl FirstTokens for Encoder {
    fn first_tokens(&self, seqs: &[Sequence<'_>]) -> Result<Vec<f32>> {
        self.forward(seqs, Output::FirstToken)
    }
    fn precision(&self) -> Precision {
        Encoder::precision(self)
    }
    fn vocab_size(&self) -> usize {
        self.config().vocab
    }
    /// RoBERTa-style models lose `pad_token_id + 1` positions.
    fn max_length(&self) -> usize {
        self.config().max_length()
    }
}
