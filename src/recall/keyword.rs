//! [`KeywordOverlap`]: a retriever scoring the share of the query's content words a document has.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use super::{Retriever, SearchQuery};
use crate::document::sort_by_score_desc;
use crate::text::content_tokens;
use crate::{Document, Hit, Result};

/// The keyword-overlap score of a document: the share of the query's distinct content tokens
/// ([`content_tokens`]: function words dropped, Snowball-stemmed) it contains, in `[0, 1]`;
/// 0 when the query has no content token.
///
/// ```
/// use rerank::recall::keyword_overlap;
/// assert_eq!(keyword_overlap("refund policy for hotels", "Hotel refunds follow the policy."), 1.0);
/// assert_eq!(keyword_overlap("refund policy", "Our travel policy."), 0.5);
/// ```
pub fn keyword_overlap(query: &str, document: &str) -> f32 {
    let wanted: HashSet<String> = content_tokens(query).into_iter().collect();
    let have: HashSet<String> = content_tokens(document).into_iter().collect();
    overlap(&wanted, &have)
}

fn overlap(wanted: &HashSet<String>, have: &HashSet<String>) -> f32 {
    if wanted.is_empty() {
        return 0.0;
    }
    wanted.intersection(have).count() as f32 / wanted.len() as f32
}

/// An in-memory retriever whose score is [`keyword_overlap`]: a raw score in `[0, 1]` with
/// a fixed meaning (0.5 = half the query's words are there), unlike BM25's unbounded one. Paired
/// with cosine similarity in [`Fusion::Linear`](super::Fusion::Linear), it makes a threshold
/// such as 0.7 mean the same thing for every query. Documents with no query word are not
/// returned. Scoring scans every document: meant for the thousands of chunks of a document Q&A
/// service, not for millions.
///
/// ```
/// use rerank::recall::{KeywordOverlap, SearchQuery};
/// use rerank::{Document, Retriever};
/// let index = KeywordOverlap::new();
/// index.add(vec![Document::new("a", "refund policy"), Document::new("b", "travel policy")]);
/// let hits = index.retrieve(&SearchQuery::new("refund policy"), 10)?;
/// assert_eq!((hits[0].id(), hits[0].score), ("a", 1.0));
/// assert_eq!((hits[1].id(), hits[1].score), ("b", 0.5));
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Default)]
pub struct KeywordOverlap {
    docs: RwLock<Vec<(Arc<Document>, HashSet<String>)>>,
}

impl std::fmt::Debug for KeywordOverlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeywordOverlap")
            .field("docs", &self.len())
            .finish()
    }
}

impl KeywordOverlap {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds documents; a document whose id is already present replaces the old one.
    pub fn add(&self, docs: impl IntoIterator<Item = Document>) {
        let mut held = self.docs.write().unwrap_or_else(|e| e.into_inner());
        for doc in docs {
            let tokens = content_tokens(&doc.full_text()).into_iter().collect();
            held.retain(|(d, _)| d.id != doc.id);
            held.push((Arc::new(doc), tokens));
        }
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.docs.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Retriever for KeywordOverlap {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        let wanted: HashSet<String> = content_tokens(&query.text).into_iter().collect();
        let held = self.docs.read().unwrap_or_else(|e| e.into_inner());
        let mut hits: Vec<Hit> = held
            .iter()
            .filter_map(|(doc, have)| {
                let s = overlap(&wanted, have);
                (s > 0.0).then(|| Hit::new(Arc::clone(doc), s))
            })
            .collect();
        sort_by_score_desc(&mut hits);
        hits.truncate(k);
        Ok(hits)
    }

    fn name(&self) -> &str {
        "keyword"
    }
}
