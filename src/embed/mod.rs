//! Text embeddings: the [`Embedder`] trait, and [`BertEmbedder`] with the `models` feature.

#[cfg(feature = "models")]
mod bert;

use std::sync::Arc;

use ndarray::Array2;

use crate::Result;

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

/// Cosine similarity of two vectors (0 when either has zero norm or lengths differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}
