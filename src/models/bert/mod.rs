//! The BERT family (BERT, XLM-R / RoBERTa): the packed encoder and its task heads.
//!
//! - `encoder`: embeddings and transformer layers on the shared CPU kernels, padding-free
//!   batches, f32 or int8 linear layers;
//! - `classifier`: `BertForSequenceClassification` / `XLMRobertaForSequenceClassification`
//!   heads over the encoder (the cross-encoder's model).

pub(crate) mod classifier;
pub(crate) mod encoder;
