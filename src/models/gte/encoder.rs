//! The packed GTE / NomicBERT encoder forward pass (Alibaba-NLP/new-impl's `NewModel`,
//! nomic-bert-2048's `NomicBertModel`, transformers 5's `GteModel` and `NomicBertModel`) on the
//! shared CPU kernels.
//!
//! A batch is packed as in the BERT and ModernBERT encoders: one `(tokens, hidden)` matrix of
//! real tokens, attention within each sequence at positions counted from its first token (the
//! reference pads and masks; a token's keys are the same either way). Per layer, post-norm as
//! BERT: `x = LN(x + O · attention(RoPE(Q x), RoPE(K x), V x))`, then
//! `x = LN(x + down · (act(gate · x) * (up · x)))`. The embeddings are the token's and its
//! token type's (when the model has them), layer-normed; RoPE carries the positions. Attention
//! is `models::layers::attention`'s (every layer global); RoPE and the gated MLP are the rotary encoders' shared
//! layer (`layers::rotary`).

use std::sync::{Arc, RwLock};

use rayon::prelude::*;

use super::config::{GteConfig, Layout};
use crate::models::layers::dense::{Dense, Output};
use crate::models::layers::encoder::{
    check_f32_or_int8, check_sequences, feed_forward, EncoderWeights, Norm, Sequence, Workspace,
};
use crate::models::layers::kernels::{layer_norm_row, Linear, Then, Weight};
use crate::models::layers::lora::LowRank;
use crate::models::layers::rope::Rope;
use crate::models::layers::rotary::{gated_mlp, grown, heads_of, Batch};
use crate::models::Precision;
use crate::{Error, Result};

/// One encoder layer.
#[derive(Debug, Clone)]
struct Layer {
    /// Queries, keys and values stacked (`3 * hidden` outputs), as `qkv_proj` stores them.
    qkv: Dense,
    out: Dense,
    attn_norm: Norm,
    mlp: Mlp,
    down: Dense,
    mlp_norm: Norm,
}

/// A layer's MLP before its down projection.
#[derive(Debug, Clone)]
enum Mlp {
    /// `[gate | up]` (`2 * intermediate` outputs, GTE's `up_gate_proj` with its halves swapped,
    /// or NomicBERT's `fc12` over `fc11`), so that the gated pass activates the first half as
    /// ModernBERT's does: `down · (act(gate · x) * (up · x))`.
    Gated(Dense),
    /// `intermediate.dense` (jina's `mlp.fc1`): `down · act(up · x + b)`.
    Plain(Dense),
}

/// A GTE or NomicBERT encoder's weights, in f32 panels or int8 linear layers.
#[derive(Debug)]
pub(crate) struct GteEncoder {
    cfg: GteConfig,
    word: Vec<f32>,
    /// `(type_vocab, hidden)`; empty without token types.
    token_type: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
    precision: Precision,
    /// Built for the longest sequence seen so far (never more than `max_position_embeddings`).
    rope: RwLock<Arc<Rope>>,
}

/// Another task's corrections to an encoder whose weights have one task's adapter merged
/// (jina-embeddings-v3's queries beside its documents: `layers::lora`): the embedding tables'
/// and, per layer, the stacked projection's, the output projection's and the MLP's.
#[derive(Debug, Clone)]
pub(crate) struct Adapter {
    word: LowRank,
    token_type: Option<LowRank>,
    layers: Vec<LayerAdapter>,
}

/// One layer's corrections.
#[derive(Debug, Clone)]
struct LayerAdapter {
    qkv: LowRank,
    out: LowRank,
    up: LowRank,
    down: LowRank,
}

impl Adapter {
    /// The corrections `w` holds (`EncoderWeights::adapted` with another task) for `cfg`'s
    /// encoder, in jina's names (`Layout::Bert`, read from the flash-attention layout), taken
    /// from it; a missing one, or one of another shape, is an [`Error::Model`].
    pub fn take(w: &mut EncoderWeights, cfg: &GteConfig) -> Result<Self> {
        let (h, i) = (cfg.hidden, cfg.intermediate);
        let mut get = |name: &str, (outputs, inputs): (usize, usize)| -> Result<LowRank> {
            let c = w.take_correction(&w.encoder_name(name))?;
            match (c.outputs, c.inputs) == (outputs, inputs) {
                true => Ok(c),
                false => Err(Error::model(format!(
                    "{}: the LoRA factors of {name} are for a ({}, {}) weight, not ({outputs}, \
                     {inputs})",
                    w.weights().config_path().display(),
                    c.outputs,
                    c.inputs
                ))),
            }
        };
        let layers = (0..cfg.layers)
            .map(|n| {
                let l = format!("encoder.layers.{n}");
                Ok(LayerAdapter {
                    qkv: get(&format!("{l}.mixer.Wqkv"), (3 * h, h))?,
                    out: get(&format!("{l}.mixer.out_proj"), (h, h))?,
                    up: get(&format!("{l}.mlp.fc1"), (i, h))?,
                    down: get(&format!("{l}.mlp.fc2"), (h, i))?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Adapter {
            word: get("embeddings.word_embeddings", (cfg.vocab, h))?,
            token_type: match cfg.type_vocab {
                0 => None,
                n => Some(get("embeddings.token_type_embeddings", (n, h))?),
            },
            layers,
        })
    }
}

/// An encoder run with another task's [`Adapter`], its weights shared with the encoder whose
/// task they have merged (`Send + Sync`).
pub(crate) struct AdaptedGte {
    pub base: Arc<GteEncoder>,
    pub adapter: Adapter,
}

impl AdaptedGte {
    /// The configuration.
    pub fn config(&self) -> &GteConfig {
        self.base.config()
    }

    /// [`GteEncoder::forward`] with the adapter's corrections.
    pub fn forward(&self, seqs: &[Sequence<'_>], output: Output) -> Result<Vec<f32>> {
        self.base.run(seqs, output, Some(&self.adapter))
    }
}

/// The tensor names of a layout's layer `n` (relative to the encoder's root).
struct Names {
    qkv: String,
    out: String,
    attn_norm: String,
    down: String,
    mlp_norm: String,
}

impl Layout {
    /// The tensor-name prefixes the encoder may sit under in a task model's checkpoint.
    pub fn prefixes(self) -> &'static [&'static str] {
        match self {
            Layout::Gte => &["new", "gte"],
            Layout::Nomic => &["nomic_bert"],
            Layout::Bert => &["roberta"],
        }
    }

    fn embed_norm(self) -> &'static str {
        match self {
            Layout::Gte | Layout::Bert => "embeddings.LayerNorm",
            Layout::Nomic => "emb_ln",
        }
    }

    fn layer(self, n: usize) -> Names {
        let (l, names) = match self {
            Layout::Gte => (
                format!("encoder.layer.{n}"),
                [
                    "attention.qkv_proj",
                    "attention.o_proj",
                    "attn_ln",
                    "mlp.down_proj",
                    "mlp_ln",
                ],
            ),
            Layout::Nomic => (
                format!("encoder.layers.{n}"),
                ["attn.Wqkv", "attn.out_proj", "norm1", "mlp.fc2", "norm2"],
            ),
            // q, k and v are three tensors under `attention.self` (`qkv`'s prefix).
            Layout::Bert => (
                format!("encoder.layer.{n}"),
                [
                    "attention.self",
                    "attention.output.dense",
                    "attention.output.LayerNorm",
                    "output.dense",
                    "output.LayerNorm",
                ],
            ),
        };
        let [qkv, out, attn_norm, down, mlp_norm] = names.map(|s| format!("{l}.{s}"));
        Names {
            qkv,
            out,
            attn_norm,
            down,
            mlp_norm,
        }
    }
}

/// The linear layer `{name}.weight` `(outputs, inputs)`, with `{name}.bias` where the layout
/// has biases (zeros otherwise).
fn linear(
    w: &EncoderWeights,
    layout: Layout,
    name: &str,
    outputs: usize,
    inputs: usize,
) -> Result<Linear> {
    match layout {
        Layout::Gte | Layout::Bert => w.encoder_linear(name, outputs, inputs),
        Layout::Nomic => Ok(Linear {
            weight: Weight::F32(w.encoder(&format!("{name}.weight"), &[outputs, inputs])?),
            bias: vec![0.0; outputs],
            inputs,
            outputs,
        }),
    }
}

/// The stacked query, key and value projection of layer `n` (`names.qkv`).
fn qkv(w: &EncoderWeights, layout: Layout, names: &Names, h: usize) -> Result<Linear> {
    match layout {
        Layout::Bert => {
            let prefix = w.encoder_name(&format!("{}.", names.qkv));
            let parts = [("query", h), ("key", h), ("value", h)];
            w.weights().stacked_linear(&prefix, &parts, h, true)
        }
        _ => linear(w, layout, &names.qkv, 3 * h, h),
    }
}

/// Layer `n`'s MLP before its down projection: `[gate | up]` (GTE's `up_gate_proj`, `[up |
/// gate]` with no bias, swapped, or NomicBERT's `fc12` and `fc11`), or BERT's
/// `intermediate.dense`.
fn mlp(
    w: &EncoderWeights,
    layout: Layout,
    (n, i, h): (usize, usize, usize),
    precision: Precision,
) -> Result<Mlp> {
    let weight = match layout {
        Layout::Bert => {
            let name = format!("encoder.layer.{n}.intermediate.dense");
            return Ok(Mlp::Plain(Dense::new(
                w.encoder_linear(&name, i, h)?,
                precision,
            )));
        }
        Layout::Gte => {
            let up_gate = w.encoder(
                &format!("encoder.layer.{n}.mlp.up_gate_proj.weight"),
                &[2 * i, h],
            )?;
            let (up, gate) = up_gate.split_at(i * h);
            [gate, up].concat()
        }
        Layout::Nomic => {
            let l = format!("encoder.layers.{n}.mlp");
            let gate = w.encoder(&format!("{l}.fc12.weight"), &[i, h])?;
            let up = w.encoder(&format!("{l}.fc11.weight"), &[i, h])?;
            [gate, up].concat()
        }
    };
    Ok(Mlp::Gated(Dense::new(
        Linear {
            weight: Weight::F32(weight),
            bias: vec![0.0; 2 * i],
            inputs: h,
            outputs: 2 * i,
        },
        precision,
    )))
}

impl GteEncoder {
    /// Loads the encoder from `w` (`cfg.layout`'s tensor names) with the shapes `cfg` implies,
    /// after checking them against the safetensors header; a missing tensor or a wrong shape is
    /// an [`Error::Model`] naming the file and the tensor. With [`Precision::Int8`] the linear
    /// layers are quantized; [`Precision::Bf16`] is refused.
    pub fn load(w: &EncoderWeights, cfg: GteConfig, precision: Precision) -> Result<Self> {
        check_f32_or_int8(precision, "GTE / NomicBERT encoder")?;
        let (h, i) = (cfg.hidden, cfg.intermediate);
        let checks = w.weights();
        let word = w.encoder_name("embeddings.word_embeddings.weight");
        let keys = cfg.keys;
        checks.check_config_size(keys.hidden, h, &word, 1)?;
        checks.check_config_size("vocab_size", cfg.vocab, &word, 0)?;
        let layout = cfg.layout;
        let last = w.encoder_name(&format!("{}.weight", layout.layer(cfg.layers - 1).out));
        checks.check_config_tensor(keys.layers, cfg.layers, &last)?;
        let down = w.encoder_name(&format!("{}.weight", layout.layer(0).down));
        checks.check_config_size(keys.intermediate, i, &down, 1)?;
        let token_type = match cfg.type_vocab {
            0 => Vec::new(),
            n => {
                let name = w.encoder_name("embeddings.token_type_embeddings.weight");
                checks.check_config_size("type_vocab_size", n, &name, 0)?;
                w.encoder("embeddings.token_type_embeddings.weight", &[n, h])?
            }
        };
        let dense = |linear| Dense::new(linear, precision);
        let layers = (0..cfg.layers)
            .map(|n| {
                let names = layout.layer(n);
                Ok(Layer {
                    qkv: dense(qkv(w, layout, &names, h)?),
                    out: dense(linear(w, layout, &names.out, h, h)?),
                    attn_norm: w.norm(&names.attn_norm, h)?,
                    mlp: mlp(w, layout, (n, i, h), precision)?,
                    down: dense(linear(w, layout, &names.down, h, i)?),
                    mlp_norm: w.norm(&names.mlp_norm, h)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let rope = Rope::scaled(cfg.head_dim(), cfg.rope_theta, cfg.rope_divisor, 0);
        Ok(GteEncoder {
            word: w.encoder("embeddings.word_embeddings.weight", &[cfg.vocab, h])?,
            token_type,
            embed_norm: w.norm(layout.embed_norm(), h)?,
            layers,
            precision,
            rope: RwLock::new(Arc::new(rope)),
            cfg,
        })
    }

    /// The number format of the linear layers.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The configuration.
    pub fn config(&self) -> &GteConfig {
        &self.cfg
    }

    /// The RoPE tables for at least `positions` positions.
    fn rope(&self, positions: usize) -> Arc<Rope> {
        let c = &self.cfg;
        let (d, theta, divisor) = (c.head_dim(), c.rope_theta, c.rope_divisor);
        grown(
            &self.rope,
            Rope::positions,
            positions,
            c.max_positions,
            |n| Rope::scaled(d, theta, divisor, n),
        )
    }

    /// Runs the encoder on `seqs` packed together (token types are read where the model has
    /// more than one). Returns the last hidden states, row-major with `hidden` columns: one
    /// row per token for [`Output::AllTokens`] (sequences in order), one row per sequence for
    /// [`Output::FirstToken`].
    pub fn forward(&self, seqs: &[Sequence<'_>], output: Output) -> Result<Vec<f32>> {
        self.run(seqs, output, None)
    }

    /// [`GteEncoder::forward`] with `adapter`'s corrections added to every product and
    /// embedding row (another task than the one merged into the weights).
    fn run(
        &self,
        seqs: &[Sequence<'_>],
        output: Output,
        adapter: Option<&Adapter>,
    ) -> Result<Vec<f32>> {
        let types = (self.cfg.type_vocab > 1).then_some(self.cfg.type_vocab);
        check_sequences(seqs, self.cfg.max_positions, self.cfg.vocab, types)?;
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let h = self.cfg.hidden;
        let batch = Batch::of(seqs.iter().map(|s| s.ids.len()).collect());
        let rope = self.rope(batch.longest());
        let mut ws = Workspace::new(batch.tokens(), h);
        self.embed(seqs, &mut ws.x, adapter);
        let layers: Vec<(&Layer, Option<&LayerAdapter>)> = match adapter {
            Some(a) => self.layers.iter().zip(a.layers.iter().map(Some)).collect(),
            None => self.layers.iter().map(|l| (l, None)).collect(),
        };
        output.each_layer(&layers, |&(layer, a), first_only| {
            self.layer(layer, a, &mut ws, &batch, &rope, first_only);
        });
        // With first tokens only, the last layer left one row per sequence at the front.
        ws.x.truncate(output.rows(batch.tokens(), seqs.len()) * h);
        Ok(ws.x)
    }

    /// Token (+ token type) embeddings (with `adapter`'s corrections of their rows), then layer
    /// norm, into `x`.
    fn embed(&self, seqs: &[Sequence<'_>], x: &mut [f32], adapter: Option<&Adapter>) {
        let h = self.cfg.hidden;
        let typed = self.cfg.type_vocab > 1;
        let rows: Vec<(u32, u32)> = seqs
            .iter()
            .flat_map(|s| s.ids.iter().zip(s.types).map(|(&id, &t)| (id, t)))
            .collect();
        x.par_chunks_mut(h)
            .zip(rows.par_iter())
            .for_each(|(row, &(id, t))| {
                row.copy_from_slice(&self.word[id as usize * h..][..h]);
                if let Some(a) = adapter {
                    a.word.add_row(id as usize, row);
                }
                if !self.token_type.is_empty() {
                    let t = if typed { t as usize } else { 0 };
                    let tt = &self.token_type[t * h..][..h];
                    row.iter_mut().zip(tt).for_each(|(v, t)| *v += t);
                    if let Some(tt) = adapter.and_then(|a| a.token_type.as_ref()) {
                        tt.add_row(t, row);
                    }
                }
                let norm = &self.embed_norm;
                layer_norm_row(row, &norm.weight, &norm.bias, self.cfg.eps);
            });
    }

    /// One layer over the packed rows in `ws.x`. With `first_only`, only each sequence's first
    /// row is computed past the keys and values, and `ws.x` ends with one row per sequence.
    /// With `a`, the layer's products run unfused, each with its correction added before the
    /// step after it (activation, residual and norm).
    fn layer(
        &self,
        l: &Layer,
        a: Option<&LayerAdapter>,
        ws: &mut Workspace,
        batch: &Batch,
        rope: &Rope,
        first_only: bool,
    ) {
        let cfg = &self.cfg;
        let h = cfg.hidden;
        let total = batch.tokens();
        let qkv = &mut ws.qkv[..total * 3 * h];
        l.qkv
            .forward(&ws.x[..total * h], total, qkv, &mut ws.quant, Then::Nothing);
        if let Some(a) = a {
            a.qkv
                .add_product(&ws.x[..total * h], total, qkv, Then::Nothing);
        }
        let shape = heads_of(h, cfg.heads);
        let rows = batch.rotary_attention(qkv, &mut ws.ctx, shape, rope, None, first_only);
        if first_only {
            batch.firsts_to_front(&mut ws.x, h);
        }
        // x = LN(x + O ctx), into `proj`, which then becomes `x`.
        let m = rows * h;
        let (x, proj) = (&ws.x[..m], &mut ws.proj[..m]);
        let norm = l.attn_norm.after(x, cfg.eps);
        match a {
            None => l.out.forward(&ws.ctx[..m], rows, proj, &mut ws.quant, norm),
            Some(a) => {
                let ctx = &ws.ctx[..m];
                l.out.forward(ctx, rows, proj, &mut ws.quant, Then::Nothing);
                a.out.add_product(ctx, rows, proj, norm);
            }
        }
        std::mem::swap(&mut ws.x, &mut ws.proj);
        // x = LN(x + down (act(gate x) * up x)) (or LN(x + down act(up x))), the same way.
        let (x, norm) = (&ws.x[..m], l.mlp_norm.after(&ws.x[..m], cfg.eps));
        let out = &mut ws.proj[..m];
        match (&l.mlp, a) {
            (Mlp::Gated(gate_up), _) => {
                gated_mlp(gate_up, &l.down, cfg.act, None, norm, x, rows, out)
            }
            (Mlp::Plain(up), None) => feed_forward(up, &l.down, cfg.act, norm, x, rows, out),
            (Mlp::Plain(up), Some(a)) => {
                let mut mid = vec![0.0; rows * up.outputs()];
                up.forward(x, rows, &mut mid, &mut ws.quant, Then::Nothing);
                a.up.add_product(x, rows, &mut mid, Then::Activate(cfg.act));
                l.down
                    .forward(&mid, rows, out, &mut ws.quant, Then::Nothing);
                a.down.add_product(&mid, rows, out, norm);
            }
        }
        std::mem::swap(&mut ws.x, &mut ws.proj);
    }
}
