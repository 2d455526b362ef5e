//! Protected reranking: for factual queries, the exact lexical matches stay first.
//!
//! A cross-encoder judges topical relevance; for a lookup such as "Taylor's KTN" the one
//! document holding the identifier can look less "relevant" than general text about the topic.
//! Protection keeps up to N of the stage-1 candidates that contain the query's significant
//! keywords in front, in stage-1 order, and reranks the rest below them. Every candidate is
//! scanned by default (after hybrid fusion the exact note is often 4th or lower); the ones
//! that match the most keywords win the N places.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::classify::QueryKind;
use crate::document::sort_by_score_desc;
use crate::text::{plain_words, QUERY_STOPWORDS};
use crate::{Error, Hit, Result};

/// Settings of protected reranking. In a [`Pipeline`](crate::Pipeline) it applies to queries
/// the classifier calls factual; protected hits also survive the pipeline's score threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProtectPolicy {
    /// At most this many hits are protected (default 3; 0 turns protection off).
    pub max_protected: usize,
    /// Only the first `window` stage-1 hits are candidates (default: `None`, every candidate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
    /// Words that are never significant keywords (default: the classifier's English stopwords).
    pub stopwords: Vec<String>,
}

impl Default for ProtectPolicy {
    fn default() -> Self {
        ProtectPolicy {
            max_protected: 3,
            window: None,
            stopwords: QUERY_STOPWORDS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

impl ProtectPolicy {
    /// Protection switched off.
    pub fn disabled() -> Self {
        ProtectPolicy {
            max_protected: 0,
            ..ProtectPolicy::default()
        }
    }

    /// A policy protecting up to `n` hits among the first `n` stage-1 hits.
    pub fn top(n: usize) -> Self {
        ProtectPolicy {
            max_protected: n,
            window: Some(n),
            ..ProtectPolicy::default()
        }
    }

    /// Checks the values: a non-zero `max_protected` needs a `window`, when set, at least as
    /// large.
    pub fn validate(&self) -> Result<()> {
        if let Some(window) = self
            .window
            .filter(|&w| self.max_protected > 0 && w < self.max_protected)
        {
            return Err(Error::Config(format!(
                "protected reranking: window ({window}) must be at least max_protected ({})",
                self.max_protected
            )));
        }
        Ok(())
    }

    /// The significant keywords of `query`: lower-cased words with possessives and punctuation
    /// stripped, stopwords skipped, in order, without duplicates.
    ///
    /// ```
    /// use rerank::rerankers::ProtectPolicy;
    /// assert_eq!(ProtectPolicy::default().keywords("What is Taylor's KTN?"), ["taylor", "ktn"]);
    /// ```
    pub fn keywords(&self, query: &str) -> Vec<String> {
        let stop: HashSet<&str> = self.stopwords.iter().map(String::as_str).collect();
        let mut seen = HashSet::new();
        plain_words(query)
            .into_iter()
            .filter(|w| !stop.contains(w.as_str()))
            .filter(|w| seen.insert(w.clone()))
            .collect()
    }

    /// Orders reranked hits. `hits` must be in stage-1 order with their rerank score in
    /// [`Hit::score`].
    ///
    /// For [`QueryKind::Factual`], the hits within `window` (every hit by default) whose text
    /// (title included) contains a significant keyword of `query` as a whole word are the
    /// candidates; the `max_protected` of them that contain the most distinct keywords (the
    /// earlier in stage-1 order on a tie) come first, in stage-1 order, marked
    /// [`Hit::protected`]; the others follow by descending score. For
    /// [`QueryKind::Semantic`] (or no keyword) the order is by score alone.
    pub fn order(&self, query: &str, kind: QueryKind, hits: Vec<Hit>) -> Vec<Hit> {
        self.order_with_names(query, &[], kind, hits)
    }

    /// [`order`](Self::order) with the words of `names` (the canonical names of the people
    /// the query mentions by alias: "tay" is "Taylor Smith") counted as keywords too.
    pub fn order_with_names(
        &self,
        query: &str,
        names: &[String],
        kind: QueryKind,
        hits: Vec<Hit>,
    ) -> Vec<Hit> {
        let keywords = match kind {
            QueryKind::Factual if self.max_protected > 0 => {
                let mut k = self.keywords(query);
                for word in names.iter().flat_map(|n| self.keywords(n)) {
                    if !k.contains(&word) {
                        k.push(word);
                    }
                }
                k
            }
            _ => Vec::new(),
        };
        let window = self.window.unwrap_or(usize::MAX);
        let mut matched: Vec<(usize, usize)> = Vec::new();
        if !keywords.is_empty() {
            for (i, hit) in hits.iter().enumerate().take(window) {
                let n = matching_keywords(&hit.document.full_text(), &keywords);
                if n > 0 {
                    matched.push((n, i));
                }
            }
        }
        matched.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let chosen: HashSet<usize> = matched
            .iter()
            .take(self.max_protected)
            .map(|&(_, i)| i)
            .collect();
        let mut protected = Vec::new();
        let mut rest = Vec::with_capacity(hits.len());
        for (i, mut hit) in hits.into_iter().enumerate() {
            hit.protected = chosen.contains(&i);
            if hit.protected {
                protected.push(hit);
            } else {
                rest.push(hit);
            }
        }
        sort_by_score_desc(&mut rest);
        protected.extend(rest);
        protected
    }
}

/// How many of `keywords` `text` contains as whole words.
fn matching_keywords(text: &str, keywords: &[String]) -> usize {
    let words: HashSet<String> = plain_words(text).into_iter().collect();
    keywords.iter().filter(|k| words.contains(*k)).count()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Document;

    fn hit(id: &str, text: &str, score: f32) -> Hit {
        Hit::new(Arc::new(Document::new(id, text)), score)
    }

    fn ids(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| h.id()).collect()
    }

    #[test]
    fn factual_keeps_keyword_hits_first_in_stage1_order() {
        // Stage-1 order a, b, c, d, e; rerank scores prefer e, d, c, b, a.
        let hits = vec![
            hit("a", "Taylor's KTN: TT11YZS7J", 0.1),
            hit("b", "general travel tips", 0.2),
            hit("c", "KTN programs explained", 0.3),
            hit("d", "packing lists", 0.4),
            hit("e", "taylor swift tour", 0.5),
        ];
        let make = || hits.clone();
        let out = ProtectPolicy::top(3).order("Taylor's KTN", QueryKind::Factual, make());
        // a and c are in the window (first 3) and contain a keyword; e contains one but is
        // outside the window.
        assert_eq!(ids(&out), ["a", "c", "e", "d", "b"]);
        assert!(out[0].protected && out[1].protected);
        assert!(out[2..].iter().all(|h| !h.protected));
        // By default every candidate is scanned: e is protected too, behind a and c.
        let out = ProtectPolicy::default().order("Taylor's KTN", QueryKind::Factual, make());
        assert_eq!(ids(&out), ["a", "c", "e", "d", "b"]);
        assert!(out[..3].iter().all(|h| h.protected));
        // With one place, the hit holding both keywords wins it, wherever it is.
        let one = ProtectPolicy {
            max_protected: 1,
            ..ProtectPolicy::default()
        };
        let mut late = make();
        late.rotate_left(1); // a is now the last stage-1 hit
        let out = one.order("Taylor's KTN", QueryKind::Factual, late);
        assert_eq!(out[0].id(), "a");
        assert!(out[0].protected && !out[1].protected);
    }

    #[test]
    fn semantic_and_disabled_are_plain_reranking() {
        let make = || {
            vec![
                hit("a", "Taylor's KTN", 0.1),
                hit("b", "travel", 0.9),
                hit("c", "ktn", 0.5),
            ]
        };
        let out = ProtectPolicy::default().order("Taylor's KTN", QueryKind::Semantic, make());
        assert_eq!(ids(&out), ["b", "c", "a"]);
        assert!(out.iter().all(|h| !h.protected));
        let out = ProtectPolicy::disabled().order("Taylor's KTN", QueryKind::Factual, make());
        assert_eq!(ids(&out), ["b", "c", "a"]);
    }

    #[test]
    fn max_protected_caps_and_stopwords_never_match() {
        let hits = vec![
            hit("a", "ktn one", 0.1),
            hit("b", "ktn two", 0.2),
            hit("c", "ktn three", 0.3),
        ];
        let policy = ProtectPolicy {
            max_protected: 1,
            window: Some(3),
            ..ProtectPolicy::default()
        };
        assert_eq!(
            ids(&policy.order("the KTN", QueryKind::Factual, hits)),
            ["a", "c", "b"]
        );
        // Only stopwords: nothing to protect.
        let hits = vec![hit("a", "what is it", 0.1), hit("b", "x", 0.2)];
        assert_eq!(
            ids(&ProtectPolicy::default().order("what is it?", QueryKind::Factual, hits)),
            ["b", "a"]
        );
        // Whole words only: "ktn" does not match "ktns2".
        let hits = vec![hit("a", "ktns2", 0.1), hit("b", "x", 0.2)];
        assert_eq!(
            ids(&ProtectPolicy::default().order("KTN", QueryKind::Factual, hits)),
            ["b", "a"]
        );
    }

    #[test]
    fn validation() {
        assert!(ProtectPolicy::default().validate().is_ok());
        assert!(ProtectPolicy::disabled().validate().is_ok());
        let bad = ProtectPolicy {
            max_protected: 3,
            window: Some(1),
            ..ProtectPolicy::default()
        };
        assert!(bad.validate().is_err());
    }
}
