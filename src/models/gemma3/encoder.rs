//! The packed Gemma3 text encoder (EmbeddingGemma's bidirectional `Gemma3TextModel`, as
//! transformers 5 runs it) on the shared CPU kernels.
//!
//! A batch is *packed* as in the other encoders: the tokens of all its sequences are one
//! `(tokens, hidden)` matrix, the projections and the MLP run over real tokens only, and
//! attention runs within each sequence, at positions counted from its first token.
//!
//! The embeddings are the token rows (read from the mapped file, only those a batch uses)
//! times `sqrt(hidden)`. Per layer, every norm an RMSNorm that scales by `1 + w`:
//! - `x = x + post_attention_norm(o_proj(attention(RoPE(q_norm(Q)), RoPE(k_norm(K)), V)))`
//!   over `q/k/v_proj(input_norm(x))`; `num_attention_heads` query heads share
//!   `num_key_value_heads` key/value heads; scores scale by `query_pre_attn_scalar^-1/2`;
//! - `x = x + post_feedforward_norm(down(act(gate(y)) * up(y)))` with
//!   `y = pre_feedforward_norm(x)`;
//!
//! then the final norm. Full-attention layers see the whole sequence, sliding layers the
//! tokens at most `sliding_window / 2` positions away on either side; each kind has its own
//! RoPE.
//!
//! The shared attention (`models::layers::attention`) takes heads of one size with
//! `1 / sqrt(head_dim)` scores, so the key and value heads are repeated for the query heads
//! that share them, and the score scale's ratio to `query_pre_attn_scalar`'s is folded into
//! the query norm's weights (exactly 1 when `query_pre_attn_scalar` is `head_dim`, as in
//! EmbeddingGemma).

use std::sync::{Arc, RwLock};

use rayon::prelude::*;

use super::config::Gemma3Config;
use crate::models::dir::{ModelDir, WEIGHTS_FILE};
use crate::models::layers::attention::{attention, Heads};
use crate::models::layers::dense::{Dense, Output};
use crate::models::layers::encoder::{check_f32_or_int8, check_ids};
use crate::models::layers::kernels::Then;
use crate::models::layers::quant::QuantRows;
use crate::models::layers::rms::{norm_rope_rows, rms_norm_rows, QkvLayout};
use crate::models::layers::rope::Rope;
use crate::models::layers::rotary::{gated_mlp, grown, Batch};
use crate::models::layers::weights::Weights;
use crate::models::Precision;
use crate::{Error, Result};

/// Rows per task of the element-wise passes.
const ROWS_PER_TASK: usize = 16;

/// One layer. Norm weights are stored as the factor they scale by (`1 + w`).
#[derive(Debug)]
struct Layer {
    input_norm: Vec<f32>,
    /// Queries, keys and values stacked: `QkvLayout::width()` outputs.
    qkv: Dense,
    /// `(1 + w) * sqrt(head_dim / query_pre_attn_scalar)`.
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    o: Dense,
    post_attention_norm: Vec<f32>,
    pre_feedforward_norm: Vec<f32>,
    /// `[gate | up]`: `2 * intermediate` outputs.
    gate_up: Dense,
    down: Dense,
    post_feedforward_norm: Vec<f32>,
    global: bool,
}

/// The RoPE tables of both layer kinds for positions `0..positions`.
#[derive(Debug)]
struct RopeTables {
    global: Rope,
    local: Rope,
    positions: usize,
}

/// A Gemma3 text encoder's weights, in f32 or int8 linear layers.
#[derive(Debug)]
pub(crate) struct Gemma3Encoder {
    cfg: Gemma3Config,
    /// The mapped checkpoint: the embedding rows are read from it per batch (EmbeddingGemma's
    /// 262144 rows would be 805 MB in f32).
    weights: Weights,
    /// `embed_tokens.weight`'s name in the checkpoint.
    embeddings: String,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    /// Built for the longest sequence seen so far (never more than `max_position_embeddings`).
    rope: RwLock<Arc<RopeTables>>,
}

impl Gemma3Encoder {
    /// Loads the encoder of `dir` with the shapes `cfg` implies, after checking them against
    /// the safetensors header; a missing tensor or a wrong shape is an [`Error::Model`] naming
    /// the file and the tensor. The tensors are read at the file's root (`Gemma3TextModel`)
    /// or under `model.` (`Gemma3ForCausalLM`). With [`Precision::Int8`] the linear layers
    /// are quantized; embeddings and norms stay in f32. [`Precision::Bf16`] is refused.
    pub fn load(dir: &ModelDir, cfg: Gemma3Config, precision: Precision) -> Result<Self> {
        check_f32_or_int8(precision, "Gemma3 encoder")?;
        let weights = Weights::open(dir.path())?;
        let prefix = if weights.has("embed_tokens.weight") {
            ""
        } else if weights.has("model.embed_tokens.weight") {
            "model."
        } else {
            return Err(Error::model(format!(
                "{}: no Gemma3 tensors (expected embed_tokens.weight, or \
                 model.embed_tokens.weight)",
                dir.path().join(WEIGHTS_FILE).display()
            )));
        };
        let name = |n: &str| format!("{prefix}{n}");
        check_config(&weights, &cfg, prefix)?;
        let (h, d) = (cfg.hidden, cfg.head_dim);
        let layout = layout(&cfg);
        let norm = |n: &str, width: usize| -> Result<Vec<f32>> {
            let w = weights.f32(&name(&format!("{n}.weight")), &[width])?;
            Ok(w.into_iter().map(|w| 1.0 + w).collect())
        };
        let linear = |parts: &[(&str, usize)], inputs: usize, bias: bool| -> Result<Dense> {
            let linear = weights.stacked_linear(prefix, parts, inputs, bias)?;
            Ok(Dense::new(linear, precision))
        };
        // The shared attention scales scores by 1/sqrt(head_dim); Gemma3 by
        // 1/sqrt(query_pre_attn_scalar).
        let query_factor = (d as f64 / cfg.query_scalar).sqrt() as f32;
        let (i, ab) = (cfg.intermediate, cfg.attention_bias);
        let layers = (0..cfg.layers)
            .map(|n| {
                let l = format!("layers.{n}");
                let attn = format!("{l}.self_attn");
                let q_norm = norm(&format!("{attn}.q_norm"), d)?;
                Ok(Layer {
                    input_norm: norm(&format!("{l}.input_layernorm"), h)?,
                    qkv: linear(
                        &[
                            (&format!("{attn}.q_proj"), layout.q_width()),
                            (&format!("{attn}.k_proj"), layout.kv_width()),
                            (&format!("{attn}.v_proj"), layout.kv_width()),
                        ],
                        h,
                        ab,
                    )?,
                    q_norm: match query_factor {
                        1.0 => q_norm,
                        f => q_norm.into_iter().map(|w| w * f).collect(),
                    },
                    k_norm: norm(&format!("{attn}.k_norm"), d)?,
                    o: linear(&[(&format!("{attn}.o_proj"), h)], layout.q_width(), ab)?,
                    post_attention_norm: norm(&format!("{l}.post_attention_layernorm"), h)?,
                    pre_feedforward_norm: norm(&format!("{l}.pre_feedforward_layernorm"), h)?,
                    gate_up: linear(
                        &[
                            (&format!("{l}.mlp.gate_proj"), i),
                            (&format!("{l}.mlp.up_proj"), i),
                        ],
                        h,
                        false,
                    )?,
                    down: linear(&[(&format!("{l}.mlp.down_proj"), h)], i, false)?,
                    post_feedforward_norm: norm(&format!("{l}.post_feedforward_layernorm"), h)?,
                    global: cfg.global[n],
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let final_norm = norm("norm", h)?;
        let rope = Arc::new(RopeTables {
            global: Rope::new(d, cfg.global_rope.theta, 0),
            local: Rope::new(d, cfg.local_rope.theta, 0),
            positions: 0,
        });
        Ok(Gemma3Encoder {
            embeddings: name("embed_tokens.weight"),
            cfg,
            weights,
            layers,
            final_norm,
            rope: RwLock::new(rope),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Gemma3Config {
        &self.cfg
    }

    /// The RoPE tables for at least `positions` positions.
    fn rope(&self, positions: usize) -> Arc<RopeTables> {
        let (d, cfg) = (self.cfg.head_dim, &self.cfg);
        grown(
            &self.rope,
            |t| t.positions,
            positions,
            cfg.max_positions,
            |n| RopeTables {
                global: cfg.global_rope.scaling.rope(d, cfg.global_rope.theta, n),
                local: cfg.local_rope.scaling.rope(d, cfg.local_rope.theta, n),
                positions: n,
            },
        )
    }

    /// Runs the encoder on `seqs` packed together. Returns the last hidden states (after the
    /// final norm), row-major with `hidden` columns: one row per token for
    /// [`Output::AllTokens`] (sequences in order), one row per sequence for
    /// [`Output::FirstToken`].
    pub fn forward(&self, seqs: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        check_ids(seqs, self.cfg.max_positions, self.cfg.vocab)?;
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let (h, eps) = (self.cfg.hidden, self.cfg.eps);
        let batch = Batch::of(seqs.iter().map(|s| s.len()).collect());
        let total = batch.tokens();
        let rope = self.rope(batch.longest());
        let mut ws = Workspace::new(total, &self.cfg);
        let ids: Vec<u32> = seqs.iter().flat_map(|s| s.iter().copied()).collect();
        self.weights
            .rows_into(&self.embeddings, h, &ids, &mut ws.x)?;
        // transformers multiplies by sqrt(hidden) rounded to float32.
        let scale = (h as f64).sqrt() as f32;
        ws.x.par_iter_mut().for_each(|v| *v *= scale);
        for layer in &self.layers {
            self.layer(layer, &mut ws, &batch, &rope);
        }
        let mut out = vec![0.0; total * h];
        rms_norm_rows(&ws.x, &mut out, &self.final_norm, eps);
        if output == Output::FirstToken {
            let firsts = batch.starts.iter();
            return Ok(firsts
                .flat_map(|&s| out[s * h..(s + 1) * h].to_vec())
                .collect());
        }
        Ok(out)
    }

    /// One layer over the packed rows in `ws.x`.
    fn layer(&self, l: &Layer, ws: &mut Workspace, batch: &Batch, rope: &RopeTables) {
        let cfg = &self.cfg;
        let (h, eps, total) = (cfg.hidden, cfg.eps, batch.tokens());
        let layout = layout(cfg);
        let n = total * h;
        // Attention.
        rms_norm_rows(&ws.x[..n], &mut ws.normed[..n], &l.input_norm, eps);
        let fused = &mut ws.fused[..total * layout.width()];
        l.qkv
            .forward(&ws.normed[..n], total, fused, &mut ws.quant, Then::Nothing);
        let table = if l.global { &rope.global } else { &rope.local };
        let norms = Some((&l.q_norm[..], &l.k_norm[..]));
        norm_rope_rows(fused, &batch.positions, layout, norms, table, eps);
        let shape = Heads {
            hidden: layout.q_width(),
            heads: cfg.heads,
            dim: cfg.head_dim,
        };
        let qkv = match cfg.kv_heads == cfg.heads {
            true => &ws.fused[..total * layout.width()],
            false => {
                let expanded = &mut ws.expanded[..total * 3 * shape.hidden];
                repeat_kv(&ws.fused, expanded, layout);
                &ws.expanded[..total * 3 * shape.hidden]
            }
        };
        let ctx = &mut ws.ctx[..total * shape.hidden];
        let window = (!l.global).then_some(cfg.window);
        attention(
            qkv,
            ctx,
            &batch.lens,
            &batch.starts,
            &batch.keys,
            shape,
            window,
            false,
        );
        l.o.forward(
            &ws.ctx[..total * shape.hidden],
            total,
            &mut ws.proj[..n],
            &mut ws.quant,
            Then::Nothing,
        );
        add_normed(
            &mut ws.x[..n],
            &ws.proj[..n],
            &mut ws.normed[..n],
            &l.post_attention_norm,
            eps,
        );
        // MLP.
        rms_norm_rows(
            &ws.x[..n],
            &mut ws.normed[..n],
            &l.pre_feedforward_norm,
            eps,
        );
        gated_mlp(
            &l.gate_up,
            &l.down,
            cfg.act,
            None,
            Then::Nothing,
            &ws.normed[..n],
            total,
            &mut ws.proj[..n],
        );
        add_normed(
            &mut ws.x[..n],
            &ws.proj[..n],
            &mut ws.normed[..n],
            &l.post_feedforward_norm,
            eps,
        );
    }
}

/// The layout of a layer's stacked q/k/v projection.
fn layout(cfg: &Gemma3Config) -> QkvLayout {
    QkvLayout {
        q_heads: cfg.heads,
        kv_heads: cfg.kv_heads,
        head_dim: cfg.head_dim,
    }
}

/// Checks every size `config.json` gives against the safetensors header before any of them
/// sizes an allocation: a mismatch is an [`Error::Model`] naming `config.json` and the key.
fn check_config(w: &Weights, cfg: &Gemma3Config, prefix: &str) -> Result<()> {
    let name = |n: &str| format!("{prefix}{n}");
    let embed = name("embed_tokens.weight");
    w.check_config_size("hidden_size", cfg.hidden, &embed, 1)?;
    w.check_config_size("vocab_size", cfg.vocab, &embed, 0)?;
    let last = name(&format!(
        "layers.{}.self_attn.q_proj.weight",
        cfg.layers - 1
    ));
    w.check_config_tensor("num_hidden_layers", cfg.layers, &last)?;
    let q_norm = name("layers.0.self_attn.q_norm.weight");
    w.check_config_size("head_dim", cfg.head_dim, &q_norm, 0)?;
    let q = name("layers.0.self_attn.q_proj.weight");
    let heads = "num_attention_heads * head_dim";
    w.check_config_size(heads, cfg.heads * cfg.head_dim, &q, 0)?;
    let k = name("layers.0.self_attn.k_proj.weight");
    let kv_heads = "num_key_value_heads * head_dim";
    w.check_config_size(kv_heads, cfg.kv_heads * cfg.head_dim, &k, 0)?;
    let down = name("layers.0.mlp.down_proj.weight");
    w.check_config_size("intermediate_size", cfg.intermediate, &down, 1)
}

/// Copies the stacked `[q | k | v]` rows of `fused` (`layout`'s widths) into `out` as
/// `[q | k' | v']` with every query head's key and value heads (`k'`, `v'` as wide as `q`):
/// query head `i` reads key/value head `i / (q_heads / kv_heads)`, as transformers'
/// `repeat_kv`.
fn repeat_kv(fused: &[f32], out: &mut [f32], layout: QkvLayout) {
    let (qw, kvw, d) = (layout.q_width(), layout.kv_width(), layout.head_dim);
    let group = layout.q_heads / layout.kv_heads;
    out.par_chunks_mut(3 * qw * ROWS_PER_TASK)
        .zip(fused.par_chunks(layout.width() * ROWS_PER_TASK))
        .for_each(|(out, fused)| {
            for (o, f) in out
                .chunks_exact_mut(3 * qw)
                .zip(fused.chunks_exact(layout.width()))
            {
                o[..qw].copy_from_slice(&f[..qw]);
                for head in 0..layout.q_heads {
                    let kv = head / group;
                    let (src_k, src_v) = (qw + kv * d, qw + kvw + kv * d);
                    o[qw + head * d..][..d].copy_from_slice(&f[src_k..src_k + d]);
                    o[2 * qw + head * d..][..d].copy_from_slice(&f[src_v..src_v + d]);
                }
            }
        });
}

/// `x += rms_norm(y) * weight`, row by row (`scratch` as long as `x`).
fn add_normed(x: &mut [f32], y: &[f32], scratch: &mut [f32], weight: &[f32], eps: f32) {
    rms_norm_rows(y, scratch, weight, eps);
    x.par_chunks_mut(weight.len() * ROWS_PER_TASK)
        .zip(scratch.par_chunks(weight.len() * ROWS_PER_TASK))
        .for_each(|(x, s)| x.iter_mut().zip(s).for_each(|(x, s)| *x += s));
}

/// The buffers of one batch, sized for its tokens.
struct Workspace {
    /// Hidden states `(tokens, hidden)`.
    x: Vec<f32>,
    /// A norm's output `(tokens, hidden)`.
    normed: Vec<f32>,
    /// Stacked queries, keys and values `(tokens, layout.width())`.
    fused: Vec<f32>,
    /// The same with the key and value heads repeated `(tokens, 3 * heads * head_dim)`
    /// (empty without grouped-query attention).
    expanded: Vec<f32>,
    /// Attention context `(tokens, heads * head_dim)`.
    ctx: Vec<f32>,
    /// Projection outputs `(tokens, hidden)`.
    proj: Vec<f32>,
    /// The quantized inputs of the int8 linear layers (empty in f32).
    quant: QuantRows,
}

impl Workspace {
    fn new(tokens: usize, cfg: &Gemma3Config) -> Self {
        let (h, layout) = (cfg.hidden, layout(cfg));
        let expanded = match cfg.kv_heads == cfg.heads {
            true => 0,
            false => tokens * 3 * layout.q_width(),
        };
        Workspace {
            x: vec![0.0; tokens * h],
            normed: vec![0.0; tokens * h],
            fused: vec![0.0; tokens * layout.width()],
            expanded: vec![0.0; expanded],
            ctx: vec![0.0; tokens * layout.q_width()],
            proj: vec![0.0; tokens * h],
            quant: QuantRows::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_kv_gives_each_query_head_its_group_s_key_and_value() {
        let layout = QkvLayout {
            q_heads: 4,
            kv_heads: 2,
            head_dim: 3,
        };
        let rows = 37;
        let fused: Vec<f32> = (0..rows * layout.width()).map(|v| v as f32).collect();
        let mut out = vec![0.0; rows * 3 * layout.q_width()];
        repeat_kv(&fused, &mut out, layout);
        let (qw, w) = (layout.q_width(), layout.width());
        for r in 0..rows {
            let (f, o) = (&fused[r * w..][..w], &out[r * 3 * qw..][..3 * qw]);
            assert_eq!(&o[..qw], &f[..qw]);
            for head in 0..4 {
                let kv = head / 2;
                assert_eq!(&o[qw + head * 3..][..3], &f[qw + kv * 3..][..3], "row {r}");
                assert_eq!(&o[2 * qw + head * 3..][..3], &f[qw + 6 + kv * 3..][..3]);
            }
        }
    }
}
