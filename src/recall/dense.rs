//! Dense recall: exact cosine top-k over document embeddings.
//!
//! The vectors are one contiguous row-major `Vec<f32>` (L2-normalized on the way in). A query
//! scans it in chunks of rows in parallel (rayon); each chunk keeps its best k in a bounded
//! heap, and the chunks' bests are merged. The dot product is written for the compiler's
//! vectorizer (16 independent f32 accumulators), compiled twice: once for the baseline target
//! and once with AVX2 + FMA, chosen at run time (hand-written rather than a SIMD crate: the
//! whole kernel is these few lines, and the model-free core stays free of `pulp`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, RwLock};

use ndarray::{Array2, Axis};
use rayon::prelude::*;

use super::bm25::check_capacity;
use super::{Retriever, SearchQuery};
use crate::rerankers::VectorSource;
use crate::{Document, Embedder, Error, Hit, Result};

/// Rows scored per rayon task.
const CHUNK_ROWS: usize = 4096;

/// Documents per call to the embedder when indexing.
const EMBED_BATCH: usize = 256;

/// Accumulators in the dot product (two AVX registers of 8 lanes).
const LANES: usize = 16;

#[derive(Default)]
struct Store {
    docs: Vec<Arc<Document>>,
    /// One L2-normalized embedding per row, aligned with `docs`, row-major.
    matrix: Vec<f32>,
    rows: HashMap<String, usize>,
    /// Row of a document by a hash of its `full_text()` (for [`VectorSource`]; checked against
    /// the text on lookup).
    by_text: HashMap<u64, usize>,
}

fn text_hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// An in-memory dense index: embeddings in one contiguous matrix, exact top-k by cosine.
///
/// Documents are embedded as `title + " " + text` (see [`Document::full_text`]). All methods
/// take `&self`; the index can be updated while it is shared across threads. Ties go to the
/// document added first.
pub struct DenseIndex {
    embedder: Arc<dyn Embedder>,
    dim: usize,
    store: RwLock<Store>,
}

impl DenseIndex {
    /// An empty index fed by `embedder`.
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        let dim = embedder.dim();
        DenseIndex {
            embedder,
            dim,
            store: RwLock::new(Store::default()),
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
        let embeddings = if views.is_empty() {
            Array2::zeros((0, self.dim))
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
        let mut store = self.write();
        remove_row(&mut store, id, self.dim)
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.read().docs.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The embedding dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The stored (L2-normalized) vector of the document `id`, if indexed.
    pub fn vector(&self, id: &str) -> Option<Vec<f32>> {
        let store = self.read();
        let row = *store.rows.get(id)?;
        Some(store.matrix[row * self.dim..(row + 1) * self.dim].to_vec())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Store> {
        self.store.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Store> {
        self.store.write().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, docs: Vec<Document>, embeddings: Array2<f32>) -> Result<()> {
        let dim = self.dim;
        if embeddings.nrows() != docs.len() || embeddings.ncols() != dim {
            return Err(Error::InvalidInput(format!(
                "expected a {} x {dim} embedding matrix, got {} x {}",
                docs.len(),
                embeddings.nrows(),
                embeddings.ncols()
            )));
        }
        // A batch may itself repeat an id: the last occurrence wins.
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, d) in docs.iter().enumerate() {
            last.insert(d.id.as_str(), i);
        }
        let keep: Vec<usize> = (0..docs.len())
            .filter(|&i| last.get(docs[i].id.as_str()) == Some(&i))
            .collect();
        drop(last);
        let mut store = self.write();
        check_capacity("DenseIndex", store.docs.len(), keep.len())?;
        for &i in &keep {
            remove_row(&mut store, &docs[i].id, dim);
        }
        store.matrix.reserve(keep.len() * dim);
        let mut docs: Vec<Option<Document>> = docs.into_iter().map(Some).collect();
        for &i in &keep {
            let row = embeddings.row(i);
            let norm = row.dot(&row).sqrt();
            let start = store.matrix.len();
            store.matrix.extend(row.iter());
            if norm > 0.0 {
                for x in &mut store.matrix[start..] {
                    *x /= norm;
                }
            }
            if let Some(d) = docs[i].take() {
                let r = store.docs.len();
                store.rows.insert(d.id.clone(), r);
                store.by_text.insert(text_hash(&d.full_text()), r);
                store.docs.push(Arc::new(d));
            }
        }
        Ok(())
    }

    /// Exact top-k rows by cosine against a query vector.
    fn top_k(&self, query: &[f32], k: usize) -> Result<Vec<Hit>> {
        let store = self.read();
        if query.len() != self.dim {
            return Err(Error::InvalidInput(format!(
                "query embedding has {} dimensions, the index has {}",
                query.len(),
                self.dim
            )));
        }
        let norm = query.iter().map(|x| x * x).sum::<f32>().sqrt();
        if k == 0 || store.docs.is_empty() || norm == 0.0 || !norm.is_finite() {
            return Ok(Vec::new());
        }
        let q: Vec<f32> = query.iter().map(|x| x / norm).collect();
        let best = top_rows(&store.matrix, self.dim, &q, k);
        Ok(best
            .into_iter()
            .map(|(row, s)| Hit::new(store.docs[row].clone(), s).with_vector(s))
            .collect())
    }
}

/// Removes the row of `id`, keeping the order of the others.
fn remove_row(store: &mut Store, id: &str, dim: usize) -> bool {
    let Some(row) = store.rows.remove(id) else {
        return false;
    };
    store.matrix.drain(row * dim..(row + 1) * dim);
    store.docs.remove(row);
    for r in store.rows.values_mut() {
        if *r > row {
            *r -= 1;
        }
    }
    store.by_text.retain(|_, r| *r != row);
    for r in store.by_text.values_mut() {
        if *r > row {
            *r -= 1;
        }
    }
    true
}

impl VectorSource for DenseIndex {
    /// The stored (normalized) vector of each text that is the `full_text()` of an indexed
    /// document.
    fn vectors(&self, texts: &[&str]) -> Result<Vec<Option<Vec<f32>>>> {
        let store = self.read();
        let dim = self.dim;
        Ok(texts
            .iter()
            .map(|t| {
                let row = *store.by_text.get(&text_hash(t))?;
                (store.docs[row].full_text() == *t)
                    .then(|| store.matrix[row * dim..(row + 1) * dim].to_vec())
            })
            .collect())
    }
}

/// A scored row; the greatest is the worst (lowest score, then highest row).
#[derive(Clone, Copy, PartialEq)]
struct Scored(f32, usize);

impl Eq for Scored {}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.total_cmp(&self.0).then(self.1.cmp(&other.1))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The best `k` rows of `matrix` (row-major, `dim` columns) by dot product with `q`, best
/// first; ties go to the lower row. NaN scores rank last.
fn top_rows(matrix: &[f32], dim: usize, q: &[f32], k: usize) -> Vec<(usize, f32)> {
    let dot = dot_kernel();
    let mut best: Vec<Scored> = matrix
        .par_chunks(CHUNK_ROWS * dim)
        .enumerate()
        .flat_map_iter(|(c, chunk)| {
            let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(k + 1);
            for (r, row) in chunk.chunks_exact(dim).enumerate() {
                let s = dot(row, q);
                let s = if s.is_nan() { f32::NEG_INFINITY } else { s };
                let entry = Scored(s, c * CHUNK_ROWS + r);
                if heap.len() < k {
                    heap.push(entry);
                } else if heap.peek().is_some_and(|w| entry < *w) {
                    heap.pop();
                    heap.push(entry);
                }
            }
            heap.into_vec()
        })
        .collect();
    best.sort();
    best.truncate(k);
    best.into_iter().map(|Scored(s, r)| (r, s)).collect()
}

/// The dot product for this CPU (AVX2 + FMA when it has them).
fn dot_kernel() -> fn(&[f32], &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return dot_avx2;
        }
    }
    dot_portable
}

/// The same loop as [`dot_portable`], compiled for AVX2 + FMA.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    #[target_feature(enable = "avx2,fma")]
    unsafe fn inner(a: &[f32], b: &[f32]) -> f32 {
        dot_fused(a, b)
    }
    // SAFETY: only returned by `dot_kernel` after the CPU reported AVX2 and FMA.
    unsafe { inner(a, b) }
}

/// `sum(a[i] * b[i])` with [`LANES`] independent accumulators (vectorizable).
#[inline(always)]
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// [`dot_portable`] with fused multiply-adds (inlined into the AVX2 + FMA kernel only).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn dot_fused(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail = x.mul_add(*y, tail);
    }
    acc.iter().sum::<f32>() + tail
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
    fn kernels_agree_with_a_plain_sum() {
        for n in [0, 1, 5, 16, 17, 100, 384] {
            let a: Vec<f32> = (0..n).map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5).collect();
            let want: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            assert!((f64::from(dot_portable(&a, &b)) - want).abs() < 1e-4, "{n}");
            assert!((f64::from(dot_kernel()(&a, &b)) - want).abs() < 1e-4, "{n}");
        }
    }

    #[test]
    fn top_rows_equals_a_full_sort() {
        let dim = 7;
        let rows = 3 * CHUNK_ROWS + 17;
        // few distinct values, so many ties across chunks
        let m: Vec<f32> = (0..rows * dim).map(|i| ((i * 31) % 5) as f32).collect();
        let q: Vec<f32> = (0..dim).map(|i| 1.0 + i as f32).collect();
        let mut all: Vec<(usize, f32)> = m
            .chunks_exact(dim)
            .map(|r| r.iter().zip(&q).map(|(x, y)| x * y).sum::<f32>())
            .enumerate()
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for k in [1, 10, 100] {
            assert_eq!(top_rows(&m, dim, &q, k), all[..k].to_vec(), "{k}");
        }
        assert_eq!(top_rows(&m, dim, &q, rows + 5).len(), rows);
    }

    #[test]
    fn stored_vectors_are_normalized() {
        let idx = index();
        let v = idx.vector("3").unwrap();
        assert!((v[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert!(idx.vector("nope").is_none());
    }

    #[test]
    fn vectors_by_text() {
        let idx = index();
        let got = idx.vectors(&["aabb", "zzz", "eeee"]).unwrap();
        assert_eq!(got[0], idx.vector("3"));
        assert_eq!(got[1], None);
        assert_eq!(got[2], idx.vector("4"));
        assert!(idx.remove("3"));
        let got = idx.vectors(&["aabb", "eeee"]).unwrap();
        assert_eq!(got[0], None);
        assert_eq!(got[1], idx.vector("4"));
    }

    #[test]
    fn many_rows_across_chunks() {
        let idx = DenseIndex::new(Arc::new(Letters));
        let docs: Vec<Document> = (0..9000)
            .map(|i| Document::new(i.to_string(), if i == 8500 { "eeee" } else { "abcd" }))
            .collect();
        idx.add(docs).unwrap();
        let hits = idx.retrieve(&SearchQuery::new("e"), 2).unwrap();
        assert_eq!(hits[0].id(), "8500");
        assert_eq!(hits.len(), 2);
    }
}
