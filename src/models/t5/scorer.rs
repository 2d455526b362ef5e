//! A T5 encoder-decoder read as a yes/no scorer (monoT5): the logits of two answer tokens at
//! the decoder's first step, for packed batches of prompts.

use super::config::T5Config;
use super::decoder::T5Decoder;
use super::encoder::T5Encoder;
use crate::models::layers::batch::plan_packed_batches;
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::check_f32_or_int8;
use crate::models::layers::weights::Weights;
use crate::models::{packed_starts, ModelDir, Precision};
use crate::simd::dot::dot_f32;
use crate::Result;

/// The output head's name when it is not tied to the embeddings (T5 v1.1, mT5).
const LM_HEAD: &str = "lm_head.weight";

/// The logits of the two answer tokens after the decoder's start token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AnswerLogits {
    /// The logit of the "relevant" token (`▁true`, `▁yes`).
    pub yes: f32,
    /// The logit of the "not relevant" token (`▁false`, `▁no`).
    pub no: f32,
}

/// A `T5ForConditionalGeneration` checkpoint's encoder, the first step of its decoder and the
/// output head's rows of two tokens.
#[derive(Debug)]
pub(crate) struct T5Scorer {
    encoder: T5Encoder,
    decoder: T5Decoder,
    /// The output head's rows of the yes and the no token, `(2, d_model)`.
    head: Vec<f32>,
}

impl T5Scorer {
    /// Loads `dir` (checked against `cfg`) in `precision` (f32 or int8) with the output
    /// head's rows of `[yes, no]`: `lm_head.weight` when the checkpoint has one, else the
    /// shared embedding (T5 v1.0 ties them). A token id outside the head is an error.
    pub fn load(
        dir: &ModelDir,
        cfg: T5Config,
        [yes, no]: [u32; 2],
        precision: Precision,
    ) -> Result<Self> {
        check_f32_or_int8(precision, "T5 reranker")?;
        // The encoder first: its sizes are checked against the header before the decoder's.
        let encoder = T5Encoder::from_weights(Weights::open(dir.path())?, dir, cfg, precision)?;
        let (weights, cfg) = (encoder.weights(), encoder.config());
        let embeddings = encoder.embeddings_name();
        let head_name = if weights.has(LM_HEAD) {
            LM_HEAD
        } else {
            embeddings
        };
        weights.check_config_size("d_model", cfg.hidden, head_name, 1)?;
        let head = weights.rows(head_name, cfg.hidden, &[yes, no])?;
        let decoder = T5Decoder::load(weights, cfg, embeddings, precision)?;
        Ok(T5Scorer {
            encoder,
            decoder,
            head,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &T5Config {
        self.encoder.config()
    }

    /// The answer logits of each prompt, in one packed pass.
    pub fn logits(&self, prompts: &[&[u32]]) -> Result<Vec<AnswerLogits>> {
        let enc = self.encoder.forward(prompts, Output::AllTokens)?;
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        let lens: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
        let starts = packed_starts(&lens);
        let states = self.decoder.first_step(&enc, &lens, &starts);
        let h = self.config().hidden;
        let (yes, no) = self.head.split_at(h);
        Ok(states
            .chunks_exact(h)
            .map(|s| AnswerLogits {
                yes: dot_f32(s, yes),
                no: dot_f32(s, no),
            })
            .collect())
    }

    /// The answer logits of every prompt, in input order, run in packed passes of at most
    /// `token_budget` tokens and `max_batch_size` prompts (longest first).
    pub fn logits_in_batches(
        &self,
        prompts: &[Vec<u32>],
        token_budget: usize,
        max_batch_size: usize,
    ) -> Result<Vec<AnswerLogits>> {
        let lens: Vec<usize> = prompts.iter().map(Vec::len).collect();
        let mut out = vec![AnswerLogits { yes: 0.0, no: 0.0 }; prompts.len()];
        for batch in plan_packed_batches(&lens, token_budget, max_batch_size) {
            let rows: Vec<&[u32]> = batch.indices.iter().map(|&i| &prompts[i][..]).collect();
            for (&i, logits) in batch.indices.iter().zip(self.logits(&rows)?) {
                out[i] = logits;
            }
        }
        Ok(out)
    }
}
