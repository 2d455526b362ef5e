//! DistilBERT (transformers' `DistilBertModel`, `DistilBertForMaskedLM` and
//! `DistilBertForSequenceClassification`: sentence-transformers embedders such as
//! msmarco-distilbert-base-tas-b, the document encoders of the opensearch neural sparse models,
//! cross-encoders), BERT's post-norm layers without token types, under their own tensor names,
//! on the shared CPU kernels.
//!
//! - `config`: `config.json` (`DistilBertConfig`'s keys and defaults), checked;
//! - `classifier`: the sequence-classification head (`pre_classifier`, ReLU, `classifier`);
//! - `encoder`: the weights (f32 panels or int8 linear layers), the packed forward pass, and
//!   where the MLM head's tensors are.

pub(crate) mod classifier;
pub(crate) mod config;
pub(crate) mod encoder;
