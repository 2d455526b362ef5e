//! The shared layer every architecture is built from: nothing here knows a model family.
//!
//! - `config`: the one reader of `config.json` values, with errors that name the file and key;
//! - `kernels`: the products (`Linear`, in f32, bf16 or int8), row-wise steps (norms,
//!   activations, softmax) and the thread-local scratch they run in; `panels` holds the f32 and
//!   bf16 weight panels, `quant` the int8 rows;
//! - `dense`: an encoder's linear layer in its precision, with the step after it;
//! - `attention`: attention within each sequence of a packed batch;
//! - `relative`: T5's relative position buckets and attention with their bias (T5, MPNet);
//! - `encoder`: what the post-norm encoders share (the weights under a checkpoint's prefix,
//!   layer norms, the feed-forward block, the sequences of a batch and their checks);
//! - `head`: the classification heads' pooled logits;
//! - `mlm`: the masked-language-model head (the logits over the vocabulary), reduced over each
//!   sequence's tokens in blocks (learned sparse encoders);
//! - `rope`: rotary tables and their scalings;
//! - `rotary`: gated MLPs and the batches of the rotary encoders;
//! - `rms`: RMSNorm of rows, and the per-head q/k RMSNorm and RoPE of fused QKV rows;
//! - `weights`: the one safetensors loader (and LoRA adapters stored beside a weight, merged
//!   into it);
//! - `lora`: low-rank corrections applied beside a product (a second adapter on merged
//!   weights);
//! - `batch`: length batching under one token budget;
//! - `candle` (feature `candle`): the same building blocks on a candle device.

pub(crate) mod attention;
pub(crate) mod batch;
#[cfg(feature = "candle")]
pub(crate) mod candle;
pub(crate) mod config;
pub(crate) mod dense;
pub(crate) mod encoder;
pub(crate) mod head;
pub(crate) mod kernels;
pub(crate) mod lora;
pub(crate) mod mlm;
pub(crate) mod panels;
pub(crate) mod quant;
pub(crate) mod relative;
pub(crate) mod rms;
pub(crate) mod rope;
pub(crate) mod rotary;
pub(crate) mod weights;
