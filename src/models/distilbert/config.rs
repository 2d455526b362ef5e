//! What a DistilBERT `config.json` says (transformers' `DistilBertConfig`: `dim`, `n_heads`,
//! `n_layers`, `hidden_dim`, `activation`), checked, and refused where the crate cannot honour
//! it: sinusoidal position embeddings, a `dim` that is not a multiple of `n_heads`, an
//! activation the kernels do not have. Absent keys take `DistilBertConfig`'s defaults; every
//! size is checked against the tensors before it sizes anything (`encoder::check_config`).

use std::path::Path;

use serde_json::Value;

use crate::models::layers::config::{activation, bad, flag, object_of_type, positive};
use crate::models::layers::kernels::Act;
use crate::Result;

/// DistilBERT's layer norm epsilon (fixed in transformers, not a config key).
pub(crate) const EPS: f32 = 1e-12;

/// The shape and options of a DistilBERT encoder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DistilBertConfig {
    /// `dim`: the width of the hidden states.
    pub hidden: usize,
    /// `n_heads`.
    pub heads: usize,
    /// `n_layers`.
    pub layers: usize,
    /// `hidden_dim`: the width of the feed-forward block.
    pub intermediate: usize,
    /// `vocab_size`: the rows of the word embeddings.
    pub vocab: usize,
    /// `max_position_embeddings`: the longest sequence.
    pub positions: usize,
    /// `activation`, in the feed-forward block and the MLM head's transform.
    pub act: Act,
}

impl DistilBertConfig {
    /// Reads a parsed `config.json` (`file` names it in errors).
    pub fn from_value(v: &Value, file: &Path) -> Result<Self> {
        let obj = object_of_type(v, "distilbert", "a DistilBERT model", file)?;
        if flag(&obj, "sinusoidal_pos_embds", file)? {
            return Err(bad(
                file,
                "sinusoidal_pos_embds",
                "sinusoidal position embeddings are not supported (only learned ones)",
            ));
        }
        let hidden = positive(&obj, "dim", Some(768), file)?;
        let heads = positive(&obj, "n_heads", Some(12), file)?;
        if hidden % heads != 0 {
            return Err(bad(
                file,
                "n_heads",
                format!("dim {hidden} is not a multiple of {heads} heads"),
            ));
        }
        Ok(DistilBertConfig {
            hidden,
            heads,
            layers: positive(&obj, "n_layers", Some(6), file)?,
            intermediate: positive(&obj, "hidden_dim", Some(3072), file)?,
            vocab: positive(&obj, "vocab_size", Some(30522), file)?,
            positions: positive(&obj, "max_position_embeddings", Some(512), file)?,
            act: activation(&obj, "activation", file)?,
        })
    }

    /// The width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_refusals_name_the_key() {
        let file = Path::new("config.json");
        let cfg = DistilBertConfig::from_value(&serde_json::json!({}), file).unwrap();
        assert_eq!((cfg.hidden, cfg.heads, cfg.layers), (768, 12, 6));
        assert_eq!(
            (cfg.intermediate, cfg.vocab, cfg.positions),
            (3072, 30522, 512)
        );
        assert_eq!(cfg.act, Act::Gelu);
        for (v, key) in [
            (
                serde_json::json!({"sinusoidal_pos_embds": true}),
                "sinusoidal_pos_embds",
            ),
            (serde_json::json!({"dim": 10, "n_heads": 3}), "n_heads"),
            (serde_json::json!({"activation": "mish"}), "activation"),
            (serde_json::json!({"model_type": "bert"}), "model_type"),
        ] {
            let e = DistilBertConfig::from_value(&v, file)
                .unwrap_err()
                .to_string();
            assert!(e.contains("config.json") && e.contains(key), "{e}");
        }
    }
}
