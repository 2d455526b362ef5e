//! `rerank embed`: embed texts with an embedding model (all-MiniLM-L6-v2, bge, e5,
//! multilingual-e5, bge-m3, gte, nomic, mpnet, ModernBERT, Qwen3-Embedding; ColBERT token
//! vectors; SPLADE sparse vectors), by directory or hub id.
//!
//! ```text
//! cargo run --release --example rerank -- embed --embedder models/all-MiniLM-L6-v2 \
//!     --input texts.jsonl [--role query|document] [--threads N] [--max-length N] \
//!     [--precision f32|int8|bf16|f16] [--device cpu|candle-cpu|cuda:N] > embeddings.jsonl
//! ```
//! Input: one `{"text": ...}` object per line (`--input -` reads stdin; blank lines are
//! skipped). Output: one `{"embedding": [...]}` line per input line, in input order, pooled,
//! projected and normalized as the model directory says (`modules.json`). `--role` picks the
//! model's query or document prompt (default: document; symmetric models ignore it).
//!
//! A ColBERT model (PyLate's or Stanford's layout) prints one `{"token_embeddings": [[...],
//! ...]}` line per text instead: its normalized token vectors, queries (`--role query`)
//! padded to the query length, documents without their punctuation tokens.
//!
//! A learned sparse encoder directory (SPLADE: a sentence-transformers `SparseEncoder`, see
//! `rerank::embed::SparseEncoder`) prints one `{"indices": [...], "values": [...]}` line per
//! input line instead: the vocabulary ids with a non-zero weight, ascending, and their
//! weights. `--role query` runs the model's query side (an inference-free model's token-weight
//! table).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::flags::{LogArgs, ModelArgs};
use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// The embedding model (a bi-encoder of any supported family, a ColBERT model or a SPLADE
    /// sparse encoder): a directory (config.json, tokenizer.json, model.safetensors, and the
    /// sentence-transformers files), a folder name under $RERANK_MODELS_DIR, or a hub id such
    /// as BAAI/bge-small-en-v1.5 (downloaded with the `hf-hub` feature).
    #[arg(long, value_name = "MODEL", alias = "model")]
    embedder: PathBuf,
    /// JSONL input, one {"text": ...} per line; `-` for stdin.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Longest input in tokens, special tokens included (default: the model's
    /// sentence_bert_config.json).
    #[arg(long, value_name = "N")]
    max_length: Option<usize>,
    #[command(flatten)]
    models: ModelArgs,
    /// Whether the texts are queries or documents (picks the model's prompt).
    #[arg(long, value_enum, default_value_t = RoleArg::Document)]
    role: RoleArg,
    /// The task adapter the texts run through, for a model that has them (jina-embeddings-v3:
    /// retrieval.query, retrieval.passage, separation, classification, text-matching; by
    /// default retrieval.query for --role query and retrieval.passage for documents).
    #[arg(long, value_name = "TASK")]
    task: Option<String>,
    /// JSON output: one JSON line per input line. It is the only output of `embed` (vectors
    /// have no table form), so the flag changes nothing; every subcommand takes it.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: LogArgs,
}

/// `--role`: the CLI's spelling of `rerank::Role`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RoleArg {
    /// Search queries (the model's query prompt, e.g. e5's "query: ").
    Query,
    /// Documents / passages (the model's document prompt, if any).
    #[default]
    Document,
}

impl From<RoleArg> for rerank::Role {
    fn from(r: RoleArg) -> Self {
        match r {
            RoleArg::Query => rerank::Role::Query,
            RoleArg::Document => rerank::Role::Document,
        }
    }
}

/// The embedding model `model` (a directory or a hub id, see `rerank::load_embedder`), run as
/// `--threads`, `--precision` and `--device` say.
#[cfg(feature = "models")]
pub fn load_embedder(model: &Path, flags: &ModelArgs) -> CliResult<Arc<dyn rerank::Embedder>> {
    Ok(Arc::from(rerank::load_embedder(model, &flags.options()?)?))
}

/// Without the `models` feature there is no embedder.
#[cfg(not(feature = "models"))]
pub fn load_embedder(model: &Path, flags: &ModelArgs) -> CliResult<Arc<dyn rerank::Embedder>> {
    flags.check()?;
    Err(format!(
        "{}: embedding models need the `models` feature",
        model.display()
    )
    .into())
}

#[derive(serde::Deserialize)]
struct Line {
    text: String,
}

#[cfg(feature = "models")]
#[derive(serde::Serialize)]
struct Output<'a> {
    embedding: &'a [f32],
}

/// One line of a sparse encoder's output.
#[cfg(feature = "models")]
#[derive(serde::Serialize)]
struct SparseOutput<'a> {
    indices: &'a [u32],
    values: &'a [f32],
}

/// Encodes `texts` with the sparse encoder `--embedder` as `--role`, one JSON line per text.
#[cfg(feature = "models")]
fn run_sparse(args: &Args, options: rerank::models::ModelOptions, texts: &[&str]) -> CliResult {
    use std::io::Write;

    let encoder = rerank::SparseEncoder::builder(&args.embedder)
        .options(options)
        .build()?;
    let vectors = encoder.encode(texts, args.role.into())?;
    for (i, v) in vectors.iter().enumerate() {
        crate::flags::check_finite(&v.values, i + 1, &args.models)?;
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for v in &vectors {
        let line = serde_json::to_string(&SparseOutput {
            indices: &v.indices,
            values: &v.values,
        })?;
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}

/// Reads the `text` of each non-blank line; a line longer than `rerank::MAX_LINE_BYTES`
/// (`--input /dev/zero`) is an error naming the file and the line.
fn read_texts(path: &PathBuf) -> CliResult<Vec<String>> {
    let reader: Box<dyn BufRead> = if crate::flags::is_stdin(path) {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(path).map_err(|e| rerank::Error::io(path, e))?;
        Box::new(BufReader::new(file))
    };
    let origin = match crate::flags::is_stdin(path) {
        true => "stdin".to_string(),
        false => path.display().to_string(),
    };
    let mut texts = Vec::new();
    rerank::read_bounded_lines(reader, &origin, |number, line| {
        let parsed: Line = serde_json::from_str(line).map_err(|e| {
            rerank::Error::parse(
                format!("{origin}:{number}"),
                format!("{e}; expected one JSON object per line: {{\"text\": \"...\"}}"),
            )
        })?;
        texts.push(parsed.text);
        Ok(())
    })?;
    Ok(texts)
}

#[cfg(feature = "models")]
pub fn run(args: Args) -> CliResult {
    use std::io::Write;

    args.log.init()?;
    let options = rerank::models::ModelOptions {
        max_length: args.max_length,
        ..args.models.options()?
    };
    let texts = read_texts(&args.input)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let colbert_dir = rerank::ColbertEncoder::is_colbert_dir(&args.embedder);
    let sparse = rerank::embed::sparse::is_sparse_encoder(&args.embedder);
    if let (Some(task), true) = (&args.task, colbert_dir || sparse) {
        return Err(rerank::Error::Config(format!(
            "--task {task}: {} is a {} model, which has no task adapters",
            args.embedder.display(),
            if colbert_dir { "ColBERT" } else { "sparse" }
        ))
        .into());
    }
    if colbert_dir {
        return colbert(&args, &refs, options);
    }
    if sparse {
        return run_sparse(&args, options, &refs);
    }
    let role: rerank::Role = args.role.into();
    let tasks: Vec<(rerank::Role, &str)> = args.task.iter().map(|t| (role, t.as_str())).collect();
    let embedder = rerank::load_embedder_with_tasks(&args.embedder, &options, &tasks)?;
    let embeddings = embedder.embed_as(&refs, role)?;
    for (i, row) in embeddings.rows().into_iter().enumerate() {
        crate::flags::check_finite(row.iter(), i + 1, &args.models)?;
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for row in embeddings.rows() {
        // Serialized as f32 (shortest round-trip form), not widened to f64.
        let embedding = row.to_vec();
        let line = serde_json::to_string(&Output {
            embedding: &embedding,
        })?;
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}

/// A ColBERT model's token vectors: one `{"token_embeddings": [[...], ...]}` line per text
/// (`--max-length` is the role's length: `query_length` or `document_length`).
#[cfg(feature = "models")]
fn colbert(args: &Args, texts: &[&str], options: rerank::models::ModelOptions) -> CliResult {
    use std::io::Write;

    #[derive(serde::Serialize)]
    struct Tokens {
        token_embeddings: Vec<Vec<f32>>,
    }
    let role: rerank::Role = args.role.into();
    let mut builder = rerank::ColbertEncoder::builder(&args.embedder).options(options);
    if let Some(n) = args.max_length {
        builder = match role {
            rerank::Role::Query => builder.query_length(n),
            rerank::Role::Document => builder.document_length(n),
        };
    }
    let vectors = builder.build()?.encode(texts, role)?;
    for (i, m) in vectors.iter().enumerate() {
        for row in m.rows() {
            crate::flags::check_finite(row.iter(), i + 1, &args.models)?;
        }
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for m in vectors {
        let line = Tokens {
            token_embeddings: m.rows().into_iter().map(|r| r.to_vec()).collect(),
        };
        writeln!(out, "{}", serde_json::to_string(&line)?)?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(not(feature = "models"))]
pub fn run(args: Args) -> CliResult {
    let _ = (
        read_texts,
        args.embedder,
        args.input,
        args.max_length,
        args.models,
        args.role,
        args.json,
        args.log,
    );
    Err("the embed subcommand needs the `models` feature of rerank".into())
}
