//! A Qwen3 decoder forward pass for scoring: packed batches, no KV cache, one head vector.
//!
//! A batch is *packed*: the token ids of all its prompts are concatenated into one
//! `(total_tokens, hidden)` matrix, so the projections and the MLP never touch a padding token.
//! Attention is restricted to each prompt and causal: matrix products with a causal mask for
//! prompts up to 2048 tokens, candle-nn's streaming variable-length CPU kernel for longer ones
//! (both with grouped-query heads). Positions restart at 0 for every prompt, exactly as for a
//! prompt scored alone. Only each prompt's last token is carried
//! through the last layer's attention queries, output projection and MLP, and the output head
//! is the single vector `W[yes] - W[no]`, so the result per prompt is `l_yes - l_no`.
//!
//! Per layer, as in `transformers`' `Qwen3DecoderLayer`:
//! `x += o(attn(rope(q_norm(q(rms(x)))), rope(k_norm(k(rms(x)))), v(rms(x))))`, then
//! `x += down(silu(gate(rms(x))) * up(rms(x)))`; finally `rms(x)` dotted with the head vector.

use std::path::Path;

use candle_core::{Device, Tensor};
use candle_nn::attention::flash_attn_varlen_cpu;
use candle_nn::ops::{rms_norm, softmax_last_dim};
use candle_nn::rotary_emb::rope_thd;

use crate::models::candle_err;
use crate::models::qwen3::Qwen3Config;
use crate::models::weights::Weights;
use crate::{Error, Result};

/// Reads `name` (of shape `shape`) from the mapped checkpoint as an f32 tensor.
fn get(w: &Weights, name: &str, shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(w.f32(name, shape)?, shape, &Device::Cpu)
        .map_err(candle_err("loading weights"))
}

/// A linear layer without or with bias, weight stored as `(out, in)`.
struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    fn load(w: &Weights, prefix: &str, out: usize, inp: usize, bias: bool) -> Result<Self> {
        let weight = get(w, &format!("{prefix}.weight"), &[out, inp])?;
        let bias = if bias {
            Some(get(w, &format!("{prefix}.bias"), &[out])?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// `x (n, in) -> (n, out)`.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = x.matmul(&self.weight.t()?)?;
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}

/// One decoder layer.
struct Layer {
    input_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Tensor,
    k_norm: Tensor,
    post_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Layer {
    fn load(w: &Weights, cfg: &Qwen3Config, i: usize) -> Result<Self> {
        let p = format!("model.layers.{i}");
        let (h, hd, ffn) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let q_out = cfg.num_attention_heads * hd;
        let kv_out = cfg.num_key_value_heads * hd;
        let bias = cfg.attention_bias;
        Ok(Layer {
            input_norm: get(w, &format!("{p}.input_layernorm.weight"), &[h])?,
            q: Linear::load(w, &format!("{p}.self_attn.q_proj"), q_out, h, bias)?,
            k: Linear::load(w, &format!("{p}.self_attn.k_proj"), kv_out, h, bias)?,
            v: Linear::load(w, &format!("{p}.self_attn.v_proj"), kv_out, h, bias)?,
            o: Linear::load(w, &format!("{p}.self_attn.o_proj"), h, q_out, bias)?,
            q_norm: get(w, &format!("{p}.self_attn.q_norm.weight"), &[hd])?,
            k_norm: get(w, &format!("{p}.self_attn.k_norm.weight"), &[hd])?,
            post_norm: get(w, &format!("{p}.post_attention_layernorm.weight"), &[h])?,
            gate: Linear::load(w, &format!("{p}.mlp.gate_proj"), ffn, h, false)?,
            up: Linear::load(w, &format!("{p}.mlp.up_proj"), ffn, h, false)?,
            down: Linear::load(w, &format!("{p}.mlp.down_proj"), h, ffn, false)?,
        })
    }
}

/// The packed layout of one batch.
struct Packed {
    /// Tokens in the batch.
    total: usize,
    /// The longest prompt.
    max_len: usize,
    /// Per-prompt lengths.
    lens: Vec<usize>,
    /// `(total, 1, head_dim / 2)` cos and sin at each token's position.
    cos: Tensor,
    sin: Tensor,
    /// Per-prompt lengths, `u32`.
    seqlens: Tensor,
    /// Per-prompt ones (one query per prompt in the last layer), `u32`.
    ones: Tensor,
    /// Index of each prompt's last token in the packed rows, `u32`.
    last: Tensor,
}

/// The weights of a Qwen3 causal LM reduced to what yes/no scoring needs.
pub(crate) struct Qwen3Scorer {
    cfg: Qwen3Config,
    embed: Tensor,
    layers: Vec<Layer>,
    final_norm: Tensor,
    /// `(hidden, 1)`: `W[yes] - W[no]` of the output head.
    head: Tensor,
    /// `(max_positions, head_dim / 2)` RoPE tables.
    cos: Tensor,
    sin: Tensor,
}

impl Qwen3Scorer {
    /// Loads the weights in `dir` for prompts of at most `max_positions` tokens, keeping only
    /// the `yes - no` row difference of the output head.
    pub(crate) fn load(
        dir: &Path,
        cfg: Qwen3Config,
        yes: u32,
        no: u32,
        max_positions: usize,
    ) -> Result<Self> {
        let w = Weights::open(dir)?;
        let h = cfg.hidden_size;
        let embed_name = "model.embed_tokens.weight";
        let embed_shape = w.shape(embed_name)?.to_vec();
        if embed_shape.len() != 2 || embed_shape[1] != h {
            return Err(Error::model(format!(
                "{embed_name} has shape {embed_shape:?}, expected (vocab, {h})"
            )));
        }
        let embed = get(&w, embed_name, &embed_shape)?;
        let head_name = if cfg.tie_word_embeddings {
            embed_name
        } else if w.has("lm_head.weight") {
            "lm_head.weight"
        } else {
            return Err(Error::model(
                "no lm_head.weight in the weights, and config.json says tie_word_embeddings is false",
            ));
        };
        let rows = w.rows(head_name, h, &[yes, no])?;
        let diff: Vec<f32> = rows[..h]
            .iter()
            .zip(&rows[h..])
            .map(|(y, n)| y - n)
            .collect();
        let head = Tensor::from_vec(diff, (h, 1), &Device::Cpu)
            .map_err(candle_err("building the yes/no head"))?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(&w, &cfg, i))
            .collect::<Result<Vec<_>>>()?;
        let final_norm = get(&w, "model.norm.weight", &[h])?;
        let (cos, sin) = rope_tables(cfg.head_dim, cfg.rope_theta, max_positions)?;
        Ok(Qwen3Scorer {
            cfg,
            embed,
            layers,
            final_norm,
            head,
            cos,
            sin,
        })
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &Qwen3Config {
        &self.cfg
    }

    /// Rows of the input embedding (the largest token id plus one that the weights accept).
    pub(crate) fn vocab_rows(&self) -> usize {
        self.embed.dims().first().copied().unwrap_or(0)
    }

    /// The most positions a prompt may have.
    pub(crate) fn max_positions(&self) -> usize {
        self.cos.dims().first().copied().unwrap_or(0)
    }

    /// `l_yes - l_no` at the last token of each prompt, all prompts in one packed forward pass.
    pub(crate) fn logits(&self, prompts: &[&[u32]]) -> Result<Vec<f32>> {
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        self.check(prompts)?;
        let packed = self.pack(prompts).map_err(candle_err("packing a batch"))?;
        self.forward(prompts, &packed)
            .map_err(candle_err("Qwen3 forward pass"))
    }

    /// Rejects empty prompts, prompts longer than the RoPE table, and ids outside the weights.
    fn check(&self, prompts: &[&[u32]]) -> Result<()> {
        let rows = self.vocab_rows();
        for p in prompts {
            if p.is_empty() {
                return Err(Error::InvalidInput(
                    "an empty prompt cannot be scored".into(),
                ));
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

    fn pack(&self, prompts: &[&[u32]]) -> candle_core::Result<Packed> {
        let dev = &Device::Cpu;
        let total: usize = prompts.iter().map(|p| p.len()).sum();
        let max_len = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        let positions: Vec<u32> = prompts.iter().flat_map(|p| 0..p.len() as u32).collect();
        let positions = Tensor::from_vec(positions, total, dev)?;
        let half = self.cfg.head_dim / 2;
        let cos = self
            .cos
            .index_select(&positions, 0)?
            .reshape((total, 1, half))?;
        let sin = self
            .sin
            .index_select(&positions, 0)?
            .reshape((total, 1, half))?;
        let lens: Vec<u32> = prompts.iter().map(|p| p.len() as u32).collect();
        let mut last = Vec::with_capacity(prompts.len());
        let mut end = 0u32;
        for &len in &lens {
            end += len;
            last.push(end - 1);
        }
        let n = prompts.len();
        Ok(Packed {
            total,
            max_len,
            lens: prompts.iter().map(|p| p.len()).collect(),
            cos,
            sin,
            seqlens: Tensor::from_vec(lens, n, dev)?,
            ones: Tensor::from_vec(vec![1u32; n], n, dev)?,
            last: Tensor::from_vec(last, n, dev)?,
        })
    }

    fn forward(&self, prompts: &[&[u32]], packed: &Packed) -> candle_core::Result<Vec<f32>> {
        let ids: Vec<u32> = prompts.iter().flat_map(|p| p.iter().copied()).collect();
        let ids = Tensor::from_vec(ids, packed.total, &Device::Cpu)?;
        let mut x = self.embed.index_select(&ids, 0)?;
        let n_layers = self.layers.len();
        for (i, layer) in self.layers.iter().enumerate() {
            x = self.layer(layer, &x, packed, i + 1 == n_layers)?;
        }
        let x = rms_norm(&x, &self.final_norm, self.eps())?;
        x.matmul(&self.head)?.flatten_all()?.to_vec1::<f32>()
    }

    fn eps(&self) -> f32 {
        self.cfg.rms_norm_eps as f32
    }

    /// One decoder layer over the packed rows. In the last layer only each prompt's last row
    /// is needed afterwards, so the attention queries, the output projection and the MLP run
    /// on those rows only, and the result has one row per prompt.
    fn layer(
        &self,
        l: &Layer,
        x: &Tensor,
        p: &Packed,
        last_layer: bool,
    ) -> candle_core::Result<Tensor> {
        let (nh, nkv, hd) = (
            self.cfg.num_attention_heads,
            self.cfg.num_key_value_heads,
            self.cfg.head_dim,
        );
        let t = p.total;
        let eps = self.eps();
        let h = rms_norm(x, &l.input_norm, eps)?;
        let q = rms_norm(&l.q.forward(&h)?.reshape((t, nh, hd))?, &l.q_norm, eps)?;
        let k = rms_norm(&l.k.forward(&h)?.reshape((t, nkv, hd))?, &l.k_norm, eps)?;
        let v = l.v.forward(&h)?.reshape((t, nkv, hd))?;
        let q = rope_thd(&q.reshape((t, 1, nh, hd))?, &p.cos, &p.sin)?.reshape((t, nh, hd))?;
        let k = rope_thd(&k.reshape((t, 1, nkv, hd))?, &p.cos, &p.sin)?.reshape((t, nkv, hd))?;
        let scale = 1.0 / (hd as f32).sqrt();
        let (x, ctx) = if last_layer {
            // One query per prompt (its last token) against all of the prompt's keys: the
            // kernel aligns the queries to the end of each prompt.
            let q = q.index_select(&p.last, 0)?;
            let max_len = p.max_len;
            let ctx = flash_attn_varlen_cpu(
                &q, &k, &v, None, &p.ones, &p.seqlens, 1, max_len, scale, true, None, None,
            )?;
            (x.index_select(&p.last, 0)?, ctx)
        } else {
            (x.clone(), self.causal_attention(&q, &k, &v, p)?)
        };
        let rows = ctx.dims3()?.0;
        let x = (x + l.o.forward(&ctx.reshape((rows, nh * hd))?)?)?;
        let h = rms_norm(&x, &l.post_norm, eps)?;
        let act = (candle_nn::ops::silu(&l.gate.forward(&h)?)? * l.up.forward(&h)?)?;
        x + l.down.forward(&act)?
    }
}

impl Qwen3Scorer {
    /// Causal attention within each prompt: `(total, heads, head_dim)` in and out.
    ///
    /// Prompts of at most [`MATMUL_ATTENTION_MAX_LEN`] tokens use matrix products (the scores,
    /// `heads x len x len` floats, are materialized), which run at matrix-multiply speed;
    /// longer prompts use candle-nn's streaming variable-length kernel, whose memory grows
    /// linearly with the length.
    fn causal_attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        p: &Packed,
    ) -> candle_core::Result<Tensor> {
        let hd = self.cfg.head_dim;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut out = Vec::with_capacity(p.lens.len());
        let mut start = 0;
        for &len in &p.lens {
            let (qs, ks, vs) = (
                q.narrow(0, start, len)?,
                k.narrow(0, start, len)?,
                v.narrow(0, start, len)?,
            );
            out.push(if len <= MATMUL_ATTENTION_MAX_LEN {
                self.matmul_attention(&qs, &ks, &vs, scale)?
            } else {
                let seqlen = Tensor::from_vec(vec![len as u32], 1, &Device::Cpu)?;
                flash_attn_varlen_cpu(
                    &qs, &ks, &vs, None, &seqlen, &seqlen, len, len, scale, true, None, None,
                )?
            });
            start += len;
        }
        Tensor::cat(&out, 0)
    }

    /// Causal grouped-query attention for one prompt with matrix products: the query heads
    /// that share a key/value head are stacked, so keys and values are never repeated.
    fn matmul_attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        scale: f32,
    ) -> candle_core::Result<Tensor> {
        let (nh, nkv, hd) = (
            self.cfg.num_attention_heads,
            self.cfg.num_key_value_heads,
            self.cfg.head_dim,
        );
        let g = nh / nkv;
        let len = q.dims3()?.0;
        // Query head h uses key/value head h / g, as transformers' repeat_kv does.
        let q = (q
            .reshape((len, nkv, g, hd))?
            .permute((1, 2, 0, 3))?
            .contiguous()?
            * scale as f64)?
            .reshape((nkv, g * len, hd))?;
        let k_t = k.permute((1, 2, 0))?.contiguous()?;
        let v = v.transpose(0, 1)?.contiguous()?;
        let mask: Vec<f32> = (0..len)
            .flat_map(|i| (0..len).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        let mask = Tensor::from_vec(mask, (len, len), &Device::Cpu)?;
        let scores = q
            .matmul(&k_t)?
            .reshape((nkv, g, len, len))?
            .broadcast_add(&mask)?;
        let probs = softmax_last_dim(&scores)?.reshape((nkv, g * len, len))?;
        probs
            .matmul(&v)?
            .reshape((nkv, g, len, hd))?
            .permute((2, 0, 1, 3))?
            .contiguous()?
            .reshape((len, nh, hd))
    }
}

/// Prompts up to this many tokens use matrix-product attention (see
/// `Qwen3Scorer::causal_attention`); at this length the scores of a 16-head model take 256 MiB.
const MATMUL_ATTENTION_MAX_LEN: usize = 2048;

/// RoPE cos/sin tables `(positions, head_dim / 2)`, computed like `transformers` in float32:
/// `inv_freq = 1 / theta^(2i / d)`, angle `= position * inv_freq` rounded to f32, then cos/sin.
fn rope_tables(head_dim: usize, theta: f64, positions: usize) -> Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| {
            let exponent = (2 * i) as f32 / head_dim as f32;
            1.0f32 / (theta.powf(exponent as f64) as f32)
        })
        .collect();
    let mut cos = Vec::with_capacity(positions * half);
    let mut sin = Vec::with_capacity(positions * half);
    for pos in 0..positions {
        for &f in &inv {
            let angle = (pos as f32 * f) as f64;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    let dev = &Device::Cpu;
    let cos = Tensor::from_vec(cos, (positions, half), dev).map_err(candle_err("RoPE table"))?;
    let sin = Tensor::from_vec(sin, (positions, half), dev).map_err(candle_err("RoPE table"))?;
    Ok((cos, sin))
}
