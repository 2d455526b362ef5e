//! `DebertaV2ForSequenceClassification` (mxbai-rerank-base-v1 / -large-v1) on the packed
//! [`DebertaEncoder`]: transformers' `ContextPooler` (the first token's hidden state through
//! `pooler.dense` and `pooler_hidden_act`), then `logits = classifier(pooled)`.

use super::config::{DebertaConfig, PoolerAct};
use super::encoder::DebertaEncoder;
use crate::models::config::{Architecture, ClassifierConfig};
use crate::models::dir::{ModelDir, CONFIG_FILE};
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::EncoderWeights;
use crate::models::layers::head::{pooled_logits, sequences};
use crate::models::layers::kernels::Linear;
use crate::models::pair::PairEncoding;
use crate::models::Precision;
use crate::{Error, Result};

/// A DeBERTa-v2 / v3 encoder with its sequence-classification head, on the CPU.
pub(crate) struct DebertaClassifier {
    encoder: DebertaEncoder,
    pooler: Linear,
    pooler_act: PoolerAct,
    out: Linear,
    config: ClassifierConfig,
}

impl std::fmt::Debug for DebertaClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebertaClassifier")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl DebertaClassifier {
    /// Loads a `DebertaV2ForSequenceClassification` from `dir`. Another architecture, a config
    /// the crate cannot honour, or weights that do not match the config give an
    /// [`Error::Model`] naming the file (and the key). The encoder's linear layers are loaded
    /// in `precision`; the head stays in f32.
    pub fn load(dir: &ModelDir, precision: Precision) -> Result<Self> {
        let config_path = dir.path().join(CONFIG_FILE);
        let value = dir.config()?;
        let config = ClassifierConfig::from_value(&value, &config_path)?;
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
        w.check_root_size(
            "num_labels (or the size of id2label)",
            labels,
            "classifier.weight",
            0,
        )?;
        Ok(DebertaClassifier {
            pooler: w.root_linear("pooler.dense", h, h)?,
            pooler_act,
            out: w.root_linear("classifier", labels, h)?,
            encoder,
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

    /// The longest input (`max_position_embeddings`).
    pub fn max_length(&self) -> usize {
        self.encoder.config().max_positions
    }

    /// Logits, one row of `num_labels` per encoding, for encodings run as one packed batch.
    /// Token types are read where the model has token type embeddings.
    pub fn logits(&self, encodings: &[&PairEncoding]) -> Result<Vec<Vec<f32>>> {
        let first = self
            .encoder
            .forward(&sequences(encodings), Output::FirstToken)?;
        let act = |x: &mut [f32]| self.pooler_act.apply(x);
        Ok(pooled_logits(&first, &self.pooler, act, &self.out))
    }
}
