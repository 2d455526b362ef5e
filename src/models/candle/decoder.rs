//! The Qwen3 / Qwen2 decoder on candle's operations, for what the scorers and the Qwen3
//! embedder need: the final-normed hidden state of each prompt's last token.
//!
//! Prompts run as one batch padded on the left, so that every prompt's last token is the
//! batch's last column: positions count from each prompt's first real token, and the mask
//! lets a token see the real tokens up to itself (causal) and never the padding. The same
//! layers as transformers' `Qwen3ForCausalLM` / `Qwen2ForCausalLM`: RMSNorm, q/k/v with biases
//! for Qwen2 and per-head q/k RMSNorms for Qwen3, RoPE (rotate-half), grouped-query attention
//! with softmax in f32, SwiGLU.

use candle_core::{DType, IndexOp, Module, Tensor};
use candle_nn::{Embedding, Linear, RmsNorm, VarBuilder};

use super::{candle_device, dtype, err, rope, rope_tables, to_host, var_builder, Padded};
use crate::models::qwen3::config::Qwen3Config;
use crate::models::qwen3::layers::{check_config, EMBED};
use crate::models::weights::Weights;
use crate::models::{Device, Precision};
use crate::{Error, Result};

struct Layer {
    input_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    post_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// A Qwen3 (or Qwen2) decoder without its output head, on a candle device. `Send + Sync`.
pub(crate) struct CandleDecoder {
    cfg: Qwen3Config,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    /// `cos` and `sin` of every position's angles, `(positions, head_dim)` (each half twice).
    cos: Tensor,
    sin: Tensor,
    device: candle_core::Device,
    dtype: DType,
    vocab_rows: usize,
    max_positions: usize,
}

impl std::fmt::Debug for CandleDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleDecoder")
            .field("device", &self.device)
            .field("dtype", &self.dtype)
            .field("layers", &self.layers.len())
            .finish_non_exhaustive()
    }
}

fn rms(vb: &VarBuilder, size: usize, eps: f64, name: &str) -> Result<RmsNorm> {
    candle_nn::rms_norm(size, eps, vb.pp(name)).map_err(err(name))
}

fn linear(
    vb: &VarBuilder,
    inputs: usize,
    outputs: usize,
    bias: bool,
    name: &str,
) -> Result<Linear> {
    candle_nn::linear_b(inputs, outputs, bias, vb.pp(name)).map_err(err(name))
}

impl CandleDecoder {
    /// Loads the decoder of `cfg` from `weights` (under `model.`, or bare as Qwen3-Embedding's;
    /// the sizes of `config.json` checked against the tensors as the CPU path checks them) for
    /// prompts of at most `max_positions` tokens, on `device` in `precision`.
    pub fn load(
        weights: Weights,
        cfg: Qwen3Config,
        max_positions: usize,
        device: Device,
        precision: Precision,
    ) -> Result<Self> {
        let weights = match !weights.has(EMBED) && weights.has(&EMBED["model.".len()..]) {
            true => weights.prefixed("model."),
            false => weights,
        };
        check_config(&weights, &cfg)?;
        let vocab_rows = weights.shape(EMBED)?[0];
        let dev = candle_device(device)?;
        let dt = dtype(precision)?;
        // The decoder's tensors only: the output head stays on the host (the scorers read
        // two of its rows).
        let vb = var_builder(&weights, dt, &dev, |n| {
            n.starts_with("model.").then(|| n.to_string())
        })?;
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        let (heads, kv, d) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let vb = vb.pp("model");
        let embed = candle_nn::embedding(vocab_rows, h, vb.pp("embed_tokens"))
            .map_err(err("model.embed_tokens"))?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("layers.{i}"));
            let a = l.pp("self_attn");
            let m = l.pp("mlp");
            let qk = cfg.qk_norm();
            layers.push(Layer {
                input_norm: rms(&l, h, eps, "input_layernorm")?,
                q: linear(&a, h, heads * d, cfg.qkv_bias(), "q_proj")?,
                k: linear(&a, h, kv * d, cfg.qkv_bias(), "k_proj")?,
                v: linear(&a, h, kv * d, cfg.qkv_bias(), "v_proj")?,
                o: linear(&a, heads * d, h, cfg.o_bias(), "o_proj")?,
                q_norm: qk.then(|| rms(&a, d, eps, "q_norm")).transpose()?,
                k_norm: qk.then(|| rms(&a, d, eps, "k_norm")).transpose()?,
                post_norm: rms(&l, h, eps, "post_attention_layernorm")?,
                gate: linear(&m, h, cfg.intermediate_size, false, "gate_proj")?,
                up: linear(&m, h, cfg.intermediate_size, false, "up_proj")?,
                down: linear(&m, cfg.intermediate_size, h, false, "down_proj")?,
            });
        }
        let norm = rms(&vb, h, eps, "norm")?;
        let (cos, sin) = rope_tables(d, cfg.rope_theta, max_positions, dt, &dev)?;
        Ok(CandleDecoder {
            cfg,
            embed,
            layers,
            norm,
            cos,
            sin,
            device: dev,
            dtype: dt,
            vocab_rows,
            max_positions,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Qwen3Config {
        &self.cfg
    }

    /// Rows of the input embedding.
    pub fn vocab_rows(&self) -> usize {
        self.vocab_rows
    }

    /// The most positions a prompt may have.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// The final-normed hidden state of each prompt's last token, `(prompts, hidden)` on the
    /// host, all prompts in one left-padded batch. Prompts are checked as the CPU path checks
    /// them (not empty, within the positions, ids inside the embeddings).
    pub fn last_rows(&self, prompts: &[&[u32]]) -> Result<Vec<f32>> {
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        for p in prompts {
            if p.is_empty() {
                return Err(Error::InvalidInput("an empty prompt cannot be run".into()));
            }
            if p.len() > self.max_positions {
                return Err(Error::InvalidInput(format!(
                    "a prompt of {} tokens is longer than max_length {}",
                    p.len(),
                    self.max_positions
                )));
            }
            if let Some(&id) = p.iter().find(|&&id| id as usize >= self.vocab_rows) {
                return Err(Error::model(format!(
                    "token id {id} is outside the embedding matrix ({} rows): the tokenizer \
                     does not belong to these weights",
                    self.vocab_rows
                )));
            }
        }
        let batch = Padded::new(prompts, 0, true, self.max_positions, &self.device)?;
        let out = self
            .forward(prompts, &batch)
            .map_err(err("the decoder's forward pass"))?;
        to_host(&out)
    }

    fn forward(&self, prompts: &[&[u32]], batch: &Padded) -> candle_core::Result<Tensor> {
        let (b, t) = (prompts.len(), batch.len);
        let (heads, kv, d) = (
            self.cfg.num_attention_heads,
            self.cfg.num_key_value_heads,
            self.cfg.head_dim,
        );
        // Positions from each prompt's first token (padding at 0), and the additive mask.
        let mut positions = Vec::with_capacity(b * t);
        let mut mask = vec![0f32; b * t * t];
        for (i, p) in prompts.iter().enumerate() {
            let pad = t - p.len();
            positions.extend((0..t).map(|j| j.saturating_sub(pad) as u32));
            for q in 0..t {
                let row = &mut mask[(i * t + q) * t..(i * t + q + 1) * t];
                for (k, m) in row.iter_mut().enumerate() {
                    // A padding row sees itself only (its output is never read).
                    let allowed = if q < pad { k == q } else { k >= pad && k <= q };
                    if !allowed {
                        *m = f32::NEG_INFINITY;
                    }
                }
            }
        }
        let positions = Tensor::from_vec(positions, b * t, &self.device)?;
        let cos = self
            .cos
            .index_select(&positions, 0)?
            .reshape((b, 1, t, d))?;
        let sin = self
            .sin
            .index_select(&positions, 0)?
            .reshape((b, 1, t, d))?;
        let mask = Tensor::from_vec(mask, (b, 1, t, t), &self.device)?;
        let scale = 1.0 / (d as f64).sqrt();

        let mut x = self.embed.forward(&batch.ids)?;
        for layer in &self.layers {
            let residual = x.clone();
            let y = layer.input_norm.forward(&x)?;
            let split = |proj: &Linear, n: usize, norm: Option<&RmsNorm>| {
                let z = proj.forward(&y)?.reshape((b, t, n, d))?;
                let z = match norm {
                    Some(norm) => norm.forward(&z)?,
                    None => z,
                };
                z.transpose(1, 2)?.contiguous()
            };
            let q = rope(&split(&layer.q, heads, layer.q_norm.as_ref())?, &cos, &sin)?;
            let k = rope(&split(&layer.k, kv, layer.k_norm.as_ref())?, &cos, &sin)?;
            let v = split(&layer.v, kv, None)?;
            let k = repeat_kv(&k, heads / kv)?;
            let v = repeat_kv(&v, heads / kv)?;
            let scores = (q.matmul(&k.t()?)? * scale)?
                .to_dtype(DType::F32)?
                .broadcast_add(&mask)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(self.dtype)?;
            let attn = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .reshape((b, t, heads * d))?;
            x = (residual + layer.o.forward(&attn)?)?;
            let residual = x.clone();
            let y = layer.post_norm.forward(&x)?;
            let mlp = (candle_nn::ops::silu(&layer.gate.forward(&y)?)? * layer.up.forward(&y)?)?;
            x = (residual + layer.down.forward(&mlp)?)?;
        }
        let last = x.i((.., t - 1, ..))?.contiguous()?;
        self.norm.forward(&last)
    }
}

/// Each key/value head repeated `n` times, to match the query heads.
fn repeat_kv(x: &Tensor, n: usize) -> candle_core::Result<Tensor> {
    if n == 1 {
        return Ok(x.clone());
    }
    let (b, kv, t, d) = x.dims4()?;
    x.unsqueeze(2)?
        .expand((b, kv, n, t, d))?
        .reshape((b, kv * n, t, d))
}
