//! The packed MPNet encoder forward pass (transformers' `MPNetModel`, the encoder of
//! all-mpnet-base-v2 and multi-qa-mpnet-base-dot-v1) on the shared CPU kernels.
//!
//! A batch is *packed* as in the BERT encoder (`bert::encoder`): the tokens of all its
//! sequences are concatenated into one `(tokens, hidden)` matrix, the projections and the
//! feed-forward layers run over real tokens only, and attention runs within each sequence.
//! transformers pads a batch and masks the padded keys; a real token's keys, position ids and
//! relative positions are the same either way, so its outputs are too.
//!
//! - Positions: `pos = cumsum(id != 1) * (id != 1) + 1` over the sequence ([`position_ids`]):
//!   2, 3, ... for a sequence without id 1 (RoBERTa's numbering after the padding index, which
//!   MPNet hard-codes as 1); a literal `<pad>` (id 1) inside a text gets position 1 and does
//!   not advance the count.
//! - Embeddings: `LN(word[id] + position[pos])`; no token types.
//! - Relative position bias, computed once per batch and added to every layer's scores:
//!   `bias[h][i][j] = relative_attention_bias[bucket(j - i)][h]` for query `i` and key `j`
//!   ([`relative_bucket`]: T5's 32 log buckets with max distance 128, whatever the config's
//!   bucket count).
//! - Per layer (post-norm, as BERT): `x = LN(x + O · softmax(Q Kᵀ / √d + bias) V)`, then
//!   `x = LN(x + W2 · act(W1 · x))`.
//!
//! Attention runs one task per (sequence, block of queries), every head: the block's scores
//! over its sequence's keys, the bias row of each query added (for query `i`, the keys' biases
//! are a contiguous run of the per-offset table), a row softmax and the product with the
//! values, each head written straight into the context. When only each sequence's first token
//! is wanted (CLS pooling), the last layer computes queries, the attention output and the
//! feed-forward part for those rows only.

use std::cell::RefCell;

use rayon::prelude::*;

use super::config::{MpnetConfig, MAX_DISTANCE, NUM_BUCKETS, PADDING_IDX};
use crate::models::layers::attention::QUERY_BLOCK;
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{
    check_f32_or_int8, check_sequences, embed_words_and_positions, AttentionNames, EncoderWeights,
    Norm, Packed, PostNormLayer, Sequence, Workspace,
};
use crate::models::layers::kernels::{matmul, softmax_rows, with_scratch, Mat, Threads};
use crate::models::Precision;
use crate::Result;

/// The tensor-name prefixes the encoder may sit under (`MPNetForMaskedLM`'s `mpnet.`); a bare
/// `MPNetModel`, as sentence-transformers saves it, has its tensors at the root.
pub(crate) const PREFIXES: &[&str] = &["mpnet"];

/// The relative-position bucket of key `j` for query `i`, `rel = j - i`: transformers'
/// `MPNetEncoder.relative_position_bucket` with 32 buckets and max distance 128. With
/// `m = |rel|`, keys after the query (`rel > 0`) take the upper 16 buckets; `m < 8` is its own
/// bucket, and from 8 on, `8 + floor(ln(m / 8) / ln(16) · 8)` up to 15. That is
/// `2 + floor(log2(m²))`, computed here on integers, so the boundaries are exact (8-11 -> 8,
/// 12-15 -> 9, 16-22 -> 10, 23-31 -> 11, 32-45 -> 12, 46-63 -> 13, 64-90 -> 14, >= 91 -> 15;
/// torch's float32 logarithm gives the same ones).
pub(crate) fn relative_bucket(rel: i64) -> usize {
    let half = NUM_BUCKETS / 2;
    let exact = half / 2;
    let side = if rel > 0 { half } else { 0 };
    let m = rel.unsigned_abs();
    if m < exact as u64 {
        return side + m as usize;
    }
    if m >= MAX_DISTANCE as u64 {
        return side + half - 1;
    }
    // floor(2 log2 m) = floor(log2 m²) = the index of m²'s highest bit; m < 128, so m² fits.
    let log = (m * m).ilog2() as usize;
    side + (2 + log).min(half - 1)
}

/// MPNet's position ids of one sequence: after the padding index 1 (`pos = count of ids
/// != 1 so far + 1` for a token that is not 1, else 1), as transformers'
/// `create_position_ids_from_input_ids`.
pub(crate) fn position_ids(ids: &[u32]) -> impl Iterator<Item = usize> + '_ {
    let pad = PADDING_IDX as usize;
    ids.iter().scan(pad, move |count, &id| {
        Some(match id == PADDING_IDX {
            true => pad,
            false => {
                *count += 1;
                *count
            }
        })
    })
}

/// One encoder layer.
type Layer = PostNormLayer;

/// Where MPNet's attention tensors are.
const ATTENTION: AttentionNames = AttentionNames {
    q: "attn.q",
    k: "attn.k",
    v: "attn.v",
    out: "attn.o",
    norm: "LayerNorm",
};

/// An MPNet encoder's weights: embeddings, layer norms and the relative bias in f32, linear
/// layers in f32 panels or int8.
#[derive(Debug)]
pub(crate) struct MpnetEncoder {
    cfg: MpnetConfig,
    /// `(vocab, hidden)`.
    word: Vec<f32>,
    /// `(max_position_embeddings, hidden)`.
    position: Vec<f32>,
    embed_norm: Norm,
    /// The first [`NUM_BUCKETS`] rows of `relative_attention_bias`, `(buckets, heads)`.
    relative: Vec<f32>,
    layers: Vec<Layer>,
}

/// Checks every size `config.json` gives against the tensor shapes in the safetensors
/// header, before any of them sizes an allocation: a mismatch is an [`Error::Model`] naming
/// `config.json` and the key. First refuses a `precision` other than f32 and int8.
fn check_config(weights: &EncoderWeights, cfg: &MpnetConfig, precision: Precision) -> Result<()> {
    check_f32_or_int8(precision, "MPNet encoder")?;
    weights.check_embedding_sizes(("hidden_size", cfg.hidden), cfg.vocab, cfg.positions)?;
    let w = weights.weights();
    let relative = weights.encoder_name("encoder.relative_attention_bias.weight");
    w.check_config_size("relative_attention_num_buckets", cfg.buckets, &relative, 0)?;
    w.check_config_size("num_attention_heads", cfg.heads, &relative, 1)?;
    weights.check_layer_sizes(&ATTENTION, cfg.layers, cfg.intermediate)
}

impl MpnetEncoder {
    /// Loads the encoder from `w` (`embeddings.*`, `encoder.layer.N.*`,
    /// `encoder.relative_attention_bias.weight`, under `mpnet.` or at the root) with the
    /// shapes `cfg` implies, after checking them against the safetensors header; a missing
    /// tensor or a wrong shape is an [`Error::Model`] naming the file and the tensor. With
    /// [`Precision::Int8`] the linear layers are quantized; bf16 is refused.
    pub fn load(w: &EncoderWeights, cfg: MpnetConfig, precision: Precision) -> Result<Self> {
        check_config(w, &cfg, precision)?;
        let (h, i) = (cfg.hidden, cfg.intermediate);
        let relative = w.encoder(
            "encoder.relative_attention_bias.weight",
            &[cfg.buckets, cfg.heads],
        )?;
        let layers = w.post_norm_layers(cfg.layers, &ATTENTION, (h, i), precision)?;
        Ok(MpnetEncoder {
            word: w.encoder("embeddings.word_embeddings.weight", &[cfg.vocab, h])?,
            position: w.encoder("embeddings.position_embeddings.weight", &[cfg.positions, h])?,
            embed_norm: w.norm("embeddings.LayerNorm", h)?,
            relative: relative[..NUM_BUCKETS * cfg.heads].to_vec(),
            layers,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MpnetConfig {
        &self.cfg
    }

    /// Runs the encoder on `seqs` packed together (token types are ignored: MPNet has none).
    /// Returns the last hidden states, row-major with `hidden` columns: one row per token for
    /// [`Output::AllTokens`] (sequences in order), one row per sequence for
    /// [`Output::FirstToken`].
    pub fn forward(&self, seqs: &[Sequence<'_>], output: Output) -> Result<Vec<f32>> {
        check_sequences(seqs, self.cfg.max_length(), self.cfg.vocab, None)?;
        let Some(packed) = Packed::of(seqs) else {
            return Ok(Vec::new());
        };
        let bias = self.position_bias(packed.longest());
        let mut ws = Workspace::new(packed.total, self.cfg.hidden);
        self.embed(seqs, &mut ws.x);
        output.each_layer(&self.layers, |layer, first_only| {
            let batch = Batch {
                lens: &packed.lens,
                starts: &packed.starts,
                bias: &bias,
                first_only,
            };
            self.layer(layer, &mut ws, &batch);
        });
        Ok(packed.last_states(ws.x, self.cfg.hidden, output))
    }

    /// The bias of every head and key offset a batch whose longest sequence has `longest`
    /// tokens needs, shared by every layer.
    fn position_bias(&self, longest: usize) -> PositionBias {
        let heads = self.cfg.heads;
        let width = 2 * longest - 1;
        let mut values = vec![0.0f32; heads * width];
        for (at, rel) in (1 - longest as i64..longest as i64).enumerate() {
            let row = &self.relative[relative_bucket(rel) * heads..][..heads];
            for (hd, &b) in row.iter().enumerate() {
                values[hd * width + at] = b;
            }
        }
        PositionBias {
            values,
            width,
            longest,
        }
    }

    /// Word + position embeddings, then layer norm, into `x`.
    fn embed(&self, seqs: &[Sequence<'_>], x: &mut [f32]) {
        let rows: Vec<(u32, usize)> = seqs
            .iter()
            .flat_map(|s| s.ids.iter().copied().zip(position_ids(s.ids)))
            .collect();
        let tables = (&self.word[..], &self.position[..]);
        embed_words_and_positions(x, &rows, tables, &self.embed_norm, self.cfg.eps);
    }

    /// One layer over the packed rows in `ws.x`. With `batch.first_only`, only each
    /// sequence's first row is computed past the keys and values, and `ws.x` ends with one row
    /// per sequence.
    fn layer(&self, l: &Layer, ws: &mut Workspace, batch: &Batch<'_>) {
        let cfg = &self.cfg;
        let packed = (batch.lens, batch.starts);
        let model = (cfg.hidden, cfg.eps, cfg.act);
        l.forward(ws, packed, batch.first_only, model, |qkv, ctx| {
            self.attention(qkv, ctx, batch)
        });
    }

    /// Attention with the relative bias within each sequence, all heads, into `ctx`: one row
    /// per token (or per sequence with `first_only`, whose query is the sequence's first
    /// token). One task per (sequence, block of [`QUERY_BLOCK`] queries), with its rows of
    /// `ctx`.
    fn attention(&self, qkv: &[f32], ctx: &mut [f32], batch: &Batch<'_>) {
        let cfg = &self.cfg;
        let (h, heads, d) = (cfg.hidden, cfg.heads, cfg.head_dim());
        let lens = batch.lens;
        let all = Mat::new(qkv, lens.iter().sum(), 3 * h);
        let scale = 1.0 / (d as f32).sqrt();
        let queries = |len: usize| if batch.first_only { 1 } else { len };
        let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::new();
        let mut rest = ctx;
        for (s, &len) in lens.iter().enumerate() {
            let (mine, tail) = rest.split_at_mut(queries(len) * h);
            rest = tail;
            for (b, rows) in mine.chunks_mut(QUERY_BLOCK * h).enumerate() {
                tasks.push((s, b * QUERY_BLOCK, rows));
            }
        }
        let bias = batch.bias;
        tasks.into_par_iter().for_each(|(s, q0, out)| {
            let (start, n) = (batch.starts[s], lens[s]);
            let nq = out.len() / h;
            with_scratch(&SCORES, |scores| {
                scores.resize(nq * n, 0.0);
                let scores = &mut scores[..nq * n];
                for hd in 0..heads {
                    let q = all.block(start + q0, nq, hd * d, d);
                    let k = all.block(start, n, h + hd * d, d);
                    let v = all.block(start, n, 2 * h + hd * d, d);
                    matmul(q, k.t(), scores, n, scale, false, Threads::One);
                    for (r, row) in scores.chunks_exact_mut(n).enumerate() {
                        let b = bias.keys(hd, q0 + r, n);
                        row.iter_mut().zip(b).for_each(|(s, b)| *s += b);
                    }
                    softmax_rows(scores, n);
                    let p = Mat::new(scores, nq, n);
                    matmul(p, v, &mut out[hd * d..], h, 1.0, false, Threads::One);
                }
            });
        });
    }
}

thread_local! {
    /// Attention scores of one task, reused across calls on this thread.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The relative position bias of a batch: per head, the bias of every key offset
/// `j - i` in `1 - longest ..= longest - 1`, at `j - i + longest - 1`.
struct PositionBias {
    /// `(heads, width)`.
    values: Vec<f32>,
    /// `2 * longest - 1`.
    width: usize,
    /// The batch's longest sequence.
    longest: usize,
}

impl PositionBias {
    /// The biases of head `hd` for query `i` and the keys `0..n` of its sequence, in order.
    fn keys(&self, hd: usize, i: usize, n: usize) -> &[f32] {
        &self.values[hd * self.width + self.longest - 1 - i..][..n]
    }
}

/// Where a batch's sequences are, their relative bias, and whether the queries are their
/// first tokens only.
struct Batch<'a> {
    lens: &'a [usize],
    starts: &'a [usize],
    bias: &'a PositionBias,
    first_only: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's table: (first distance, last distance, bucket) for keys at or before
    /// the query.
    const TABLE: [(u64, u64, usize); 8] = [
        (8, 11, 8),
        (12, 15, 9),
        (16, 22, 10),
        (23, 31, 11),
        (32, 45, 12),
        (46, 63, 13),
        (64, 90, 14),
        (91, u64::MAX, 15),
    ];

    fn from_table(rel: i64) -> usize {
        let m = rel.unsigned_abs();
        let side = if rel > 0 { 16 } else { 0 };
        if m < 8 {
            return side + m as usize;
        }
        let (_, _, b) = TABLE
            .iter()
            .find(|(lo, hi, _)| *lo <= m && m <= *hi)
            .unwrap();
        side + b
    }

    #[test]
    fn buckets_follow_the_table_at_every_boundary_on_both_sides() {
        // Keys before the query (rel < 0) and at it share the lower half; keys after it take
        // 16 more.
        let boundaries: [(i64, usize); 21] = [
            (0, 0),
            (1, 1),
            (7, 7),
            (8, 8),
            (11, 8),
            (12, 9),
            (15, 9),
            (16, 10),
            (22, 10),
            (23, 11),
            (31, 11),
            (32, 12),
            (45, 12),
            (46, 13),
            (63, 13),
            (64, 14),
            (90, 14),
            (91, 15),
            (127, 15),
            (128, 15),
            (100_000, 15),
        ];
        for (m, bucket) in boundaries {
            assert_eq!(relative_bucket(-m), bucket, "key {m} before the query");
            let after = if m == 0 { 0 } else { 16 + bucket };
            assert_eq!(relative_bucket(m), after, "key {m} after the query");
        }
        assert_eq!(relative_bucket(i64::MIN), 15);
        assert_eq!(relative_bucket(i64::MAX), 31);
        for rel in -4096..=4096 {
            assert_eq!(relative_bucket(rel), from_table(rel), "{rel}");
        }
    }

    /// The integer form is transformers' formula evaluated in float64 (as the fixture's
    /// reference.py does).
    #[test]
    fn buckets_are_transformers_formula() {
        for m in 8i64..=4096 {
            let large = 8 + ((m as f64 / 8.0).ln() / 16f64.ln() * 8.0) as usize;
            assert_eq!(relative_bucket(-m), large.min(15), "{m}");
        }
    }

    #[test]
    fn positions_start_after_the_padding_index_and_skip_its_literal() {
        let got: Vec<usize> = position_ids(&[0, 7, 9, 2]).collect();
        assert_eq!(got, [2, 3, 4, 5]);
        // A literal <pad> (id 1) inside a text: position 1, the count does not advance.
        let got: Vec<usize> = position_ids(&[0, 7, 1, 9, 2]).collect();
        assert_eq!(got, [2, 3, 1, 4, 5]);
        let got: Vec<usize> = position_ids(&[1, 1]).collect();
        assert_eq!(got, [1, 1]);
    }
}
