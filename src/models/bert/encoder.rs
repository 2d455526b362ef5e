//! A packed BERT-family encoder forward pass (BERT, and RoBERTa/XLM-R position numbering) for
//! inference on the CPU.
//!
//! A batch is *packed*: the tokens of all its sequences are concatenated into one
//! `(tokens, hidden)` matrix, so the projections and the feed-forward layers never compute a
//! padding token, and attention runs within each sequence (no mask is needed;
//! `models::attention`). Per layer, as in `transformers`' `BertLayer` (post-norm):
//! `x = LN(x + O · attention(Q x, K x, V x))`, then `x = LN(x + W2 · act(W1 · x))`.
//!
//! When only each sequence's first token is wanted (classification heads read `[CLS]`), the
//! last layer computes queries, the attention output and the feed-forward part for those rows
//! only. Workspace buffers are allocated once per batch and reused by every layer.

use std::cell::RefCell;

use rayon::prelude::*;
use serde_json::Value;

use crate::models::attention::{attention, Heads};
use crate::models::dense::Dense;
pub(crate) use crate::models::dense::Output;
use crate::models::dir::{ModelDir, WEIGHTS_FILE};
use crate::models::kernels::{layer_norm_row, with_scratch, Act, Linear, Then, Weight};
use crate::models::quant::QuantRows;
use crate::models::weights::Weights;
use crate::models::{packed_starts, Precision};
use crate::{Error, Result};

/// The shape and options of an encoder, read from `config.json`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EncoderConfig {
    pub hidden: usize,
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

/// A layer norm's scale and shift (the post-norm layers of BERT and DeBERTa).
#[derive(Debug, Clone)]
pub(crate) struct Norm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

impl Norm {
    /// `layer_norm(out + residual)`, as the step after a product.
    pub fn after<'a>(&'a self, residual: &'a [f32], eps: f32) -> Then<'a> {
        Then::AddNorm {
            residual,
            weight: &self.weight,
            bias: &self.bias,
            eps,
        }
    }
}

/// One encoder layer; `qkv` holds the query, key and value projections stacked (`3 * hidden`
/// outputs), so one product computes all three.
#[derive(Debug, Clone)]
struct Layer {
    qkv: Dense,
    out: Dense,
    attn_norm: Norm,
    ff_in: Dense,
    ff_out: Dense,
    ff_norm: Norm,
}

/// One block's feed-forward activations, and their quantized rows in int8.
#[derive(Default)]
struct FfBlock {
    activations: Vec<f32>,
    quant: QuantRows,
}

thread_local! {
    /// The feed-forward block of this thread, reused across calls.
    static FF_BLOCK: RefCell<FfBlock> = RefCell::new(FfBlock::default());
}

/// `out = LN(x + W2 · act(W1 · x))` over `rows` rows, block by block of rows in parallel: a
/// block's `(rows, intermediate)` activations stay in cache between the two products, and the
/// whole matrix is never written. (DeBERTa's layers end the same way.)
pub(crate) fn feed_forward(
    ff_in: &Dense,
    ff_out: &Dense,
    act: Act,
    norm: Then<'_>,
    x: &[f32],
    rows: usize,
    out: &mut [f32],
) {
    let (h, inner) = (ff_out.outputs(), ff_in.outputs());
    if rows == 0 {
        return;
    }
    let block = ff_in.block_rows(rows);
    out[..rows * h]
        .par_chunks_mut(block * h)
        .enumerate()
        .for_each(|(b, out)| {
            let (first, count) = (b * block, out.len() / h);
            let x = &x[first * h..(first + count) * h];
            with_scratch(&FF_BLOCK, |FfBlock { activations, quant }| {
                activations.resize(count * inner, 0.0);
                ff_in.forward_here(x, count, activations, quant, Then::Activate(act), 0);
                ff_out.forward_here(activations, count, out, quant, norm, first);
            });
        });
}

/// One sequence of a batch: token ids and token type ids of equal length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sequence<'a> {
    pub ids: &'a [u32],
    pub types: &'a [u32],
}

/// Checks that every sequence of a packed encoder batch can be encoded: non-empty with one
/// token type per token, at most `max_positions` tokens, ids below `vocab` and, where the
/// model has token type embeddings (`type_vocab`), types below it. An
/// [`Error::InvalidInput`] or [`Error::Model`], never an out-of-bounds read.
pub(crate) fn check_sequences(
    seqs: &[Sequence<'_>],
    max_positions: usize,
    vocab: usize,
    type_vocab: Option<usize>,
) -> Result<()> {
    for s in seqs {
        if s.ids.is_empty() || s.ids.len() != s.types.len() {
            return Err(Error::InvalidInput(
                "an encoder input must be non-empty, with one token type per token".into(),
            ));
        }
        if s.ids.len() > max_positions {
            return Err(Error::InvalidInput(format!(
                "a sequence of {} tokens is longer than the model's {max_positions} positions",
                s.ids.len(),
            )));
        }
        if let Some(id) = s.ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::model(format!(
                "token id {id} is outside the embedding matrix ({vocab} rows): the tokenizer \
                 does not belong to these weights",
            )));
        }
        if let Some(types) = type_vocab {
            if let Some(t) = s.types.iter().find(|&&t| t as usize >= types) {
                return Err(Error::model(format!(
                    "token type {t} is outside the token type embeddings ({types} rows)",
                )));
            }
        }
    }
    Ok(())
}

/// A BERT-family encoder's weights in float32.
#[derive(Debug, Clone)]
pub(crate) struct Encoder {
    cfg: EncoderConfig,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
    precision: Precision,
}

/// The weights of a BERT-family checkpoint, through the one weights loader
/// ([`Weights`]): the encoder's tensors (`embeddings.*`, `encoder.layer.N.*`) sit under
/// `bert.` / `roberta.` in transformers' task-model layout, or at the file's root for a bare
/// encoder; task heads sit at the root.
pub(crate) struct EncoderWeights {
    weights: Weights,
    /// `"bert."`, `"roberta."` or `""`: where the encoder's tensors are.
    prefix: String,
}

impl EncoderWeights {
    /// Maps the checkpoint of `dir` (one file or shards) and finds the encoder under the
    /// first of `prefixes` that has it, or at the root; weights with none are an
    /// [`Error::Model`] naming the file.
    pub fn open(dir: &ModelDir, prefixes: &[&str]) -> Result<Self> {
        let weights = Weights::open(dir.path())?;
        const WORD: &str = "embeddings.word_embeddings.weight";
        let prefix = match prefixes
            .iter()
            .find(|p| weights.has(&format!("{p}.{WORD}")))
        {
            Some(p) => format!("{p}."),
            None if weights.has(WORD) => String::new(),
            None => {
                return Err(Error::model(format!(
                    "{}: no encoder tensors (expected {}.{WORD})",
                    dir.path().join(WEIGHTS_FILE).display(),
                    prefixes.first().unwrap_or(&"")
                )))
            }
        };
        let w = EncoderWeights { weights, prefix };
        w.check_layout(dir)?;
        Ok(w)
    }

    /// Refuses a checkpoint whose layers are not in transformers' layout
    /// (`encoder.layer.N.attention.self.query`), naming the architecture and the layout it
    /// is in, instead of failing later on a missing tensor. The layout known by name is the
    /// flash-attention one of jina's remote code (jina-reranker-v2, jina-embeddings-v2/v3:
    /// `encoder.layers.N.mixer.Wqkv`).
    fn check_layout(&self, dir: &ModelDir) -> Result<()> {
        let standard = format!("{}encoder.layer.0.attention.self.query.weight", self.prefix);
        let architecture = dir
            .architecture()
            .map_or_else(|_| "(unknown)".to_string(), |a| a.name().to_string());
        // Other families (DeBERTa) read their own names through these weights.
        let bert_family = ["Bert", "XLMRoberta", "Roberta"]
            .iter()
            .any(|f| architecture.starts_with(f));
        let has_layers = self.weights.names().any(|n| n.contains("encoder.layer"));
        if self.weights.has(&standard) || !has_layers || !bert_family {
            return Ok(());
        }
        let layout = if self.weights.names().any(|n| n.contains(".mixer.Wqkv.")) {
            "jina's flash-attention layout (remote code: encoder.layers.N.mixer.Wqkv, \
             mlp.fc1, norm1)"
        } else {
            "an unknown layout"
        };
        Err(Error::model(format!(
            "{}: architecture {architecture} in {layout} is not supported (no {standard}); \
             supported: BertForSequenceClassification, XLMRobertaForSequenceClassification, \
             BertModel and XLMRobertaModel in transformers' layout \
             (encoder.layer.N.attention.self.query)",
            dir.path().join(WEIGHTS_FILE).display()
        )))
    }

    /// The encoder's tensor `name` (relative to the encoder's root) of shape `shape`.
    pub fn encoder(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        self.weights.f32(&format!("{}{name}", self.prefix), shape)
    }

    /// The checkpoint, for what the BERT layout does not name (DeBERTa's tensors).
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The full name of the encoder's tensor `name` (relative to the encoder's root).
    pub fn encoder_name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Whether the encoder has a tensor `name` (relative to its root).
    pub fn encoder_has(&self, name: &str) -> bool {
        self.weights.has(&format!("{}{name}", self.prefix))
    }

    /// The linear layer `{name}.weight` `(outputs, inputs)` and `{name}.bias`, relative to the
    /// encoder's root.
    pub fn encoder_linear(&self, name: &str, outputs: usize, inputs: usize) -> Result<Linear> {
        Ok(Linear {
            weight: Weight::F32(self.encoder(&format!("{name}.weight"), &[outputs, inputs])?),
            bias: self.encoder(&format!("{name}.bias"), &[outputs])?,
            inputs,
            outputs,
        })
    }

    /// The linear layer `{name}.weight` / `{name}.bias` at the file's root (a task head).
    pub fn root_linear(&self, name: &str, outputs: usize, inputs: usize) -> Result<Linear> {
        Ok(Linear {
            weight: Weight::F32(
                self.weights
                    .f32(&format!("{name}.weight"), &[outputs, inputs])?,
            ),
            bias: self.weights.f32(&format!("{name}.bias"), &[outputs])?,
            inputs,
            outputs,
        })
    }

    /// Checks every size `config.json` gives against the tensor shapes in the safetensors
    /// header, before any of them sizes an allocation: a mismatch is an [`Error::Model`] naming
    /// `config.json` and the key (see [`Weights::check_config_size`]).
    pub fn check_config(&self, cfg: &EncoderConfig) -> Result<()> {
        let name = |n: &str| format!("{}{n}", self.prefix);
        let w = &self.weights;
        let word = name("embeddings.word_embeddings.weight");
        w.check_config_size("hidden_size", cfg.hidden, &word, 1)?;
        w.check_config_size("vocab_size", cfg.vocab, &word, 0)?;
        let position = name("embeddings.position_embeddings.weight");
        w.check_config_size("max_position_embeddings", cfg.positions, &position, 0)?;
        let token_type = name("embeddings.token_type_embeddings.weight");
        w.check_config_size("type_vocab_size", cfg.type_vocab, &token_type, 0)?;
        let last = cfg.layers - 1;
        let last_query = name(&format!("encoder.layer.{last}.attention.self.query.weight"));
        w.check_config_tensor("num_hidden_layers", cfg.layers, &last_query)?;
        let inner = name("encoder.layer.0.intermediate.dense.weight");
        w.check_config_size("intermediate_size", cfg.intermediate, &inner, 0)
    }

    /// Checks a size `config.json` gives (`key` is `value`) against axis `axis` of the tensor
    /// `name` at the file's root (a task head), before it sizes an allocation.
    pub fn check_root_size(&self, key: &str, value: usize, name: &str, axis: usize) -> Result<()> {
        self.weights.check_config_size(key, value, name, axis)
    }

    /// A layer norm under `name`: `weight`/`bias`, or the older `gamma`/`beta` names.
    pub fn norm(&self, name: &str, n: usize) -> Result<Norm> {
        let (w, b) = if self.encoder_has(&format!("{name}.weight")) {
            ("weight", "bias")
        } else {
            ("gamma", "beta")
        };
        Ok(Norm {
            weight: self.encoder(&format!("{name}.{w}"), &[n])?,
            bias: self.encoder(&format!("{name}.{b}"), &[n])?,
        })
    }
}

impl Encoder {
    /// Loads the encoder from `w` (`embeddings.*`, `encoder.layer.N.*`), with the shapes `cfg`
    /// implies; a missing tensor or a wrong shape is an [`Error::Model`] naming the file and
    /// the tensor. With [`Precision::Int8`] the linear layers of every encoder layer are
    /// quantized (see `models::quant`); embeddings and layer norms stay in f32.
    pub fn load(w: &EncoderWeights, cfg: EncoderConfig, precision: Precision) -> Result<Self> {
        if !matches!(precision, Precision::F32 | Precision::Int8) {
            return Err(Error::Config(format!(
                "precision {precision} is not supported by the BERT-family encoders (f32 or \
                 int8; bf16 is for Qwen3 models)"
            )));
        }
        w.check_config(&cfg)?;
        let (h, i) = (cfg.hidden, cfg.intermediate);
        let word = w.encoder("embeddings.word_embeddings.weight", &[cfg.vocab, h])?;
        let position = w.encoder("embeddings.position_embeddings.weight", &[cfg.positions, h])?;
        let token_type = w.encoder(
            "embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab, h],
        )?;
        let embed_norm = w.norm("embeddings.LayerNorm", h)?;
        let layers = (0..cfg.layers)
            .map(|n| {
                let l = format!("encoder.layer.{n}");
                let att = format!("{l}.attention");
                let q = w.encoder_linear(&format!("{att}.self.query"), h, h)?;
                let k = w.encoder_linear(&format!("{att}.self.key"), h, h)?;
                let v = w.encoder_linear(&format!("{att}.self.value"), h, h)?;
                let qkv = Linear {
                    weight: Weight::F32(
                        [q.weight.to_f32(), k.weight.to_f32(), v.weight.to_f32()].concat(),
                    ),
                    bias: [q.bias, k.bias, v.bias].concat(),
                    inputs: h,
                    outputs: 3 * h,
                };
                let dense = |linear| Dense::new(linear, precision);
                Ok(Layer {
                    qkv: dense(qkv),
                    out: dense(w.encoder_linear(&format!("{att}.output.dense"), h, h)?),
                    attn_norm: w.norm(&format!("{att}.output.LayerNorm"), h)?,
                    ff_in: dense(w.encoder_linear(&format!("{l}.intermediate.dense"), i, h)?),
                    ff_out: dense(w.encoder_linear(&format!("{l}.output.dense"), h, i)?),
                    ff_norm: w.norm(&format!("{l}.output.LayerNorm"), h)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Encoder {
            cfg,
            word,
            position,
            token_type,
            embed_norm,
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
        self.check(seqs)?;
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let h = self.cfg.hidden;
        let lens: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();
        let total: usize = lens.iter().sum();
        let starts = packed_starts(&lens);
        let mut ws = Workspace::new(total, self.cfg.hidden);
        self.embed(seqs, &mut ws.x);
        let n_layers = self.layers.len();
        for (i, layer) in self.layers.iter().enumerate() {
            let first_only = output == Output::FirstToken && i + 1 == n_layers;
            self.layer(layer, &mut ws, &lens, &starts, first_only);
        }
        if output == Output::FirstToken {
            // The last layer left one row per sequence at the front (configs have >= 1 layer).
            ws.x.truncate(seqs.len() * h);
        }
        Ok(ws.x)
    }

    /// Word + position + token type embeddings, then layer norm, into `x`.
    fn embed(&self, seqs: &[Sequence<'_>], x: &mut [f32]) {
        let h = self.cfg.hidden;
        let offset = self.cfg.position_offset;
        let rows: Vec<(u32, usize, u32)> = seqs
            .iter()
            .flat_map(|s| {
                s.ids
                    .iter()
                    .zip(s.types)
                    .enumerate()
                    .map(move |(p, (&id, &t))| (id, p + offset, t))
            })
            .collect();
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
        lens: &[usize],
        starts: &[usize],
        first_only: bool,
    ) {
        let cfg = &self.cfg;
        let (h, heads, d) = (cfg.hidden, cfg.heads, cfg.head_dim());
        let total: usize = lens.iter().sum();
        let qkv = &mut ws.qkv[..total * 3 * h];
        l.qkv
            .forward(&ws.x[..total * h], total, qkv, &mut ws.quant, Then::Nothing);
        // With `first_only`, attention keeps one query row per sequence, and so does the rest.
        let rows = if first_only { starts.len() } else { total };
        let ctx = &mut ws.ctx[..rows * h];
        let shape = Heads {
            hidden: h,
            heads,
            dim: d,
        };
        attention(qkv, ctx, lens, starts, shape, None, first_only);
        // Residual rows: all of x, or the first row of each sequence.
        if first_only {
            // Row starts[i] moves to row i; starts[i] >= i, so no source is overwritten first.
            for (i, &s) in starts.iter().enumerate() {
                ws.x.copy_within(s * h..(s + 1) * h, i * h);
            }
        }
        // x = LN(x + O ctx), computed in `proj`, which then becomes `x`.
        let n = rows * h;
        let then = l.attn_norm.after(&ws.x[..n], cfg.eps);
        l.out
            .forward(ctx, rows, &mut ws.proj[..n], &mut ws.quant, then);
        std::mem::swap(&mut ws.x, &mut ws.proj);
        // x = LN(x + W2 act(W1 x)), the same way.
        let norm = l.ff_norm.after(&ws.x[..n], cfg.eps);
        feed_forward(
            &l.ff_in,
            &l.ff_out,
            cfg.act,
            norm,
            &ws.x[..n],
            rows,
            &mut ws.proj[..n],
        );
        std::mem::swap(&mut ws.x, &mut ws.proj);
    }
}

/// The buffers of one batch, sized for its tokens (GTE's post-norm encoder uses the same).
pub(crate) struct Workspace {
    /// Hidden states `(tokens, hidden)`.
    pub x: Vec<f32>,
    /// Stacked queries, keys and values `(tokens, 3 * hidden)`.
    pub qkv: Vec<f32>,
    /// Attention context `(tokens, hidden)`.
    pub ctx: Vec<f32>,
    /// Projection outputs `(tokens, hidden)`.
    pub proj: Vec<f32>,
    /// The quantized inputs of the int8 linear layers (empty in f32).
    pub quant: QuantRows,
}

impl Workspace {
    pub fn new(tokens: usize, hidden: usize) -> Self {
        let h = hidden;
        Workspace {
            x: vec![0.0; tokens * h],
            qkv: vec![0.0; tokens * 3 * h],
            ctx: vec![0.0; tokens * h],
            proj: vec![0.0; tokens * h],
            quant: QuantRows::default(),
        }
    }
}
