//! The packed T5 encoder (transformers' `T5EncoderModel`, the encoder half of
//! `T5ForConditionalGeneration`) on the shared CPU kernels, and the blocks its decoder reuses.
//!
//! A batch is *packed* as in the other encoders: the tokens of all its sequences are one
//! `(tokens, d_model)` matrix, the projections and the feed-forward blocks run over real tokens
//! only, and attention runs within each sequence. transformers pads a batch and masks the
//! padded keys; a real token's keys and relative offsets are the same either way.
//!
//! - Embeddings: the rows of `shared` (read from the mapped file, only those a batch uses); no
//!   scaling, no positions.
//! - Per block, pre-norm, each norm T5's RMSNorm (`x / sqrt(mean(x²) + eps) * w`, no bias):
//!   `x = x + O · softmax(Q Kᵀ + bias) V` over `q/k/v(norm(x))`, scores *not* scaled by
//!   `1 / sqrt(d_kv)` (T5 folds that into its initialization), the relative position bias of
//!   the first block's table added in every block (`layers::relative`); then
//!   `x = x + wo · act(wi · norm(x))`, or `wo · (act(wi_0 · y) * wi_1 · y)` when gated.
//! - The final norm.

use super::config::{FeedForward, T5Config};
use crate::models::dir::{ModelDir, WEIGHTS_FILE};
use crate::models::layers::dense::{Dense, Output};
use crate::models::layers::encoder::{check_f32_or_int8, check_ids, feed_forward};
use crate::models::layers::kernels::Then;
use crate::models::layers::quant::QuantRows;
use crate::models::layers::relative::{biased_attention, BiasedBatch, PositionBias};
use crate::models::layers::rms::rms_norm_rows;
use crate::models::layers::rotary::gated_mlp;
use crate::models::layers::weights::Weights;
use crate::models::{packed_starts, Precision};
use crate::{Error, Result};

/// The names the shared embedding may be saved under (`T5EncoderModel` and
/// `T5ForConditionalGeneration` tie them; a checkpoint keeps at least one).
const EMBEDDINGS: [&str; 2] = ["shared.weight", "encoder.embed_tokens.weight"];

/// A bias-free linear layer of the checkpoint (T5 has no biases): the `{name}.weight` of each
/// of `parts` (`(name, rows)`) stacked into one product with `inputs` inputs, in `precision`.
pub(super) fn linear(
    w: &Weights,
    parts: &[(&str, usize)],
    inputs: usize,
    precision: Precision,
) -> Result<Dense> {
    Ok(Dense::new(
        w.stacked_linear("", parts, inputs, false)?,
        precision,
    ))
}

/// A T5 norm's weight (`{name}.weight`, `width` values).
pub(super) fn norm(w: &Weights, name: &str, width: usize) -> Result<Vec<f32>> {
    w.f32(&format!("{name}.weight"), &[width])
}

/// A block's feed-forward part (`DenseReluDense`): `wi` (or `[wi_0 | wi_1]` stacked) and `wo`.
#[derive(Debug)]
pub(super) struct Mlp {
    wi: Dense,
    wo: Dense,
    ff: FeedForward,
}

impl Mlp {
    /// The block's `{prefix}.DenseReluDense` in `precision`.
    pub fn load(w: &Weights, prefix: &str, cfg: &T5Config, precision: Precision) -> Result<Self> {
        let (h, i) = (cfg.hidden, cfg.intermediate);
        let name = |n: &str| format!("{prefix}.DenseReluDense.{n}");
        let wi = match cfg.ff.gated {
            true => linear(w, &[(&name("wi_0"), i), (&name("wi_1"), i)], h, precision)?,
            false => linear(w, &[(&name("wi"), i)], h, precision)?,
        };
        Ok(Mlp {
            wi,
            wo: linear(w, &[(&name("wo"), h)], i, precision)?,
            ff: cfg.ff,
        })
    }

    /// `out = residual + wo · act(...)` over the `rows` normed rows `x`.
    pub fn forward(&self, x: &[f32], rows: usize, residual: &[f32], out: &mut [f32]) {
        let then = Then::Add { residual };
        match self.ff.gated {
            true => gated_mlp(&self.wi, &self.wo, self.ff.act, None, then, x, rows, out),
            false => feed_forward(&self.wi, &self.wo, self.ff.act, then, x, rows, out),
        }
    }
}

/// One encoder block.
#[derive(Debug)]
struct Block {
    attn_norm: Vec<f32>,
    /// `[q | k | v]`: `3 * num_heads * d_kv` outputs.
    qkv: Dense,
    o: Dense,
    ff_norm: Vec<f32>,
    mlp: Mlp,
}

/// A T5 encoder's weights: the embedding rows stay in the mapped file, norms and the relative
/// bias in f32, linear layers in f32 panels or int8.
#[derive(Debug)]
pub(crate) struct T5Encoder {
    cfg: T5Config,
    /// The mapped checkpoint: the embedding rows are read from it per batch (mT5's 250112 rows
    /// of 768 would be 768 MB in f32).
    weights: Weights,
    /// The shared embedding's name in the checkpoint.
    embeddings: String,
    /// The first block's `relative_attention_bias`, `(buckets, heads)`.
    relative: Vec<f32>,
    blocks: Vec<Block>,
    final_norm: Vec<f32>,
}

/// The name the shared embedding has in `w`: the first of [`EMBEDDINGS`] it holds.
fn embeddings_name(w: &Weights, dir: &ModelDir) -> Result<&'static str> {
    EMBEDDINGS.into_iter().find(|n| w.has(n)).ok_or_else(|| {
        Error::model(format!(
            "{}: no T5 embeddings (expected {} or {})",
            dir.path().join(WEIGHTS_FILE).display(),
            EMBEDDINGS[0],
            EMBEDDINGS[1]
        ))
    })
}

/// Checks every size `config.json` gives for the encoder against the safetensors header
/// before any of them sizes an allocation: a mismatch is an [`Error::Model`] naming
/// `config.json` and the key.
fn check_config(w: &Weights, cfg: &T5Config, embeddings: &str) -> Result<()> {
    w.check_config_size("d_model", cfg.hidden, embeddings, 1)?;
    w.check_config_size("vocab_size", cfg.vocab, embeddings, 0)?;
    let last = format!(
        "encoder.block.{}.layer.0.SelfAttention.q.weight",
        cfg.layers - 1
    );
    w.check_config_tensor("num_layers", cfg.layers, &last)?;
    let q = "encoder.block.0.layer.0.SelfAttention.q.weight";
    w.check_config_size("num_heads * d_kv", cfg.inner(), q, 0)?;
    let relative = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    w.check_config_size(
        "relative_attention_num_buckets",
        cfg.buckets.count,
        relative,
        0,
    )?;
    w.check_config_size("num_heads", cfg.heads, relative, 1)?;
    let wo = "encoder.block.0.layer.1.DenseReluDense.wo.weight";
    w.check_config_size("d_ff", cfg.intermediate, wo, 1)
}

impl T5Encoder {
    /// Loads the encoder of `dir` (`shared.weight` or `encoder.embed_tokens.weight`,
    /// `encoder.block.N.*`, `encoder.final_layer_norm.weight`) with the shapes `cfg` implies,
    /// after checking them against the safetensors header; a missing tensor or a wrong shape
    /// is an [`Error::Model`] naming the file and the tensor. With [`Precision::Int8`] the
    /// linear layers are quantized; bf16 is refused.
    pub fn load(dir: &ModelDir, cfg: T5Config, precision: Precision) -> Result<Self> {
        check_f32_or_int8(precision, "T5 encoder")?;
        let weights = Weights::open(dir.path())?;
        Self::from_weights(weights, dir, cfg, precision)
    }

    /// [`T5Encoder::load`] on a mapped checkpoint.
    pub(super) fn from_weights(
        weights: Weights,
        dir: &ModelDir,
        cfg: T5Config,
        precision: Precision,
    ) -> Result<Self> {
        let embeddings = embeddings_name(&weights, dir)?;
        check_config(&weights, &cfg, embeddings)?;
        let (h, inner) = (cfg.hidden, cfg.inner());
        let relative = weights.f32(
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            &[cfg.buckets.count, cfg.heads],
        )?;
        let blocks = (0..cfg.layers)
            .map(|n| {
                let b = format!("encoder.block.{n}");
                let att = format!("{b}.layer.0.SelfAttention");
                let part = |p: &str| format!("{att}.{p}");
                let (q, k, v) = (part("q"), part("k"), part("v"));
                let qkv = [(&q[..], inner), (&k[..], inner), (&v[..], inner)];
                Ok(Block {
                    attn_norm: norm(&weights, &format!("{b}.layer.0.layer_norm"), h)?,
                    qkv: linear(&weights, &qkv, h, precision)?,
                    o: linear(&weights, &[(&part("o"), h)], inner, precision)?,
                    ff_norm: norm(&weights, &format!("{b}.layer.1.layer_norm"), h)?,
                    mlp: Mlp::load(&weights, &format!("{b}.layer.1"), &cfg, precision)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let final_norm = norm(&weights, "encoder.final_layer_norm", h)?;
        Ok(T5Encoder {
            embeddings: embeddings.to_string(),
            cfg,
            weights,
            relative,
            blocks,
            final_norm,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &T5Config {
        &self.cfg
    }

    /// The mapped checkpoint (the decoder and the output head are read from the same file).
    pub(super) fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The shared embedding's name in the checkpoint.
    pub(super) fn embeddings_name(&self) -> &str {
        &self.embeddings
    }

    /// Runs the encoder on `seqs` packed together. Returns the last hidden states (after the
    /// final norm), row-major with `d_model` columns: one row per token for
    /// [`Output::AllTokens`] (sequences in order), one row per sequence for
    /// [`Output::FirstToken`].
    pub fn forward(&self, seqs: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        check_ids(seqs, usize::MAX, self.cfg.vocab)?;
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let (h, eps) = (self.cfg.hidden, self.cfg.eps);
        let lens: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let starts = packed_starts(&lens);
        let total: usize = lens.iter().sum();
        let longest = lens.iter().copied().max().unwrap_or(1);
        let bias = PositionBias::new(&self.relative, self.cfg.heads, self.cfg.buckets, longest);
        let batch = BiasedBatch {
            lens: &lens,
            starts: &starts,
            bias: &bias,
            first_only: false,
        };
        let mut ws = Workspace::new(total, &self.cfg);
        let ids: Vec<u32> = seqs.iter().flat_map(|s| s.iter().copied()).collect();
        self.weights
            .rows_into(&self.embeddings, h, &ids, &mut ws.x)?;
        for block in &self.blocks {
            self.block(block, &mut ws, &batch);
        }
        let mut out = vec![0.0; total * h];
        rms_norm_rows(&ws.x, &mut out, &self.final_norm, eps);
        if output == Output::FirstToken {
            let firsts = starts.iter();
            return Ok(firsts
                .flat_map(|&s| out[s * h..(s + 1) * h].to_vec())
                .collect());
        }
        Ok(out)
    }

    /// One block over the packed rows in `ws.x`.
    fn block(&self, b: &Block, ws: &mut Workspace, batch: &BiasedBatch<'_>) {
        let cfg = &self.cfg;
        let (h, inner, eps) = (cfg.hidden, cfg.inner(), cfg.eps);
        let total: usize = batch.lens.iter().sum();
        let n = total * h;
        rms_norm_rows(&ws.x[..n], &mut ws.normed[..n], &b.attn_norm, eps);
        let qkv = &mut ws.qkv[..total * 3 * inner];
        b.qkv
            .forward(&ws.normed[..n], total, qkv, &mut ws.quant, Then::Nothing);
        let ctx = &mut ws.ctx[..total * inner];
        biased_attention(&ws.qkv, ctx, batch, (cfg.heads, cfg.head_dim), 1.0);
        let then = Then::Add {
            residual: &ws.x[..n],
        };
        b.o.forward(&ws.ctx, total, &mut ws.proj[..n], &mut ws.quant, then);
        std::mem::swap(&mut ws.x, &mut ws.proj);
        rms_norm_rows(&ws.x[..n], &mut ws.normed[..n], &b.ff_norm, eps);
        b.mlp
            .forward(&ws.normed[..n], total, &ws.x[..n], &mut ws.proj[..n]);
        std::mem::swap(&mut ws.x, &mut ws.proj);
    }
}

/// The buffers of one batch, sized for its tokens.
struct Workspace {
    /// Hidden states `(tokens, d_model)`.
    x: Vec<f32>,
    /// A norm's output `(tokens, d_model)`.
    normed: Vec<f32>,
    /// Stacked queries, keys and values `(tokens, 3 * inner)`.
    qkv: Vec<f32>,
    /// Attention context `(tokens, inner)`.
    ctx: Vec<f32>,
    /// Projection outputs `(tokens, d_model)`.
    proj: Vec<f32>,
    /// The quantized inputs of the int8 linear layers (empty in f32).
    quant: QuantRows,
}

impl Workspace {
    fn new(tokens: usize, cfg: &T5Config) -> Self {
        let (h, inner) = (cfg.hidden, cfg.inner());
        Workspace {
            x: vec![0.0; tokens * h],
            normed: vec![0.0; tokens * h],
            qkv: vec![0.0; tokens * 3 * inner],
            ctx: vec![0.0; tokens * inner],
            proj: vec![0.0; tokens * h],
            quant: QuantRows::default(),
        }
    }
}
