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
//! Prompts that begin with the same tokens share them. Reranking scores many documents
//! against one query, so every prompt of a batch starts with the same system prompt,
//! instruction and query (72 of the 382 tokens of each prompt in the scoring benchmark). The
//! longest prefix common to all prompts of a batch is packed once, at the top; each prompt's
//! own rows follow and attend to the shared rows' keys as to their own. Every row is the same
//! computation as in a prompt run alone, so the results are too, to rounding.
//!
//! Attention runs one task per (segment, query head) on the rayon pool, a segment being the
//! shared rows or one prompt's own rows; query head `h` reads the rows of key/value head
//! `h / group` in place (grouped-query attention without repeating K/V). Queries go in blocks
//! of [`QUERY_BLOCK`] rows, each against the shared keys and its own keys up to its last row
//! only, so the products skip most of the masked upper triangle.
//!
//! Only each prompt's last token is carried through the last layer's attention queries, output
//! projection and MLP, and the final norm: [`Qwen3Model::last_rows`] returns those rows, for
//! the scorer's `yes - no` head (`scorer`) or the generator's output head (`generate`, which
//! also keeps every layer's keys and values in its [`KvCache`] for the decode steps).

use std::cell::RefCell;

use rayon::prelude::*;

use super::config::Qwen3Config;
use super::kv_cache::KvCache;
use super::layers::{qkv_layout, Decoder, Layer};
use super::ops::{norm_rope_rows, rms_norm_rows, silu_mul_rows, QkvLayout, Rope};
use crate::models::layers::kernels::{matmul, softmax_row, Mat, Threads};
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
        let rope = cfg
            .rope_scaling
            .rope(cfg.head_dim, cfg.rope_theta, max_positions);
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
        check_prompts(prompts, self.max_positions(), self.vocab_rows())
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
        self.embed(&batch.ids, &mut ws.x)?;
        let (last, rest) = match self.decoder.layers.split_last() {
            Some(split) => split,
            None => return Err(Error::model("a Qwen3 model without layers")),
        };
        for (i, layer) in rest.iter().enumerate() {
            self.attend(layer, cfg.window(i), &batch, &mut ws, false);
            if let Some(cache) = cache.as_deref_mut() {
                cache.store(i, &ws.qkv, self.layout);
            }
            let mut x = std::mem::take(&mut ws.x);
            self.finish(layer, &mut x, batch.total, &mut ws);
            ws.x = x;
        }
        // The last layer: keys and values from every row, everything else on each prompt's
        // last row only. A cache holds one prompt, which shares no rows, so `total` is its
        // length.
        self.attend(last, cfg.window(rest.len()), &batch, &mut ws, true);
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
    /// attention context, which is left in `ws.ctx` (one row per packed row, or with
    /// `last_only` one per prompt, as `attention` computes them). `window` is the layer's
    /// sliding window, if it has one.
    fn attend(
        &self,
        l: &Layer,
        window: Option<usize>,
        b: &Packed,
        ws: &mut Workspace,
        last_only: bool,
    ) {
        let eps = self.eps();
        let t = b.total;
        let h = self.decoder.cfg.hidden_size;
        rms_norm_rows(&ws.x, &mut ws.hn[..t * h], &l.input_norm, eps);
        l.qkv.forward(&ws.hn[..t * h], t, &mut ws.qkv);
        norm_rope_rows(
            &mut ws.qkv,
            &b.positions,
            self.layout,
            l.qk_norm_weights(),
            &self.rope,
            eps,
        );
        attention(
            &ws.qkv,
            &mut ws.ctx,
            &mut ws.heads,
            b,
            self.layout,
            window,
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

/// The packed layout of one batch: the rows every prompt begins with (if two or more prompts
/// share any), then each prompt's own rows.
struct Packed {
    /// Rows in the batch.
    total: usize,
    /// The token id of each row.
    ids: Vec<u32>,
    /// Each row's position in its prompt.
    positions: Vec<u32>,
    /// The shared rows (if any), then one segment per prompt, in row order.
    segments: Vec<Segment>,
    /// One past the row of each prompt's last token.
    ends: Vec<usize>,
}

/// Consecutive rows of a packed batch that attend causally among themselves, after all of
/// the `context` rows at the top of the batch (the shared prefix of their prompt).
#[derive(Debug, Clone, Copy)]
struct Segment {
    /// The first row.
    start: usize,
    /// Rows in the segment (at least one).
    len: usize,
    /// Rows `0..context` that come before the segment in its prompt.
    context: usize,
    /// Whether the segment ends a prompt (false only for the shared prefix).
    ends_prompt: bool,
}

impl Packed {
    fn new(prompts: &[&[u32]]) -> Self {
        let shared = shared_prefix(prompts);
        let mut segments = Vec::with_capacity(prompts.len() + 1);
        if shared > 0 {
            segments.push(Segment {
                start: 0,
                len: shared,
                context: 0,
                ends_prompt: false,
            });
        }
        let mut ids: Vec<u32> = prompts.first().map_or(&[][..], |p| &p[..shared]).to_vec();
        let mut positions: Vec<u32> = (0..shared as u32).collect();
        let mut ends = Vec::with_capacity(prompts.len());
        for p in prompts {
            let own = &p[shared..];
            segments.push(Segment {
                start: ids.len(),
                len: own.len(),
                context: shared,
                ends_prompt: true,
            });
            ids.extend_from_slice(own);
            positions.extend(shared as u32..p.len() as u32);
            ends.push(ids.len());
        }
        Packed {
            total: ids.len(),
            ids,
            positions,
            segments,
            ends,
        }
    }
}

/// Rejects empty prompts, prompts longer than `max_positions`, and ids outside an embedding
/// of `vocab_rows` rows (the CPU decoder's checks, and the candle decoder's).
pub(crate) fn check_prompts(
    prompts: &[&[u32]],
    max_positions: usize,
    vocab_rows: usize,
) -> Result<()> {
    for p in prompts {
        if p.is_empty() {
            return Err(Error::InvalidInput("an empty prompt cannot be run".into()));
        }
        if p.len() > max_positions {
            return Err(Error::InvalidInput(format!(
                "a prompt of {} tokens is longer than max_length {max_positions}",
                p.len()
            )));
        }
        if let Some(&id) = p.iter().find(|&&id| id as usize >= vocab_rows) {
            return Err(Error::model(format!(
                "token id {id} is outside the embedding matrix ({vocab_rows} rows): the \
                 tokenizer does not belong to these weights"
            )));
        }
    }
    Ok(())
}

/// How many leading tokens every prompt shares: none for fewer than two prompts, and never a
/// prompt's last token, so that every prompt keeps a row of its own.
pub(crate) fn shared_prefix(prompts: &[&[u32]]) -> usize {
    let [first, rest @ ..] = prompts else {
        return 0;
    };
    if rest.is_empty() {
        return 0;
    }
    let mut shared = first.len();
    for p in rest {
        shared = first[..shared]
            .iter()
            .zip(p.iter())
            .take_while(|(a, b)| a == b)
            .count();
    }
    let shortest = prompts.iter().map(|p| p.len()).min().unwrap_or(0);
    shared.min(shortest.saturating_sub(1))
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
/// packed row, or with `last_only` one row per prompt (its last token's query against all of
/// its keys). With a `window`, a query sees only the `window` keys that end at itself (those
/// of positions `p - window < k <= p`, as transformers' sliding-window mask). `heads` is
/// scratch for the per-head outputs.
fn attention(
    qkv: &[f32],
    ctx: &mut [f32],
    heads: &mut [f32],
    b: &Packed,
    layout: QkvLayout,
    window: Option<usize>,
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
    let queries = |s: &Segment| match (last_only, s.ends_prompt) {
        (false, _) => s.len,
        (true, true) => 1,
        (true, false) => 0,
    };
    let rows: usize = b.segments.iter().map(queries).sum();
    let scale = 1.0 / (d as f32).sqrt();
    // Head-major output: task (head, segment) owns a contiguous `(queries, d)` chunk.
    let mut chunks: Vec<(usize, Segment, &mut [f32])> = Vec::with_capacity(nh * b.segments.len());
    let mut rest = &mut heads[..nh * rows * d];
    for head in 0..nh {
        for s in &b.segments {
            let (mine, tail) = rest.split_at_mut(queries(s) * d);
            if !mine.is_empty() {
                chunks.push((head, *s, mine));
            }
            rest = tail;
        }
    }
    chunks.into_par_iter().for_each(|(head, s, out)| {
        let kv = head / group;
        let (k_col, v_col) = (qw + kv * d, qw + kw + kv * d);
        let (c, len) = (s.context, s.len);
        // Keys and values of the shared rows before the segment, then of its own rows.
        let (shared_keys, shared_values) = (all.block(0, c, k_col, d), all.block(0, c, v_col, d));
        let (keys, values) = (
            all.block(s.start, len, k_col, d),
            all.block(s.start, len, v_col, d),
        );
        // Query rows first..len of the segment, in blocks; a block's row r sees all the
        // shared keys and its own keys 0..=r. Scores are `[shared | own]` per row.
        let first = len - queries(&s);
        SCORES.with(|cell| {
            let mut scores = cell.borrow_mut();
            let mut q0 = first;
            while q0 < len {
                let q1 = (q0 + QUERY_BLOCK).min(len);
                let (nq, width) = (q1 - q0, c + q1);
                let q = all.block(s.start + q0, nq, head * d, d);
                scores.clear();
                scores.resize(nq * width, 0.0);
                let own_keys = keys.block(0, q1, 0, d).t();
                let one = Threads::One;
                matmul(q, shared_keys.t(), &mut scores, width, scale, false, one);
                matmul(q, own_keys, &mut scores[c..], width, scale, false, one);
                // Column j of a row is the key at position j of the prompt.
                for (r, row) in scores.chunks_exact_mut(width).enumerate() {
                    let visible = c + q0 + r + 1;
                    let from = window.map_or(0, |w| visible.saturating_sub(w));
                    softmax_row(&mut row[from..visible]);
                    row[..from].fill(0.0);
                    row[visible..].fill(0.0);
                }
                let p = Mat::new(&scores, nq, width);
                let out = &mut out[(q0 - first) * d..(q1 - first) * d];
                matmul(p.block(0, nq, 0, c), shared_values, out, d, 1.0, false, one);
                let own_values = values.block(0, q1, 0, d);
                matmul(p.block(0, nq, c, q1), own_values, out, d, 1.0, c > 0, one);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_prefix_is_common_to_all_prompts_and_leaves_each_a_row() {
        let (a, b, c) = ([1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 7]);
        assert_eq!(shared_prefix(&[&a, &b]), 3);
        assert_eq!(shared_prefix(&[&a, &b, &c]), 2);
        assert_eq!(shared_prefix(&[&a, &a]), 3);
        assert_eq!(shared_prefix(&[&a[..2], &a]), 1);
        assert_eq!(shared_prefix(&[&a[..1], &a]), 0);
        assert_eq!(shared_prefix(&[&a, &[9, 2, 3]]), 0);
        assert_eq!(shared_prefix(&[&a]), 0);
        assert_eq!(shared_prefix(&[]), 0);
    }

    #[test]
    fn a_packed_batch_holds_the_shared_rows_once() {
        let (a, b) = ([1u32, 2, 3, 4], [1u32, 2, 5]);
        let p = Packed::new(&[&a, &b]);
        assert_eq!(p.ids, [1, 2, 3, 4, 5]);
        assert_eq!(p.positions, [0, 1, 2, 3, 2]);
        assert_eq!(p.ends, [4, 5]);
        assert_eq!(p.total, 5);
        let spans: Vec<_> = p
            .segments
            .iter()
            .map(|s| (s.start, s.len, s.context, s.ends_prompt))
            .collect();
        assert_eq!(spans, [(0, 2, 0, false), (2, 2, 2, true), (4, 1, 2, true)]);
        let alone = Packed::new(&[&a]);
        assert_eq!((alone.ids.len(), alone.segments.len()), (4, 1));
        assert_eq!(alone.positions, [0, 1, 2, 3]);
    }
}
