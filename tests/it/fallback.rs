//! FallbackReranker inside a pipeline: the response says which scorer produced the order.

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use rerank::recall::SearchQuery;
use rerank::rerankers::RerankQuery;
use rerank::{Document, Error, FallbackReranker, Hit, Pipeline, Reranker, Result, Retriever};

/// Stage 1: d0, d1, ... with descending scores.
struct InOrder(Vec<Arc<Document>>);

impl Retriever for InOrder {
    fn retrieve(&self, _: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        Ok(self
            .0
            .iter()
            .take(k)
            .enumerate()
            .map(|(i, d)| Hit::new(d.clone(), 100.0 - i as f32))
            .collect())
    }
}

/// Prefers longer documents (reverses stage 1 below).
struct Longest;
impl Reranker for Longest {
    fn score(&self, _: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(docs.iter().map(|d| d.len() as f32).collect())
    }
    fn name(&self) -> &str {
        "longest"
    }
}

struct Failing;
impl Reranker for Failing {
    fn score(&self, _: &RerankQuery, _: &[&str]) -> Result<Vec<f32>> {
        Err(Error::model("out of memory"))
    }
    fn name(&self) -> &str {
        "qwen3-reranker"
    }
}

/// Never answers: every call blocks on a channel nobody sends on (the test abandons it).
struct Stuck {
    never: Mutex<mpsc::Receiver<()>>,
    _keep_open: Mutex<mpsc::Sender<()>>,
}

impl Stuck {
    fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        Stuck {
            never: Mutex::new(rx),
            _keep_open: Mutex::new(tx),
        }
    }
}

impl Reranker for Stuck {
    fn score(&self, _: &RerankQuery, _: &[&str]) -> Result<Vec<f32>> {
        let _ = self.never.lock().unwrap().recv();
        Err(Error::rerank("unreachable: nobody sends"))
    }
    fn name(&self) -> &str {
        "stuck"
    }
}

fn pipeline(reranker: FallbackReranker) -> Pipeline {
    let docs = (0..6)
        .map(|i| Arc::new(Document::new(format!("d{i}"), "x".repeat(i + 1))))
        .collect();
    Pipeline::builder()
        .retriever(InOrder(docs))
        .reranker(reranker)
        .top_k(3)
        .build()
        .unwrap()
}

fn ids(p: &Pipeline) -> (Vec<String>, rerank::SearchResponse) {
    let r = p.search("q").unwrap();
    (r.hits.iter().map(|h| h.id().to_string()).collect(), r)
}

#[test]
fn a_working_primary_orders_the_hits() {
    let p = pipeline(FallbackReranker::builder(Longest).build().unwrap());
    let (order, r) = ids(&p);
    assert_eq!(order, ["d5", "d4", "d3"]);
    assert_eq!(r.scorer, "longest");
    assert!(r.reranked && !r.rerank_fallback && r.rerank_error.is_none());
}

#[test]
fn a_failing_primary_without_fallback_keeps_stage_one_order() {
    let p = pipeline(FallbackReranker::builder(Failing).build().unwrap());
    let (order, r) = ids(&p);
    assert_eq!(order, ["d0", "d1", "d2"]);
    assert_eq!(r.scorer, "stage1");
    assert!(!r.reranked && r.rerank_fallback);
    let error = r.rerank_error.unwrap();
    assert!(
        error.contains("qwen3-reranker failed") && error.contains("out of memory"),
        "{error}"
    );
}

#[test]
fn a_failing_primary_hands_over_to_the_fallback() {
    let p = pipeline(
        FallbackReranker::builder(Failing)
            .fallback(Longest)
            .build()
            .unwrap(),
    );
    let (order, r) = ids(&p);
    assert_eq!(order, ["d5", "d4", "d3"]);
    assert_eq!(r.scorer, "longest");
    assert!(r.reranked && r.rerank_fallback);
    assert!(r.rerank_error.unwrap().contains("out of memory"));
}

#[test]
fn a_primary_over_budget_hands_over_to_the_fallback() {
    let reranker = FallbackReranker::builder(Stuck::new())
        .fallback(Longest)
        .budget(Duration::from_millis(50))
        .build()
        .unwrap();
    let p = pipeline(reranker);
    let (order, r) = ids(&p);
    assert_eq!(order, ["d5", "d4", "d3"]);
    assert_eq!(r.scorer, "longest");
    assert!(r.rerank_fallback);
    let reason = r.rerank_error.unwrap();
    assert!(
        reason.contains("stuck exceeded the latency budget of 50 ms"),
        "{reason}"
    );
    // The stuck call is still running: the next search skips the primary.
    let (_, r) = ids(&p);
    assert!(r.rerank_error.unwrap().contains("still running"));
}

#[test]
fn a_primary_over_budget_without_fallback_keeps_stage_one_order() {
    let reranker = FallbackReranker::builder(Stuck::new())
        .budget(Duration::from_millis(50))
        .build()
        .unwrap();
    let (order, r) = ids(&pipeline(reranker));
    assert_eq!(order, ["d0", "d1", "d2"]);
    assert_eq!(r.scorer, "stage1");
    assert!(r
        .rerank_error
        .unwrap()
        .contains("exceeded the latency budget"));
}
