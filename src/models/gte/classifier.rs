//! GTE's sequence classifier (gte-multilingual-reranker-base: new-impl's
//! `NewForSequenceClassification`, transformers 5's `GteForSequenceClassification`) on the
//! packed [`GteEncoder`]: BERT's head, `logits = classifier(tanh(pooler.dense(x[0])))`.

use super::config::{GteConfig, Spelling};
use super::encoder::GteEncoder;
use crate::models::config::{Architecture, ClassifierConfig};
use crate::models::dir::{ModelDir, CONFIG_FILE};
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::EncoderWeights;
use crate::models::layers::head::{pooled_logits, sequences, tanh};
use crate::models::layers::kernels::Linear;
use crate::models::pair::PairEncoding;
use crate::models::Precision;
use crate::{Error, Result};

/// A GTE encoder with its sequence-classification head, on the CPU.
pub(crate) struct GteClassifier {
    encoder: GteEncoder,
    pooler: Linear,
    out: Linear,
    config: ClassifierConfig,
}

impl std::fmt::Debug for GteClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GteClassifier")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl GteClassifier {
    /// Loads a `NewForSequenceClassification` or `GteForSequenceClassification` from `dir`
    /// (tensors under `new.` or `gte.`). Another architecture, a config the crate cannot honour,
    /// or weights that do not match the config give an [`Error::Model`] naming the file (and
    /// the key). The encoder's linear layers are loaded in `precision`; the head stays in f32.
    pub fn load(dir: &ModelDir, precision: Precision) -> Result<Self> {
        let config_path = dir.path().join(CONFIG_FILE);
        let value = dir.config()?;
        let config = ClassifierConfig::from_value(&value, &config_path)?;
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
        let (h, labels) = (cfg.hidden, config.num_labels);
        let w = EncoderWeights::open(dir, cfg.layout.prefixes())?;
        let encoder = GteEncoder::load(&w, cfg, precision)?;
        w.check_root_size(
            "num_labels (or the size of id2label)",
            labels,
            "classifier.weight",
            0,
        )?;
        Ok(GteClassifier {
            pooler: w.encoder_linear("pooler.dense", h, h)?,
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
    pub fn logits(&self, encodings: &[&PairEncoding]) -> Result<Vec<Vec<f32>>> {
        let first = self
            .encoder
            .forward(&sequences(encodings), Output::FirstToken)?;
        Ok(pooled_logits(&first, &self.pooler, tanh, &self.out))
    }
}
