//! `rerank`: a command-line front end to the crate.
//!
//! ```text
//! cargo run --release --example rerank -- search --corpus FILE.jsonl --json "query"
//! cargo run --release --example rerank -- beir --data DIR --retriever bm25 --json
//! ```
//! Errors go to stderr with a non-zero exit code.

mod beir;
mod embed;
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
    /// Evaluate retrieval on a BEIR-layout collection.
    Beir(beir::Args),
    /// Embed JSONL texts with a BERT bi-encoder; one {"embedding": [...]} line per input line.
    Embed(embed::Args),
    /// Index a JSONL corpus and run one query through the pipeline.
    Search(search::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Beir(args) => beir::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Search(args) => search::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
