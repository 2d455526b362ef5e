//! `rerank`: a command-line front end to the crate.
//!
//! ```text
//! cargo run --release --example rerank -- index --db FILE.db --corpus FILE.jsonl [--model DIR] --json
//! cargo run --release --example rerank -- search --corpus FILE.jsonl --json "query"
//! cargo run --release --example rerank -- search --db FILE.db --json "query"
//! cargo run --release --example rerank -- beir --data DIR --retriever bm25 --json
//! cargo run --release --example rerank -- answer --corpus FILE.jsonl --json "question"
//! cargo run --release --example rerank --features redis -- cache stats --cache redis://127.0.0.1:6379
//! cargo run --release --example rerank -- generate --model DIR --prompt "Hi" --greedy --json
//! cargo run --release --example rerank -- classify --aliases aliases.json --json "Taylor's KTN"
//! ```
//! Errors go to stderr with a non-zero exit code.

mod answer;
mod beir;
mod cache;
mod classify;
mod embed;
mod generate;
mod index;
mod ingest;
mod query;
mod recall;
mod score;
mod search;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Result type of every subcommand.
pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "rerank",
    version,
    about = "Two-stage retrieval, reranking and grounded answers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Answer a question from a JSONL corpus, with citations and a grounding check.
    Answer(answer::Args),
    /// Evaluate retrieval on a BEIR-layout collection.
    Beir(beir::Args),
    /// Stats, invalidation and clearing of the semantic cache shared through Redis.
    Cache(cache::Args),
    /// Embed JSONL texts with a BERT bi-encoder; one {"embedding": [...]} line per input line.
    Embed(embed::Args),
    /// Run the Qwen3 chat model on one prompt and print the new token ids.
    Generate(generate::Args),
    /// Turn a directory of PDF files into a JSONL corpus of chunks (feature `pdf`).
    Ingest(ingest::Args),
    /// Upsert a JSONL corpus into an SQLite store (documents, BM25, embeddings).
    Index(index::Args),
    /// Run one query over a JSONL corpus or an SQLite store.
    Search(search::Args),
    /// Classify a query: kind, intent, route, task type, confidence and signals.
    Classify(classify::Args),
    /// The query layer of a pipeline config: answer, --classify-only, --dry-run, --cache-stats, --invalidate-act.
    Query(query::Args),
    /// Score (query, document) pairs from a JSONL file with a local model (a cross-encoder,
    /// Qwen3-Reranker or BERT bi-encoder: what `search --reranker` takes).
    Score(score::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Answer(args) => answer::run(args),
        Command::Beir(args) => beir::run(args),
        Command::Cache(args) => cache::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Generate(args) => generate::run(args),
        Command::Index(args) => index::run(args),
        Command::Ingest(args) => ingest::run(args),
        Command::Search(args) => search::run(args),
        Command::Classify(args) => classify::run(args),
        Command::Query(args) => query::run(args),
        Command::Score(args) => score::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
