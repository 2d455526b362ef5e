//! The weights of a Qwen3 decoder in the layout the CPU kernels want: per layer one fused QKV
//! projection and one fused gate/up projection (one matrix product each instead of three and
//! two), the output and down projections, the norms; the token embeddings, read row by row from
//! the mapped file; the final norm.
//!
//! Tensor names and shapes are those of `transformers`' `Qwen3ForCausalLM`
//! (`model.layers.N.self_attn.q_proj.weight`, ...) and `Qwen2ForCausalLM` (the same names, plus
//! q/k/v biases, without `q_norm`/`k_norm`); every shape is checked against what `config.json`
//! implies, and a mismatch names the tensor and both shapes.

use std::path::Path;

use rayon::prelude::*;

use super::config::{DecoderFamily, Qwen3Config};
use super::ops::{QkNormWeights, QkvLayout};
use crate::models::layers::kernels::{with_scratch, Linear, Then, Weight};
use crate::models::layers::panels::PanelLinear;
use crate::models::layers::quant::{QuantLinear, QuantRows};
use crate::models::layers::weights::Weights;
use crate::{Error, Result};

/// The name of the token embedding matrix.
pub(crate) const EMBED: &str = "model.embed_tokens.weight";
/// The name of the untied output head.
pub(crate) const LM_HEAD: &str = "lm_head.weight";
/// The name of a sequence classifier's head (one row per label).
pub(crate) const SCORE: &str = "score.weight";

/// One decoder layer. Per `transformers`' `Qwen3DecoderLayer`:
/// `x += o(attn(rope(q_norm(q)), rope(k_norm(k)), v))` with `[q | k | v] = qkv(rms(x))`, then
/// `x += down(silu(gate) * up)` with `[gate | up] = gate_up(rms(x))`. `Qwen2DecoderLayer` is
/// the same without `q_norm` and `k_norm`.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    /// `input_layernorm`, `(hidden)`.
    pub input_norm: Vec<f32>,
    /// `q_proj`, `k_proj`, `v_proj` stacked: `(q_heads * head_dim + 2 * kv_heads * head_dim,
    /// hidden)`, so one product gives a row `[q | k | v]` (see [`QkvLayout`]). Zero bias
    /// without biases in the checkpoint ([`Qwen3Config::qkv_bias`]).
    pub qkv: Matrix,
    /// The per-head q/k norms (Qwen3; `None` for Qwen2).
    pub qk_norm: Option<QkNorm>,
    /// `o_proj`, `(hidden, q_heads * head_dim)`.
    pub o: Matrix,
    /// `post_attention_layernorm`, `(hidden)`.
    pub post_norm: Vec<f32>,
    /// `gate_proj` and `up_proj` stacked: `(2 * intermediate, hidden)`, a row `[gate | up]`.
    pub gate_up: Matrix,
    /// `down_proj`, `(hidden, intermediate)`.
    pub down: Matrix,
}

impl Layer {
    /// Loads layer `i` (`model.layers.{i}.*`), fusing the projections as it reads them.
    /// Each matrix is read into `buffer` (grown as needed and reused; see [`stacked`]), then
    /// put in `format`.
    pub fn load(
        w: &Weights,
        cfg: &Qwen3Config,
        i: usize,
        format: MatrixFormat,
        buffer: &mut Vec<f32>,
    ) -> Result<Self> {
        let p = format!("model.layers.{i}");
        let (h, hd, ffn) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let layout = qkv_layout(cfg);
        let (q_out, kv_out) = (layout.q_width(), layout.kv_width());
        let attn = |name: &str| format!("{p}.self_attn.{name}");
        let mlp = |name: &str| format!("{p}.mlp.{name}");
        // Phi-3 saves both fused, in the order the kernels take them (q, k, v; gate, up).
        let (qkv_parts, gate_up_parts) = match cfg.family {
            DecoderFamily::Phi3 => (
                vec![(attn("qkv_proj"), q_out + 2 * kv_out)],
                vec![(mlp("gate_up_proj"), 2 * ffn)],
            ),
            _ => (
                vec![
                    (attn("q_proj"), q_out),
                    (attn("k_proj"), kv_out),
                    (attn("v_proj"), kv_out),
                ],
                vec![(mlp("gate_proj"), ffn), (mlp("up_proj"), ffn)],
            ),
        };
        let qkv = stacked(w, &qkv_parts, h, cfg.qkv_bias(), format, buffer)?;
        let gate_up = stacked(w, &gate_up_parts, h, false, format, buffer)?;
        let o = stacked(
            w,
            &[(attn("o_proj"), h)],
            q_out,
            cfg.o_bias(),
            format,
            buffer,
        )?;
        let qk_norm = if cfg.qk_norm() {
            Some(QkNorm {
                q: w.f32(&attn("q_norm.weight"), &[hd])?,
                k: w.f32(&attn("k_norm.weight"), &[hd])?,
            })
        } else {
            None
        };
        let down = stacked(w, &[(mlp("down_proj"), h)], ffn, false, format, buffer)?;
        Ok(Layer {
            input_norm: w.f32(&format!("{p}.input_layernorm.weight"), &[h])?,
            qkv,
            qk_norm,
            o,
            post_norm: w.f32(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
            gate_up,
            down,
        })
    }
}

/// Qwen3's per-head RMSNorms of the queries and keys, applied before RoPE.
#[derive(Debug, Clone)]
pub(crate) struct QkNorm {
    /// `q_norm`, `(head_dim)`, applied to every query head.
    pub q: Vec<f32>,
    /// `k_norm`, `(head_dim)`, applied to every key head.
    pub k: Vec<f32>,
}

impl Layer {
    /// The q/k norm weights as `ops` takes them (`None` for Qwen2).
    pub fn qk_norm_weights(&self) -> QkNormWeights<'_> {
        self.qk_norm
            .as_ref()
            .map(|n| (n.q.as_slice(), n.k.as_slice()))
    }
}

/// How a [`Decoder`] keeps its matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MatrixFormat {
    /// `f32` in column panels ([`Matrix::Panels`]): scoring and generation.
    F32,
    /// `bf16` in column panels ([`Matrix::Panels`]): scoring and generation with
    /// `Precision::Bf16` (the products' inputs rounded to `bf16` too).
    Bf16,
    /// `int8` ([`Matrix::Int8`]): scoring with `Precision::Int8`.
    Int8,
}

impl MatrixFormat {
    /// `linear` (row-major `f32`, as read) in this format: a copy, `linear` is left as it is.
    pub fn apply(self, linear: &Linear) -> Matrix {
        match self {
            MatrixFormat::F32 => Matrix::Panels(PanelLinear::new(linear)),
            MatrixFormat::Bf16 => Matrix::Panels(PanelLinear::bf16(linear)),
            // 8-bit activations: 7 (the faster AVX2 kernel) move a decoder's logits too far.
            MatrixFormat::Int8 => Matrix::Int8(QuantLinear::with_8bit_activations(linear)),
        }
    }
}

/// One matrix of a layer, in the form its use wants. `out = x · wᵀ + bias` in every form.
#[derive(Debug, Clone)]
pub(crate) enum Matrix {
    /// `f32` or `bf16` packed in column panels (`models::layers::panels`): products over many rows
    /// (scoring, prefill) run on the crate's tiles without gathering the weights, and a
    /// decode step streams each panel once (`bf16`: half the bytes).
    Panels(PanelLinear),
    /// `int8` weights and activations quantized per row on the fly (`models::layers::quant`): scoring
    /// only.
    Int8(QuantLinear),
}

thread_local! {
    /// The quantized rows of an int8 product running on this thread.
    static QUANT_ROWS: std::cell::RefCell<QuantRows> = std::cell::RefCell::default();
    /// An int8 product's output before it is added to the residual stream.
    static SUMS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Matrix {
    /// Values per input row.
    pub fn inputs(&self) -> usize {
        match self {
            Matrix::Panels(l) => l.inputs(),
            Matrix::Int8(q) => q.inputs(),
        }
    }

    /// Values per output row.
    pub fn outputs(&self) -> usize {
        match self {
            Matrix::Panels(l) => l.outputs(),
            Matrix::Int8(q) => q.outputs(),
        }
    }

    /// `out (rows, outputs) = x (rows, inputs) · wᵀ + bias`.
    pub fn forward(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        match self {
            Matrix::Panels(l) => l.forward(x, rows, out, Then::Nothing),
            Matrix::Int8(q) => with_scratch(&QUANT_ROWS, |scratch| {
                q.forward(x, rows, out, scratch, Then::Nothing)
            }),
        }
    }

    /// `out (rows, outputs) += x (rows, inputs) · wᵀ + bias`: a residual stream.
    pub fn forward_add(&self, x: &[f32], rows: usize, out: &mut [f32]) {
        match self {
            Matrix::Panels(l) => l.forward_add(x, rows, out),
            Matrix::Int8(_) => with_scratch(&SUMS, |sums| {
                let n = rows * self.outputs();
                sums.resize(n, 0.0);
                self.forward(x, rows, sums);
                out[..n]
                    .iter_mut()
                    .zip(sums.iter())
                    .for_each(|(o, s)| *o += s);
            }),
        }
    }

    /// One input row (a decode step): `out = w · x + bias`, or `+=` when `accumulate`.
    pub fn gemv(&self, x: &[f32], out: &mut [f32], accumulate: bool) {
        match self {
            Matrix::Panels(l) => l.gemv(x, out, accumulate),
            Matrix::Int8(_) if accumulate => self.forward_add(x, 1, out),
            Matrix::Int8(_) => self.forward(x, 1, out),
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
/// read into one stacked `(Σ outputs, inputs)` layer, in `format`.
///
/// The row-major values are read into `buffer`, which keeps its memory from one matrix to the
/// next: a fresh buffer per matrix would have the kernel map and zero every page of it once
/// more (half the load time of a 0.6B model went there), only for the values to be copied
/// into `format` and freed.
fn stacked(
    w: &Weights,
    parts: &[(String, usize)],
    inputs: usize,
    bias: bool,
    format: MatrixFormat,
    buffer: &mut Vec<f32>,
) -> Result<Matrix> {
    // The shapes are checked before the buffer grows to what they imply.
    for (prefix, n) in parts {
        w.expect_shape(&format!("{prefix}.weight"), &[*n, inputs])?;
    }
    let outputs: usize = parts.iter().map(|(_, n)| n).sum();
    let size = outputs * inputs;
    // Every value is overwritten below: only new capacity needs a value.
    if buffer.len() < size {
        buffer.resize(size, 0.0);
    }
    buffer.truncate(size);
    let mut biases = vec![0.0f32; outputs];
    let mut at = 0;
    for (prefix, n) in parts {
        w.read_into(
            &format!("{prefix}.weight"),
            &[*n, inputs],
            &mut buffer[at * inputs..(at + n) * inputs],
        )?;
        if bias {
            w.read_into(&format!("{prefix}.bias"), &[*n], &mut biases[at..at + n])?;
        }
        at += n;
    }
    let linear = Linear {
        weight: Weight::F32(std::mem::take(buffer)),
        bias: biases,
        inputs,
        outputs,
    };
    let matrix = format.apply(&linear);
    if let Weight::F32(values) = linear.weight {
        *buffer = values;
    }
    Ok(matrix)
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
    /// in `format` as soon as the layer is read (norms stay f32), through one read buffer per
    /// loading task.
    ///
    /// A checkpoint saved from the bare decoder (`embed_tokens.weight`, `layers.N.*`, as
    /// Qwen3-Embedding's is) is read under the same `model.` names.
    pub fn from_weights(weights: Weights, cfg: Qwen3Config, format: MatrixFormat) -> Result<Self> {
        let weights = under_model(weights);
        let h = cfg.hidden_size;
        check_config(&weights, &cfg)?;
        let shape = weights.shape(EMBED)?.to_vec();
        if shape.len() != 2 || shape[1] != h {
            return Err(Error::model(format!(
                "{EMBED} has shape {shape:?}, expected (vocab, {h}) (hidden_size in config.json)"
            )));
        }
        let layers = (0..cfg.num_hidden_layers)
            .into_par_iter()
            .map_init(Vec::new, |buffer, i| {
                Layer::load(&weights, &cfg, i, format, buffer)
            })
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

/// `weights` under the names of a checkpoint with a head: a bare decoder's
/// (`embed_tokens.weight`, `layers.N.*`, as Qwen3-Embedding's is saved) gets `model.` before
/// every name; any other is returned as it is.
pub(crate) fn under_model(weights: Weights) -> Weights {
    if !weights.has(EMBED) && weights.has(&EMBED["model.".len()..]) {
        weights.prefixed("model.")
    } else {
        weights
    }
}

/// Checks every size `config.json` gives against the tensor shapes in the safetensors header,
/// before any of them sizes an allocation (the fused projections are sized from the config): a
/// mismatch, or a product that overflows, is an [`Error::Model`] naming `config.json` and the
/// key.
pub(crate) fn check_config(w: &Weights, cfg: &Qwen3Config) -> Result<()> {
    let layer = |n: usize, name: &str| format!("model.layers.{n}.{name}");
    w.check_config_size("hidden_size", cfg.hidden_size, EMBED, 1)?;
    let last = cfg.num_hidden_layers - 1;
    let last_norm = layer(last, "input_layernorm.weight");
    w.check_config_tensor("num_hidden_layers", cfg.num_hidden_layers, &last_norm)?;
    if cfg.family == DecoderFamily::Phi3 {
        return check_fused_config(w, cfg);
    }
    let gate = layer(0, "mlp.gate_proj.weight");
    w.check_config_size("intermediate_size", cfg.intermediate_size, &gate, 0)?;
    if cfg.qk_norm() {
        let q_norm = layer(0, "self_attn.q_norm.weight");
        w.check_config_size("head_dim", cfg.head_dim, &q_norm, 0)?;
    }
    let heads = [
        ("num_attention_heads", cfg.num_attention_heads, "q_proj"),
        ("num_key_value_heads", cfg.num_key_value_heads, "k_proj"),
    ];
    for (key, n, proj) in heads {
        let rows = n.checked_mul(cfg.head_dim).ok_or_else(|| {
            Error::model(format!(
                "{}: {key} {n} times head_dim {} overflows",
                w.config_path().display(),
                cfg.head_dim
            ))
        })?;
        let name = layer(0, &format!("self_attn.{proj}.weight"));
        w.check_config_size(&format!("{key} x head_dim"), rows, &name, 0)?;
    }
    Ok(())
}

/// [`check_config`] for Phi-3's fused projections: `gate_up_proj` has `2 x intermediate_size`
/// rows, `qkv_proj` `(heads + 2 x key/value heads) x head_dim`.
fn check_fused_config(w: &Weights, cfg: &Qwen3Config) -> Result<()> {
    let overflow = || {
        Error::model(format!(
            "{}: num_attention_heads, num_key_value_heads and head_dim overflow",
            w.config_path().display()
        ))
    };
    let ffn = cfg.intermediate_size.checked_mul(2).ok_or_else(overflow)?;
    let gate_up = "model.layers.0.mlp.gate_up_proj.weight";
    w.check_config_size("intermediate_size x 2", ffn, gate_up, 0)?;
    let rows = cfg
        .num_key_value_heads
        .checked_mul(2)
        .and_then(|kv| kv.checked_add(cfg.num_attention_heads))
        .and_then(|n| n.checked_mul(cfg.head_dim))
        .ok_or_else(overflow)?;
    let qkv = "model.layers.0.self_attn.qkv_proj.weight";
    w.check_config_size(
        "(num_attention_heads + 2 x num_key_value_heads) x head_dim",
        rows,
        qkv,
        0,
    )
}

/// Checks that a sequence classifier's head, `score.weight`, is one row of `hidden_size`: the
/// `W[yes] - W[no]` of an LLM reranker converted to sequence classification (num_labels 1).
/// Anything else (another label count, a missing head) is an [`Error::Model`] naming the
/// checkpoint.
pub(crate) fn check_score_head(w: &Weights, cfg: &Qwen3Config) -> Result<()> {
    let dir = w.config_path();
    let dir = dir.parent().unwrap_or(Path::new("."));
    if !w.has(SCORE) {
        return Err(Error::model(format!(
            "{}: config.json says {}, but the weights have no {SCORE}",
            dir.display(),
            cfg.family.classifier_architecture()
        )));
    }
    let shape = w.shape(SCORE)?;
    if shape != [1, cfg.hidden_size] {
        return Err(Error::model(format!(
            "{}: {SCORE} has shape {shape:?}; a reranker converted to sequence \
             classification has one row of hidden_size {} (num_labels 1, the row W[yes] - W[no])",
            dir.display(),
            cfg.hidden_size
        )));
    }
    Ok(())
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
