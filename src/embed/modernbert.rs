//! ModernBERT sentence embeddings (gte-modernbert-base, modernbert-embed-base) on the packed
//! ModernBERT encoder, with the pooling, projection, normalization and prompts their
//! directory declares (the text side is the BERT embedders', `packed`).

use super::builder::EmbedderBuilder;
use super::encoder::{config_path, encoder_embedder, model_type, EncoderEmbedder, EncoderSpec};
use super::{Embedder, Role};
use crate::models::engine::{EncoderFamily, PackedEncoder};
use crate::models::layers::dense::Output;
use crate::models::modernbert::config::ModernBertConfig;
use crate::models::modernbert::encoder::{ModernBertEncoder, ModernBertWeights};
use crate::models::{ModelDir, Precision};
use crate::{Error, Result};

/// A ModernBERT bi-encoder loaded from a local sentence-transformers (or plain transformers)
/// directory: `config.json` with `model_type` `modernbert` (the transformers 4.x spelling of
/// the attention pattern and rotary thetas, or transformers 5's `layer_types` and
/// `rope_parameters`), `tokenizer.json`, `model.safetensors` (a bare `ModernBertModel`, or a
/// task model's `model.*` tensors), and the sentence-transformers modules
/// [`BertEmbedder`](super::BertEmbedder) reads, with the same rules: pooling modes, Dense and
/// Normalize modules, `max_seq_length`, prompts by [`Role`] and what is refused.
///
/// The encoder is transformers 5's `ModernBertModel`: token embeddings and a layer norm, then
/// pre-norm layers with rotary position embeddings (a theta for the global layers and one for
/// the sliding-window layers), global attention every `global_attn_every_n_layers` layers and
/// attention within `local_attention / 2` tokens on either side in the others, a GeGLU MLP,
/// and a final norm. Texts are prefixed with their role's prompt, tokenized as `[CLS] text
/// [SEP]`, cut on the right to `max_seq_length` tokens and run *packed* (no padding is
/// computed; attention stays within each text, windows counted from its first token), in
/// batches under a token budget; rows come back in input order. Linear layers run in f32 or,
/// with [`Precision::Int8`](crate::models::Precision::Int8), in int8; bf16 is refused.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// ```no_run
/// use rerank::{Embedder, ModernBertEmbedder};
/// let embedder = ModernBertEmbedder::from_dir("models/gte-modernbert-base")?;
/// let q = embedder.embed_query("what is the capital of China?")?;
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!(q.len(), d.len());
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct ModernBertEmbedder(EncoderEmbedder);

encoder_embedder!(
    ModernBertEmbedder,
    ModernBertEmbedderBuilder,
    "modernbert",
    read
);

/// The ModernBERT encoder of `model_dir`, whose parsed `config.json` is `value`: its shape,
/// and its native loader in `precision`.
pub(super) fn read(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    precision: Precision,
) -> Result<(
    EncoderSpec,
    impl FnOnce(&ModelDir) -> Result<ModernBertEncoder>,
)> {
    let config_path = config_path(model_dir);
    match model_type(value) {
        Some("modernbert") => {}
        other => {
            return Err(Error::model(format!(
                "{}: model_type {other:?} is not modernbert (load_embedder picks the loader \
                 for each model_type)",
                config_path.display()
            )))
        }
    }
    let config = ModernBertConfig::from_value(value, &config_path)?;
    // The sizes config.json gives are checked against the weights before anything (the
    // sentence-transformers modules included) is read with them.
    let weights = ModernBertWeights::open(model_dir)?;
    weights.check_config(&config)?;
    let spec = EncoderSpec {
        hidden: config.hidden,
        max_positions: config.max_positions,
        vocab: config.vocab,
        family: EncoderFamily::ModernBert,
        id_prefix: "modernbert",
        tasks: None,
    };
    Ok((spec, move |_: &ModelDir| {
        ModernBertEncoder::load(&weights, config, precision)
    }))
}

impl PackedEncoder for ModernBertEncoder {
    fn hidden(&self) -> usize {
        self.config().hidden
    }

    fn encode(&self, rows: &[&[u32]], output: Output) -> Result<Vec<f32>> {
        self.forward(rows, output)
    }

    fn encode_keys(&self, rows: &[&[u32]], keys: &[usize], output: Output) -> Result<Vec<f32>> {
        self.forward_attending(rows, Some(keys), output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ModernBertEmbedder>();
    }
}
