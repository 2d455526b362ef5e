//! The first step of a T5 decoder (what a monoT5 reranker reads: the logits of one answer
//! token after the decoder's start token) over a packed batch of encoder outputs.
//!
//! Every sequence's decoder input is the same start token (`decoder_start_token_id`), so the
//! step is one row per sequence. Per block, pre-norm with T5's RMSNorm:
//! - self-attention over the one position there is: its softmax is 1 whatever the scores and
//!   the relative bias, so it is the value projection, `x = x + O · V · norm(x)` (the query and
//!   key projections and the decoder's bias table change nothing and are not read);
//! - cross-attention over the sequence's encoder outputs, no position bias, scores not scaled:
//!   `x = x + O · softmax(Q · norm(x) · Kᵀ) V` with `K`, `V` the block's projections of the
//!   encoder's final states;
//! - the feed-forward block as the encoder's.
//!
//! Then the final norm, times `d_model^-1/2` when the config says so (T5 v1.0's tied output
//! head), and the output head's rows of the tokens asked for.

use std::cell::RefCell;

use rayon::prelude::*;

use super::config::T5Config;
use super::encoder::{linear, norm, Mlp};
use crate::models::layers::dense::Dense;
use crate::models::layers::kernels::{softmax_rows, with_scratch, Then};
use crate::models::layers::quant::QuantRows;
use crate::models::layers::rms::rms_norm_rows;
use crate::models::layers::weights::Weights;
use crate::models::Precision;
use crate::Result;

/// One decoder block (the parts the first step reads).
#[derive(Debug)]
struct Block {
    self_norm: Vec<f32>,
    self_v: Dense,
    self_o: Dense,
    cross_norm: Vec<f32>,
    cross_q: Dense,
    /// `[k | v]` of the encoder's states: `2 * inner` outputs.
    cross_kv: Dense,
    cross_o: Dense,
    ff_norm: Vec<f32>,
    mlp: Mlp,
}

/// A T5 decoder's weights for its first step.
#[derive(Debug)]
pub(crate) struct T5Decoder {
    hidden: usize,
    heads: usize,
    head_dim: usize,
    eps: f32,
    /// `d_model^-1/2` when the output is scaled.
    output_scale: Option<f32>,
    /// The start token's embedding.
    start: Vec<f32>,
    blocks: Vec<Block>,
    final_norm: Vec<f32>,
}

/// Checks the decoder's sizes from `config.json` against the safetensors header.
fn check_config(w: &Weights, cfg: &T5Config) -> Result<()> {
    let last = format!(
        "decoder.block.{}.layer.1.EncDecAttention.q.weight",
        cfg.decoder_layers - 1
    );
    w.check_config_tensor("num_decoder_layers", cfg.decoder_layers, &last)?;
    let q = "decoder.block.0.layer.1.EncDecAttention.q.weight";
    w.check_config_size("num_heads * d_kv", cfg.inner(), q, 0)?;
    w.check_config_size("d_model", cfg.hidden, q, 1)?;
    let wo = "decoder.block.0.layer.2.DenseReluDense.wo.weight";
    w.check_config_size("d_ff", cfg.intermediate, wo, 1)
}

impl T5Decoder {
    /// Loads the decoder's blocks from `w` (`decoder.block.N.*`,
    /// `decoder.final_layer_norm.weight`) and the start token's row of `embeddings`, checked
    /// against `cfg` first.
    pub fn load(
        w: &Weights,
        cfg: &T5Config,
        embeddings: &str,
        precision: Precision,
    ) -> Result<Self> {
        check_config(w, cfg)?;
        let (h, inner) = (cfg.hidden, cfg.inner());
        let blocks = (0..cfg.decoder_layers)
            .map(|n| {
                let b = format!("decoder.block.{n}");
                let sa = |p: &str| format!("{b}.layer.0.SelfAttention.{p}");
                let ca = |p: &str| format!("{b}.layer.1.EncDecAttention.{p}");
                let (k, v) = (ca("k"), ca("v"));
                Ok(Block {
                    self_norm: norm(w, &format!("{b}.layer.0.layer_norm"), h)?,
                    self_v: linear(w, &[(&sa("v"), inner)], h, precision)?,
                    self_o: linear(w, &[(&sa("o"), h)], inner, precision)?,
                    cross_norm: norm(w, &format!("{b}.layer.1.layer_norm"), h)?,
                    cross_q: linear(w, &[(&ca("q"), inner)], h, precision)?,
                    cross_kv: linear(w, &[(&k, inner), (&v, inner)], h, precision)?,
                    cross_o: linear(w, &[(&ca("o"), h)], inner, precision)?,
                    ff_norm: norm(w, &format!("{b}.layer.2.layer_norm"), h)?,
                    mlp: Mlp::load(w, &format!("{b}.layer.2"), cfg, precision)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(T5Decoder {
            hidden: h,
            heads: cfg.heads,
            head_dim: cfg.head_dim,
            eps: cfg.eps,
            // transformers multiplies by the float64 `d_model ** -0.5` rounded to float32.
            output_scale: cfg
                .scale_decoder_outputs
                .then(|| (h as f64).powf(-0.5) as f32),
            start: w.rows(embeddings, h, &[cfg.decoder_start])?,
            blocks,
            final_norm: norm(w, "decoder.final_layer_norm", h)?,
        })
    }

    /// The decoder's last hidden state after its start token (final norm and output scaling
    /// applied), one `d_model` row per sequence, for the packed encoder states `enc` of
    /// sequences of `lens` tokens starting at rows `starts`.
    pub fn first_step(&self, enc: &[f32], lens: &[usize], starts: &[usize]) -> Vec<f32> {
        let (h, inner, eps) = (self.hidden, self.heads * self.head_dim, self.eps);
        let (rows, tokens) = (lens.len(), lens.iter().sum::<usize>());
        let n = rows * h;
        let mut x: Vec<f32> = self.start.repeat(rows);
        let mut normed = vec![0.0; n];
        let mut proj = vec![0.0; n];
        let mut small = vec![0.0; rows * inner];
        let mut ctx = vec![0.0; rows * inner];
        let mut kv = vec![0.0; tokens * 2 * inner];
        let mut quant = QuantRows::default();
        for b in &self.blocks {
            // Self-attention over the one position: its value.
            rms_norm_rows(&x, &mut normed, &b.self_norm, eps);
            b.self_v
                .forward(&normed, rows, &mut small, &mut quant, Then::Nothing);
            let then = Then::Add { residual: &x };
            b.self_o.forward(&small, rows, &mut proj, &mut quant, then);
            std::mem::swap(&mut x, &mut proj);
            // Cross-attention over the encoder's states.
            rms_norm_rows(&x, &mut normed, &b.cross_norm, eps);
            b.cross_q
                .forward(&normed, rows, &mut small, &mut quant, Then::Nothing);
            b.cross_kv
                .forward(enc, tokens, &mut kv, &mut quant, Then::Nothing);
            self.cross_attention(&small, &kv, &mut ctx, lens, starts);
            let then = Then::Add { residual: &x };
            b.cross_o.forward(&ctx, rows, &mut proj, &mut quant, then);
            std::mem::swap(&mut x, &mut proj);
            // Feed-forward.
            rms_norm_rows(&x, &mut normed, &b.ff_norm, eps);
            b.mlp.forward(&normed, rows, &x, &mut proj);
            std::mem::swap(&mut x, &mut proj);
        }
        rms_norm_rows(&x, &mut normed, &self.final_norm, eps);
        if let Some(factor) = self.output_scale {
            normed.par_iter_mut().for_each(|v| *v *= factor);
        }
        normed
    }

    /// Each sequence's query row of `q` (`(sequences, inner)`) over its keys and values in
    /// `kv` (`(tokens, 2 * inner)`, `[k | v]`), every head, into `ctx`: unscaled scores, a
    /// softmax over the sequence's tokens, the weighted sum of the values.
    fn cross_attention(
        &self,
        q: &[f32],
        kv: &[f32],
        ctx: &mut [f32],
        lens: &[usize],
        starts: &[usize],
    ) {
        let (heads, d) = (self.heads, self.head_dim);
        let inner = heads * d;
        ctx.par_chunks_mut(inner).enumerate().for_each(|(s, out)| {
            let (start, n) = (starts[s], lens[s]);
            let q = &q[s * inner..][..inner];
            with_scratch(&SCORES, |scores| {
                scores.resize(n, 0.0);
                for hd in 0..heads {
                    let qh = &q[hd * d..][..d];
                    for (j, score) in scores.iter_mut().enumerate() {
                        let k = &kv[(start + j) * 2 * inner + hd * d..][..d];
                        *score = qh.iter().zip(k).map(|(a, b)| a * b).sum();
                    }
                    softmax_rows(scores, n);
                    let o = &mut out[hd * d..][..d];
                    o.fill(0.0);
                    for (j, &p) in scores.iter().enumerate() {
                        let v = &kv[(start + j) * 2 * inner + inner + hd * d..][..d];
                        o.iter_mut().zip(v).for_each(|(o, v)| *o += p * v);
                    }
                }
            });
        });
    }
}

thread_local! {
    /// One sequence's cross-attention scores, reused across calls on this thread.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}
