//! [`SparseIndex`]: in-memory learned sparse retrieval (SPLADE). Each document is a
//! [`SparseVector`] over the encoder's vocabulary, kept as an inverted index: per vocabulary
//! id, the `(document, weight)` postings of the documents that weight it. A query's score for a
//! document is the dot product of their vectors, summed over the query's ids' postings; the
//! best `k` come back best first (ties to the document added first), documents scoring 0 left
//! out.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::{Retriever, SearchQuery};
use crate::embed::{SparseEncoder, SparseVector};
use crate::{Document, Error, Hit, Result, Role};

/// Documents encoded per [`SparseEncoder::encode`] call by [`SparseIndex::add`].
const ADD_CHUNK: usize = 256;

/// An in-memory inverted index of learned sparse vectors, with the encoder that makes them.
///
/// Documents are encoded as [`Role::Document`] from their
/// [`full_text`](Document::full_text); a query as [`Role::Query`] (for an inference-free
/// model, the token-weight table: no model runs at search time). Adding a document with an
/// id already held replaces it. `Send + Sync`: searches run concurrently, an `add` waits for
/// them.
///
/// ```no_run
/// use std::sync::Arc;
/// use rerank::embed::SparseEncoder;
/// use rerank::recall::SparseIndex;
/// use rerank::Document;
/// let encoder = Arc::new(SparseEncoder::from_dir("models/splade-v3")?);
/// let index = SparseIndex::new(encoder);
/// index.add(vec![Document::new("a", "BM25 is a ranking function")])?;
/// let hits = index.search("what ranks documents?", 10)?;
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct SparseIndex {
    encoder: Arc<SparseEncoder>,
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Document slots; a replaced document leaves `None` (its postings stay, skipped).
    docs: Vec<Option<Arc<Document>>>,
    /// The slot of each held id.
    slots: HashMap<String, u32>,
    /// Per vocabulary id, `(slot, weight)` in slot order.
    postings: Vec<Vec<(u32, f32)>>,
}

impl SparseIndex {
    /// An empty index whose documents and queries `encoder` encodes.
    pub fn new(encoder: Arc<SparseEncoder>) -> Self {
        let vocab = encoder.vocab_size();
        SparseIndex {
            encoder,
            inner: RwLock::new(Inner {
                postings: vec![Vec::new(); vocab],
                ..Inner::default()
            }),
        }
    }

    /// Encodes and indexes `docs` (in chunks of 256 texts).
    pub fn add(&self, docs: Vec<Document>) -> Result<()> {
        for chunk in docs.chunks(ADD_CHUNK) {
            let texts: Vec<String> = chunk.iter().map(Document::full_text).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = self.encoder.encode(&refs, Role::Document)?;
            self.add_vectors(chunk.iter().cloned().zip(vectors))?;
        }
        Ok(())
    }

    /// Indexes documents with their vectors (made by this index's encoder, or stored from
    /// one); an index at or past the vocabulary is an [`Error::InvalidInput`], and nothing of
    /// the call is added then.
    pub fn add_vectors(
        &self,
        docs: impl IntoIterator<Item = (Document, SparseVector)>,
    ) -> Result<()> {
        let docs: Vec<(Document, SparseVector)> = docs.into_iter().collect();
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let vocab = inner.postings.len();
        if let Some((d, _)) = docs
            .iter()
            .find(|(_, v)| v.indices.iter().any(|&i| i as usize >= vocab))
        {
            return Err(Error::InvalidInput(format!(
                "document {:?}: a sparse vector index is outside the encoder's {vocab} ids",
                d.id
            )));
        }
        for (doc, vector) in docs {
            let slot = u32::try_from(inner.docs.len())
                .map_err(|_| Error::InvalidInput("the sparse index is full".into()))?;
            if let Some(old) = inner.slots.insert(doc.id.clone(), slot) {
                inner.docs[old as usize] = None;
            }
            for (&i, &w) in vector.indices.iter().zip(&vector.values) {
                inner.postings[i as usize].push((slot, w));
            }
            inner.docs.push(Some(Arc::new(doc)));
        }
        Ok(())
    }

    /// The number of documents held.
    pub fn len(&self) -> usize {
        self.read().slots.len()
    }

    /// Whether the index holds no documents.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The best `k` documents for the query `text`, best first, scored by the dot product.
    pub fn search(&self, text: &str, k: usize) -> Result<Vec<Hit>> {
        let query = self.encoder.encode_one(text, Role::Query)?;
        Ok(self.search_vector(&query, k))
    }

    /// The best `k` documents for an encoded query, best first; documents scoring 0 (no id in
    /// common) are left out.
    pub fn search_vector(&self, query: &SparseVector, k: usize) -> Vec<Hit> {
        let inner = self.read();
        let mut scores = vec![0.0f32; inner.docs.len()];
        let mut seen = vec![false; inner.docs.len()];
        let mut touched = Vec::new();
        for (&i, &q) in query.indices.iter().zip(&query.values) {
            let Some(postings) = inner.postings.get(i as usize) else {
                continue;
            };
            for &(slot, w) in postings {
                let s = slot as usize;
                if !seen[s] {
                    seen[s] = true;
                    touched.push(slot);
                }
                scores[s] += q * w;
            }
        }
        touched.retain(|&s| inner.docs[s as usize].is_some());
        super::top_slots(&scores, touched, k)
            .into_iter()
            .filter_map(|slot| {
                let doc = inner.docs[slot as usize].clone()?;
                Some(Hit::new(doc, scores[slot as usize]))
            })
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for SparseIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseIndex")
            .field("documents", &self.len())
            .field("encoder", &self.encoder)
            .finish()
    }
}

impl Retriever for SparseIndex {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.search(&query.text, k)
    }

    fn name(&self) -> &str {
        "sparse"
    }
}
