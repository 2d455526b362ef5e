//! `DebertaV2ForSequenceClassification` (mxbai-rerank-base-v1 / -large-v1) on the packed
//! [`DebertaEncoder`]: transformers' `ContextPooler` (the first token's hidden state through
//! `pooler.dense` and `pooler_hidden_act`), then `logits = classifier(pooled)` (the shared
//! [`PooledClassifier`]).

use super::config::DebertaConfig;
use super::encoder::{DebertaEncoder, Sequence};
use crate::models::config::Architecture;
use crate::models::dir::ModelDir;
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::EncoderWeights;
use crate::models::layers::head::{check_labels, head_config, FirstTokens, PooledClassifier};
use crate::models::Precision;
use crate::{Error, Result};

/// A DeBERTa-v2 / v3 encoder with its sequence-classification head, on the CPU.
pub(crate) type DebertaClassifier = PooledClassifier<DebertaEncoder>;

impl PooledClassifier<DebertaEncoder> {
    /// Loads a `DebertaV2ForSequenceClassification` from `dir`. Another architecture, a config
    /// the crate cannot honour, or weights that do not match the config give an
    /// [`Error::Model`] naming the file (and the key). The encoder's linear layers are loaded
    /// in `precision`; the head stays in f32.
    pub fn load(dir: &ModelDir, precision: Precision) -> Result<Self> {
        let (config_path, value, config) = head_config(dir)?;
        if config.architecture != Architecture::DebertaV2ForSequenceClassification {
            return Err(Error::model(format!(
                "{}: architecture {} is not DebertaV2ForSequenceClassification",
                config_path.display(),
                config.architecture
            )));
        }
        let cfg = DebertaConfig::from_value(&value, &config_path)?;
        let (h, labels, pooler_act) = (cfg.hidden, config.num_labels, cfg.pooler_act);
        let w = EncoderWeights::open(dir, &["deberta"])?;
        let encoder = DebertaEncoder::load(&w, cfg, precision)?;
        check_labels(&w, labels, "classifier.weight")?;
        let pooler = w.root_linear("pooler.dense", h, h)?;
        let out = w.root_linear("classifier", labels, h)?;
        Ok(PooledClassifier::new(
            encoder, pooler, pooler_act, out, config,
        ))
    }
}

impl FirstTokens for DebertaEncoder {
    /// Token types are read where the model has token type embeddings.
    fn first_tokens(&self, seqs: &[Sequence<'_>]) -> Result<Vec<f32>> {
        self.forward(seqs, Output::FirstToken)
    }
    fn precision(&self) -> Precision {
        DebertaEncoder::precision(self)
    }
    fn vocab_size(&self) -> usize {
        self.config().vocab
    }
    /// `max_position_embeddings`.
    fn max_length(&self) -> usize {
        self.config().max_positions
    }
}
