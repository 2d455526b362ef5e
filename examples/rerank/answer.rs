//! `rerank answer`: answer one question with citations from a JSONL corpus, an SQLite store
//! or a Milvus collection (the recall flags of `search`), optionally reranked and cached.

use std::path::PathBuf;
use std::sync::Arc;

use rerank::answer::{ContextBudget, Extractive, PromptBuilder};
use rerank::pipeline::AnswerOptions;
use rerank::pipeline::SearchRequest;
use rerank::Generator;

use crate::recall::RecallArgs;
use crate::CliResult;

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
enum GeneratorKind {
    /// Model-free: quotes the best-matching sentences.
    Extractive,
    /// A local chat model (Qwen3, Qwen2.5, Llama, Mistral, Phi-3) from --generator-model, on the
    /// CPU (needs the `models` feature); `qwen3` is its former name.
    #[value(alias = "qwen3")]
    Local,
    /// An OpenAI-compatible server at --base-url serving --generator-model (needs the `http`
    /// feature).
    Openai,
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    recall: RecallArgs,
    /// Which generator writes the answer.
    #[arg(long, value_enum, default_value = "extractive")]
    generator: GeneratorKind,
    /// The generator's model. local: the chat model's directory (it runs on cpu, in f32).
    /// openai: the model name the server knows.
    #[arg(long, value_name = "MODEL")]
    generator_model: Option<String>,
    /// local: a tokenizer.json to use instead of the one in the model directory.
    #[arg(long, value_name = "FILE")]
    tokenizer: Option<PathBuf>,
    /// openai: the API root (the key comes from OPENAI_API_KEY).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8000/v1")]
    base_url: String,
    /// Number of hits retrieved.
    #[arg(long, value_name = "N", default_value_t = 5)]
    top_k: usize,
    /// Context budget in characters.
    #[arg(long, value_name = "N", default_value_t = 6000)]
    budget_chars: usize,
    /// Hits scoring below this are not used (default: every hit is used).
    #[arg(long, value_name = "SCORE", allow_negative_numbers = true)]
    min_score: Option<f32>,
    /// Upper bound on generated tokens.
    #[arg(long, value_name = "N", default_value_t = 512)]
    max_new_tokens: usize,
    /// Print the answer as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: crate::flags::LogArgs,
    /// The question.
    question: String,
}

fn generator(args: &Args) -> CliResult<Arc<dyn Generator>> {
    match args.generator {
        GeneratorKind::Extractive => Ok(Arc::new(Extractive::default())),
        GeneratorKind::Local => local(args),
        GeneratorKind::Openai => openai(args),
    }
}

#[cfg(feature = "models")]
fn local(args: &Args) -> CliResult<Arc<dyn Generator>> {
    let dir = args
        .generator_model
        .as_ref()
        .ok_or("--generator local needs --generator-model MODEL (the chat model's directory)")?;
    let mut builder = rerank::answer::LocalChat::builder(dir);
    if let Some(t) = &args.tokenizer {
        builder = builder.tokenizer(t);
    }
    Ok(Arc::new(builder.build()?))
}

#[cfg(not(feature = "models"))]
fn local(_args: &Args) -> CliResult<Arc<dyn Generator>> {
    Err("--generator local needs the `models` feature".into())
}

#[cfg(feature = "http")]
fn openai(args: &Args) -> CliResult<Arc<dyn Generator>> {
    let model = args
        .generator_model
        .as_ref()
        .ok_or("--generator openai needs --generator-model NAME")?;
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
    args.log.init()?;
    let pipeline = args
        .recall
        .builder()?
        .top_k(args.top_k)
        .generator(generator(&args)?)
        .build()?;
    let mut options = AnswerOptions::new()
        .prompt(PromptBuilder::new().budget(ContextBudget::Chars(args.budget_chars)))
        .max_new_tokens(args.max_new_tokens);
    if let Some(m) = args.min_score {
        options = options.min_score(m);
    }
    let request = SearchRequest::new(&args.question);
    if args.json {
        let answer = pipeline.answer_with(&request, &options)?;
        println!("{}", serde_json::to_string(&answer)?);
        return Ok(());
    }
    print_streamed(&pipeline, &request, &options)
}

/// The answer in its human-readable form, its text printed as the generator writes it, then
/// what needs the whole answer (`answer` and `query` without `--json`).
pub fn print_streamed(
    pipeline: &rerank::Pipeline,
    request: &SearchRequest,
    options: &AnswerOptions,
) -> CliResult {
    let answer = pipeline.answer_stream(request, options, &mut |piece| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        match write!(out, "{piece}").and_then(|_| out.flush()) {
            Ok(()) => std::ops::ControlFlow::Continue(()),
            Err(_) => std::ops::ControlFlow::Break(()),
        }
    })?;
    println!("\n");
    print_details(&answer);
    Ok(())
}

/// A band's name, as the JSON output spells it.
fn band_name(band: rerank::answer::ConfidenceBand) -> &'static str {
    use rerank::answer::ConfidenceBand;
    match band {
        ConfidenceBand::High => "high",
        ConfidenceBand::Medium => "medium",
        ConfidenceBand::Low => "low",
    }
}

/// A relevance measure's name, as the JSON output spells it.
fn basis_name(basis: rerank::answer::RelevanceMeasure) -> &'static str {
    use rerank::answer::RelevanceMeasure;
    match basis {
        RelevanceMeasure::QueryTerms => "query_terms",
        RelevanceMeasure::RerankerSigmoid => "reranker_sigmoid",
        RelevanceMeasure::RerankerProbability => "reranker_probability",
    }
}

/// What follows an answer's text in its human-readable form (`answer` and `query` without
/// `--json`): its confidence and numbered sources, then what the grounding check found.
fn print_details(answer: &rerank::Answer) {
    // Grounding (`confidence`) and relevance, each with its band, and the answer's band (the
    // weaker of the two); the names are the JSON fields'.
    println!(
        "confidence: {:.2} (grounding_band {}, confidence_band {})",
        answer.confidence,
        band_name(answer.grounding_band),
        band_name(answer.confidence_band)
    );
    let basis = answer
        .relevance_basis
        .map(|b| format!("relevance_basis {}, ", basis_name(b)))
        .unwrap_or_default();
    println!(
        "relevance: {:.2} ({basis}relevance_band {})",
        answer.relevance,
        band_name(answer.relevance_band)
    );
    if answer.flags.cache_hit {
        println!("(from the cache)");
    }
    if answer.flags.off_topic {
        println!("(outside the knowledge base's domain: nothing was searched)");
    }
    if answer.flags.needs_clarification {
        println!("(nothing to search for: nothing was searched)");
    }
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
}
