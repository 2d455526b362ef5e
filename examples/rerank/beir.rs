//! `rerank beir`: evaluate retrieval on a BEIR-layout collection.

use std::path::PathBuf;

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// The collection folder (corpus.jsonl, queries.jsonl, qrels/test.tsv).
    #[arg(long)]
    data: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(_args: Args) -> CliResult {
    Err("the beir subcommand is being written".into())
}
