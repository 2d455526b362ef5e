//! GTE and NomicBERT sentence embeddings (gte-multilingual-base, gte-base-en-v1.5,
//! nomic-embed-text-v1.5) on the packed GTE encoder, with the pooling, projection,
//! normalization and prompts their directory declares (the text side is the BERT embedders',
//! `packed`).

use super::builder::EmbedderBuilder;
use super::encoder::{
    config_path, encoder_embedder, single_text_encoder, EncoderEmbedder, EncoderSpec,
};
use super::{Embedder, Role};
use crate::models::engine::{EncoderFamily, PackedEncoder};
use crate::models::gte::config::{GteConfig, Spelling};
use crate::models::gte::encoder::GteEncoder;
use crate::models::layers::dense::Output;
use crate::models::layers::encoder::{single_texts, EncoderWeights};
use crate::models::{ModelDir, Precision};
use crate::{Error, Result};

/// A GTE or NomicBERT bi-encoder loaded from a local sentence-transformers (or plain
/// transformers) directory: `config.json` with `model_type` `new` (the hub's GTE remote code:
/// gte-multilingual-base, gte-base-en-v1.5 / -large-en-v1.5), `gte` (transformers 5's GTE) or
/// `nomic_bert` (nomic-embed-text-v1 / v1.5, in nomic's keys or transformers 5's),
/// `tokenizer.json`, `model.safetensors`, and the sentence-transformers modules
/// [`BertEmbedder`](super::BertEmbedder) reads, with the same rules: pooling modes, Dense and
/// Normalize modules, `max_seq_length`, prompts by [`Role`] and what is refused.
///
/// The encoder is BERT with rotary position embeddings and a gated MLP, post-norm: token (and
/// token type) embeddings and a layer norm, then per layer
/// `x = LN(x + O · attention(RoPE(Q x), RoPE(K x), V x))` and
/// `x = LN(x + down · (act(gate · x) * (up · x)))` (GELU for GTE, SiLU for NomicBERT's
/// SwiGLU). GTE's NTK-scaled RoPE is read as new-impl computes it. Texts are prefixed with their
/// role's prompt, tokenized, cut on the right to `max_seq_length` tokens and run *packed* (no
/// padding is computed), in batches under a token budget; rows come back in input order. Linear
/// layers run in f32 or, with [`Precision::Int8`](crate::models::Precision::Int8), in int8; bf16
/// and the candle engine are refused.
///
/// One instance can be shared (`Arc`) and called from many threads at once.
///
/// ```no_run
/// use rerank::{Embedder, GteEmbedder};
/// let embedder = GteEmbedder::from_dir("models/nomic-embed-text-v1.5")?;
/// let q = embedder.embed_query("what is the capital of China?")?; // "search_query: ..."
/// let d = embedder.embed_one("The capital of China is Beijing.")?;
/// assert_eq!(q.len(), d.len());
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct GteEmbedder(EncoderEmbedder);

encoder_embedder!(GteEmbedder, GteEmbedderBuilder, "gte", read);
single_text_encoder!(GteEncoder);

/// The GTE / NomicBERT encoder of `model_dir`, whose parsed `config.json` is `value`: its
/// shape, and its native loader in `precision`.
fn read(
    model_dir: &ModelDir,
    value: &serde_json::Value,
    precision: Precision,
) -> Result<(EncoderSpec, impl FnOnce(&ModelDir) -> Result<GteEncoder>)> {
    let config_path = config_path(model_dir);
    let spelling = Spelling::of(value).ok_or_else(|| {
        Error::model(format!(
            "{}: model_type {:?} is not new, gte or nomic_bert (load_embedder picks the loader \
             for each model_type)",
            config_path.display(),
            value.get("model_type")
        ))
    })?;
    let config = GteConfig::from_value(value, spelling, &config_path)?;
    let spec = EncoderSpec {
        hidden: config.hidden,
        max_positions: config.max_positions,
        vocab: config.vocab,
        family: EncoderFamily::Gte,
        id_prefix: "gte",
    };
    Ok((spec, move |dir: &ModelDir| {
        let weights = EncoderWeights::open(dir, config.layout.prefixes())?;
        GteEncoder::load(&weights, config, precision)
    }))
}
