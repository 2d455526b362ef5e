//! Sequence classification models loaded from a [`ModelDir`]: `BertForSequenceClassification`,
//! the RoBERTa family's (`XLMRobertaForSequenceClassification`,
//! `RobertaForSequenceClassification`, `CamembertForSequenceClassification`) and
//! `ElectraForSequenceClassification`, on the packed [`Encoder`](super::encoder).
//!
//! Every head reads the first token (`[CLS]` / `<s>`): `logits = W2 act(W1 h + b1) + b2`, with
//! `W1` the BERT pooler (`bert.pooler.dense`) or the RoBERTa and ELECTRA heads'
//! `classifier.dense`, `W2` `classifier` or `classifier.out_proj` (the shared
//! [`PooledClassifier`]), and `act` tanh, except ELECTRA's exact GELU (transformers'
//! `ElectraClassificationHead`, whatever `hidden_act` says).

use super::encoder::{Encoder, EncoderConfig, EncoderWeights, Output, Sequence};
use crate::models::config::Architecture;
use crate::models::dir::ModelDir;
use crate::models::layers::head::{
    head_config, FirstTokens, PooledClassifier, BERT_HEAD, ELECTRA_HEAD, XLMR_HEAD,
};
use crate::models::Precision;
use crate::{Error, Result};

/// A BERT-family encoder with its sequence-classification head, on the CPU.
pub(crate) type SequenceClassifier = PooledClassifier<Encoder>;

/// The BERT-family classifiers, by how their checkpoints differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// BERT: the encoder under `bert.`, its pooler, `classifier`.
    Bert,
    /// XLM-R, RoBERTa, CamemBERT: positions after the padding id, the encoder under
    /// `roberta.`, `classifier.dense` + tanh + `classifier.out_proj`.
    Roberta,
    /// ELECTRA: BERT's positions, the encoder under `electra.`, `classifier.dense` + GELU +
    /// `classifier.out_proj`.
    Electra,
}

impl PooledClassifier<Encoder> {
    /// Loads a BERT, RoBERTa-family or ELECTRA sequence classifier from `dir`. Any other
    /// architecture, an unsupported config, or weights that do not match the config give an
    /// [`Error::Model`] naming the file.
    /// The encoder's linear layers are loaded in `precision`; the head stays in f32.
    pub fn load(dir: &ModelDir, precision: Precision) -> Result<Self> {
        let (config_path, value, config) = head_config(dir)?;
        let kind = match &config.architecture {
            Architecture::BertForSequenceClassification => Kind::Bert,
            Architecture::XlmRobertaForSequenceClassification
            | Architecture::RobertaForSequenceClassification
            | Architecture::CamembertForSequenceClassification => Kind::Roberta,
            Architecture::ElectraForSequenceClassification => Kind::Electra,
            other => {
                return Err(Error::model(format!(
                    "{}: unsupported architecture {other} for a BERT-family cross-encoder \
                     (supported: BertForSequenceClassification, \
                     XLMRobertaForSequenceClassification, RobertaForSequenceClassification, \
                     CamembertForSequenceClassification, ElectraForSequenceClassification)",
                    config_path.display()
                )))
            }
        };
        let enc_config = EncoderConfig::from_value(&value, &config_path, kind == Kind::Roberta)?;
        let h = enc_config.hidden;
        let prefix = match kind {
            Kind::Bert => "bert",
            Kind::Roberta => "roberta",
            Kind::Electra => "electra",
        };
        let w = EncoderWeights::open(dir, &[prefix])?;
        let encoder = Encoder::load(&w, enc_config, precision)?;
        let head = match kind {
            Kind::Bert => &BERT_HEAD,
            Kind::Roberta => &XLMR_HEAD,
            Kind::Electra => &ELECTRA_HEAD,
        };
        PooledClassifier::with_head(encoder, &w, h, config, head)
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
