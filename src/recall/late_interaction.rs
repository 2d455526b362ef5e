//! Stage-1 late interaction: every document's ColBERT token vectors held in memory (as f16),
//! and a MaxSim scan of them against the query's vectors: exact, or over the candidates that
//! MUVERA's encodings pick (`super::muvera`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use ndarray::ArrayView2;
use rayon::prelude::*;

use super::muvera::{Muvera, MuveraConfig};
use super::{Retriever, SearchQuery};
use crate::embed::ColbertEncoder;
use crate::simd::dense::{f16_to_f32, f32_to_f16, Kernels};
use crate::{Document, Error, Hit, Result, Role};

/// One indexed document: its token vectors, `tokens` rows of the encoder's width, as f16 bits,
/// and its MUVERA encoding (f16 bits; empty without MUVERA).
struct Entry {
    document: Arc<Document>,
    vectors: Vec<u16>,
    tokens: usize,
    encoding: Vec<u16>,
}

impl Entry {
    /// The token vectors as an f32 `(tokens, dim)` matrix.
    fn matrix(&self, dim: usize) -> Option<ndarray::Array2<f32>> {
        ndarray::Array2::from_shape_vec((self.tokens, dim), self.floats()).ok()
    }

    fn floats(&self) -> Vec<f32> {
        self.vectors.iter().map(|&h| f16_to_f32(h)).collect()
    }

    /// MaxSim of `query` (rows of `dim` values) against the token vectors.
    fn maxsim(&self, query: &[f32], dim: usize, dot: fn(&[u16], &[f32]) -> f32) -> f32 {
        let score: f32 = query
            .chunks_exact(dim)
            .map(|qv| {
                self.vectors
                    .chunks_exact(dim)
                    .map(|d| dot(d, qv))
                    .fold(f32::NEG_INFINITY, f32::max)
            })
            .sum();
        if score.is_nan() {
            f32::NEG_INFINITY
        } else {
            score
        }
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
/// With [`with_muvera`](Self::with_muvera), each document also keeps MUVERA's
/// fixed-dimensional encoding of its vectors ([`MuveraConfig`]); a search scores every
/// document by the encodings' dot product first, and computes MaxSim only for the best
/// [`candidates`](MuveraConfig::candidates): approximate, and far cheaper on a large
/// collection ([`search_vectors_exact`](Self::search_vectors_exact) stays exact).
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
    muvera: Option<Muvera>,
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
            muvera: None,
        }
    }

    /// Picks the documents MaxSim ranks by MUVERA's encodings (see the type's docs); the
    /// documents indexed already are encoded now. Settings out of range are an
    /// [`Error::Config`] naming the key.
    pub fn with_muvera(mut self, config: MuveraConfig) -> Result<Self> {
        let muvera = Muvera::new(config, self.encoder.dim())?;
        let inner = self.entries.get_mut().unwrap_or_else(|e| e.into_inner());
        for e in &mut inner.docs {
            e.encoding = halves(&muvera.encode_document(&e.floats()));
        }
        self.muvera = Some(muvera);
        Ok(self)
    }

    /// The MUVERA settings, when candidates are picked by them.
    pub fn muvera(&self) -> Option<&MuveraConfig> {
        self.muvera.as_ref().map(Muvera::config)
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
        let halves = vectors
            .into_iter()
            .map(|m| (m.nrows(), m.iter().map(|&x| f32_to_f16(x)).collect()))
            .collect();
        self.add_f16(docs, halves)
    }

    /// Indexes `docs` with their token vectors as f16 bits (`(tokens, tokens x dim values)`
    /// per document, as the store keeps them). A count that differs from the documents', or
    /// a length that is not `tokens x dim`, is an error and nothing is added.
    pub(crate) fn add_f16(
        &self,
        docs: Vec<Document>,
        vectors: Vec<(usize, Vec<u16>)>,
    ) -> Result<()> {
        let dim = self.encoder.dim();
        if let Some((d, _)) = docs
            .iter()
            .zip(&vectors)
            .find(|(_, (tokens, v))| tokens.checked_mul(dim) != Some(v.len()))
        {
            return Err(Error::InvalidInput(format!(
                "document {:?}: its token vectors are not a whole number of {dim}-value rows",
                d.id
            )));
        }
        if docs.len() != vectors.len() {
            return Err(Error::InvalidInput(format!(
                "{} documents with {} token matrices: one per document",
                docs.len(),
                vectors.len()
            )));
        }
        let encodings: Vec<Vec<u16>> = match &self.muvera {
            Some(m) => vectors
                .par_iter()
                .map(|(_, v)| {
                    let floats: Vec<f32> = v.iter().map(|&h| f16_to_f32(h)).collect();
                    halves(&m.encode_document(&floats))
                })
                .collect(),
            None => vec![Vec::new(); vectors.len()],
        };
        let mut inner = self.entries.write().unwrap_or_else(|e| e.into_inner());
        for ((doc, (tokens, vectors)), encoding) in docs.into_iter().zip(vectors).zip(encodings) {
            let entry = Entry {
                tokens,
                vectors,
                encoding,
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

    /// The mean bytes of token vectors (and MUVERA encoding) a document holds (0 when empty).
    pub fn bytes_per_document(&self) -> f64 {
        let inner = self.read();
        let bytes: usize = inner
            .docs
            .iter()
            .map(|e| (e.vectors.len() + e.encoding.len()) * 2)
            .sum();
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

impl LateInteractionIndex {
    /// The best `k` documents for a query's token vectors (a `(tokens, dim)` matrix, as
    /// [`ColbertEncoder::encode`] gives them for a query), best first, ties to the document
    /// indexed first: by MaxSim over the MUVERA candidates when set, else over every document.
    pub fn search_vectors(&self, query: ArrayView2<'_, f32>, k: usize) -> Result<Vec<Hit>> {
        self.search(query, k, true)
    }

    /// Like [`search_vectors`](Self::search_vectors), by MaxSim over every document even with
    /// MUVERA set (what its candidates approximate).
    pub fn search_vectors_exact(&self, query: ArrayView2<'_, f32>, k: usize) -> Result<Vec<Hit>> {
        self.search(query, k, false)
    }

    fn search(&self, query: ArrayView2<'_, f32>, k: usize, candidates: bool) -> Result<Vec<Hit>> {
        let dim = self.encoder.dim();
        if query.ncols() != dim {
            return Err(Error::InvalidInput(format!(
                "the query has vectors of {} values; the model's have {dim}",
                query.ncols()
            )));
        }
        let q = query.as_standard_layout();
        let query = q.as_slice().unwrap_or_default();
        let dot = Kernels::detect().f16;
        let inner = self.read();
        let exact = |i: usize| (inner.docs[i].maxsim(query, dim, dot), i);
        let mut scored: Vec<(f32, usize)> = match &self.muvera {
            Some(m) if candidates && inner.docs.len() > m.config().candidates.max(k) => {
                let fq = m.encode_query(query);
                let mut by_encoding: Vec<(f32, usize)> = inner
                    .docs
                    .par_iter()
                    .enumerate()
                    .map(|(i, e)| (dot(&e.encoding, &fq), i))
                    .collect();
                let keep = m.config().candidates.max(k);
                by_encoding.select_nth_unstable_by(keep - 1, |a, b| {
                    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
                });
                by_encoding.truncate(keep);
                by_encoding.par_iter().map(|&(_, i)| exact(i)).collect()
            }
            _ => (0..inner.docs.len()).into_par_iter().map(exact).collect(),
        };
        // Best first; ties to the earlier document.
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        Ok(scored
            .into_iter()
            .take(k)
            .map(|(s, i)| Hit::new(Arc::clone(&inner.docs[i].document), s))
            .collect())
    }
}

/// f32 values as f16 bits.
fn halves(values: &[f32]) -> Vec<u16> {
    values.iter().map(|&x| f32_to_f16(x)).collect()
}

impl Retriever for LateInteractionIndex {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        let q = self
            .encoder
            .encode(&[query.text.as_str()], Role::Query)?
            .pop()
            .ok_or_else(|| Error::model("the ColBERT encoder returned no query vectors"))?;
        self.search_vectors(q.view(), k)
    }

    fn name(&self) -> &str {
        "late_interaction"
    }
}
