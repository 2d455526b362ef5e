//! BERT and XLM-RoBERTa on candle's operations, as transformers' `BertModel` /
//! `XLMRobertaModel` (post-norm: `x = LN(x + O · attention(Q x, K x, V x))`, then
//! `x = LN(x + W2 · act(W1 · x))`), written for a device, where every operation is a kernel
//! launch and a pass over memory:
//! - the hidden states stay one `(rows · len, hidden)` matrix, so every linear layer is one
//!   product over the whole batch (not one per row);
//! - Q, K and V are one product: their weights are stacked at load, the query's scaled by
//!   `1 / sqrt(head_dim)` as they are read (in f32) instead of dividing the scores;
//! - on a CUDA device each head's scores and context are one cuBLASLt product over the batch,
//!   reading Q, K and V where their product wrote them and writing the context in place
//!   (`KeyMask::attend`); elsewhere one copy puts the heads of Q, K and V in place, and keys
//!   enter the scores transposed by their strides;
//! - the padding mask is built once per batch, additive, in the activations' format, and
//!   added by the scores' product on a CUDA device (`layers::candle::KeyMask`); the softmax
//!   is candle's fused kernel over the last dimension; so are the layer norms;
//! - when only each row's first token is wanted (a classification head), the last layer
//!   computes the queries, the attention output and the feed-forward part for that token
//!   only, as the crate's CPU kernels do.
//!
//! The weights are read under the names transformers saves (`encoder.layer.N.attention.
//! self.query`, ...), under `bert.` / `roberta.` in a checkpoint with a task head, at the root
//! in a bare one; positions count from `pad_token_id + 1` for XLM-R (`EncoderConfig`).

use candle_core::{IndexOp, Tensor};
use candle_nn::VarBuilder;

use super::encoder::EncoderConfig;
use crate::models::layers::candle::{
    err, softmax_in_f32, stacked_qkv, Fold, KeyMask, Linear, Norm, PostNorm,
};
use crate::models::layers::kernels::Act;
use crate::Result;

/// One layer: Q, K and V stacked (the query's rows scaled), then the post-norm rest.
struct Layer {
    qkv: Linear,
    rest: PostNorm,
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
    /// The softmax in f32 (half precision on candle's CPU backend: `softmax_in_f32`).
    softmax_in_f32: bool,
}

impl Bert {
    /// The attention scale `1 / sqrt(head_dim)`, folded into the queries' weights as they
    /// are read ([`Fold`]).
    pub fn fold(cfg: &EncoderConfig) -> Fold {
        Fold {
            suffixes: &[".attention.self.query.weight", ".attention.self.query.bias"],
            scale: 1.0 / ((cfg.hidden / cfg.heads.max(1)) as f64).sqrt(),
            rows: None,
        }
    }

    /// Loads the encoder of `cfg` from `vb` (its tensors at `vb`'s root: `embeddings.*`,
    /// `encoder.layer.N.*`), read with [`Bert::fold`].
    pub fn load(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let (h, i, eps) = (cfg.hidden, cfg.intermediate, cfg.eps);
        let e = vb.pp("embeddings");
        let table = |rows: usize, name: &str| e.get((rows, h), name).map_err(err(name));
        let mut layers = Vec::with_capacity(cfg.layers);
        for n in 0..cfg.layers {
            let l = vb.pp(format!("encoder.layer.{n}"));
            let names = ["self.query", "self.key", "self.value"];
            layers.push(Layer {
                qkv: stacked_qkv(&l.pp("attention"), h, names)?,
                rest: PostNorm::load(&l, h, i, eps)?,
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
            softmax_in_f32: softmax_in_f32(&vb),
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
        let mask = KeyMask::new(mask, x.dtype(), self.heads)?;
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
        mask: &KeyMask,
        (b, t): (usize, usize),
        first: bool,
    ) -> candle_core::Result<Tensor> {
        let qkv = layer.qkv.forward(x)?;
        let context = mask.attend(&qkv, (b, t), self.heads, first, self.softmax_in_f32)?;
        let residual = match first {
            true => x.reshape((b, t, self.hidden))?.i((.., 0, ..))?,
            false => x.clone(),
        };
        layer.rest.forward(&context, &residual, self.act)
    }
}
