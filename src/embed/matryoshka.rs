//! [`Matryoshka`]: an embedder wrapper that keeps the first N dimensions and re-normalizes.

use std::sync::Arc;

use ndarray::Array2;

use super::Embedder;
use crate::{Error, Result};

/// Wraps an embedder trained with Matryoshka representation learning (the leading dimensions
/// carry most of the meaning): each vector is cut to its first `dims` values and L2-normalized
/// again, so cosine stays meaningful. Smaller vectors are faster to compare and to store; a
/// coarse search over them, rescored with the full vectors
/// ([`MatryoshkaIndex`](crate::recall::MatryoshkaIndex)), keeps most of the quality.
///
/// ```
/// use std::sync::Arc;
/// use rerank::embed::{HashingEmbedder, Matryoshka};
/// use rerank::Embedder;
/// let full: Arc<dyn Embedder> = Arc::new(HashingEmbedder::new(64)?);
/// let small = Matryoshka::new(full, 16)?;
/// let v = small.embed_one("coarse then rescore")?;
/// assert_eq!(v.len(), 16);
/// assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Clone)]
pub struct Matryoshka {
    inner: Arc<dyn Embedder>,
    dims: usize,
}

impl std::fmt::Debug for Matryoshka {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matryoshka")
            .field("dims", &self.dims)
            .field("inner_dim", &self.inner.dim())
            .finish()
    }
}

impl Matryoshka {
    /// Keeps the first `dims` dimensions of `inner`'s vectors (1 ..= `inner.dim()`).
    pub fn new(inner: Arc<dyn Embedder>, dims: usize) -> Result<Self> {
        if dims == 0 || dims > inner.dim() {
            return Err(Error::Config(format!(
                "matryoshka: dims must be in 1..={} (the embedder's dimension), got {dims}",
                inner.dim()
            )));
        }
        Ok(Matryoshka { inner, dims })
    }

    /// The wrapped embedder.
    pub fn inner(&self) -> &Arc<dyn Embedder> {
        &self.inner
    }

    /// Cuts one full vector to `dims` values and re-normalizes it.
    pub fn truncate(&self, full: &[f32]) -> Vec<f32> {
        truncate_normalized(full, self.dims)
    }
}

/// The first `dims` values of `full`, L2-normalized (all zeros stay zeros).
pub fn truncate_normalized(full: &[f32], dims: usize) -> Vec<f32> {
    let mut v: Vec<f32> = full.iter().take(dims).copied().collect();
    super::normalize(&mut v);
    v
}

impl Embedder for Matryoshka {
    /// The inner embedder's vectors for `role`, cut and re-normalized.
    fn embed_as(&self, texts: &[&str], role: super::Role) -> Result<Array2<f32>> {
        let full = self.inner.embed_as(texts, role)?;
        let mut out = Array2::zeros((texts.len(), self.dims));
        for (i, row) in full.rows().into_iter().enumerate() {
            let cut = truncate_normalized(row.as_slice().unwrap_or(&row.to_vec()), self.dims);
            for (j, x) in cut.into_iter().enumerate() {
                out[[i, j]] = x;
            }
        }
        Ok(out)
    }

    fn dim(&self) -> usize {
        self.dims
    }

    fn id(&self) -> Option<String> {
        self.inner
            .id()
            .map(|id| format!("{id}+matryoshka{}", self.dims))
    }

    fn token_count(&self, text: &str, role: super::Role) -> Option<usize> {
        self.inner.token_count(text, role)
    }
}
