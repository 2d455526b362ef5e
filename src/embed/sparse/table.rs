//! The inference-free route of a sparse encoder: sentence-transformers' `SparseStaticEmbedding`,
//! one weight per vocabulary id (`model.safetensors` tensor `weight`), no model.
//!
//! A text is trimmed and tokenized without special tokens (a special token typed in the text,
//! such as `[MASK]`, is still its id), truncated to the tokenizer's `model_max_length`; its
//! vector holds the weight of every distinct id in it (presence, not frequency), zeros left
//! out.

use serde_json::Value;
use tokenizers::Tokenizer;

use super::splade::check_vocabulary;
use super::SparseVector;
use crate::models::layers::weights::Weights;
use crate::models::{ModelDir, WEIGHTS_FILE};
use crate::{Error, Result};

/// The tokenizer's settings, relative to the module's folder.
const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// `model_max_length` when `tokenizer_config.json` does not give one.
const DEFAULT_MAX_LENGTH: usize = 512;

/// A SparseStaticEmbedding: the weights and the tokenizer of its folder.
pub(super) struct StaticRoute {
    weight: Vec<f32>,
    tokenizer: Tokenizer,
    max_length: usize,
}

impl StaticRoute {
    /// Loads the module in `dir`.
    pub fn load(dir: &ModelDir) -> Result<Self> {
        let weights = Weights::open(dir.path())?;
        let file = dir.path().join(WEIGHTS_FILE);
        let vocab = match weights.shape("weight")? {
            [n] => *n,
            other => {
                return Err(Error::model(format!(
                    "{}: tensor weight has shape {other:?}, expected one weight per token",
                    file.display()
                )))
            }
        };
        let weight = weights.f32("weight", &[vocab])?;
        let mut tokenizer = dir.tokenizer()?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        check_vocabulary(dir, &tokenizer, vocab, (&file, "weight"))?;
        let max_length = match dir.optional_json(TOKENIZER_CONFIG_FILE)? {
            Some(Value::Object(obj)) => match obj.get("model_max_length").and_then(Value::as_f64) {
                // transformers writes a huge float for "no limit".
                Some(n) if n >= 1.0 && n < usize::MAX as f64 => n as usize,
                Some(_) => usize::MAX,
                None => DEFAULT_MAX_LENGTH,
            },
            _ => DEFAULT_MAX_LENGTH,
        };
        Ok(StaticRoute {
            weight,
            tokenizer,
            max_length,
        })
    }

    /// The vocabulary size.
    pub fn vocab(&self) -> usize {
        self.weight.len()
    }

    /// The longest input in tokens.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// The token ids of `text` (no special tokens added), truncated.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode_fast(text.trim(), false)
            .map_err(|e| Error::tokenizer(e.to_string()))?;
        let ids = enc.get_ids();
        Ok(ids[..ids.len().min(self.max_length)].to_vec())
    }

    /// One sparse vector per text, in input order.
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<SparseVector>> {
        texts
            .iter()
            .map(|t| {
                let mut ids = self.token_ids(t)?;
                ids.sort_unstable();
                ids.dedup();
                let mut v = SparseVector::default();
                for id in ids {
                    // The tokenizer's ids are below the table's length (check_vocabulary).
                    let w = self.weight.get(id as usize).copied().unwrap_or(0.0);
                    if w != 0.0 {
                        v.indices.push(id);
                        v.values.push(w);
                    }
                }
                Ok(v)
            })
            .collect()
    }
}
