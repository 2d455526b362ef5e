//! Gemma3 sentence embeddings (google/embeddinggemma-300m) on the packed Gemma3 text
//! encoder, with the pooling, projections, normalization and prompts their directory declares
//! (the text side is the BERT embedders', `packed`).

use super::builder::EmbedderBuilder;
use super::encoder::{
    config_path, encoder_embedder, single_text_encoder, EncoderEmbedder, EncoderSpec,
};
use super::{Embedder, Role};
use crate::models::engine::{EncoderFamily, PackedEncoder};
use crate::models::gemma3::config::Gemma3Config;
use crate::models::gemma3::encoder::Gemma3Encoder;
use crate::models::layers::dense::Output;
use crate::models::{ModelDir, Precision};
use crate::Result;

/// A Gemma3 bi-encoder (EmbeddingGemma) loaded from a local sentence-transformers (or plain
/// transformers) directory: `config.json` with `model_type` `gemma3_text` and
/// `use_bidirectional_attention` true (`Gemma3TextModel`, or a `Gemma3ForCausalLM` checkpoint,
/// whose encoder is read under `model.`), `tokenizer.json`, `model.safetensors`, and the
/// sentence-transformers modules [`BertEmbedder`](super::BertEmbedder) reads, with the same
/// rules: pooling modes, Dense modules (EmbeddingGemma's 768 -> 3072 -> 768, no bias),
/// Normalize, `max_seq_length`, prompts by [`Role`] and what is refused.
///
/// The encoder is transformers' `Gemma3TextModel` with bidirectional attention: embeddings
/// scaled by `sqrt(hidden_size)`, then layers with an RMSNorm (scaling by `1 + w`) before and
/// after both the attention and the GeGLU MLP; grouped-query attention with per-head q/k norms
/// and scores scaled by `query_pre_attn_scalar`; full-attention layers see the whole text,
/// sliding ones the tokens within `sliding_window / 2` on either side, each kind with its own
/// RoPE (`linear` scaling too). Capped attention scores and causal (decoder) Gemma3 models are
/// refused, naming `config.json` and the key.
///
/// EmbeddingGemma's prompts (`task: search result | query: `, `title: none | text: `) come from
/// `config_sentence_transformers.json`; texts are prefixed with their role's prompt,
/// tokenized (`<bos>` ... `<eos>`, as its `tokenizer.json` says), cut to `max_seq_length`
/// tokens and run *packed* (no padding is computed), in batches under a token budget; rows
/// come back in input order. Linear layers run in f32 or, with [`Precision::Int8`], in int8;
/// bf16 and the candle engine are refused. The token embeddings are read from the mapped
/// checkpoint, only the rows a batch uses.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// [`Precision::Int8`]: crate::models::Precision::Int8
///
/// ```no_run
/// use rerank::{Embedder, Gemma3Embedder};
/// let embedder = Gemma3Embedder::from_dir("models/embeddinggemma-300m")?;
/// let q = embedder.embed_query("what is the capital of China?")?;
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!((q.len(), d.len()), (768, 768));
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct Gemma3Embedder(EncoderEmbedder);

encoder_embedder!(Gemma3Embedder, Gemma3EmbedderBuilder, "gemma3", read);
single_text_encoder!(ids Gemma3Encoder);

/// The Gemma3 encoder of `model_dir`, whose parsed `config.json` is `value`: its shape, and
/// its native loader in `precision`.
fn read(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    precision: Precision,
) -> Result<(EncoderSpec, impl FnOnce(&ModelDir) -> Result<Gemma3Encoder>)> {
    let config = Gemma3Config::from_value(value, &config_path(model_dir))?;
    let spec = EncoderSpec {
        hidden: config.hidden,
        max_positions: config.max_positions,
        vocab: config.vocab,
        family: EncoderFamily::Gemma3,
        id_prefix: "gemma3",
        tasks: None,
    };
    Ok((spec, move |dir: &ModelDir| {
        Gemma3Encoder::load(dir, config, precision)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Gemma3Embedder>();
    }
}
