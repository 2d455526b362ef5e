//! `rerank search`: run one query over a JSONL corpus (indexed in memory) or an SQLite store
//! (`rerank index`), print the hits.
//!
//! ```text
//! cargo run --release --example rerank -- search --corpus FILE.jsonl --json "query"
//! cargo run --release --example rerank -- search --db notes.db [--retriever hybrid \
//!     --model models/all-MiniLM-L6-v2] --json "query"
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rerank::recall::Fusion;
use rerank::{Bm25Index, Document, Embedder, Hybrid, Pipeline, Retriever, Store};

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// JSONL corpus: one {"id", "text", "title"?, "source"?, "page"?, "metadata"?} per line
    /// (indexed in memory for BM25).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "db",
        required_unless_present = "db"
    )]
    corpus: Option<PathBuf>,
    /// An SQLite store filled by `rerank index`: queried without re-indexing.
    #[arg(long, value_name = "FILE")]
    db: Option<PathBuf>,
    /// With --db: bm25, dense or hybrid (BM25 + dense, reciprocal rank fusion).
    #[arg(long, default_value = "bm25")]
    retriever: String,
    /// With --db and a dense or hybrid retriever: the embedding model the store was indexed with.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// Threads for the embedding model (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Number of hits.
    #[arg(long, default_value_t = 10)]
    top_k: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// JSON file of known people for the query classifier: {"alias": "Canonical Name", ...}.
    #[arg(long)]
    aliases: Option<PathBuf>,
    /// The query.
    query: String,
}

pub fn run(args: Args) -> CliResult {
    let retriever: Box<dyn Retriever> = match (&args.db, &args.corpus) {
        (Some(db), _) => store_retriever(&args, db)?,
        (None, Some(corpus)) => {
            let index = Bm25Index::new();
            index.add(Document::read_jsonl(corpus)?)?;
            Box::new(index)
        }
        (None, None) => return Err("give --corpus FILE or --db FILE".into()),
    };
    // The PII guard (on by default) refuses a query with personal data before retrieval; the
    // classifier makes factual queries keep their top lexical matches first when reranked.
    let pipeline = Pipeline::builder()
        .retriever(retriever)
        .classifier(crate::classify::classifier(args.aliases.as_ref())?)
        .pii_guard(rerank::PiiGuard::default())
        .top_k(args.top_k)
        .build()?;
    let response = pipeline.search(&args.query)?;
    if args.json {
        println!("{}", serde_json::to_string(&response_json(&response))?);
    } else {
        print_table(&response);
    }
    Ok(())
}

/// The recall `--retriever` asks for, over the store in `db`.
fn store_retriever(args: &Args, db: &Path) -> CliResult<Box<dyn Retriever>> {
    if !db.is_file() {
        return Err(format!(
            "{}: no such store (fill one with `rerank index`)",
            db.display()
        )
        .into());
    }
    let store = Arc::new(Store::open(db)?);
    let embedder = || -> CliResult<Arc<dyn Embedder>> {
        match &args.model {
            Some(dir) => load_embedder(dir, args.threads),
            None => Err(format!("--retriever {} needs --model DIR", args.retriever).into()),
        }
    };
    Ok(match args.retriever.as_str() {
        "bm25" => Box::new(store.bm25()),
        "dense" => Box::new(store.dense(embedder()?)?),
        "hybrid" => Box::new(
            Hybrid::new(Fusion::Rrf { k: 60.0 })
                .with(store.bm25(), 1.0)
                .with(store.dense(embedder()?)?, 1.0)
                .depth(100),
        ),
        other => {
            return Err(
                format!("unknown retriever {other:?} (available: bm25, dense, hybrid)").into(),
            )
        }
    })
}

/// The BERT bi-encoder in `dir`.
#[cfg(feature = "models")]
pub fn load_embedder(dir: &Path, threads: Option<usize>) -> CliResult<Arc<dyn Embedder>> {
    let options = rerank::models::ModelOptions {
        threads,
        ..Default::default()
    };
    Ok(Arc::new(
        rerank::BertEmbedder::builder(dir)
            .options(options)
            .build()?,
    ))
}

/// Without the `models` feature there is no embedder.
#[cfg(not(feature = "models"))]
pub fn load_embedder(dir: &Path, _threads: Option<usize>) -> CliResult<Arc<dyn Embedder>> {
    Err(format!(
        "{}: embedding models need the `models` feature",
        dir.display()
    )
    .into())
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
}
