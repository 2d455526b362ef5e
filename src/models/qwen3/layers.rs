//! The weights of a Qwen3 decoder in the layout the CPU kernels want: per layer one fused QKV
//! projection and one fused gate/up projection (one matrix product each instead of three and
//! two), the output and down projections, the norms; the token embeddings, read row by row from
//! the mapped file; the final norm.
//!
//! Tensor names and shapes are those of `transformers`' `Qwen3ForCausalLM`
//! (`model.layers.N.self_attn.q_proj.weight`, ...); every shape is checked against what
//! `config.json` implies, and a mismatch names the tensor and both shapes.

use rayon::prelude::*;

use super::config::Qwen3Config;
use super::ops::QkvLayout;
use crate::models::kernels::{transpose_into, Linear, Weight};
use crate::models::weights::Weights;
use crate::{Error, Result};

/// The name of the token embedding matrix.
pub(crate) const EMBED: &str = "model.embed_tokens.weight";
/// The name of the untied output head.
pub(crate) const LM_HEAD: &str = "lm_head.weight";

/// One decoder layer. Per `transformers`' `Qwen3DecoderLayer`:
/// `x += o(attn(rope(q_norm(q)), rope(k_norm(k)), v))` with `[q | k | v] = qkv(rms(x))`, then
/// `x += down(silu(gate) * up)` with `[gate | up] = gate_up(rms(x))`.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    /// `input_layernorm`, `(hidden)`.
    pub input_norm: Vec<f32>,
    /// `q_proj`, `k_proj`, `v_proj` stacked: `(q_heads * head_dim + 2 * kv_heads * head_dim,
    /// hidden)`, so one product gives a row `[q | k | v]` (see [`QkvLayout`]). Zero bias
    /// without `attention_bias`.
    pub qkv: Linear,
    /// `q_norm`, `(head_dim)`, applied to every query head.
    pub q_norm: Vec<f32>,
    /// `k_norm`, `(head_dim)`, applied to every key head.
    pub k_norm: Vec<f32>,
    /// `o_proj`, `(hidden, q_heads * head_dim)`.
    pub o: Linear,
    /// `post_attention_layernorm`, `(hidden)`.
    pub post_norm: Vec<f32>,
    /// `gate_proj` and `up_proj` stacked: `(2 * intermediate, hidden)`, a row `[gate | up]`.
    pub gate_up: Linear,
    /// `down_proj`, `(hidden, intermediate)`.
    pub down: Linear,
}

impl Layer {
    /// Loads layer `i` (`model.layers.{i}.*`), fusing the projections as it reads them.
    pub fn load(w: &Weights, cfg: &Qwen3Config, i: usize, format: MatrixFormat) -> Result<Self> {
        let p = format!("model.layers.{i}");
        let (h, hd, ffn) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let layout = qkv_layout(cfg);
        let (q_out, kv_out) = (layout.q_width(), layout.kv_width());
        let bias = cfg.attention_bias;
        let attn = |name: &str| format!("{p}.self_attn.{name}");
        let qkv = stacked(
            w,
            &[
                (attn("q_proj"), q_out),
                (attn("k_proj"), kv_out),
                (attn("v_proj"), kv_out),
            ],
            h,
            bias,
            format,
        )?;
        let mlp = |name: &str| format!("{p}.mlp.{name}");
        let gate_up = stacked(
            w,
            &[(mlp("gate_proj"), ffn), (mlp("up_proj"), ffn)],
            h,
            false,
            format,
        )?;
        Ok(Layer {
            input_norm: w.f32(&format!("{p}.input_layernorm.weight"), &[h])?,
            qkv,
            q_norm: w.f32(&attn("q_norm.weight"), &[hd])?,
            k_norm: w.f32(&attn("k_norm.weight"), &[hd])?,
            o: stacked(w, &[(attn("o_proj"), h)], q_out, bias, format)?,
            post_norm: w.f32(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
            gate_up,
            down: stacked(w, &[(mlp("down_proj"), h)], ffn, false, format)?,
        })
    }
}

/// How a [`Decoder`] keeps its matrices (see [`Weight`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MatrixFormat {
    /// `f32`, laid out for products over many rows ([`Weight::F32Cols`]): scoring, which
    /// never decodes.
    Products,
    /// `f32`, laid out for one row at a time ([`Weight::F32`]): generation.
    Steps,
    /// `bf16`, one row at a time ([`Weight::Bf16`]): generation with `Precision::Bf16`.
    StepsBf16,
}

impl MatrixFormat {
    /// The format of `matrix`.
    pub fn apply(self, matrix: Linear) -> Linear {
        match self {
            MatrixFormat::Products => matrix.into_cols(),
            MatrixFormat::Steps => matrix,
            MatrixFormat::StepsBf16 => matrix.to_bf16(),
        }
    }
}

/// The fused QKV row layout of `cfg`.
pub(crate) fn qkv_layout(cfg: &Qwen3Config) -> QkvLayout {
    QkvLayout {
        q_heads: cfg.num_attention_heads,
        kv_heads: cfg.num_key_value_heads,
        head_dim: cfg.head_dim,
    }
}

/// Linear layers `prefix.weight` of `(outputs, inputs)` each (and `prefix.bias` when `bias`),
/// read straight into one stacked `(Σ outputs, inputs)` layer.
fn stacked(
    w: &Weights,
    parts: &[(String, usize)],
    inputs: usize,
    bias: bool,
    format: MatrixFormat,
) -> Result<Linear> {
    let outputs: usize = parts.iter().map(|(_, n)| n).sum();
    let mut weight = vec![0.0f32; outputs * inputs];
    let mut biases = vec![0.0f32; outputs];
    let mut at = 0;
    for (prefix, n) in parts {
        let name = format!("{prefix}.weight");
        if format == MatrixFormat::Products {
            // Each part is read into a scratch buffer that stays warm, then written transposed
            // into its columns: the layer never exists row-major in full.
            SCRATCH.with(|cell| -> Result<()> {
                let mut scratch = cell.borrow_mut();
                scratch.resize(n * inputs, 0.0);
                w.read_into(&name, &[*n, inputs], &mut scratch)?;
                transpose_into(&scratch, *n, inputs, &mut weight[at..], outputs, |v| v);
                Ok(())
            })?;
        } else {
            w.read_into(
                &name,
                &[*n, inputs],
                &mut weight[at * inputs..(at + n) * inputs],
            )?;
        }
        if bias {
            w.read_into(&format!("{prefix}.bias"), &[*n], &mut biases[at..at + n])?;
        }
        at += n;
    }
    let weight = match format {
        MatrixFormat::Products => Weight::F32Cols(weight),
        _ => Weight::F32(weight),
    };
    Ok(format.apply(Linear {
        weight,
        bias: biases,
        inputs,
        outputs,
    }))
}

thread_local! {
    /// One weight matrix of a layer being loaded, before it is transposed into place.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The token embeddings, read from the memory-mapped file a batch at a time: only the rows of
/// the tokens seen are ever resident, and nothing is converted at load time.
#[derive(Debug)]
pub(crate) struct Embeddings {
    weights: Weights,
    rows: usize,
    width: usize,
}

impl Embeddings {
    /// Rows of the matrix (token ids must be below this).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The embeddings of `ids` into `out` (`ids.len() * hidden` values). An id outside the
    /// matrix is an [`Error::Model`].
    pub fn lookup(&self, ids: &[u32], out: &mut [f32]) -> Result<()> {
        self.weights.rows_into(EMBED, self.width, ids, out)
    }

    /// The mapped checkpoint, to read more of it (an output head).
    pub fn weights(&self) -> &Weights {
        &self.weights
    }
}

/// Every weight of a Qwen3 decoder but the output head (which scoring and generation use
/// differently: two rows against the whole matrix).
#[derive(Debug)]
pub(crate) struct Decoder {
    /// The configuration the weights were checked against.
    pub cfg: Qwen3Config,
    /// Token embeddings (also the output head when `tie_word_embeddings`).
    pub embed: Embeddings,
    /// The decoder layers, in order.
    pub layers: Vec<Layer>,
    /// `model.norm`, `(hidden)`.
    pub final_norm: Vec<f32>,
}

impl Decoder {
    /// Loads the decoder from an opened checkpoint ([`Weights::open`]), which the embeddings
    /// keep; the layers load in parallel on the current rayon pool, each layer's matrices put
    /// in `format` as soon as the layer is read (norms stay f32).
    pub fn from_weights(weights: Weights, cfg: Qwen3Config, format: MatrixFormat) -> Result<Self> {
        let h = cfg.hidden_size;
        let shape = weights.shape(EMBED)?.to_vec();
        if shape.len() != 2 || shape[1] != h {
            return Err(Error::model(format!(
                "{EMBED} has shape {shape:?}, expected (vocab, {h}) (hidden_size in config.json)"
            )));
        }
        let layers = (0..cfg.num_hidden_layers)
            .into_par_iter()
            .map(|i| Layer::load(&weights, &cfg, i, format))
            .collect::<Result<Vec<_>>>()?;
        let final_norm = weights.f32("model.norm.weight", &[h])?;
        Ok(Decoder {
            embed: Embeddings {
                weights,
                rows: shape[0],
                width: h,
            },
            cfg,
            layers,
            final_norm,
        })
    }
}

/// The name of the output head's matrix: the embeddings when tied, else `lm_head.weight` (an
/// untied checkpoint without it is an [`Error::Model`]).
pub(crate) fn head_name(w: &Weights, cfg: &Qwen3Config) -> Result<&'static str> {
    if cfg.tie_word_embeddings {
        Ok(EMBED)
    } else if w.has(LM_HEAD) {
        Ok(LM_HEAD)
    } else {
        Err(Error::model(format!(
            "no {LM_HEAD} in the weights, and config.json says tie_word_embeddings is false"
        )))
    }
}
