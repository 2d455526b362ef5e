//! Yes/no scoring: the packed forward pass (`forward`) and one head vector. The Qwen3 reranker
//! reads the logits of "yes" and "no", mxbai-rerank-v2 (a Qwen2 decoder) those of "1" and "0".
//!
//! The output head is reduced to the single vector `W[yes] - W[no]`, so the result per prompt
//! is `l_yes - l_no` at its last token, and the rest of the head is never read.

use std::path::Path;

use super::config::Qwen3Config;
use super::forward::Qwen3Model;
use super::layers::{head_name, Decoder, MatrixFormat};
use crate::models::layers::weights::Weights;
use crate::models::{plan_packed_batches, Device, Precision};
use crate::{Error, Result};

/// The decoder a scorer or an embedder runs: the crate's own kernels, or candle on a device
/// (feature `candle`). `Send + Sync`.
#[derive(Debug)]
pub(crate) enum DecoderEngine {
    Native(Qwen3Model),
    #[cfg(feature = "candle")]
    Candle(super::candle::CandleDecoder),
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
        if with_head {
            head_name(&weights, &cfg)?;
        }
        if device.uses_candle() {
            #[cfg(feature = "candle")]
            return super::candle::CandleDecoder::load(
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
}

/// A Qwen3 causal LM reduced to what yes/no scoring needs. `Send + Sync`; scoring takes `&self`.
#[derive(Debug)]
pub(crate) struct Qwen3Scorer {
    model: DecoderEngine,
    /// `W[yes] - W[no]` of the output head, `(hidden)`.
    head: Vec<f32>,
}

impl Qwen3Scorer {
    /// The scorer over `model`, keeping only the `yes - no` row difference of its output head
    /// (read from the mapped checkpoint; an id outside the head is an error).
    pub fn new(model: DecoderEngine, yes: u32, no: u32) -> Result<Self> {
        let h = model.config().hidden_size;
        let weights = match &model {
            DecoderEngine::Native(m) => m.decoder.embed.weights(),
            #[cfg(feature = "candle")]
            DecoderEngine::Candle(m) => m.weights(),
        };
        let rows = weights.rows(head_name(weights, model.config())?, h, &[yes, no])?;
        let head: Vec<f32> = rows[..h]
            .iter()
            .zip(&rows[h..])
            .map(|(y, n)| y - n)
            .collect();
        Ok(Qwen3Scorer { model, head })
    }

    /// The configuration.
    pub fn config(&self) -> &Qwen3Config {
        self.model.config()
    }

    /// Rows of the input embedding (the largest token id plus one that the weights accept).
    pub fn vocab_rows(&self) -> usize {
        self.model.vocab_rows()
    }

    /// The most positions a prompt may have.
    pub fn max_positions(&self) -> usize {
        self.model.max_positions()
    }

    /// `l_yes - l_no` at the last token of each prompt, all prompts in one packed forward pass.
    pub fn logits(&self, prompts: &[&[u32]]) -> Result<Vec<f32>> {
        let h = self.config().hidden_size;
        let rows = self.model.last_rows(prompts)?;
        Ok(rows
            .chunks_exact(h)
            .map(|row| crate::simd::dot::dot_f32(row, &self.head))
            .collect())
    }

    /// [`logits`](Self::logits) for any number of prompts: sorted by length and packed into
    /// forward passes of at most `token_budget` real tokens and `max_batch_size` prompts (a
    /// longer prompt goes alone; `models::plan_packed_batches`); the results in input order.
    pub fn logits_in_batches(
        &self,
        prompts: &[Vec<u32>],
        token_budget: usize,
        max_batch_size: usize,
    ) -> Result<Vec<f32>> {
        let lengths: Vec<usize> = prompts.iter().map(Vec::len).collect();
        let mut out = vec![None; prompts.len()];
        for batch in plan_packed_batches(&lengths, token_budget, max_batch_size) {
            let refs: Vec<&[u32]> = batch
                .indices
                .iter()
                .map(|&i| prompts[i].as_slice())
                .collect();
            let logits = self.logits(&refs)?;
            for (&i, logit) in batch.indices.iter().zip(logits) {
                out[i] = Some(logit);
            }
        }
        out.into_iter()
            .map(|l| l.ok_or_else(|| Error::model("a prompt was left unscored")))
            .collect()
    }
}
