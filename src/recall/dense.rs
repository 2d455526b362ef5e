//! Dense recall: exact cosine top-k over document embeddings.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use ndarray::{Array2, ArrayView1, Axis};
use rayon::prelude::*;

use super::{Retriever, SearchQuery};
use crate::document::cmp_score_desc;
use crate::{Document, Embedder, Error, Hit, Result};

/// Rows scored per rayon task.
const CHUNK_ROWS: usize = 1024;

/// Documents per call to the embedder when indexing.
const EMBED_BATCH: usize = 256;

#[derive(Default)]
struct Store {
    docs: Vec<Arc<Document>>,
    /// One L2-normalized embedding per row, aligned with `docs`.
    matrix: Array2<f32>,
    rows: HashMap<String, usize>,
}

/// An in-memory dense index: embeddings in an `ndarray` matrix, exact top-k by cosine.
///
/// Documents are embedded as `title + " " + text` (see [`Document::full_text`]). All methods
/// take `&self`; the index can be updated while it is shared across threads.
pub struct DenseIndex {
    embedder: Arc<dyn Embedder>,
    store: RwLock<Store>,
}

impl DenseIndex {
    /// An empty index fed by `embedder`.
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        let dim = embedder.dim();
        DenseIndex {
            embedder,
            store: RwLock::new(Store {
                matrix: Array2::zeros((0, dim)),
                ..Store::default()
            }),
        }
    }

    /// An index over precomputed embeddings (one row per document, in order).
    /// `embedder` is still needed to embed queries.
    pub fn from_embeddings(
        embedder: Arc<dyn Embedder>,
        docs: Vec<Document>,
        embeddings: Array2<f32>,
    ) -> Result<Self> {
        let index = DenseIndex::new(embedder);
        index.insert(docs, embeddings)?;
        Ok(index)
    }

    /// Embeds and adds documents; a document whose id is already present replaces the old one.
    pub fn add(&self, docs: Vec<Document>) -> Result<()> {
        let mut rows = Vec::with_capacity(docs.len());
        for chunk in docs.chunks(EMBED_BATCH) {
            let texts: Vec<String> = chunk.iter().map(Document::full_text).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            rows.push(self.embedder.embed(&refs)?);
        }
        let views: Vec<_> = rows.iter().map(|m| m.view()).collect();
        let dim = self.embedder.dim();
        let embeddings = if views.is_empty() {
            Array2::zeros((0, dim))
        } else {
            ndarray::concatenate(Axis(0), &views).map_err(|e| Error::model(e.to_string()))?
        };
        self.insert(docs, embeddings)
    }

    /// Replaces a document (same as [`DenseIndex::add`] with one document).
    pub fn update(&self, doc: Document) -> Result<()> {
        self.add(vec![doc])
    }

    /// Removes a document by id; returns whether it was present.
    pub fn remove(&self, id: &str) -> bool {
        let mut store = self.store.write().unwrap_or_else(|e| e.into_inner());
        let Some(row) = store.rows.remove(id) else {
            return false;
        };
        let keep: Vec<usize> = (0..store.docs.len()).filter(|&r| r != row).collect();
        store.matrix = store.matrix.select(Axis(0), &keep);
        store.docs.remove(row);
        let rows = store
            .docs
            .iter()
            .enumerate()
            .map(|(r, d)| (d.id.clone(), r))
            .collect();
        store.rows = rows;
        true
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.store
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .docs
            .len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The embedding dimension.
    pub fn dim(&self) -> usize {
        self.embedder.dim()
    }

    fn insert(&self, docs: Vec<Document>, mut embeddings: Array2<f32>) -> Result<()> {
        let dim = self.embedder.dim();
        if embeddings.nrows() != docs.len() || embeddings.ncols() != dim {
            return Err(Error::InvalidInput(format!(
                "expected a {} x {dim} embedding matrix, got {} x {}",
                docs.len(),
                embeddings.nrows(),
                embeddings.ncols()
            )));
        }
        for mut row in embeddings.rows_mut() {
            let norm = row.dot(&row).sqrt();
            if norm > 0.0 {
                row /= norm;
            }
        }
        for doc in &docs {
            self.remove(&doc.id);
        }
        let mut store = self.store.write().unwrap_or_else(|e| e.into_inner());
        // A batch may itself repeat an id: the last occurrence wins.
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, d) in docs.iter().enumerate() {
            last.insert(d.id.as_str(), i);
        }
        let keep: Vec<usize> = (0..docs.len())
            .filter(|&i| last.get(docs[i].id.as_str()) == Some(&i))
            .collect();
        let embeddings = embeddings.select(Axis(0), &keep);
        let base = store.docs.len();
        for (offset, &i) in keep.iter().enumerate() {
            store.rows.insert(docs[i].id.clone(), base + offset);
        }
        let mut docs: Vec<Option<Document>> = docs.into_iter().map(Some).collect();
        for &i in &keep {
            if let Some(d) = docs[i].take() {
                store.docs.push(Arc::new(d));
            }
        }
        let matrix = std::mem::take(&mut store.matrix);
        store.matrix = ndarray::concatenate(Axis(0), &[matrix.view(), embeddings.view()])
            .map_err(|e| Error::model(e.to_string()))?;
        Ok(())
    }

    /// Exact top-k rows by cosine against a query vector.
    fn top_k(&self, query: &[f32], k: usize) -> Result<Vec<Hit>> {
        let store = self.store.read().unwrap_or_else(|e| e.into_inner());
        if query.len() != store.matrix.ncols() {
            return Err(Error::InvalidInput(format!(
                "query embedding has {} dimensions, the index has {}",
                query.len(),
                store.matrix.ncols()
            )));
        }
        let norm = query.iter().map(|x| x * x).sum::<f32>().sqrt();
        if k == 0 || store.docs.is_empty() || norm == 0.0 {
            return Ok(Vec::new());
        }
        let q: Vec<f32> = query.iter().map(|x| x / norm).collect();
        let q = ArrayView1::from(&q);
        let mut scored: Vec<(usize, f32)> = store
            .matrix
            .axis_chunks_iter(Axis(0), CHUNK_ROWS)
            .into_par_iter()
            .enumerate()
            .flat_map_iter(|(c, chunk)| {
                let scores = chunk.dot(&q);
                scores
                    .into_iter()
                    .enumerate()
                    .map(move |(r, s)| (c * CHUNK_ROWS + r, s))
            })
            .collect();
        let by_score =
            |a: &(usize, f32), b: &(usize, f32)| cmp_score_desc(a.1, b.1).then(a.0.cmp(&b.0));
        if k < scored.len() {
            scored.select_nth_unstable_by(k - 1, by_score);
            scored.truncate(k);
        }
        scored.sort_by(by_score);
        Ok(scored
            .into_iter()
            .map(|(row, s)| Hit::new(store.docs[row].clone(), s).with_vector(s))
            .collect())
    }
}

impl Retriever for DenseIndex {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        match &query.embedding {
            Some(e) => self.top_k(e, k),
            None => {
                let e = self.embedder.embed_one(&query.text)?;
                self.top_k(&e, k)
            }
        }
    }

    fn name(&self) -> &str {
        "dense"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bag-of-letters embedder: counts of a..e.
    struct Letters;
    impl Embedder for Letters {
        fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
            let mut m = Array2::zeros((texts.len(), 5));
            for (i, t) in texts.iter().enumerate() {
                for c in t.chars() {
                    if ('a'..='e').contains(&c) {
                        m[[i, (c as u8 - b'a') as usize]] += 1.0;
                    }
                }
            }
            Ok(m)
        }
        fn dim(&self) -> usize {
            5
        }
    }

    fn index() -> DenseIndex {
        let idx = DenseIndex::new(Arc::new(Letters));
        idx.add(vec![
            Document::new("1", "aaaa"),
            Document::new("2", "bbbb"),
            Document::new("3", "aabb"),
            Document::new("4", "eeee"),
        ])
        .unwrap();
        idx
    }

    #[test]
    fn exact_cosine_top_k() {
        let idx = index();
        let hits = idx.retrieve(&SearchQuery::new("a"), 3).unwrap();
        let got: Vec<_> = hits.iter().map(|h| (h.id(), h.score)).collect();
        assert_eq!(got[0].0, "1");
        assert!((got[0].1 - 1.0).abs() < 1e-6);
        assert_eq!(got[1].0, "3");
        assert!((got[1].1 - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        // "2" and "4" tie at 0: the lower row wins
        assert_eq!(got[2].0, "2");
        assert_eq!(hits[0].vector_score, Some(hits[0].score));
    }

    #[test]
    fn add_update_remove() {
        let idx = index();
        assert!(idx.remove("1"));
        assert!(!idx.remove("1"));
        assert_eq!(idx.len(), 3);
        let hits = idx.retrieve(&SearchQuery::new("a"), 1).unwrap();
        assert_eq!(hits[0].id(), "3");
        idx.update(Document::new("2", "aaaa")).unwrap();
        assert_eq!(idx.len(), 3);
        let hits = idx.retrieve(&SearchQuery::new("a"), 1).unwrap();
        assert_eq!(hits[0].id(), "2");
    }

    #[test]
    fn precomputed_query_embedding_wins() {
        let idx = index();
        let q = SearchQuery::new("a").with_embedding(vec![0.0, 0.0, 0.0, 0.0, 1.0]);
        assert_eq!(idx.retrieve(&q, 1).unwrap()[0].id(), "4");
    }

    #[test]
    fn bad_dimensions_and_empty_queries() {
        let idx = index();
        let q = SearchQuery::new("a").with_embedding(vec![1.0]);
        assert!(matches!(idx.retrieve(&q, 1), Err(Error::InvalidInput(_))));
        assert!(idx
            .retrieve(&SearchQuery::new("zzz"), 3)
            .unwrap()
            .is_empty());
        assert!(idx.retrieve(&SearchQuery::new("a"), 0).unwrap().is_empty());
        let bad = DenseIndex::from_embeddings(
            Arc::new(Letters),
            vec![Document::new("x", "")],
            Array2::zeros((2, 5)),
        );
        assert!(bad.is_err());
    }

    #[test]
    fn many_rows_across_chunks() {
        let idx = DenseIndex::new(Arc::new(Letters));
        let docs: Vec<Document> = (0..3000)
            .map(|i| Document::new(i.to_string(), if i == 2500 { "eeee" } else { "abcd" }))
            .collect();
        idx.add(docs).unwrap();
        let hits = idx.retrieve(&SearchQuery::new("e"), 2).unwrap();
        assert_eq!(hits[0].id(), "2500");
        assert_eq!(hits.len(), 2);
    }
}
