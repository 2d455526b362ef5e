//! The BERT family (BERT, XLM-R / RoBERTa): the packed encoder and its task heads.
//!
//! - `encoder`: embeddings and transformer layers on the shared CPU kernels, padding-free
//!   batches, f32 or int8 linear layers;
//! - `candle`: the same encoder on candle's operations (a GPU's path: one product for Q, K
//!   and V, fused softmax and norms);
//! - `classifier`: `BertForSequenceClassification` / `XLMRobertaForSequenceClassification`
//!   heads over the encoder (the cross-encoder's model).

#[cfg(feature = "candle")]
pub(crate) mod candle;
pub(crate) mod classifier;
pub(crate) mod encoder;
