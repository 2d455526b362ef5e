//! IR metrics with trec_eval conventions (as computed by `pytrec_eval` and `ir_measures`).
//!
//! Conventions, for one query:
//! - **relevant** means a qrel score `>= 1`; unjudged documents are not relevant;
//! - **nDCG@k** (`ndcg_cut_k`): gain = the qrel score (linear, only positive scores count),
//!   discount `log2(rank + 1)` for 1-based ranks; the ideal ranking is built from *all* judged
//!   documents of the query, not only the retrieved ones;
//! - **MAP@k** (`map_cut_k`): average precision over the top `k`, divided by the total number of
//!   relevant documents of the query (retrieved or not);
//! - **Recall@k** (`recall_k`): relevant documents in the top `k` / all relevant documents;
//! - **MRR@k** (`recip_rank` cut at `k`): `1 / rank` of the first relevant document in the top
//!   `k`, else 0 (ir_measures computes `RR@k` with its msmarco provider, which breaks score ties
//!   by ascending document id: the two can differ when the first relevant document is tied);
//! - **P@k** (`P_k`): relevant documents in the top `k` / `k`, always divided by `k` even when
//!   fewer than `k` documents were retrieved.
//!
//! Every metric is 0 for a query without relevant documents. The metric functions take a ranking
//! that is already ordered (best first); a document repeated in it counts only at its first
//! position (later copies occupy their rank but gain nothing). To order a run the way trec_eval
//! does (score descending, then document id descending), use [`trec_order`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// Relevance judgments: query id -> (document id -> graded score).
///
/// A score `>= 1` marks a relevant document; 0 or less is judged non-relevant.
pub type Qrels = BTreeMap<String, HashMap<String, i32>>;

/// A run: query id -> retrieved `(document id, score)` pairs, in any order.
pub type Run = HashMap<String, Vec<(String, f64)>>;

/// The qrel score from which a document counts as relevant (trec_eval's default level 1).
pub const RELEVANCE_THRESHOLD: i32 = 1;

/// Which measure a [`Metric`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricKind {
    /// Normalized discounted cumulative gain (`ndcg@k`).
    Ndcg,
    /// Mean average precision cut at `k` (`map@k`).
    Map,
    /// Recall (`recall@k`).
    Recall,
    /// Mean reciprocal rank (`mrr@k`).
    Mrr,
    /// Precision (`p@k`).
    Precision,
}

impl MetricKind {
    /// The lower-case name used in metric names (`ndcg`, `map`, `recall`, `mrr`, `p`).
    pub fn as_str(&self) -> &'static str {
        match self {
            MetricKind::Ndcg => "ndcg",
            MetricKind::Map => "map",
            MetricKind::Recall => "recall",
            MetricKind::Mrr => "mrr",
            MetricKind::Precision => "p",
        }
    }
}

/// A measure at a cutoff, e.g. nDCG@10.
///
/// Parse one from its name (case-insensitive): `ndcg@10`, `map@100` (or `ap@100`),
/// `recall@100` (or `r@100`), `mrr@10` (or `rr@10`), `p@10` (or `precision@10`).
///
/// ```
/// use rerank::eval::{Metric, MetricKind};
/// let m: Metric = "nDCG@10".parse().unwrap();
/// assert_eq!(m, Metric::new(MetricKind::Ndcg, 10));
/// assert_eq!(m.to_string(), "ndcg@10");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Metric {
    /// The measure.
    pub kind: MetricKind,
    /// The rank cutoff (`>= 1` to be meaningful; every metric is 0 at `k = 0`).
    pub k: usize,
}

impl Metric {
    /// A metric of `kind` at cutoff `k`.
    pub fn new(kind: MetricKind, k: usize) -> Self {
        Metric { kind, k }
    }

    /// nDCG@k.
    pub fn ndcg(k: usize) -> Self {
        Metric::new(MetricKind::Ndcg, k)
    }

    /// MAP@k.
    pub fn map(k: usize) -> Self {
        Metric::new(MetricKind::Map, k)
    }

    /// Recall@k.
    pub fn recall(k: usize) -> Self {
        Metric::new(MetricKind::Recall, k)
    }

    /// MRR@k.
    pub fn mrr(k: usize) -> Self {
        Metric::new(MetricKind::Mrr, k)
    }

    /// P@k.
    pub fn precision(k: usize) -> Self {
        Metric::new(MetricKind::Precision, k)
    }

    /// The metric's value for one query: `ranking` is ordered best first, `judgments` are the
    /// query's qrels (document id -> score).
    pub fn compute<S: AsRef<str>>(&self, ranking: &[S], judgments: &HashMap<String, i32>) -> f64 {
        match self.kind {
            MetricKind::Ndcg => ndcg_at(ranking, judgments, self.k),
            MetricKind::Map => average_precision_at(ranking, judgments, self.k),
            MetricKind::Recall => recall_at(ranking, judgments, self.k),
            MetricKind::Mrr => reciprocal_rank_at(ranking, judgments, self.k),
            MetricKind::Precision => precision_at(ranking, judgments, self.k),
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.kind.as_str(), self.k)
    }
}

impl FromStr for Metric {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::parse(
                format!("metric name {name:?}"),
                format!("{why}; expected ndcg@K, map@K, recall@K, mrr@K or p@K with K >= 1"),
            )
        };
        let (kind, k) = name.trim().split_once('@').ok_or_else(|| bad("no '@K'"))?;
        let kind = match kind.to_ascii_lowercase().as_str() {
            "ndcg" => MetricKind::Ndcg,
            "map" | "ap" => MetricKind::Map,
            "recall" | "r" => MetricKind::Recall,
            "mrr" | "rr" => MetricKind::Mrr,
            "p" | "precision" => MetricKind::Precision,
            _ => return Err(bad("unknown measure")),
        };
        let k: usize = k.parse().map_err(|_| bad("the cutoff is not a number"))?;
        if k == 0 {
            return Err(bad("the cutoff is 0"));
        }
        Ok(Metric { kind, k })
    }
}

fn is_relevant(judgments: &HashMap<String, i32>, doc: &str) -> bool {
    judgments
        .get(doc)
        .is_some_and(|&s| s >= RELEVANCE_THRESHOLD)
}

/// Number of relevant documents (score `>= 1`) in a query's judgments.
pub fn num_relevant(judgments: &HashMap<String, i32>) -> usize {
    judgments
        .values()
        .filter(|&&s| s >= RELEVANCE_THRESHOLD)
        .count()
}

/// The top `k` of `ranking` with later copies of a document marked as already seen:
/// yields `(0-based rank, doc id, first occurrence?)`.
fn top_k<S: AsRef<str>>(ranking: &[S], k: usize) -> impl Iterator<Item = (usize, &str, bool)> {
    let mut seen: HashSet<&str> = HashSet::new();
    ranking
        .iter()
        .take(k)
        .enumerate()
        .map(move |(i, d)| (i, d.as_ref(), seen.insert(d.as_ref())))
}

/// Relevant documents retrieved in the top `k`.
fn relevant_in_top_k<S: AsRef<str>>(
    ranking: &[S],
    judgments: &HashMap<String, i32>,
    k: usize,
) -> usize {
    top_k(ranking, k)
        .filter(|&(_, d, first)| first && is_relevant(judgments, d))
        .count()
}

/// nDCG@k (trec_eval `ndcg_cut`): gain = qrel score (only positive scores), discount
/// `log2(rank + 1)`; the ideal DCG uses all judged documents of the query. 0 when the query has
/// no positive judgment.
pub fn ndcg_at<S: AsRef<str>>(ranking: &[S], judgments: &HashMap<String, i32>, k: usize) -> f64 {
    let discount = |i: usize| ((i + 2) as f64).log2();
    let dcg: f64 = top_k(ranking, k)
        .filter(|&(_, _, first)| first)
        .map(|(i, d, _)| {
            let gain = judgments.get(d).copied().unwrap_or(0);
            if gain > 0 {
                f64::from(gain) / discount(i)
            } else {
                0.0
            }
        })
        .sum();
    let mut ideal: Vec<i32> = judgments.values().copied().filter(|&g| g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &g)| f64::from(g) / discount(i))
        .sum();
    if idcg > 0.0 {
        dcg / idcg
    } else {
        0.0
    }
}

/// Average precision cut at `k` (trec_eval `map_cut`): the sum of precision@rank at each
/// relevant document in the top `k`, divided by the number of relevant documents of the query.
pub fn average_precision_at<S: AsRef<str>>(
    ranking: &[S],
    judgments: &HashMap<String, i32>,
    k: usize,
) -> f64 {
    let total = num_relevant(judgments);
    if total == 0 {
        return 0.0;
    }
    let mut found = 0usize;
    let mut sum = 0.0;
    for (i, d, first) in top_k(ranking, k) {
        if first && is_relevant(judgments, d) {
            found += 1;
            sum += found as f64 / (i + 1) as f64;
        }
    }
    sum / total as f64
}

/// Recall@k: relevant documents in the top `k` / relevant documents of the query.
pub fn recall_at<S: AsRef<str>>(ranking: &[S], judgments: &HashMap<String, i32>, k: usize) -> f64 {
    let total = num_relevant(judgments);
    if total == 0 {
        return 0.0;
    }
    relevant_in_top_k(ranking, judgments, k) as f64 / total as f64
}

/// Reciprocal rank cut at `k`: `1 / rank` of the first relevant document in the top `k`, else 0.
pub fn reciprocal_rank_at<S: AsRef<str>>(
    ranking: &[S],
    judgments: &HashMap<String, i32>,
    k: usize,
) -> f64 {
    top_k(ranking, k)
        .find(|&(_, d, first)| first && is_relevant(judgments, d))
        .map_or(0.0, |(i, _, _)| 1.0 / (i + 1) as f64)
}

/// Precision@k: relevant documents in the top `k` / `k` (trec_eval divides by `k` even when
/// fewer documents were retrieved). 0 when `k` is 0.
pub fn precision_at<S: AsRef<str>>(
    ranking: &[S],
    judgments: &HashMap<String, i32>,
    k: usize,
) -> f64 {
    if k == 0 {
        return 0.0;
    }
    relevant_in_top_k(ranking, judgments, k) as f64 / k as f64
}

/// Orders `(doc id, score)` results as trec_eval does: score descending, ties broken by document
/// id descending (byte-wise); NaN scores go last. The input order does not matter.
pub fn trec_order(results: &mut [(String, f64)]) {
    results.sort_by(|a, b| {
        let by_score = match (a.1.is_nan(), b.1.is_nan()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            (false, false) => b.1.total_cmp(&a.1),
        };
        by_score.then_with(|| b.0.cmp(&a.0))
    });
}

/// The document ids of `results` in trec_eval order (see [`trec_order`]), each document once:
/// a repeated document keeps its best-ranked occurrence.
pub fn trec_ranking(results: &[(String, f64)]) -> Vec<String> {
    let mut ordered = results.to_vec();
    trec_order(&mut ordered);
    let mut seen: HashSet<String> = HashSet::with_capacity(ordered.len());
    ordered
        .into_iter()
        .filter_map(|(doc, _)| seen.insert(doc.clone()).then_some(doc))
        .collect()
}

/// Evaluates runs against qrels for a fixed list of metrics.
///
/// Only queries present in the qrels are evaluated (queries of the run that the qrels lack are
/// ignored); a judged query that the run lacks, or for which it has no results, scores 0 on
/// every metric and counts in the means (as in ir_measures and `trec_eval -c`). A judged query without relevant
/// documents also scores 0. Each query's results are put in trec_eval order first
/// ([`trec_ranking`]), so the values match `pytrec_eval` whatever the order of the run.
///
/// ```
/// use rerank::eval::{Evaluator, Qrels, Run};
/// let mut qrels = Qrels::new();
/// qrels.insert("q1".into(), [("d1".to_string(), 1)].into_iter().collect());
/// let mut run = Run::new();
/// run.insert("q1".into(), vec![("d2".into(), 2.0), ("d1".into(), 1.0)]);
/// let eval = Evaluator::from_names(&["mrr@10", "p@2"])?.evaluate(&run, &qrels);
/// assert_eq!(eval.mean_of("mrr@10"), Some(0.5));
/// assert_eq!(eval.mean_of("p@2"), Some(0.5));
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluator {
    metrics: Vec<Metric>,
}

impl Evaluator {
    /// An evaluator for `metrics` (duplicates dropped, order kept). Errors when the list is
    /// empty or a cutoff is 0.
    pub fn new(metrics: impl IntoIterator<Item = Metric>) -> Result<Self> {
        let mut list: Vec<Metric> = Vec::new();
        for m in metrics {
            if m.k == 0 {
                return Err(Error::Config(format!("metric {m} has a cutoff of 0")));
            }
            if !list.contains(&m) {
                list.push(m);
            }
        }
        if list.is_empty() {
            return Err(Error::Config(
                "an evaluator needs at least one metric".into(),
            ));
        }
        Ok(Evaluator { metrics: list })
    }

    /// An evaluator for metrics given by name (see [`Metric`]'s `FromStr`).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Self> {
        let metrics = names
            .iter()
            .map(|n| n.as_ref().parse::<Metric>())
            .collect::<Result<Vec<_>>>()?;
        Evaluator::new(metrics)
    }

    /// The metrics, in order.
    pub fn metrics(&self) -> &[Metric] {
        &self.metrics
    }

    /// The metric values for one query (same order as [`metrics`](Self::metrics)); `results`
    /// may be in any order.
    pub fn evaluate_query(
        &self,
        results: &[(String, f64)],
        judgments: &HashMap<String, i32>,
    ) -> Vec<f64> {
        let ranking = trec_ranking(results);
        self.metrics
            .iter()
            .map(|m| m.compute(&ranking, judgments))
            .collect()
    }

    /// Evaluates `run` on every query of `qrels`.
    pub fn evaluate(&self, run: &Run, qrels: &Qrels) -> Evaluation {
        let per_query: BTreeMap<String, Vec<f64>> = qrels
            .iter()
            .map(|(qid, judgments)| {
                let results = run.get(qid).map(Vec::as_slice).unwrap_or(&[]);
                (qid.clone(), self.evaluate_query(results, judgments))
            })
            .collect();
        let n = per_query.len();
        let mean = (0..self.metrics.len())
            .map(|j| {
                if n == 0 {
                    0.0
                } else {
                    per_query.values().map(|v| v[j]).sum::<f64>() / n as f64
                }
            })
            .collect();
        Evaluation {
            metrics: self.metrics.clone(),
            per_query,
            mean,
        }
    }
}

/// Evaluates `run` against `qrels` for `metrics` (see [`Evaluator`]).
pub fn evaluate(run: &Run, qrels: &Qrels, metrics: &[Metric]) -> Result<Evaluation> {
    Ok(Evaluator::new(metrics.iter().copied())?.evaluate(run, qrels))
}

/// The result of [`Evaluator::evaluate`]: per-query values and their means.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The metrics, in the evaluator's order.
    pub metrics: Vec<Metric>,
    /// Query id -> one value per metric (same order as `metrics`), for every judged query.
    pub per_query: BTreeMap<String, Vec<f64>>,
    /// The mean of each metric over the judged queries (0 when there are none).
    pub mean: Vec<f64>,
}

impl Evaluation {
    /// Number of queries evaluated.
    pub fn queries(&self) -> usize {
        self.per_query.len()
    }

    /// The mean value of `metric`, if it was evaluated.
    pub fn mean(&self, metric: &Metric) -> Option<f64> {
        let j = self.metrics.iter().position(|m| m == metric)?;
        self.mean.get(j).copied()
    }

    /// The mean value of the metric named `name` (e.g. `"ndcg@10"`), if it was evaluated.
    pub fn mean_of(&self, name: &str) -> Option<f64> {
        self.mean(&name.parse().ok()?)
    }

    /// The value of `metric` for query `qid`, if both were evaluated.
    pub fn query_value(&self, qid: &str, metric: &Metric) -> Option<f64> {
        let j = self.metrics.iter().position(|m| m == metric)?;
        self.per_query.get(qid)?.get(j).copied()
    }

    /// `(metric name, mean)` pairs in the evaluator's order.
    pub fn means(&self) -> Vec<(String, f64)> {
        self.metrics
            .iter()
            .map(ToString::to_string)
            .zip(self.mean.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judgments(pairs: &[(&str, i32)]) -> HashMap<String, i32> {
        pairs.iter().map(|(d, s)| (d.to_string(), *s)).collect()
    }

    fn close(got: f64, want: f64) {
        assert!((got - want).abs() < 1e-12, "got {got}, want {want}");
    }

    /// Graded judgments; `c` is judged non-relevant, `x` unjudged.
    fn graded() -> HashMap<String, i32> {
        judgments(&[("a", 3), ("b", 2), ("c", 0), ("d", 1)])
    }

    #[test]
    fn ndcg_graded_gain_and_ideal_from_all_judged_docs() {
        let ranking = ["c", "a", "x", "d", "b"];
        // DCG@3 = 3 / log2(3); ideal gains 3, 2, 1 -> 3 + 2 / log2(3) + 1 / 2.
        let idcg3 = 3.0 + 2.0 / 3f64.log2() + 0.5;
        close(ndcg_at(&ranking, &graded(), 3), (3.0 / 3f64.log2()) / idcg3);
        close(ndcg_at(&ranking, &graded(), 3), 0.397_489_522_291_688_4);
        // k larger than the list: every retrieved doc counts; the ideal has only 3 positive gains.
        let dcg = 3.0 / 3f64.log2() + 1.0 / 5f64.log2() + 2.0 / 6f64.log2();
        close(ndcg_at(&ranking, &graded(), 10), dcg / idcg3);
        close(ndcg_at(&ranking, &graded(), 1000), 0.650_412_182_176_103_5);
        // The perfect ranking scores 1 at every cutoff.
        for k in [1, 2, 3, 4, 100] {
            close(ndcg_at(&["a", "b", "d"], &graded(), k), 1.0);
        }
        // Relevant docs not retrieved still count in the ideal.
        close(ndcg_at(&["d"], &graded(), 10), 1.0 / idcg3);
    }

    #[test]
    fn ndcg_ignores_non_positive_gains() {
        let j = judgments(&[("a", -1), ("b", 1), ("c", 0)]);
        close(ndcg_at(&["a", "c", "b"], &j, 3), (1.0 / 4f64.log2()) / 1.0);
        close(ndcg_at(&["a", "c"], &j, 3), 0.0);
    }

    #[test]
    fn map_cut_divides_by_all_relevant_docs() {
        let j = judgments(&[("a", 1), ("b", 1), ("c", 1), ("z", 0)]);
        let ranking = ["a", "x", "b", "z", "y"];
        // relevant at ranks 1 and 3: (1/1 + 2/3) / 3 relevant docs in total.
        close(
            average_precision_at(&ranking, &j, 5),
            (1.0 + 2.0 / 3.0) / 3.0,
        );
        close(
            average_precision_at(&ranking, &j, 100),
            (1.0 + 2.0 / 3.0) / 3.0,
        );
        close(average_precision_at(&ranking, &j, 2), 1.0 / 3.0);
        close(average_precision_at(&ranking, &j, 1), 1.0 / 3.0);
        // graded scores count as relevant from 1 up
        close(
            average_precision_at(&["b", "a"], &graded(), 10),
            (1.0 + 1.0) / 3.0,
        );
    }

    #[test]
    fn recall_precision_and_reciprocal_rank() {
        let j = judgments(&[("a", 1), ("b", 2), ("c", 1), ("z", 0)]);
        let ranking = ["x", "z", "b", "y", "a"];
        close(recall_at(&ranking, &j, 2), 0.0);
        close(recall_at(&ranking, &j, 3), 1.0 / 3.0);
        close(recall_at(&ranking, &j, 5), 2.0 / 3.0);
        close(recall_at(&ranking, &j, 50), 2.0 / 3.0);
        close(precision_at(&ranking, &j, 3), 1.0 / 3.0);
        close(precision_at(&ranking, &j, 5), 2.0 / 5.0);
        // P@k always divides by k, even past the end of the list
        close(precision_at(&ranking, &j, 10), 2.0 / 10.0);
        close(precision_at(&ranking, &j, 0), 0.0);
        close(reciprocal_rank_at(&ranking, &j, 10), 1.0 / 3.0);
        close(reciprocal_rank_at(&ranking, &j, 3), 1.0 / 3.0);
        close(reciprocal_rank_at(&ranking, &j, 2), 0.0);
        close(reciprocal_rank_at(&["a"], &j, 1), 1.0);
    }

    #[test]
    fn queries_without_relevant_docs_or_results_score_zero() {
        let none = judgments(&[("a", 0), ("b", -2)]);
        let empty: [&str; 0] = [];
        for m in ["ndcg@10", "map@10", "recall@10", "mrr@10", "p@10"] {
            let m: Metric = m.parse().unwrap();
            close(m.compute(&["a", "b"], &none), 0.0);
            close(m.compute(&empty, &graded()), 0.0);
            close(m.compute(&empty, &HashMap::new()), 0.0);
        }
    }

    #[test]
    fn duplicate_docs_count_once() {
        let j = judgments(&[("a", 1), ("b", 1)]);
        let ranking = ["a", "a", "b"];
        close(recall_at(&ranking, &j, 2), 0.5);
        close(precision_at(&ranking, &j, 2), 0.5);
        close(precision_at(&ranking, &j, 3), 2.0 / 3.0);
        close(
            average_precision_at(&ranking, &j, 3),
            (1.0 + 2.0 / 3.0) / 2.0,
        );
        let want = (1.0 + 1.0 / 4f64.log2()) / (1.0 + 1.0 / 3f64.log2());
        close(ndcg_at(&ranking, &j, 3), want);
        close(ndcg_at(&ranking, &j, 3), 0.919_720_789_148_187_6);
        close(reciprocal_rank_at(&["x", "x", "a", "a"], &j, 10), 1.0 / 3.0);
    }

    #[test]
    fn trec_order_breaks_ties_by_descending_doc_id() {
        let mut run = vec![
            ("a".to_string(), 1.0),
            ("c".to_string(), 2.0),
            ("b".to_string(), 1.0),
            ("n".to_string(), f64::NAN),
            ("d10".to_string(), 1.0),
            ("d9".to_string(), 1.0),
        ];
        trec_order(&mut run);
        let ids: Vec<&str> = run.iter().map(|(d, _)| d.as_str()).collect();
        // byte-wise: "d9" > "d10" > "b" > "a"
        assert_eq!(ids, ["c", "d9", "d10", "b", "a", "n"]);
    }

    #[test]
    fn trec_ranking_keeps_the_best_occurrence_of_a_duplicate() {
        let run = vec![
            ("a".to_string(), 1.0),
            ("b".to_string(), 2.0),
            ("a".to_string(), 3.0),
        ];
        assert_eq!(trec_ranking(&run), ["a", "b"]);
    }

    #[test]
    fn evaluator_reorders_ties_like_trec_eval() {
        let j = judgments(&[("a", 1)]);
        let ev = Evaluator::from_names(&["mrr@10", "ndcg@10"]).unwrap();
        // "b" and "a" tie: trec_eval puts "b" first whatever the input order.
        let one = vec![("a".to_string(), 5.0), ("b".to_string(), 5.0)];
        let two = vec![("b".to_string(), 5.0), ("a".to_string(), 5.0)];
        let v1 = ev.evaluate_query(&one, &j);
        assert_eq!(v1, ev.evaluate_query(&two, &j));
        close(v1[0], 0.5);
        close(v1[1], 1.0 / 3f64.log2());
    }

    #[test]
    fn evaluate_covers_judged_queries_only_and_zero_fills_missing_ones() {
        let mut qrels = Qrels::new();
        qrels.insert("q1".into(), judgments(&[("a", 1), ("b", 1)]));
        qrels.insert("q2".into(), judgments(&[("c", 2)]));
        qrels.insert("q3".into(), judgments(&[("d", 0)]));
        let mut run = Run::new();
        run.insert(
            "q1".into(),
            vec![("x".into(), 3.0), ("a".into(), 2.0), ("b".into(), 1.0)],
        );
        // q2 is missing from the run; q3 has results but no relevant doc; q9 is not judged.
        run.insert("q3".into(), vec![("d".into(), 1.0)]);
        run.insert("q9".into(), vec![("a".into(), 1.0)]);
        let metrics = [Metric::recall(2), Metric::mrr(10), Metric::precision(3)];
        let eval = evaluate(&run, &qrels, &metrics).unwrap();
        assert_eq!(eval.queries(), 3);
        assert!(!eval.per_query.contains_key("q9"));
        assert_eq!(eval.per_query["q2"], [0.0, 0.0, 0.0]);
        assert_eq!(eval.per_query["q3"], [0.0, 0.0, 0.0]);
        close(eval.query_value("q1", &Metric::recall(2)).unwrap(), 0.5);
        close(eval.mean(&Metric::recall(2)).unwrap(), 0.5 / 3.0);
        close(eval.mean_of("mrr@10").unwrap(), 0.5 / 3.0);
        close(eval.mean_of("P@3").unwrap(), (2.0 / 3.0) / 3.0);
        assert_eq!(eval.mean_of("ndcg@10"), None);
        let names: Vec<String> = eval.means().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["recall@2", "mrr@10", "p@3"]);
        // no judged query at all: means are 0
        let empty = evaluate(&run, &Qrels::new(), &metrics).unwrap();
        assert_eq!(empty.queries(), 0);
        assert_eq!(empty.mean, [0.0, 0.0, 0.0]);
    }

    #[test]
    fn metric_names_parse_and_print() {
        let cases = [
            ("ndcg@10", Metric::ndcg(10)),
            ("nDCG@10", Metric::ndcg(10)),
            ("map@100", Metric::map(100)),
            ("AP@100", Metric::map(100)),
            ("recall@100", Metric::recall(100)),
            ("R@1000", Metric::recall(1000)),
            ("mrr@10", Metric::mrr(10)),
            ("RR@10", Metric::mrr(10)),
            ("p@10", Metric::precision(10)),
            (" precision@5 ", Metric::precision(5)),
        ];
        for (name, want) in cases {
            assert_eq!(name.parse::<Metric>().unwrap(), want, "{name}");
        }
        assert_eq!(Metric::precision(10).to_string(), "p@10");
        assert_eq!(Metric::map(100).to_string(), "map@100");
        for bad in [
            "ndcg", "ndcg@", "ndcg@0", "ndcg@-1", "bleu@10", "@10", "ndcg@ten",
        ] {
            let err = bad.parse::<Metric>().unwrap_err();
            assert!(matches!(err, Error::Parse { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn evaluator_validates_its_metrics() {
        assert!(Evaluator::new([]).is_err());
        assert!(Evaluator::new([Metric::ndcg(0)]).is_err());
        assert!(Evaluator::from_names(&["ndcg@10", "nope@3"]).is_err());
        let ev = Evaluator::from_names(&["ndcg@10", "NDCG@10", "p@5"]).unwrap();
        assert_eq!(ev.metrics(), [Metric::ndcg(10), Metric::precision(5)]);
    }
}
