//! Stage-1 late interaction: every document's ColBERT token vectors held in memory (as f16),
//! and an exact MaxSim scan of them against the query's vectors.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rayon::prelude::*;

use super::{Retriever, SearchQuery};
use crate::embed::ColbertEncoder;
use crate::simd::dense::{f16_to_f32, f32_to_f16, Kernels};
use crate::{Document, Error, Hit, Result, Role};

/// One indexed document: its token vectors, `tokens` rows of the encoder's width, as f16 bits.
struct Entry {
    document: Arc<Document>,
    vectors: Vec<u16>,
    tokens: usize,
}

impl Entry {
    /// The token vectors as an f32 `(tokens, dim)` matrix.
    fn matrix(&self, dim: usize) -> Option<ndarray::Array2<f32>> {
        let data = self.vectors.iter().map(|&h| f16_to_f32(h)).collect();
        ndarray::Array2::from_shape_vec((self.tokens, dim), data).ok()
    }
}

/// A retriever that scores every document by late interaction: the MaxSim of its ColBERT
/// token vectors against the query's (exact, on the crate's f16 dot-product kernels), for
/// collections whose vectors fit in memory: `tokens x dim x 2` bytes a document
/// ([`LateInteractionIndex::bytes_per_document`]).
///
/// Documents are encoded once, when added, from their [`full_text`](Document::full_text);
/// adding a document whose id is indexed replaces it. The query is encoded per search. Scores
/// are MaxSim over the f16 copies (within about 1e-3 of the f32 score).
///
/// ```no_run
/// use rerank::embed::ColbertEncoder;
/// use rerank::recall::{LateInteractionIndex, Retriever, SearchQuery};
/// use rerank::Document;
/// let index = LateInteractionIndex::new(ColbertEncoder::from_dir("models/answerai-colbert-small-v1")?);
/// index.add(vec![Document::new("1", "ColBERT scores every query token.")])?;
/// let hits = index.retrieve(&SearchQuery::new("what is late interaction"), 10)?;
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct LateInteractionIndex {
    encoder: Arc<ColbertEncoder>,
    entries: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    docs: Vec<Entry>,
    by_id: HashMap<String, usize>,
    /// The entries whose document's [`full_text`](Document::full_text) is the key (the text a
    /// reranker is given), for [`LateInteractionIndex::vectors_of_texts`].
    by_text: HashMap<String, usize>,
}

impl LateInteractionIndex {
    /// An empty index over `encoder` (an `Arc` shares it with a [`ColbertReranker`]).
    ///
    /// [`ColbertReranker`]: crate::rerankers::ColbertReranker
    pub fn new(encoder: impl Into<Arc<ColbertEncoder>>) -> Self {
        LateInteractionIndex {
            encoder: encoder.into(),
            entries: RwLock::new(Inner::default()),
        }
    }

    /// Encodes and indexes `docs` (a document whose id is indexed replaces it).
    pub fn add(&self, docs: Vec<Document>) -> Result<()> {
        let texts: Vec<String> = docs.iter().map(Document::full_text).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = self.encoder.encode(&refs, Role::Document)?;
        self.add_encoded(docs, vectors)
    }

    /// Indexes `docs` with token vectors computed elsewhere (by this index's model, as
    /// [`ColbertEncoder::encode`] gives them for documents): one `(tokens, dim)` matrix per
    /// document. A matrix of another width, or a count that differs from the documents', is
    /// an error and nothing is added.
    pub fn add_encoded(
        &self,
        docs: Vec<Document>,
        vectors: Vec<ndarray::Array2<f32>>,
    ) -> Result<()> {
        let dim = self.encoder.dim();
        if docs.len() != vectors.len() || vectors.iter().any(|m| m.ncols() != dim) {
            return Err(Error::InvalidInput(format!(
                "{} documents with {} token matrices: one matrix of {dim} columns per document",
                docs.len(),
                vectors.len()
            )));
        }
        let mut inner = self.entries.write().unwrap_or_else(|e| e.into_inner());
        for (doc, m) in docs.into_iter().zip(vectors) {
            let entry = Entry {
                tokens: m.nrows(),
                vectors: m.iter().map(|&x| f32_to_f16(x)).collect(),
                document: Arc::new(doc),
            };
            let text = entry.document.full_text();
            let i = match inner.by_id.get(&entry.document.id) {
                Some(&i) => {
                    let old = inner.docs[i].document.full_text();
                    if inner.by_text.get(&old) == Some(&i) {
                        inner.by_text.remove(&old);
                    }
                    inner.docs[i] = entry;
                    i
                }
                None => {
                    let i = inner.docs.len();
                    inner.by_id.insert(entry.document.id.clone(), i);
                    inner.docs.push(entry);
                    i
                }
            };
            inner.by_text.insert(text, i);
        }
        Ok(())
    }

    /// The number of indexed documents.
    pub fn len(&self) -> usize {
        self.read().docs.len()
    }

    /// Whether no document is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The mean bytes of token vectors a document holds (0 when empty).
    pub fn bytes_per_document(&self) -> f64 {
        let inner = self.read();
        let bytes: usize = inner.docs.iter().map(|e| e.vectors.len() * 2).sum();
        bytes as f64 / inner.docs.len().max(1) as f64
    }

    /// A document's token vectors (as f32), if it is indexed.
    pub fn vectors(&self, id: &str) -> Option<ndarray::Array2<f32>> {
        let inner = self.read();
        inner.docs[*inner.by_id.get(id)?].matrix(self.encoder.dim())
    }

    /// The indexed token vectors (as f32) of each of `texts` that is an indexed document's
    /// [`full_text`](Document::full_text) (what a reranker is given), `None` for the others.
    pub fn vectors_of_texts(&self, texts: &[&str]) -> Vec<Option<ndarray::Array2<f32>>> {
        let inner = self.read();
        let dim = self.encoder.dim();
        texts
            .iter()
            .map(|t| inner.docs[*inner.by_text.get(*t)?].matrix(dim))
            .collect()
    }

    /// The encoder.
    pub fn encoder(&self) -> &ColbertEncoder {
        &self.encoder
    }

    /// The encoder, shared.
    pub fn encoder_arc(&self) -> Arc<ColbertEncoder> {
        Arc::clone(&self.encoder)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl Retriever for LateInteractionIndex {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        let q = self
            .encoder
            .encode(&[query.text.as_str()], Role::Query)?
            .pop()
            .ok_or_else(|| Error::model("the ColBERT encoder returned no query vectors"))?;
        let q = q.as_standard_layout();
        let query = q.as_slice().unwrap_or_default();
        let dim = self.encoder.dim();
        let dot = Kernels::detect().f16;
        let inner = self.read();
        let mut scored: Vec<(f32, usize)> = inner
            .docs
            .par_iter()
            .enumerate()
            .map(|(i, e)| {
                let score: f32 = query
                    .chunks_exact(dim)
                    .map(|qv| {
                        e.vectors
                            .chunks_exact(dim)
                            .map(|d| dot(d, qv))
                            .fold(f32::NEG_INFINITY, f32::max)
                    })
                    .sum();
                (
                    if score.is_nan() {
                        f32::NEG_INFINITY
                    } else {
                        score
                    },
                    i,
                )
            })
            .collect();
        // Best first; ties to the earlier document.
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        Ok(scored
            .into_iter()
            .take(k)
            .map(|(s, i)| Hit::new(Arc::clone(&inner.docs[i].document), s))
            .collect())
    }

    fn name(&self) -> &str {
        "late_interaction"
    }
}
