//! Text embeddings: the [`Embedder`] trait, and [`BertEmbedder`] with the `models` feature.
//!
//! - [`BertEmbedder`] (`bert`, feature `models`): mean-pooled, L2-normalized BERT vectors;
//! - [`HashingEmbedder`] (`hashing`): model-free feature hashing of content words;
//! - [`Matryoshka`] (`matryoshka`): keeps the first N dimensions of any embedder.

#[cfg(feature = "models")]
mod bert;
mod hashing;
mod matryoshka;

use std::sync::Arc;

use ndarray::Array2;

use crate::Result;

pub use hashing::HashingEmbedder;
pub use matryoshka::{truncate_normalized, Matryoshka};

#[cfg(feature = "models")]
pub use bert::{BertEmbedder, BertEmbedderBuilder, DEFAULT_MAX_BATCH_SIZE, DEFAULT_TOKEN_BUDGET};

/// Turns texts into fixed-size vectors, one row per text, in input order.
pub trait Embedder: Send + Sync {
    /// Embeds `texts`; the result has shape `(texts.len(), self.dim())`.
    fn embed(&self, texts: &[&str]) -> Result<Array2<f32>>;

    /// The embedding dimension.
    fn dim(&self) -> usize;

    /// A stable identifier of the model and its settings (for a [`BertEmbedder`], a hash of its
    /// config, weights and `max_length`), so that stored vectors are never mixed across models.
    /// `None` (the default) means the embedder cannot say; the SQLite store then refuses to keep
    /// its vectors.
    fn id(&self) -> Option<String> {
        None
    }

    /// Embeds one text.
    fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        let m = self.embed(&[text])?;
        Ok(m.row(0).to_vec())
    }
}

impl<E: Embedder + ?Sized> Embedder for Arc<E> {
    fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
        (**self).embed(texts)
    }
    fn dim(&self) -> usize {
        (**self).dim()
    }
    fn id(&self) -> Option<String> {
        (**self).id()
    }
}

impl<E: Embedder + ?Sized> Embedder for Box<E> {
    fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
        (**self).embed(texts)
    }
    fn dim(&self) -> usize {
        (**self).dim()
    }
    fn id(&self) -> Option<String> {
        (**self).id()
    }
}

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
