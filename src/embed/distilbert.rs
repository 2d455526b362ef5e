//! DistilBERT sentence embeddings (msmarco-distilbert-base-tas-b, multi-qa-distilbert-cos-v1,
//! distiluse-base-multilingual-cased) on the packed DistilBERT encoder, with the pooling,
//! projection, normalization and prompts their directory declares (the text side is the BERT
//! embedders', `packed`).

use super::builder::EmbedderBuilder;
use super::encoder::{
    config_path, encoder_embedder, single_text_encoder, EncoderEmbedder, EncoderSpec,
};
use super::{Embedder, Role};
use crate::models::distilbert::config::DistilBertConfig;
use crate::models::distilbert::encoder::{DistilBertEncoder, PREFIXES};
use crate::models::engine::{EncoderFamily, PackedEncoder};
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{single_texts, EncoderWeights};
use crate::models::{ModelDir, Precision};
use crate::Result;

/// A DistilBERT bi-encoder loaded from a local sentence-transformers (or plain transformers)
/// directory: `config.json` with `model_type` `distilbert` (`DistilBertModel`, or a checkpoint
/// with a head such as `DistilBertForMaskedLM`, whose encoder is read under `distilbert.`),
/// `tokenizer.json`, `model.safetensors`, and the sentence-transformers modules
/// [`BertEmbedder`](super::BertEmbedder) reads, with the same rules: pooling modes, Dense
/// (Identity or Tanh, as distiluse's 768 -> 512) and Normalize modules, `max_seq_length`,
/// prompts by [`Role`] and what is refused.
///
/// The encoder is transformers' `DistilBertModel`: word and learned position embeddings and a
/// layer norm (no token types), then BERT's post-norm layers under DistilBERT's names
/// (`q_lin`, `k_lin`, `v_lin`, `out_lin`, `sa_layer_norm`, `ffn.lin1`, `ffn.lin2`,
/// `output_layer_norm`; epsilon 1e-12). Sinusoidal position embeddings are refused. Texts are
/// prefixed with their role's prompt, tokenized, cut on the right to `max_seq_length` tokens
/// and run *packed* (no padding is computed), in batches under a token budget; rows come back
/// in input order. Linear layers run in f32 or, with [`Precision::Int8`], in int8; bf16 and
/// the candle engine are refused.
///
/// msmarco-distilbert-base-tas-b pools the CLS token without normalizing (its model card ranks
/// by dot product); its vectors are sentence-transformers', and the crate's own rankings
/// compare them by cosine.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// [`Precision::Int8`]: crate::models::Precision::Int8
///
/// ```no_run
/// use rerank::{DistilBertEmbedder, Embedder};
/// let embedder = DistilBertEmbedder::from_dir("models/multi-qa-distilbert-cos-v1")?;
/// let q = embedder.embed_query("what is the capital of China?")?;
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!((q.len(), d.len()), (768, 768));
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct DistilBertEmbedder(EncoderEmbedder);

encoder_embedder!(
    DistilBertEmbedder,
    DistilBertEmbedderBuilder,
    "distilbert",
    read
);
single_text_encoder!(DistilBertEncoder);

/// The DistilBERT encoder of `model_dir`, whose parsed `config.json` is `value`: its shape, and
/// its native loader in `precision` (DistilBERT has no token types; the sequences carry zeros).
fn read(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    precision: Precision,
) -> Result<(
    EncoderSpec,
    impl FnOnce(&ModelDir) -> Result<DistilBertEncoder>,
)> {
    let config = DistilBertConfig::from_value(value, &config_path(model_dir))?;
    let spec = EncoderSpec {
        hidden: config.hidden,
        max_positions: config.positions,
        vocab: config.vocab,
        family: EncoderFamily::DistilBert,
        id_prefix: "distilbert",
        tasks: None,
    };
    Ok((spec, move |dir: &ModelDir| {
        let weights = EncoderWeights::open(dir, PREFIXES)?;
        DistilBertEncoder::load(&weights, config, precision)
    }))
}
