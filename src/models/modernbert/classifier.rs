//! `ModernBertForSequenceClassification` (gte-reranker-modernbert-base) on the packed
//! [`ModernBertEncoder`]: the last hidden states pooled (`classifier_pooling`: the first token,
//! or the mean over the sequence's tokens), then the head
//! `logits = classifier(norm(act(dense(pooled))))`.

use super::config::{ClassifierPooling, ModernBertConfig};
use super::encoder::{ModernBertEncoder, ModernBertWeights, Norm};
use crate::models::config::{Architecture, ClassifierConfig};
use crate::models::dir::{ModelDir, CONFIG_FILE};
use crate::models::layers::batch::run_in_groups;
use crate::models::layers::dense::Output;
use crate::models::layers::kernels::{Act, Linear};
use crate::models::pair::PairEncoding;
use crate::models::Precision;
use crate::{Error, Result};

/// A ModernBERT encoder with its sequence-classification head, on the CPU.
pub(crate) struct ModernBertClassifier {
    encoder: ModernBertEncoder,
    dense: Linear,
    act: Act,
    norm: Norm,
    out: Linear,
    pooling: ClassifierPooling,
    config: ClassifierConfig,
}

impl std::fmt::Debug for ModernBertClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModernBertClassifier")
            .field("config", &self.config)
            .field("pooling", &self.pooling)
            .finish_non_exhaustive()
    }
}

impl ModernBertClassifier {
    /// Loads a `ModernBertForSequenceClassification` from `dir`. Another architecture, a
    /// config the crate cannot honour, or weights that do not match the config give an
    /// [`Error::Model`] naming the file (and the key). The encoder's linear layers are loaded
    /// in `precision`; the head stays in f32.
    pub fn load(dir: &ModelDir, precision: Precision) -> Result<Self> {
        let config_path = dir.path().join(CONFIG_FILE);
        let value = dir.config()?;
        let config = ClassifierConfig::from_value(&value, &config_path)?;
        if config.architecture != Architecture::ModernBertForSequenceClassification {
            return Err(Error::model(format!(
                "{}: architecture {} is not ModernBertForSequenceClassification",
                config_path.display(),
                config.architecture
            )));
        }
        let cfg = ModernBertConfig::from_value(&value, &config_path)?;
        let (h, labels) = (cfg.hidden, config.num_labels);
        let (pooling, act, bias, norm_bias) = (
            cfg.classifier_pooling,
            cfg.classifier_act,
            cfg.classifier_bias,
            cfg.norm_bias,
        );
        let w = ModernBertWeights::open(dir)?;
        let encoder = ModernBertEncoder::load(&w, cfg, precision)?;
        w.check_root_size(
            "num_labels (or the size of id2label)",
            labels,
            "classifier.weight",
            0,
        )?;
        Ok(ModernBertClassifier {
            dense: w.root_linear("head.dense", h, h, bias)?,
            act,
            norm: w.norm("head.norm", h, norm_bias, true)?,
            out: w.root_linear("classifier", labels, h, true)?,
            encoder,
            pooling,
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
    /// Token types are not an input of ModernBERT.
    pub fn logits(&self, encodings: &[&PairEncoding]) -> Result<Vec<Vec<f32>>> {
        let seqs: Vec<&[u32]> = encodings.iter().map(|e| e.input_ids.as_slice()).collect();
        let h = self.encoder.config().hidden;
        let lengths: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let forward = |output| {
            run_in_groups(&lengths, h, |group| {
                self.encoder.forward(&seqs[group], output)
            })
        };
        let pooled = match self.pooling {
            ClassifierPooling::Cls => forward(Output::FirstToken)?,
            ClassifierPooling::Mean => {
                let states = forward(Output::AllTokens)?;
                let mut pooled = vec![0.0f32; seqs.len() * h];
                let mut start = 0;
                for (seq, out) in seqs.iter().zip(pooled.chunks_exact_mut(h)) {
                    for row in states[start * h..(start + seq.len()) * h].chunks_exact(h) {
                        out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
                    }
                    let n = seq.len() as f32;
                    out.iter_mut().for_each(|o| *o /= n);
                    start += seq.len();
                }
                pooled
            }
        };
        let n = seqs.len();
        let mut hidden = vec![0.0; n * h];
        self.dense.forward(&pooled, n, &mut hidden);
        let eps = self.encoder.config().eps;
        for row in hidden.chunks_exact_mut(h) {
            self.act.apply_here(row);
            self.norm.apply(row, eps);
        }
        let labels = self.out.outputs;
        let mut logits = vec![0.0; n * labels];
        self.out.forward(&hidden, n, &mut logits);
        Ok(logits.chunks_exact(labels).map(<[f32]>::to_vec).collect())
    }
}
