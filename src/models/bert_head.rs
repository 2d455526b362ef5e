//! `BertForSequenceClassification`: candle's `BertModel` plus the pooler and classifier that
//! candle does not ship.
//!
//! logits = classifier(tanh(pooler(h\[CLS\]))), with `pooler` and `classifier` plain linear
//! layers (`bert.pooler.dense.*`, `classifier.*` in the transformers weight layout).

use candle_core::{IndexOp, Tensor};
use candle_nn::{linear, Linear, Module, VarBuilder};
use candle_transformers::models::bert::{BertModel, Config};

/// A BERT encoder with a sequence-classification head.
pub struct BertForSequenceClassification {
    bert: BertModel,
    pooler: Linear,
    classifier: Linear,
}

impl BertForSequenceClassification {
    /// Loads the weights: the encoder and pooler under `prefix` (`"bert"` in transformers'
    /// layout, `""` when the encoder sits at the root), the classifier at the root.
    pub fn load(
        vb: VarBuilder,
        config: &Config,
        prefix: &str,
        num_labels: usize,
    ) -> candle_core::Result<Self> {
        let encoder_vb = if prefix.is_empty() {
            vb.clone()
        } else {
            vb.pp(prefix)
        };
        let bert = BertModel::load(encoder_vb.clone(), config)?;
        let pooler = linear(
            config.hidden_size,
            config.hidden_size,
            encoder_vb.pp("pooler").pp("dense"),
        )?;
        let classifier = linear(config.hidden_size, num_labels, vb.pp("classifier"))?;
        Ok(BertForSequenceClassification {
            bert,
            pooler,
            classifier,
        })
    }

    /// Logits of shape `(batch, num_labels)` for `(batch, seq)` u32 inputs; `attention_mask`
    /// is 1 for real tokens and 0 for padding.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: &Tensor,
        attention_mask: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let hidden = self
            .bert
            .forward(input_ids, token_type_ids, Some(attention_mask))?;
        let cls = hidden.i((.., 0))?.contiguous()?;
        let pooled = self.pooler.forward(&cls)?.tanh()?;
        self.classifier.forward(&pooled)
    }
}
