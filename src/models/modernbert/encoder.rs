//! The packed ModernBERT encoder forward pass, as transformers 5's `ModernBertModel`, on the
//! shared CPU kernels.
//!
//! A batch is *packed* as in the BERT encoder (`bert::encoder`): the tokens of all its
//! sequences are concatenated into one `(tokens, hidden)` matrix, the projections and the MLP
//! run over real tokens only, and attention runs within each sequence, at positions counted
//! from each sequence's first token. transformers pads a batch (or unpads it with flash
//! attention) and masks; a token's keys are the same either way, so the outputs are too.
//!
//! Per layer (pre-norm), with `attn_norm` the identity in layer 0:
//! `x = x + Wo · attention(RoPE(Q), RoPE(K), V)` over `Wqkv · attn_norm(x)`, then
//! `x = x + Wo · (act(a) * g)` with `[a | g] = Wi · mlp_norm(x)` (GeGLU); then `final_norm`.
//! Global layers attend over the whole sequence, sliding layers over the keys at most
//! `local_attention / 2` positions away; each kind has its own RoPE theta. The embeddings are
//! the token embeddings, layer-normed (no positions: RoPE carries them).
//!
//! Attention is `models::layers::attention`'s (global, or within the window in the sliding layers).
//! When only each sequence's first token is wanted, the last layer computes its keys and values
//! for every token and the rest for the first tokens only.

use std::sync::{Arc, RwLock};

use rayon::prelude::*;

use super::config::ModernBertConfig;
use crate::models::dir::{ModelDir, WEIGHTS_FILE};
use crate::models::layers::dense::{Dense, Output};
pub(crate) use crate::models::layers::encoder::Norm;
use crate::models::layers::encoder::{check_f32_or_int8, check_ids};
use crate::models::layers::kernels::{Linear, Then, Weight};
use crate::models::layers::quant::QuantRows;
use crate::models::layers::rope::Rope;
use crate::models::layers::rotary::{gated_mlp, grown, heads_of, norm_rows, Batch};
use crate::models::layers::weights::Weights;
use crate::models::Precision;
use crate::{Error, Result};

/// Rows per task of the row-wise passes (norms, RoPE).
const ROWS_PER_TASK: usize = 16;

/// One encoder layer.
#[derive(Debug, Clone)]
struct Layer {
    /// `None` in layer 0 (transformers' `nn.Identity`).
    attn_norm: Option<Norm>,
    /// Queries, keys and values stacked (`3 * hidden` outputs), heads in order in each.
    qkv: Dense,
    out: Dense,
    mlp_norm: Norm,
    /// `[input | gate]`: `2 * intermediate` outputs.
    wi: Dense,
    wo: Dense,
    /// Global attention (`full_attention`) or a sliding window.
    global: bool,
}

/// The weights of a ModernBERT checkpoint, through the one weights loader: the encoder's
/// tensors (`embeddings.*`, `layers.N.*`, `final_norm.*`) under `model.` in a task model
/// (`ModernBertForSequenceClassification`, `...ForMaskedLM`) or at the file's root for a bare
/// `ModernBertModel`; a task head's at the root.
pub(crate) struct ModernBertWeights {
    weights: Weights,
    /// `"model."` or `""`.
    prefix: &'static str,
}

impl ModernBertWeights {
    /// Maps the checkpoint of `dir` and finds the encoder; weights without one are an
    /// [`Error::Model`] naming the file.
    pub fn open(dir: &ModelDir) -> Result<Self> {
        let weights = Weights::open(dir.path())?;
        let prefix = if weights.has("model.embeddings.tok_embeddings.weight") {
            "model."
        } else if weights.has("embeddings.tok_embeddings.weight") {
            ""
        } else {
            return Err(Error::model(format!(
                "{}: no ModernBERT encoder tensors (expected \
                 embeddings.tok_embeddings.weight, or model.embeddings.tok_embeddings.weight)",
                dir.path().join(WEIGHTS_FILE).display()
            )));
        };
        Ok(ModernBertWeights { weights, prefix })
    }

    fn name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The encoder's tensor `name` of shape `shape`.
    fn encoder(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        self.weights.f32(&self.name(name), shape)
    }

    /// Checks every size `config.json` gives against the safetensors header, before any of
    /// them sizes an allocation: a mismatch is an [`Error::Model`] naming `config.json` and
    /// the key.
    pub fn check_config(&self, cfg: &ModernBertConfig) -> Result<()> {
        let w = &self.weights;
        let word = self.name("embeddings.tok_embeddings.weight");
        w.check_config_size("hidden_size", cfg.hidden, &word, 1)?;
        w.check_config_size("vocab_size", cfg.vocab, &word, 0)?;
        let last = self.name(&format!("layers.{}.attn.Wqkv.weight", cfg.layers - 1));
        w.check_config_tensor("num_hidden_layers", cfg.layers, &last)?;
        let wo = self.name("layers.0.mlp.Wo.weight");
        w.check_config_size("intermediate_size", cfg.intermediate, &wo, 1)
    }

    /// A linear layer `{name}.weight` `(outputs, inputs)`, with `{name}.bias` when `bias`
    /// (zeros otherwise); `root` for a task head's, else the encoder's (as [`Self::norm`]).
    fn linear(
        &self,
        name: &str,
        outputs: usize,
        inputs: usize,
        bias: bool,
        root: bool,
    ) -> Result<Linear> {
        let full = |n: &str| if root { n.to_string() } else { self.name(n) };
        Ok(Linear {
            weight: Weight::F32(
                self.weights
                    .f32(&full(&format!("{name}.weight")), &[outputs, inputs])?,
            ),
            bias: if bias {
                self.weights
                    .f32(&full(&format!("{name}.bias")), &[outputs])?
            } else {
                vec![0.0; outputs]
            },
            inputs,
            outputs,
        })
    }

    /// A task head's linear layer `name` (at the file's root).
    pub fn root_linear(
        &self,
        name: &str,
        outputs: usize,
        inputs: usize,
        bias: bool,
    ) -> Result<Linear> {
        self.linear(name, outputs, inputs, bias, true)
    }

    /// A layer norm `name` of `n` values, with its bias when `bias`; `root` for a head's.
    pub fn norm(&self, name: &str, n: usize, bias: bool, root: bool) -> Result<Norm> {
        let full = |n: &str| if root { n.to_string() } else { self.name(n) };
        Ok(Norm {
            weight: self.weights.f32(&full(&format!("{name}.weight")), &[n])?,
            bias: if bias {
                self.weights.f32(&full(&format!("{name}.bias")), &[n])?
            } else {
                vec![0.0; n]
            },
        })
    }

    /// Checks a size `config.json` gives (`key` is `value`) against axis `axis` of the tensor
    /// `name` at the file's root (a task head), before it sizes an allocation.
    pub fn check_root_size(&self, key: &str, value: usize, name: &str, axis: usize) -> Result<()> {
        self.weights.check_config_size(key, value, name, axis)
    }
}

/// The RoPE tables of both layer kinds for positions `0..positions`.
#[derive(Debug)]
struct RopeTables {
    global: Rope,
    local: Rope,
    positions: usize,
}

/// A ModernBERT encoder's weights, in f32 or int8 linear layers.
#[derive(Debug)]
pub(crate) struct ModernBertEncoder {
    cfg: ModernBertConfig,
    embeddings: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
    final_norm: Norm,
    precision: Precision,
    /// Built for the longest sequence seen so far (never more than `max_position_embeddings`):
    /// the config's position count backs no tensor, so it sizes nothing at load.
    rope: RwLock<Arc<RopeTables>>,
}

impl ModernBertEncoder {
    /// Loads the encoder from `w` with the shapes `cfg` implies, after checking them against
    /// the safetensors header; a missing tensor or a wrong shape is an [`Error::Model`] naming
    /// the file and the tensor. With [`Precision::Int8`] the linear layers are quantized;
    /// embeddings and norms stay in f32. [`Precision::Bf16`] is refused.
    pub fn load(
        w: &ModernBertWeights,
        cfg: ModernBertConfig,
        precision: Precision,
    ) -> Result<Self> {
        check_f32_or_int8(precision, "ModernBERT encoder")?;
        w.check_config(&cfg)?;
        let (h, i, nb) = (cfg.hidden, cfg.intermediate, cfg.norm_bias);
        let embeddings = w.encoder("embeddings.tok_embeddings.weight", &[cfg.vocab, h])?;
        let embed_norm = w.norm("embeddings.norm", h, nb, false)?;
        let dense = |linear| Dense::new(linear, precision);
        let layers = (0..cfg.layers)
            .map(|n| {
                let l = format!("layers.{n}");
                let (ab, mb) = (cfg.attention_bias, cfg.mlp_bias);
                Ok(Layer {
                    attn_norm: match n {
                        0 => None,
                        _ => Some(w.norm(&format!("{l}.attn_norm"), h, nb, false)?),
                    },
                    qkv: dense(w.linear(&format!("{l}.attn.Wqkv"), 3 * h, h, ab, false)?),
                    out: dense(w.linear(&format!("{l}.attn.Wo"), h, h, ab, false)?),
                    mlp_norm: w.norm(&format!("{l}.mlp_norm"), h, nb, false)?,
                    wi: dense(w.linear(&format!("{l}.mlp.Wi"), 2 * i, h, mb, false)?),
                    wo: dense(w.linear(&format!("{l}.mlp.Wo"), h, i, mb, false)?),
                    global: cfg.global[n],
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let final_norm = w.norm("final_norm", h, nb, false)?;
        let rope = Arc::new(RopeTables {
            global: Rope::new(cfg.head_dim(), cfg.global_theta, 0),
            local: Rope::new(cfg.head_dim(), cfg.local_theta, 0),
            positions: 0,
        });
        Ok(ModernBertEncoder {
            cfg,
            embeddings,
            embed_norm,
            layers,
            final_norm,
            precision,
            rope: RwLock::new(rope),
        })
    }

    /// The number format of the linear layers.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The configuration.
    pub fn config(&self) -> &ModernBertConfig {
        &self.cfg
    }

    /// The RoPE tables for at least `positions` positions.
    fn rope(&self, positions: usize) -> Arc<RopeTables> {
        let d = self.cfg.head_dim();
        let (global, local) = (self.cfg.global_theta, self.cfg.local_theta);
        grown(
            &self.rope,
            |t| t.positions,
            positions,
            self.cfg.max_positions,
            |n| RopeTables {
                global: Rope::new(d, global, n),
                local: Rope::new(d, local, n),
                positions: n,
            },
        )
    }

    /// Runs the encoder on `seqs` packed together. Returns the last hidden states (after the
    /// final norm), row-major with `hidden` columns: one row per token for
    /// [`Output::AllTokens`] (sequences in order), one row per sequence for
    /// [`Output::FirstToken`].
    pub fn forward(&self, seqs: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        self.forward_attending(seqs, None, output)
    }

    /// [`ModernBertEncoder::forward`] with sequence `i`'s tokens attending to its first
    /// `keys[i]` tokens only (all of them without `keys`): the tokens past them are queries
    /// and never keys, as ColBERT's query expansion tokens are.
    pub fn forward_attending(
        &self,
        seqs: &[&[u32]],
        keys: Option<&[usize]>,
        output: Output,
    ) -> Result<Vec<f32>> {
        check_ids(seqs, self.cfg.max_positions, self.cfg.vocab)?;
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let h = self.cfg.hidden;
        let batch = Batch::of(seqs.iter().map(|s| s.len()).collect()).attending(keys)?;
        let total = batch.tokens();
        let rope = self.rope(batch.longest());
        let mut ws = Workspace::new(total, &self.cfg);
        self.embed(seqs, &mut ws.x);
        output.each_layer(&self.layers, |layer, first_only| {
            self.layer(layer, &mut ws, &batch, &rope, first_only);
        });
        // With first tokens only, the last layer left one row per sequence at the front.
        ws.x.truncate(output.rows(total, seqs.len()) * h);
        let (norm, eps) = (&self.final_norm, self.cfg.eps);
        ws.x.par_chunks_mut(h * ROWS_PER_TASK)
            .for_each(|rows| norm_rows(rows, norm, eps));
        Ok(ws.x)
    }

    /// Token embeddings, then the embedding norm, into `x`.
    fn embed(&self, seqs: &[&[u32]], x: &mut [f32]) {
        let h = self.cfg.hidden;
        let ids: Vec<u32> = seqs.iter().flat_map(|s| s.iter().copied()).collect();
        x.par_chunks_mut(h)
            .zip(ids.par_iter())
            .for_each(|(row, &id)| {
                row.copy_from_slice(&self.embeddings[id as usize * h..][..h]);
                self.embed_norm.apply(row, self.cfg.eps);
            });
    }

    /// One layer over the packed rows in `ws.x`. With `first_only`, only each sequence's first
    /// row is computed past the keys and values, and `ws.x` ends with one row per sequence.
    fn layer(
        &self,
        l: &Layer,
        ws: &mut Workspace,
        batch: &Batch,
        rope: &RopeTables,
        first_only: bool,
    ) {
        let cfg = &self.cfg;
        let h = cfg.hidden;
        let total = batch.tokens();
        let n = total * h;
        // Wqkv over attn_norm(x) (x itself in layer 0).
        let input = match &l.attn_norm {
            Some(norm) => {
                let normed = &mut ws.normed[..n];
                normed.copy_from_slice(&ws.x[..n]);
                normed
                    .par_chunks_mut(h * ROWS_PER_TASK)
                    .for_each(|rows| norm_rows(rows, norm, cfg.eps));
                &ws.normed[..n]
            }
            None => &ws.x[..n],
        };
        let qkv = &mut ws.qkv[..total * 3 * h];
        l.qkv
            .forward(input, total, qkv, &mut ws.quant, Then::Nothing);
        let rope = if l.global { &rope.global } else { &rope.local };
        let window = (!l.global).then_some(cfg.window);
        let shape = heads_of(h, cfg.heads);
        let rows = batch.rotary_attention(qkv, &mut ws.ctx, shape, rope, window, first_only);
        if first_only {
            batch.firsts_to_front(&mut ws.x, h);
        }
        // x = x + Wo ctx, into `proj`, which then becomes `x`.
        let m = rows * h;
        let residual = Then::Add {
            residual: &ws.x[..m],
        };
        l.out.forward(
            &ws.ctx[..m],
            rows,
            &mut ws.proj[..m],
            &mut ws.quant,
            residual,
        );
        std::mem::swap(&mut ws.x, &mut ws.proj);
        // x = x + Wo GeGLU(Wi mlp_norm(x)), the same way.
        let (x, residual) = (
            &ws.x[..m],
            Then::Add {
                residual: &ws.x[..m],
            },
        );
        let norm = Some((&l.mlp_norm, cfg.eps));
        gated_mlp(
            &l.wi,
            &l.wo,
            cfg.act,
            norm,
            residual,
            x,
            rows,
            &mut ws.proj[..m],
        );
        std::mem::swap(&mut ws.x, &mut ws.proj);
    }
}

/// The buffers of one batch, sized for its tokens.
struct Workspace {
    /// Hidden states `(tokens, hidden)`.
    x: Vec<f32>,
    /// `attn_norm(x)`.
    normed: Vec<f32>,
    /// Stacked queries, keys and values `(tokens, 3 * hidden)`.
    qkv: Vec<f32>,
    /// Attention context `(tokens, hidden)`.
    ctx: Vec<f32>,
    /// Projection outputs `(tokens, hidden)`.
    proj: Vec<f32>,
    /// The quantized inputs of the int8 linear layers (empty in f32).
    quant: QuantRows,
}

impl Workspace {
    fn new(tokens: usize, cfg: &ModernBertConfig) -> Self {
        let h = cfg.hidden;
        Workspace {
            x: vec![0.0; tokens * h],
            normed: vec![0.0; tokens * h],
            qkv: vec![0.0; tokens * 3 * h],
            ctx: vec![0.0; tokens * h],
            proj: vec![0.0; tokens * h],
            quant: QuantRows::default(),
        }
    }
}
