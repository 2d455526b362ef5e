//! `rerank score`: score (query, document) pairs from a JSONL file with a local model.
//!
//! Input lines `{"query": ..., "document": ...}` (plus `"instruction"` for Qwen3-Reranker);
//! output one line per input line, in input order: `{"score": f, "logit": f}`. `score
//! --reranker` takes every model `search --reranker` takes, chosen by `architectures` in its
//! `config.json` (the loading is `rerank::rerankers::load_reranker`'s):
//!
//! - a cross-encoder (`Architecture::is_cross_encoder`: `BertForSequenceClassification`,
//!   `XLMRobertaForSequenceClassification`, RoBERTa's, CamemBERT's, ELECTRA's, DistilBERT's,
//!   `ModernBertForSequenceClassification`, `DebertaV2ForSequenceClassification`, GTE's
//!   `NewForSequenceClassification` / `GteForSequenceClassification`): `score` after the
//!   model's activation (`--raw`: none), `logit` raw;
//! - `Qwen3ForCausalLM` (Qwen3-Reranker), or `Qwen3ForSequenceClassification` (Qwen3-Reranker
//!   converted to sequence classification): `logit = l_yes - l_no`, `score = sigmoid(logit)`
//!   (`--raw`: the logit);
//! - mxbai-rerank-v2 (`Qwen2ForCausalLM`, or converted: `Qwen2ForSequenceClassification`):
//!   `score` and `logit` are both `l_1 - l_0`, the `mxbai-rerank` package's score;
//! - monoT5 (`T5ForConditionalGeneration`, `MT5ForConditionalGeneration`):
//!   `logit = l_true - l_false`, `score = sigmoid(logit)` (`--raw`: the logit);
//! - `BertModel`, a sentence-transformers bi-encoder such as all-MiniLM-L6-v2 (an embedding
//!   reranker): `score` and `logit` are both the cosine of the query's and the document's
//!   embeddings, in [-1, 1] (`--raw` changes nothing); a ColBERT model: both its MaxSim.

use std::io::Write;
use std::path::PathBuf;

use crate::flags::{LogArgs, ModelArgs};
use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// The reranker, as `search --reranker` takes it: a cross-encoder (BERT, XLM-RoBERTa,
    /// ModernBERT, DeBERTa, ...), Qwen3-Reranker or a bi-encoder (embedding cosine), as a
    /// directory, a folder name under $RERANK_MODELS_DIR, or a hub id.
    #[arg(long, value_name = "MODEL", alias = "model")]
    reranker: PathBuf,
    /// JSONL input: one {"query", "document"} per line; `-` for stdin.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Scores are raw logits (no activation).
    #[arg(long)]
    raw: bool,
    /// Most inputs per forward pass (default: the model's own batching,
    /// `ModelOptions::max_batch_size`).
    #[arg(long, value_name = "N")]
    batch_size: Option<usize>,
    /// Maximum tokens per pair, special tokens included (default: the model's).
    #[arg(long, value_name = "N")]
    max_length: Option<usize>,
    /// Qwen3-Reranker, monoT5: tokenizer.json to use when the model directory has none.
    #[arg(long, value_name = "FILE")]
    tokenizer: Option<PathBuf>,
    /// Most tokens per forward pass (default: the model's, `ModelOptions::token_budget`).
    #[arg(long, value_name = "N")]
    token_budget: Option<usize>,
    #[command(flatten)]
    models: ModelArgs,
    /// JSON output: one {"score", "logit"} line per input line. It is the only output of
    /// `score`, so the flag changes nothing; every subcommand takes it.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: LogArgs,
}

/// One output line (fields in this order).
#[derive(serde::Serialize)]
struct Out {
    score: f32,
    logit: f32,
}

#[derive(serde::Deserialize)]
#[cfg_attr(not(feature = "models"), allow(dead_code))]
struct Line {
    query: String,
    document: String,
    /// Qwen3-Reranker only: the instruction (default: the model card's).
    #[serde(default)]
    instruction: Option<String>,
}

pub fn run(args: Args) -> CliResult {
    use std::io::BufRead;
    args.log.init()?;
    args.models.check()?;
    // `-` reads stdin, as `embed --input -` does; lines are bounded in bytes either way.
    let (reader, origin): (Box<dyn BufRead>, String) = if crate::flags::is_stdin(&args.input) {
        (Box::new(std::io::stdin().lock()), "stdin".into())
    } else {
        let file =
            std::fs::File::open(&args.input).map_err(|e| rerank::Error::io(&args.input, e))?;
        (
            Box::new(std::io::BufReader::new(file)),
            args.input.display().to_string(),
        )
    };
    let mut lines = Vec::new();
    rerank::read_bounded_lines(reader, &origin, |number, line| {
        if line.trim().is_empty() {
            return Ok(());
        }
        let parsed: Line = serde_json::from_str(line).map_err(|e| {
            rerank::Error::parse(
                format!("{origin}:{number}"),
                format!(
                    "{e}; expected one JSON object per line: {{\"query\": \"...\", \
                     \"document\": \"...\"}} (\"instruction\" optional)"
                ),
            )
        })?;
        lines.push(parsed);
        Ok(())
    })?;
    let scores = score_lines(&args, &lines)?;
    for (i, (score, logit)) in scores.iter().enumerate() {
        crate::flags::check_finite(&[*score, *logit], i + 1, &args.models)?;
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (score, logit) in scores {
        writeln!(out, "{}", serde_json::to_string(&Out { score, logit })?)?;
    }
    out.flush()?;
    Ok(())
}

/// Loads the scorer that `config.json` calls for and returns (score, logit) per line, in
/// input order. Cross-encoders and Qwen3-Reranker (also converted to sequence classification)
/// are loaded here for their logits and per-line instructions; every other model (embedding
/// and ColBERT folders first, whatever their `config.json` says) goes through
/// `load_reranker`, so `score` takes what `search --reranker` takes and refuses the rest with
/// the same error.
#[cfg(feature = "models")]
fn score_lines(args: &Args, lines: &[Line]) -> CliResult<Vec<(f32, f32)>> {
    use rerank::models::{Architecture, ModelDir};
    use rerank::rerankers::CrossEncoder;

    let pairs: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l.query.as_str(), l.document.as_str()))
        .collect();
    let pairs = pairs.as_slice();
    // Resolved as every command resolves a model: a directory, a folder of
    // $RERANK_MODELS_DIR, or a hub id.
    let dir = ModelDir::open(rerank::models::registry::resolve(
        &args.reranker,
        rerank::models::registry::Task::CrossEncoder,
    )?)?;
    // A sentence-transformers embedding model (Qwen3-Embedding says Qwen3ForCausalLM too) or a
    // ColBERT folder is load_reranker's to tell apart.
    if dir.is_embedding_model()? || rerank::embed::ColbertEncoder::is_colbert_dir(dir.path()) {
        return score_reranker(args, lines);
    }
    match dir.architecture()? {
        arch if arch.is_cross_encoder() => {
            let mut builder = CrossEncoder::builder(dir.path()).options(model_options(args)?);
            if args.raw {
                builder = builder.raw_logits();
            }
            let scores = builder.build()?.predict(pairs)?;
            Ok(scores.into_iter().map(|s| (s.score, s.logit)).collect())
        }
        Architecture::Qwen3ForCausalLm | Architecture::Qwen3ForSequenceClassification => {
            score_qwen3(args, dir.path(), lines)
        }
        Architecture::Other(name)
            if matches!(
                name.as_str(),
                "T5ForConditionalGeneration" | "MT5ForConditionalGeneration"
            ) =>
        {
            score_monot5(args, dir.path(), lines)
        }
        _ => score_reranker(args, lines),
    }
}

/// Any other reranker `load_reranker` takes (an embedding reranker over a BERT bi-encoder):
/// its score is both the score and the logit. The lines of one query are scored together.
#[cfg(feature = "models")]
fn score_reranker(args: &Args, lines: &[Line]) -> CliResult<Vec<(f32, f32)>> {
    use rerank::rerankers::{load_reranker, RerankQuery};

    let reranker = load_reranker(&args.reranker, &model_options(args)?)?;
    // The lines of each query, queries in order of first appearance.
    let mut by_query: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut slot = std::collections::HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        let k = *slot.entry(line.query.as_str()).or_insert_with(|| {
            by_query.push((line.query.as_str(), Vec::new()));
            by_query.len() - 1
        });
        by_query[k].1.push(i);
    }
    let mut out = vec![(0.0, 0.0); lines.len()];
    for (query, at) in by_query {
        let docs: Vec<&str> = at.iter().map(|&i| lines[i].document.as_str()).collect();
        let scores = reranker.score(&RerankQuery::new(query), &docs)?;
        for (&i, score) in at.iter().zip(scores) {
            out[i] = (score, score);
        }
    }
    Ok(out)
}

/// monoT5: every line in the same packed batches; `--raw` makes the score the logit.
#[cfg(feature = "models")]
fn score_monot5(args: &Args, dir: &std::path::Path, lines: &[Line]) -> CliResult<Vec<(f32, f32)>> {
    use rerank::rerankers::{MonoT5Reranker, RerankQuery};

    let mut builder = MonoT5Reranker::builder(dir).options(model_options(args)?);
    if let Some(path) = &args.tokenizer {
        builder = builder.tokenizer(path);
    }
    let reranker = builder.build()?;
    let queries: Vec<RerankQuery> = lines.iter().map(|l| RerankQuery::new(&l.query)).collect();
    let pairs: Vec<(&RerankQuery, &str)> = queries
        .iter()
        .zip(lines)
        .map(|(q, l)| (q, l.document.as_str()))
        .collect();
    let scores = reranker.score_pairs_with_logits(&pairs)?;
    Ok(scores
        .into_iter()
        .map(|s| (if args.raw { s.logit } else { s.score }, s.logit))
        .collect())
}

/// The model options the flags ask for.
#[cfg(feature = "models")]
fn model_options(args: &Args) -> CliResult<rerank::models::ModelOptions> {
    Ok(rerank::models::ModelOptions {
        max_length: args.max_length,
        token_budget: args.token_budget,
        max_batch_size: args.batch_size,
        ..args.models.options()?
    })
}

/// Qwen3-Reranker: each line with its own instruction; `--raw` makes the score the logit.
#[cfg(feature = "models")]
fn score_qwen3(args: &Args, dir: &std::path::Path, lines: &[Line]) -> CliResult<Vec<(f32, f32)>> {
    use rerank::rerankers::qwen3::{Qwen3Reranker, ScoreInput};

    let mut builder = Qwen3Reranker::builder(dir).options(model_options(args)?);
    if let Some(path) = &args.tokenizer {
        builder = builder.tokenizer(path);
    }
    let inputs: Vec<ScoreInput<'_>> = lines
        .iter()
        .map(|l| ScoreInput {
            instruction: l.instruction.as_deref(),
            query: &l.query,
            document: &l.document,
        })
        .collect();
    let scores = builder.build()?.score_inputs(&inputs)?;
    Ok(scores
        .into_iter()
        .map(|s| (if args.raw { s.logit } else { s.score }, s.logit))
        .collect())
}

#[cfg(not(feature = "models"))]
fn score_lines(args: &Args, _lines: &[Line]) -> CliResult<Vec<(f32, f32)>> {
    let _ = (
        &args.reranker,
        args.raw,
        args.batch_size,
        args.max_length,
        &args.tokenizer,
    );
    let _ = (args.token_budget, args.json);
    Err("`score` needs the `models` feature of rerank".into())
}
