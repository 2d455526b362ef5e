//! `rerank embed`: embed texts with an embedding model (all-MiniLM-L6-v2, bge, e5,
//! multilingual-e5, bge-m3, Qwen3-Embedding), by directory or hub id.
//!
//! ```text
//! cargo run --release --example rerank -- embed --model models/all-MiniLM-L6-v2 \
//!     --input texts.jsonl [--role query|document] [--threads N] [--max-length N] \
//!     [--precision f32|int8] > embeddings.jsonl
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

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// The model: a directory (config.json, tokenizer.json, model.safetensors, and the
    /// sentence-transformers files), or a hub id such as BAAI/bge-small-en-v1.5 (downloaded
    /// with the `hf-hub` feature).
    #[arg(long)]
    model: PathBuf,
    /// JSONL input, one {"text": ...} per line; `-` for stdin.
    #[arg(long)]
    input: PathBuf,
    /// Threads for the model (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Longest input in tokens, [CLS] and [SEP] included (default: sentence_bert_config.json).
    #[arg(long)]
    max_length: Option<usize>,
    /// Number format of the model's linear layers (`ModelOptions::precision`).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    precision: PrecisionArg,
    /// Where the model runs (`ModelOptions::device`): cpu (the crate's kernels), candle-cpu,
    /// cuda:N or metal:N (candle; needs the feature).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Whether the texts are queries or documents (picks the model's prompt).
    #[arg(long, value_enum, default_value_t = RoleArg::Document)]
    role: RoleArg,
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

/// `--precision`: the number format of a model's linear layers (the CLI's spelling of
/// `rerank::models::Precision` for the encoders and Qwen3-Reranker).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    /// 32-bit floats (exact to the reference models).
    #[default]
    F32,
    /// 8-bit integer linear layers (faster; close to f32, not equal).
    Int8,
    /// bfloat16 linear layers (Qwen3-Reranker only; faster where the CPU has AVX-512 bf16;
    /// close to f32, not equal).
    Bf16,
    /// float16 (on a device through candle only, `--device`).
    F16,
}

#[cfg(feature = "models")]
impl From<PrecisionArg> for rerank::models::Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::F32 => rerank::models::Precision::F32,
            PrecisionArg::Int8 => rerank::models::Precision::Int8,
            PrecisionArg::Bf16 => rerank::models::Precision::Bf16,
            PrecisionArg::F16 => rerank::models::Precision::F16,
        }
    }
}

/// The embedding model `model` (a directory or a hub id, see `rerank::load_embedder`), in the
/// precision asked for.
#[cfg(feature = "models")]
pub fn load_embedder(
    model: &Path,
    threads: Option<usize>,
    precision: PrecisionArg,
) -> CliResult<Arc<dyn rerank::Embedder>> {
    let options = rerank::models::ModelOptions {
        threads,
        precision: precision.into(),
        ..Default::default()
    };
    Ok(Arc::from(rerank::load_embedder(model, &options)?))
}

/// Without the `models` feature there is no embedder.
#[cfg(not(feature = "models"))]
pub fn load_embedder(
    model: &Path,
    _threads: Option<usize>,
    _precision: PrecisionArg,
) -> CliResult<Arc<dyn rerank::Embedder>> {
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

/// Encodes `texts` as `role` with the sparse encoder in `dir`, one JSON line per text.
#[cfg(feature = "models")]
fn run_sparse(
    dir: &Path,
    options: rerank::models::ModelOptions,
    texts: &[&str],
    role: rerank::Role,
) -> CliResult {
    use std::io::Write;

    let encoder = rerank::SparseEncoder::builder(dir)
        .options(options)
        .build()?;
    let vectors = encoder.encode(texts, role)?;
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
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(path).map_err(|e| rerank::Error::io(path, e))?;
        Box::new(BufReader::new(file))
    };
    let origin = path.display().to_string();
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

    use rerank::models::ModelOptions;

    let texts = read_texts(&args.input)?;
    let options = ModelOptions {
        threads: args.threads,
        max_length: args.max_length,
        precision: args.precision.into(),
        device: args.device.parse()?,
        ..ModelOptions::default()
    };
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    if rerank::ColbertEncoder::is_colbert_dir(&args.model) {
        return colbert(&args, &refs, options);
    }
    if rerank::embed::sparse::is_sparse_encoder(&args.model) {
        return run_sparse(&args.model, options, &refs, args.role.into());
    }
    let embedder = rerank::load_embedder(&args.model, &options)?;
    let embeddings = embedder.embed_as(&refs, args.role.into())?;
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
    let mut builder = rerank::ColbertEncoder::builder(&args.model).options(options);
    if let Some(n) = args.max_length {
        builder = match role {
            rerank::Role::Query => builder.query_length(n),
            rerank::Role::Document => builder.document_length(n),
        };
    }
    let vectors = builder.build()?.encode(texts, role)?;
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
        args.model,
        args.input,
        args.threads,
        args.max_length,
        args.precision,
        args.role,
        args.device,
    );
    Err("the embed subcommand needs the `models` feature of rerank".into())
}
