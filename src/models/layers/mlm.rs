//! A masked-language-model head (transformers' `BertOnlyMLMHead`, DistilBERT's
//! `vocab_transform` / `vocab_layer_norm` / `vocab_projector`): per token,
//! `logits = LN(act(h Wdᵀ + bd)) Eᵀ + b` over the whole vocabulary, `E` the decoder (tied to the
//! word embeddings or a matrix of its own).
//!
//! The vocabulary projection is the largest product of a learned sparse encoder (`[tokens,
//! hidden] x [hidden, vocab]`), and what follows it reduces over the tokens of each sequence
//! (SPLADE's max or sum). [`MlmHead::reduce`] runs it in blocks of [`BLOCK_TOKENS`] tokens per
//! sequence, each block's logits folded into the sequence's vector while they are in this
//! thread's scratch: the `[tokens, vocab]` matrix of a batch is never held at once.

use std::cell::RefCell;

use rayon::prelude::*;

use super::encoder::Norm;
use super::kernels::{with_scratch, Act, Linear, Then, Weight};
use super::panels::PanelLinear;
use super::weights::Weights;
use crate::Result;

/// Tokens per block of logits: the block's `(tokens, vocab)` logits (7.8 MB for a 30,522-token
/// vocabulary) are this thread's scratch, and each block streams the decoder once.
pub(crate) const BLOCK_TOKENS: usize = 64;

/// Where a checkpoint keeps its MLM head, by full tensor name.
pub(crate) struct MlmNames {
    /// The transform's linear layer (`{transform}.weight`, `.bias`), hidden to hidden.
    pub transform: &'static str,
    /// The transform's layer norm (`{norm}.weight`/`.bias`, or `.gamma`/`.beta`).
    pub norm: &'static str,
    /// The untied decoder weight `(vocab, hidden)`, when the checkpoint saves one.
    pub decoder: &'static str,
    /// The decoder bias `(vocab)`: the first of these names the checkpoint has.
    pub bias: &'static [&'static str],
}

/// An MLM head in f32: the transform, its activation and layer norm, and the decoder.
#[derive(Debug, Clone)]
pub(crate) struct MlmHead {
    transform: PanelLinear,
    act: Act,
    norm: Norm,
    eps: f32,
    decoder: PanelLinear,
    hidden: usize,
    vocab: usize,
}

/// One block's transformed states and logits, reused on this thread.
#[derive(Default)]
struct Block {
    transformed: Vec<f32>,
    logits: Vec<f32>,
}

thread_local! {
    /// The block buffers of this thread.
    static BLOCK: RefCell<Block> = RefCell::new(Block::default());
}

impl MlmHead {
    /// Reads the head `names` of `w` for `hidden`-wide states and a `vocab`-token vocabulary;
    /// without an untied decoder, the decoder is `word` (the word embeddings' full name).
    /// `act` and `eps` are the model's. A missing tensor or a wrong shape is an
    /// [`Error::Model`](crate::Error::Model) naming the file and the tensor.
    pub fn load(
        w: &Weights,
        names: &MlmNames,
        word: &str,
        (hidden, vocab): (usize, usize),
        (act, eps): (Act, f32),
    ) -> Result<Self> {
        let (h, v) = (hidden, vocab);
        let linear = |weight: Vec<f32>, bias: Vec<f32>, outputs: usize| Linear {
            weight: Weight::F32(weight),
            bias,
            inputs: h,
            outputs,
        };
        let t = names.transform;
        let transform = linear(
            w.f32(&format!("{t}.weight"), &[h, h])?,
            w.f32(&format!("{t}.bias"), &[h])?,
            h,
        );
        let (nw, nb) = match w.has(&format!("{}.weight", names.norm)) {
            true => ("weight", "bias"),
            false => ("gamma", "beta"),
        };
        let norm = Norm {
            weight: w.f32(&format!("{}.{nw}", names.norm), &[h])?,
            bias: w.f32(&format!("{}.{nb}", names.norm), &[h])?,
        };
        let decoder = match w.has(names.decoder) {
            true => names.decoder,
            false => word,
        };
        let bias = names
            .bias
            .iter()
            .find(|b| w.has(b))
            .copied()
            .unwrap_or(names.bias[0]);
        let decoder = linear(w.f32(decoder, &[v, h])?, w.f32(bias, &[v])?, v);
        Ok(MlmHead {
            transform: PanelLinear::new(&transform),
            act,
            norm,
            eps,
            decoder: PanelLinear::new(&decoder),
            hidden,
            vocab,
        })
    }

    /// The vocabulary size (the logits per token).
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The logits of `rows` hidden states, `(rows, vocab)`, on this thread.
    fn logits_here(&self, states: &[f32], rows: usize, block: &mut Block) {
        let (h, v) = (self.hidden, self.vocab);
        block.transformed.resize(rows * h, 0.0);
        block.logits.resize(rows * v, 0.0);
        let act = Then::Activate(self.act);
        (self.transform).forward_here(states, rows, &mut block.transformed, act, 0);
        for row in block.transformed.chunks_exact_mut(h) {
            self.norm.apply(row, self.eps);
        }
        (self.decoder).forward_here(
            &block.transformed,
            rows,
            &mut block.logits,
            Then::Nothing,
            0,
        );
    }

    /// One vector of `vocab` values per sequence of the packed `states` (`(tokens, hidden)`,
    /// sequences of `lens` tokens in order): starting from `init` everywhere, `fold(acc,
    /// logits)` takes each token's logits in turn, and `merge(acc, part)` joins the vectors of
    /// a sequence's blocks ([`BLOCK_TOKENS`] tokens each, counted from the sequence's start,
    /// so a sequence's result does not depend on the batch it is in). Blocks run in parallel.
    pub fn reduce(
        &self,
        states: &[f32],
        lens: &[usize],
        init: f32,
        fold: impl Fn(&mut [f32], &[f32]) + Sync,
        merge: impl Fn(&mut [f32], &[f32]) + Sync,
    ) -> Vec<Vec<f32>> {
        let (h, v) = (self.hidden, self.vocab);
        // (sequence, first token of the block in the packed states, tokens)
        let mut tasks = Vec::new();
        let mut start = 0;
        for (s, &len) in lens.iter().enumerate() {
            for first in (0..len).step_by(BLOCK_TOKENS) {
                tasks.push((s, start + first, (len - first).min(BLOCK_TOKENS)));
            }
            start += len;
        }
        let parts: Vec<(usize, Vec<f32>)> = tasks
            .into_par_iter()
            .map(|(s, first, rows)| {
                let mut acc = vec![init; v];
                with_scratch(&BLOCK, |block| {
                    self.logits_here(&states[first * h..(first + rows) * h], rows, block);
                    for logits in block.logits.chunks_exact(v) {
                        fold(&mut acc, logits);
                    }
                });
                (s, acc)
            })
            .collect();
        let mut out: Vec<Option<Vec<f32>>> = vec![None; lens.len()];
        for (s, part) in parts {
            match &mut out[s] {
                Some(acc) => merge(acc, &part),
                slot => *slot = Some(part),
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| vec![init; v]))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::noise;

    fn head(hidden: usize, vocab: usize) -> MlmHead {
        let linear = |seed, outputs| Linear {
            weight: Weight::F32(noise(outputs * hidden, seed)),
            bias: noise(outputs, seed + 1),
            inputs: hidden,
            outputs,
        };
        MlmHead {
            transform: PanelLinear::new(&linear(1, hidden)),
            act: Act::Gelu,
            norm: Norm {
                weight: vec![1.0; hidden],
                bias: vec![0.0; hidden],
            },
            eps: 1e-12,
            decoder: PanelLinear::new(&linear(3, vocab)),
            hidden,
            vocab,
        }
    }

    #[test]
    fn reduce_folds_every_token_of_each_sequence_across_blocks() {
        let (hidden, vocab) = (8, 37);
        let head = head(hidden, vocab);
        // Three sequences, the second longer than a block.
        let lens = [3, BLOCK_TOKENS + 5, 1];
        let total: usize = lens.iter().sum();
        let states = noise(total * hidden, 5);
        let max = |acc: &mut [f32], x: &[f32]| {
            acc.iter_mut().zip(x).for_each(|(a, x)| *a = a.max(*x));
        };
        let got = head.reduce(&states, &lens, f32::NEG_INFINITY, max, max);
        assert_eq!(got.len(), 3);
        let mut start = 0;
        for (s, &len) in lens.iter().enumerate() {
            // Every token's logits on their own, then the maximum.
            let mut want = vec![f32::NEG_INFINITY; vocab];
            for t in start..start + len {
                let mut block = Block::default();
                head.logits_here(&states[t * hidden..(t + 1) * hidden], 1, &mut block);
                max(&mut want, &block.logits);
            }
            for (g, w) in got[s].iter().zip(&want) {
                assert!((g - w).abs() < 1e-5, "sequence {s}: {g} vs {w}");
            }
            start += len;
        }
        assert!(head.reduce(&[], &[], 0.0, max, max).is_empty());
    }
}
