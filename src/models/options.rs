//! [`ModelOptions`]: the options every model builder takes, with one name each.

use serde::{Deserialize, Serialize};

use super::Device;
use crate::text::passages::Passages;
use crate::{Error, Precision, Result};

/// Options shared by every model builder ([`CrossEncoder`](crate::CrossEncoder),
/// [`BertEmbedder`](crate::BertEmbedder), [`Qwen3Reranker`](crate::Qwen3Reranker),
/// [`LocalChat`](crate::answer::LocalChat)): one name
/// per option whatever the model. `None` means the model's own default, which each builder
/// documents.
///
/// ```no_run
/// use rerank::models::ModelOptions;
/// use rerank::CrossEncoder;
///
/// let options = ModelOptions::default().threads(2).max_length(256);
/// let model = CrossEncoder::builder("models/ms-marco-MiniLM-L-6-v2").options(options).build()?;
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelOptions {
    /// Longest input in tokens, special tokens included: a (query, document) pair for a
    /// cross-encoder, a text for an embedder, a whole prompt for Qwen3-Reranker. Longer inputs
    /// are truncated the way the reference implementation truncates them.
    pub max_length: Option<usize>,
    /// Largest number of tokens in one forward pass (batches are packed: no padding is
    /// computed). An input longer than the budget still runs, alone.
    pub token_budget: Option<usize>,
    /// Largest number of inputs in one forward pass.
    pub max_batch_size: Option<usize>,
    /// Runs the model on a private pool of this many threads (default: the caller's rayon pool).
    pub threads: Option<usize>,
    /// The number format (default [`Precision::F32`]).
    pub precision: Precision,
    /// Rerankers only: score a document longer than the room beside the query by
    /// overlapping windows and keep the best (default: off, the document is truncated). See
    /// [`Passages`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passages: Option<Passages>,
    /// Where the model runs (default [`Device::Cpu`]: the crate's own kernels). Any other
    /// device runs the same model through candle (feature `candle`, and `cuda` or `metal` for
    /// a GPU); see `docs/devices.md` for what each engine supports.
    #[serde(skip_serializing_if = "Device::is_cpu")]
    pub device: Device,
}

impl ModelOptions {
    /// Sets [`ModelOptions::max_length`].
    pub fn max_length(mut self, tokens: usize) -> Self {
        self.max_length = Some(tokens);
        self
    }

    /// Sets [`ModelOptions::token_budget`].
    pub fn token_budget(mut self, tokens: usize) -> Self {
        self.token_budget = Some(tokens);
        self
    }

    /// Sets [`ModelOptions::max_batch_size`].
    pub fn max_batch_size(mut self, inputs: usize) -> Self {
        self.max_batch_size = Some(inputs);
        self
    }

    /// Sets [`ModelOptions::threads`].
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }

    /// Sets [`ModelOptions::precision`].
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// Sets [`ModelOptions::device`].
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Sets [`ModelOptions::passages`].
    pub fn passages(mut self, passages: Passages) -> Self {
        self.passages = Some(passages);
        self
    }

    /// Checks the values for `model` (named in the message): every count at least 1, and
    /// `max_length` at least `min_length` (the special tokens the model adds).
    pub(crate) fn validate(&self, model: &str, min_length: usize) -> Result<()> {
        let positive = [
            ("token_budget", self.token_budget),
            ("max_batch_size", self.max_batch_size),
            ("threads", self.threads),
        ];
        for (name, value) in positive {
            if value == Some(0) {
                return Err(Error::Config(format!("{model}: {name} must be at least 1")));
            }
        }
        if let Some(n) = self.threads {
            check_threads(model, n)?;
        }
        self.device
            .check_available()
            .map_err(|e| Error::Config(format!("{model}: {}", config_message(e))))?;
        if self.device.uses_candle() && self.precision == Precision::Int8 {
            return Err(Error::Config(format!(
                "{model}: precision int8 runs on the crate's own CPU kernels only (device cpu); \
                 on device {} use f32, f16 or bf16",
                self.device
            )));
        }
        if !self.device.uses_candle() && self.precision == Precision::F16 {
            return Err(Error::Config(format!(
                "{model}: precision f16 runs through candle only (a device other than cpu, \
                 such as candle-cpu or cuda)"
            )));
        }
        if let Some(p) = &self.passages {
            p.validate()
                .map_err(|e| Error::Config(format!("{model}: {}", config_message(e))))?;
        }
        if let Some(n) = self.max_length.filter(|&n| n > MAX_LENGTH) {
            return Err(Error::Config(format!(
                "{model}: max_length {n} is more than the {MAX_LENGTH} tokens a model is loaded \
                 for"
            )));
        }
        if let Some(n) = self.max_length.filter(|&n| n < min_length) {
            return Err(Error::Config(format!(
                "{model}: max_length {n} is too short; it must be at least {min_length} \
                 (the special tokens the model adds)"
            )));
        }
        Ok(())
    }

    /// The private thread pool asked for by [`ModelOptions::threads`] (its threads named
    /// `rerank-{name}-{i}`), or the caller's pool when none is asked for.
    pub(crate) fn thread_pool(&self, name: &str) -> Result<ModelPool> {
        let Some(n) = self.threads else {
            return Ok(ModelPool(None));
        };
        check_threads(name, n)?;
        let name = name.to_string();
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(move |i| format!("rerank-{name}-{i}"))
            .build()
            .map(|pool| ModelPool(Some(pool)))
            .map_err(|e| Error::Config(format!("cannot start {n} threads: {e}")))
    }
}

/// The message of a configuration error, without its "invalid configuration: " prefix.
fn config_message(e: Error) -> String {
    match e {
        Error::Config(m) => m,
        other => other.to_string(),
    }
}

/// The longest `max_length` a model accepts (2^20 tokens): positional tables and caches are
/// sized by it, so a larger value is an [`Error::Config`], never an allocation of that size.
pub const MAX_LENGTH: usize = 1 << 20;

/// The most threads a private model pool may have: four times the available parallelism, and
/// never more than 1,024. More threads than that only cost time to start (`threads: 100000`
/// spent minutes spawning them); [`ModelOptions`] refuses them with an [`Error::Config`].
pub fn max_threads() -> usize {
    available_cores().saturating_mul(4).min(1024)
}

fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// An [`Error::Config`] naming `owner` when `threads` is above [`max_threads`].
pub(crate) fn check_threads(owner: &str, threads: usize) -> Result<()> {
    let max = max_threads();
    if threads > max {
        return Err(Error::Config(format!(
            "{owner}: threads {threads} is more than {max} (four times the {} available \
             cores, at most 1024)",
            available_cores()
        )));
    }
    Ok(())
}

/// Where a model runs its work: a private rayon pool of [`ModelOptions::threads`] threads, or
/// the caller's pool (the global one by default). Every model holds one.
pub(crate) struct ModelPool(Option<rayon::ThreadPool>);

impl ModelPool {
    /// Runs `f` in the private pool, or on the calling thread's pool.
    pub(crate) fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.0 {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }

    /// The private pool's size; `None` on the caller's pool.
    pub(crate) fn threads(&self) -> Option<usize> {
        self.0.as_ref().map(rayon::ThreadPool::current_num_threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_counts_and_short_lengths_are_refused() {
        assert!(ModelOptions::default().validate("m", 2).is_ok());
        for bad in [
            ModelOptions::default().threads(0),
            ModelOptions::default().token_budget(0),
            ModelOptions::default().max_batch_size(0),
            ModelOptions::default().max_length(1),
            ModelOptions::default().max_length(MAX_LENGTH + 1),
            ModelOptions::default().threads(max_threads() + 1),
            ModelOptions::default().threads(100_000),
        ] {
            let e = bad.validate("m", 2).unwrap_err().to_string();
            assert!(e.starts_with("invalid configuration: m: "), "{e}");
        }
    }

    #[test]
    fn thread_counts_are_bounded_before_a_pool_starts() {
        assert!(max_threads() >= 4 && max_threads() <= 1024);
        assert!(ModelOptions::default()
            .threads(max_threads())
            .validate("m", 2)
            .is_ok());
        let e = ModelOptions::default()
            .threads(100_000)
            .thread_pool("m")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("threads 100000 is more than"), "{e}");
    }

    #[test]
    fn round_trips_through_serde_and_refuses_unknown_keys() {
        let o = ModelOptions::default().threads(2).max_length(256);
        let json = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<ModelOptions>(&json).unwrap(), o);
        assert!(serde_json::from_str::<ModelOptions>(r#"{"batch_size": 3}"#).is_err());
    }
}
