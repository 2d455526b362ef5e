//! Yes/no scoring: the packed forward pass (`forward`) and one head vector. The Qwen3 reranker
//! reads the logits of "yes" and "no", mxbai-rerank-v2 (a Qwen2 decoder) those of "1" and "0".
//!
//! The output head is reduced to the single vector `W[yes] - W[no]`, so the result per prompt
//! is `l_yes - l_no` at its last token, and the rest of the head is never read. A checkpoint
//! converted to sequence classification (`Qwen3ForSequenceClassification`, as
//! `tomaarsen/Qwen3-Reranker-0.6B-seq-cls` and vLLM's `convert_model_to_seq_cls.py` make them)
//! stores that vector already, as the one row of `score.weight`; transformers reads its logit
//! at the last token that is not padding, which is the last token of each packed prompt here.

use super::config::Qwen3Config;
use super::layers::{check_score_head, head_name, SCORE};
use crate::models::engine::DecoderEngine;
use crate::models::plan_packed_batches;
use crate::{Error, Result};

/// A Qwen3 causal LM reduced to what yes/no scoring needs. `Send + Sync`; scoring takes `&self`.
#[derive(Debug)]
pub(crate) struct Qwen3Scorer {
    model: DecoderEngine,
    /// `W[yes] - W[no]` of the output head, `(hidden)`.
    head: Vec<f32>,
}

impl Qwen3Scorer {
    /// The scorer over `model`, keeping only the `yes - no` row difference of its output head
    /// (read from the mapped checkpoint; an id outside the head is an error). For a sequence
    /// classifier ([`Qwen3Config::sequence_classifier`]) the head is `score.weight`, which
    /// must have one row (the converted reranker's `W[yes] - W[no]`); `yes` and `no` are not
    /// read.
    pub fn new(model: DecoderEngine, yes: u32, no: u32) -> Result<Self> {
        let h = model.config().hidden_size;
        let weights = match &model {
            DecoderEngine::Native(m) => m.decoder.embed.weights(),
            #[cfg(feature = "candle")]
            DecoderEngine::Candle(m) => m.weights(),
        };
        if model.config().sequence_classifier {
            check_score_head(weights, model.config())?;
            let head = weights.f32(SCORE, &[1, h])?;
            return Ok(Qwen3Scorer { model, head });
        }
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
        let plan = plan_packed_batches(&lengths, token_budget, max_batch_size);
        let batches: Vec<Vec<&[u32]>> = plan
            .iter()
            .map(|b| b.indices.iter().map(|&i| prompts[i].as_slice()).collect())
            .collect();
        let h = self.config().hidden_size;
        let mut out = vec![None; prompts.len()];
        self.model.last_rows_batches(&batches, &mut |n, rows| {
            let indices = &plan[n].indices;
            if rows.len() != indices.len() * h {
                return Err(Error::model(format!(
                    "the decoder returned {} values for {} prompts of width {h}",
                    rows.len(),
                    indices.len()
                )));
            }
            for (&i, row) in indices.iter().zip(rows.chunks_exact(h.max(1))) {
                out[i] = Some(crate::simd::dot::dot_f32(row, &self.head));
            }
            Ok(())
        })?;
        out.into_iter()
            .map(|l| l.ok_or_else(|| Error::model("a prompt was left unscored")))
            .collect()
    }
}
