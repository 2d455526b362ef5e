//! [`SparseIndex`]: in-memory learned sparse retrieval (SPLADE). Each document is a
//! [`SparseVector`] over the encoder's vocabulary, kept as an inverted index: per vocabulary
//! id, the postings (document, weight) of the documents that weight it, in blocks of 128 that
//! each know their largest weight. A query's score for a document is the dot product of their
//! vectors; the best `k` come back best first (ties to the document added first), documents
//! scoring 0 left out.
//!
//! - `mod.rs`: the index, its postings and its API;
//! - `search.rs`: top-k by block-max MaxScore over windows of documents (the pruning the BM25
//!   index does, on float weights), and the exhaustive reference it equals to the last bit.

mod search;

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
    /// Per vocabulary id, its postings in slot order.
    postings: Vec<Postings>,
    /// Whether some weight held is negative: the bounds pruning relies on need weights
    /// `>= 0`, so searches are exhaustive then.
    negative: bool,
}

/// The most entries a query vector may have (2^19, above any vocabulary's size).
const MAX_QUERY_ENTRIES: usize = 1 << 19;

/// Checks that every weight of `vector` is finite and at most [`SparseIndex::MAX_WEIGHT`] in
/// magnitude;
/// `what` names the vector in the error.
fn check_weights(vector: &SparseVector, what: impl FnOnce() -> String) -> Result<()> {
    match vector
        .values
        .iter()
        .find(|w| !w.is_finite() || w.abs() > SparseIndex::MAX_WEIGHT)
    {
        Some(w) => Err(Error::InvalidInput(format!(
            "{}: the sparse weight {w} is not finite or above {} in magnitude",
            what(),
            SparseIndex::MAX_WEIGHT
        ))),
        None => Ok(()),
    }
}

/// Postings per block of a [`Postings`] list.
const BLOCK: usize = 128;

/// One vocabulary id's postings: slots ascending with their weights, and the largest weight of
/// each block of [`BLOCK`] postings (what bounds a block's contributions when pruning).
#[derive(Debug, Default, Clone)]
struct Postings {
    slots: Vec<u32>,
    weights: Vec<f32>,
    block_max: Vec<f32>,
}

impl Postings {
    /// Appends a posting; `slot` is above every slot held.
    fn push(&mut self, slot: u32, weight: f32) {
        if self.slots.len().is_multiple_of(BLOCK) {
            self.block_max.push(weight);
        } else if let Some(max) = self.block_max.last_mut() {
            *max = max.max(weight);
        }
        self.slots.push(slot);
        self.weights.push(weight);
    }
}

/// Checks a query vector: its weights ([`check_weights`]), its length (at most
/// [`MAX_QUERY_ENTRIES`]) and that it has a weight per index.
fn check_query(query: &SparseVector) -> Result<()> {
    if query.indices.len() != query.values.len() || query.len() > MAX_QUERY_ENTRIES {
        return Err(Error::InvalidInput(format!(
            "the query: a sparse vector of {} indices and {} values (at most {MAX_QUERY_ENTRIES})",
            query.indices.len(),
            query.values.len()
        )));
    }
    check_weights(query, || "the query".to_string())
}

impl SparseIndex {
    /// The largest weight magnitude a vector in the index, or a query, may hold (256): far
    /// above what sparse encoders give (a few units; IDF tables a few tens), and low enough
    /// that scores sum exactly.
    pub const MAX_WEIGHT: f32 = 256.0;

    /// An empty index whose documents and queries `encoder` encodes.
    pub fn new(encoder: Arc<SparseEncoder>) -> Self {
        let vocab = encoder.vocab_size();
        SparseIndex {
            encoder,
            inner: RwLock::new(Inner {
                postings: vec![Postings::default(); vocab],
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
    /// one). An index at or past the vocabulary, or a weight that is not finite or above
    /// [`MAX_WEIGHT`](Self::MAX_WEIGHT) in magnitude, is an [`Error::InvalidInput`], and nothing of the call is
    /// added then.
    pub fn add_vectors(
        &self,
        docs: impl IntoIterator<Item = (Document, SparseVector)>,
    ) -> Result<()> {
        let docs: Vec<(Document, SparseVector)> = docs.into_iter().collect();
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let vocab = inner.postings.len();
        for (d, v) in &docs {
            if v.indices.len() != v.values.len() || v.indices.windows(2).any(|p| p[0] >= p[1]) {
                return Err(Error::InvalidInput(format!(
                    "document {:?}: a sparse vector needs ascending distinct indices, one value each",
                    d.id
                )));
            }
            if v.indices.iter().any(|&i| i as usize >= vocab) {
                return Err(Error::InvalidInput(format!(
                    "document {:?}: a sparse vector index is outside the encoder's {vocab} ids",
                    d.id
                )));
            }
            check_weights(v, || format!("document {:?}", d.id))?;
        }
        for (doc, vector) in docs {
            let slot = u32::try_from(inner.docs.len())
                .map_err(|_| Error::InvalidInput("the sparse index is full".into()))?;
            if let Some(old) = inner.slots.insert(doc.id.clone(), slot) {
                inner.docs[old as usize] = None;
            }
            for (&i, &w) in vector.indices.iter().zip(&vector.values) {
                inner.negative |= w < 0.0;
                inner.postings[i as usize].push(slot, w);
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
        self.search_vector(&query, k)
    }

    /// The best `k` documents for an encoded query, best first; documents scoring 0 (no id in
    /// common) are left out. A score is the exact sum of the products of the weights the
    /// query and the document share (within float rounding of [`SparseVector::dot`], which
    /// adds in f32), so it does not depend on the order postings are read in: block-max
    /// pruning skips the documents that cannot enter, and the hits, their order and their
    /// scores are those of [`search_vector_exhaustive`](Self::search_vector_exhaustive) to the
    /// last bit. Ids past the vocabulary match nothing; a weight that is not finite or above
    /// [`MAX_WEIGHT`](Self::MAX_WEIGHT) in magnitude is an [`Error::InvalidInput`].
    pub fn search_vector(&self, query: &SparseVector, k: usize) -> Result<Vec<Hit>> {
        check_query(query)?;
        let inner = self.read();
        let top = if inner.negative || query.values.iter().any(|&q| q < 0.0) {
            search::top_k_exhaustive(&inner.postings, &inner.docs, query, k)
        } else {
            search::top_k_pruned(&inner.postings, &inner.docs, query, k)
        };
        Ok(Self::hits(&inner, top))
    }

    /// [`search_vector`](Self::search_vector) scoring every posting of the query's ids: the
    /// reference the pruned search is checked against (and the path taken when a weight is
    /// negative, which the bounds of pruning cannot hold).
    pub fn search_vector_exhaustive(&self, query: &SparseVector, k: usize) -> Result<Vec<Hit>> {
        check_query(query)?;
        let inner = self.read();
        let top = search::top_k_exhaustive(&inner.postings, &inner.docs, query, k);
        Ok(Self::hits(&inner, top))
    }

    fn hits(inner: &Inner, top: Vec<(u32, f32)>) -> Vec<Hit> {
        top.into_iter()
            .filter_map(|(slot, score)| {
                let doc = inner.docs[slot as usize].clone()?;
                Some(Hit::new(doc, score))
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
