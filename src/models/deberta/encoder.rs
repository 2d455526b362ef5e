//! The packed DeBERTa-v2 / v3 encoder forward pass, as transformers 5's `DebertaV2Model`, on
//! the shared CPU kernels.
//!
//! A batch is *packed* as in the BERT encoder (`bert::encoder`): the tokens of all its
//! sequences are concatenated into one `(tokens, hidden)` matrix, the projections and the
//! feed-forward layers run over real tokens only, and attention runs within each sequence.
//! transformers pads a batch and masks the padding (scores of padded keys are `-inf`, padded
//! embeddings are zeroed); a real token's keys and relative positions are the same either way,
//! so its outputs are too.
//!
//! Embeddings: word embeddings, plus absolute positions (`position_biased_input`) and token
//! types (`type_vocab_size > 0`), projected to `hidden_size` when `embedding_size` differs,
//! then layer-normed. Per layer (post-norm, as BERT): `x = LN(x + O · attention(x))`, then
//! `x = LN(x + W2 · act(W1 · x))`. Disentangled attention: with `s = sqrt(d · scale_factor)`,
//! the score of query `i` and key `j` (head by head) is
//! `Q_i · K_j / s + Q_i · Kr[row(i - j)] / s + K_j · Qr[row(i - j)] / s`, the second term
//! with `c2p`, the third with `p2c`, where `Kr` / `Qr` are the relative embeddings (layer-normed
//! with `norm_rel_ebd`) through the key / query projections (`share_att_key`) or their own
//! (`pos_key_proj`, `pos_query_proj`), and `row` the relative position's row of them
//! (`RelativePositions::row`). `Kr` and `Qr` do not depend on the input: they are computed
//! once at load (in f32, divided by `s`), where transformers computes them in every forward
//! pass. For a sequence of `n` tokens only the rows `row(-(n - 1))..=row(n - 1)` are read, and
//! the position terms are products with those rows only, gathered into the scores.
//!
//! When only each sequence's first token is wanted (the classification head reads `[CLS]`), the
//! last layer computes queries, the attention output and the feed-forward part for those rows
//! only.

use std::cell::RefCell;

use rayon::prelude::*;

use super::config::DebertaConfig;
use crate::models::layers::dense::Output;
pub(crate) use crate::models::layers::encoder::Sequence;
use crate::models::layers::encoder::{
    check_f32_or_int8, check_sequences, token_rows, AttentionNames, EncoderWeights, Norm, Packed,
    PostNormLayer, Workspace,
};
use crate::models::layers::kernels::{
    layer_norm_row, matmul, softmax_rows, with_scratch, Linear, Mat, Threads, Weight,
};
use crate::models::Precision;
use crate::{Error, Result};

/// One encoder layer: a post-norm layer and its position projections.
#[derive(Debug, Clone)]
struct Layer {
    base: PostNormLayer,
    /// `(2 span, hidden)`: the relative embeddings through the key projection, divided by the
    /// attention scale (empty without `c2p`).
    pos_key: Vec<f32>,
    /// The same through the query projection (empty without `p2c`).
    pos_query: Vec<f32>,
}

impl std::ops::Deref for Layer {
    type Target = PostNormLayer;

    fn deref(&self) -> &PostNormLayer {
        &self.base
    }
}

/// Where DeBERTa's attention tensors are.
const ATTENTION: AttentionNames = AttentionNames {
    q: "self.query_proj",
    k: "self.key_proj",
    v: "self.value_proj",
    out: "output.dense",
    norm: "output.LayerNorm",
};

/// A DeBERTa-v2 / v3 encoder's weights, in f32 or int8 linear layers.
#[derive(Debug)]
pub(crate) struct DebertaEncoder {
    cfg: DebertaConfig,
    /// `(vocab, embedding)`.
    word: Vec<f32>,
    /// `(max_positions, embedding)`, empty without `position_biased_input`.
    position: Vec<f32>,
    /// `(type_vocab, embedding)`, empty without token types.
    token_type: Vec<f32>,
    /// `embedding -> hidden`, when they differ.
    embed_proj: Option<Linear>,
    embed_norm: Norm,
    layers: Vec<Layer>,
    /// `1 / sqrt(head_dim * scale_factor)`.
    scale: f32,
    precision: Precision,
}

/// Checks every size `config.json` gives against the safetensors header, before any of them
/// sizes an allocation: a mismatch is an [`Error::Model`] naming `config.json` and the key.
fn check_config(w: &EncoderWeights, cfg: &DebertaConfig) -> Result<()> {
    let weights = w.weights();
    let name = |n: &str| w.encoder_name(n);
    let word = name("embeddings.word_embeddings.weight");
    let embedding_key = if cfg.embedding == cfg.hidden {
        "hidden_size"
    } else {
        "embedding_size"
    };
    weights.check_config_size(embedding_key, cfg.embedding, &word, 1)?;
    weights.check_config_size("vocab_size", cfg.vocab, &word, 0)?;
    if cfg.absolute_positions {
        let position = name("embeddings.position_embeddings.weight");
        weights.check_config_size("max_position_embeddings", cfg.max_positions, &position, 0)?;
    }
    if cfg.type_vocab > 0 {
        let types = name("embeddings.token_type_embeddings.weight");
        weights.check_config_size("type_vocab_size", cfg.type_vocab, &types, 0)?;
    }
    let norm = name("embeddings.LayerNorm.weight");
    weights.check_config_size("hidden_size", cfg.hidden, &norm, 0)?;
    let rel = name("encoder.rel_embeddings.weight");
    let key = match cfg.relative.buckets {
        Some(_) => "position_buckets",
        None => "max_relative_positions",
    };
    weights.check_config_size(key, cfg.relative.span().saturating_mul(2), &rel, 0)?;
    w.check_layer_sizes(&ATTENTION, cfg.layers, cfg.intermediate)?;
    if !cfg.share_att_key {
        for (on, proj, what) in [
            (cfg.c2p, "pos_key_proj", "c2p"),
            (cfg.p2c, "pos_query_proj", "p2c"),
        ] {
            let t = name(&format!("encoder.layer.0.attention.self.{proj}.weight"));
            if on && !weights.has(&t) {
                return Err(Error::model(format!(
                    "{}: pos_att_type has {what:?} and share_att_key is false, but there is \
                     no tensor {t}",
                    weights.config_path().display()
                )));
            }
        }
    }
    Ok(())
}

/// `rows` rows of `x` (`(rows, inputs)`) through `linear`, then times `scale`.
fn project(linear: &Linear, x: &[f32], rows: usize, scale: f32) -> Vec<f32> {
    let mut out = vec![0.0; rows * linear.outputs];
    linear.forward(x, rows, &mut out);
    out.iter_mut().for_each(|v| *v *= scale);
    out
}

impl DebertaEncoder {
    /// Loads the encoder from `w` with the shapes `cfg` implies, after checking them against
    /// the safetensors header; a missing tensor or a wrong shape is an [`Error::Model`] naming
    /// the file and the tensor. With [`Precision::Int8`] the layers' linear layers are
    /// quantized; embeddings, norms and the position projections (computed at load from the
    /// f32 weights) stay in f32. [`Precision::Bf16`] is refused.
    pub fn load(w: &EncoderWeights, cfg: DebertaConfig, precision: Precision) -> Result<Self> {
        check_f32_or_int8(precision, "DeBERTa encoder")?;
        check_config(w, &cfg)?;
        let (h, i, e) = (cfg.hidden, cfg.intermediate, cfg.embedding);
        let word = w.encoder("embeddings.word_embeddings.weight", &[cfg.vocab, e])?;
        let position = match cfg.absolute_positions {
            true => w.encoder(
                "embeddings.position_embeddings.weight",
                &[cfg.max_positions, e],
            )?,
            false => Vec::new(),
        };
        let token_type = match cfg.type_vocab {
            0 => Vec::new(),
            n => w.encoder("embeddings.token_type_embeddings.weight", &[n, e])?,
        };
        let embed_proj = match e == h {
            true => None,
            false => Some(Linear {
                weight: Weight::F32(w.encoder("embeddings.embed_proj.weight", &[h, e])?),
                bias: vec![0.0; h],
                inputs: e,
                outputs: h,
            }),
        };
        let embed_norm = w.norm("embeddings.LayerNorm", h)?;
        // The relative embeddings, layer-normed with norm_rel_ebd.
        let span2 = 2 * cfg.relative.span();
        let mut rel = w.encoder("encoder.rel_embeddings.weight", &[span2, h])?;
        if cfg.norm_rel {
            let norm = w.norm("encoder.LayerNorm", h)?;
            for row in rel.chunks_exact_mut(h) {
                layer_norm_row(row, &norm.weight, &norm.bias, cfg.eps);
            }
        }
        let scale = 1.0 / ((cfg.head_dim() as f32) * cfg.scale_factor() as f32).sqrt();
        let layers = (0..cfg.layers)
            .map(|n| {
                let att = format!("encoder.layer.{n}.attention");
                let [q, k, v] = w.qkv(n, &ATTENTION, h)?;
                let pos_key = match (cfg.c2p, cfg.share_att_key) {
                    (false, _) => Vec::new(),
                    (true, true) => project(&k, &rel, span2, scale),
                    (true, false) => {
                        let p = w.encoder_linear(&format!("{att}.self.pos_key_proj"), h, h)?;
                        project(&p, &rel, span2, scale)
                    }
                };
                let pos_query = match (cfg.p2c, cfg.share_att_key) {
                    (false, _) => Vec::new(),
                    (true, true) => project(&q, &rel, span2, scale),
                    (true, false) => {
                        let p = w.encoder_linear(&format!("{att}.self.pos_query_proj"), h, h)?;
                        project(&p, &rel, span2, scale)
                    }
                };
                Ok(Layer {
                    base: w.post_norm_layer(n, &ATTENTION, [q, k, v], (h, i), precision)?,
                    pos_key,
                    pos_query,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(DebertaEncoder {
            cfg,
            word,
            position,
            token_type,
            embed_proj,
            embed_norm,
            layers,
            scale,
            precision,
        })
    }

    /// The number format of the linear layers.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The configuration.
    pub fn config(&self) -> &DebertaConfig {
        &self.cfg
    }

    /// Checks that every sequence can be encoded: non-empty, no longer than
    /// `max_position_embeddings`, ids inside the vocabularies (token types only where the
    /// model has them).
    fn check(&self, seqs: &[Sequence<'_>]) -> Result<()> {
        let types = (self.cfg.type_vocab > 0).then_some(self.cfg.type_vocab);
        check_sequences(seqs, self.cfg.max_positions, self.cfg.vocab, types)
    }

    /// Runs the encoder on `seqs` packed together. Returns the last hidden states, row-major
    /// with `hidden` columns: one row per token for [`Output::AllTokens`] (sequences in order),
    /// one row per sequence for [`Output::FirstToken`].
    pub fn forward(&self, seqs: &[Sequence<'_>], output: Output) -> Result<Vec<f32>> {
        self.check(seqs)?;
        let Some(packed) = Packed::of(seqs) else {
            return Ok(Vec::new());
        };
        // The relative embeddings' row of every `delta = i - j` the batch has (sized by the
        // input, which is checked against max_position_embeddings, not by the config alone).
        let longest = packed.longest() as i64;
        let rows: Vec<usize> = (1 - longest..longest)
            .map(|d| self.cfg.relative.row(d))
            .collect();
        let mut ws = Workspace::new(packed.total, self.cfg.hidden);
        self.embed(seqs, &mut ws);
        output.each_layer(&self.layers, |layer, first_only| {
            let batch = Batch {
                lens: &packed.lens,
                starts: &packed.starts,
                rows: &rows,
                first_only,
            };
            self.layer(layer, &mut ws, &batch);
        });
        Ok(packed.last_states(ws.x, self.cfg.hidden, output))
    }

    /// Word (+ position) (+ token type) embeddings, projected to `hidden` when the widths
    /// differ, then layer norm, into `ws.x`.
    fn embed(&self, seqs: &[Sequence<'_>], ws: &mut Workspace) {
        let (h, e) = (self.cfg.hidden, self.cfg.embedding);
        let rows = token_rows(seqs, 0);
        let mut sums = match self.embed_proj {
            None => std::mem::take(&mut ws.x),
            Some(_) => vec![0.0; rows.len() * e],
        };
        sums.par_chunks_mut(e)
            .zip(rows.par_iter())
            .for_each(|(row, &(id, pos, t))| {
                row.copy_from_slice(&self.word[id as usize * e..][..e]);
                if !self.position.is_empty() {
                    let p = &self.position[pos * e..][..e];
                    row.iter_mut().zip(p).for_each(|(v, p)| *v += p);
                }
                if !self.token_type.is_empty() {
                    let tt = &self.token_type[t as usize * e..][..e];
                    row.iter_mut().zip(tt).for_each(|(v, t)| *v += t);
                }
            });
        ws.x = match &self.embed_proj {
            None => sums,
            Some(proj) => {
                let mut x = std::mem::take(&mut ws.x);
                proj.forward(&sums, rows.len(), &mut x);
                x
            }
        };
        let norm = &self.embed_norm;
        ws.x.par_chunks_mut(h)
            .for_each(|row| layer_norm_row(row, &norm.weight, &norm.bias, self.cfg.eps));
    }

    /// One layer over the packed rows in `ws.x`. With `first_only`, only each sequence's first
    /// row is computed past the keys and values, and `ws.x` ends with one row per sequence.
    fn layer(&self, l: &Layer, ws: &mut Workspace, batch: &Batch<'_>) {
        let cfg = &self.cfg;
        let packed = (batch.lens, batch.starts);
        let model = (cfg.hidden, cfg.eps, cfg.act);
        l.forward(ws, packed, batch.first_only, model, |qkv, ctx| {
            self.attention(l, qkv, ctx, batch)
        });
    }

    /// Disentangled attention within each sequence, all heads, into `ctx`: one row per token
    /// (or per sequence with `first_only`, whose query is the sequence's first token).
    fn attention(&self, l: &Layer, qkv: &[f32], ctx: &mut [f32], batch: &Batch<'_>) {
        let cfg = &self.cfg;
        let (h, heads, d) = (cfg.hidden, cfg.heads, cfg.head_dim());
        let lens = batch.lens;
        let all = Mat::new(qkv, lens.iter().sum(), 3 * h);
        let span2 = 2 * cfg.relative.span();
        let queries = |s: usize| if batch.first_only { 1 } else { lens[s] };
        let terms = Terms {
            pos_key: (!l.pos_key.is_empty()).then(|| Mat::new(&l.pos_key, span2, h)),
            pos_query: (!l.pos_query.is_empty()).then(|| Mat::new(&l.pos_query, span2, h)),
            rows: batch.rows,
            scale: self.scale,
        };
        // One task per (sequence, head), each into its own `(queries, d)` block.
        let tasks: Vec<(usize, usize)> = (0..lens.len())
            .flat_map(|s| (0..heads).map(move |hd| (s, hd)))
            .collect();
        let blocks: Vec<Vec<f32>> = tasks
            .par_iter()
            .map(|&(s, hd)| {
                let (start, len, nq) = (batch.starts[s], lens[s], queries(s));
                let q = all.block(start, nq, hd * d, d);
                let k = all.block(start, len, h + hd * d, d);
                let v = all.block(start, len, 2 * h + hd * d, d);
                let mut out = vec![0.0f32; nq * d];
                with_scratch(&SCRATCH, |scratch| {
                    terms.head(q, k, v, hd * d, scratch, &mut out);
                });
                out
            })
            .collect();
        // Scatter: row r of sequence s, head hd <- blocks[s * heads + hd][r].
        let mut per_seq: Vec<&mut [f32]> = Vec::with_capacity(lens.len());
        let mut rest = ctx;
        for s in 0..lens.len() {
            let (mine, tail) = rest.split_at_mut(queries(s) * h);
            per_seq.push(mine);
            rest = tail;
        }
        per_seq.into_par_iter().enumerate().for_each(|(s, out)| {
            for (r, row) in out.chunks_exact_mut(h).enumerate() {
                for hd in 0..heads {
                    let block = &blocks[s * heads + hd];
                    row[hd * d..(hd + 1) * d].copy_from_slice(&block[r * d..(r + 1) * d]);
                }
            }
        });
    }
}

/// Where a batch's sequences are, the relative rows they read, and whether the queries are
/// their first tokens only.
struct Batch<'a> {
    lens: &'a [usize],
    starts: &'a [usize],
    /// `rows[delta + longest - 1]`: the relative embeddings' row for query `i` and key `j`
    /// with `i - j = delta`, for every delta of the batch's longest sequence.
    rows: &'a [usize],
    first_only: bool,
}

/// One layer's attention terms beside the content one.
struct Terms<'a> {
    /// `(2 span, hidden)` position keys (`c2p`), already scaled.
    pos_key: Option<Mat<'a>>,
    /// `(2 span, hidden)` position queries (`p2c`), already scaled.
    pos_query: Option<Mat<'a>>,
    /// The relative embeddings' row of each `delta + longest - 1` (`Batch::rows`).
    rows: &'a [usize],
    /// `1 / sqrt(head_dim * scale_factor)`.
    scale: f32,
}

/// One task's buffers, reused across calls on a thread.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    c2p: Vec<f32>,
    p2c: Vec<f32>,
    /// Per `delta` of this sequence, the column of `c2p` / `p2c` it reads.
    cols: Vec<usize>,
}

thread_local! {
    /// The attention buffers of this thread.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

impl Terms<'_> {
    /// Attention of one head of one sequence: queries `q` `(nq, d)` (the sequence's first
    /// `nq` tokens), keys `k` and values `v` `(n, d)`, the head's columns starting at `col` of
    /// the position projections; `(nq, d)` into `out`.
    fn head(
        &self,
        q: Mat<'_>,
        k: Mat<'_>,
        v: Mat<'_>,
        col: usize,
        scratch: &mut Scratch,
        out: &mut [f32],
    ) {
        let (nq, n, d) = (q.rows, k.rows, q.cols);
        let Scratch {
            scores,
            c2p,
            p2c,
            cols,
        } = scratch;
        scores.clear();
        scores.resize(nq * n, 0.0);
        matmul(q, k.t(), scores, n, self.scale, false, Threads::One);
        if self.pos_key.is_some() || self.pos_query.is_some() {
            // delta = i - j runs over 1 - n ..= nq - 1; the rows it reads are contiguous.
            let zero = self.rows.len() / 2;
            let deltas = &self.rows[zero + 1 - n..zero + nq];
            let (lo, hi) = (deltas[0], deltas[deltas.len() - 1]);
            let width = hi - lo + 1;
            cols.clear();
            cols.extend(deltas.iter().map(|r| r - lo));
            let term = |pos: Option<Mat<'_>>, x: Mat<'_>, buf: &mut Vec<f32>| {
                buf.clear();
                if let Some(pos) = pos {
                    buf.resize(x.rows * width, 0.0);
                    let rows = pos.block(lo, width, col, d);
                    matmul(x, rows.t(), buf, width, 1.0, false, Threads::One);
                }
            };
            term(self.pos_key, q, c2p);
            term(self.pos_query, k, p2c);
            // scores[i][j] += c2p[i][col(i - j)] + p2c[j][col(i - j)]; delta = i - j sits
            // at cols[i - j + n - 1].
            for (i, row) in scores.chunks_exact_mut(n).enumerate() {
                let at = &cols[i..i + n];
                match (c2p.is_empty(), p2c.is_empty()) {
                    (false, false) => {
                        let c = &c2p[i * width..][..width];
                        for (j, s) in row.iter_mut().enumerate() {
                            let r = at[n - 1 - j];
                            *s += c[r] + p2c[j * width + r];
                        }
                    }
                    (false, true) => {
                        let c = &c2p[i * width..][..width];
                        for (j, s) in row.iter_mut().enumerate() {
                            *s += c[at[n - 1 - j]];
                        }
                    }
                    (true, false) => {
                        for (j, s) in row.iter_mut().enumerate() {
                            *s += p2c[j * width + at[n - 1 - j]];
                        }
                    }
                    (true, true) => {}
                }
            }
        }
        softmax_rows(scores, n);
        matmul(Mat::new(scores, nq, n), v, out, d, 1.0, false, Threads::One);
    }
}
