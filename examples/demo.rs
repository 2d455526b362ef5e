//! The main job, fully offline: index the small handbook corpus shipped in `examples/data/`,
//! run a few queries through a pipeline, and print the ranked hits with their stage scores.
//!
//! ```text
//! cargo run --all-features --example demo
//! ```

use rerank::{Bm25Index, Document, Pipeline, SearchResponse};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/handbook.jsonl");

const QUERIES: [&str; 4] = [
    "Taylor's KTN",
    "how do I roll back a failed deployment",
    "what was the 2023 revenue",
    "can I bring my dog on a business trip",
];

fn main() -> rerank::Result<()> {
    let docs = Document::read_jsonl(CORPUS)?;
    println!(
        "indexed {} documents from examples/data/handbook.jsonl\n",
        docs.len()
    );
    let index = Bm25Index::new();
    index.add(docs);
    let pipeline = Pipeline::builder().retriever(index).top_k(3).build()?;
    for query in QUERIES {
        print_response(&pipeline.search(query)?);
    }
    Ok(())
}

fn print_response(response: &SearchResponse) {
    println!("query: {}", response.query);
    println!(
        "  {:>4} {:>7} {:>8} {:>8} {:>8}  {:<28} source",
        "rank", "stage1", "bm25", "vector", "rerank", "id"
    );
    let opt = |v: Option<f32>| v.map_or("-".to_string(), |s| format!("{s:.3}"));
    for (i, h) in response.hits.iter().enumerate() {
        println!(
            "  {:>4} {:>7} {:>8} {:>8} {:>8}  {:<28} {}",
            i + 1,
            h.stage1_rank,
            opt(h.bm25_score),
            opt(h.vector_score),
            opt(h.rerank_score),
            h.document.id,
            h.document.source.as_deref().unwrap_or("-"),
        );
    }
    println!(
        "  scorer: {}; {} candidates; {:.2} ms\n",
        response.scorer, response.candidates, response.timings.total_ms
    );
}
