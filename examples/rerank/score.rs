//! `rerank score`: score (query, document) pairs from a JSONL file with a local model.
//!
//! Input lines `{"query": ..., "document": ...}`; output one line per input line, in input
//! order: `{"score": f, "logit": f}` (score after the model's activation, logit raw).
//! The model kind comes from `architectures` in the model's `config.json`.

use std::io::Write;
use std::path::PathBuf;

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// Model directory (config.json, tokenizer.json, model.safetensors).
    #[arg(long)]
    model: PathBuf,
    /// JSONL input: one {"query", "document"} per line.
    #[arg(long)]
    input: PathBuf,
    /// Scores are raw logits (no activation).
    #[arg(long)]
    raw: bool,
    /// Maximum pairs per batch.
    #[arg(long)]
    batch_size: Option<usize>,
    /// Maximum tokens per pair, special tokens included.
    #[arg(long)]
    max_length: Option<usize>,
    /// Inference threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// One output line (fields in this order).
#[derive(serde::Serialize)]
struct Out {
    score: f32,
    logit: f32,
}

#[derive(serde::Deserialize)]
struct Line {
    query: String,
    document: String,
}

pub fn run(args: Args) -> CliResult {
    let text = std::fs::read_to_string(&args.input)
        .map_err(|e| format!("{}: {e}", args.input.display()))?;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: {e}", args.input.display(), i + 1))?;
        lines.push(parsed);
    }
    let pairs: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l.query.as_str(), l.document.as_str()))
        .collect();
    let scores = score_pairs(&args, &pairs)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (score, logit) in scores {
        writeln!(out, "{}", serde_json::to_string(&Out { score, logit })?)?;
    }
    out.flush()?;
    Ok(())
}

/// Loads the scorer that `config.json` calls for and returns (score, logit) per pair, in
/// input order.
#[cfg(feature = "models")]
fn score_pairs(args: &Args, pairs: &[(&str, &str)]) -> CliResult<Vec<(f32, f32)>> {
    use rerank::models::{Architecture, ModelDir};
    use rerank::rerank::CrossEncoder;

    let dir = ModelDir::open(&args.model)?;
    match dir.architecture()? {
        Architecture::BertForSequenceClassification
        | Architecture::XlmRobertaForSequenceClassification => {
            let mut builder = CrossEncoder::builder(dir.path());
            if args.raw {
                builder = builder.raw_logits();
            }
            if let Some(n) = args.batch_size {
                builder = builder.batch_size(n);
            }
            if let Some(n) = args.max_length {
                builder = builder.max_length(n);
            }
            if let Some(n) = args.threads {
                builder = builder.threads(n);
            }
            let scores = builder.build()?.predict(pairs)?;
            Ok(scores.into_iter().map(|s| (s.score, s.logit)).collect())
        }
        Architecture::Qwen3ForCausalLm => Err(format!(
            "{}: Qwen3ForCausalLM (Qwen3-Reranker) is not supported by `score` yet",
            args.model.display()
        )
        .into()),
        other => Err(format!(
            "{}: unsupported architecture {other} (supported: BertForSequenceClassification, \
             XLMRobertaForSequenceClassification)",
            args.model.display()
        )
        .into()),
    }
}

#[cfg(not(feature = "models"))]
fn score_pairs(_args: &Args, _pairs: &[(&str, &str)]) -> CliResult<Vec<(f32, f32)>> {
    Err("`score` needs the `models` feature of rerank".into())
}
