//! BERT and XLM-RoBERTa on candle's operations, as transformers' `BertModel` /
//! `XLMRobertaModel` (post-norm: `x = LN(x + O · attention(Q x, K x, V x))`, then
//! `x = LN(x + W2 · act(W1 · x))`), written for a device, where every operation is a kernel
//! launch and a pass over memory:
//! - the hidden states stay one `(rows · len, hidden)` matrix, so every linear layer is one
//!   product over the whole batch (not one per row);
//! - Q, K and V are one product: their weights are stacked at load, the query's scaled by
//!   `1 / sqrt(head_dim)` there instead of dividing the scores;
//! - one copy puts the heads of Q, K and V in place; keys enter the scores transposed by
//!   their strides;
//! - the padding mask is built once per batch, additive, in the activations' format, and
//!   the softmax is candle's fused kernel over the last dimension; so are the layer norms;
//! - when only each row's first token is wanted (a classification head), the last layer
//!   computes the queries, the attention output and the feed-forward part for that token
//!   only, as the crate's CPU kernels do.
//!
//! The weights are read under the names transformers saves (`encoder.layer.N.attention.
//! self.query`, ...), under `bert.` / `roberta.` in a checkpoint with a task head, at the root
//! in a bare one; positions count from `pad_token_id + 1` for XLM-R (`EncoderConfig`).

use candle_core::{DType, IndexOp, Module, Tensor};
use candle_nn::{Linear, VarBuilder};

use super::encoder::EncoderConfig;
use crate::models::layers::candle::{activate, err};
use crate::models::layers::kernels::Act;
use crate::Result;

/// The additive mask of a padding key: finite in every format, so that a row whose keys
/// are all masked averages instead of turning into NaN. f16 tops out at 65,504; the scores it
/// is added to are far smaller than either value.
fn masked(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => -3e4,
        _ => -1e30,
    }
}

/// A layer norm's weight and bias (candle's fused kernel).
struct Norm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl Norm {
    fn load(vb: &VarBuilder, h: usize, eps: f32, name: &str) -> Result<Self> {
        let vb = vb.pp(name);
        Ok(Norm {
            weight: vb.get(h, "weight").map_err(err(name))?,
            bias: vb.get(h, "bias").map_err(err(name))?,
            eps,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::layer_norm(x, &self.weight, &self.bias, self.eps)
    }
}

fn linear(vb: &VarBuilder, inputs: usize, outputs: usize, name: &str) -> Result<Linear> {
    candle_nn::linear(inputs, outputs, vb.pp(name)).map_err(err(name))
}

struct Layer {
    /// Q, K and V stacked (`3 · hidden` outputs), the query's rows scaled.
    qkv: Linear,
    out: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    ffn_norm: Norm,
}

/// The BERT / XLM-R encoder on a candle device. `Send + Sync`.
pub(crate) struct Bert {
    word: Tensor,
    position: Tensor,
    types: Tensor,
    embed_norm: Norm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
    act: Act,
    /// The position id of the first token (0 for BERT, `pad_token_id + 1` for XLM-R).
    offset: usize,
    /// Half-precision activations on candle's CPU backend, whose softmax sums in the
    /// activations' format (bf16 cost `ce_tiny_a` 0.14 instead of PyTorch's 0.026): scores
    /// go through the softmax in f32 there. candle's CUDA kernel sums in f32 for f16 and bf16
    /// alike, so a GPU takes the fused softmax in the activations' format.
    softmax_in_f32: bool,
}

impl Bert {
    /// Loads the encoder of `cfg` from `vb` (its tensors at `vb`'s root: `embeddings.*`,
    /// `encoder.layer.N.*`).
    pub fn load(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let (h, i, eps) = (cfg.hidden, cfg.intermediate, cfg.eps);
        let e = vb.pp("embeddings");
        let table = |rows: usize, name: &str| e.get((rows, h), name).map_err(err(name));
        let scale = 1.0 / ((h / cfg.heads) as f64).sqrt();
        let mut layers = Vec::with_capacity(cfg.layers);
        for n in 0..cfg.layers {
            let l = vb.pp(format!("encoder.layer.{n}"));
            let a = l.pp("attention");
            // Q, K and V stacked into one product, the query's rows scaled.
            let stack = |kind: &str, shape: &[usize]| -> Result<Tensor> {
                let name = format!("self.{{query,key,value}}.{kind}");
                let get = |part: &str| a.get(shape, &format!("self.{part}.{kind}"));
                let stacked = (|| {
                    Tensor::cat(
                        &[
                            &get("query")?.affine(scale, 0.0)?,
                            &get("key")?,
                            &get("value")?,
                        ],
                        0,
                    )
                })();
                stacked.map_err(err(&name))
            };
            layers.push(Layer {
                qkv: Linear::new(stack("weight", &[h, h])?, Some(stack("bias", &[h])?)),
                out: linear(&a, h, h, "output.dense")?,
                attn_norm: Norm::load(&a, h, eps, "output.LayerNorm")?,
                up: linear(&l, h, i, "intermediate.dense")?,
                down: linear(&l, i, h, "output.dense")?,
                ffn_norm: Norm::load(&l, h, eps, "output.LayerNorm")?,
            });
        }
        Ok(Bert {
            word: table(cfg.vocab, "word_embeddings.weight")?,
            position: table(cfg.positions, "position_embeddings.weight")?,
            types: table(cfg.type_vocab, "token_type_embeddings.weight")?,
            embed_norm: Norm::load(&e, h, eps, "LayerNorm")?,
            layers,
            hidden: h,
            heads: cfg.heads,
            act: cfg.act,
            offset: cfg.position_offset,
            softmax_in_f32: vb.device().is_cpu() && vb.dtype() != DType::F32,
        })
    }

    /// The last hidden states of right-padded `ids` `(rows, len)` with `mask` (1 for a key,
    /// 0 for padding) and token `types` (type 0 everywhere without them): `(rows, len,
    /// hidden)`, or `(rows, 1, hidden)` with `first_only`, each row's first token.
    pub fn forward(
        &self,
        ids: &Tensor,
        types: Option<&Tensor>,
        mask: &Tensor,
        first_only: bool,
    ) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let h = self.hidden;
        let rows = |table: &Tensor, ids: &Tensor| table.index_select(&ids.flatten_all()?, 0);
        let positions = self.position.narrow(0, self.offset, t)?;
        let x = rows(&self.word, ids)?.reshape((b, t, h))?;
        let x = match types {
            Some(types) => {
                let types = rows(&self.types, types)?.reshape((b, t, h))?;
                (x + types)?.broadcast_add(&positions)?
            }
            None => x.broadcast_add(&positions.broadcast_add(&self.types.i(0)?)?)?,
        };
        let mut x = self.embed_norm.forward(&x.reshape((b * t, h))?)?;
        let dtype = x.dtype();
        let keep = masked(dtype);
        let mask = mask
            .to_dtype(DType::F32)?
            .affine(-keep, keep)?
            .to_dtype(dtype)?
            .reshape((b, 1, 1, t))?;
        let last = self.layers.len().saturating_sub(1);
        for (n, layer) in self.layers.iter().enumerate() {
            let first = first_only && n == last;
            x = self.layer(layer, &x, &mask, (b, t), first)?;
        }
        match first_only && !self.layers.is_empty() {
            true => x.reshape((b, 1, h)),
            false => x.reshape((b, t, h)),
        }
    }

    /// One layer on `x` `(b · t, hidden)`; with `first`, its output is each row's first
    /// token only, `(b, hidden)`.
    fn layer(
        &self,
        layer: &Layer,
        x: &Tensor,
        mask: &Tensor,
        (b, t): (usize, usize),
        first: bool,
    ) -> candle_core::Result<Tensor> {
        let (h, heads) = (self.hidden, self.heads);
        let d = h / heads;
        // (3, b, heads, t, d): Q, K and V with their heads in place, one copy.
        let qkv = layer
            .qkv
            .forward(x)?
            .reshape((b, t, 3, heads, d))?
            .permute((2, 0, 3, 1, 4))?
            .contiguous()?;
        let (q, k, v) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?);
        let (q, residual) = match first {
            true => (
                q.narrow(2, 0, 1)?.contiguous()?,
                x.reshape((b, t, h))?.i((.., 0, ..))?,
            ),
            false => (q, x.clone()),
        };
        let queries = q.dim(2)?;
        let scores = q.matmul(&k.t()?)?.broadcast_add(mask)?;
        let probs = match self.softmax_in_f32 {
            true => candle_nn::ops::softmax_last_dim(&scores.to_dtype(DType::F32)?)?
                .to_dtype(scores.dtype())?,
            false => candle_nn::ops::softmax_last_dim(&scores)?,
        };
        let context = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .reshape((b * queries, h))?;
        let x = layer
            .attn_norm
            .forward(&(layer.out.forward(&context)? + residual)?)?;
        let y = activate(&layer.up.forward(&x)?, self.act)?;
        layer.ffn_norm.forward(&(layer.down.forward(&y)? + x)?)
    }
}
