//! Generation: the Qwen3 decoder with its whole output head, a KV cache, and the decode step.
//!
//! A sequence starts with [`CausalLm::prefill`]: the prompt goes through the packed forward
//! pass (`forward`), which leaves every layer's keys and values in the [`KvCache`] and the
//! last token's hidden state, and the output head gives the next token's logits. Each new token
//! then goes through [`CausalLm::step`]: one row through every layer, its key and value
//! appended to the cache, attention over the cached positions, the head again. The step
//! allocates nothing: the cache and every buffer it writes live in a [`DecodeState`] sized
//! before decoding starts ([`DecodeState::reserve`]). Its matrix products have one input row,
//! so they stream each weight once from memory (`models::layers::panels` for the layers, f32 or bf16,
//! `simd::gemv` for the output head); with [`Precision::Bf16`] the weights are half the
//! bytes, and prefill runs on `bf16` dot products where the CPU has them.

use std::path::Path;

use rayon::prelude::*;

use super::config::Qwen3Config;
use super::forward::Qwen3Model;
pub(crate) use super::kv_cache::KvCache;
use super::layers::{head_name, Decoder, MatrixFormat};
use super::ops::{norm_rope_row, rms_norm_row, silu_mul_row, QkvLayout};
use crate::models::layers::kernels::{softmax_row, Linear, Weight};
use crate::models::layers::weights::Weights;
use crate::models::Precision;
use crate::{Error, Result};

/// The buffers of one sequence being decoded: its KV cache and the rows one step writes. Made
/// by [`CausalLm::state`], sized by [`DecodeState::reserve`], reused from call to call.
#[derive(Debug)]
pub(crate) struct DecodeState {
    cache: KvCache,
    /// The residual row, `(hidden)`.
    x: Vec<f32>,
    /// A normalized row, `(hidden)`.
    hn: Vec<f32>,
    /// `[q | k | v]`, `(qkv width)`.
    qkv: Vec<f32>,
    /// The attention context, `(q_heads * head_dim)`.
    ctx: Vec<f32>,
    /// `[gate | up]`, `(2 * intermediate)`.
    gate_up: Vec<f32>,
    /// `silu(gate) * up`, `(intermediate)`.
    act: Vec<f32>,
    /// Attention weights per query head, `(q_heads, capacity)`.
    scores: Vec<f32>,
    /// The next token's logits, `(vocab)`.
    logits: Vec<f32>,
    heads: usize,
}

impl DecodeState {
    /// Makes room for sequences of `positions` tokens (prompt and new tokens together). This
    /// is where a sequence's memory is allocated; the steps after it allocate nothing.
    pub fn reserve(&mut self, positions: usize) {
        self.cache.reserve(positions);
        if self.scores.len() < self.heads * positions {
            self.scores.resize(self.heads * positions, 0.0);
        }
    }
}

/// A Qwen3 causal LM for generation: the decoder and the output head. `Send + Sync`; the
/// per-sequence state is a separate [`DecodeState`].
#[derive(Debug)]
pub(crate) struct CausalLm {
    model: Qwen3Model,
    /// The output head, `(vocab, hidden)`: `lm_head`, or the embeddings when tied.
    head: Linear,
}

impl CausalLm {
    /// Loads the checkpoint in `dir` for sequences of at most `max_positions` tokens, its
    /// matrices in `precision` (f32 or bf16). Layers load in parallel on the current rayon pool.
    pub fn load(
        dir: &Path,
        cfg: Qwen3Config,
        precision: Precision,
        max_positions: usize,
    ) -> Result<Self> {
        let format = match precision {
            Precision::F32 => MatrixFormat::F32,
            Precision::Bf16 => MatrixFormat::Bf16,
            _ => {
                return Err(Error::Config(format!(
                    "Qwen3 generation: precision {precision} is not supported (f32 or bf16)"
                )))
            }
        };
        let weights = Weights::open(dir)?;
        let h = cfg.hidden_size;
        let name = head_name(&weights, &cfg)?;
        let shape = weights.shape(name)?.to_vec();
        if shape.len() != 2 || shape[1] != h || shape[0] == 0 {
            return Err(Error::model(format!(
                "{name} has shape {shape:?}, expected (vocab, {h}) (hidden_size in config.json)"
            )));
        }
        let decoder = Decoder::from_weights(weights, cfg, format)?;
        let values = decoder.embed.weights().f32(name, &shape)?;
        // The head stays in rows (one row of logits per step; never a product over many).
        let head = Linear {
            weight: Weight::F32(values),
            bias: vec![0.0; shape[0]],
            inputs: h,
            outputs: shape[0],
        };
        let head = match format {
            MatrixFormat::Bf16 => head.to_bf16(),
            _ => head,
        };
        Ok(CausalLm {
            model: Qwen3Model::new(decoder, max_positions),
            head,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Qwen3Config {
        self.model.config()
    }

    /// Logits per step (rows of the output head).
    pub fn vocab_size(&self) -> usize {
        self.head.outputs
    }

    /// Token ids the input embedding accepts (below this).
    pub fn input_vocab(&self) -> usize {
        self.model.vocab_rows()
    }

    /// The most positions a sequence may have.
    pub fn max_positions(&self) -> usize {
        self.model.max_positions()
    }

    /// A decode state for this model, with room for no position yet.
    pub fn state(&self) -> DecodeState {
        let cfg = self.config();
        let layout = self.model.layout;
        DecodeState {
            cache: KvCache::new(cfg.num_hidden_layers, layout.kv_width()),
            x: vec![0.0; cfg.hidden_size],
            hn: vec![0.0; cfg.hidden_size],
            qkv: vec![0.0; layout.width()],
            ctx: vec![0.0; layout.q_width()],
            gate_up: vec![0.0; 2 * cfg.intermediate_size],
            act: vec![0.0; cfg.intermediate_size],
            scores: Vec::new(),
            logits: vec![0.0; self.vocab_size()],
            heads: layout.q_heads,
        }
    }

    /// Starts a sequence: runs `ids` through the packed forward pass, keeping every
    /// position's keys and values in `state` (which must have room for them), and returns the
    /// logits of the next token.
    pub fn prefill<'s>(&self, ids: &[u32], state: &'s mut DecodeState) -> Result<&'s [f32]> {
        state.cache.clear();
        state.reserve(ids.len());
        let rows = self.model.last_rows(&[ids], Some(&mut state.cache))?;
        self.head.gemv(&rows, &mut state.logits, false);
        Ok(&state.logits)
    }

    /// One decode step: appends `id` at the next position and returns the logits of the token
    /// after it. Allocates nothing; a full cache (see [`DecodeState::reserve`]), a sequence at
    /// the model's position limit or an id outside the vocabulary is an error.
    pub fn step<'s>(&self, id: u32, st: &'s mut DecodeState) -> Result<&'s [f32]> {
        let pos = st.cache.len();
        if pos >= st.cache.capacity() || pos >= self.max_positions() {
            return Err(Error::InvalidInput(format!(
                "the sequence is full: {pos} positions (room for {}, the model takes {})",
                st.cache.capacity(),
                self.max_positions()
            )));
        }
        if id as usize >= self.input_vocab() {
            return Err(Error::InvalidInput(format!(
                "token id {id} is outside the vocabulary ({} ids)",
                self.input_vocab()
            )));
        }
        let model = &self.model;
        let (layout, eps, cfg) = (model.layout, model.eps(), &model.decoder.cfg);
        model.decoder.embed.lookup(&[id], &mut st.x)?;
        for (i, l) in model.decoder.layers.iter().enumerate() {
            rms_norm_row(&st.x, &mut st.hn, &l.input_norm, eps);
            l.qkv.gemv(&st.hn, &mut st.qkv, false);
            norm_rope_row(
                &mut st.qkv,
                layout,
                l.qk_norm_weights(),
                &model.rope,
                pos,
                eps,
            );
            let (qw, kw) = (layout.q_width(), layout.kv_width());
            let keys = &mut st.cache.keys[i];
            keys[pos * kw..(pos + 1) * kw].copy_from_slice(&st.qkv[qw..qw + kw]);
            let values = &mut st.cache.values[i];
            values[pos * kw..(pos + 1) * kw].copy_from_slice(&st.qkv[qw + kw..]);
            attend_one(
                &st.qkv[..qw],
                &st.cache.keys[i],
                &st.cache.values[i],
                cfg.window(i).map_or(0, |w| (pos + 1).saturating_sub(w))..pos + 1,
                st.cache.capacity,
                layout,
                &mut st.scores,
                &mut st.ctx,
            );
            l.o.gemv(&st.ctx, &mut st.x, true);
            rms_norm_row(&st.x, &mut st.hn, &l.post_norm, eps);
            l.gate_up.gemv(&st.hn, &mut st.gate_up, false);
            silu_mul_row(&st.gate_up, &mut st.act);
            l.down.gemv(&st.act, &mut st.x, true);
        }
        st.cache.set_len(pos + 1);
        rms_norm_row(&st.x, &mut st.hn, &model.decoder.final_norm, eps);
        self.head.gemv(&st.hn, &mut st.logits, false);
        Ok(&st.logits)
    }
}

/// Attention of one query row (`q`, every query head) over the cached positions `seen` (all
/// up to the query's, or its sliding window):
/// each query head reads its key/value head's columns in place (grouped-query attention
/// without copies); one rayon task per query head. `scores` holds `capacity` weights per head.
#[allow(clippy::too_many_arguments)]
fn attend_one(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    seen: std::ops::Range<usize>,
    capacity: usize,
    layout: QkvLayout,
    scores: &mut [f32],
    ctx: &mut [f32],
) {
    let (d, kw) = (layout.head_dim, layout.kv_width());
    let group = layout.q_heads / layout.kv_heads;
    let scale = 1.0 / (d as f32).sqrt();
    ctx.par_chunks_mut(d)
        .zip(scores.par_chunks_mut(capacity))
        .enumerate()
        .for_each(|(head, (out, scores))| {
            let kv = head / group;
            let q = &q[head * d..(head + 1) * d];
            let scores = &mut scores[seen.clone()];
            for (j, s) in seen.clone().zip(scores.iter_mut()) {
                *s = crate::simd::dot::dot_f32(q, &keys[j * kw + kv * d..][..d]) * scale;
            }
            softmax_row(scores);
            out.fill(0.0);
            for (j, &p) in seen.clone().zip(scores.iter()) {
                let v = &values[j * kw + kv * d..][..d];
                out.iter_mut().zip(v).for_each(|(o, &v)| *o += p * v);
            }
        });
}
