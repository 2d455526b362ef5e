//! `rerank ingest`: PDF files to a JSONL corpus of chunks (feature `pdf`).
//!
//! ```text
//! cargo run --features pdf --example rerank -- ingest --pdf DIR --out corpus.jsonl [--size 800 --overlap 100 --unit chars]
//! ```
//! Each line is a document `{"id": "{file}_p{page}_c{n}", "text", "source": file, "page"}`;
//! `--out -` writes them to stdout. A summary line goes to stderr; with `--json` it is one
//! object `{"chunks", "out"}` on stdout (on stderr when the chunks go to stdout).

use std::path::PathBuf;

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// A directory of PDF files (not recursive).
    #[arg(long, value_name = "DIR")]
    pdf: PathBuf,
    /// The JSONL file to write; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Chunk size, in --unit.
    #[arg(long, value_name = "N", default_value_t = 800)]
    size: usize,
    /// Overlap between consecutive chunks of a page, in --unit.
    #[arg(long, value_name = "N", default_value_t = 100)]
    overlap: usize,
    /// What --size and --overlap count.
    #[arg(long, value_enum, default_value_t = Unit::Chars)]
    unit: Unit,
    /// Print the summary as one JSON object on stdout (stderr with `--out -`) instead of a
    /// line on stderr.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: crate::flags::LogArgs,
}

/// `--unit`: what a chunk's size counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Unit {
    /// Characters.
    Chars,
    /// Tokens: whitespace-separated words.
    Tokens,
}

#[cfg(feature = "pdf")]
pub fn run(args: Args) -> CliResult {
    use std::io::Write;

    use rerank::ingest::{pdf_dir_documents, ChunkUnit, Chunker};

    args.log.init()?;
    let unit = match args.unit {
        Unit::Chars => ChunkUnit::Chars,
        Unit::Tokens => ChunkUnit::Tokens,
    };
    let chunker = Chunker::new(args.size, args.overlap, unit)?;
    let docs = pdf_dir_documents(&args.pdf, &chunker)?;
    let to_stdout = crate::flags::is_stdout(&args.out);
    if to_stdout {
        // A closed pipe is returned as an error (the caller ends quietly), not a panic.
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for d in &docs {
            writeln!(out, "{}", serde_json::to_string(d)?)?;
        }
        out.flush()?;
    } else {
        let io = |e| rerank::Error::io(&args.out, e);
        let file = std::fs::File::create(&args.out).map_err(io)?;
        let mut out = std::io::BufWriter::new(file);
        for d in &docs {
            writeln!(out, "{}", serde_json::to_string(d)?).map_err(io)?;
        }
        out.flush().map_err(io)?;
    }
    let shown = match to_stdout {
        true => "stdout".to_string(),
        false => args.out.display().to_string(),
    };
    let summary = serde_json::json!({"chunks": docs.len(), "out": shown});
    if args.json && !to_stdout {
        writeln!(std::io::stdout().lock(), "{summary}")?;
    } else if args.json {
        eprintln!("{summary}");
    } else {
        eprintln!("{} chunks written to {shown}", docs.len());
    }
    Ok(())
}

#[cfg(not(feature = "pdf"))]
pub fn run(args: Args) -> CliResult {
    args.log.init()?;
    let _ = (
        args.pdf,
        args.out,
        args.size,
        args.overlap,
        args.unit,
        args.json,
    );
    Err("PDF ingestion needs the `pdf` feature: cargo run --features pdf --example rerank -- ingest ...".into())
}
