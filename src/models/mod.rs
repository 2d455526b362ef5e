//! Loading and running models (feature `models`).
//!
//! The public part is small: [`ModelOptions`] (one set of options for every model builder),
//! [`ModelDir`] (a local model directory: `config.json`, `tokenizer.json`, memory-mapped
//! `model.safetensors`), [`Architecture`] (what a `config.json` describes, to dispatch on) and,
//! with the `hf-hub` feature, [`HubModel`] to fetch a directory from the Hugging Face hub.
//!
//! The rest is internal, one folder per model family on one shared layer:
//! - `bert/`: the packed (padding-free) BERT / XLM-R encoder, its sequence-classification head
//!   and the (query, document) tokenization of the cross-encoders;
//! - shared: length batching under a token budget (`batch`), the CPU kernels (`kernels`, and
//!   `quant` for int8), the model directory (`dir`) and options (`options`).

mod batch;
pub(crate) mod bert;
mod config;
mod dir;
#[cfg(feature = "hf-hub")]
mod hub;
pub(crate) mod kernels;
mod options;
mod quant;
pub(crate) mod qwen3;
pub(crate) mod weights;

pub(crate) use batch::{plan_batches, plan_packed_batches};
pub(crate) use bert::classifier::SequenceClassifier;
#[doc(hidden)]
pub use bert::pair::PairEncoding;
pub(crate) use bert::pair::PairTokenizer;
pub use config::{Activation, Architecture};
pub use dir::{ModelDir, WEIGHTS_FILE};
pub(crate) use dir::{CONFIG_FILE, TOKENIZER_FILE};
#[cfg(feature = "hf-hub")]
pub use hub::HubModel;
pub(crate) use options::ModelPool;
pub use options::{ModelOptions, Precision};
pub use quant::int8_kernel;
pub(crate) use weights::shard_paths;

/// The message of a candle error without the backtrace candle attaches when `RUST_BACKTRACE`
/// is set.
pub(crate) fn candle_message(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_message(inner),
        candle_core::Error::WithPath { inner, path } => {
            format!("{}: {}", path.display(), candle_message(inner))
        }
        candle_core::Error::Context { inner, context } => {
            format!("{context}: {}", candle_message(inner))
        }
        other => other.to_string(),
    }
}
