//! MPNet sentence embeddings (all-mpnet-base-v2, multi-qa-mpnet-base-dot-v1) on the packed
//! MPNet encoder, with the pooling, projection, normalization and prompts their directory
//! declares (the text side is the BERT embedders', `packed`).

use super::builder::EmbedderBuilder;
use super::encoder::{
    config_path, encoder_embedder, single_text_encoder, EncoderEmbedder, EncoderSpec,
};
use super::{Embedder, Role};
use crate::models::engine::{EncoderFamily, PackedEncoder};
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{single_texts, EncoderWeights};
use crate::models::mpnet::config::MpnetConfig;
use crate::models::mpnet::encoder::{MpnetEncoder, PREFIXES};
use crate::models::{ModelDir, Precision};
use crate::Result;

/// An MPNet bi-encoder loaded from a local sentence-transformers (or plain transformers)
/// directory: `config.json` with `model_type` `mpnet` (`MPNetForMaskedLM` as all-mpnet-base-v2
/// publishes it, or `MPNetModel`), `tokenizer.json`, `model.safetensors` (tensors at the root
/// or under `mpnet.`), and the sentence-transformers modules
/// [`BertEmbedder`](super::BertEmbedder) reads, with the same rules: pooling modes, Dense and
/// Normalize modules, `max_seq_length`, prompts by [`Role`] and what is refused.
///
/// The encoder is transformers' `MPNetModel`: word and position embeddings (positions counted
/// after the padding id 1, as RoBERTa's; a literal `<pad>` inside a text gets position 1) and a
/// layer norm, then post-norm layers as BERT's whose attention scores get a relative position
/// bias (T5's 32 log buckets, max distance 128, one table shared by every layer). Texts are
/// prefixed with their role's prompt, tokenized, cut on the right to `max_seq_length` tokens
/// and run *packed* (no padding is computed), in batches under a token budget; rows come back
/// in input order. Linear layers run in f32 or, with [`Precision::Int8`], in int8; bf16 and
/// the candle engine are refused.
///
/// multi-qa-mpnet-base-dot-v1 pools the CLS token without normalizing (its model card ranks by
/// dot product); its vectors are sentence-transformers', and the crate's own rankings compare
/// them by cosine.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// [`Precision::Int8`]: crate::models::Precision::Int8
///
/// ```no_run
/// use rerank::{Embedder, MpnetEmbedder};
/// let embedder = MpnetEmbedder::from_dir("models/all-mpnet-base-v2")?;
/// let q = embedder.embed_query("what is the capital of China?")?;
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!((q.len(), d.len()), (768, 768));
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct MpnetEmbedder(EncoderEmbedder);

encoder_embedder!(MpnetEmbedder, MpnetEmbedderBuilder, "mpnet", read);
single_text_encoder!(MpnetEncoder);

/// The MPNet encoder of `model_dir`, whose parsed `config.json` is `value`: its shape, and its
/// native loader in `precision` (MPNet has no token types; the sequences carry zeros).
fn read(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    precision: Precision,
) -> Result<(EncoderSpec, impl FnOnce(&ModelDir) -> Result<MpnetEncoder>)> {
    let config = MpnetConfig::from_value(value, &config_path(model_dir))?;
    let spec = EncoderSpec {
        hidden: config.hidden,
        max_positions: config.max_length(),
        vocab: config.vocab,
        family: EncoderFamily::Mpnet,
        id_prefix: "mpnet",
        tasks: None,
    };
    Ok((spec, move |dir: &ModelDir| {
        let weights = EncoderWeights::open(dir, PREFIXES)?;
        MpnetEncoder::load(&weights, config, precision)
    }))
}
