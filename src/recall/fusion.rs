//! Hybrid recall: fusing the ranked lists of several retrievers.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{Retriever, SearchQuery};
use crate::document::sort_by_score_desc;
use crate::{Error, Hit, Result};

/// How [`Hybrid`] combines its retrievers' lists.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Fusion {
    /// Reciprocal rank fusion: `score(d) = sum_i w_i / (k + rank_i(d))`, ranks 1-based.
    Rrf {
        /// The damping constant (60 in the original paper and by default).
        k: f32,
    },
    /// Weighted sum of min-max normalized scores: `score(d) = sum_i w_i * norm_i(d)`, where a
    /// document absent from list `i` contributes 0.
    Weighted,
    /// A linear mix of raw (not normalized) scores of exactly two retrievers, the first giving
    /// cosine similarity and the second keyword overlap
    /// ([`KeywordOverlap`](super::KeywordOverlap)):
    /// `score(d) = alpha * cosine(d) + (1 - alpha) * overlap(d)`, a document absent from a list
    /// contributing 0 from it. Both scores lie in
    /// `[0, 1]` with a fixed meaning, so a threshold such as 0.7 on the fused score means the
    /// same for every query (min-max normalization would make the best hit 1 whatever it is).
    /// The per-retriever weights are not used.
    Linear {
        /// The cosine share, in `[0, 1]` (0.7 is a common choice).
        alpha: f32,
    },
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Rrf { k: 60.0 }
    }
}

/// Min-max normalizes `scores` into `[0, 1]`. When all scores are equal (or there is one),
/// every score becomes 1. Non-finite scores become 0.
pub fn normalize_min_max(scores: &[f32]) -> Vec<f32> {
    let finite = scores.iter().copied().filter(|s| s.is_finite());
    let (lo, hi) = finite.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), s| {
        (lo.min(s), hi.max(s))
    });
    scores
        .iter()
        .map(|&s| {
            if !s.is_finite() {
                0.0
            } else if hi > lo {
                (s - lo) / (hi - lo)
            } else {
                1.0
            }
        })
        .collect()
}

/// Fuses ranked lists (each best first) by reciprocal rank. `weights[i]` scales list `i`.
///
/// The result is sorted by fused score, ties broken by first appearance (list order, then rank).
/// Each fused hit keeps the BM25 and vector scores any list gave it.
pub fn rrf_fuse(lists: &[Vec<Hit>], weights: &[f32], k: f32) -> Vec<Hit> {
    fuse(lists, |i, rank, _norm| {
        weights.get(i).copied().unwrap_or(1.0) / (k + rank as f32)
    })
}

/// Fuses ranked lists by a weighted sum of min-max normalized scores (see [`Fusion::Weighted`]).
pub fn weighted_fuse(lists: &[Vec<Hit>], weights: &[f32]) -> Vec<Hit> {
    fuse(lists, |i, _rank, norm| {
        weights.get(i).copied().unwrap_or(1.0) * norm
    })
}

/// Fuses exactly two lists by `alpha * raw_0 + (1 - alpha) * raw_1` (see [`Fusion::Linear`]);
/// with another number of lists, each list `i` gets weight `alpha` for `i == 0` and
/// `1 - alpha` otherwise.
pub fn linear_fuse(lists: &[Vec<Hit>], alpha: f32) -> Vec<Hit> {
    fuse_raw(lists, |i, raw| {
        if i == 0 {
            alpha * raw
        } else {
            (1.0 - alpha) * raw
        }
    })
}

/// Like [`fuse`] over raw scores (non-finite ones count as 0).
fn fuse_raw(lists: &[Vec<Hit>], contribution: impl Fn(usize, f32) -> f32) -> Vec<Hit> {
    let raw: Vec<Vec<f32>> = lists
        .iter()
        .map(|l| {
            l.iter()
                .map(|h| if h.score.is_finite() { h.score } else { 0.0 })
                .collect()
        })
        .collect();
    fuse(lists, |i, rank, _norm| contribution(i, raw[i][rank - 1]))
}

/// Shared fusion loop: `contribution(list index, 1-based rank, normalized score)`.
fn fuse(lists: &[Vec<Hit>], contribution: impl Fn(usize, usize, f32) -> f32) -> Vec<Hit> {
    let mut fused: Vec<Hit> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for (i, list) in lists.iter().enumerate() {
        let scores: Vec<f32> = list.iter().map(|h| h.score).collect();
        let norm = normalize_min_max(&scores);
        for (rank0, hit) in list.iter().enumerate() {
            let add = contribution(i, rank0 + 1, norm[rank0]);
            match position.get(hit.id()) {
                Some(&p) => {
                    let entry = &mut fused[p];
                    entry.score += add;
                    entry.bm25_score = entry.bm25_score.or(hit.bm25_score);
                    entry.vector_score = entry.vector_score.or(hit.vector_score);
                }
                None => {
                    position.insert(hit.id().to_string(), fused.len());
                    let mut h = hit.clone();
                    h.score = add;
                    fused.push(h);
                }
            }
        }
    }
    for h in &mut fused {
        h.stage1_score = h.score;
    }
    sort_by_score_desc(&mut fused);
    fused
}

/// A retriever that fuses any number of retrievers.
///
/// ```
/// use rerank::{Bm25Index, Document, Hybrid, Retriever};
/// use rerank::recall::SearchQuery;
/// let a = Bm25Index::new();
/// a.add(vec![Document::new("1", "rust search library")]).unwrap();
/// let b = Bm25Index::new();
/// b.add(vec![Document::new("1", "rust search library")]).unwrap();
/// let hybrid = Hybrid::rrf([a, b]);
/// let hits = hybrid.retrieve(&SearchQuery::new("rust"), 10).unwrap();
/// assert_eq!(hits[0].id(), "1");
/// ```
pub struct Hybrid {
    retrievers: Vec<Box<dyn Retriever>>,
    weights: Vec<f32>,
    fusion: Fusion,
    depth: Option<usize>,
}

impl Hybrid {
    /// Reciprocal rank fusion (k = 60) with equal weights.
    pub fn rrf<R: Retriever + 'static>(retrievers: impl IntoIterator<Item = R>) -> Self {
        let retrievers: Vec<Box<dyn Retriever>> = retrievers
            .into_iter()
            .map(|r| Box::new(r) as Box<dyn Retriever>)
            .collect();
        let weights = vec![1.0; retrievers.len()];
        Hybrid {
            retrievers,
            weights,
            fusion: Fusion::default(),
            depth: None,
        }
    }

    /// An empty fusion with the given method; add retrievers with [`Hybrid::with`].
    pub fn new(fusion: Fusion) -> Self {
        Hybrid {
            retrievers: Vec::new(),
            weights: Vec::new(),
            fusion,
            depth: None,
        }
    }

    /// Adds a retriever with a weight (builder style); a `Box<dyn Retriever>` or an
    /// `Arc<dyn Retriever>` is a retriever too.
    pub fn with(mut self, retriever: impl Retriever + 'static, weight: f32) -> Self {
        self.retrievers.push(Box::new(retriever));
        self.weights.push(weight);
        self
    }

    /// Asks each retriever for `depth` hits (at least the `k` requested) before fusing.
    /// Deeper lists help fusion; by default each retriever is asked for `k`.
    pub fn depth(mut self, depth: usize) -> Self {
        self.depth = Some(depth);
        self
    }

    /// The fusion method.
    pub fn fusion(&self) -> Fusion {
        self.fusion
    }

    /// Checks the configuration: at least one retriever, finite non-negative weights, `k > 0`.
    pub fn validate(&self) -> Result<()> {
        if self.retrievers.is_empty() {
            return Err(Error::Config(
                "a hybrid retriever needs at least one retriever".into(),
            ));
        }
        if let Some(w) = self.weights.iter().find(|w| !w.is_finite() || **w < 0.0) {
            return Err(Error::Config(format!(
                "fusion weights must be finite and >= 0, got {w}"
            )));
        }
        match self.fusion {
            Fusion::Rrf { k } if !(k.is_finite() && k > 0.0) => {
                return Err(Error::Config(format!("RRF k must be > 0, got {k}")));
            }
            Fusion::Linear { alpha } => {
                if !(0.0..=1.0).contains(&alpha) {
                    return Err(Error::Config(format!(
                        "linear fusion: alpha must be in [0, 1], got {alpha}"
                    )));
                }
                if self.retrievers.len() != 2 {
                    return Err(Error::Config(format!(
                        "linear fusion needs exactly two retrievers (cosine first, keyword \
                         overlap second), got {}",
                        self.retrievers.len()
                    )));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Retriever for Hybrid {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.validate()?;
        let depth = self.depth.unwrap_or(k).max(k);
        let lists = self
            .retrievers
            .iter()
            .map(|r| r.retrieve(query, depth))
            .collect::<Result<Vec<_>>>()?;
        let mut fused = match self.fusion {
            Fusion::Rrf { k: rrf_k } => rrf_fuse(&lists, &self.weights, rrf_k),
            Fusion::Weighted => weighted_fuse(&lists, &self.weights),
            Fusion::Linear { alpha } => linear_fuse(&lists, alpha),
        };
        fused.truncate(k);
        Ok(fused)
    }

    fn name(&self) -> &str {
        "hybrid"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Document;

    fn hit(id: &str, score: f32) -> Hit {
        Hit::new(Arc::new(Document::new(id, "")), score)
    }

    fn ids(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| h.id()).collect()
    }

    #[test]
    fn rrf_matches_hand_computation() {
        // list A: a, b, c   list B: c, a, d
        let a = vec![hit("a", 9.0), hit("b", 5.0), hit("c", 1.0)];
        let b = vec![hit("c", 0.9), hit("a", 0.8), hit("d", 0.1)];
        let fused = rrf_fuse(&[a, b], &[1.0, 1.0], 60.0);
        // a: 1/61 + 1/62, c: 1/63 + 1/61, b: 1/62, d: 1/63
        let expect = [
            ("a", 1.0 / 61.0 + 1.0 / 62.0),
            ("c", 1.0 / 63.0 + 1.0 / 61.0),
            ("b", 1.0 / 62.0),
            ("d", 1.0 / 63.0),
        ];
        assert_eq!(ids(&fused), vec!["a", "c", "b", "d"]);
        for (h, (id, s)) in fused.iter().zip(expect) {
            assert_eq!(h.id(), id);
            assert!(
                (h.score - s as f32).abs() < 1e-7,
                "{id}: {} vs {s}",
                h.score
            );
            assert_eq!(h.stage1_score, h.score);
        }
    }

    #[test]
    fn rrf_weights_and_k() {
        let a = vec![hit("a", 1.0), hit("b", 0.5)];
        let b = vec![hit("b", 1.0), hit("a", 0.5)];
        // weights 2:1, k = 1: a = 2/2 + 1/3 = 1.333, b = 2/3 + 1/2 = 1.1667
        let fused = rrf_fuse(&[a, b], &[2.0, 1.0], 1.0);
        assert_eq!(ids(&fused), vec!["a", "b"]);
        assert!((fused[0].score - (1.0 + 1.0 / 3.0)).abs() < 1e-6);
        assert!((fused[1].score - (2.0 / 3.0 + 0.5)).abs() < 1e-6);
    }

    #[test]
    fn rrf_ties_keep_first_appearance() {
        let a = vec![hit("x", 3.0)];
        let b = vec![hit("y", 3.0)];
        let fused = rrf_fuse(&[a, b], &[1.0, 1.0], 60.0);
        assert_eq!(ids(&fused), vec!["x", "y"]);
    }

    #[test]
    fn weighted_matches_hand_computation() {
        // dense (w 0.7): a 0.9, b 0.5, c 0.1 -> norm 1, 0.5, 0
        // bm25 (w 0.3): c 12, d 6, a 3      -> norm 1, 1/3, 0
        let dense = vec![
            hit("a", 0.9).with_vector(0.9),
            hit("b", 0.5).with_vector(0.5),
            hit("c", 0.1).with_vector(0.1),
        ];
        let bm25 = vec![
            hit("c", 12.0).with_bm25(12.0),
            hit("d", 6.0).with_bm25(6.0),
            hit("a", 3.0).with_bm25(3.0),
        ];
        let fused = weighted_fuse(&[dense, bm25], &[0.7, 0.3]);
        let got: Vec<(&str, f32)> = fused.iter().map(|h| (h.id(), h.score)).collect();
        let expect = [("a", 0.7), ("b", 0.35), ("c", 0.3), ("d", 0.1)];
        assert_eq!(got.len(), expect.len());
        for ((gid, gs), (eid, es)) in got.iter().zip(expect) {
            assert_eq!(*gid, eid);
            assert!((gs - es).abs() < 1e-6, "{eid}: {gs} vs {es}");
        }
        // per-retriever scores are carried over from both lists
        let a = fused.iter().find(|h| h.id() == "a").unwrap();
        assert_eq!(a.vector_score, Some(0.9));
        assert_eq!(a.bm25_score, Some(3.0));
        let d = fused.iter().find(|h| h.id() == "d").unwrap();
        assert_eq!(d.vector_score, None);
    }

    #[test]
    fn linear_uses_raw_scores() {
        // cosine: a 0.9, b 0.4   keyword overlap: b 1.0, c 0.5
        let cosine = vec![
            hit("a", 0.9).with_vector(0.9),
            hit("b", 0.4).with_vector(0.4),
        ];
        let keyword = vec![hit("b", 1.0), hit("c", 0.5)];
        let fused = linear_fuse(&[cosine, keyword], 0.7);
        let got: Vec<(&str, f32)> = fused.iter().map(|h| (h.id(), h.score)).collect();
        // a = 0.63, b = 0.28 + 0.3 = 0.58, c = 0.15: raw, so the best is not forced to 1
        let expect = [("a", 0.63), ("b", 0.58), ("c", 0.15)];
        for ((gid, gs), (eid, es)) in got.iter().zip(expect) {
            assert_eq!(*gid, eid);
            assert!((gs - es).abs() < 1e-6, "{eid}: {gs} vs {es}");
        }
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn linear_needs_two_retrievers_and_alpha_in_range() {
        use crate::recall::KeywordOverlap;
        let h = Hybrid::new(Fusion::Linear { alpha: 0.7 }).with(KeywordOverlap::new(), 1.0);
        assert!(matches!(h.validate(), Err(Error::Config(_))));
        let h = Hybrid::new(Fusion::Linear { alpha: 1.5 })
            .with(KeywordOverlap::new(), 1.0)
            .with(KeywordOverlap::new(), 1.0);
        assert!(matches!(h.validate(), Err(Error::Config(_))));
    }

    #[test]
    fn min_max_edge_cases() {
        assert_eq!(normalize_min_max(&[]), Vec::<f32>::new());
        assert_eq!(normalize_min_max(&[4.0]), vec![1.0]);
        assert_eq!(normalize_min_max(&[2.0, 2.0]), vec![1.0, 1.0]);
        assert_eq!(normalize_min_max(&[1.0, 3.0, 2.0]), vec![0.0, 1.0, 0.5]);
        assert_eq!(
            normalize_min_max(&[f32::NAN, 1.0, 3.0]),
            vec![0.0, 0.0, 1.0]
        );
    }

    #[test]
    fn empty_hybrid_is_a_config_error() {
        let h = Hybrid::new(Fusion::Weighted);
        assert!(matches!(
            h.retrieve(&SearchQuery::new("x"), 3),
            Err(Error::Config(_))
        ));
    }
}
