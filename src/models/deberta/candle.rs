//! DeBERTa-v2 / v3 on candle's operations, as transformers 5's `DebertaV2Model`, from the same
//! definition as the CPU path (`deberta::encoder`): embeddings (word, absolute positions with
//! `position_biased_input`, token types, `embed_proj` when `embedding_size` differs, layer
//! norm), then post-norm layers whose attention adds the disentangled terms to the content
//! scores: `c2p[i][j] = Q_i · Kr[row(i - j)]` and `p2c[i][j] = K_j · Qr[row(i - j)]`, `Kr` / `Qr`
//! the (layer-normed) relative embeddings through the key / query projections (or their own,
//! without `share_att_key`), computed once at load.
//!
//! On a device the terms are two batched products against the relative embeddings' rows, then
//! one pass of our own (`simd::fused::position_bias`) that gathers each score's row of both,
//! by an index of `(t, t)` built once per batch, and adds them; as in `bert::candle`, Q, K
//! and V are one product with the attention's scale folded into the query's weights as they
//! are read, the padding mask is additive and built once per batch (added with the position
//! terms by the scores' product on a CUDA device: `layers::candle::KeyMask`), softmax and
//! norms are candle's fused kernels, and the heads are put in place and back by one pass each
//! of our own (`simd::fused`), as each head's rows are put together for the products with the
//! relative rows (`heads_first`). Under `RERANK_CUDA_FUSED_KERNELS=0` (and on Metal) the terms
//! are candle's copies, gathers and additions instead.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use super::config::DebertaConfig;
use crate::models::layers::candle::{
    err, heads_of, linear, softmax, softmax_in_f32, stacked_qkv, upload, Fold, KeyMask, Linear,
    Norm, PostNorm,
};
use crate::simd::fused::{self, heads_first, merge_heads, position_bias};
use crate::Result;

struct Layer {
    /// Q, K and V stacked (`3 · hidden` outputs), the query's rows scaled.
    qkv: Linear,
    rest: PostNorm,
    /// `(heads, 2 span, head_dim)`: the relative embeddings through the key projection, for
    /// `c2p` (the query carries the scale).
    pos_key: Option<Tensor>,
    /// The same through the (scaled) query projection, for `p2c`.
    pos_query: Option<Tensor>,
}

/// The DeBERTa-v2 / v3 encoder on a candle device. `Send + Sync`.
pub(crate) struct Deberta {
    word: Tensor,
    position: Option<Tensor>,
    types: Option<Tensor>,
    proj: Option<Linear>,
    embed_norm: Norm,
    layers: Vec<Layer>,
    cfg: DebertaConfig,
    /// As `bert::candle`'s: the softmax in f32 for half precision on candle's CPU backend.
    softmax_in_f32: bool,
}

impl Deberta {
    /// The attention scale `1 / sqrt(head_dim · scale_factor)`, folded into the query
    /// projections (the content one, and the relative one without `share_att_key`) as they
    /// are read ([`Fold`]).
    pub fn fold(cfg: &DebertaConfig) -> Fold {
        Fold {
            suffixes: &[
                ".attention.self.query_proj.weight",
                ".attention.self.query_proj.bias",
                ".attention.self.pos_query_proj.weight",
                ".attention.self.pos_query_proj.bias",
            ],
            scale: 1.0 / ((cfg.head_dim() * cfg.scale_factor()) as f64).sqrt(),
            rows: None,
        }
    }

    /// Loads the encoder of `cfg` from `vb` (its tensors at `vb`'s root: `embeddings.*`,
    /// `encoder.*`), read with [`Deberta::fold`].
    pub fn load(vb: VarBuilder, cfg: &DebertaConfig) -> Result<Self> {
        let (h, i, e, eps) = (cfg.hidden, cfg.intermediate, cfg.embedding, cfg.eps);
        let (heads, d) = (cfg.heads, cfg.head_dim());
        let emb = vb.pp("embeddings");
        let table = |rows: usize, name: &str| emb.get((rows, e), name).map_err(err(name));
        let span2 = 2 * cfg.relative.span();
        let enc = vb.pp("encoder");
        let rel = enc
            .get((span2, h), "rel_embeddings.weight")
            .map_err(err("rel_embeddings"))?;
        let rel = match cfg.norm_rel {
            true => Norm::load(&enc, h, eps, "LayerNorm")?
                .forward(&rel)
                .map_err(err("rel_embeddings' norm"))?,
            false => rel,
        };
        // `(2 span, hidden)` through a projection, as `(heads, 2 span, d)`: a batch's rows
        // are a narrowing of each head's (`Index::rows`).
        let positions = |p: &Linear| -> Result<Tensor> {
            (|| {
                p.forward(&rel)?
                    .reshape((span2, heads, d))?
                    .transpose(0, 1)?
                    .contiguous()
            })()
            .map_err(err("relative positions"))
        };
        let mut layers = Vec::with_capacity(cfg.layers);
        for n in 0..cfg.layers {
            let l = enc.pp(format!("layer.{n}"));
            let a = l.pp("attention");
            let own = |name: &str| linear(&a, h, h, true, &format!("self.{name}"));
            let (q, k) = (own("query_proj")?, own("key_proj")?);
            let pos_key = match (cfg.c2p, cfg.share_att_key) {
                (false, _) => None,
                (true, true) => Some(positions(&k)?),
                (true, false) => Some(positions(&own("pos_key_proj")?)?),
            };
            // (The query projections carry the scale: `Deberta::fold`.)
            let pos_query = match (cfg.p2c, cfg.share_att_key) {
                (false, _) => None,
                (true, true) => Some(positions(&q)?),
                (true, false) => Some(positions(&own("pos_query_proj")?)?),
            };
            let names = ["self.query_proj", "self.key_proj", "self.value_proj"];
            layers.push(Layer {
                qkv: stacked_qkv(&a, h, names)?,
                rest: PostNorm::load(&l, h, i, eps)?,
                pos_key,
                pos_query,
            });
        }
        Ok(Deberta {
            word: table(cfg.vocab, "word_embeddings.weight")?,
            position: match cfg.absolute_positions {
                true => Some(table(cfg.max_positions, "position_embeddings.weight")?),
                false => None,
            },
            types: match cfg.type_vocab {
                0 => None,
                n => Some(table(n, "token_type_embeddings.weight")?),
            },
            proj: match e == h {
                true => None,
                false => Some(
                    emb.get((h, e), "embed_proj.weight")
                        .and_then(|w| Linear::new(w, None))
                        .map_err(err("embed_proj"))?,
                ),
            },
            embed_norm: Norm::load(&emb, h, eps, "LayerNorm")?,
            layers,
            cfg: cfg.clone(),
            softmax_in_f32: softmax_in_f32(&vb),
        })
    }

    /// The last hidden states `(rows, len, hidden)` of right-padded `ids` with `mask` (1 for
    /// a key, 0 for padding) and token `types` (type 0 everywhere without them).
    pub fn forward(
        &self,
        ids: &Tensor,
        types: Option<&Tensor>,
        mask: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let (h, e) = (self.cfg.hidden, self.cfg.embedding);
        let device = ids.device();
        let rows = |table: &Tensor, ids: &Tensor| table.index_select(&ids.flatten_all()?, 0);
        let mut x = rows(&self.word, ids)?.reshape((b, t, e))?;
        if let Some(position) = &self.position {
            x = x.broadcast_add(&position.narrow(0, 0, t)?)?;
        }
        if let Some(table) = &self.types {
            x = match types {
                Some(types) => (x + rows(table, types)?.reshape((b, t, e))?)?,
                None => x.broadcast_add(&table.narrow(0, 0, 1)?)?,
            };
        }
        let mut x = x.reshape((b * t, e))?;
        if let Some(proj) = &self.proj {
            x = proj.forward(&x)?;
        }
        let x = self.embed_norm.forward(&x)?;
        // transformers zeroes the padding's embeddings.
        let keep = mask.to_dtype(x.dtype())?.reshape((b * t, 1))?;
        let mut x = x.broadcast_mul(&keep)?;
        let mask = KeyMask::new(mask, x.dtype(), self.cfg.heads)?;
        // The relative row each (query i, key j) reads, and the same by (key j, query i),
        // counted from the first row the batch reads: the terms are products with the rows
        // `lo ..= hi` alone (as on the CPU path), not every row of the table.
        let n = t as i64;
        let rows: Vec<usize> = (1 - n..n)
            .map(|delta| self.cfg.relative.row(delta))
            .collect();
        let (lo, hi) = (
            rows.iter().copied().min().unwrap_or(0),
            rows.iter().copied().max().unwrap_or(0),
        );
        let by_delta: Vec<u32> = rows.iter().map(|&r| (r - lo) as u32).collect();
        let mut index: Vec<u32> = Vec::with_capacity(t * t);
        for i in 0..t {
            // delta = i - j for j = 0..t sits at by_delta[i - j + t - 1].
            index.extend(by_delta[i..i + t].iter().rev());
        }
        let pairs = upload(index, (t, t), device)?;
        let full = |index: &Tensor| index.broadcast_as((b, self.cfg.heads, t, t))?.contiguous();
        let index = Index {
            // candle's gathers read an index of the scores' shape, in each term's order.
            gathers: match fused::runs_on(device) {
                true => None,
                false => Some((full(&pairs)?, full(&pairs.t()?.contiguous()?)?)),
            },
            pairs,
            rows: (lo, hi + 1 - lo),
        };
        for layer in &self.layers {
            x = self.layer(layer, &x, &mask, &index, (b, t))?;
        }
        x.reshape((b, t, h))
    }

    /// One layer on `x` `(b · t, hidden)`.
    fn layer(
        &self,
        layer: &Layer,
        x: &Tensor,
        mask: &KeyMask,
        index: &Index,
        (b, t): (usize, usize),
    ) -> candle_core::Result<Tensor> {
        let (h, heads) = (self.cfg.hidden, self.cfg.heads);
        let d = h / heads;
        let (q, k, v) = heads_of(&layer.qkv, x, (b, t), heads, None)?;
        // `x` (b, heads, t, d) against the batch's relative rows of `pos` (heads, 2 span, d),
        // head by head: (heads, b · t, rows), each head's rows put together by one pass.
        let (lo, width) = index.rows;
        let per_head = |x: &Tensor, pos: &Tensor| {
            heads_first(x)?
                .reshape((heads, b * t, d))?
                .matmul(&pos.narrow(1, lo, width)?.t()?)
        };
        let c2p = layer
            .pos_key
            .as_ref()
            .map(|pos| per_head(&q, pos))
            .transpose()?;
        let p2c = layer
            .pos_query
            .as_ref()
            .map(|pos| per_head(&k, pos))
            .transpose()?;
        let scores = match &index.gathers {
            // Both terms gathered and added in one pass (`simd::fused::position_bias`), then
            // added to the content scores with the mask by their product where the device
            // allows it (`KeyMask::scores`).
            None => {
                let bias = match c2p.is_some() || p2c.is_some() {
                    true => Some(position_bias(
                        c2p.as_ref(),
                        p2c.as_ref(),
                        &index.pairs,
                        (b, heads, t),
                    )?),
                    false => None,
                };
                mask.scores(&q, &k, bias.as_ref())?
            }
            // candle's operations: each term as (b, heads, t, rows), each score's row
            // gathered; c2p added by the scores' product, then p2c read transposed.
            Some((by_query, by_key)) => {
                let gathered = |x: Tensor, by: &Tensor| {
                    let rows = x.dim(2)?;
                    x.reshape((heads, b, t, rows))?
                        .permute((1, 0, 2, 3))?
                        .contiguous()?
                        .gather(by, 3)
                };
                let c2p = c2p.map(|x| gathered(x, by_query)).transpose()?;
                let scores = mask.scores(&q, &k, c2p.as_ref())?;
                match p2c {
                    Some(x) => (scores + gathered(x, by_key)?.t()?)?,
                    None => scores,
                }
            }
        };
        let probs = softmax(&scores, self.softmax_in_f32)?;
        let context = merge_heads(&probs.matmul(&v)?)?;
        layer.rest.forward(&context, x, self.cfg.act)
    }
}

/// A batch's relative rows: `pairs[i, j]` is the row that query `i` and key `j` read, `(t, t)`,
/// counted from the first of the `rows` (`(first, count)`) the batch reads of the table; for
/// candle's gathers (where the fused passes do not run), the same as `by_query[.., i, j]` and
/// `by_key[.., j, i]`, both `(b, heads, t, t)`.
struct Index {
    pairs: Tensor,
    gathers: Option<(Tensor, Tensor)>,
    rows: (usize, usize),
}
