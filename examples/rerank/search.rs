//! `rerank search`: run one query over a JSONL corpus (indexed in memory), an SQLite store
//! (`rerank index`) or a Milvus collection, optionally reranked and cached; print the hits.
//!
//! ```text
//! cargo run --release --example rerank -- search --corpus FILE.jsonl --json "query"
//! cargo run --release --example rerank -- search --db notes.db [--retriever hybrid \
//!     --embedder models/all-MiniLM-L6-v2] --json "query"
//! cargo run --release --example rerank --features milvus,redis -- search --corpus FILE.jsonl \
//!     --retriever hybrid --embedder MODEL --vector-store milvus://127.0.0.1:19530/notes \
//!     --reranker DIR --cache redis://127.0.0.1:6379 --json "query"
//! ```

use std::path::PathBuf;

use crate::recall::RecallArgs;
use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    recall: RecallArgs,
    /// Number of hits.
    #[arg(long, value_name = "N", default_value_t = 10)]
    top_k: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Keep stage-1 order when stage 1 returns no more candidates than --top-k (default: the
    /// reranker orders every list; the output says when it was skipped).
    #[arg(long)]
    skip_rerank_within_top_k: bool,
    /// JSON file of known people for the query classifier: {"alias": "Canonical Name", ...}.
    #[arg(long, value_name = "FILE")]
    aliases: Option<PathBuf>,
    #[command(flatten)]
    log: crate::flags::LogArgs,
    /// The query.
    query: String,
}

pub fn run(args: Args) -> CliResult {
    args.log.init()?;
    // The PII guard (on by default) refuses a query with personal data before retrieval; the
    // classifier makes factual queries keep their top lexical matches first when reranked.
    let pipeline = args
        .recall
        .builder()?
        .classifier(crate::classify::classifier(args.aliases.as_ref())?)
        .pii_guard(rerank::PiiGuard::default())
        .top_k(args.top_k)
        .skip_rerank_within_top_k(args.skip_rerank_within_top_k)
        .build()?;
    let response = pipeline.search(&args.query)?;
    if args.json {
        println!("{}", serde_json::to_string(&response_json(&response))?);
    } else {
        print_table(&response);
    }
    Ok(())
}

/// The JSON form: hits flattened with the document's fields.
pub fn response_json(response: &rerank::SearchResponse) -> serde_json::Value {
    let hits: Vec<serde_json::Value> = response
        .hits
        .iter()
        .enumerate()
        .map(|(i, h)| {
            serde_json::json!({
                "id": h.document.id,
                "rank": i + 1,
                "score": h.score,
                "stage1_rank": h.stage1_rank,
                "stage1_score": h.stage1_score,
                "bm25_score": h.bm25_score,
                "vector_score": h.vector_score,
                "rerank_score": h.rerank_score,
                "protected": h.protected,
                "title": h.document.title,
                "source": h.document.source,
                "page": h.document.page,
                "text": h.document.text,
            })
        })
        .collect();
    serde_json::json!({
        "query": response.query,
        "hits": hits,
        "candidates": response.candidates,
        "reranked": response.reranked,
        "scorer": response.scorer,
        "rerank_fallback": response.rerank_fallback,
        "rerank_error": response.rerank_error,
        "stage2_skipped": response.stage2_skipped,
        "classification": response.classification,
        "cache_hit": response.cache_hit,
        "timings": response.timings,
    })
}

/// A human-readable table of hits with their stage scores.
pub fn print_table(response: &rerank::SearchResponse) {
    println!("query: {}", response.query);
    println!(
        "{:>4}  {:>6}  {:>9}  {:>9}  {:>9}  {:<24}  text",
        "rank", "stage1", "bm25", "vector", "rerank", "id"
    );
    let opt = |v: Option<f32>| v.map_or("-".to_string(), |s| format!("{s:.4}"));
    for (i, h) in response.hits.iter().enumerate() {
        let text: String = h.document.text.chars().take(60).collect();
        println!(
            "{:>4}  {:>6}  {:>9}  {:>9}  {:>9}  {:<24}  {}",
            i + 1,
            h.stage1_rank,
            opt(h.bm25_score),
            opt(h.vector_score),
            opt(h.rerank_score),
            h.document.id,
            text
        );
    }
    let t = &response.timings;
    println!(
        "({} candidates, scorer {}, retrieve {:.2} ms, total {:.2} ms)",
        response.candidates, response.scorer, t.retrieve_ms, t.total_ms
    );
    if let Some(why) = &response.stage2_skipped {
        println!("(stage 2 did not rerank: {why})");
    }
    match (&response.rerank_error, response.reranked) {
        (Some(e), true) => println!("(a fallback scorer stood in for the reranker: {e})"),
        (Some(e), false) => println!("(the reranker failed, stage-1 order kept: {e})"),
        (None, _) => {}
    }
}
