//! The MLM route of a sparse encoder: a BERT or DistilBERT masked language model on the packed
//! encoder, its MLM head, and SpladePooling over each text's tokens.
//!
//! A text is trimmed, tokenized `[CLS] text [SEP]` and truncated on the right to
//! `max_seq_length` tokens (`[SEP]` kept last), as sentence-transformers' MLMTransformer does;
//! texts run in length-sorted batches under the token budget, each batch packed. Every token
//! counts in the pooling, `[CLS]` and `[SEP]` included. Max pooling keeps the largest logit
//! per vocabulary id and activates it once (`log1p(relu(x))` is increasing, so that is the
//! largest activation); sum pooling adds the activations of the positive logits.

use super::modules::{Splade, SpladeStrategy};
use super::SparseVector;
use crate::embed::builder::{encode_texts, load_tokenizer, TextTokenizer};
use crate::embed::layout::Layout;
use crate::embed::{Role, DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET};
use crate::models::bert::encoder::{Encoder, EncoderConfig, EncoderWeights, Output};
use crate::models::distilbert::config::{DistilBertConfig, EPS as DISTILBERT_EPS};
use crate::models::distilbert::encoder::{DistilBertEncoder, MLM as DISTILBERT_MLM, PREFIXES};
use crate::models::engine::PackedEncoder;
use crate::models::layers::batch::run_in_groups;
use crate::models::layers::config::bad;
use crate::models::layers::mlm::{MlmHead, MlmNames};
use crate::models::{plan_batches, ModelDir, ModelOptions, Precision, CONFIG_FILE, TOKENIZER_FILE};
use crate::{Error, Result};

/// Where `BertForMaskedLM` keeps its MLM head (at the file's root).
const BERT_MLM: MlmNames = MlmNames {
    transform: "cls.predictions.transform.dense",
    norm: "cls.predictions.transform.LayerNorm",
    decoder: "cls.predictions.decoder.weight",
    bias: &["cls.predictions.decoder.bias", "cls.predictions.bias"],
};

/// The word embeddings of an encoder, relative to its root (the tied decoder).
const WORD_EMBEDDINGS: &str = "embeddings.word_embeddings.weight";

/// An MLMTransformer with its SpladePooling.
pub(super) struct MlmRoute {
    encoder: Box<dyn PackedEncoder>,
    head: MlmHead,
    tokenizer: TextTokenizer,
    layout: Layout,
    pooling: Splade,
    token_budget: usize,
    max_batch_size: usize,
}

impl MlmRoute {
    /// Loads the masked language model in `dir` (`config.json` `model_type` `bert` or
    /// `distilbert`) with `pooling` (read from `pooling_file`, which names it in errors).
    pub fn load(
        dir: &ModelDir,
        pooling: Splade,
        pooling_file: &std::path::Path,
        options: &ModelOptions,
    ) -> Result<Self> {
        let value = dir.config()?;
        let file = dir.path().join(CONFIG_FILE);
        let (encoder, head, max_positions) = load_model(dir, &value, &file, options.precision)?;
        let vocab = head.vocab();
        if let Some((dim, key)) = pooling.dim.filter(|(d, _)| *d != vocab) {
            return Err(bad(
                pooling_file,
                key,
                format!(
                    "{dim} does not match vocab_size {vocab} of {}",
                    file.display()
                ),
            ));
        }
        let mut layout = Layout::text_only(dir, max_positions)?;
        if let Some(n) = options.max_length {
            layout.max_seq_length = n;
        }
        let length = layout.max_seq_length;
        if length > max_positions || length < 2 {
            return Err(Error::model(format!(
                "max_length {length} must be between 2 and the {max_positions} positions of {}",
                file.display()
            )));
        }
        let tokenizer = load_tokenizer(dir, &layout, vocab)?;
        check_vocabulary(dir, &tokenizer.tokenizer, vocab, (&file, "vocab_size"))?;
        Ok(MlmRoute {
            encoder,
            head,
            tokenizer,
            layout,
            pooling,
            token_budget: options.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            max_batch_size: options.max_batch_size.unwrap_or(DEFAULT_MAX_BATCH_SIZE),
        })
    }

    /// The vocabulary size.
    pub fn vocab(&self) -> usize {
        self.head.vocab()
    }

    /// The longest input in tokens, special tokens included.
    pub fn max_length(&self) -> usize {
        self.layout.max_seq_length
    }

    /// The pooling.
    pub fn pooling(&self) -> Splade {
        self.pooling
    }

    /// The token ids the model sees for `text`.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let ids = encode_texts(
            &self.tokenizer,
            &self.layout,
            &[text.trim()],
            Role::Document,
        )?;
        Ok(ids.into_iter().next().unwrap_or_default())
    }

    /// One sparse vector per text, in input order.
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<SparseVector>> {
        let trimmed: Vec<&str> = texts.iter().map(|t| t.trim()).collect();
        let ids = encode_texts(&self.tokenizer, &self.layout, &trimmed, Role::Document)?;
        let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
        let mut out = vec![SparseVector::default(); texts.len()];
        for batch in plan_batches(&lengths, self.token_budget, self.max_batch_size) {
            let rows: Vec<&[u32]> = batch.indices.iter().map(|&i| ids[i].as_slice()).collect();
            let lens: Vec<usize> = rows.iter().map(|r| r.len()).collect();
            // On the crate's kernels, a large batch runs in groups, each on one thread.
            let states = run_in_groups(&lens, self.encoder.hidden(), |group| {
                self.encoder.encode(&rows[group], Output::AllTokens)
            })?;
            for (pooled, &i) in self.pool(&states, &lens).iter().zip(&batch.indices) {
                out[i] = SparseVector::from_dense(pooled);
            }
        }
        Ok(out)
    }

    /// SpladePooling over the packed `states` of sequences of `lens` tokens: one activated
    /// vector over the vocabulary per sequence.
    fn pool(&self, states: &[f32], lens: &[usize]) -> Vec<Vec<f32>> {
        let p = self.pooling;
        let add = |acc: &mut [f32], x: &[f32]| acc.iter_mut().zip(x).for_each(|(a, x)| *a += x);
        let max = |acc: &mut [f32], x: &[f32]| {
            acc.iter_mut().zip(x).for_each(|(a, x)| *a = a.max(*x));
        };
        match p.strategy {
            SpladeStrategy::Max => {
                let mut pooled = self.head.reduce(states, lens, f32::NEG_INFINITY, max, max);
                for v in pooled.iter_mut().flatten() {
                    *v = p.activate(*v);
                }
                pooled
            }
            SpladeStrategy::Sum => {
                let fold = |acc: &mut [f32], logits: &[f32]| {
                    for (a, &x) in acc.iter_mut().zip(logits) {
                        if x > 0.0 {
                            *a += p.activate(x);
                        }
                    }
                };
                self.head.reduce(states, lens, 0.0, fold, add)
            }
        }
    }
}

/// The masked language model of `dir` (parsed `config.json` `value`, at `file`): its packed
/// encoder, its MLM head and the longest sequence it takes.
fn load_model(
    dir: &ModelDir,
    value: &serde_json::Value,
    file: &std::path::Path,
    precision: Precision,
) -> Result<(Box<dyn PackedEncoder>, MlmHead, usize)> {
    // Each encoder loads first: it checks config.json's sizes against the tensors.
    match value.get("model_type").and_then(|v| v.as_str()) {
        None | Some("bert") => {
            let cfg = EncoderConfig::from_value(value, file, false)?;
            let w = EncoderWeights::open(dir, &["bert"])?;
            let (shape, act) = ((cfg.hidden, cfg.vocab), (cfg.act, cfg.eps));
            let max = cfg.max_length();
            let encoder = Encoder::load(&w, cfg, precision)?;
            let word = w.encoder_name(WORD_EMBEDDINGS);
            let head = MlmHead::load(w.weights(), &BERT_MLM, &word, shape, act)?;
            Ok((Box::new(encoder), head, max))
        }
        Some("distilbert") => {
            let cfg = DistilBertConfig::from_value(value, file)?;
            let w = EncoderWeights::open(dir, PREFIXES)?;
            let (shape, act) = ((cfg.hidden, cfg.vocab), (cfg.act, DISTILBERT_EPS));
            let max = cfg.positions;
            let encoder = DistilBertEncoder::load(&w, cfg, precision)?;
            let word = w.encoder_name(WORD_EMBEDDINGS);
            let head = MlmHead::load(w.weights(), &DISTILBERT_MLM, &word, shape, act)?;
            Ok((Box::new(encoder), head, max))
        }
        Some(other) => Err(bad(
            file,
            "model_type",
            format!(
                "{other:?} is not supported by the sparse encoder (supported: bert, distilbert)"
            ),
        )),
    }
}

/// Refuses a tokenizer whose vocabulary is not the model's (`vocab` ids, as `key` of `file`
/// says): a sparse vector's ids are the tokenizer's.
pub(super) fn check_vocabulary(
    dir: &ModelDir,
    tokenizer: &tokenizers::Tokenizer,
    vocab: usize,
    (file, key): (&std::path::Path, &str),
) -> Result<()> {
    let n = tokenizer.get_vocab_size(true);
    if n == vocab {
        return Ok(());
    }
    Err(bad(
        file,
        key,
        format!(
            "{vocab}, but {} has {n} tokens: a sparse vector's ids must be the tokenizer's",
            dir.path().join(TOKENIZER_FILE).display()
        ),
    ))
}
