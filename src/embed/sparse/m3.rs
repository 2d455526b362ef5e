//! The BGE-M3 route of a sparse encoder: the XLM-RoBERTa encoder, then BGE-M3's sparse head
//! (`sparse_linear`, `embed/bge_m3.rs`) on every token, reduced as FlagEmbedding 1.4.0 does
//! (`M3Embedder._process_token_weights`).
//!
//! A text is tokenized as `tokenizer.json` says, not stripped, and cut to `max_length` tokens
//! (`</s>` kept last). Each token's weight is `relu(w . h + b)` of its final hidden state `h`;
//! a text's vector keeps, per vocabulary id, the largest weight over the id's occurrences,
//! leaving out the tokens FlagEmbedding leaves out (`cls_token`, `eos_token`, `pad_token`,
//! `unk_token`) and every weight at or below 0. Queries and documents are the same computation.

use std::collections::BTreeMap;

use tokenizers::Tokenizer;

use super::SparseVector;
use crate::embed::bge_m3::{self, SPARSE_HEAD};
use crate::embed::builder::model_id;
use crate::embed::layout::DenseLayer;
use crate::embed::load::load_token_encoder;
use crate::embed::{DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET};
use crate::models::engine::{EncoderEngine, PackedEncoder};
use crate::models::layers::dense::Output;
use crate::models::{plan_batches, ModelDir, ModelOptions};
use crate::{Error, Result};

/// BGE-M3's encoder with its sparse head.
pub(super) struct M3Route {
    encoder: EncoderEngine<Box<dyn PackedEncoder>>,
    /// `Linear(hidden, 1)`.
    head: DenseLayer,
    tokenizer: Tokenizer,
    /// The ids that never get a weight, sorted.
    unused: Vec<u32>,
    vocab: usize,
    max_length: usize,
    token_budget: usize,
    max_batch_size: usize,
    /// See [`M3Route::id`].
    id: Option<String>,
}

impl M3Route {
    /// Loads the encoder of `dir` and its `sparse_linear.safetensors`; `options.max_length`
    /// (default 512, within the encoder's positions) cuts the texts.
    pub fn load(dir: &ModelDir, options: &ModelOptions) -> Result<Self> {
        let value = dir.config()?;
        let (spec, encoder) = load_token_encoder(dir, &value, options)?;
        let head = bge_m3::read_head(dir, SPARSE_HEAD, spec.hidden, Some(1))?;
        let max_length = bge_m3::max_length(options.max_length, spec.max_positions, 2)?;
        let tokenizer = bge_m3::tokenizer(dir, spec.vocab, Some(max_length))?;
        let unused = bge_m3::unused_tokens(dir, &tokenizer)?;
        // The id names what makes a vector: the encoder's files, the head's weights, the
        // length and the precision.
        let extra = format!(
            "bge-m3 {} {max_length} {}",
            head.digest,
            options.precision.as_str()
        );
        let id = model_id("sparse", dir.path(), &[extra.as_bytes()]);
        Ok(M3Route {
            encoder,
            head,
            tokenizer,
            unused,
            vocab: spec.vocab,
            max_length,
            token_budget: options.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            max_batch_size: options.max_batch_size.unwrap_or(DEFAULT_MAX_BATCH_SIZE),
            id,
        })
    }

    /// The vocabulary size (the encoder's `vocab_size`).
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The longest input in tokens, special tokens included.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// `sparse-` and a hash of the encoder's files, the head's weights, `max_length` and the
    /// precision; `None` when a file cannot be read.
    pub fn id(&self) -> Option<String> {
        self.id.clone()
    }

    /// The token ids the model sees for `text`.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = self.tokenize(&[text])?;
        Ok(ids.pop().unwrap_or_default())
    }

    fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        let encodings = self
            .tokenizer
            .encode_batch_fast(texts.to_vec(), true)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        Ok(encodings.iter().map(|e| e.get_ids().to_vec()).collect())
    }

    /// One sparse vector per text, in input order (length-sorted packed batches under the
    /// token budget; a text's vector does not depend on the others).
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<SparseVector>> {
        let ids = self.tokenize(texts)?;
        let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
        let h = self.encoder.hidden();
        let mut out = vec![SparseVector::default(); texts.len()];
        for batch in plan_batches(&lengths, self.token_budget, self.max_batch_size) {
            let rows: Vec<&[u32]> = batch.indices.iter().map(|&i| ids[i].as_slice()).collect();
            let states = self.encoder.encode(&rows, Output::AllTokens)?;
            let mut start = 0;
            for (&i, row) in batch.indices.iter().zip(&rows) {
                let text = &states[start * h..(start + row.len()) * h];
                start += row.len();
                out[i] = self.weights(row, text, h);
            }
        }
        Ok(out)
    }

    /// The sparse vector of one text: its token `ids` and their `states` (`hidden` wide).
    fn weights(&self, ids: &[u32], states: &[f32], hidden: usize) -> SparseVector {
        let mut best: BTreeMap<u32, f32> = BTreeMap::new();
        for (&id, state) in ids.iter().zip(states.chunks_exact(hidden)) {
            if self.unused.binary_search(&id).is_ok() {
                continue;
            }
            let w = self.head.apply(state).first().copied().unwrap_or(0.0);
            if w > 0.0 {
                let slot = best.entry(id).or_insert(0.0);
                *slot = slot.max(w);
            }
        }
        SparseVector {
            indices: best.keys().copied().collect(),
            values: best.into_values().collect(),
        }
    }
}
