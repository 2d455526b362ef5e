//! [`MatryoshkaIndex`]: dense recall in two steps, coarse over truncated vectors, then a rescore
//! with the full ones.

use std::sync::{Arc, RwLock};

use ndarray::{Array1, Array2};

use super::{Retriever, SearchQuery};
use crate::document::sort_by_score_desc;
use crate::embed::{cosine, truncate_normalized, Matryoshka};
use crate::{Document, Embedder, Error, Hit, Result};

/// A dense index for Matryoshka embeddings: the search runs over the first `dims` dimensions
/// of every vector (re-normalized, see [`Matryoshka`]), and the best `rescore` candidates are
/// then ranked by cosine over the full vectors. [`Hit::vector_score`] is the full cosine.
///
/// ```
/// use std::sync::Arc;
/// use rerank::embed::HashingEmbedder;
/// use rerank::recall::{MatryoshkaIndex, SearchQuery};
/// use rerank::{Document, Embedder, Retriever};
/// let embedder: Arc<dyn Embedder> = Arc::new(HashingEmbedder::new(256)?);
/// let index = MatryoshkaIndex::new(embedder, 64, 20)?;
/// index.add(vec![Document::new("a", "bail in Delhi"), Document::new("b", "tax on income")])?;
/// let hits = index.retrieve(&SearchQuery::new("income tax"), 1)?;
/// assert_eq!(hits[0].id(), "b");
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct MatryoshkaIndex {
    full: Arc<dyn Embedder>,
    dims: usize,
    rescore: usize,
    held: RwLock<Held>,
}

/// The documents, their truncated vectors (one row each) and their full vectors.
struct Held {
    docs: Vec<Arc<Document>>,
    small: Array2<f32>,
    full: Vec<Vec<f32>>,
}

impl std::fmt::Debug for MatryoshkaIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatryoshkaIndex")
            .field("dims", &self.dims)
            .field("full_dim", &self.full.dim())
            .field("rescore", &self.rescore)
            .field("docs", &self.len())
            .finish()
    }
}

impl MatryoshkaIndex {
    /// An empty index: `embedder` gives the full vectors, the coarse search uses their first
    /// `dims` dimensions, and the best `rescore` coarse candidates (at least the `k` asked for)
    /// are rescored with the full vectors.
    pub fn new(embedder: Arc<dyn Embedder>, dims: usize, rescore: usize) -> Result<Self> {
        // Checks `dims` against the embedder's dimension.
        Matryoshka::new(Arc::clone(&embedder), dims)?;
        if rescore == 0 {
            return Err(Error::Config(
                "matryoshka index: rescore must be at least 1".into(),
            ));
        }
        Ok(MatryoshkaIndex {
            full: embedder,
            dims,
            rescore,
            held: RwLock::new(Held {
                docs: Vec::new(),
                small: Array2::zeros((0, dims)),
                full: Vec::new(),
            }),
        })
    }

    /// Embeds (once, with the full embedder) and adds documents; a document whose id is
    /// already present replaces the old one.
    pub fn add(&self, docs: Vec<Document>) -> Result<()> {
        let texts: Vec<String> = docs.iter().map(Document::full_text).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let full = if refs.is_empty() {
            return Ok(());
        } else {
            self.full.embed(&refs)?
        };
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        let mut rows: Vec<Vec<f32>> = held.small.rows().into_iter().map(|r| r.to_vec()).collect();
        for (doc, row) in docs.into_iter().zip(full.rows()) {
            let mut row = row.to_vec();
            crate::embed::normalize(&mut row);
            let small = truncate_normalized(&row, self.dims);
            match held.docs.iter().position(|d| d.id == doc.id) {
                Some(i) => {
                    held.docs[i] = Arc::new(doc);
                    held.full[i] = row;
                    rows[i] = small;
                }
                None => {
                    held.docs.push(Arc::new(doc));
                    held.full.push(row);
                    rows.push(small);
                }
            }
        }
        let flat: Vec<f32> = rows.concat();
        held.small = Array2::from_shape_vec((rows.len(), self.dims), flat)
            .map_err(|e| Error::model(e.to_string()))?;
        Ok(())
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.held
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .docs
            .len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Retriever for MatryoshkaIndex {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        let full_query = match &query.embedding {
            Some(e) => e.as_ref().clone(),
            None => self.full.embed_query(&query.text)?,
        };
        if full_query.len() != self.full.dim() {
            return Err(Error::InvalidInput(format!(
                "matryoshka index: a {}-dimensional query embedding for a {}-dimensional embedder",
                full_query.len(),
                self.full.dim()
            )));
        }
        let small_query = Array1::from(truncate_normalized(&full_query, self.dims));
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        let coarse = held.small.dot(&small_query);
        let mut order: Vec<usize> = (0..held.docs.len()).collect();
        order.sort_by(|&a, &b| crate::document::cmp_score_desc(coarse[a], coarse[b]));
        order.truncate(self.rescore.max(k));
        let mut hits: Vec<Hit> = order
            .into_iter()
            .map(|i| {
                let s = cosine(&full_query, &held.full[i]);
                Hit::new(Arc::clone(&held.docs[i]), s).with_vector(s)
            })
            .collect();
        sort_by_score_desc(&mut hits);
        hits.truncate(k);
        Ok(hits)
    }

    fn name(&self) -> &str {
        "matryoshka"
    }
}
