//! `rerank answer`: index a JSONL corpus with BM25 and answer one question with citations.

use std::path::PathBuf;
use std::sync::Arc;

use rerank::answer::{ContextBudget, Extractive, PromptBuilder};
use rerank::pipeline::AnswerOptions;
use rerank::pipeline::SearchRequest;
use rerank::{Bm25Index, Document, Generator, Pipeline};

use crate::CliResult;

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
enum GeneratorKind {
    /// Model-free: quotes the best-matching sentences.
    Extractive,
    /// A Qwen3 chat model from --model DIR (needs the `models` feature).
    Qwen3,
    /// An OpenAI-compatible server at --base-url with model --model (needs the `http` feature).
    Openai,
}

#[derive(clap::Args)]
pub struct Args {
    /// JSONL corpus: one {"id", "text", "title"?, "source"?, "page"?, "metadata"?} per line.
    #[arg(long)]
    corpus: PathBuf,
    /// Which generator writes the answer.
    #[arg(long, value_enum, default_value = "extractive")]
    generator: GeneratorKind,
    /// Qwen3: the model directory. OpenAI: the model name.
    #[arg(long)]
    model: Option<String>,
    /// Qwen3: a tokenizer.json to use instead of the one in the model directory.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// OpenAI: the API root (the key comes from OPENAI_API_KEY).
    #[arg(long, default_value = "http://127.0.0.1:8000/v1")]
    base_url: String,
    /// Number of hits retrieved.
    #[arg(long, default_value_t = 5)]
    top_k: usize,
    /// Context budget in characters.
    #[arg(long, default_value_t = 6000)]
    budget_chars: usize,
    /// Hits scoring below this are not used.
    #[arg(long)]
    min_score: Option<f32>,
    /// Upper bound on generated tokens.
    #[arg(long, default_value_t = 512)]
    max_new_tokens: usize,
    /// Print the answer as one JSON object.
    #[arg(long)]
    json: bool,
    /// The question.
    question: String,
}

fn generator(args: &Args) -> CliResult<Arc<dyn Generator>> {
    match args.generator {
        GeneratorKind::Extractive => Ok(Arc::new(Extractive::default())),
        GeneratorKind::Qwen3 => qwen3(args),
        GeneratorKind::Openai => openai(args),
    }
}

#[cfg(feature = "models")]
fn qwen3(args: &Args) -> CliResult<Arc<dyn Generator>> {
    let dir = args
        .model
        .as_ref()
        .ok_or("--generator qwen3 needs --model DIR")?;
    let mut builder = rerank::answer::Qwen3Chat::builder(dir);
    if let Some(t) = &args.tokenizer {
        builder = builder.tokenizer(t);
    }
    Ok(Arc::new(builder.build()?))
}

#[cfg(not(feature = "models"))]
fn qwen3(_args: &Args) -> CliResult<Arc<dyn Generator>> {
    Err("--generator qwen3 needs the `models` feature".into())
}

#[cfg(feature = "http")]
fn openai(args: &Args) -> CliResult<Arc<dyn Generator>> {
    let model = args
        .model
        .as_ref()
        .ok_or("--generator openai needs --model NAME")?;
    Ok(Arc::new(
        rerank::answer::OpenAiCompatible::builder()
            .base_url(&args.base_url)
            .model(model)
            .build()?,
    ))
}

#[cfg(not(feature = "http"))]
fn openai(_args: &Args) -> CliResult<Arc<dyn Generator>> {
    Err("--generator openai needs the `http` feature".into())
}

pub fn run(args: Args) -> CliResult {
    let docs = Document::read_jsonl(&args.corpus)?;
    let index = Bm25Index::new();
    index.add(docs)?;
    let pipeline = Pipeline::builder()
        .retriever(index)
        .top_k(args.top_k)
        .generator(generator(&args)?)
        .build()?;
    let mut options = AnswerOptions::new()
        .prompt(PromptBuilder::new().budget(ContextBudget::Chars(args.budget_chars)))
        .max_new_tokens(args.max_new_tokens);
    if let Some(m) = args.min_score {
        options = options.min_score(m);
    }
    let answer = pipeline.answer_with(&SearchRequest::new(&args.question), &options)?;
    if args.json {
        println!("{}", serde_json::to_string(&answer)?);
        return Ok(());
    }
    println!("{}\n", answer.text);
    println!("confidence: {:.2}", answer.confidence);
    for s in &answer.sources {
        let page = s.page.map(|p| format!(", page {p}")).unwrap_or_default();
        println!(
            "[{}] {}{} (id {}, score {:.4})",
            s.number, s.source, page, s.id, s.score
        );
    }
    for u in &answer.unsupported {
        println!("unsupported: {u}");
    }
    for c in &answer.invalid_citations {
        println!("cites a source that was not provided: {}", c.label());
    }
    Ok(())
}
