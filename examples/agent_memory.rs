//! System 2: a coding agent's memory search.
//!
//! Two stages: `top_k x 10` candidates (capped at 100) from an RRF hybrid of BM25 and vectors,
//! then a reranker; every hit carries its rerank score and its stage-1 (original) rank. Each
//! request can pick the recall mode (bm25 / vector / hybrid / a host retriever such as a
//! graph), the fusion weight, a threshold and the rerank depth, and filter on source type,
//! language and path. When the reranking model fails, lexical scores stand in and the response
//! says so. Configuration: `examples/configs/agent_memory.json`; runs offline.
//!
//! ```text
//! cargo run --example agent_memory
//! ```

use std::sync::Arc;

use rerank::pipeline::{PipelineConfig, SearchRequest, SearchResponse};
use rerank::recall::SearchQuery;
use rerank::rerankers::{FallbackReranker, LexicalReranker, RerankQuery};
use rerank::{Document, Error, Hit, Reranker, Retriever};

/// A host retriever: the memories that share a file with a memory about the query's path.
struct SameFile(Vec<Arc<Document>>);

impl Retriever for SameFile {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> rerank::Result<Vec<Hit>> {
        Ok(self
            .0
            .iter()
            .filter(|d| d.source.as_deref().is_some_and(|s| query.text.contains(s)))
            .take(k)
            .map(|d| Hit::new(Arc::clone(d), 1.0))
            .collect())
    }
    fn name(&self) -> &str {
        "graph"
    }
}

/// The reranking model, down for maintenance.
struct ModelDown;

impl Reranker for ModelDown {
    fn score(&self, _q: &RerankQuery, _docs: &[&str]) -> rerank::Result<Vec<f32>> {
        Err(Error::rerank(
            "connection refused: the reranker service is down",
        ))
    }
    fn name(&self) -> &str {
        "cross-encoder-service"
    }
}

fn show(title: &str, r: &SearchResponse) {
    println!(
        "> {title}: mode {}, {} candidates, scorer {}{}, {:.2} ms",
        r.mode.as_deref().unwrap_or("default"),
        r.candidates,
        r.scorer,
        if r.rerank_fallback { " (fallback)" } else { "" },
        r.timings.total_ms
    );
    if let Some(why) = &r.stage2_skipped {
        println!("  stage 2 did not rerank: {why}");
    }
    for h in &r.hits {
        println!(
            "  {:<34} rerank_score {:>5}  original_rank {:>2}",
            h.document.source.as_deref().unwrap_or(&h.document.id),
            h.rerank_score.map_or("-".into(), |s| format!("{s:.2}")),
            h.stage1_rank
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = PipelineConfig::from_path(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/configs/agent_memory.json"
    ))?;
    let docs: Vec<Arc<Document>> = Document::read_jsonl(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/data/agent_memory.jsonl"
    ))?
    .into_iter()
    .map(Arc::new)
    .collect();
    let pipeline = config
        .builder(Vec::new())?
        .recall_mode("graph", SameFile(docs))
        .build()?;
    println!("recall modes: {}", pipeline.recall_modes().join(", "));

    let q = "how does the cache invalidate stale entries";
    show("hybrid (RRF)", &pipeline.search(q)?);
    show(
        "bm25 only",
        &pipeline.search_with(&SearchRequest::new(q).mode("bm25"))?,
    );
    show(
        "hybrid, vector weight 0.8",
        &pipeline.search_with(&SearchRequest::new(q).mode("hybrid").fusion_weight(0.8))?,
    );
    show(
        "rust code under src/cache/",
        &pipeline.search_with(
            &SearchRequest::new(q)
                .source_types(["code"])
                .languages(["rust"])
                .path_prefix("src/cache/"),
        )?,
    );
    show(
        "rerank depth 2",
        &pipeline.search_with(&SearchRequest::new(q).rerank_depth(2))?,
    );
    show(
        "graph (host retriever)",
        &pipeline.search_with(&SearchRequest::new("src/cache/semantic.rs").mode("graph"))?,
    );

    // The model is down: lexical scores stand in, and the response says so.
    let degraded = config
        .builder(Vec::new())?
        .reranker(
            FallbackReranker::builder(ModelDown)
                .fallback(LexicalReranker)
                .build()?,
        )
        .build()?;
    let r = degraded.search(q)?;
    show("reranker down", &r);
    println!("  why: {}", r.rerank_error.as_deref().unwrap_or("-"));
    Ok(())
}
