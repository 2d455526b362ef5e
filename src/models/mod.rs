//! Loading and running models (feature `models`).
//!
//! The public part is small: [`ModelOptions`] (one set of options for every model builder),
//! [`ModelDir`] (a local model directory: `config.json`, `tokenizer.json`, memory-mapped
//! `model.safetensors`), [`Architecture`] (what a `config.json` describes, to dispatch on) and,
//! with the `hf-hub` feature, [`HubModel`] to fetch a directory from the Hugging Face hub.
//!
//! The rest is internal: (query, document) tokenization as sentence-transformers does it
//! (`pair`), length batching under a token budget (`batch`), BERT / XLM-R sequence
//! classification (`classifier`) on a packed (padding-free) encoder (`encoder`) with its own
//! CPU kernels (`kernels`).

mod batch;
mod classifier;
mod config;
mod dir;
pub(crate) mod encoder;
#[cfg(feature = "hf-hub")]
mod hub;
pub(crate) mod kernels;
mod options;
mod pair;
mod quant;
pub(crate) mod qwen3;
pub(crate) mod weights;

pub(crate) use batch::{plan_batches, plan_packed_batches};
pub(crate) use classifier::SequenceClassifier;
pub use config::{Activation, Architecture};
pub use dir::{ModelDir, WEIGHTS_FILE};
pub(crate) use dir::{CONFIG_FILE, TOKENIZER_FILE};
#[cfg(feature = "hf-hub")]
pub use hub::HubModel;
pub use options::{ModelOptions, Precision};
#[doc(hidden)]
pub use pair::PairEncoding;
pub(crate) use pair::PairTokenizer;
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
