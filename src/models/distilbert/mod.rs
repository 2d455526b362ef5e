//! DistilBERT (transformers' `DistilBertModel` and `DistilBertForMaskedLM`: the document
//! encoders of the opensearch neural sparse models), BERT's post-norm layers without token
//! types, under their own tensor names, on the shared CPU kernels.
//!
//! - `config`: `config.json` (`DistilBertConfig`'s keys and defaults), checked;
//! - `encoder`: the weights (f32 panels or int8 linear layers), the packed forward pass, and
//!   where the MLM head's tensors are.

pub(crate) mod config;
pub(crate) mod encoder;
