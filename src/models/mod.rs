//! Candle model internals shared by the model-backed stages (needs the `models` feature).
//!
//! - [`ModelDir`]: a local model directory (`config.json`, `tokenizer.json`,
//!   `model.safetensors`, memory-mapped), and with the `hf-hub` feature [`HubModel`] to fetch
//!   one from the Hugging Face hub cache;
//! - [`Architecture`]: which model a `config.json` describes, to dispatch on;
//! - [`PairTokenizer`]: (query, document) tokenization as sentence-transformers does it;
//! - [`plan_batches`]: length batching under a token budget;
//! - [`SequenceClassifier`]: BERT and XLM-RoBERTa sequence classification on a packed
//!   (padding-free) encoder forward pass with its own CPU kernels (`encoder`, `kernels`).

mod batch;
mod classifier;
mod config;
mod dir;
pub(crate) mod encoder;
#[cfg(feature = "hf-hub")]
mod hub;
pub(crate) mod kernels;
mod pair;

pub use batch::{plan_batches, Batch};
pub use classifier::SequenceClassifier;
pub use config::{Activation, Architecture, ClassifierConfig};
pub use dir::{ModelDir, CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE};
#[cfg(feature = "hf-hub")]
pub use hub::HubModel;
pub use pair::{PairEncoding, PairTokenizer};

/// The message of a candle error without the backtrace candle attaches when `RUST_BACKTRACE`
/// is set.
pub fn candle_message(e: &candle_core::Error) -> String {
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
