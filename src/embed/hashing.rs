//! [`HashingEmbedder`]: a model-free embedder (feature hashing of stemmed content words).

use ndarray::Array2;

use super::Embedder;
use crate::text::content_tokens;
use crate::{Error, Result};

/// Embeds a text as the signed, L2-normalized count vector of its content words
/// ([`content_tokens`]: function words dropped, Snowball-stemmed), each word hashed into one of
/// `dim` buckets (the "hashing trick").
///
/// It needs no weights, so a pipeline with a semantic cache, HyDE or dense recall runs
/// offline (tests, examples, a first deployment); cosine between two texts is their weighted
/// word overlap, which is what a cache threshold of 0.9 or so needs to tell a rephrasing from
/// a different question. A model ([`BertEmbedder`](crate::BertEmbedder)) understands
/// synonyms and is far better for recall when one is available.
///
/// ```
/// use rerank::embed::{cosine, HashingEmbedder};
/// use rerank::Embedder;
/// let e = HashingEmbedder::new(256)?;
/// let a = e.embed_one("What does section 420 of the IPC say?")?;
/// let b = e.embed_one("what does section 420 IPC say")?;
/// let c = e.embed_one("bail conditions in Delhi")?;
/// assert!(cosine(&a, &b) > 0.99);
/// assert!(cosine(&a, &c) < 0.2);
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct HashingEmbedder {
    dim: usize,
}

impl HashingEmbedder {
    /// The most buckets: each embedding is `dim` floats, and a vector index holds one per
    /// document, so a larger `dim` (a config saying 10^8 would abort the process) is refused.
    pub const MAX_DIM: usize = 65_536;

    /// An embedder into `dim` buckets (8 to [`HashingEmbedder::MAX_DIM`]).
    pub fn new(dim: usize) -> Result<Self> {
        if !(8..=Self::MAX_DIM).contains(&dim) {
            return Err(Error::Config(format!(
                "hashing embedder: dim must be between 8 and {}, got {dim}",
                Self::MAX_DIM
            )));
        }
        Ok(HashingEmbedder { dim })
    }

    fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        for token in content_tokens(text) {
            let h = fnv1a(token.as_bytes());
            let bucket = (h % self.dim as u64) as usize;
            // One bit of the hash picks the sign, so collisions cancel out on average.
            let sign = if (h >> 63) == 1 { -1.0 } else { 1.0 };
            v[bucket] += sign;
        }
        super::normalize(&mut v);
        v
    }
}

/// 64-bit FNV-1a. Written out (six lines) because the buckets must be the same on every
/// platform and in every run, which the standard library's randomly seeded hasher is not.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Embedder for HashingEmbedder {
    fn embed_as(&self, texts: &[&str], _role: crate::Role) -> Result<Array2<f32>> {
        let mut out = Array2::zeros((texts.len(), self.dim));
        for (i, t) in texts.iter().enumerate() {
            for (j, x) in self.vector(t).into_iter().enumerate() {
                out[[i, j]] = x;
            }
        }
        Ok(out)
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn id(&self) -> Option<String> {
        Some(format!("hashing-fnv1a-content-tokens-v1-{}", self.dim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_unit_or_zero_and_deterministic() {
        let e = HashingEmbedder::new(64).unwrap();
        let m = e.embed(&["rust search library", "", "the of and"]).unwrap();
        let norm = |i: usize| m.row(i).iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm(0) - 1.0).abs() < 1e-6);
        assert_eq!(norm(1), 0.0);
        assert_eq!(norm(2), 0.0);
        assert_eq!(
            e.embed_one("rust search library").unwrap(),
            m.row(0).to_vec()
        );
        assert!(HashingEmbedder::new(4).is_err());
    }

    #[test]
    fn the_dimension_is_bounded() {
        assert!(HashingEmbedder::new(HashingEmbedder::MAX_DIM).is_ok());
        let e = HashingEmbedder::new(100_000_000).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert!(e.to_string().contains("between 8 and 65536"), "{e}");
    }
}
