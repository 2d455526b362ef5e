//! A packed BERT-family encoder forward pass (BERT, ELECTRA, and RoBERTa/XLM-R position
//! numbering) for inference on the CPU.
//!
//! A batch is *packed*: the tokens of all its sequences are concatenated into one
//! `(tokens, hidden)` matrix, so the projections and the feed-forward layers never compute a
//! padding token, and attention runs within each sequence (no mask is needed;
//! `models::layers::attention`). Per layer, as in `transformers`' `BertLayer` (post-norm):
//! `x = LN(x + O · attention(Q x, K x, V x))`, then `x = LN(x + W2 · act(W1 · x))`.
//! ELECTRA's embeddings may be narrower than its layers (`embedding_size`, e.g. 128 for 256
//! in electra-small): its `embeddings_project` maps them to the layers' width.
//!
//! When only each sequence's first token is wanted (classification heads read `[CLS]`), the
//! last layer computes queries, the attention output and the feed-forward part for those rows
//! only. Workspace buffers are allocated once per batch and reused by every layer.

use rayon::prelude::*;
use serde_json::Value;

use crate::models::layers::attention::{attention, check_keys, Heads};
pub(crate) use crate::models::layers::dense::Output;
pub(crate) use crate::models::layers::encoder::{
    check_f32_or_int8, check_sequences, token_rows, AttentionNames, EncoderWeights, Norm, Packed,
    PostNormLayer, Sequence, Workspace,
};
use crate::models::layers::kernels::{layer_norm_row, Act, Linear};
use crate::models::Precision;
use crate::{Error, Result};

/// The shape and options of an encoder, read from `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EncoderConfig {
    pub hidden: usize,
    /// The width of the embedding tables: `embedding_size` (ELECTRA's), else `hidden`. When it
    /// differs from `hidden`, `embeddings_project` maps the embeddings to the layers' width.
    pub embedding: usize,
    pub heads: usize,
    pub layers: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub positions: usize,
    pub type_vocab: usize,
    pub eps: f32,
    pub act: Act,
    /// The position id of the first token: 0 for BERT, `pad_token_id + 1` for RoBERTa-style
    /// models (which number positions after the padding index).
    pub position_offset: usize,
}

impl EncoderConfig {
    /// Reads a BERT (`roberta_positions = false`) or RoBERTa/XLM-R config; `file` names the
    /// file in errors.
    pub fn from_value(v: &Value, file: &std::path::Path, roberta_positions: bool) -> Result<Self> {
        let err = |msg: String| Error::model(format!("{}: {msg}", file.display()));
        let get = |key: &str| -> Result<usize> {
            v.get(key)
                .and_then(Value::as_u64)
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| err(format!("missing or invalid `{key}` (a positive integer)")))
        };
        let hidden = get("hidden_size")?;
        let embedding = match v.get("embedding_size") {
            None | Some(Value::Null) => hidden,
            Some(_) => get("embedding_size")?,
        };
        let heads = get("num_attention_heads")?;
        if hidden % heads != 0 {
            return Err(err(format!(
                "hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
            )));
        }
        let act_name = v
            .get("hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("gelu");
        let act = Act::from_name(act_name).ok_or_else(|| {
            err(format!(
                "unsupported hidden_act {act_name:?} (supported: gelu, gelu_new, \
                 gelu_pytorch_tanh, relu, silu)"
            ))
        })?;
        match v.get("position_embedding_type").and_then(Value::as_str) {
            None | Some("absolute") => {}
            Some(other) => {
                return Err(err(format!(
                    "unsupported position_embedding_type {other:?} (only \"absolute\")"
                )))
            }
        }
        let vocab = get("vocab_size")?;
        let pad = v.get("pad_token_id").and_then(Value::as_u64).unwrap_or(0);
        let pad = match usize::try_from(pad) {
            Ok(p) if p < vocab => p,
            _ => {
                return Err(err(format!(
                    "pad_token_id {pad} is not a token id (vocab_size is {vocab})"
                )))
            }
        };
        Ok(EncoderConfig {
            hidden,
            embedding,
            heads,
            layers: get("num_hidden_layers")?,
            intermediate: get("intermediate_size")?,
            vocab,
            positions: get("max_position_embeddings")?,
            type_vocab: v
                .get("type_vocab_size")
                .and_then(Value::as_u64)
                .unwrap_or(2) as usize,
            eps: v
                .get("layer_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-12) as f32,
            act,
            position_offset: if roberta_positions { pad + 1 } else { 0 },
        })
    }

    /// The longest sequence the position embeddings cover.
    pub fn max_length(&self) -> usize {
        self.positions.saturating_sub(self.position_offset)
    }

    fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// One encoder layer.
type Layer = PostNormLayer;

/// Where BERT's attention tensors are.
const ATTENTION: AttentionNames = AttentionNames {
    q: "self.query",
    k: "self.key",
    v: "self.value",
    out: "output.dense",
    norm: "output.LayerNorm",
};

/// A BERT-family encoder's weights in float32.
#[derive(Debug, Clone)]
pub(crate) struct Encoder {
    cfg: EncoderConfig,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embed_norm: Norm,
    /// ELECTRA's `embeddings_project` (`embedding` to `hidden`, f32), when the widths differ.
    project: Option<Linear>,
    layers: Vec<Layer>,
    precision: Precision,
}

/// Checks every size `config.json` gives against the tensor shapes in the safetensors
/// header, before any of them sizes an allocation: a mismatch is an [`Error::Model`] naming
/// `config.json` and the key (see `Weights::check_config_size`). First refuses a
/// `precision` other than f32 and int8.
fn check_config(weights: &EncoderWeights, cfg: &EncoderConfig, precision: Precision) -> Result<()> {
    check_f32_or_int8(precision, "BERT-family encoders")?;
    let width = match cfg.embedding == cfg.hidden {
        true => "hidden_size",
        false => "embedding_size",
    };
    weights.check_embedding_sizes((width, cfg.embedding), cfg.vocab, cfg.positions)?;
    let token_type = weights.encoder_name("embeddings.token_type_embeddings.weight");
    weights
        .weights()
        .check_config_size("type_vocab_size", cfg.type_vocab, &token_type, 0)?;
    weights.check_layer_sizes(&ATTENTION, cfg.layers, cfg.intermediate)
}

impl Encoder {
    /// Loads the encoder from `w` (`embeddings.*`, `encoder.layer.N.*`, and ELECTRA's
    /// `embeddings_project` when the embeddings are narrower than the layers), with the shapes
    /// `cfg` implies; a missing tensor or a wrong shape is an [`Error::Model`] naming the file
    /// and the tensor. With [`Precision::Int8`] the linear layers of every encoder layer are
    /// quantized (see `models::layers::quant`); embeddings and layer norms stay in f32.
    pub fn load(w: &EncoderWeights, cfg: EncoderConfig, precision: Precision) -> Result<Self> {
        check_config(w, &cfg, precision)?;
        let (h, i, e) = (cfg.hidden, cfg.intermediate, cfg.embedding);
        let word = w.encoder("embeddings.word_embeddings.weight", &[cfg.vocab, e])?;
        let position = w.encoder("embeddings.position_embeddings.weight", &[cfg.positions, e])?;
        let token_type = w.encoder(
            "embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab, e],
        )?;
        let embed_norm = w.norm("embeddings.LayerNorm", e)?;
        let project = match e == h {
            true => None,
            false => Some(w.encoder_linear("embeddings_project", h, e)?),
        };
        let layers = w.post_norm_layers(cfg.layers, &ATTENTION, (h, i), precision)?;
        Ok(Encoder {
            cfg,
            word,
            position,
            token_type,
            embed_norm,
            project,
            layers,
            precision,
        })
    }

    /// The number format of the linear layers.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// Checks that every sequence can be encoded: non-empty, no longer than the position
    /// table, ids inside the vocabularies.
    fn check(&self, seqs: &[Sequence<'_>]) -> Result<()> {
        check_sequences(
            seqs,
            self.cfg.max_length(),
            self.cfg.vocab,
            Some(self.cfg.type_vocab),
        )
    }

    /// Runs the encoder on `seqs` packed together. Returns the last hidden states, row-major
    /// with `hidden` columns: one row per token for [`Output::AllTokens`] (sequences in order),
    /// one row per sequence for [`Output::FirstToken`].
    pub fn forward(&self, seqs: &[Sequence<'_>], output: Output) -> Result<Vec<f32>> {
        self.forward_attending(seqs, None, output)
    }

    /// [`Encoder::forward`] with sequence `i`'s tokens attending to its first `keys[i]` tokens
    /// only (all of them without `keys`): the tokens past them are queries and never keys, as
    /// ColBERT's query expansion tokens are.
    pub fn forward_attending(
        &self,
        seqs: &[Sequence<'_>],
        keys: Option<&[usize]>,
        output: Output,
    ) -> Result<Vec<f32>> {
        self.check(seqs)?;
        let Some(packed) = Packed::of(seqs) else {
            return Ok(Vec::new());
        };
        let keys = check_keys(keys, &packed.lens)?;
        let mut ws = Workspace::new(packed.total, self.cfg.hidden);
        self.embed(seqs, &mut ws.x);
        output.each_layer(&self.layers, |layer, first_only| {
            self.layer(
                layer,
                &mut ws,
                [&packed.lens, &packed.starts, &keys],
                first_only,
            );
        });
        Ok(packed.last_states(ws.x, self.cfg.hidden, output))
    }

    /// Word + position + token type embeddings, then layer norm (then ELECTRA's projection),
    /// into `x`.
    fn embed(&self, seqs: &[Sequence<'_>], x: &mut [f32]) {
        let Some(project) = &self.project else {
            return self.embed_rows(seqs, x);
        };
        let rows = x.len() / self.cfg.hidden;
        let mut narrow = vec![0.0; rows * self.cfg.embedding];
        self.embed_rows(seqs, &mut narrow);
        project.forward(&narrow, rows, x);
    }

    /// Word + position + token type embeddings, then layer norm, into `x` (`embedding` wide).
    fn embed_rows(&self, seqs: &[Sequence<'_>], x: &mut [f32]) {
        let h = self.cfg.embedding;
        let rows = token_rows(seqs, self.cfg.position_offset);
        x.par_chunks_mut(h)
            .zip(rows.par_iter())
            .for_each(|(row, &(id, pos, t))| {
                let w = &self.word[id as usize * h..][..h];
                let p = &self.position[pos * h..][..h];
                let tt = &self.token_type[t as usize * h..][..h];
                for (j, v) in row.iter_mut().enumerate() {
                    *v = w[j] + p[j] + tt[j];
                }
                layer_norm_row(
                    row,
                    &self.embed_norm.weight,
                    &self.embed_norm.bias,
                    self.cfg.eps,
                );
            });
    }

    /// One layer over the packed rows in `ws.x`. With `first_only`, only each sequence's first
    /// row is computed past the keys and values, and `ws.x` ends with one row per sequence.
    fn layer(
        &self,
        l: &Layer,
        ws: &mut Workspace,
        [lens, starts, keys]: [&[usize]; 3],
        first_only: bool,
    ) {
        let cfg = &self.cfg;
        let shape = Heads {
            hidden: cfg.hidden,
            heads: cfg.heads,
            dim: cfg.head_dim(),
        };
        let model = (cfg.hidden, cfg.eps, cfg.act);
        l.forward(ws, (lens, starts), first_only, model, |qkv, ctx| {
            attention(qkv, ctx, lens, starts, keys, shape, None, first_only)
        });
    }
}
