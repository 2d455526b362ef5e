//! [`StoreBm25`]: BM25 recall scored from the postings in the store.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rusqlite::{params, params_from_iter};

use super::schema::BLOCK_BITS;
use super::{doc_from_row_at, Store, DOC_COLUMNS};
use crate::recall::{top_slots, Bm25Params, Retriever, Scorer, SearchQuery};
use crate::text::Analyzer;
use crate::{Hit, Result};

/// What every query needs and only a write changes: the slots in order and their lengths.
struct Lengths {
    generation: i64,
    /// Stored slots, ascending (the order ties are broken in).
    slots: Vec<i64>,
    lengths: Vec<u32>,
    total: u64,
}

/// BM25 recall over a [`Store`]: for each query term, its postings are read from the file and
/// scored with the same code as [`Bm25Index`](crate::Bm25Index), so a store and a fresh
/// in-memory index over the same documents (in the store's order, [`Store::documents`]) return
/// the same hits with the same scores. The slots and lengths are kept in memory and reloaded
/// after a write (by any process).
pub struct StoreBm25 {
    store: Arc<Store>,
    params: Bm25Params,
    lengths: RwLock<Option<Arc<Lengths>>>,
}

impl std::fmt::Debug for StoreBm25 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBm25")
            .field("store", &self.store.path())
            .field("params", &self.params)
            .finish()
    }
}

impl StoreBm25 {
    pub(super) fn new(store: Arc<Store>) -> Self {
        StoreBm25 {
            store,
            params: Bm25Params::default(),
            lengths: RwLock::new(None),
        }
    }

    /// The best `k` documents for `query`, best first.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Hit>> {
        let terms = self.store.analyzer.analyze(query);
        if k == 0 || terms.is_empty() {
            return Ok(Vec::new());
        }
        let cached = self
            .lengths
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (lengths, (ranked, rows)) = self.store.read(|tx| {
            let generation = Store::generation(tx)?;
            let lengths = match cached {
                Some(l) if l.generation == generation => l,
                _ => Arc::new(load_lengths(tx, generation)?),
            };
            if lengths.slots.is_empty() {
                return Ok((lengths, (Vec::new(), Vec::new())));
            }
            let scorer = Scorer::new(self.params, lengths.slots.len(), lengths.total);
            let mut scores = vec![0f32; lengths.slots.len()];
            let mut touched: Vec<u32> = Vec::new();
            // One lookup per block of slots (the table is keyed by block, then term).
            let mut postings = tx.prepare_cached(
                "SELECT slot, tf FROM postings WHERE block = ?1 AND term = ?2 ORDER BY slot",
            )?;
            let last = lengths.slots.last().map_or(0, |s| s >> BLOCK_BITS);
            let mut memo: HashMap<&str, Vec<(u32, u32)>> = HashMap::new();
            for term in &terms {
                if !memo.contains_key(term.as_str()) {
                    let mut list = Vec::new();
                    for block in 0..=last {
                        let rows = postings.query_map(params![block, term], |r| {
                            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                        })?;
                        for row in rows {
                            let (slot, tf) = row?;
                            if let Ok(i) = lengths.slots.binary_search(&slot) {
                                list.push((i as u32, tf as u32));
                            }
                        }
                    }
                    memo.insert(term.as_str(), list);
                }
                let list = &memo[term.as_str()];
                let idf = scorer.idf(list.len());
                for &(i, tf) in list {
                    let s = &mut scores[i as usize];
                    if *s == 0.0 {
                        touched.push(i);
                    }
                    *s += scorer.term(idf, tf, lengths.lengths[i as usize]);
                }
            }
            let top = top_slots(&scores, touched, k);
            let ranked: Vec<(i64, f32)> = top
                .into_iter()
                .map(|i| (lengths.slots[i as usize], scores[i as usize]))
                .collect();
            // The documents come from the same snapshot as the scores.
            let rows = documents_of(tx, &ranked)?;
            Ok((lengths, (ranked, rows)))
        })?;
        *self.lengths.write().unwrap_or_else(|e| e.into_inner()) = Some(lengths);
        let mut docs: HashMap<i64, _> = HashMap::new();
        for (slot, doc) in rows {
            docs.insert(slot, Arc::new(doc?));
        }
        Ok(ranked
            .iter()
            .filter_map(|(slot, score)| {
                let doc = docs.get(slot)?.clone();
                Some(Hit::new(doc, *score).with_bm25(*score))
            })
            .collect())
    }
}

/// The stored documents of `ranked` (slot, score), keyed by slot.
fn documents_of(
    tx: &rusqlite::Transaction<'_>,
    ranked: &[(i64, f32)],
) -> rusqlite::Result<Vec<(i64, Result<crate::Document>)>> {
    if ranked.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; ranked.len()].join(", ");
    let mut stmt = tx.prepare(&format!(
        "SELECT slot, {DOC_COLUMNS} FROM documents WHERE slot IN ({marks})"
    ))?;
    let rows = stmt.query_map(params_from_iter(ranked.iter().map(|(s, _)| *s)), |r| {
        Ok((r.get::<_, i64>(0)?, doc_from_row_at(r, 1)?))
    })?;
    rows.collect()
}

fn load_lengths(tx: &rusqlite::Transaction<'_>, generation: i64) -> rusqlite::Result<Lengths> {
    let mut stmt = tx.prepare("SELECT slot, length FROM documents ORDER BY slot")?;
    let mut slots = Vec::new();
    let mut lengths = Vec::new();
    let mut total = 0u64;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
    for row in rows {
        let (slot, len) = row?;
        slots.push(slot);
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        lengths.push(len);
        total += u64::from(len);
    }
    Ok(Lengths {
        generation,
        slots,
        lengths,
        total,
    })
}

impl Retriever for StoreBm25 {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.search(&query.text, k)
    }

    fn name(&self) -> &str {
        "bm25"
    }
}
