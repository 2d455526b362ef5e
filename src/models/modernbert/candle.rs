//! ModernBERT on candle's operations, as transformers 5's `ModernBertModel`: every
//! configuration the CPU path reads (biases on or off, the GeGLU's activation, any pattern of
//! global and sliding layers). candle-transformers' module has no biases and one pattern, so
//! it computes different numbers for some released configurations; this one is written from
//! the same definition as `models/modernbert/encoder.rs`.
//!
//! Per layer (pre-norm; `attn_norm` is the identity in layer 0): `x += Wo · attention(RoPE(Q),
//! RoPE(K), V)` over `Wqkv · attn_norm(x)`, then `x += Wo · (act(a) * g)` with
//! `[a | g] = Wi · mlp_norm(x)`; `final_norm` at the end. A sliding layer's query sees the keys
//! at most `local_attention / 2` positions away; each kind of layer has its RoPE theta.
//!
//! Written for a device as `bert::candle` is: the hidden states stay one `(rows · len,
//! hidden)` matrix (one product per linear layer), one pass of our own puts Q, K and V in
//! place with Q and K rotated, and one puts the context back (`simd::fused`), the attention
//! scale is folded into `Wqkv`'s query rows as the weights are read, masks and scores stay in
//! the activations' format (finite masks; half-precision scores go through the softmax in f32
//! on candle's CPU backend only), the GeGLU is one pass (`simd::fused::glu`), and every norm
//! is candle's fused kernel (a zero bias where the checkpoint has none).

use candle_core::{Module, Tensor, D};
use candle_nn::{Embedding, VarBuilder};

use super::config::ModernBertConfig;
use crate::models::layers::candle::{
    err, glu, heads_of, linear, mask_value, rope_rows, rope_tables, softmax, softmax_in_f32,
    upload, Fold, KeyMask, Linear, Norm, QueryMask,
};
use crate::models::layers::kernels::Act;
use crate::simd::fused::merge_heads;
use crate::Result;

struct Layer {
    attn_norm: Option<Norm>,
    qkv: Linear,
    out: Linear,
    mlp_norm: Norm,
    wi: Linear,
    wo: Linear,
    global: bool,
}

/// The ModernBERT encoder on a candle device. `Send + Sync`.
pub(crate) struct ModernBert {
    embed: Embedding,
    embed_norm: Norm,
    layers: Vec<Layer>,
    final_norm: Norm,
    heads: usize,
    window: usize,
    act: Act,
    /// `(cos, sin)` of the global and the sliding layers' angles.
    global_rope: (Tensor, Tensor),
    local_rope: (Tensor, Tensor),
    /// The activations' format.
    dtype: candle_core::DType,
    /// As `bert::candle`'s: the softmax in f32 for half precision on candle's CPU backend.
    softmax_in_f32: bool,
}

impl ModernBert {
    /// Loads the encoder of `cfg` from `vb` (its tensors under `model.`), read with
    /// [`ModernBert::fold`].
    pub fn load(vb: VarBuilder, cfg: &ModernBertConfig) -> Result<Self> {
        let vb = vb.pp("model");
        let (h, i, eps) = (cfg.hidden, cfg.intermediate, cfg.eps);
        let (nb, ab, mb) = (cfg.norm_bias, cfg.attention_bias, cfg.mlp_bias);
        let norm = |vb: &VarBuilder, name: &str| Norm::load_maybe_bias(vb, h, eps, name, nb);
        let mut layers = Vec::with_capacity(cfg.layers);
        for (n, &global) in cfg.global.iter().enumerate() {
            let l = vb.pp(format!("layers.{n}"));
            layers.push(Layer {
                attn_norm: match n {
                    0 => None,
                    _ => Some(norm(&l, "attn_norm")?),
                },
                qkv: linear(&l, h, 3 * h, ab, "attn.Wqkv")?,
                out: linear(&l, h, h, ab, "attn.Wo")?,
                mlp_norm: norm(&l, "mlp_norm")?,
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
            embed_norm: norm(&vb, "embeddings.norm")?,
            layers,
            final_norm: norm(&vb, "final_norm")?,
            heads: cfg.heads,
            window: cfg.window,
            act: cfg.act,
            global_rope: rope_tables(d, cfg.global_theta, positions, dtype, &device)?,
            local_rope: rope_tables(d, cfg.local_theta, positions, dtype, &device)?,
            dtype,
            softmax_in_f32: softmax_in_f32(&vb),
        })
    }

    /// The attention scale `1 / sqrt(head_dim)`, folded into the query's rows of `Wqkv` (the
    /// first `hidden` rows of its weight and bias) as the weights are read ([`Fold`]).
    pub fn fold(cfg: &ModernBertConfig) -> Fold {
        Fold {
            suffixes: &[".attn.Wqkv.weight", ".attn.Wqkv.bias"],
            scale: 1.0 / (cfg.head_dim() as f64).sqrt(),
            rows: Some(cfg.hidden),
        }
    }

    /// The last hidden states `(rows, len, hidden)` of right-padded `ids` with `mask` (1 for
    /// a token, 0 for padding).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let device = ids.device();
        let dtype = self.dtype;
        // Padding keys masked for every query; a sliding layer masks the keys out of reach
        // too. Both in the activations' format, finite (their sum too).
        let padding = KeyMask::new(mask, dtype, self.heads)?;
        // A sliding layer's mask differs by query: every head's scores take it as one
        // (`QueryMask`, one "group" per head). Built only when a layer slides.
        let slides = self.layers.iter().any(|layer| !layer.global);
        let local = match slides {
            true => {
                let (w, masked) = (self.window as i64, mask_value(dtype));
                let reach: Vec<f32> = (0..t as i64)
                    .flat_map(|q| {
                        (0..t as i64).map(move |k| if (q - k).abs() <= w { 0.0 } else { masked })
                    })
                    .collect();
                let reach = upload(reach, (1, 1, t, t), device)?.to_dtype(dtype)?;
                let local = padding.additive().broadcast_add(&reach)?;
                Some(QueryMask::new(
                    local.reshape((b, 1, 1, t, t))?,
                    self.heads,
                    1,
                )?)
            }
            false => None,
        };

        // Each kind of layer's RoPE tables for this batch's rows, as the heads' pass takes them.
        let global_rope = rope_rows(&self.global_rope, (b, t))?;
        let local_rope = match slides {
            true => Some(rope_rows(&self.local_rope, (b, t))?),
            false => None,
        };

        // The hidden states stay one `(b · t, hidden)` matrix: one product per linear layer.
        let x = self.embed.forward(ids)?;
        let h = x.dim(D::Minus1)?;
        let mut x = self.embed_norm.forward(&x.reshape((b * t, h))?)?;
        for layer in &self.layers {
            let y = match &layer.attn_norm {
                Some(norm) => norm.forward(&x)?,
                None => x.clone(),
            };
            // Q (scaled at load: `ModernBert::fold`), K, V in place, Q and K rotated, in one
            // pass.
            let (cos, sin) = match (&local_rope, layer.global) {
                (Some(local), false) => local,
                _ => &global_rope,
            };
            let (q, k, v) = heads_of(&layer.qkv, &y, (b, t), self.heads, Some((cos, sin)))?;
            // Either mask is added by the scores' product on a CUDA device: a global layer's is
            // the padding's alone (`KeyMask`), a sliding layer's the padding's and the window's
            // (`QueryMask`).
            let scores = match (&local, layer.global) {
                (Some(local), false) => local.scores(&q, &k)?,
                _ => padding.scores(&q, &k, None)?,
            };
            let probs = softmax(&scores, self.softmax_in_f32)?;
            let ctx = merge_heads(&probs.matmul(&v)?)?;
            x = layer.out.forward_add(&ctx, &x)?;
            let gated = layer.wi.forward(&layer.mlp_norm.forward(&x)?)?;
            x = layer.wo.forward_add(&glu(&gated, self.act)?, &x)?;
        }
        self.final_norm.forward(&x)?.reshape((b, t, h))
    }
}
