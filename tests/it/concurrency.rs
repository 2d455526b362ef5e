//! One `Arc<Pipeline>` shared by many threads gives exactly the sequential results.

use std::sync::Arc;

use rerank::rerankers::LexicalReranker;
use rerank::{Bm25Index, Document, Pipeline, RuleClassifier};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/handbook.jsonl");

const QUERIES: [&str; 8] = [
    "Taylor's KTN",
    "how do I roll back a failed deployment",
    "what was the 2023 revenue",
    "can I bring my dog on a business trip",
    "hotel receipts",
    "per diem alcohol",
    "summarize the onboarding notes",
    "premium economy for long flights",
];

fn fingerprint(p: &Pipeline, q: &str) -> Vec<(String, u32, Option<u32>, bool)> {
    p.search(q)
        .unwrap()
        .hits
        .iter()
        .map(|h| {
            (
                h.id().to_string(),
                h.score.to_bits(),
                h.rerank_score.map(f32::to_bits),
                h.protected,
            )
        })
        .collect()
}

#[test]
fn eight_threads_times_200_queries_equal_the_sequential_results() {
    let index = Bm25Index::new();
    index.add(Document::read_jsonl(CORPUS).unwrap()).unwrap();
    let pipeline = Arc::new(
        Pipeline::builder()
            .retriever(index)
            .reranker(LexicalReranker)
            .classifier(RuleClassifier::default())
            .top_k(3)
            .candidate_multiplier(4)
            .build()
            .unwrap(),
    );
    let sequential: Vec<_> = QUERIES.iter().map(|q| fingerprint(&pipeline, q)).collect();
    assert!(sequential.iter().all(|hits| !hits.is_empty()));
    std::thread::scope(|s| {
        for t in 0..8 {
            let pipeline = Arc::clone(&pipeline);
            let sequential = &sequential;
            s.spawn(move || {
                for i in 0..200 {
                    let q = (i + t) % QUERIES.len();
                    assert_eq!(
                        fingerprint(&pipeline, QUERIES[q]),
                        sequential[q],
                        "{}",
                        QUERIES[q]
                    );
                }
            });
        }
    });
}
