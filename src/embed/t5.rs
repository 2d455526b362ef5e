//! T5 sentence embeddings (sentence-transformers/sentence-t5-*, gtr-t5-*) on the packed T5
//! encoder, with the pooling, projection, normalization and prompts their directory declares
//! (the text side is the BERT embedders', `packed`).

use super::builder::EmbedderBuilder;
use super::encoder::{
    config_path, encoder_embedder, single_text_encoder, EncoderEmbedder, EncoderSpec,
};
use super::{Embedder, Role};
use crate::models::engine::{EncoderFamily, PackedEncoder};
use crate::models::layers::dense::Output;
use crate::models::t5::config::T5Config;
use crate::models::t5::encoder::T5Encoder;
use crate::models::{ModelDir, Precision};
use crate::Result;

/// A T5 bi-encoder (sentence-t5, GTR) loaded from a local sentence-transformers (or plain
/// transformers) directory: `config.json` with `model_type` `t5` or `mt5` (`T5EncoderModel`,
/// or a whole `T5ForConditionalGeneration` checkpoint, whose encoder half is read),
/// `tokenizer.json`, `model.safetensors`, and the sentence-transformers modules
/// [`BertEmbedder`](super::BertEmbedder) reads, with the same rules: pooling modes, Dense
/// modules (sentence-t5's and GTR's projection without bias), Normalize, `max_seq_length`,
/// prompts by [`Role`] and what is refused.
///
/// The encoder is transformers' `T5EncoderModel`: the shared embedding's rows (unscaled), then
/// pre-norm blocks with T5's RMSNorm: self-attention whose scores are not scaled by
/// `1 / sqrt(d_kv)` and get the relative position bias of the first block's table
/// (`relative_attention_num_buckets` log buckets up to `relative_attention_max_distance`), then
/// the feed-forward block (`relu` for T5 v1.0, and for sentence-t5 and GTR as their configs
/// say; `gated-gelu` for T5 v1.1 and mT5; any `ACT` or `gated-ACT` of the kernels), and a
/// final norm. T5 has no position
/// limit: texts are cut to `max_seq_length` (the tokenizer's `model_max_length` when
/// `sentence_bert_config.json` gives none), tokenized with `</s>` at the end as T5's
/// `tokenizer.json` says, and run *packed* (no padding is computed), in batches under a token
/// budget; rows come back in input order. Linear layers run in f32 or, with
/// [`Precision::Int8`], in int8; bf16 and the candle engine are refused. The embedding rows
/// are read from the mapped checkpoint, only those a batch uses.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// [`Precision::Int8`]: crate::models::Precision::Int8
///
/// ```no_run
/// use rerank::{Embedder, T5Embedder};
/// let embedder = T5Embedder::from_dir("models/gtr-t5-base")?;
/// let q = embedder.embed_query("what is the capital of China?")?;
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!((q.len(), d.len()), (768, 768));
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct T5Embedder(EncoderEmbedder);

encoder_embedder!(T5Embedder, T5EmbedderBuilder, "t5", read);
single_text_encoder!(ids T5Encoder);

/// The T5 encoder of `model_dir`, whose parsed `config.json` is `value`: its shape, and its
/// native loader in `precision`.
fn read(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    precision: Precision,
) -> Result<(EncoderSpec, impl FnOnce(&ModelDir) -> Result<T5Encoder>)> {
    let config = T5Config::from_value(value, &config_path(model_dir))?;
    let spec = EncoderSpec {
        hidden: config.hidden,
        // Relative positions: no table bounds the length.
        max_positions: usize::MAX,
        vocab: config.vocab,
        family: EncoderFamily::T5,
        id_prefix: "t5",
        tasks: None,
    };
    Ok((spec, move |dir: &ModelDir| {
        T5Encoder::load(dir, config, precision)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<T5Embedder>();
    }
}
