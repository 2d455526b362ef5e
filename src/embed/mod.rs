//! Text embeddings: the [`Embedder`] trait with its [`Role`]s, and the model embedders with
//! the `models` feature.
//!
//! - [`Role`]: whether texts are queries or documents; asymmetric models prompt the two sides
//!   differently, and every caller in the crate says which side it embeds;
//! - [`load_embedder`] (`load`): a model by hub name or directory, its family picked from
//!   `config.json`, its default prompts from the [registry](crate::models::registry);
//! - [`BertEmbedder`] (`bert`): BERT, XLM-RoBERTa and RoBERTa sentence-transformers models
//!   with the pooling, Dense, Normalize and prompts their directory declares (`layout`:
//!   reading `modules.json` and the module configs, refusing what cannot be reproduced);
//! - [`ModernBertEmbedder`] (`modernbert`): ModernBERT sentence-transformers models
//!   (gte-modernbert, modernbert-embed) on the same layout;
//! - [`GteEmbedder`] (`gte`): GTE and NomicBERT sentence-transformers models (gte-multilingual,
//!   gte-en-v1.5, nomic-embed-text) on the same layout;
//! - [`MpnetEmbedder`] (`mpnet`): MPNet sentence-transformers models (all-mpnet-base-v2,
//!   multi-qa-mpnet-base-dot-v1) on the same layout;
//! - [`DistilBertEmbedder`] (`distilbert`): DistilBERT sentence-transformers models
//!   (msmarco-distilbert-base-tas-b, multi-qa-distilbert-cos-v1, distiluse) on the same layout;
//! - [`Gemma3Embedder`] (`gemma3`): EmbeddingGemma (bidirectional Gemma3 text models) on the
//!   same layout;
//! - [`T5Embedder`] (`t5`): sentence-t5 and GTR (T5 encoders) on the same layout;
//! - `encoder`: the one sentence-transformers embedder over an encoder, which the seven above
//!   are under their architectures' names (each file says only how its encoder is read);
//!   `packed`: its text side (layout, tokenizer, prompts, batching, pooling);
//! - [`Qwen3Embedder`] (`qwen3`): Qwen3-Embedding, the Qwen3 decoder's last-token state;
//! - [`StaticEmbedder`] (`static_embedding`): sentence-transformers' static embeddings (the
//!   mean of per-token vectors, no transformer: static-retrieval-mrl, model2vec);
//! - [`ColbertEncoder`] (`colbert`): late interaction, one vector per token (PyLate's and
//!   Stanford's ColBERT layouts), scored by [`maxsim`];
//! - [`EmbedderBuilder`] (`builder`): the options they all load with, and what they share;
//! - [`HashingEmbedder`] (`hashing`): model-free feature hashing of content words;
//! - [`Matryoshka`] (`matryoshka`): keeps the first N dimensions of any embedder;
//! - [`SparseEncoder`] (`sparse`, feature `models`): learned sparse (SPLADE) vectors,
//!   [`SparseVector`]s over the vocabulary, from sentence-transformers `SparseEncoder`
//!   directories.

#[cfg(feature = "models")]
mod bert;
#[cfg(feature = "models")]
pub(crate) mod bge_m3;
#[cfg(feature = "models")]
mod builder;
#[cfg(feature = "models")]
mod chat;
#[cfg(feature = "models")]
mod colbert;
#[cfg(feature = "models")]
mod distilbert;
#[cfg(feature = "models")]
mod encoder;
#[cfg(feature = "models")]
mod gemma3;
#[cfg(feature = "models")]
mod gte;
mod hashing;
#[cfg(feature = "models")]
mod layout;
#[cfg(feature = "models")]
mod load;
mod matryoshka;
#[cfg(feature = "models")]
mod modernbert;
#[cfg(feature = "models")]
mod mpnet;
#[cfg(feature = "http")]
mod openai;
#[cfg(feature = "models")]
pub(crate) mod packed;
#[cfg(feature = "models")]
mod qwen3;
pub mod sparse;
#[cfg(feature = "models")]
mod static_embedding;
#[cfg(feature = "models")]
mod t5;

use std::sync::Arc;

use ndarray::Array2;

use crate::Result;

pub use hashing::HashingEmbedder;
pub use matryoshka::{truncate_normalized, Matryoshka};
pub use sparse::SparseVector;

#[cfg(feature = "models")]
pub use bert::{BertEmbedder, BertEmbedderBuilder, DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET};
#[cfg(feature = "models")]
pub use bge_m3::is_bge_m3_dir;
#[cfg(feature = "models")]
pub use builder::EmbedderBuilder;
#[cfg(feature = "models")]
pub use colbert::{maxsim, ColbertBuilder, ColbertEncoder};
#[cfg(feature = "models")]
pub use distilbert::{DistilBertEmbedder, DistilBertEmbedderBuilder};
#[cfg(feature = "models")]
pub use gemma3::{Gemma3Embedder, Gemma3EmbedderBuilder};
#[cfg(feature = "models")]
pub use gte::{GteEmbedder, GteEmbedderBuilder};
#[cfg(feature = "models")]
pub use layout::PoolingMode;
#[cfg(feature = "models")]
pub use load::{load_embedder, load_embedder_with_tasks};
#[cfg(feature = "models")]
pub use modernbert::{ModernBertEmbedder, ModernBertEmbedderBuilder};
#[cfg(feature = "models")]
pub use mpnet::{MpnetEmbedder, MpnetEmbedderBuilder};
#[cfg(feature = "http")]
pub use openai::{OpenAiEmbedder, OpenAiEmbedderBuilder};
#[cfg(feature = "models")]
pub use qwen3::{Qwen3Embedder, Qwen3EmbedderBuilder};
#[cfg(feature = "models")]
pub use sparse::{SparseEncoder, SparseEncoderBuilder, SpladeStrategy};
#[cfg(feature = "models")]
pub use static_embedding::{StaticEmbedder, StaticEmbedderBuilder};
#[cfg(feature = "models")]
pub use t5::{T5Embedder, T5EmbedderBuilder};

/// Which side of a search a text is on. Asymmetric models (e5, bge, Qwen3-Embedding) embed a
/// query and a document differently, usually with a prompt put before the text ("query: ",
/// "passage: ", an instruction); symmetric models (all-MiniLM) ignore the role.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A search query (or a cache key: what a user asked).
    Query,
    /// A text to be found: a document, a passage, a hypothetical answer (HyDE).
    #[default]
    Document,
}

impl Role {
    /// `"query"` or `"document"` (the names sentence-transformers gives these prompts).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Query => "query",
            Role::Document => "document",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Turns texts into fixed-size vectors, one row per text, in input order.
///
/// An implementation writes [`embed_as`](Embedder::embed_as), which says whether the texts
/// are queries or documents ([`Role`]); a symmetric model ignores the role. Callers use the
/// one-call shorthands: [`embed`](Embedder::embed) / [`embed_one`](Embedder::embed_one) for
/// documents (and for symmetric models, where the role makes no difference),
/// [`embed_queries`](Embedder::embed_queries) / [`embed_query`](Embedder::embed_query) for
/// queries. Every caller in the crate passes the right role: documents at indexing, in the
/// store and for HyDE's hypothetical answer; queries in dense and Milvus search, in the
/// semantic cache and on the query side of the embedding reranker.
pub trait Embedder: Send + Sync {
    /// Embeds `texts` as `role`; the result has shape `(texts.len(), self.dim())`.
    fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>>;

    /// The embedding dimension.
    fn dim(&self) -> usize;

    /// A stable identifier of the model and its settings (for a [`BertEmbedder`], a hash of its
    /// config, weights, `max_length`, and its pooling, prompts and modules where they differ
    /// from mean pooling + normalization), so that stored vectors are never mixed across models.
    /// `None` (the default) means the embedder cannot say; the SQLite store then refuses to keep
    /// its vectors.
    fn id(&self) -> Option<String> {
        None
    }

    /// Embeds `texts` as documents ([`Role::Document`]).
    fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
        self.embed_as(texts, Role::Document)
    }

    /// Embeds `texts` as queries ([`Role::Query`]).
    fn embed_queries(&self, texts: &[&str]) -> Result<Array2<f32>> {
        self.embed_as(texts, Role::Query)
    }

    /// Embeds one document.
    fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        single_row(self.embed_as(&[text], Role::Document)?)
    }

    /// Embeds one query.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        single_row(self.embed_as(&[text], Role::Query)?)
    }

    /// How many tokens the model computes for `text` as `role` (its prompt and special tokens
    /// included, after truncation): what a server reports as usage and bounds its batches by.
    /// `None` (the default) when the embedder cannot tell (a remote or model-free one) or the
    /// text cannot be tokenized.
    fn token_count(&self, text: &str, role: Role) -> Option<usize> {
        let _ = (text, role);
        None
    }
}

/// The one row of `m`; another row count is an [`Error::Model`](crate::Error::Model).
fn single_row(m: Array2<f32>) -> Result<Vec<f32>> {
    if m.nrows() != 1 {
        return Err(crate::Error::model(format!(
            "the embedder returned {} rows for one text",
            m.nrows()
        )));
    }
    Ok(m.row(0).to_vec())
}

/// An `Arc` or a `Box` of an embedder is the embedder.
macro_rules! forward_embedder {
    ($($pointer:ident),*) => {$(
        impl<E: Embedder + ?Sized> Embedder for $pointer<E> {
            fn embed_as(&self, texts: &[&str], role: Role) -> Result<Array2<f32>> {
                (**self).embed_as(texts, role)
            }
            fn dim(&self) -> usize {
                (**self).dim()
            }
            fn id(&self) -> Option<String> {
                (**self).id()
            }
            fn token_count(&self, text: &str, role: Role) -> Option<usize> {
                (**self).token_count(text, role)
            }
        }
    )*};
}

forward_embedder!(Arc, Box);

/// Cosine similarity of two vectors (0 when either has zero norm or lengths differ), on the
/// crate's f32 dot product.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let dot = crate::simd::dot::kernel();
    let (ab, na, nb) = (dot(a, b), dot(a, a), dot(b, b));
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        ab / (na.sqrt() * nb.sqrt())
    }
}

/// Scales `v` to unit L2 norm in place (a zero vector stays zero).
pub(crate) fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}
