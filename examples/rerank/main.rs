//! `rerank`: a command-line front end to the crate.
//!
//! ```text
//! cargo run --release --example rerank -- index --db FILE.db --corpus FILE.jsonl [--embedder MODEL] --json
//! cargo run --release --example rerank -- search --corpus FILE.jsonl --json "query"
//! cargo run --release --example rerank -- search --db FILE.db --json "query"
//! cargo run --release --example rerank -- beir --data DIR --retriever bm25 --json
//! cargo run --release --example rerank -- answer --corpus FILE.jsonl --json "question"
//! cargo run --release --example rerank --features redis -- cache stats --cache redis://127.0.0.1:6379
//! cargo run --release --example rerank -- generate --generator-model DIR --prompt "Hi" --greedy --json
//! cargo run --release --example rerank -- classify --aliases aliases.json --json "Taylor's KTN"
//! ```
//! Errors go to stderr with a non-zero exit code.
//!
//! Every subcommand speaks one vocabulary (`flags.rs`; `tests/it/cli_help.rs` holds it):
//! `--embedder`, `--reranker` and `--generator-model` name the models by role; `--threads`,
//! `--precision` and `--device` say how they run; `--batch-size`, `--retriever`, `--json`,
//! `--log-level` mean one thing each; every JSONL input takes `-` for stdin.

mod answer;
mod beir;
mod cache;
mod classify;
mod embed;
mod flags;
mod generate;
mod index;
mod ingest;
mod query;
mod recall;
mod score;
mod search;
mod serve;

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
    /// Embed JSONL texts with an embedding model: one {"embedding": [...]} line per input line
    /// ({"token_embeddings": ...} for ColBERT, {"indices", "values"} for a SPLADE encoder).
    Embed(embed::Args),
    /// Run a local chat model (Qwen3, Qwen2.5, Llama, Mistral, Phi-3) on one prompt and print the
    /// new text (--json: ids and timings).
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
    /// Serve the config's pipeline over HTTP: Cohere /v2/rerank, OpenAI /v1/embeddings, TEI
    /// /rerank, /embed and /embed_sparse, /search, /answer, /health, /metrics, /info.
    Serve(serve::Args),
    /// Score (query, document) pairs from a JSONL file with a reranker (a cross-encoder,
    /// Qwen3-Reranker or a bi-encoder: what `search --reranker` takes).
    Score(score::Args),
}

/// The exit status of a command whose stdout was closed (`rerank search ... | head -c 10`):
/// 141, what a shell reports for a process ended by SIGPIPE.
const BROKEN_PIPE_EXIT: i32 = 141;

/// Every command ends quietly when its stdout is closed: `println!` panics on a broken pipe
/// (Rust ignores SIGPIPE), and `writeln!` returns the error. The panic hook turns that panic into
/// exit status 141 without a message (any other panic is reported as usual), and `main` does
/// the same for a broken-pipe error a command returns. One place, for every command.
fn end_quietly_on_broken_pipe() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        // std's message: "failed printing to stdout: Broken pipe (os error 32)".
        let broken = std::io::Error::from(std::io::ErrorKind::BrokenPipe).to_string();
        if message.starts_with("failed printing to stdout")
            && (message.contains("os error 32") || message.contains(&broken))
        {
            std::process::exit(BROKEN_PIPE_EXIT);
        }
        default_hook(info);
    }));
}

/// Whether `e`, or an error under it, is an I/O error of kind `BrokenPipe`.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        let kind = match e.downcast_ref::<std::io::Error>() {
            Some(io) => Some(io.kind()),
            None => e
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind),
        };
        if kind == Some(std::io::ErrorKind::BrokenPipe) {
            return true;
        }
        next = e.source();
    }
    false
}

fn main() -> ExitCode {
    end_quietly_on_broken_pipe();
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
        Command::Serve(args) => serve::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::from(BROKEN_PIPE_EXIT as u8),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
