//! The Qwen3 / Qwen2 decoder on candle's operations, for what the scorers and the Qwen3
//! embedder need: the final-normed hidden state of each prompt's last token.
//!
//! Prompts run as one batch padded on the left, so that every prompt's last token is the
//! batch's last column: positions count from each prompt's first real token, and the mask
//! lets a token see the real tokens up to itself (causal) and never the padding. Leading
//! tokens that every prompt of a batch shares (the reranker's template and instruction, the
//! query of a reranking call) run once, and the rest of each prompt attends to their keys and
//! values. The same layers as transformers' `Qwen3ForCausalLM` / `Qwen2ForCausalLM`: RMSNorm,
//! q/k/v with biases for Qwen2 and per-head q/k RMSNorms for Qwen3, RoPE (rotate-half),
//! grouped-query attention, SwiGLU.
//!
//! Written for a device, where every operation is a kernel launch and a pass over memory:
//! - the hidden states stay one `(rows · len, hidden)` matrix, so every projection is one
//!   product over the batch, Q, K and V one product together, then their heads split, normed
//!   and rotated in one pass (`simd::fused::split_heads`; on a CUDA device a kernel of our
//!   own, where candle needs seven), the context's heads merged back in one, and gate and up
//!   one product, then SwiGLU in one pass;
//! - the attention scale is folded into the queries' weights as they are read;
//! - the scores stay in the activations' format (candle's fused softmax sums in f32 on a
//!   GPU; on its CPU backend, half-precision scores go through the softmax in f32), and on a
//!   CUDA device the mask is added by the scores' product (`layers::candle::QueryMask`);
//! - the last layer runs its attention, and what follows it, for each prompt's last token
//!   only.

use candle_core::{DType, Module, Tensor};
use candle_nn::{Embedding, RmsNorm, VarBuilder};

use super::config::Qwen3Config;
use super::forward::{check_prompts, shared_prefix};
use super::layers::{check_config, under_model, EMBED};
use crate::models::layers::batch::BatchSink;
use crate::models::layers::candle::{
    cached_params, candle_device, dtype, err, flat_f32, linear, pipeline, read_f32, rope_tensors,
    softmax, softmax_in_f32, stacked, upload, var_builder, Fold, Linear, QueryMask, Turns,
};
use crate::models::layers::kernels::Act;
use crate::models::layers::weights::Weights;
use crate::models::{Device, Precision};
use crate::simd::fused::{self, glu, merge_heads, split_heads, HeadSizes, HeadSplit};
use crate::Result;

struct Layer {
    input_norm: RmsNorm,
    /// Q, K and V stacked (`(heads + 2 · kv heads) · head_dim` outputs): one product.
    qkv: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    post_norm: RmsNorm,
    mlp: GateUp,
    down: Linear,
}

/// The feed-forward part's gate and up projections.
enum GateUp {
    /// One product of both (`2 · intermediate` outputs, each row's gate, then its up), then
    /// SwiGLU in one pass (`simd::fused::glu`).
    Stacked(Linear),
    /// Two products, then candle's SiLU and product (`RERANK_CUDA_FUSED_KERNELS=0`).
    Apart { gate: Linear, up: Linear },
}

impl GateUp {
    /// `silu(gate · y) * (up · y)`.
    fn forward(&self, y: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            GateUp::Stacked(both) => glu(&both.forward(y)?, Act::Silu),
            GateUp::Apart { gate, up } => {
                candle_nn::ops::silu(&gate.forward(y)?)? * up.forward(y)?
            }
        }
    }
}

/// Token ids on the host, with what the layers need beside them: a position per token and the
/// additive masks of [`CandleDecoder::windows`], each `(rows, tokens, keys)` row-major.
struct HostTokens {
    ids: Vec<u32>,
    /// `(rows, tokens)`.
    shape: (usize, usize),
    positions: Vec<u32>,
    masks: Vec<HostMask>,
}

/// An additive mask on the host, already in the activations' format (its values, 0 and -inf,
/// are exact in each), so that the copy to the device is the only pass over it there, and a
/// half-precision mask copies half the bytes.
enum HostMask {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
    Bf16(Vec<half::bf16>),
}

impl HostMask {
    /// `mask` written in `dtype`'s format (f32 for any other).
    fn of(dtype: DType, mask: &PromptMask) -> Self {
        match dtype {
            DType::F16 => HostMask::F16(mask.build()),
            DType::BF16 => HostMask::Bf16(mask.build()),
            _ => HostMask::F32(mask.build()),
        }
    }

    fn len(&self) -> usize {
        match self {
            HostMask::F32(v) => v.len(),
            HostMask::F16(v) => v.len(),
            HostMask::Bf16(v) => v.len(),
        }
    }

    /// The mask as a tensor of `shape` on `device`: one copy.
    fn upload(
        self,
        shape: impl Into<candle_core::Shape>,
        device: &candle_core::Device,
    ) -> candle_core::Result<Tensor> {
        match self {
            HostMask::F32(v) => upload(v, shape, device),
            HostMask::F16(v) => upload(v, shape, device),
            HostMask::Bf16(v) => upload(v, shape, device),
        }
    }
}

/// What an additive mask holds, in each format it is built in: 0 where a query sees a key,
/// -inf where it does not (both exact in every format).
trait MaskValue: Copy {
    const SEEN: Self;
    const UNSEEN: Self;
}

impl MaskValue for f32 {
    const SEEN: Self = 0.0;
    const UNSEEN: Self = f32::NEG_INFINITY;
}

impl MaskValue for half::f16 {
    const SEEN: Self = half::f16::ZERO;
    const UNSEEN: Self = half::f16::NEG_INFINITY;
}

impl MaskValue for half::bf16 {
    const SEEN: Self = half::bf16::ZERO;
    const UNSEEN: Self = half::bf16::NEG_INFINITY;
}

/// The mask `(rows, t, shared + t)` of prompts (`rest`) after a prefix of `shared` tokens
/// they all share (none for the prefix's own pass: one prompt, `shared` 0), left-padded to
/// the longest (`t`): every token sees the prefix (within `window`), then its own prompt's
/// real tokens up to itself; a padding row sees the prefix, or itself. Written straight in
/// the format it is asked for ([`HostMask::of`]).
struct PromptMask<'a> {
    rest: &'a [&'a [u32]],
    shared: usize,
    window: Option<usize>,
}

impl PromptMask<'_> {
    fn build<T: MaskValue>(&self) -> Vec<T> {
        let (shared, w) = (self.shared, self.window);
        let t = self.rest.iter().map(|r| r.len()).max().unwrap_or(0);
        let width = shared + t;
        let mut mask = vec![T::UNSEEN; self.rest.len() * t * width];
        for (i, r) in self.rest.iter().enumerate() {
            let pad = t - r.len();
            for q in 0..t {
                let row = &mut mask[(i * t + q) * width..(i * t + q + 1) * width];
                let at = shared + q.saturating_sub(pad);
                for (k, m) in row[..shared].iter_mut().enumerate() {
                    *m = visible(k, at, w);
                }
                let own = &mut row[shared..];
                match q < pad {
                    true if shared == 0 => own[q] = T::SEEN,
                    true => {}
                    false => {
                        for (j, m) in own.iter_mut().enumerate().take(q + 1).skip(pad) {
                            *m = visible(shared + j - pad, at, w);
                        }
                    }
                }
            }
        }
        mask
    }
}

/// A batch of prompts prepared on the host: the tokens they all share (run once), and the rest
/// of each prompt, left-padded.
struct HostPrompts {
    prefix: Option<HostTokens>,
    rest: HostTokens,
}

/// A Qwen3 (or Qwen2) decoder without its output head, on a candle device. `Send + Sync`.
pub(crate) struct CandleDecoder {
    cfg: Qwen3Config,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    /// `cos` and `sin` of every position's angles, `(positions, head_dim / 2)`.
    cos: Tensor,
    sin: Tensor,
    device: candle_core::Device,
    /// One call at a time on the device's queue.
    turns: Turns,
    dtype: DType,
    vocab_rows: usize,
    max_positions: usize,
    /// The softmax in f32 (half precision on candle's CPU backend: `softmax_in_f32`).
    softmax_in_f32: bool,
    /// The checkpoint (under `model.` names), kept mapped for the scorers' output-head rows.
    weights: Weights,
}

impl std::fmt::Debug for CandleDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleDecoder")
            .field("device", &self.device)
            .field("dtype", &self.dtype)
            .field("layers", &self.layers.len())
            .finish_non_exhaustive()
    }
}

fn rms(vb: &VarBuilder, size: usize, eps: f64, name: &str) -> Result<RmsNorm> {
    candle_nn::rms_norm(size, eps, vb.pp(name)).map_err(err(name))
}

impl CandleDecoder {
    /// Loads the decoder of `cfg` from `weights` (under `model.`, or bare as Qwen3-Embedding's;
    /// the sizes of `config.json` checked against the tensors as the CPU path checks them) for
    /// prompts of at most `max_positions` tokens, on `device` in `precision`.
    pub fn load(
        weights: Weights,
        cfg: Qwen3Config,
        max_positions: usize,
        device: Device,
        precision: Precision,
    ) -> Result<Self> {
        if cfg.family == super::config::DecoderFamily::Phi3 {
            return Err(crate::Error::Config(
                "Phi3ForCausalLM runs on the crate's own CPU kernels only (device cpu)".into(),
            ));
        }
        let weights = under_model(weights);
        check_config(&weights, &cfg)?;
        let vocab_rows = weights.shape(EMBED)?[0];
        let dev = candle_device(device)?;
        let dt = dtype(precision)?;
        // The decoder's tensors only: the output head stays on the host (the scorers read
        // two of its rows).
        let vb = var_builder(
            &weights,
            dt,
            &dev,
            |n| n.starts_with("model.").then(|| n.to_string()),
            Some(fold(&cfg)),
        )?;
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        let (heads, kv, d) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let in_f32 = softmax_in_f32(&vb);
        let vb = vb.pp("model");
        let embed = candle_nn::embedding(vocab_rows, h, vb.pp("embed_tokens"))
            .map_err(err("model.embed_tokens"))?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("layers.{i}"));
            let a = l.pp("self_attn");
            let m = l.pp("mlp");
            let qk = cfg.qk_norm();
            layers.push(Layer {
                input_norm: rms(&l, h, eps, "input_layernorm")?,
                qkv: stacked(
                    &a,
                    h,
                    &[
                        ("q_proj", heads * d),
                        ("k_proj", kv * d),
                        ("v_proj", kv * d),
                    ],
                    cfg.qkv_bias(),
                )?,
                o: linear(&a, heads * d, h, cfg.o_bias(), "o_proj")?,
                q_norm: qk.then(|| rms(&a, d, eps, "q_norm")).transpose()?,
                k_norm: qk.then(|| rms(&a, d, eps, "k_norm")).transpose()?,
                post_norm: rms(&l, h, eps, "post_attention_layernorm")?,
                mlp: match fused::runs_on(&dev) {
                    true => GateUp::Stacked(stacked(
                        &m,
                        h,
                        &[
                            ("gate_proj", cfg.intermediate_size),
                            ("up_proj", cfg.intermediate_size),
                        ],
                        false,
                    )?),
                    false => GateUp::Apart {
                        gate: linear(&m, h, cfg.intermediate_size, false, "gate_proj")?,
                        up: linear(&m, h, cfg.intermediate_size, false, "up_proj")?,
                    },
                },
                down: linear(&m, cfg.intermediate_size, h, false, "down_proj")?,
            });
        }
        let norm = rms(&vb, h, eps, "norm")?;
        let rope = cfg.rope_scaling.rope(d, cfg.rope_theta, max_positions);
        let (cos, sin) = rope_tensors(&rope, d, max_positions, dt, &dev)?;
        Ok(CandleDecoder {
            cfg,
            embed,
            layers,
            norm,
            cos,
            sin,
            turns: Turns::on(&dev),
            device: dev,
            dtype: dt,
            vocab_rows,
            max_positions,
            softmax_in_f32: in_f32,
            weights,
        })
    }

    /// The checkpoint, under `model.` names (the output head's rows are read from it).
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The configuration.
    pub fn config(&self) -> &Qwen3Config {
        &self.cfg
    }

    /// Rows of the input embedding.
    pub fn vocab_rows(&self) -> usize {
        self.vocab_rows
    }

    /// The most positions a prompt may have.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// The final-normed hidden state of each prompt's last token, `(prompts, hidden)` on the
    /// host, all prompts in one left-padded batch. Prompts are checked as the CPU path checks
    /// them (not empty, within the positions, ids inside the embeddings).
    pub fn last_rows(&self, prompts: &[&[u32]]) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.last_rows_batches(&[prompts.to_vec()], &mut |_, rows| {
            out = rows;
            Ok(())
        })?;
        Ok(out)
    }

    /// [`last_rows`](Self::last_rows) of every batch of `batches` through [`pipeline`] (the
    /// next batch's ids, positions and masks built and its forward pass started before a
    /// batch is read back), `sink(n, rows)` called with batch `n`'s rows, batches in order.
    pub fn last_rows_batches(&self, batches: &[Vec<&[u32]>], sink: BatchSink<'_>) -> Result<()> {
        pipeline(
            &self.turns,
            batches,
            |prompts| self.prepare(prompts),
            |host| match host {
                Some(host) => self
                    .launch(host)
                    .map(Some)
                    .map_err(err("the decoder's forward pass")),
                None => Ok(None),
            },
            |rows| match rows {
                Some(rows) => read_f32(&rows),
                None => Ok(Vec::new()),
            },
            sink,
        )
    }

    /// The host side of a batch of `prompts` (checked as [`last_rows`](Self::last_rows)
    /// says): their shared prefix and the rest of each prompt, left-padded, with positions
    /// and masks; `None` for no prompts.
    fn prepare(&self, prompts: &[&[u32]]) -> Result<Option<HostPrompts>> {
        if prompts.is_empty() {
            return Ok(None);
        }
        check_prompts(prompts, self.max_positions, self.vocab_rows)?;
        let shared = shared_on_device(prompts);
        let windows = self.windows();
        let prefix = match shared {
            0 => None,
            p => {
                let positions: Vec<u32> = (0..p as u32).collect();
                let tokens = &prompts[0][..p];
                let masks = windows.iter().map(|&w| {
                    let mask = PromptMask {
                        rest: &[tokens],
                        shared: 0,
                        window: w,
                    };
                    HostMask::of(self.dtype, &mask)
                });
                Some(HostTokens {
                    ids: tokens.to_vec(),
                    shape: (1, p),
                    positions,
                    masks: masks.collect(),
                })
            }
        };
        let rest: Vec<&[u32]> = prompts.iter().map(|p| &p[shared..]).collect();
        // Padded to the longest prompt: candle compiles nothing per shape.
        let longest = rest.iter().map(|r| r.len()).max().unwrap_or(0);
        let (b, t) = (rest.len(), longest);
        let ids: Vec<u32> = rest
            .iter()
            .flat_map(|r| std::iter::repeat_n(0, t - r.len()).chain(r.iter().copied()))
            .collect();
        // Positions after the shared prefix (what each token sees: `PromptMask`).
        let mut positions = Vec::with_capacity(b * t);
        for r in &rest {
            let pad = t - r.len();
            positions.extend((0..t).map(|j| (shared + j.saturating_sub(pad)) as u32));
        }
        let masks = windows.iter().map(|&w| {
            let mask = PromptMask {
                rest: &rest,
                shared,
                window: w,
            };
            HostMask::of(self.dtype, &mask)
        });
        Ok(Some(HostPrompts {
            prefix,
            rest: HostTokens {
                ids,
                shape: (b, t),
                positions,
                masks: masks.collect(),
            },
        }))
    }

    /// Queues the forward pass of a prepared batch: the shared prefix once (its keys and
    /// values kept), then the rest of each prompt attending to them and to itself; the last
    /// rows, final-normed, as flat f32.
    fn launch(&self, host: HostPrompts) -> candle_core::Result<Tensor> {
        let prefix = match host.prefix {
            None => None,
            Some(p) => {
                let ids = upload(p.ids, p.shape, &self.device)?;
                Some(
                    self.layers_over(&ids, p.positions, p.masks, None, Pass::KeysValues)?
                        .1,
                )
            }
        };
        let rest = host.rest;
        let ids = upload(rest.ids, rest.shape, &self.device)?;
        let (last, _) = self.layers_over(
            &ids,
            rest.positions,
            rest.masks,
            prefix.as_deref(),
            Pass::LastRows,
        )?;
        flat_f32(&self.norm.forward(&last)?)
    }

    /// The windows the layers attend within: `[None]` when no layer slides, else
    /// `[None, Some(window)]` (see [`Qwen3Config::window`]).
    fn windows(&self) -> Vec<Option<usize>> {
        match self.cfg.sliding_window {
            None => vec![None],
            Some(w) => vec![None, Some(w)],
        }
    }

    /// Every layer over `ids` `(b, t)` at `positions` with the additive masks
    /// `(b, t, prefix + t)` of [`Self::windows`] (a layer takes the one of its window), the
    /// keys and values of a shared prefix first when there is one. What comes back is what
    /// `pass` asks for: each row's last hidden state `(b, hidden)` (not final-normed; the
    /// last layer runs its attention, output projection and feed-forward part for that token
    /// only), or each layer's (keys, values) of these tokens (the last layer stops once it
    /// has them).
    ///
    /// The hidden states stay one `(b · t, hidden)` matrix, so that every projection is one
    /// product over the batch (a 3-D input would make candle run one product per row).
    #[allow(clippy::type_complexity)]
    fn layers_over(
        &self,
        ids: &Tensor,
        positions: Vec<u32>,
        masks: Vec<HostMask>,
        prefix: Option<&[(Tensor, Tensor)]>,
        pass: Pass,
    ) -> candle_core::Result<(Tensor, Vec<(Tensor, Tensor)>)> {
        let (b, t) = ids.dims2()?;
        let (heads, kv, d) = (
            self.cfg.num_attention_heads,
            self.cfg.num_key_value_heads,
            self.cfg.head_dim,
        );
        let width = masks[0].len() / (b * t);
        let positions = upload(positions, b * t, &self.device)?;
        let cos = self
            .cos
            .index_select(&positions, 0)?
            .reshape((b, t, d / 2))?;
        let sin = self
            .sin
            .index_select(&positions, 0)?
            .reshape((b, t, d / 2))?;
        // The additive masks (in the activations' format already: `HostMask`), for every
        // head, added by the scores' product on a CUDA device (`QueryMask`).
        let group = heads / kv;
        let masks = masks
            .into_iter()
            .map(|m| QueryMask::new(m.upload((b, 1, 1, t, width), &self.device)?, kv, group))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let mut kept = Vec::new();
        let h = self.cfg.hidden_size;
        let mut x = self.embed.forward(ids)?.reshape((b * t, h))?;
        // Nothing is uploaded from here on (the ids, positions and masks are on the device).
        let _params = cached_params(&self.device);
        let last = self.layers.len().saturating_sub(1);
        for (n, layer) in self.layers.iter().enumerate() {
            let mask = &masks[usize::from(self.cfg.window(n).is_some())];
            let y = layer.input_norm.forward(&x)?;
            // Every head of Q, K and V from one product, `(b · t, (heads + 2 kv) · d)`.
            let all = layer.qkv.forward(&y)?;
            // The last layer of a `LastRows` pass: the last token's query, mask row and
            // residual only.
            let only_last = pass == Pass::LastRows && n == last;
            let tq = if only_last { 1 } else { t };
            // A shared prefix's keys and values, put before each prompt's.
            let prefix_kv = prefix.map(|p| (&p[n].0, &p[n].1));
            let sizes = HeadSizes {
                rows: b,
                tokens: t,
                heads,
                kv,
                d,
                queries: tq,
                prefix: prefix_kv.map_or(Ok(0), |(pk, _)| pk.dim(2))?,
            };
            let norms = match (&layer.q_norm, &layer.k_norm) {
                (Some(q), Some(k)) => Some((q.weight(), k.weight())),
                _ => None,
            };
            let (q, k, v) = split_heads(HeadSplit {
                all: &all,
                sizes,
                norms,
                rope: Some((&cos, &sin)),
                prefix_kv,
                eps: self.cfg.rms_norm_eps,
            })?;
            if pass == Pass::KeysValues {
                kept.push((k.clone(), v.clone()));
                if n == last {
                    break;
                }
            }
            let last_query;
            let (residual, mask) = match only_last {
                true => {
                    last_query = mask.last_query()?;
                    (
                        x.reshape((b, t, h))?.narrow(1, t - 1, 1)?.reshape((b, h))?,
                        &last_query,
                    )
                }
                false => (x, mask),
            };
            // Grouped-query attention without repeating keys and values: the `group` query
            // heads that share a key/value head are one `(group * tq)`-row matrix against it
            // (query head `h` reads key/value head `h / group`, as transformers' repeat_kv).
            let q = q.reshape((b, kv, group * tq, d))?;
            let probs = softmax(&mask.scores(&q, &k)?, self.softmax_in_f32)?;
            let attn = merge_heads(&probs.matmul(&v)?.reshape((b, heads, tq, d))?)?;
            x = layer.o.forward_add(&attn, &residual)?;
            let y = layer.post_norm.forward(&x)?;
            x = layer.down.forward_add(&layer.mlp.forward(&y)?, &x)?;
        }
        Ok((x, kept))
    }
}

/// What [`CandleDecoder::layers_over`] gives back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Each row's last hidden state.
    LastRows,
    /// Each layer's keys and values (a shared prefix's, for the prompts after it).
    KeysValues,
}

/// The attention scale `1 / sqrt(head_dim)`, folded into the queries as the weights are read
/// ([`Fold`]): into `q_norm`'s weight where there is one (Qwen3), else into `q_proj`'s rows
/// (Qwen2). RoPE is linear, so the scores come out scaled without a pass of their own.
fn fold(cfg: &Qwen3Config) -> Fold {
    let suffixes: &'static [&'static str] = match cfg.qk_norm() {
        true => &[".self_attn.q_norm.weight"],
        false => &[".self_attn.q_proj.weight", ".self_attn.q_proj.bias"],
    };
    Fold {
        suffixes,
        scale: 1.0 / (cfg.head_dim as f64).sqrt(),
        rows: None,
    }
}

/// The additive mask entry of the key at position `key` for the query at position `query`:
/// 0 when the query sees it (causal, and within `window` when there is one), else -inf.
fn visible<T: MaskValue>(key: usize, query: usize, window: Option<usize>) -> T {
    let near = window.is_none_or(|w| key + w > query);
    if key <= query && near {
        T::SEEN
    } else {
        T::UNSEEN
    }
}

/// Shared prefixes shorter than this run with each prompt (not worth a pass of their own).
const MIN_SHARED: usize = 16;

/// The CPU path's shared prefix ([`shared_prefix`]: two prompts or more, each keeping a token
/// of its own) when it has at least [`MIN_SHARED`] tokens; else 0.
fn shared_on_device(prompts: &[&[u32]]) -> usize {
    match shared_prefix(prompts) {
        n if n >= MIN_SHARED => n,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mask_is_the_same_in_every_format_and_lets_each_token_see_what_it_should() {
        let (a, b) = ([1u32, 2, 3], [4u32]);
        let rest: [&[u32]; 2] = [&a, &b];
        for (shared, window) in [(0, None), (2, None), (2, Some(2))] {
            let mask = PromptMask {
                rest: &rest,
                shared,
                window,
            };
            let f32s: Vec<f32> = mask.build();
            let f16s: Vec<half::f16> = mask.build();
            let bf16s: Vec<half::bf16> = mask.build();
            assert_eq!(f32s.len(), 2 * 3 * (shared + 3));
            for (i, &v) in f32s.iter().enumerate() {
                assert_eq!(f16s[i].to_f32(), v, "{shared} {window:?} {i}");
                assert_eq!(bf16s[i].to_f32(), v, "{shared} {window:?} {i}");
            }
            let seen =
                |row: usize, q: usize, k: usize| f32s[(row * 3 + q) * (shared + 3) + k] == 0.0;
            // Row 0 (no padding): its last token sees itself and the tokens before it, within
            // the window; row 1 (two padding columns): its one token sees itself, not the padding.
            assert!(seen(0, 2, shared + 2) && seen(0, 2, shared + 1));
            assert_eq!(seen(0, 2, shared), window.is_none());
            assert!(!seen(0, 0, shared + 1), "no token sees a later one");
            assert!(seen(1, 2, shared + 2) && !seen(1, 2, shared) && !seen(1, 2, shared + 1));
            // A padding row sees the prefix (within the window: its last key at least), or
            // itself without one.
            match shared {
                0 => assert!(seen(1, 0, 0)),
                _ => assert!(seen(1, 0, shared - 1) && !seen(1, 0, shared)),
            }
            assert_eq!(seen(1, 0, 0) && shared > 0, window.is_none() && shared > 0);
        }
        // A shared prefix's own pass: one prompt, causal.
        let prefix: Vec<half::f16> = PromptMask {
            rest: &[&a],
            shared: 0,
            window: None,
        }
        .build();
        let causal: Vec<bool> = prefix.iter().map(|v| v.to_f32() == 0.0).collect();
        assert_eq!(
            causal,
            [true, false, false, true, true, false, true, true, true]
        );
    }

    #[test]
    fn a_shared_prefix_needs_two_prompts_and_leaves_each_a_token_of_its_own() {
        let a: Vec<u32> = (0..40).collect();
        let mut b = a.clone();
        b[30] = 999;
        assert_eq!(shared_on_device(&[&a, &b]), 30);
        assert_eq!(shared_on_device(&[&a, &a]), 39);
        assert_eq!(shared_on_device(&[&a]), 0);
        assert_eq!(shared_on_device(&[]), 0);
        let short: Vec<u32> = (0..20).collect();
        assert_eq!(shared_on_device(&[&a, &short, &b]), 19);
        let mut c = a.clone();
        c[10] = 7;
        assert_eq!(
            shared_on_device(&[&a, &c]),
            0,
            "10 tokens are not worth a pass"
        );
    }
}
