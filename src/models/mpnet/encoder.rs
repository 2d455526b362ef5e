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
//!   (`layers::relative`: T5's 32 log buckets with max distance 128, whatever the config's
//!   bucket count).
//! - Per layer (post-norm, as BERT): `x = LN(x + O · softmax(Q Kᵀ / √d + bias) V)`, then
//!   `x = LN(x + W2 · act(W1 · x))`.
//!
//! When only each sequence's first token is wanted (CLS pooling), the last layer computes
//! queries, the attention output and the feed-forward part for those rows only.

use super::config::{MpnetConfig, MAX_DISTANCE, NUM_BUCKETS, PADDING_IDX};
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{
    check_f32_or_int8, check_sequences, embed_words_and_positions, AttentionNames, EncoderWeights,
    Norm, Packed, PostNormLayer, Sequence, Workspace,
};
use crate::models::layers::relative::{biased_attention, BiasedBatch, Buckets, PositionBias};
use crate::models::Precision;
use crate::Result;

/// The tensor-name prefixes the encoder may sit under (`MPNetForMaskedLM`'s `mpnet.`); a bare
/// `MPNetModel`, as sentence-transformers saves it, has its tensors at the root.
pub(crate) const PREFIXES: &[&str] = &["mpnet"];

/// MPNet's buckets: T5's defaults, whatever the config says.
const BUCKETS: Buckets = Buckets {
    count: NUM_BUCKETS,
    max_distance: MAX_DISTANCE,
    bidirectional: true,
};

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
        let bias = PositionBias::new(&self.relative, self.cfg.heads, BUCKETS, packed.longest());
        let mut ws = Workspace::new(packed.total, self.cfg.hidden);
        self.embed(seqs, &mut ws.x);
        output.each_layer(&self.layers, |layer, first_only| {
            let batch = BiasedBatch {
                lens: &packed.lens,
                starts: &packed.starts,
                bias: &bias,
                first_only,
            };
            self.layer(layer, &mut ws, &batch);
        });
        Ok(packed.last_states(ws.x, self.cfg.hidden, output))
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
    fn layer(&self, l: &Layer, ws: &mut Workspace, batch: &BiasedBatch<'_>) {
        let cfg = &self.cfg;
        let packed = (batch.lens, batch.starts);
        let model = (cfg.hidden, cfg.eps, cfg.act);
        l.forward(ws, packed, batch.first_only, model, |qkv, ctx| {
            let d = cfg.head_dim();
            biased_attention(qkv, ctx, batch, (cfg.heads, d), 1.0 / (d as f32).sqrt())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
