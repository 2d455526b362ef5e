//! The classification heads: the [`Classifier`] trait every architecture's sequence
//! classifier implements (what a cross-encoder runs), and the one first-token head
//! `out(act(pooler(first)))` that BERT, XLM-R, ELECTRA, DistilBERT, GTE and DeBERTa share
//! ([`PooledClassifier`], over any [`FirstTokens`] encoder; [`HeadLayout`] names where each
//! checkpoint keeps its layers and which activation runs between them).

use std::path::PathBuf;

use serde_json::Value;

use super::batch::run_in_groups;
use super::encoder::{EncoderWeights, Sequence};
use super::kernels::{Act, Linear};
use crate::models::config::ClassifierConfig;
use crate::models::dir::{ModelDir, CONFIG_FILE};
use crate::models::pair::PairEncoding;
use crate::models::Precision;
use crate::Result;

/// A sequence classifier over (query, document) pairs: what a cross-encoder runs. Each
/// architecture's classifier implements it, on the crate's kernels or through candle.
pub(crate) trait Classifier: Send + Sync {
    /// What `config.json` says of the head (architecture, labels, activation).
    fn config(&self) -> &ClassifierConfig;
    /// The number format of the weights.
    fn precision(&self) -> Precision;
    /// The rows of the word embeddings (token ids must be below it).
    fn vocab_size(&self) -> usize;
    /// The longest input in tokens the model can encode.
    fn max_length(&self) -> usize;
    /// Logits, one row of `num_labels` per encoding, the encodings run as one batch.
    fn logits(&self, encodings: &[&PairEncoding]) -> Result<Vec<Vec<f32>>>;
    /// [`logits`](Self::logits) of every batch of `batches`, `sink(n, rows)` called with batch
    /// `n`'s rows, batches in order; the first error stops the run. The crate's kernels run
    /// one batch after the other; the candle engine prepares the next batch and starts it on
    /// the device before it hands a batch to `sink`.
    fn logits_batches(
        &self,
        batches: &[Vec<&PairEncoding>],
        sink: &mut dyn FnMut(usize, Vec<Vec<f32>>) -> Result<()>,
    ) -> Result<()> {
        for (n, encodings) in batches.iter().enumerate() {
            sink(n, self.logits(encodings)?)?;
        }
        Ok(())
    }
}

/// An encoder a first-token head reads: each sequence's first hidden state, and its limits.
pub(crate) trait FirstTokens: Send + Sync {
    /// The last hidden state of each sequence's first token, `(sequences, hidden)`, the
    /// sequences run as one packed batch.
    fn first_tokens(&self, seqs: &[Sequence<'_>]) -> Result<Vec<f32>>;
    /// The number format of the encoder's linear layers.
    fn precision(&self) -> Precision;
    /// `vocab_size` from `config.json`.
    fn vocab_size(&self) -> usize;
    /// The longest input the position embeddings (or the model) cover.
    fn max_length(&self) -> usize;
}

/// The activation of a pooler: one of the encoder's, or `tanh` (BERT's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolerAct {
    /// An activation the encoder's layers also use (`gelu`, `gelu_new`, `relu`, ...).
    Act(Act),
    /// `tanh` (BERT's pooler).
    Tanh,
}

impl PoolerAct {
    /// Applies the activation to every element of `x`.
    pub fn apply(self, x: &mut [f32]) {
        match self {
            PoolerAct::Act(act) => act.apply_here(x),
            PoolerAct::Tanh => x.iter_mut().for_each(|v| *v = v.tanh()),
        }
    }
}

/// An encoder with a first-token head: `logits = out(act(pooler(first)))`, the pooler and the
/// output layer in f32. BERT's and GTE's pooler is `tanh(pooler.dense)`, XLM-R's the head's
/// `classifier.dense` with `tanh`, DeBERTa's `ContextPooler` its `pooler_hidden_act`.
pub(crate) struct PooledClassifier<E> {
    encoder: E,
    pooler: Linear,
    act: PoolerAct,
    out: Linear,
    config: ClassifierConfig,
}

impl<E> PooledClassifier<E> {
    /// The classifier of `encoder` with its head.
    pub fn new(
        encoder: E,
        pooler: Linear,
        act: PoolerAct,
        out: Linear,
        config: ClassifierConfig,
    ) -> Self {
        PooledClassifier {
            encoder,
            pooler,
            act,
            out,
            config,
        }
    }
}

/// A first-token head in a checkpoint: `pooler` (`hidden` to `hidden`) under the encoder's
/// prefix or at the file's root, its activation `act`, then `out` (`hidden` to the labels) at
/// the root.
pub(crate) struct HeadLayout {
    pub pooler: &'static str,
    pub pooler_at_root: bool,
    pub act: PoolerAct,
    pub out: &'static str,
}

/// BERT's (and GTE's) head: the encoder's `pooler.dense`, tanh, then `classifier`.
pub(crate) const BERT_HEAD: HeadLayout = HeadLayout {
    pooler: "pooler.dense",
    pooler_at_root: false,
    act: PoolerAct::Tanh,
    out: "classifier",
};

/// XLM-R's (RoBERTa's, CamemBERT's) head: `classifier.dense`, tanh, then
/// `classifier.out_proj`.
pub(crate) const XLMR_HEAD: HeadLayout = HeadLayout {
    pooler: "classifier.dense",
    pooler_at_root: true,
    act: PoolerAct::Tanh,
    out: "classifier.out_proj",
};

/// ELECTRA's head: XLM-R's layers with exact GELU between them (transformers'
/// `ElectraClassificationHead` hard-codes it, whatever `hidden_act` says).
pub(crate) const ELECTRA_HEAD: HeadLayout = HeadLayout {
    act: PoolerAct::Act(Act::Gelu),
    ..XLMR_HEAD
};

/// DistilBERT's head: `pre_classifier`, ReLU, then `classifier`, both at the file's root.
pub(crate) const DISTILBERT_HEAD: HeadLayout = HeadLayout {
    pooler: "pre_classifier",
    pooler_at_root: true,
    act: PoolerAct::Act(Act::Relu),
    out: "classifier",
};

impl<E> PooledClassifier<E> {
    /// `encoder` (`hidden` wide) with the head whose layers and activation `head` names, its
    /// output checked against `config.num_labels` first.
    pub fn with_head(
        encoder: E,
        w: &EncoderWeights,
        hidden: usize,
        config: ClassifierConfig,
        head: &HeadLayout,
    ) -> Result<Self> {
        let (h, labels) = (hidden, config.num_labels);
        check_labels(w, labels, &format!("{}.weight", head.out))?;
        let pooler = match head.pooler_at_root {
            true => w.root_linear(head.pooler, h, h)?,
            false => w.encoder_linear(head.pooler, h, h)?,
        };
        let out = w.root_linear(head.out, labels, h)?;
        Ok(PooledClassifier::new(
            encoder, pooler, head.act, out, config,
        ))
    }
}

impl<E> std::fmt::Debug for PooledClassifier<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledClassifier")
            .field("config", &self.config)
            .field("act", &self.act)
            .finish_non_exhaustive()
    }
}

impl<E: FirstTokens> Classifier for PooledClassifier<E> {
    fn config(&self) -> &ClassifierConfig {
        &self.config
    }
    fn precision(&self) -> Precision {
        self.encoder.precision()
    }
    fn vocab_size(&self) -> usize {
        self.encoder.vocab_size()
    }
    fn max_length(&self) -> usize {
        self.encoder.max_length()
    }
    fn logits(&self, encodings: &[&PairEncoding]) -> Result<Vec<Vec<f32>>> {
        let seqs = sequences(encodings);
        let lengths: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();
        let first = run_in_groups(&lengths, self.pooler.inputs, |group| {
            self.encoder.first_tokens(&seqs[group])
        })?;
        let act = |x: &mut [f32]| self.act.apply(x);
        Ok(pooled_logits(&first, &self.pooler, act, &self.out))
    }
}

/// What a classifier's loader reads first: `config.json`'s path, its value, and what it says
/// of the head.
pub(crate) fn head_config(dir: &ModelDir) -> Result<(PathBuf, Value, ClassifierConfig)> {
    let path = dir.path().join(CONFIG_FILE);
    let value = dir.config()?;
    let config = ClassifierConfig::from_value(&value, &path)?;
    Ok((path, value, config))
}

/// Checks `num_labels` against the rows of the output layer `name` (at the file's root).
pub(crate) fn check_labels(w: &EncoderWeights, labels: usize, name: &str) -> Result<()> {
    w.check_root_size("num_labels (or the size of id2label)", labels, name, 0)
}

/// The packed encoders' inputs for pair encodings (ids and token types).
pub(crate) fn sequences<'a>(encodings: &[&'a PairEncoding]) -> Vec<Sequence<'a>> {
    encodings
        .iter()
        .map(|e| Sequence {
            ids: &e.input_ids,
            types: &e.token_type_ids,
        })
        .collect()
}

/// A first-token classification head: `out(act(dense(first)))` for the rows of `first` (one
/// per sequence), one row of logits each. BERT's, GTE's and DeBERTa's heads.
pub(crate) fn pooled_logits(
    first: &[f32],
    dense: &Linear,
    act: impl Fn(&mut [f32]),
    out: &Linear,
) -> Vec<Vec<f32>> {
    let n = first.len() / dense.inputs;
    let mut pooled = vec![0.0; n * dense.outputs];
    dense.forward(first, n, &mut pooled);
    act(&mut pooled);
    let labels = out.outputs;
    let mut logits = vec![0.0; n * labels];
    out.forward(&pooled, n, &mut logits);
    logits.chunks_exact(labels).map(<[f32]>::to_vec).collect()
}
