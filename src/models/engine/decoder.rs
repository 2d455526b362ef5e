//! The decoder engine: a Qwen3 / Qwen2 decoder on the crate's kernels, or through candle on a
//! device (feature `candle`); what the yes/no scorers and the Qwen3 embedder run.

use std::path::Path;

use crate::models::layers::batch::BatchSink;
use crate::models::layers::weights::Weights;
use crate::models::qwen3::config::Qwen3Config;
use crate::models::qwen3::forward::Qwen3Model;
use crate::models::qwen3::layers::{check_score_head, head_name, Decoder, MatrixFormat};
use crate::models::{Device, Precision};
use crate::{Error, Result};

/// The decoder a scorer or an embedder runs: the crate's own kernels, or candle on a device
/// (feature `candle`). `Send + Sync`.
#[derive(Debug)]
pub(crate) enum DecoderEngine {
    Native(Qwen3Model),
    #[cfg(feature = "candle")]
    Candle(crate::models::qwen3::candle::CandleDecoder),
}

impl DecoderEngine {
    /// Loads the decoder in `dir` for prompts of at most `max_positions` tokens on `device` in
    /// `precision`. `with_head`: the checkpoint must have an output head (a scorer's), checked
    /// before the layers load. On the CPU the layers load in parallel on the current rayon
    /// pool.
    pub fn load(
        dir: &Path,
        cfg: Qwen3Config,
        max_positions: usize,
        precision: Precision,
        device: Device,
        with_head: bool,
    ) -> Result<Self> {
        let weights = Weights::open(dir)?;
        if with_head && cfg.sequence_classifier {
            check_score_head(&weights, &cfg)?;
        } else if with_head {
            head_name(&weights, &cfg)?;
        }
        if device.uses_candle() {
            #[cfg(feature = "candle")]
            return crate::models::qwen3::candle::CandleDecoder::load(
                weights,
                cfg,
                max_positions,
                device,
                precision,
            )
            .map(DecoderEngine::Candle);
            #[cfg(not(feature = "candle"))]
            return Err(device.unavailable());
        }
        let format = match precision {
            Precision::F32 => MatrixFormat::F32,
            Precision::Bf16 => MatrixFormat::Bf16,
            Precision::Int8 => MatrixFormat::Int8,
            Precision::F16 => {
                return Err(Error::Config(
                    "precision f16 runs through candle only (a device other than cpu)".into(),
                ))
            }
        };
        let decoder = Decoder::from_weights(weights, cfg, format)?;
        Ok(DecoderEngine::Native(Qwen3Model::new(
            decoder,
            max_positions,
        )))
    }

    /// The configuration.
    pub fn config(&self) -> &Qwen3Config {
        match self {
            DecoderEngine::Native(m) => m.config(),
            #[cfg(feature = "candle")]
            DecoderEngine::Candle(m) => m.config(),
        }
    }

    /// Rows of the input embedding (the largest token id plus one that the weights accept).
    pub fn vocab_rows(&self) -> usize {
        match self {
            DecoderEngine::Native(m) => m.vocab_rows(),
            #[cfg(feature = "candle")]
            DecoderEngine::Candle(m) => m.vocab_rows(),
        }
    }

    /// The most positions a prompt may have.
    pub fn max_positions(&self) -> usize {
        match self {
            DecoderEngine::Native(m) => m.max_positions(),
            #[cfg(feature = "candle")]
            DecoderEngine::Candle(m) => m.max_positions(),
        }
    }

    /// The final-normed hidden state of each prompt's last token, `(prompts, hidden)`, all
    /// prompts in one forward pass (packed on the CPU, padded on a device).
    pub fn last_rows(&self, prompts: &[&[u32]]) -> Result<Vec<f32>> {
        match self {
            DecoderEngine::Native(m) => m.last_rows(prompts, None),
            #[cfg(feature = "candle")]
            DecoderEngine::Candle(m) => m.last_rows(prompts),
        }
    }

    /// [`last_rows`](Self::last_rows) of every batch of `batches`, `sink(n, rows)` called with
    /// batch `n`'s rows, batches in order; the first error stops the run. The crate's kernels
    /// run one batch after the other; the candle engine prepares the next batch and starts it
    /// on the device before it hands a batch to `sink`.
    pub fn last_rows_batches(&self, batches: &[Vec<&[u32]>], sink: BatchSink<'_>) -> Result<()> {
        match self {
            DecoderEngine::Native(m) => {
                for (n, prompts) in batches.iter().enumerate() {
                    sink(n, m.last_rows(prompts, None)?)?;
                }
                Ok(())
            }
            #[cfg(feature = "candle")]
            DecoderEngine::Candle(m) => m.last_rows_batches(batches, sink),
        }
    }
}
