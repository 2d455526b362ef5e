//! Pipeline behaviour: candidate depth, rerank and its fallback, threshold, dedup, filters,
//! stage-1 ranks, per-call overrides, thread safety.

use std::sync::{Arc, Mutex};

use rerank::pipeline::{DedupKey, Filter, SearchRequest};
use rerank::recall::SearchQuery;
use rerank::rerankers::RerankQuery;
use rerank::{Document, Error, Hit, Pipeline, Reranker, Result, Retriever};

/// Returns documents 0..n with descending scores n..1 and records each `k` it was asked for.
struct Fixed {
    docs: Vec<Arc<Document>>,
    asked: Arc<Mutex<Vec<usize>>>,
}

impl Fixed {
    fn new(docs: Vec<Document>) -> (Self, Arc<Mutex<Vec<usize>>>) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let r = Fixed {
            docs: docs.into_iter().map(Arc::new).collect(),
            asked: asked.clone(),
        };
        (r, asked)
    }
}

impl Retriever for Fixed {
    fn retrieve(&self, _q: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.asked.lock().unwrap().push(k);
        let n = self.docs.len();
        Ok(self
            .docs
            .iter()
            .take(k)
            .enumerate()
            .map(|(i, d)| Hit::new(d.clone(), (n - i) as f32).with_bm25((n - i) as f32))
            .collect())
    }
}

fn docs(n: usize) -> Vec<Document> {
    (0..n)
        .map(|i| Document::new(format!("d{i}"), format!("text {i}")))
        .collect()
}

/// Scores a document by the number in its text: higher number = better (reverses stage 1).
struct ByNumber;
impl Reranker for ByNumber {
    fn score(&self, _q: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(docs
            .iter()
            .map(|d| d.rsplit(' ').next().unwrap().parse::<f32>().unwrap())
            .collect())
    }
    fn name(&self) -> &str {
        "by-number"
    }
}

struct Failing;
impl Reranker for Failing {
    fn score(&self, _q: &RerankQuery, _docs: &[&str]) -> Result<Vec<f32>> {
        Err(Error::rerank("model exploded"))
    }
}

struct WrongLength;
impl Reranker for WrongLength {
    fn score(&self, _q: &RerankQuery, _docs: &[&str]) -> Result<Vec<f32>> {
        Ok(vec![1.0])
    }
}

fn ids(hits: &[Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.id()).collect()
}

#[test]
fn stage1_depth_is_top_k_times_multiplier_capped() {
    let (r, asked) = Fixed::new(docs(500));
    let p = Pipeline::builder().retriever(r).top_k(3).build().unwrap();
    assert_eq!(p.search("q").unwrap().candidates, 30);
    p.search_with(&SearchRequest::new("q").top_k(20)).unwrap();
    p.search_with(&SearchRequest::new("q").top_k(150)).unwrap();
    assert_eq!(*asked.lock().unwrap(), vec![30, 100, 150]);

    let (r, asked) = Fixed::new(docs(500));
    let p = Pipeline::builder()
        .retriever(r)
        .top_k(5)
        .candidate_multiplier(3)
        .max_candidates(12)
        .build()
        .unwrap();
    p.search("q").unwrap();
    p.search_with(&SearchRequest::new("q").top_k(2)).unwrap();
    assert_eq!(*asked.lock().unwrap(), vec![12, 6]);
}

#[test]
fn rerank_reorders_and_keeps_stage1_ranks_and_scores() {
    let (r, _) = Fixed::new(docs(40));
    let p = Pipeline::builder()
        .retriever(r)
        .reranker(ByNumber)
        .top_k(3)
        .dedup(DedupKey::None)
        .build()
        .unwrap();
    let resp = p.search("q").unwrap();
    assert!(resp.reranked);
    assert!(!resp.rerank_fallback);
    assert_eq!(resp.scorer, "by-number");
    assert_eq!(resp.candidates, 30);
    assert_eq!(ids(&resp.hits), ["d29", "d28", "d27"]);
    let top = &resp.hits[0];
    assert_eq!(top.stage1_rank, 30);
    assert_eq!(top.stage1_score, 11.0);
    assert_eq!(top.bm25_score, Some(11.0));
    assert_eq!(top.rerank_score, Some(29.0));
    assert_eq!(top.score, 29.0);
    assert!(resp.timings.rerank_ms.is_some());
}

#[test]
fn a_configured_reranker_orders_even_a_short_list() {
    // Stage 1 returns no more candidates than top_k: their order still matters.
    let (r, _) = Fixed::new(docs(3));
    let p = Pipeline::builder()
        .retriever(r)
        .reranker(ByNumber)
        .top_k(3)
        .build()
        .unwrap();
    let resp = p.search("q").unwrap();
    assert!(resp.reranked);
    assert_eq!(resp.scorer, "by-number");
    assert_eq!(resp.stage2_skipped, None);
    assert_eq!(resp.reranked_candidates, 3);
    assert_eq!(ids(&resp.hits), ["d2", "d1", "d0"]);
}

#[test]
fn skip_rerank_within_top_k_keeps_stage1_order_and_says_why() {
    let (r, _) = Fixed::new(docs(3));
    let p = Pipeline::builder()
        .retriever(r)
        .reranker(ByNumber)
        .top_k(3)
        .skip_rerank_within_top_k(true)
        .build()
        .unwrap();
    let resp = p.search("q").unwrap();
    assert!(!resp.reranked);
    assert_eq!(resp.scorer, "stage1");
    assert_eq!(ids(&resp.hits), ["d0", "d1", "d2"]);
    assert!(resp.hits.iter().all(|h| h.rerank_score.is_none()));
    let why = resp.stage2_skipped.as_deref().unwrap();
    assert!(
        why.contains("3 candidates") && why.contains("top_k 3"),
        "{why}"
    );
    assert!(why.contains("skip_rerank_within_top_k"), "{why}");
    // The JSON form carries the reason and reads back.
    let json = serde_json::to_string(&resp).unwrap();
    let back: rerank::SearchResponse = serde_json::from_str(&json).unwrap();
    assert_eq!(back.stage2_skipped, resp.stage2_skipped);
    // A top_k below the candidates reranks as before.
    let resp = p.search_with(&SearchRequest::new("q").top_k(2)).unwrap();
    assert!(resp.reranked);
    assert_eq!(resp.stage2_skipped, None);
    assert_eq!(ids(&resp.hits), ["d2", "d1"]);
    // The dry run says so too.
    assert!(
        p.plan(&SearchRequest::new("q"))
            .unwrap()
            .rerank_skipped_within_top_k
    );
}

#[test]
fn without_a_reranker_the_response_says_stage2_did_not_run() {
    let (r, _) = Fixed::new(docs(5));
    let p = Pipeline::builder().retriever(r).top_k(3).build().unwrap();
    let resp = p.search("q").unwrap();
    assert!(!resp.reranked);
    assert_eq!(
        resp.stage2_skipped.as_deref(),
        Some("no reranker is configured")
    );
}

#[test]
fn failing_reranker_falls_back_to_stage1_order() {
    for reranker in [
        Box::new(Failing) as Box<dyn Reranker>,
        Box::new(WrongLength),
    ] {
        let (r, _) = Fixed::new(docs(40));
        let p = Pipeline::builder()
            .retriever(r)
            .reranker(reranker)
            .top_k(4)
            .build()
            .unwrap();
        let resp = p.search("q").unwrap();
        assert!(resp.rerank_fallback);
        assert!(!resp.reranked);
        assert_eq!(resp.scorer, "stage1");
        assert!(
            resp.rerank_error
                .as_deref()
                .unwrap()
                .contains("reranking failed")
                || resp.rerank_error.as_deref().unwrap().contains("scores for")
        );
        assert_eq!(ids(&resp.hits), ["d0", "d1", "d2", "d3"]);
        assert_eq!(resp.hits[2].stage1_rank, 3);
    }
}

#[test]
fn threshold_drops_low_final_scores() {
    let (r, _) = Fixed::new(docs(10));
    let p = Pipeline::builder()
        .retriever(r)
        .top_k(10)
        .score_threshold(7.5)
        .build()
        .unwrap();
    // stage-1 scores are 10, 9, 8, 7, ...
    assert_eq!(ids(&p.search("q").unwrap().hits), ["d0", "d1", "d2"]);
}

#[test]
fn dedup_by_source_and_page_keeps_the_best() {
    let docs = vec![
        Document::new("a1", "x").with_source("a.pdf").with_page(1),
        Document::new("a1-dup", "x")
            .with_source("a.pdf")
            .with_page(1),
        Document::new("a2", "x").with_source("a.pdf").with_page(2),
        Document::new("nosrc1", "x"),
        Document::new("nosrc2", "x"),
        Document::new("b", "x").with_source("b.pdf"),
        Document::new("b-dup", "x").with_source("b.pdf"),
    ];
    let (r, _) = Fixed::new(docs.clone());
    let p = Pipeline::builder().retriever(r).build().unwrap();
    assert_eq!(
        ids(&p.search("q").unwrap().hits),
        ["a1", "a2", "nosrc1", "nosrc2", "b"]
    );
    let (r, _) = Fixed::new(docs.clone());
    let p = Pipeline::builder()
        .retriever(r)
        .dedup(DedupKey::Source)
        .build()
        .unwrap();
    assert_eq!(
        ids(&p.search("q").unwrap().hits),
        ["a1", "nosrc1", "nosrc2", "b"]
    );
    let (r, _) = Fixed::new(docs);
    let p = Pipeline::builder()
        .retriever(r)
        .dedup(DedupKey::None)
        .build()
        .unwrap();
    assert_eq!(p.search("q").unwrap().hits.len(), 7);
}

#[test]
fn metadata_filters_from_builder_and_request() {
    let docs = vec![
        Document::new("1", "x")
            .with_source("docs/a.md")
            .with_metadata("lang", "en"),
        Document::new("2", "x")
            .with_source("src/b.rs")
            .with_metadata("lang", "en"),
        Document::new("3", "x")
            .with_source("docs/c.md")
            .with_metadata("lang", "de"),
        Document::new("4", "x").with_source("docs/d.md"),
    ];
    let (r, _) = Fixed::new(docs);
    let p = Pipeline::builder()
        .retriever(r)
        .filter(Filter::prefix("source", "docs/"))
        .build()
        .unwrap();
    let resp = p.search("q").unwrap();
    assert_eq!(ids(&resp.hits), ["1", "3", "4"]);
    assert_eq!(resp.hits[1].stage1_rank, 3);
    let resp = p
        .search_with(&SearchRequest::new("q").filter(Filter::eq("lang", "en")))
        .unwrap();
    assert_eq!(ids(&resp.hits), ["1"]);
}

#[test]
fn invalid_input_and_config() {
    assert!(matches!(Pipeline::builder().build(), Err(Error::Config(_))));
    let (r, _) = Fixed::new(docs(3));
    assert!(Pipeline::builder().retriever(r).top_k(0).build().is_err());
    let (r, _) = Fixed::new(docs(3));
    let p = Pipeline::builder().retriever(r).build().unwrap();
    assert!(matches!(p.search("   "), Err(Error::InvalidInput(_))));
    assert!(p.search_with(&SearchRequest::new("q").top_k(0)).is_err());
}

#[test]
fn pipeline_is_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Pipeline>();
    let index = rerank::Bm25Index::new();
    index.add(docs(200)).unwrap();
    let p = Arc::new(
        Pipeline::builder()
            .retriever(index)
            .top_k(5)
            .build()
            .unwrap(),
    );
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let q = format!("text {}", (t * 50 + i) % 200);
                    let resp = p.search(&q).unwrap();
                    assert!(!resp.hits.is_empty());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
