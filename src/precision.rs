//! [`Precision`]: the number format a model computes in. Outside the `models` feature so that
//! a pipeline config can name it in any build (a build without models refuses the model, not
//! the key).

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The number format a model computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Precision {
    /// 32-bit floats, the reference models' own format (the default; exact to the fixtures).
    #[default]
    F32,
    /// 8-bit integer linear layers, for the models on the crate's own CPU kernels: the
    /// encoders (cross-encoders such as [`CrossEncoder`], embedders such as [`BertEmbedder`])
    /// and the Qwen3 / Qwen2 decoders when they score or embed ([`Qwen3Reranker`],
    /// mxbai-rerank-v2, Qwen3-Embedding). Weights quantized per output channel at load,
    /// activations per row at every call, integer dot products on the best instructions the
    /// CPU has (AVX-512 VNNI, AVX-VNNI, AVX2; plain integer code elsewhere); norms, softmax,
    /// activations, attention and the embeddings stay in f32.
    /// Faster, and close to f32 rather than equal to it (see `docs/encoder.md` and
    /// `docs/benchmarks.md` for the measured agreement). Qwen3 generation refuses it at
    /// `build()`.
    ///
    /// [`CrossEncoder`]: crate::CrossEncoder
    /// [`BertEmbedder`]: crate::BertEmbedder
    /// [`Qwen3Reranker`]: crate::rerankers::qwen3::Qwen3Reranker
    Int8,
    /// `bfloat16` linear layers for Qwen3, scoring ([`Qwen3Reranker`]) and generation
    /// ([`LocalChat`]): every matrix of the decoder rounded to bf16 at load (half the memory,
    /// and half the bytes a decode step streams), and every product of a decoder matrix
    /// rounding its inputs to bf16 and summing in f32, as PyTorch's bf16 matrix multiply does.
    /// On CPUs with AVX-512 bf16 (`vdpbf16ps`: AMD Zen 4, Intel Cooper Lake and Sapphire
    /// Rapids) that runs at about twice the f32 rate; elsewhere at the f32 rate. Norms,
    /// softmax, attention, the residual stream, the KV cache and the output head's inputs stay
    /// in f32 (generation's output head is bf16 too). Close to f32 rather than equal
    /// (`docs/benchmarks.md` gives the agreement). The encoders refuse it at `build()`.
    ///
    /// [`Qwen3Reranker`]: crate::rerankers::qwen3::Qwen3Reranker
    /// [`LocalChat`]: crate::answer::LocalChat
    Bf16,
    /// `float16` weights and activations, on a device through candle only
    /// ([`ModelOptions::device`] other than `cpu`): what GPUs run fastest. The crate's own
    /// CPU kernels refuse it at `build()`.
    ///
    /// [`ModelOptions::device`]: crate::models::ModelOptions::device
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
