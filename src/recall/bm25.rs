//! In-memory BM25 (Lucene's formula) over an [`Analyzer`].

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Retriever, SearchQuery};
use crate::document::cmp_score_desc;
use crate::text::{Analyzer, EnglishAnalyzer};
use crate::{Document, Error, Hit, Result};

/// BM25 parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bm25Params {
    /// Term-frequency saturation (Anserini's default 0.9).
    pub k1: f32,
    /// Length normalization (Anserini's default 0.4).
    pub b: f32,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 0.9, b: 0.4 }
    }
}

impl Bm25Params {
    /// Checks `k1 >= 0` and `0 <= b <= 1`, both finite.
    pub fn validate(&self) -> Result<()> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(Error::Config(format!(
                "BM25 k1 must be >= 0, got {}",
                self.k1
            )));
        }
        if !(self.b.is_finite() && (0.0..=1.0).contains(&self.b)) {
            return Err(Error::Config(format!(
                "BM25 b must be in [0, 1], got {}",
                self.b
            )));
        }
        Ok(())
    }
}

/// Lucene's BM25 for one collection: the statistics every term score needs. The in-memory
/// index and the SQLite store both score through it, so their floats agree to the last bit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scorer {
    params: Bm25Params,
    n: f32,
    avgdl: f32,
}

impl Scorer {
    /// The scorer for `live` documents of `total_len` analyzed terms in all.
    pub(crate) fn new(params: Bm25Params, live: usize, total_len: u64) -> Self {
        let n = live as f32;
        Scorer {
            params,
            n,
            avgdl: total_len as f32 / n,
        }
    }

    /// `ln(1 + (N - df + 0.5) / (df + 0.5))`.
    pub(crate) fn idf(&self, df: usize) -> f32 {
        let df = df as f32;
        (1.0 + (self.n - df + 0.5) / (df + 0.5)).ln()
    }

    /// One term's contribution to a document of analyzed length `dl` holding it `tf` times.
    pub(crate) fn term(&self, idf: f32, tf: u32, dl: u32) -> f32 {
        let Bm25Params { k1, b } = self.params;
        let tf = tf as f32;
        let norm = if self.avgdl > 0.0 {
            k1 * (1.0 - b + b * dl as f32 / self.avgdl)
        } else {
            k1
        };
        idf * tf / (tf + norm)
    }
}

/// The best `k` of the `touched` slots by score, best first; ties go to the lower slot (the
/// document added first). Slots whose score is not positive are dropped.
pub(crate) fn top_slots(scores: &[f32], mut touched: Vec<u32>, k: usize) -> Vec<u32> {
    touched.retain(|&s| scores[s as usize] > 0.0);
    let by_score =
        |a: &u32, b: &u32| cmp_score_desc(scores[*a as usize], scores[*b as usize]).then(a.cmp(b));
    if k == 0 {
        return Vec::new();
    }
    if k < touched.len() {
        touched.select_nth_unstable_by(k - 1, by_score);
        touched.truncate(k);
    }
    touched.sort_by(by_score);
    touched
}

#[derive(Default)]
struct Inner {
    /// Document slots; removed documents leave `None`.
    docs: Vec<Option<Arc<Document>>>,
    /// Analyzed length of each slot.
    lengths: Vec<u32>,
    /// Distinct term ids of each slot (to unindex it).
    doc_terms: Vec<Vec<u32>>,
    slots: HashMap<String, u32>,
    vocab: HashMap<String, u32>,
    /// Per term id: (slot, term frequency), sorted by slot.
    postings: Vec<Vec<(u32, u32)>>,
    total_len: u64,
    live: usize,
}

impl Inner {
    fn remove(&mut self, id: &str) -> bool {
        let Some(slot) = self.slots.remove(id) else {
            return false;
        };
        let s = slot as usize;
        for &t in &self.doc_terms[s] {
            let list = &mut self.postings[t as usize];
            if let Ok(pos) = list.binary_search_by_key(&slot, |p| p.0) {
                list.remove(pos);
            }
        }
        self.doc_terms[s] = Vec::new();
        self.total_len -= u64::from(self.lengths[s]);
        self.lengths[s] = 0;
        self.docs[s] = None;
        self.live -= 1;
        true
    }

    fn insert(&mut self, doc: Document, terms: Vec<String>) {
        self.remove(&doc.id);
        let slot = self.docs.len() as u32;
        let mut tf: HashMap<u32, u32> = HashMap::new();
        for term in terms.iter() {
            let id = match self.vocab.get(term.as_str()) {
                Some(&id) => id,
                None => {
                    let id = self.vocab.len() as u32;
                    self.vocab.insert(term.clone(), id);
                    self.postings.push(Vec::new());
                    id
                }
            };
            *tf.entry(id).or_insert(0) += 1;
        }
        let mut distinct: Vec<u32> = tf.keys().copied().collect();
        distinct.sort_unstable();
        for &t in &distinct {
            self.postings[t as usize].push((slot, tf[&t]));
        }
        self.slots.insert(doc.id.clone(), slot);
        self.docs.push(Some(Arc::new(doc)));
        self.lengths.push(terms.len() as u32);
        self.doc_terms.push(distinct);
        self.total_len += terms.len() as u64;
        self.live += 1;
    }

    /// Drops the slots of removed and replaced documents once they outnumber the live ones
    /// (and a small floor), renumbering the rest in order: updates never grow the index
    /// without bound, and the tie order (slot order) is kept.
    fn compact_if_sparse(&mut self) {
        let dead = self.docs.len() - self.live;
        if dead < COMPACT_MIN_DEAD || dead <= self.live {
            return;
        }
        let mut renumber = vec![u32::MAX; self.docs.len()];
        let mut next = 0u32;
        for (old, doc) in self.docs.iter().enumerate() {
            if doc.is_some() {
                renumber[old] = next;
                next += 1;
            }
        }
        let old_docs = std::mem::take(&mut self.docs);
        let old_lengths = std::mem::take(&mut self.lengths);
        let old_terms = std::mem::take(&mut self.doc_terms);
        for ((doc, len), terms) in old_docs.into_iter().zip(old_lengths).zip(old_terms) {
            if doc.is_some() {
                self.docs.push(doc);
                self.lengths.push(len);
                self.doc_terms.push(terms);
            }
        }
        for list in &mut self.postings {
            for p in list.iter_mut() {
                p.0 = renumber[p.0 as usize];
            }
        }
        for slot in self.slots.values_mut() {
            *slot = renumber[*slot as usize];
        }
    }
}

/// Removed slots below this count are never compacted (compaction rewrites every posting).
const COMPACT_MIN_DEAD: usize = 1024;

/// An in-memory BM25 index with Lucene's scoring.
///
/// `score(q, d) = sum over query terms t of idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))`
/// with `idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`, where `dl` is the analyzed length of
/// `title + " " + text` and a term repeated in the query counts once per occurrence (as in a
/// Lucene boolean query). This is Lucene's `BM25Similarity` (>= 8, without the constant
/// `k1 + 1` factor) with exact document lengths. Top-k is exact; ties go to the document added
/// first.
///
/// All methods take `&self`; documents can be added, updated and removed while the index is
/// shared across threads.
///
/// ```
/// use rerank::{Bm25Index, Document, Retriever};
/// use rerank::recall::SearchQuery;
/// let index = Bm25Index::new();
/// index.add(vec![
///     Document::new("a", "BM25 ranks documents by term frequency"),
///     Document::new("b", "dense retrieval uses embeddings"),
/// ]);
/// let hits = index.retrieve(&SearchQuery::new("ranking documents"), 10).unwrap();
/// assert_eq!(hits[0].id(), "a");
/// ```
pub struct Bm25Index {
    params: Bm25Params,
    analyzer: Box<dyn Analyzer>,
    inner: RwLock<Inner>,
}

impl Default for Bm25Index {
    fn default() -> Self {
        Bm25Index::new()
    }
}

impl Bm25Index {
    /// An empty index with the default parameters (k1 0.9, b 0.4) and [`EnglishAnalyzer`].
    pub fn new() -> Self {
        Bm25Index {
            params: Bm25Params::default(),
            analyzer: Box::new(EnglishAnalyzer::default()),
            inner: RwLock::new(Inner::default()),
        }
    }

    /// An empty index with the given parameters, checked.
    pub fn with_params(params: Bm25Params) -> Result<Self> {
        params.validate()?;
        Ok(Bm25Index {
            params,
            ..Bm25Index::new()
        })
    }

    /// Replaces the analyzer (builder style; use before adding documents).
    pub fn analyzer(mut self, analyzer: impl Analyzer + 'static) -> Self {
        self.analyzer = Box::new(analyzer);
        self
    }

    /// The parameters.
    pub fn params(&self) -> Bm25Params {
        self.params
    }

    /// Adds documents; a document whose id is already indexed replaces the old one.
    pub fn add(&self, docs: impl IntoIterator<Item = Document>) {
        let docs: Vec<Document> = docs.into_iter().collect();
        let analyzed: Vec<(Document, Vec<String>)> = docs
            .into_par_iter()
            .map(|d| {
                let terms = self.analyzer.analyze(&d.full_text());
                (d, terms)
            })
            .collect();
        let mut inner = self.write();
        for (doc, terms) in analyzed {
            inner.insert(doc, terms);
        }
        inner.compact_if_sparse();
    }

    /// Replaces (or adds) one document.
    pub fn update(&self, doc: Document) {
        self.add([doc]);
    }

    /// Removes a document by id; returns whether it was present.
    pub fn remove(&self, id: &str) -> bool {
        let mut inner = self.write();
        let removed = inner.remove(id);
        inner.compact_if_sparse();
        removed
    }

    /// Slots held, live or not (a test hook: compaction keeps it within twice the live count
    /// plus a small floor).
    #[doc(hidden)]
    pub fn slots(&self) -> usize {
        self.read().docs.len()
    }

    /// The document with this id, if indexed.
    pub fn get(&self, id: &str) -> Option<Arc<Document>> {
        let inner = self.read();
        let slot = *inner.slots.get(id)?;
        inner.docs[slot as usize].clone()
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.read().live
    }

    /// Whether the index holds no documents.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Scores every document matching `query` and returns the best `k`, best first.
    pub fn search(&self, query: &str, k: usize) -> Vec<Hit> {
        let terms = self.analyzer.analyze(query);
        let inner = self.read();
        if k == 0 || inner.live == 0 || terms.is_empty() {
            return Vec::new();
        }
        let scorer = Scorer::new(self.params, inner.live, inner.total_len);
        let mut scores = vec![0f32; inner.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        for term in &terms {
            let Some(&t) = inner.vocab.get(term) else {
                continue;
            };
            let postings = &inner.postings[t as usize];
            let idf = scorer.idf(postings.len());
            for &(slot, tf) in postings {
                let s = &mut scores[slot as usize];
                if *s == 0.0 {
                    touched.push(slot);
                }
                *s += scorer.term(idf, tf, inner.lengths[slot as usize]);
            }
        }
        top_slots(&scores, touched, k)
            .into_iter()
            .filter_map(|slot| {
                let doc = inner.docs[slot as usize].clone()?;
                let s = scores[slot as usize];
                Some(Hit::new(doc, s).with_bm25(s))
            })
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl Retriever for Bm25Index {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        Ok(self.search(&query.text, k))
    }

    fn name(&self) -> &str {
        "bm25"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whitespace analyzer so the hand computation is obvious.
    struct Ws;
    impl Analyzer for Ws {
        fn analyze(&self, text: &str) -> Vec<String> {
            text.split_whitespace().map(str::to_string).collect()
        }
    }

    fn tiny() -> Bm25Index {
        let idx = Bm25Index::with_params(Bm25Params { k1: 1.2, b: 0.75 })
            .unwrap()
            .analyzer(Ws);
        idx.add(vec![
            Document::new("d1", "apple apple banana"),
            Document::new("d2", "banana cherry"),
            Document::new("d3", "cherry cherry cherry date fig"),
        ]);
        idx
    }

    /// The formula written out independently, in f64.
    fn expected(tf: f64, dl: f64, df: f64) -> f64 {
        let (n, avgdl, k1, b) = (3.0, 10.0 / 3.0, 1.2, 0.75);
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        idf * tf / (tf + k1 * (1.0 - b + b * dl / avgdl))
    }

    #[test]
    fn scores_match_the_hand_computed_formula() {
        let idx = tiny();
        let hits = idx.search("apple cherry", 10);
        let got: HashMap<&str, f32> = hits.iter().map(|h| (h.id(), h.score)).collect();
        let d1 = expected(2.0, 3.0, 1.0);
        let d2 = expected(1.0, 2.0, 2.0);
        let d3 = expected(3.0, 5.0, 2.0);
        assert_eq!(got.len(), 3);
        assert!(
            (got["d1"] as f64 - d1).abs() < 1e-5,
            "{} vs {d1}",
            got["d1"]
        );
        assert!((got["d2"] as f64 - d2).abs() < 1e-5);
        assert!((got["d3"] as f64 - d3).abs() < 1e-5);
        assert_eq!(hits[0].id(), "d1");
        assert_eq!(hits[0].bm25_score, Some(hits[0].score));
        // a repeated query term counts twice
        let twice = idx.search("apple apple", 1);
        assert!((twice[0].score as f64 - 2.0 * d1).abs() < 1e-5);
    }

    #[test]
    fn update_and_remove_change_statistics() {
        let idx = tiny();
        assert!(idx.remove("d3"));
        assert!(!idx.remove("d3"));
        assert_eq!(idx.len(), 2);
        // N = 2, avgdl = 2.5, cherry df = 1 in d2 (dl 2)
        let hits = idx.search("cherry", 10);
        assert_eq!(hits.len(), 1);
        let idf = (1.0f64 + (2.0 - 1.0 + 0.5) / 1.5).ln();
        let want = idf * 1.0 / (1.0 + 1.2 * (1.0 - 0.75 + 0.75 * 2.0 / 2.5));
        assert!((hits[0].score as f64 - want).abs() < 1e-5);
        idx.update(Document::new("d2", "fig"));
        assert!(idx.search("cherry", 10).is_empty());
        assert_eq!(idx.search("fig", 10)[0].id(), "d2");
        assert_eq!(idx.get("d2").unwrap().text, "fig");
    }

    #[test]
    fn exact_top_k_with_ties_in_insertion_order() {
        let idx = Bm25Index::new();
        idx.add((0..50).map(|i| Document::new(format!("{i}"), "same words here")));
        let hits = idx.search("words", 5);
        let ids: Vec<_> = hits.iter().map(|h| h.id().to_string()).collect();
        assert_eq!(ids, ["0", "1", "2", "3", "4"]);
        assert!(idx.search("words", 0).is_empty());
        assert!(idx.search("the", 5).is_empty());
        assert!(Bm25Index::new().search("words", 5).is_empty());
    }

    #[test]
    fn title_is_indexed() {
        let idx = Bm25Index::new();
        idx.add(vec![
            Document::new("a", "body only").with_title("Zebra"),
            Document::new("b", "another body"),
        ]);
        assert_eq!(idx.search("zebra", 5)[0].id(), "a");
    }

    #[test]
    fn invalid_params() {
        assert!(Bm25Index::with_params(Bm25Params { k1: -1.0, b: 0.4 }).is_err());
        assert!(Bm25Index::with_params(Bm25Params { k1: 1.0, b: 1.5 }).is_err());
        assert!(Bm25Index::with_params(Bm25Params {
            k1: f32::NAN,
            b: 0.4
        })
        .is_err());
    }
}
