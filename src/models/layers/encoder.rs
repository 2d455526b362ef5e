//! What the post-norm encoders (BERT / XLM-R, DeBERTa, GTE) share: the weights of a
//! checkpoint with the encoder under a prefix ([`EncoderWeights`]), layer norms ([`Norm`]),
//! the feed-forward block run in cache-sized blocks of rows ([`feed_forward`]), the sequences
//! of a packed batch and their checks ([`Sequence`], [`check_sequences`]) and a batch's
//! buffers ([`Workspace`]).

use std::cell::RefCell;
use std::collections::HashMap;

use rayon::prelude::*;

use super::dense::{Dense, Output};
use super::kernels::{layer_norm_row, with_scratch, Act, Linear, Then, Weight};
use super::lora::LowRank;
use super::quant::QuantRows;
use super::weights::Weights;
use crate::models::dir::{ModelDir, WEIGHTS_FILE};
use crate::models::Precision;
use crate::{Error, Result};

/// A layer norm's scale and shift (zeros where a model has no norm bias: adding them changes
/// nothing).
#[derive(Debug, Clone)]
pub(crate) struct Norm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

impl Norm {
    /// `layer_norm(row)` in place.
    #[inline(always)]
    pub fn apply(&self, row: &mut [f32], eps: f32) {
        layer_norm_row(row, &self.weight, &self.bias, eps);
    }

    /// `layer_norm(out + residual)`, as the step after a product.
    pub fn after<'a>(&'a self, residual: &'a [f32], eps: f32) -> Then<'a> {
        Then::AddNorm {
            residual,
            weight: &self.weight,
            bias: &self.bias,
            eps,
        }
    }
}

/// One block's feed-forward activations, and their quantized rows in int8.
#[derive(Default)]
struct FfBlock {
    activations: Vec<f32>,
    quant: QuantRows,
}

thread_local! {
    /// The feed-forward block of this thread, reused across calls.
    static FF_BLOCK: RefCell<FfBlock> = RefCell::new(FfBlock::default());
}

/// `out = LN(x + W2 · act(W1 · x))` over `rows` rows, block by block of rows in parallel: a
/// block's `(rows, intermediate)` activations stay in cache between the two products, and the
/// whole matrix is never written. (DeBERTa's layers end the same way.)
pub(crate) fn feed_forward(
    ff_in: &Dense,
    ff_out: &Dense,
    act: Act,
    norm: Then<'_>,
    x: &[f32],
    rows: usize,
    out: &mut [f32],
) {
    let (h, inner) = (ff_out.outputs(), ff_in.outputs());
    if rows == 0 {
        return;
    }
    let block = ff_in.block_rows(rows);
    out[..rows * h]
        .par_chunks_mut(block * h)
        .enumerate()
        .for_each(|(b, out)| {
            let (first, count) = (b * block, out.len() / h);
            let x = &x[first * h..(first + count) * h];
            with_scratch(&FF_BLOCK, |FfBlock { activations, quant }| {
                activations.resize(count * inner, 0.0);
                ff_in.forward_here(x, count, activations, quant, Then::Activate(act), 0);
                ff_out.forward_here(activations, count, out, quant, norm, first);
            });
        });
}

/// One sequence of a batch: token ids and token type ids of equal length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sequence<'a> {
    pub ids: &'a [u32],
    pub types: &'a [u32],
}

/// Every token of `seqs`, packed in order: its id, its position (counted from
/// `position_offset` in its sequence) and its type.
pub(crate) fn token_rows(seqs: &[Sequence<'_>], position_offset: usize) -> Vec<(u32, usize, u32)> {
    seqs.iter()
        .flat_map(|s| {
            s.ids
                .iter()
                .zip(s.types)
                .enumerate()
                .map(move |(p, (&id, &t))| (id, p + position_offset, t))
        })
        .collect()
}

/// `run` over `rows` as sequences of one text each: every token of type 0 (what an embedder
/// feeds a packed encoder).
pub(crate) fn single_texts<R>(rows: &[&[u32]], run: impl FnOnce(&[Sequence<'_>]) -> R) -> R {
    let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let zeros = vec![0u32; longest];
    let seqs: Vec<Sequence<'_>> = rows
        .iter()
        .map(|ids| Sequence {
            ids,
            types: &zeros[..ids.len()],
        })
        .collect();
    run(&seqs)
}

/// Checks that every sequence of token ids can be encoded: non-empty, no longer than
/// `max_positions`, each id inside the embedding matrix of `vocab` rows (the packed rotary
/// encoders' inputs, which carry no token types).
pub(crate) fn check_ids(seqs: &[&[u32]], max_positions: usize, vocab: usize) -> Result<()> {
    for ids in seqs {
        if ids.is_empty() {
            return Err(Error::InvalidInput(
                "an encoder input must be non-empty".into(),
            ));
        }
        if ids.len() > max_positions {
            return Err(Error::InvalidInput(format!(
                "a sequence of {} tokens is longer than the model's {max_positions} positions",
                ids.len(),
            )));
        }
        if let Some(id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::model(format!(
                "token id {id} is outside the embedding matrix ({vocab} rows): the tokenizer \
                 does not belong to these weights",
            )));
        }
    }
    Ok(())
}

/// Checks that every sequence of a packed encoder batch can be encoded: non-empty with one
/// token type per token, at most `max_positions` tokens, ids below `vocab` and, where the
/// model has token type embeddings (`type_vocab`), types below it. An
/// [`Error::InvalidInput`] or [`Error::Model`], never an out-of-bounds read.
pub(crate) fn check_sequences(
    seqs: &[Sequence<'_>],
    max_positions: usize,
    vocab: usize,
    type_vocab: Option<usize>,
) -> Result<()> {
    for s in seqs {
        if s.ids.is_empty() || s.ids.len() != s.types.len() {
            return Err(Error::InvalidInput(
                "an encoder input must be non-empty, with one token type per token".into(),
            ));
        }
        if s.ids.len() > max_positions {
            return Err(Error::InvalidInput(format!(
                "a sequence of {} tokens is longer than the model's {max_positions} positions",
                s.ids.len(),
            )));
        }
        if let Some(id) = s.ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::model(format!(
                "token id {id} is outside the embedding matrix ({vocab} rows): the tokenizer \
                 does not belong to these weights",
            )));
        }
        if let Some(types) = type_vocab {
            if let Some(t) = s.types.iter().find(|&&t| t as usize >= types) {
                return Err(Error::model(format!(
                    "token type {t} is outside the token type embeddings ({types} rows)",
                )));
            }
        }
    }
    Ok(())
}

/// The weights of a BERT-family checkpoint, through the one weights loader
/// ([`Weights`]): the encoder's tensors (`embeddings.*`, `encoder.layer.N.*`) sit under
/// `bert.` / `roberta.` in transformers' task-model layout, or at the file's root for a bare
/// encoder; task heads sit at the root.
pub(crate) struct EncoderWeights {
    weights: Weights,
    /// `"bert."`, `"roberta."` or `""`: where the encoder's tensors are.
    prefix: String,
    /// A second task's corrections to the merged weights, by the weight's name in the
    /// checkpoint ([`EncoderWeights::adapted`]; empty otherwise).
    corrections: HashMap<String, LowRank>,
}

impl EncoderWeights {
    /// Maps the checkpoint of `dir` (one file or shards) and finds the encoder under the
    /// first of `prefixes` that has it, or at the root; weights with none are an
    /// [`Error::Model`] naming the file.
    pub fn open(dir: &ModelDir, prefixes: &[&str]) -> Result<Self> {
        Self::from_checkpoint(Weights::open(dir.path())?, dir, prefixes)
    }

    /// The encoder of `weights` (the checkpoint of `dir`, opened by the caller), whose weights
    /// carry task adapters (LoRA factors of rank `rank`: [`Weights::merge_lora`]): task
    /// `adapter`'s merged in at `scale`; with `also` another task, its corrections to them too
    /// ([`Weights::lora_difference`], [`EncoderWeights::take_correction`]). A checkpoint without
    /// adapters is an [`Error::Model`].
    pub fn adapted(
        mut weights: Weights,
        dir: &ModelDir,
        prefixes: &[&str],
        (adapter, also): (usize, Option<usize>),
        (scale, rank): (f32, usize),
    ) -> Result<Self> {
        let corrections = match also {
            Some(other) => weights.lora_difference((other, adapter), scale, rank)?,
            None => HashMap::new(),
        };
        if weights.merge_lora(Some(adapter), scale, rank)? == 0 {
            return Err(Error::model(format!(
                "{}: config.json lists task adapters (lora_adaptations), but the checkpoint \
                 holds no LoRA factors (NAME.parametrizations.weight.0.lora_A)",
                dir.path().join(WEIGHTS_FILE).display()
            )));
        }
        let mut w = Self::from_checkpoint(weights, dir, prefixes)?;
        w.corrections = corrections;
        Ok(w)
    }

    /// The other task's correction of the weight `name` (its name in the checkpoint, without
    /// `.parametrizations.weight.original`), handed over once, when
    /// [`adapted`](Self::adapted) was asked for one; an [`Error::Model`] naming it otherwise.
    pub fn take_correction(&mut self, name: &str) -> Result<LowRank> {
        self.corrections.remove(name).ok_or_else(|| {
            Error::model(format!(
                "{}: no LoRA factors for {name}",
                self.weights.config_path().display()
            ))
        })
    }

    /// [`EncoderWeights::open`] of `weights`, the checkpoint of `dir` opened by the caller.
    pub fn from_checkpoint(
        mut weights: Weights,
        dir: &ModelDir,
        prefixes: &[&str],
    ) -> Result<Self> {
        read_flash_layout(&mut weights, dir)?;
        const WORD: &str = "embeddings.word_embeddings.weight";
        let prefix = match prefixes
            .iter()
            .find(|p| weights.has(&format!("{p}.{WORD}")))
        {
            Some(p) => format!("{p}."),
            None if weights.has(WORD) => String::new(),
            None => {
                return Err(Error::model(format!(
                    "{}: no encoder tensors (expected {}.{WORD})",
                    dir.path().join(WEIGHTS_FILE).display(),
                    prefixes.first().unwrap_or(&"")
                )))
            }
        };
        let w = EncoderWeights {
            weights,
            prefix,
            corrections: HashMap::new(),
        };
        w.check_layout(dir)?;
        Ok(w)
    }

    /// Refuses a checkpoint whose layers are not in transformers' layout
    /// (`encoder.layer.N.attention.self.query`, or the flash-attention one
    /// [`read_flash_layout`] reads under those names), naming the architecture, instead of
    /// failing later on a missing tensor.
    fn check_layout(&self, dir: &ModelDir) -> Result<()> {
        let standard = format!("{}encoder.layer.0.attention.self.query.weight", self.prefix);
        let architecture = dir
            .architecture()
            .map_or_else(|_| "(unknown)".to_string(), |a| a.name().to_string());
        // Other families (DeBERTa) read their own names through these weights.
        let bert_family = ["Bert", "XLMRoberta", "Roberta"]
            .iter()
            .any(|f| architecture.starts_with(f));
        let has_layers = self.weights.names().any(|n| n.contains("encoder.layer"));
        if self.weights.has(&standard) || !has_layers || !bert_family {
            return Ok(());
        }
        Err(Error::model(format!(
            "{}: architecture {architecture} in an unknown layout is not supported (no \
             {standard}); supported: BertForSequenceClassification, \
             XLMRobertaForSequenceClassification, BertModel and XLMRobertaModel in \
             transformers' layout (encoder.layer.N.attention.self.query) or in the \
             flash-attention one of jina-reranker-v2 (encoder.layers.N.mixer.Wqkv)",
            dir.path().join(WEIGHTS_FILE).display()
        )))
    }

    /// The encoder's tensor `name` (relative to the encoder's root) of shape `shape`.
    pub fn encoder(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        self.weights.f32(&format!("{}{name}", self.prefix), shape)
    }

    /// The checkpoint, for what the BERT layout does not name (DeBERTa's tensors).
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The full name of the encoder's tensor `name` (relative to the encoder's root).
    pub fn encoder_name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Whether the encoder has a tensor `name` (relative to its root).
    pub fn encoder_has(&self, name: &str) -> bool {
        self.weights.has(&format!("{}{name}", self.prefix))
    }

    /// The linear layer `{name}.weight` `(outputs, inputs)` and `{name}.bias`, relative to the
    /// encoder's root.
    pub fn encoder_linear(&self, name: &str, outputs: usize, inputs: usize) -> Result<Linear> {
        Ok(Linear {
            weight: Weight::F32(self.encoder(&format!("{name}.weight"), &[outputs, inputs])?),
            bias: self.encoder(&format!("{name}.bias"), &[outputs])?,
            inputs,
            outputs,
        })
    }

    /// The linear layer `{name}.weight` / `{name}.bias` at the file's root (a task head).
    pub fn root_linear(&self, name: &str, outputs: usize, inputs: usize) -> Result<Linear> {
        Ok(Linear {
            weight: Weight::F32(
                self.weights
                    .f32(&format!("{name}.weight"), &[outputs, inputs])?,
            ),
            bias: self.weights.f32(&format!("{name}.bias"), &[outputs])?,
            inputs,
            outputs,
        })
    }

    /// Checks a size `config.json` gives (`key` is `value`) against axis `axis` of the tensor
    /// `name` at the file's root (a task head), before it sizes an allocation.
    pub fn check_root_size(&self, key: &str, value: usize, name: &str, axis: usize) -> Result<()> {
        self.weights.check_config_size(key, value, name, axis)
    }

    /// A layer norm under `name`: `weight`/`bias`, or the older `gamma`/`beta` names.
    pub fn norm(&self, name: &str, n: usize) -> Result<Norm> {
        let (w, b) = if self.encoder_has(&format!("{name}.weight")) {
            ("weight", "bias")
        } else {
            ("gamma", "beta")
        };
        Ok(Norm {
            weight: self.encoder(&format!("{name}.{w}"), &[n])?,
            bias: self.encoder(&format!("{name}.{b}"), &[n])?,
        })
    }
}

/// Reads a BERT-family checkpoint saved in the layout of flash-attention's BERT (flash-attn's
/// `models/bert.py`), which jina's remote code for XLM-RoBERTa adapts (jina-reranker-v2),
/// under transformers' names, without a copy; a checkpoint in any other layout is left as
/// it is.
///
/// That code computes transformers' XLM-R (or BERT) under other names: the query, key and
/// value projections stacked in one (`encoder.layers.N.mixer.Wqkv`, `3 · hidden` rows in
/// that order, each head's `head_dim` rows together), `mixer.out_proj`, `norm1`, `mlp.fc1`,
/// `mlp.fc2` and `norm2` for `attention.output.dense`, `attention.output.LayerNorm`,
/// `intermediate.dense`, `output.dense` and `output.LayerNorm` (post-norm, as
/// transformers'), and `emb_ln` for `embeddings.LayerNorm`; the embeddings and the task head
/// keep their names. A tensor of that layout left unread (LoRA adapters, another kind of
/// block) is an [`Error::Model`] naming it: the checkpoint is not one this reads.
pub(crate) fn read_flash_layout(weights: &mut Weights, dir: &ModelDir) -> Result<()> {
    const FIRST: &str = "encoder.layers.0.mixer.Wqkv.weight";
    let Some(prefix) = weights
        .names()
        .find_map(|n| n.strip_suffix(FIRST))
        .map(str::to_string)
    else {
        return Ok(());
    };
    const RENAMED: [(&str, &str); 5] = [
        ("mixer.out_proj", "attention.output.dense"),
        ("norm1", "attention.output.LayerNorm"),
        ("mlp.fc1", "intermediate.dense"),
        ("mlp.fc2", "output.dense"),
        ("norm2", "output.LayerNorm"),
    ];
    let mut n = 0;
    while weights.has(&format!("{prefix}encoder.layers.{n}.mixer.Wqkv.weight")) {
        let (from, to) = (
            format!("{prefix}encoder.layers.{n}."),
            format!("{prefix}encoder.layer.{n}."),
        );
        for kind in ["weight", "bias"] {
            let [q, k, v] =
                ["query", "key", "value"].map(|p| format!("{to}attention.self.{p}.{kind}"));
            weights.split_rows(&format!("{from}mixer.Wqkv.{kind}"), &[&q, &k, &v])?;
            for (old, new) in RENAMED {
                weights.rename(&format!("{from}{old}.{kind}"), &format!("{to}{new}.{kind}"))?;
            }
        }
        n += 1;
    }
    for kind in ["weight", "bias"] {
        let norm = format!("{prefix}emb_ln.{kind}");
        if weights.has(&norm) {
            weights.rename(&norm, &format!("{prefix}embeddings.LayerNorm.{kind}"))?;
        }
    }
    let layers = format!("{prefix}encoder.layers.");
    let left = weights
        .names()
        .filter(|n| n.starts_with(&layers))
        .min()
        .map(str::to_string);
    match left {
        None => Ok(()),
        Some(name) => Err(Error::model(format!(
            "{}: tensor {name} of the flash-attention layout (jina's remote code) is not \
             read: only its plain encoder is supported (jina-reranker-v2), not LoRA adapters \
             or other blocks",
            dir.path().join(WEIGHTS_FILE).display()
        ))),
    }
}

/// One post-norm encoder layer's weights (BERT / XLM-R, DeBERTa, MPNet):
/// `x = LN(x + out · attention(qkv · x))`, then `x = LN(x + ff_out · act(ff_in · x))`.
/// `qkv` holds the query, key and value projections stacked (`3 * hidden` outputs), so one
/// product computes all three.
#[derive(Debug, Clone)]
pub(crate) struct PostNormLayer {
    pub qkv: Dense,
    pub out: Dense,
    pub attn_norm: Norm,
    pub ff_in: Dense,
    pub ff_out: Dense,
    pub ff_norm: Norm,
}

impl PostNormLayer {
    /// The whole layer over the packed rows in `ws.x` (sequences of `lens` tokens starting at
    /// rows `starts`): the stacked query, key and value projection into `ws.qkv`, then
    /// `attention(qkv, ctx)`, which writes the context of every row (of each sequence's first
    /// row only with `first_only`) into `ctx`, then [`PostNormLayer::finish`].
    pub fn forward(
        &self,
        ws: &mut Workspace,
        (lens, starts): (&[usize], &[usize]),
        first_only: bool,
        (h, eps, act): (usize, f32, Act),
        attention: impl FnOnce(&[f32], &mut [f32]),
    ) {
        let total: usize = lens.iter().sum();
        let qkv = &mut ws.qkv[..total * 3 * h];
        self.qkv
            .forward(&ws.x[..total * h], total, qkv, &mut ws.quant, Then::Nothing);
        // With `first_only`, attention keeps one query row per sequence, and so does the rest.
        let rows = if first_only { starts.len() } else { total };
        attention(qkv, &mut ws.ctx[..rows * h]);
        self.finish(ws, starts, first_only, rows, (h, eps, act));
    }

    /// The rest of the layer once its attention context is in `ws.ctx` (`rows` rows): with
    /// `first_only`, each sequence's first residual row (at `starts`) moves to the front of
    /// `ws.x`; then `x = LN(x + out · ctx)` and `x = LN(x + ff_out · act(ff_in · x))`, each
    /// computed in `ws.proj`, which then becomes `ws.x`. `(hidden, eps, act)` are the model's.
    fn finish(
        &self,
        ws: &mut Workspace,
        starts: &[usize],
        first_only: bool,
        rows: usize,
        (h, eps, act): (usize, f32, Act),
    ) {
        if first_only {
            // Row starts[i] moves to row i; starts[i] >= i, so no source is overwritten first.
            for (i, &s) in starts.iter().enumerate() {
                ws.x.copy_within(s * h..(s + 1) * h, i * h);
            }
        }
        let n = rows * h;
        let then = self.attn_norm.after(&ws.x[..n], eps);
        self.out
            .forward(&ws.ctx[..n], rows, &mut ws.proj[..n], &mut ws.quant, then);
        std::mem::swap(&mut ws.x, &mut ws.proj);
        let norm = self.ff_norm.after(&ws.x[..n], eps);
        feed_forward(
            &self.ff_in,
            &self.ff_out,
            act,
            norm,
            &ws.x[..n],
            rows,
            &mut ws.proj[..n],
        );
        std::mem::swap(&mut ws.x, &mut ws.proj);
    }
}

/// `x`'s rows (`hidden` wide) as `LN(word[id] + position[p])` for each `(id, p)` of `rows`,
/// in parallel: the embeddings of the encoders without token types (MPNet, DistilBERT).
pub(crate) fn embed_words_and_positions(
    x: &mut [f32],
    rows: &[(u32, usize)],
    (word, position): (&[f32], &[f32]),
    norm: &Norm,
    eps: f32,
) {
    let h = norm.weight.len();
    x.par_chunks_mut(h)
        .zip(rows.par_iter())
        .for_each(|(row, &(id, pos))| {
            let w = &word[id as usize * h..][..h];
            let p = &position[pos * h..][..h];
            for ((v, w), p) in row.iter_mut().zip(w).zip(p) {
                *v = w + p;
            }
            layer_norm_row(row, &norm.weight, &norm.bias, eps);
        });
}

/// The query, key and value projections of `hidden` wide states stacked into one product
/// (`3 * hidden` outputs: queries, then keys, then values), in f32.
pub(crate) fn stack_qkv([q, k, v]: [Linear; 3], hidden: usize) -> Linear {
    Linear {
        weight: Weight::F32([q.weight.to_f32(), k.weight.to_f32(), v.weight.to_f32()].concat()),
        bias: [q.bias, k.bias, v.bias].concat(),
        inputs: hidden,
        outputs: 3 * hidden,
    }
}

/// Where a post-norm layer's attention tensors are, relative to `encoder.layer.N.attention.`
/// (the feed-forward ones are `intermediate.dense`, `output.dense` and `output.LayerNorm` in
/// every such model).
pub(crate) struct AttentionNames {
    pub q: &'static str,
    pub k: &'static str,
    pub v: &'static str,
    pub out: &'static str,
    pub norm: &'static str,
}

impl EncoderWeights {
    /// Checks the embeddings' width (`key` is `width`: `hidden_size`, or ELECTRA's
    /// `embedding_size`) and `vocab_size` against the word embeddings and
    /// `max_position_embeddings` against the position embeddings in the safetensors header
    /// (see `Weights::check_config_size`).
    pub fn check_embedding_sizes(
        &self,
        (key, width): (&str, usize),
        vocab: usize,
        positions: usize,
    ) -> Result<()> {
        let w = self.weights();
        let word = self.encoder_name("embeddings.word_embeddings.weight");
        w.check_config_size(key, width, &word, 1)?;
        w.check_config_size("vocab_size", vocab, &word, 0)?;
        let position = self.encoder_name("embeddings.position_embeddings.weight");
        w.check_config_size("max_position_embeddings", positions, &position, 0)
    }

    /// Checks `num_hidden_layers` (the last layer's query projection, named by `names`, is
    /// there) and `intermediate_size` (the first layer's feed-forward input) against the
    /// safetensors header.
    pub fn check_layer_sizes(
        &self,
        names: &AttentionNames,
        layers: usize,
        intermediate: usize,
    ) -> Result<()> {
        let w = self.weights();
        let last = layers - 1;
        let last_query = self.encoder_name(&format!(
            "encoder.layer.{last}.attention.{}.weight",
            names.q
        ));
        w.check_config_tensor("num_hidden_layers", layers, &last_query)?;
        let inner = self.encoder_name("encoder.layer.0.intermediate.dense.weight");
        w.check_config_size("intermediate_size", intermediate, &inner, 0)
    }

    /// All `layers` layers of a post-norm encoder whose attention is named by `names`, their
    /// query, key and value read apart ([`EncoderWeights::qkv`]) and stacked
    /// ([`EncoderWeights::post_norm_layer`]).
    pub fn post_norm_layers(
        &self,
        layers: usize,
        names: &AttentionNames,
        (hidden, inner): (usize, usize),
        precision: Precision,
    ) -> Result<Vec<PostNormLayer>> {
        (0..layers)
            .map(|n| {
                let qkv = self.qkv(n, names, hidden)?;
                self.post_norm_layer(n, names, qkv, (hidden, inner), precision)
            })
            .collect()
    }

    /// Layer `n`'s query, key and value projections (`hidden` wide), in f32.
    pub fn qkv(&self, n: usize, names: &AttentionNames, hidden: usize) -> Result<[Linear; 3]> {
        let att = format!("encoder.layer.{n}.attention");
        let read = |name: &str| self.encoder_linear(&format!("{att}.{name}"), hidden, hidden);
        Ok([read(names.q)?, read(names.k)?, read(names.v)?])
    }

    /// Layer `n` of `hidden` wide states and an `inner` wide feed-forward block, its query,
    /// key and value projections `qkv` stacked into one, every linear layer in `precision`.
    pub fn post_norm_layer(
        &self,
        n: usize,
        names: &AttentionNames,
        qkv: [Linear; 3],
        (hidden, inner): (usize, usize),
        precision: Precision,
    ) -> Result<PostNormLayer> {
        let (h, i) = (hidden, inner);
        let l = format!("encoder.layer.{n}");
        let att = format!("{l}.attention");
        let dense = |linear| Dense::new(linear, precision);
        Ok(PostNormLayer {
            qkv: dense(stack_qkv(qkv, h)),
            out: dense(self.encoder_linear(&format!("{att}.{}", names.out), h, h)?),
            attn_norm: self.norm(&format!("{att}.{}", names.norm), h)?,
            ff_in: dense(self.encoder_linear(&format!("{l}.intermediate.dense"), i, h)?),
            ff_out: dense(self.encoder_linear(&format!("{l}.output.dense"), h, i)?),
            ff_norm: self.norm(&format!("{l}.output.LayerNorm"), h)?,
        })
    }
}

/// Refuses a `precision` other than f32 and int8 for the CPU encoder `encoder` names (e.g.
/// "MPNet encoder"): bf16 is for Qwen3 models.
pub(crate) fn check_f32_or_int8(precision: Precision, encoder: &str) -> Result<()> {
    if matches!(precision, Precision::F32 | Precision::Int8) {
        return Ok(());
    }
    Err(Error::Config(format!(
        "precision {precision} is not supported by the {encoder} (f32 or int8; bf16 is for \
         Qwen3 models)"
    )))
}

/// The shape of a packed batch: each sequence's length, their total and the row each
/// sequence starts at.
pub(crate) struct Packed {
    pub lens: Vec<usize>,
    pub total: usize,
    pub starts: Vec<usize>,
}

impl Packed {
    /// The shape of `seqs` packed one after another; `None` when there is no sequence.
    pub fn of(seqs: &[Sequence<'_>]) -> Option<Self> {
        if seqs.is_empty() {
            return None;
        }
        let lens: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();
        let total = lens.iter().sum();
        let starts = crate::models::packed_starts(&lens);
        Some(Packed {
            lens,
            total,
            starts,
        })
    }

    /// The longest sequence's length.
    pub fn longest(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(1)
    }

    /// The hidden states `output` wants of the `hidden` wide states `x` the last layer left:
    /// every row, or with [`Output::FirstToken`] the one row per sequence that layer left at
    /// the front.
    pub fn last_states(&self, mut x: Vec<f32>, hidden: usize, output: Output) -> Vec<f32> {
        x.truncate(output.rows(self.total, self.lens.len()) * hidden);
        x
    }
}

/// The buffers of one batch, sized for its tokens (GTE's post-norm encoder uses the same).
pub(crate) struct Workspace {
    /// Hidden states `(tokens, hidden)`.
    pub x: Vec<f32>,
    /// Stacked queries, keys and values `(tokens, 3 * hidden)`.
    pub qkv: Vec<f32>,
    /// Attention context `(tokens, hidden)`.
    pub ctx: Vec<f32>,
    /// Projection outputs `(tokens, hidden)`.
    pub proj: Vec<f32>,
    /// The quantized inputs of the int8 linear layers (empty in f32).
    pub quant: QuantRows,
}

impl Workspace {
    pub fn new(tokens: usize, hidden: usize) -> Self {
        let h = hidden;
        Workspace {
            x: vec![0.0; tokens * h],
            qkv: vec![0.0; tokens * 3 * h],
            ctx: vec![0.0; tokens * h],
            proj: vec![0.0; tokens * h],
            quant: QuantRows::default(),
        }
    }
}
