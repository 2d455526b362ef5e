//! The Qwen3 forward pass over whole prompts on the shared CPU kernels: packed batches, the
//! model both the scorer and the generator run.
//!
//! A batch is *packed*: the tokens of all its prompts are concatenated into one
//! `(tokens, hidden)` matrix, so the projections and the MLP never touch a padding token, and
//! positions restart at 0 for every prompt, exactly as for a prompt run alone. Per layer
//! (see `layers::Layer`): one fused QKV product, the q/k norms and RoPE in one pass, causal
//! attention within each prompt, the output projection added to the residual by the product
//! itself, one fused gate/up product, `SiLU(gate) * up`, the down projection added the same way.
//!
//! Attention runs one task per (prompt, query head) on the rayon pool; query head `h` reads
//! the rows of key/value head `h / group` in place (grouped-query attention without repeating
//! K/V). Queries go in blocks of [`QUERY_BLOCK`] rows, each against the keys up to its last
//! row only, so the products skip most of the masked upper triangle.
//!
//! Only each prompt's last token is carried through the last layer's attention queries, output
//! projection and MLP, and the final norm: [`Qwen3Model::last_rows`] returns those rows, for
//! the scorer's `yes - no` head (`scorer`) or the generator's output head (`generate`, which
//! also keeps every layer's keys and values in its [`KvCache`] for the decode steps).

use std::cell::RefCell;

use rayon::prelude::*;

use super::config::Qwen3Config;
use super::generate::KvCache;
use super::layers::{qkv_layout, Decoder, Layer};
use super::ops::{norm_rope_rows, rms_norm_rows, silu_mul_rows, QkvLayout, Rope};
use crate::models::kernels::{matmul, softmax_row, Mat, Threads};
use crate::{Error, Result};

/// Query rows per attention block (see the module documentation).
const QUERY_BLOCK: usize = 64;

/// A loaded Qwen3 decoder with its RoPE table: everything but an output head. `Send + Sync`.
#[derive(Debug)]
pub(crate) struct Qwen3Model {
    pub decoder: Decoder,
    pub rope: Rope,
    pub layout: QkvLayout,
}

impl Qwen3Model {
    /// The model over `decoder`, for sequences of at most `max_positions` tokens.
    pub fn new(decoder: Decoder, max_positions: usize) -> Self {
        let cfg = &decoder.cfg;
        let rope = Rope::new(cfg.head_dim, cfg.rope_theta, max_positions);
        let layout = qkv_layout(cfg);
        Qwen3Model {
            decoder,
            rope,
            layout,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Qwen3Config {
        &self.decoder.cfg
    }

    /// Rows of the input embedding (the largest token id plus one that the weights accept).
    pub fn vocab_rows(&self) -> usize {
        self.decoder.embed.rows()
    }

    /// The most positions a sequence may have.
    pub fn max_positions(&self) -> usize {
        self.rope.positions()
    }

    pub fn eps(&self) -> f32 {
        self.decoder.cfg.rms_norm_eps as f32
    }

    /// Rejects empty prompts, prompts longer than the RoPE table, and ids outside the weights.
    pub fn check(&self, prompts: &[&[u32]]) -> Result<()> {
        let rows = self.vocab_rows();
        for p in prompts {
            if p.is_empty() {
                return Err(Error::InvalidInput("an empty prompt cannot be run".into()));
            }
            if p.len() > self.max_positions() {
                return Err(Error::InvalidInput(format!(
                    "a prompt of {} tokens is longer than max_length {}",
                    p.len(),
                    self.max_positions()
                )));
            }
            if let Some(&id) = p.iter().find(|&&id| id as usize >= rows) {
                return Err(Error::model(format!(
                    "token id {id} is outside the embedding matrix ({rows} rows): the \
                     tokenizer does not belong to these weights"
                )));
            }
        }
        Ok(())
    }

    /// The final-normed hidden state of each prompt's last token, `(prompts, hidden)`, all
    /// prompts in one packed forward pass. With `cache` (one prompt only, and an empty
    /// cache with room for it), every layer's keys and values of every position are kept
    /// there, so decoding can go on from the prompt.
    pub fn last_rows(
        &self,
        prompts: &[&[u32]],
        mut cache: Option<&mut KvCache>,
    ) -> Result<Vec<f32>> {
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        self.check(prompts)?;
        if let Some(cache) = cache.as_deref() {
            if prompts.len() != 1 || !cache.is_empty() || cache.capacity() < prompts[0].len() {
                return Err(Error::model(
                    "a KV cache is filled from one prompt, into an empty cache with room for it",
                ));
            }
        }
        let batch = Packed::new(prompts);
        let cfg = &self.decoder.cfg;
        let h = cfg.hidden_size;
        let mut ws = Workspace::new(&batch, cfg, self.layout);
        let ids: Vec<u32> = prompts.iter().flat_map(|p| p.iter().copied()).collect();
        self.embed(&ids, &mut ws.x)?;
        let (last, rest) = match self.decoder.layers.split_last() {
            Some(split) => split,
            None => return Err(Error::model("a Qwen3 model without layers")),
        };
        for (i, layer) in rest.iter().enumerate() {
            self.attend(layer, &batch, &mut ws, false);
            if let Some(cache) = cache.as_deref_mut() {
                cache.store(i, &ws.qkv, self.layout);
            }
            let mut x = std::mem::take(&mut ws.x);
            self.finish(layer, &mut x, batch.total, &mut ws);
            ws.x = x;
        }
        // The last layer: keys and values from every row, everything else on each prompt's
        // last row only.
        self.attend(last, &batch, &mut ws, true);
        if let Some(cache) = cache {
            cache.store(rest.len(), &ws.qkv, self.layout);
            cache.set_len(batch.total);
        }
        let mut x: Vec<f32> = batch
            .ends
            .iter()
            .flat_map(|&end| ws.x[(end - 1) * h..end * h].iter().copied())
            .collect();
        let rows = batch.ends.len();
        self.finish(last, &mut x, rows, &mut ws);
        let mut normed = vec![0.0f32; rows * h];
        rms_norm_rows(&x, &mut normed, &self.decoder.final_norm, self.eps());
        Ok(normed)
    }

    /// The embeddings of `ids` into `x`, in parallel.
    fn embed(&self, ids: &[u32], x: &mut [f32]) -> Result<()> {
        let h = self.decoder.cfg.hidden_size;
        const ROWS: usize = 256;
        x.par_chunks_mut(ROWS * h)
            .zip(ids.par_chunks(ROWS))
            .try_for_each(|(x, ids)| self.decoder.embed.lookup(ids, x))
    }

    /// The first half of a layer, on every row: `x += o(attention(qkv(rms(x))))` up to the
    /// attention context, which is left in `ws.ctx` (`rows` rows, `query_rows` of them per
    /// prompt as `attention` computes them).
    fn attend(&self, l: &Layer, b: &Packed, ws: &mut Workspace, last_only: bool) {
        let eps = self.eps();
        let t = b.total;
        let h = self.decoder.cfg.hidden_size;
        rms_norm_rows(&ws.x, &mut ws.hn[..t * h], &l.input_norm, eps);
        l.qkv.forward(&ws.hn[..t * h], t, &mut ws.qkv);
        norm_rope_rows(
            &mut ws.qkv,
            &b.positions,
            self.layout,
            &l.q_norm,
            &l.k_norm,
            &self.rope,
            eps,
        );
        attention(
            &ws.qkv,
            &mut ws.ctx,
            &mut ws.heads,
            b,
            self.layout,
            last_only,
        );
    }

    /// The second half of a layer on `rows` rows of `x`: `x += o(ctx)`, then
    /// `x += down(silu(gate) * up)` with `[gate | up] = gate_up(rms(x))`.
    fn finish(&self, l: &Layer, x: &mut [f32], rows: usize, ws: &mut Workspace) {
        let cfg = &self.decoder.cfg;
        let (h, ffn) = (cfg.hidden_size, cfg.intermediate_size);
        l.o.forward_add(&ws.ctx[..rows * l.o.inputs()], rows, x);
        let hn = &mut ws.hn[..rows * h];
        rms_norm_rows(x, hn, &l.post_norm, self.eps());
        let gu = &mut ws.gate_up[..rows * 2 * ffn];
        l.gate_up.forward(hn, rows, gu);
        let act = &mut ws.act[..rows * ffn];
        silu_mul_rows(gu, act, ffn);
        l.down.forward_add(act, rows, x);
    }
}

/// The packed layout of one batch.
struct Packed {
    /// Tokens in the batch.
    total: usize,
    /// Per-prompt lengths.
    lens: Vec<usize>,
    /// Row of each prompt's first token.
    starts: Vec<usize>,
    /// One past the row of each prompt's last token.
    ends: Vec<usize>,
    /// Each row's position in its prompt.
    positions: Vec<u32>,
}

impl Packed {
    fn new(prompts: &[&[u32]]) -> Self {
        let lens: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
        let mut starts = Vec::with_capacity(lens.len());
        let mut ends = Vec::with_capacity(lens.len());
        let mut at = 0;
        for &len in &lens {
            starts.push(at);
            at += len;
            ends.push(at);
        }
        let positions = lens.iter().flat_map(|&len| 0..len as u32).collect();
        Packed {
            total: at,
            lens,
            starts,
            ends,
            positions,
        }
    }
}

/// The buffers of one batch, allocated once and reused by every layer.
struct Workspace {
    /// The residual stream, `(tokens, hidden)`.
    x: Vec<f32>,
    /// Normalized rows, `(tokens, hidden)`.
    hn: Vec<f32>,
    /// Fused `[q | k | v]` rows, `(tokens, qkv width)`.
    qkv: Vec<f32>,
    /// Attention output per head, head-major: `(heads, tokens, head_dim)`.
    heads: Vec<f32>,
    /// Attention context, `(tokens, heads * head_dim)`.
    ctx: Vec<f32>,
    /// Fused `[gate | up]` rows, `(tokens, 2 * intermediate)`.
    gate_up: Vec<f32>,
    /// `silu(gate) * up`, `(tokens, intermediate)`.
    act: Vec<f32>,
}

impl Workspace {
    fn new(b: &Packed, cfg: &Qwen3Config, layout: QkvLayout) -> Self {
        let t = b.total;
        let (h, ffn) = (cfg.hidden_size, cfg.intermediate_size);
        Workspace {
            x: vec![0.0; t * h],
            hn: vec![0.0; t * h],
            qkv: vec![0.0; t * layout.width()],
            heads: vec![0.0; t * layout.q_width()],
            ctx: vec![0.0; t * layout.q_width()],
            gate_up: vec![0.0; t * 2 * ffn],
            act: vec![0.0; t * ffn],
        }
    }
}

thread_local! {
    /// Attention scores of one query block, reused across tasks on this thread.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Causal attention within each prompt into `ctx` (`(rows, q_heads * head_dim)`): one row per
/// token, or with `last_only` one row per prompt (its last token's query against all of its
/// keys). `heads` is scratch for the per-head outputs.
fn attention(
    qkv: &[f32],
    ctx: &mut [f32],
    heads: &mut [f32],
    b: &Packed,
    layout: QkvLayout,
    last_only: bool,
) {
    let (nh, d) = (layout.q_heads, layout.head_dim);
    let group = layout.q_heads / layout.kv_heads;
    let (qw, kw) = (layout.q_width(), layout.kv_width());
    let all = Mat {
        data: qkv,
        rows: b.total,
        cols: layout.width(),
        row_stride: layout.width(),
        col_stride: 1,
    };
    let queries = |s: usize| if last_only { 1 } else { b.lens[s] };
    let rows: usize = (0..b.lens.len()).map(queries).sum();
    let scale = 1.0 / (d as f32).sqrt();
    // Head-major output: task (head, prompt) owns a contiguous `(queries, d)` chunk.
    let mut chunks: Vec<(usize, usize, &mut [f32])> = Vec::with_capacity(nh * b.lens.len());
    let mut rest = &mut heads[..nh * rows * d];
    for head in 0..nh {
        for s in 0..b.lens.len() {
            let (mine, tail) = rest.split_at_mut(queries(s) * d);
            chunks.push((head, s, mine));
            rest = tail;
        }
    }
    chunks.into_par_iter().for_each(|(head, s, out)| {
        let (start, len) = (b.starts[s], b.lens[s]);
        let kv = head / group;
        let keys = all.block(start, len, qw + kv * d, d);
        let values = all.block(start, len, qw + kw + kv * d, d);
        // Query rows first..len of the prompt, in blocks; block rows see keys 0..=row.
        let first = len - queries(s);
        SCORES.with(|cell| {
            let mut scores = cell.borrow_mut();
            let mut q0 = first;
            while q0 < len {
                let q1 = (q0 + QUERY_BLOCK).min(len);
                let (nq, nk) = (q1 - q0, q1);
                let q = all.block(start + q0, nq, head * d, d);
                scores.clear();
                scores.resize(nq * nk, 0.0);
                matmul(
                    q,
                    keys.block(0, nk, 0, d).t(),
                    &mut scores,
                    nk,
                    scale,
                    false,
                    Threads::One,
                );
                for (r, row) in scores.chunks_exact_mut(nk).enumerate() {
                    let visible = q0 + r + 1;
                    softmax_row(&mut row[..visible]);
                    row[visible..].fill(0.0);
                }
                matmul(
                    Mat::new(&scores, nq, nk),
                    values.block(0, nk, 0, d),
                    &mut out[(q0 - first) * d..(q1 - first) * d],
                    d,
                    1.0,
                    false,
                    Threads::One,
                );
                q0 = q1;
            }
        });
    });
    // Scatter: ctx row r, head `head` <- heads[head][r].
    let heads = &heads[..nh * rows * d];
    ctx[..rows * qw]
        .par_chunks_mut(qw)
        .enumerate()
        .for_each(|(r, row)| {
            for (head, dst) in row.chunks_exact_mut(d).enumerate() {
                let src = (head * rows + r) * d;
                dst.copy_from_slice(&heads[src..src + d]);
            }
        });
}
