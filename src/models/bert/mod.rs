//! The BERT family (BERT, XLM-R / RoBERTa): the packed encoder, its task heads and the
//! (query, document) tokenization the cross-encoders share.
//!
//! - `encoder`: embeddings and transformer layers on the shared CPU kernels, padding-free
//!   batches, f32 or int8 linear layers;
//! - `classifier`: `BertForSequenceClassification` / `XLMRobertaForSequenceClassification`
//!   heads over the encoder (the cross-encoder's model);
//! - `pair`: (query, document) tokenization and truncation as sentence-transformers does it.

pub(crate) mod classifier;
pub(crate) mod encoder;
pub(crate) mod pair;
