//! `rerank ingest`: PDF files to a JSONL corpus of chunks (feature `pdf`).
//!
//! ```text
//! cargo run --features pdf --example rerank -- ingest --pdf DIR --out corpus.jsonl [--size 800 --overlap 100 --unit chars]
//! ```
//! Each line is a document `{"id": "{file}_p{page}_c{n}", "text", "source": file, "page"}`.

use std::path::PathBuf;

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// A directory of PDF files (not recursive).
    #[arg(long)]
    pdf: PathBuf,
    /// The JSONL file to write.
    #[arg(long)]
    out: PathBuf,
    /// Chunk size.
    #[arg(long, default_value_t = 800)]
    size: usize,
    /// Overlap between consecutive chunks of a page.
    #[arg(long, default_value_t = 100)]
    overlap: usize,
    /// What the size counts: chars or tokens (whitespace-separated words).
    #[arg(long, default_value = "chars")]
    unit: String,
}

#[cfg(feature = "pdf")]
pub fn run(args: Args) -> CliResult {
    use std::io::Write;

    use rerank::ingest::{pdf_dir_documents, ChunkUnit, Chunker};

    let unit = match args.unit.as_str() {
        "chars" => ChunkUnit::Chars,
        "tokens" => ChunkUnit::Tokens,
        other => return Err(format!("--unit {other:?}: use chars or tokens").into()),
    };
    let chunker = Chunker::new(args.size, args.overlap, unit)?;
    let docs = pdf_dir_documents(&args.pdf, &chunker)?;
    let io = |e| rerank::Error::io(&args.out, e);
    let file = std::fs::File::create(&args.out).map_err(io)?;
    let mut out = std::io::BufWriter::new(file);
    for d in &docs {
        writeln!(out, "{}", serde_json::to_string(d)?).map_err(io)?;
    }
    out.flush().map_err(io)?;
    eprintln!("{} chunks written to {}", docs.len(), args.out.display());
    Ok(())
}

#[cfg(not(feature = "pdf"))]
pub fn run(_args: Args) -> CliResult {
    Err("PDF ingestion needs the `pdf` feature: cargo run --features pdf --example rerank -- ingest ...".into())
}
