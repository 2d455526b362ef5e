//! ModernBERT on candle's operations, as transformers 5's `ModernBertModel`: every
//! configuration the CPU path reads (biases on or off, the GeGLU's activation, any pattern of
//! global and sliding layers). candle-transformers' module has no biases and one pattern, so
//! it computes different numbers for some released configurations; this one is written from
//! the same definition as `models/modernbert/encoder.rs`.
//!
//! Per layer (pre-norm; `attn_norm` is the identity in layer 0): `x += Wo · attention(RoPE(Q),
//! RoPE(K), V)` over `Wqkv · attn_norm(x)`, then `x += Wo · (act(a) * g)` with
//! `[a | g] = Wi · mlp_norm(x)`; `final_norm` at the end. A sliding layer's query sees the keys
//! at most `local_attention / 2` positions away; each kind of layer has its RoPE theta. Scores,
//! masks and softmax are f32 whatever the weights' format.

use candle_core::{DType, Module, Tensor, D};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};

use super::config::ModernBertConfig;
use crate::models::layers::candle::{activate, additive_mask, err, rope_tables};
use crate::models::layers::kernels::Act;
use crate::Result;
use candle_nn::rotary_emb::rope;

/// The score of a key out of a sliding layer's reach: finite, as `additive_mask`'s padding
/// (the same value in f32), so that a row whose keys are all masked averages instead of
/// turning into NaN (which would reach real rows through `0 · NaN`).
const MASKED: f32 = -1e30;

struct Layer {
    attn_norm: Option<LayerNorm>,
    qkv: Linear,
    out: Linear,
    mlp_norm: LayerNorm,
    wi: Linear,
    wo: Linear,
    global: bool,
}

/// The ModernBERT encoder on a candle device. `Send + Sync`.
pub(crate) struct ModernBert {
    embed: Embedding,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    final_norm: LayerNorm,
    heads: usize,
    window: usize,
    act: Act,
    /// `(cos, sin)` of the global and the sliding layers' angles.
    global_rope: (Tensor, Tensor),
    local_rope: (Tensor, Tensor),
}

fn norm(vb: &VarBuilder, size: usize, eps: f64, bias: bool, name: &str) -> Result<LayerNorm> {
    let vb = vb.pp(name);
    match bias {
        true => candle_nn::layer_norm(size, eps, vb),
        false => candle_nn::layer_norm_no_bias(size, eps, vb),
    }
    .map_err(err(name))
}

fn linear(vb: &VarBuilder, i: usize, o: usize, bias: bool, name: &str) -> Result<Linear> {
    candle_nn::linear_b(i, o, bias, vb.pp(name)).map_err(err(name))
}

impl ModernBert {
    /// Loads the encoder of `cfg` from `vb` (its tensors under `model.`).
    pub fn load(vb: VarBuilder, cfg: &ModernBertConfig) -> Result<Self> {
        let vb = vb.pp("model");
        let (h, i, eps) = (cfg.hidden, cfg.intermediate, cfg.eps as f64);
        let (nb, ab, mb) = (cfg.norm_bias, cfg.attention_bias, cfg.mlp_bias);
        let mut layers = Vec::with_capacity(cfg.layers);
        for (n, &global) in cfg.global.iter().enumerate() {
            let l = vb.pp(format!("layers.{n}"));
            layers.push(Layer {
                attn_norm: match n {
                    0 => None,
                    _ => Some(norm(&l, h, eps, nb, "attn_norm")?),
                },
                qkv: linear(&l, h, 3 * h, ab, "attn.Wqkv")?,
                out: linear(&l, h, h, ab, "attn.Wo")?,
                mlp_norm: norm(&l, h, eps, nb, "mlp_norm")?,
                wi: linear(&l, h, 2 * i, mb, "mlp.Wi")?,
                wo: linear(&l, i, h, mb, "mlp.Wo")?,
                global,
            });
        }
        let (d, positions) = (cfg.head_dim(), cfg.max_positions);
        let (dtype, device) = (vb.dtype(), vb.device().clone());
        Ok(ModernBert {
            embed: candle_nn::embedding(cfg.vocab, h, vb.pp("embeddings.tok_embeddings"))
                .map_err(err("embeddings.tok_embeddings"))?,
            embed_norm: norm(&vb, h, eps, nb, "embeddings.norm")?,
            layers,
            final_norm: norm(&vb, h, eps, nb, "final_norm")?,
            heads: cfg.heads,
            window: cfg.window,
            act: cfg.act,
            global_rope: rope_tables(d, cfg.global_theta, positions, dtype, &device)?,
            local_rope: rope_tables(d, cfg.local_theta, positions, dtype, &device)?,
        })
    }

    /// The last hidden states `(rows, len, hidden)` of right-padded `ids` with `mask` (1 for
    /// a token, 0 for padding).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let device = ids.device();
        // Padding keys masked for every query; a sliding layer masks the keys out of reach too.
        let padding = additive_mask(mask, DType::F32)?;
        let w = self.window as i64;
        let reach: Vec<f32> = (0..t as i64)
            .flat_map(|q| (0..t as i64).map(move |k| if (q - k).abs() <= w { 0.0 } else { MASKED }))
            .collect();
        let reach = Tensor::from_vec(reach, (1, 1, t, t), device)?;
        let local = padding.broadcast_add(&reach)?;

        let mut x = self.embed_norm.forward(&self.embed.forward(ids)?)?;
        let (h, heads) = (x.dim(D::Minus1)?, self.heads);
        let d = h / heads;
        for layer in &self.layers {
            let y = match &layer.attn_norm {
                Some(norm) => norm.forward(&x)?,
                None => x.clone(),
            };
            let qkv = layer.qkv.forward(&y)?.reshape((b, t, 3, heads, d))?;
            let part = |i: usize| {
                qkv.narrow(2, i, 1)?
                    .squeeze(2)?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let (cos, sin) = match layer.global {
                true => &self.global_rope,
                false => &self.local_rope,
            };
            let q = rope(&part(0)?, cos, sin)?;
            let k = rope(&part(1)?, cos, sin)?;
            let v = part(2)?;
            let scores = (q.matmul(&k.t()?)? / (d as f64).sqrt())?.to_dtype(DType::F32)?;
            let scores = match layer.global {
                true => scores.broadcast_add(&padding)?,
                false => scores.broadcast_add(&local)?,
            };
            let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(v.dtype())?;
            let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h))?;
            x = (x + layer.out.forward(&ctx)?)?;
            let gated = layer.wi.forward(&layer.mlp_norm.forward(&x)?)?;
            let half = gated.dim(D::Minus1)? / 2;
            let a = activate(&gated.narrow(D::Minus1, 0, half)?, self.act)?;
            let g = gated.narrow(D::Minus1, half, half)?;
            x = (x + layer.wo.forward(&(a * g)?)?)?;
        }
        self.final_norm.forward(&x)
    }
}
