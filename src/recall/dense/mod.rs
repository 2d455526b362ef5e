//! Dense recall: exact cosine top-k over document embeddings.
//!
//! The vectors are one contiguous row-major `Vec<f32>` (L2-normalized on the way in). A query
//! scans it in chunks of rows in parallel (rayon); each chunk keeps its best k in a bounded
//! heap, and the chunks' bests are merged; ties go to the row added first.
//!
//! # Compact storage
//!
//! An exhaustive scan reads every stored byte per query (1.5 GB at 1M x 384 in f32), so it is
//! bound by memory bandwidth. [`VectorStorage::F16`] and [`VectorStorage::Int8`] add a compact
//! copy of the vectors (half or a quarter of the bytes; int8 with one symmetric scale per
//! vector) that the query scans instead, keeping the best `k x rescore` rows; those are then
//! rescored with the f32 vectors and the best k returned. The scores returned are therefore
//! the exact f32 cosines (the same bits as a [`VectorStorage::F32`] index on the same machine
//! gives); only which rows reach the rescoring is approximate, and a true top-k row is missed
//! only when the compact scores push it below `k x rescore` others. The f32 matrix is kept (it
//! is the rescoring source and what [`DenseIndex::vector`] and [`VectorSource`] return), so a
//! compact storage costs memory in addition to it: `4 d + 2 d` bytes per vector for f16,
//! `4 d + d + 4` for int8 (see [`VectorStorage`], [`DenseIndex::vector_bytes`]).
//!
//! # Kernels
//!
//! The dot products are written per stored format and chosen at run time for the CPU: f32 with
//! AVX-512F or AVX2 + FMA, f16 with AVX-512F or F16C + FMA conversions, int8 with AVX-512 VNNI
//! (`vpdpbusd`) or AVX2 (`vpmaddubsw` + `vpmaddwd`), each with a portable fallback it is tested
//! against (hand-written rather than a SIMD crate: the kernels are short, and the model-free
//! core stays free of `pulp`). They live with the crate's other kernels, in `simd::dot` (f32)
//! and `simd::dense` (f16, int8).

mod compact;

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, RwLock};

use ndarray::{Array2, Axis};
use rayon::prelude::*;

use super::bm25::check_capacity;
use super::{Retriever, SearchQuery};
use crate::rerankers::VectorSource;
use crate::simd::dense::Kernels;
use crate::{Document, Embedder, Error, Hit, Result};
pub use compact::VectorStorage;
use compact::{quantize, Compact};

/// Rows scored per rayon task.
const CHUNK_ROWS: usize = 4096;

/// Documents per call to the embedder when indexing.
const EMBED_BATCH: usize = 256;

#[derive(Default)]
struct Store {
    docs: Vec<Arc<Document>>,
    /// One L2-normalized embedding per row, aligned with `docs`, row-major.
    matrix: Vec<f32>,
    /// What the query scans when it is not `matrix`.
    storage: VectorStorage,
    /// The compact copy of `matrix` for `storage` (rows aligned).
    compact: Compact,
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

/// An in-memory dense index: embeddings in one contiguous matrix, top-k by cosine.
///
/// Documents are embedded as `title + " " + text` (see [`Document::full_text`]). All methods
/// take `&self`; the index can be updated while it is shared across threads. Ties go to the
/// document added first. By default ([`VectorStorage::F32`]) the scan is exact; see
/// [`DenseIndex::with_storage`] for the compact storages.
pub struct DenseIndex {
    embedder: Arc<dyn Embedder>,
    dim: usize,
    store: RwLock<Store>,
}

impl DenseIndex {
    /// An empty index fed by `embedder`, storing f32 vectors only (exact scan).
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        DenseIndex::with_storage(embedder, VectorStorage::F32)
    }

    /// An empty index fed by `embedder` that scans the vectors in `storage` (f16 or int8 with
    /// exact f32 rescoring of the best `k x rescore`; see [`VectorStorage`]).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use rerank::{DenseIndex, Embedder};
    /// # use rerank::recall::VectorStorage;
    /// # fn f(embedder: Arc<dyn Embedder>) {
    /// let index = DenseIndex::with_storage(embedder, VectorStorage::Int8 { rescore: 8 });
    /// # }
    /// ```
    pub fn with_storage(embedder: Arc<dyn Embedder>, storage: VectorStorage) -> Self {
        let dim = embedder.dim();
        DenseIndex {
            embedder,
            dim,
            store: RwLock::new(Store {
                storage,
                compact: Compact::new(storage),
                ..Store::default()
            }),
        }
    }

    /// An index over precomputed embeddings (one row per document, in order).
    /// `embedder` is still needed to embed queries. The storage is f32; call
    /// [`DenseIndex::set_storage`] for a compact one.
    pub fn from_embeddings(
        embedder: Arc<dyn Embedder>,
        docs: Vec<Document>,
        embeddings: Array2<f32>,
    ) -> Result<Self> {
        let index = DenseIndex::new(embedder);
        index.insert(docs, embeddings)?;
        Ok(index)
    }

    /// Switches the scanned storage: builds the compact copy of every stored vector (or drops
    /// it, for [`VectorStorage::F32`]). Only a change of `rescore` keeps the copy as it is.
    pub fn set_storage(&self, storage: VectorStorage) {
        let mut store = self.write();
        let same_kind = std::mem::discriminant(&store.storage) == std::mem::discriminant(&storage);
        if !same_kind {
            // drop the old copy before building the new one
            store.compact = Compact::None;
            store.compact = Compact::build(storage, &store.matrix, self.dim);
        }
        store.storage = storage;
    }

    /// The scanned storage.
    pub fn storage(&self) -> VectorStorage {
        self.read().storage
    }

    /// Bytes held by the stored vectors: the f32 matrix plus the compact copy, if any (not
    /// counting spare capacity, documents or maps).
    pub fn vector_bytes(&self) -> usize {
        let store = self.read();
        4 * store.matrix.len() + store.compact.bytes()
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
        let store = &mut *store;
        store.matrix.reserve(keep.len() * dim);
        store.compact.reserve(keep.len(), dim);
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
            store.compact.push(&store.matrix[start..]);
            if let Some(d) = docs[i].take() {
                let r = store.docs.len();
                store.rows.insert(d.id.clone(), r);
                store.by_text.insert(text_hash(&d.full_text()), r);
                store.docs.push(Arc::new(d));
            }
        }
        Ok(())
    }

    /// The top-k rows by cosine against a query vector: an exact scan of the f32 vectors, or a
    /// scan of the compact copy for the best `k x rescore` and their exact rescoring.
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
        let (dim, rows) = (self.dim, store.docs.len());
        // never more than the rows: `k` sizes the scan's heaps
        let k = k.min(rows);
        let candidates = store.storage.candidates(k).min(rows);
        let kernels = Kernels::detect();
        let dot = crate::simd::dot::kernel();
        let exact = |_: usize, row: &[f32]| dot(row, &q);
        let best = match &store.compact {
            // a compact scan that keeps every row would only add the rescoring
            _ if candidates >= rows => top_rows(&store.matrix, dim, k, exact),
            Compact::None => top_rows(&store.matrix, dim, k, exact),
            Compact::F16(bits) => {
                let found = top_rows(bits, dim, candidates, |_, row| (kernels.f16)(row, &q));
                rescore(&store.matrix, dim, &q, found, k)
            }
            Compact::Int8 { codes, scales } => {
                let mut q_codes = Vec::with_capacity(dim);
                let q_scale = quantize(&q, &mut q_codes);
                let found = top_rows(codes, dim, candidates, |r, row| {
                    (kernels.i8)(row, &q_codes) as f32 * (scales[r] * q_scale)
                });
                rescore(&store.matrix, dim, &q, found, k)
            }
        };
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
    store.compact.remove(row, dim);
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

/// A score with NaN ranked last.
fn rankable(s: f32) -> f32 {
    if s.is_nan() {
        f32::NEG_INFINITY
    } else {
        s
    }
}

/// The best `k` rows of `data` (row-major, `dim` columns) by `score(row index, row)`, best
/// first; ties go to the lower row. NaN scores rank last. `k` must not exceed the rows (it
/// sizes the heaps).
fn top_rows<T, F>(data: &[T], dim: usize, k: usize, score: F) -> Vec<(usize, f32)>
where
    T: Sync,
    F: Fn(usize, &[T]) -> f32 + Sync,
{
    if dim == 0 || k == 0 {
        return Vec::new();
    }
    let mut best: Vec<Scored> = data
        .par_chunks(CHUNK_ROWS * dim)
        .enumerate()
        .flat_map_iter(|(c, chunk)| {
            let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(k + 1);
            for (r, row) in chunk.chunks_exact(dim).enumerate() {
                let row_index = c * CHUNK_ROWS + r;
                let entry = Scored(rankable(score(row_index, row)), row_index);
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

/// The best `k` of `candidates` by exact f32 dot product with `q`, best first (ties to the
/// lower row, NaN last, as [`top_rows`]).
fn rescore(
    matrix: &[f32],
    dim: usize,
    q: &[f32],
    candidates: Vec<(usize, f32)>,
    k: usize,
) -> Vec<(usize, f32)> {
    let mut best: Vec<Scored> = candidates
        .into_iter()
        .map(|(r, _)| {
            let row = &matrix[r * dim..(r + 1) * dim];
            Scored(rankable(crate::simd::dot::dot_f32(row, q)), r)
        })
        .collect();
    best.sort();
    best.truncate(k);
    best.into_iter().map(|Scored(s, r)| (r, s)).collect()
}

impl Retriever for DenseIndex {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        match &query.embedding {
            Some(e) => self.top_k(e, k),
            None => {
                let e = self.embedder.embed_query(&query.text)?;
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
        fn embed_as(&self, texts: &[&str], _role: crate::Role) -> Result<Array2<f32>> {
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
        letters_index(VectorStorage::F32)
    }

    /// Four documents over the letters a, b and e, with `storage`.
    fn letters_index(storage: VectorStorage) -> DenseIndex {
        let idx = DenseIndex::with_storage(Arc::new(Letters), storage);
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
        let dot = crate::simd::dot::kernel();
        for k in [1, 10, 100, rows] {
            let got = top_rows(&m, dim, k, |_, r| dot(r, &q));
            assert_eq!(got, all[..k].to_vec(), "{k}");
        }
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

    /// Queries come as embeddings; documents only through `from_embeddings`.
    struct Dim(usize);
    impl Embedder for Dim {
        fn embed_as(&self, texts: &[&str], _role: crate::Role) -> Result<Array2<f32>> {
            Ok(Array2::zeros((texts.len(), self.0)))
        }
        fn dim(&self) -> usize {
            self.0
        }
    }

    /// Deterministic values in [-1, 1) (splitmix64).
    fn uniform(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    const STORAGES: [VectorStorage; 5] = [
        VectorStorage::F32,
        VectorStorage::f16(),
        VectorStorage::int8(),
        VectorStorage::F16 { rescore: 1 },
        VectorStorage::Int8 { rescore: 0 },
    ];

    fn random_index(rows: usize, dim: usize, storage: VectorStorage) -> DenseIndex {
        let docs = (0..rows)
            .map(|i| Document::new(format!("d{i}"), ""))
            .collect();
        let m = Array2::from_shape_vec((rows, dim), uniform(7, rows * dim)).unwrap();
        let idx = DenseIndex::from_embeddings(Arc::new(Dim(dim)), docs, m).unwrap();
        idx.set_storage(storage);
        idx
    }

    fn search(idx: &DenseIndex, q: Vec<f32>, k: usize) -> Vec<(String, u32)> {
        let hits = idx.retrieve(&SearchQuery::new("").with_embedding(q), k);
        let hits = hits.unwrap();
        hits.iter()
            .map(|h| (h.id().to_string(), h.score.to_bits()))
            .collect()
    }

    #[test]
    fn every_storage_gives_the_exact_top_k_on_small_sets() {
        for storage in STORAGES {
            let idx = letters_index(storage);
            assert_eq!(idx.storage(), storage);
            for (q, k) in [("a", 3), ("ab", 2), ("e", 1), ("abcde", 4)] {
                let want = index().retrieve(&SearchQuery::new(q), k).unwrap();
                let got = idx.retrieve(&SearchQuery::new(q), k).unwrap();
                let pairs = |h: &[Hit]| -> Vec<(String, u32)> {
                    h.iter()
                        .map(|h| (h.id().to_string(), h.score.to_bits()))
                        .collect()
                };
                assert_eq!(pairs(&got), pairs(&want), "{storage:?} {q}");
            }
        }
    }

    #[test]
    fn compact_scans_return_exact_f32_scores() {
        // 13 dimensions: not a multiple of any SIMD width; 3 chunks of rows
        let (rows, dim) = (2 * CHUNK_ROWS + 100, 13);
        let exact = random_index(rows, dim, VectorStorage::F32);
        for storage in &STORAGES[1..] {
            let idx = random_index(rows, dim, *storage);
            let mut same = 0;
            for i in 0..20 {
                let q = uniform(100 + i, dim);
                let all: HashMap<String, u32> =
                    search(&exact, q.clone(), rows).into_iter().collect();
                let got = search(&idx, q.clone(), 10);
                assert_eq!(got.len(), 10);
                // every returned score is the exact (f32 index) score of that document
                for (id, bits) in &got {
                    assert_eq!(all[id], *bits, "{storage:?} {id}");
                }
                // best first
                assert!(got
                    .windows(2)
                    .all(|w| f32::from_bits(w[0].1) >= f32::from_bits(w[1].1)));
                same += usize::from(got == search(&exact, q, 10));
            }
            // the default rescore finds the exact top 10; rescore 1 only gets exact scores
            if matches!(
                storage,
                VectorStorage::F16 { rescore: 4 } | VectorStorage::Int8 { rescore: 8 }
            ) {
                assert_eq!(same, 20, "{storage:?}");
            }
        }
    }

    #[test]
    fn edge_cases_in_every_storage() {
        for storage in STORAGES {
            // empty index
            let idx = DenseIndex::with_storage(Arc::new(Dim(3)), storage);
            assert!(search(&idx, vec![1.0, 0.0, 0.0], 5).is_empty());
            // k larger than the index, and usize::MAX
            let idx = random_index(30, 17, storage);
            let q = uniform(3, 17);
            let all = search(&idx, q.clone(), 1000);
            assert_eq!(all.len(), 30);
            assert_eq!(search(&idx, q.clone(), usize::MAX), all);
            assert_eq!(
                all,
                search(&random_index(30, 17, VectorStorage::F32), q.clone(), 30)
            );
            // removed documents never come back; the others keep their exact scores
            let top = all[0].0.clone();
            assert!(idx.remove(&top));
            let after = search(&idx, q.clone(), 1000);
            assert_eq!(after, all[1..].to_vec(), "{storage:?}");
            assert!(idx.vector(&top).is_none());
            // dimension 1: the sign decides, ties to the first added
            let docs = (0..5).map(|i| Document::new(i.to_string(), "")).collect();
            let m = Array2::from_shape_vec((5, 1), vec![0.5, -2.0, 3.0, 0.0, 1.0]).unwrap();
            let idx = DenseIndex::from_embeddings(Arc::new(Dim(1)), docs, m).unwrap();
            idx.set_storage(storage);
            let ids: Vec<String> = search(&idx, vec![2.0], 5)
                .into_iter()
                .map(|h| h.0)
                .collect();
            assert_eq!(ids, ["0", "2", "4", "3", "1"], "{storage:?}");
            let ids: Vec<String> = search(&idx, vec![-1.0], 2)
                .into_iter()
                .map(|h| h.0)
                .collect();
            assert_eq!(ids, ["1", "3"], "{storage:?}");
        }
    }

    #[test]
    fn compact_copy_follows_add_update_remove() {
        let dim = 40;
        let rows = 300;
        for storage in &STORAGES[1..3] {
            let idx = random_index(rows, dim, *storage);
            let reference = random_index(rows, dim, VectorStorage::F32);
            for i in (0..rows).step_by(7) {
                assert!(idx.remove(&format!("d{i}")));
                assert!(reference.remove(&format!("d{i}")));
            }
            // replace some documents through the embedder-free path: remove, then re-insert
            let docs: Vec<Document> = (0..20)
                .map(|i| Document::new(format!("d{}", i * 3), ""))
                .collect();
            let m = Array2::from_shape_vec((20, dim), uniform(99, 20 * dim)).unwrap();
            idx.insert(docs.clone(), m.clone()).unwrap();
            reference.insert(docs, m).unwrap();
            assert_eq!(idx.len(), reference.len());
            assert_eq!(
                idx.vector_bytes(),
                idx.len() * storage.bytes_per_vector(dim),
                "{storage:?}"
            );
            for i in 0..10 {
                let q = uniform(500 + i, dim);
                assert_eq!(
                    search(&idx, q.clone(), 10),
                    search(&reference, q, 10),
                    "{storage:?}"
                );
            }
            // switching storage rebuilds or drops the copy; results stay exact
            idx.set_storage(VectorStorage::F32);
            assert_eq!(idx.vector_bytes(), idx.len() * 4 * dim);
            idx.set_storage(*storage);
            assert_eq!(
                idx.vector_bytes(),
                idx.len() * storage.bytes_per_vector(dim)
            );
            let q = uniform(42, dim);
            assert_eq!(search(&idx, q.clone(), 10), search(&reference, q, 10));
        }
    }

    #[test]
    fn compact_storage_keeps_vectors_and_vector_source() {
        let exact = index();
        let idx = letters_index(VectorStorage::int8());
        assert_eq!(idx.vector("3"), exact.vector("3"));
        assert_eq!(
            idx.vectors(&["aabb", "zzz"]).unwrap(),
            exact.vectors(&["aabb", "zzz"]).unwrap()
        );
        fn shared<T: Send + Sync>(_: &T) {}
        shared(&idx);
    }

    #[test]
    fn rows_that_do_not_normalize_rank_last() {
        for storage in STORAGES {
            let docs = (0..4).map(|i| Document::new(i.to_string(), "")).collect();
            let m = Array2::from_shape_vec(
                (4, 2),
                vec![f32::NAN, 1.0, 1.0, 0.0, f32::INFINITY, 1.0, 0.0, 0.0],
            )
            .unwrap();
            let idx = DenseIndex::from_embeddings(Arc::new(Dim(2)), docs, m).unwrap();
            idx.set_storage(storage);
            let got = search(&idx, vec![1.0, 1.0], 4);
            let ids: Vec<&str> = got.iter().map(|h| h.0.as_str()).collect();
            assert_eq!(ids, ["1", "3", "0", "2"], "{storage:?}");
            // k 2 with rescore 1: the compact scan itself must rank the NaN rows last
            assert_eq!(
                search(&idx, vec![1.0, 1.0], 2),
                got[..2].to_vec(),
                "{storage:?}"
            );
            assert!(search(&idx, vec![f32::NAN, 1.0], 4).is_empty());
        }
    }
}
