//! GTE's sequence classifier (gte-multilingual-reranker-base: new-impl's
//! `NewForSequenceClassification`, transformers 5's `GteForSequenceClassification`) on the
//! packed [`GteEncoder`]: BERT's head, `logits = classifier(tanh(pooler.dense(x[0])))` (the
//! shared [`PooledClassifier`]).

use super::config::{GteConfig, Spelling};
use super::encoder::GteEncoder;
use crate::models::config::Architecture;
use crate::models::dir::ModelDir;
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{EncoderWeights, Sequence};
use crate::models::layers::head::{head_config, FirstTokens, PooledClassifier, BERT_HEAD};
use crate::models::Precision;
use crate::{Error, Result};

/// A GTE encoder with its sequence-classification head, on the CPU.
pub(crate) type GteClassifier = PooledClassifier<GteEncoder>;

impl PooledClassifier<GteEncoder> {
    /// Loads a `NewForSequenceClassification` or `GteForSequenceClassification` from `dir`
    /// (tensors under `new.` or `gte.`). Another architecture, a config the crate cannot honour,
    /// or weights that do not match the config give an [`Error::Model`] naming the file (and
    /// the key). The encoder's linear layers are loaded in `precision`; the head stays in f32.
    pub fn load(dir: &ModelDir, precision: Precision) -> Result<Self> {
        let (config_path, value, config) = head_config(dir)?;
        let spelling = match config.architecture {
            Architecture::NewForSequenceClassification => Spelling::New,
            Architecture::GteForSequenceClassification => Spelling::Gte,
            _ => {
                return Err(Error::model(format!(
                    "{}: architecture {} is not NewForSequenceClassification or \
                     GteForSequenceClassification",
                    config_path.display(),
                    config.architecture
                )))
            }
        };
        let cfg = GteConfig::from_value(&value, spelling, &config_path)?;
        let h = cfg.hidden;
        let w = EncoderWeights::open(dir, cfg.layout.prefixes())?;
        let encoder = GteEncoder::load(&w, cfg, precision)?;
        PooledClassifier::with_head(encoder, &w, h, config, &BERT_HEAD)
    }
}

impl FirstTokens for GteEncoder {
    fn first_tokens(&self, seqs: &[Sequence<'_>]) -> Result<Vec<f32>> {
        self.forward(seqs, Output::FirstToken)
    }
    fn precision(&self) -> Precision {
        GteEncoder::precision(self)
    }
    fn vocab_size(&self) -> usize {
        self.config().vocab
    }
    /// `max_position_embeddings`.
    fn max_length(&self) -> usize {
        self.config().max_positions
    }
}
