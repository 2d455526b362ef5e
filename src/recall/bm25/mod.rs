//! In-memory BM25 (Lucene's formula) over an [`Analyzer`].
//!
//! - `mod.rs`: the parameters, the scorer shared with the SQLite store, [`Bm25Index`];
//! - `postings.rs`: compressed posting lists (bit-packed blocks with their impacts);
//! - `build.rs`: parallel analysis of a batch into segments, merged in order;
//! - `search.rs`: top-k by block-max MaxScore over windows, and the exhaustive reference.

pub(crate) mod build;
mod postings;
mod search;

use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use super::{Retriever, SearchQuery};
use crate::text::{Analyzer, EnglishAnalyzer};
use crate::{Document, Error, Hit, Result};

use postings::PostingList;

/// A fast hash map (foldhash) for the vocabulary and the id table.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

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
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn term(&self, idf: f32, tf: u32, dl: u32) -> f32 {
        Self::term_with_norm(idf, tf, self.norm(dl))
    }

    /// The length normalization `k1 * (1 - b + b * dl / avgdl)` of a document of length `dl`.
    pub(crate) fn norm(&self, dl: u32) -> f32 {
        let Bm25Params { k1, b } = self.params;
        if self.avgdl > 0.0 {
            k1 * (1.0 - b + b * dl as f32 / self.avgdl)
        } else {
            k1
        }
    }

    /// [`Scorer::term`] with the length normalization already computed (the same floats).
    pub(crate) fn term_with_norm(idf: f32, tf: u32, norm: f32) -> f32 {
        let tf = tf as f32;
        idf * tf / (tf + norm)
    }
}

/// The most documents (slots) an in-memory index can number: slots are `u32`.
pub(crate) const MAX_SLOTS: u64 = u32::MAX as u64;

/// Checks that `adding` more slots fit next to `held` (at most [`MAX_SLOTS`] in all), so slot
/// numbers never wrap: [`Error::CapacityExceeded`] otherwise.
pub(crate) fn check_capacity(index: &'static str, held: usize, adding: usize) -> Result<()> {
    let total = (held as u64).checked_add(adding as u64);
    match total {
        Some(t) if t <= MAX_SLOTS => Ok(()),
        _ => Err(Error::CapacityExceeded {
            index,
            limit: MAX_SLOTS,
            held: held as u64,
            adding: adding as u64,
        }),
    }
}

#[derive(Default)]
struct Inner {
    /// Document slots; removed documents leave `None` (their postings stay, skipped, until
    /// compaction).
    docs: Vec<Option<Arc<Document>>>,
    /// Analyzed length of each slot.
    lengths: Vec<u32>,
    /// Each slot's length as a one-byte code whose value is at most the length
    /// ([`search::length_code`]): a compact table for the score bounds of pruning.
    length_codes: Vec<u8>,
    /// Removed slots, one bit each.
    dead: Vec<u64>,
    /// The longest analyzed length held.
    max_len: u32,
    slots: FastMap<String, u32>,
    vocab: FastMap<String, u32>,
    /// Per term id, its postings in slot order (removed slots included).
    postings: Vec<PostingList>,
    /// Per term id, the live documents holding it.
    df: Vec<u32>,
    total_len: u64,
    live: usize,
}

impl Inner {
    /// Removes the document `id`; its terms (to update the document frequencies) are found by
    /// analyzing its text again.
    fn remove(&mut self, id: &str, analyzer: &dyn Analyzer) -> bool {
        let Some(slot) = self.slots.remove(id) else {
            return false;
        };
        let s = slot as usize;
        if let Some(doc) = self.docs[s].take() {
            let mut terms: Vec<u32> = analyzer
                .analyze(&doc.full_text())
                .iter()
                .filter_map(|t| self.vocab.get(t.as_str()).copied())
                .collect();
            terms.sort_unstable();
            terms.dedup();
            for t in terms {
                self.df[t as usize] -= 1;
            }
        }
        self.total_len -= u64::from(self.lengths[s]);
        self.live -= 1;
        self.dead[s / 64] |= 1 << (s % 64);
        true
    }

    /// The term id of `term`, created if new.
    fn term_id(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.vocab.get(term) {
            return id;
        }
        let id = self.postings.len() as u32;
        self.vocab.insert(term.to_string(), id);
        self.postings.push(PostingList::default());
        self.df.push(0);
        id
    }

    /// Appends an analyzed segment (documents in order, each with its distinct terms).
    fn append(&mut self, segment: build::Segment) {
        let base = self.docs.len() as u32;
        let build::Segment { docs, analyzed } = segment;
        let build::Analyzed {
            lengths,
            terms,
            offsets,
            postings,
        } = analyzed;
        for (doc, &len) in docs.into_iter().zip(&lengths) {
            let slot = self.docs.len() as u32;
            self.slots.insert(doc.id.clone(), slot);
            self.docs.push(Some(Arc::new(doc)));
            self.lengths.push(len);
            self.length_codes.push(search::length_code(len));
            if self.docs.len() > self.dead.len() * 64 {
                self.dead.push(0);
            }
            self.max_len = self.max_len.max(len);
            self.total_len += u64::from(len);
            self.live += 1;
        }
        for (local_term, term) in terms.iter().enumerate() {
            let t = self.term_id(term) as usize;
            let list = &postings[offsets[local_term] as usize..offsets[local_term + 1] as usize];
            self.df[t] += list.len() as u32;
            let target = &mut self.postings[t];
            for &(local, tf) in list {
                target.push(base + local, tf, &self.lengths);
            }
        }
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
        self.length_codes.clear();
        self.max_len = 0;
        for (doc, len) in old_docs.into_iter().zip(old_lengths) {
            if doc.is_some() {
                self.docs.push(doc);
                self.lengths.push(len);
                self.length_codes.push(search::length_code(len));
                self.max_len = self.max_len.max(len);
            }
        }
        self.dead = vec![0; self.docs.len().div_ceil(64)];
        let lengths = &self.lengths;
        for list in &mut self.postings {
            let mut fresh = PostingList::default();
            list.for_each(|slot, tf| {
                let new = renumber[slot as usize];
                if new != u32::MAX {
                    fresh.push(new, tf, lengths);
                }
            });
            *list = fresh;
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
/// Postings are compressed (bit-packed blocks of 128, see `postings.rs`) and top-k skips the
/// documents that cannot reach it (block-max MaxScore, as Lucene and tantivy do): the hits and
/// their scores are bit for bit those of scoring every posting
/// ([`Bm25Index::search_exhaustive`]). Batches are analyzed in parallel (rayon).
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
/// ])?;
/// let hits = index.retrieve(&SearchQuery::new("ranking documents"), 10)?;
/// assert_eq!(hits[0].id(), "a");
/// # Ok::<(), rerank::Error>(())
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

    /// Adds documents; a document whose id is already indexed replaces the old one (and
    /// within one batch, the last document with an id wins).
    ///
    /// The batch is analyzed in parallel, in segments merged in order, and is visible to
    /// searches all at once. [`Error::CapacityExceeded`] (nothing added) when the index would
    /// hold more than `u32::MAX` slots.
    pub fn add(&self, docs: impl IntoIterator<Item = Document>) -> Result<()> {
        let docs = build::last_of_each_id(docs.into_iter().collect());
        if docs.is_empty() {
            return Ok(());
        }
        let mut inner = self.write();
        check_capacity("Bm25Index", inner.docs.len(), docs.len())?;
        // replaced documents are removed first; their slots count until compaction
        for doc in &docs {
            inner.remove(&doc.id, self.analyzer.as_ref());
        }
        inner.docs.reserve(docs.len());
        inner.lengths.reserve(docs.len());
        inner.length_codes.reserve(docs.len());
        inner.slots.reserve(docs.len());
        let target: &mut Inner = &mut inner;
        build::analyze_and_merge(self.analyzer.as_ref(), docs, |segment| {
            target.append(segment)
        });
        inner.compact_if_sparse();
        Ok(())
    }

    /// Replaces (or adds) one document.
    pub fn update(&self, doc: Document) -> Result<()> {
        self.add([doc])
    }

    /// Removes a document by id; returns whether it was present.
    pub fn remove(&self, id: &str) -> bool {
        let mut inner = self.write();
        let removed = inner.remove(id, self.analyzer.as_ref());
        inner.compact_if_sparse();
        removed
    }

    /// Slots held, live or not (a test hook: compaction keeps it within twice the live count
    /// plus a small floor).
    #[doc(hidden)]
    pub fn slots(&self) -> usize {
        self.read().docs.len()
    }

    /// Bytes held by the posting lists (compressed blocks, impacts, unfilled tails).
    pub fn postings_bytes(&self) -> usize {
        self.read()
            .postings
            .iter()
            .map(PostingList::heap_bytes)
            .sum()
    }

    /// Releases spare capacity after a bulk build (the posting lists and tables grow by
    /// doubling while documents are added).
    pub fn shrink_to_fit(&self) {
        let mut inner = self.write();
        for list in &mut inner.postings {
            list.shrink();
        }
        inner.docs.shrink_to_fit();
        inner.lengths.shrink_to_fit();
        inner.length_codes.shrink_to_fit();
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

    /// The best `k` documents for `query`, best first, skipping the documents that cannot
    /// reach the top `k` (block-max MaxScore): the same hits and scores as
    /// [`Bm25Index::search_exhaustive`].
    pub fn search(&self, query: &str, k: usize) -> Vec<Hit> {
        self.search_with(query, k, search::top_k_pruned)
    }

    /// Scores every posting of every query term and returns the best `k`, best first: the
    /// reference [`Bm25Index::search`] is tested against.
    pub fn search_exhaustive(&self, query: &str, k: usize) -> Vec<Hit> {
        self.search_with(query, k, search::top_k_exhaustive)
    }

    fn search_with(&self, query: &str, k: usize, top: search::TopK) -> Vec<Hit> {
        let terms = self.analyzer.analyze(query);
        let inner = self.read();
        if k == 0 || inner.live == 0 || terms.is_empty() {
            return Vec::new();
        }
        // `k` sizes the search's heap: a huge `k` (meaning "all") is the live documents.
        let k = k.min(inner.live);
        let scorer = Scorer::new(self.params, inner.live, inner.total_len);
        let ids: Vec<u32> = terms
            .iter()
            .filter_map(|t| inner.vocab.get(t.as_str()).copied())
            .filter(|&t| inner.df[t as usize] > 0)
            .collect();
        if ids.is_empty() {
            return Vec::new();
        }
        let view = search::View {
            scorer: &scorer,
            postings: &inner.postings,
            df: &inner.df,
            lengths: &inner.lengths,
            length_codes: &inner.length_codes,
            dead: (inner.live < inner.docs.len()).then_some(inner.dead.as_slice()),
            max_len: inner.max_len,
            docs: &inner.docs,
        };
        top(&view, &ids, k)
            .into_iter()
            .filter_map(|(slot, s)| {
                let doc = inner.docs[slot as usize].clone()?;
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
    use std::collections::HashMap;

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
        ])
        .unwrap();
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
        idx.update(Document::new("d2", "fig")).unwrap();
        assert!(idx.search("cherry", 10).is_empty());
        assert_eq!(idx.search("fig", 10)[0].id(), "d2");
        assert_eq!(idx.get("d2").unwrap().text, "fig");
    }

    #[test]
    fn exact_top_k_with_ties_in_insertion_order() {
        let idx = Bm25Index::new();
        idx.add((0..50).map(|i| Document::new(format!("{i}"), "same words here")))
            .unwrap();
        let hits = idx.search("words", 5);
        let ids: Vec<_> = hits.iter().map(|h| h.id().to_string()).collect();
        assert_eq!(ids, ["0", "1", "2", "3", "4"]);
        assert!(idx.search("words", 0).is_empty());
        assert!(idx.search("the", 5).is_empty());
        assert!(Bm25Index::new().search("words", 5).is_empty());
    }

    /// Pruned top k equals exhaustive scoring (ids, order, score bits) over many windows of
    /// slots, for terms from half the documents down to a few dozen, so that a window's
    /// non-essential terms are both looked up per candidate and read whole; also after
    /// removals.
    #[test]
    fn pruned_search_equals_exhaustive_over_many_windows() {
        let mut seed = 42u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        // (word, documents per thousand holding it)
        let words = [("w0", 500), ("w1", 200), ("w2", 50), ("w3", 10), ("w4", 2)];
        let docs: Vec<Document> = (0..60_000)
            .map(|i| {
                let mut text: Vec<String> = Vec::new();
                for &(w, per_mille) in &words {
                    if next() % 1000 < per_mille {
                        let tf = 1 + (next() % 3) as usize;
                        text.extend(std::iter::repeat_n(w.to_string(), tf));
                    }
                }
                for _ in 0..2 + next() % 40 {
                    text.push(format!("f{}", next() % 3000));
                }
                Document::new(format!("d{i}"), text.join(" "))
            })
            .collect();
        let idx = Bm25Index::with_params(Bm25Params { k1: 1.2, b: 0.75 })
            .unwrap()
            .analyzer(Ws);
        idx.add(docs).unwrap();
        let queries = [
            "w0 w4",
            "w1 w2",
            "w0 w1 w2 w3 w4",
            "w0 w0 w3",
            "w2 w3 f17",
            "w1 f5 f6 f7",
        ];
        let exact = |hits: Vec<Hit>| -> Vec<(String, u32)> {
            hits.iter()
                .map(|h| (h.id().to_string(), h.score.to_bits()))
                .collect()
        };
        for round in 0..2 {
            for q in queries {
                for k in [1, 10, 100] {
                    let pruned = exact(idx.search(q, k));
                    assert_eq!(pruned.len(), k, "{q} top {k}");
                    assert_eq!(pruned, exact(idx.search_exhaustive(q, k)), "{q} top {k}");
                }
            }
            if round == 0 {
                for i in (0..60_000).step_by(7) {
                    assert!(idx.remove(&format!("d{i}")));
                }
            }
        }
    }

    #[test]
    fn title_is_indexed() {
        let idx = Bm25Index::new();
        idx.add(vec![
            Document::new("a", "body only").with_title("Zebra"),
            Document::new("b", "another body"),
        ])
        .unwrap();
        assert_eq!(idx.search("zebra", 5)[0].id(), "a");
    }

    #[test]
    fn slot_numbers_never_wrap() {
        assert!(check_capacity("Bm25Index", 0, u32::MAX as usize).is_ok());
        assert!(check_capacity("Bm25Index", u32::MAX as usize - 1, 1).is_ok());
        for (held, adding) in [
            (u32::MAX as usize, 1),
            (1, u32::MAX as usize),
            (usize::MAX, 1),
        ] {
            match check_capacity("Bm25Index", held, adding) {
                Err(Error::CapacityExceeded {
                    index,
                    limit,
                    held: h,
                    adding: a,
                }) => {
                    assert_eq!(index, "Bm25Index");
                    assert_eq!(limit, u64::from(u32::MAX));
                    assert_eq!((h, a), (held as u64, adding as u64));
                }
                other => panic!("{held} + {adding}: {other:?}"),
            }
        }
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
