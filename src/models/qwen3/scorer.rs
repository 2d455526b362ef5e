//! Yes/no scoring: the packed forward pass (`forward`) and one head vector.
//!
//! The output head is reduced to the single vector `W[yes] - W[no]`, so the result per prompt
//! is `l_yes - l_no` at its last token, and the rest of the head is never read.

use std::path::Path;

use super::config::Qwen3Config;
use super::forward::Qwen3Model;
use super::layers::{head_name, Decoder, MatrixFormat};
use crate::models::weights::Weights;
use crate::Result;

/// A Qwen3 causal LM reduced to what yes/no scoring needs. `Send + Sync`; scoring takes `&self`.
#[derive(Debug)]
pub(crate) struct Qwen3Scorer {
    model: Qwen3Model,
    /// `W[yes] - W[no]` of the output head, `(hidden)`.
    head: Vec<f32>,
}

impl Qwen3Scorer {
    /// Loads the decoder in `dir` for prompts of at most `max_positions` tokens, its matrices
    /// in `format` (f32, bf16 or int8): what [`Qwen3Scorer::new`] takes, once the caller's
    /// tokenizer (which may load meanwhile) has given the `yes` and `no` ids. Layers load in
    /// parallel on the current rayon pool; a checkpoint without an output head fails before
    /// they do.
    pub fn load_model(
        dir: &Path,
        cfg: Qwen3Config,
        max_positions: usize,
        format: MatrixFormat,
    ) -> Result<Qwen3Model> {
        let weights = Weights::open(dir)?;
        head_name(&weights, &cfg)?;
        let decoder = Decoder::from_weights(weights, cfg, format)?;
        Ok(Qwen3Model::new(decoder, max_positions))
    }

    /// [`load_model`](Self::load_model) for a checkpoint that needs no output head (an
    /// embedding model's, saved from the bare decoder).
    pub fn load_model_without_head(
        dir: &Path,
        cfg: Qwen3Config,
        max_positions: usize,
        format: MatrixFormat,
    ) -> Result<Qwen3Model> {
        let decoder = Decoder::from_weights(Weights::open(dir)?, cfg, format)?;
        Ok(Qwen3Model::new(decoder, max_positions))
    }

    /// The scorer over `model`, keeping only the `yes - no` row difference of its output head
    /// (read from the mapped checkpoint; an id outside the head is an error).
    pub fn new(model: Qwen3Model, yes: u32, no: u32) -> Result<Self> {
        let h = model.config().hidden_size;
        let weights = model.decoder.embed.weights();
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
        let rows = self.model.last_rows(prompts, None)?;
        Ok(rows
            .chunks_exact(h)
            .map(|row| crate::simd::dot::dot_f32(row, &self.head))
            .collect())
    }
}
