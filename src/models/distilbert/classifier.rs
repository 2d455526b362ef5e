//! `DistilBertForSequenceClassification` (DistilBERT cross-encoders) on the packed
//! [`DistilBertEncoder`]: transformers' head reads the first token (`[CLS]`),
//! `logits = classifier(relu(pre_classifier(h)))`, both layers at the file's root, in f32.

use super::config::DistilBertConfig;
use super::encoder::{DistilBertEncoder, PREFIXES};
use crate::models::config::Architecture;
use crate::models::dir::ModelDir;
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{EncoderWeights, Sequence};
use crate::models::layers::head::{head_config, FirstTokens, PooledClassifier, DISTILBERT_HEAD};
use crate::models::Precision;
use crate::{Error, Result};

/// A DistilBERT encoder with its sequence-classification head, on the CPU.
pub(crate) type DistilBertClassifier = PooledClassifier<DistilBertEncoder>;

impl PooledClassifier<DistilBertEncoder> {
    /// Loads a `DistilBertForSequenceClassification` from `dir` (the encoder under
    /// `distilbert.`, the head's `pre_classifier` and `classifier`), its linear layers in
    /// `precision` (the head in f32). Another architecture, a config the encoder cannot honour
    /// or weights that do not match it give an [`Error::Model`] naming the file.
    pub fn load(dir: &ModelDir, precision: Precision) -> Result<Self> {
        let (config_path, value, config) = head_config(dir)?;
        if config.architecture != Architecture::DistilBertForSequenceClassification {
            return Err(Error::model(format!(
                "{}: architecture {} is not DistilBertForSequenceClassification",
                config_path.display(),
                config.architecture
            )));
        }
        let cfg = DistilBertConfig::from_value(&value, &config_path)?;
        let h = cfg.hidden;
        let w = EncoderWeights::open(dir, PREFIXES)?;
        let encoder = DistilBertEncoder::load(&w, cfg, precision)?;
        PooledClassifier::with_head(encoder, &w, h, config, &DISTILBERT_HEAD)
    }
}

impl FirstTokens for DistilBertEncoder {
    fn first_tokens(&self, seqs: &[Sequence<'_>]) -> Result<Vec<f32>> {
        self.forward(seqs, Output::FirstToken)
    }
    fn precision(&self) -> Precision {
        DistilBertEncoder::precision(self)
    }
    fn vocab_size(&self) -> usize {
        self.config().vocab
    }
    fn max_length(&self) -> usize {
        self.config().positions
    }
}
