//! [`ModelOptions`]: the options every model builder takes, with one name each.

use serde::{Deserialize, Serialize};

use super::Device;
use crate::rerankers::Passages;
use crate::{Error, Result};

/// The number format a model computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Precision {
    /// 32-bit floats, the reference models' own format (the default; exact to the fixtures).
    #[default]
    F32,
    /// 8-bit integer linear layers, for the BERT-family encoders ([`CrossEncoder`],
    /// [`BertEmbedder`]) and the Qwen3 reranker ([`Qwen3Reranker`]): weights quantized per
    /// output channel at load, activations per row at every call, integer dot products on the
    /// best instructions the CPU has (AVX-512 VNNI, AVX-VNNI, AVX2; plain integer code
    /// elsewhere); norms, softmax, activations, attention and the embeddings stay in f32.
    /// Faster, and close to f32 rather than equal to it (see `docs/encoder.md` and
    /// `docs/benchmarks.md` for the measured agreement). Qwen3 generation refuses it at
    /// `build()`.
    ///
    /// [`CrossEncoder`]: crate::CrossEncoder
    /// [`BertEmbedder`]: crate::BertEmbedder
    /// [`Qwen3Reranker`]: crate::rerankers::qwen3::Qwen3Reranker
    Int8,
    /// `bfloat16` linear layers for Qwen3, scoring ([`Qwen3Reranker`]) and generation
    /// ([`Qwen3Chat`]): every matrix of the decoder rounded to bf16 at load (half the memory,
    /// and half the bytes a decode step streams), and every product of a decoder matrix
    /// rounding its inputs to bf16 and summing in f32, as PyTorch's bf16 matrix multiply does.
    /// On CPUs with AVX-512 bf16 (`vdpbf16ps`: AMD Zen 4, Intel Cooper Lake and Sapphire
    /// Rapids) that runs at about twice the f32 rate; elsewhere at the f32 rate. Norms,
    /// softmax, attention, the residual stream, the KV cache and the output head's inputs stay
    /// in f32 (generation's output head is bf16 too). Close to f32 rather than equal
    /// (`docs/benchmarks.md` gives the agreement). The encoders refuse it at `build()`.
    ///
    /// [`Qwen3Reranker`]: crate::rerankers::qwen3::Qwen3Reranker
    /// [`Qwen3Chat`]: crate::answer::Qwen3Chat
    Bf16,
    /// `float16` weights and activations, on a device through candle only
    /// ([`ModelOptions::device`] other than `cpu`): what GPUs run fastest. The crate's own CPU
    /// kernels refuse it at `build()`.
    F16,
}

impl Precision {
    /// Its name as the CLI and configs spell it (`f32`, `int8`).
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Int8 => "int8",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Precision::F32),
            "int8" | "i8" => Ok(Precision::Int8),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            "f16" | "float16" | "half" => Ok(Precision::F16),
            other => Err(Error::Config(format!(
                "unknown precision {other:?} (expected f32, int8, bf16 or f16)"
            ))),
        }
    }
}

/// Options shared by every model builder ([`CrossEncoder`](crate::CrossEncoder),
/// [`BertEmbedder`](crate::BertEmbedder), [`Qwen3Reranker`](crate::Qwen3Reranker),
/// [`Qwen3Chat`](crate::answer::Qwen3Chat)): one name
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
