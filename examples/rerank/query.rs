//! `rerank query`: the query layer of a [`PipelineConfig`] as one command: the answer as text,
//! or with `--json` one JSON object.
//!
//! ```text
//! rerank query --config FILE "question"                  # answer (through the cache)
//! rerank query --config FILE --query "question"          # the same, the question as a flag
//! rerank query --config FILE --classify-only "question"  # the classification
//! rerank query --config FILE --dry-run "question"        # the plan: no side effects
//! rerank query --config FILE --cache-stats               # the cache's counters
//! rerank query --config FILE --invalidate-act NAME       # drop the answers citing an act
//! rerank query --config FILE --json "question"           # the answer as one JSON object
//! ```
//! `--log-level` (error, warn, info, debug, trace; default warn) logs to stderr. The models
//! (and how they run) are the config's, so `query` has no model flags.

use std::io::Write;
use std::path::PathBuf;

use rerank::classify::LegalExtractor;
use rerank::pipeline::{PipelineConfig, RetrieverConfig, SearchRequest};
use serde_json::json;

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// The pipeline configuration (YAML, TOML or JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Print the classification only (no index is built).
    #[arg(long, conflicts_with_all = ["dry_run", "cache_stats", "invalidate_act"])]
    classify_only: bool,
    /// Print the plan (classification, route, whether HyDE and the cache would run, the recall
    /// mode) without retrieval or generation, and without side effects: the corpus is not
    /// indexed and no store or cache file is opened or created.
    #[arg(long, conflicts_with_all = ["cache_stats", "invalidate_act"])]
    dry_run: bool,
    /// Print the semantic cache's counters.
    #[arg(long, conflicts_with = "invalidate_act")]
    cache_stats: bool,
    /// Remove the cached answers that cite this act (e.g. "Companies Act 2013").
    #[arg(long, value_name = "NAME")]
    invalidate_act: Option<String>,
    /// The recall mode, among the config's retrievers: bm25, dense (`vector` is an alias),
    /// hybrid, keyword, sparse, late_interaction, or a name the config gives (default: the
    /// config's `recall.default_mode`).
    #[arg(long, value_name = "RETRIEVER", alias = "mode")]
    retriever: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: crate::flags::LogArgs,
    /// The question (not needed with --cache-stats or --invalidate-act); `--query` is the
    /// same as a flag.
    #[arg(value_name = "QUERY")]
    question: Option<String>,
    /// The question, as a flag instead of the last argument.
    #[arg(long = "query", value_name = "TEXT", conflicts_with = "question")]
    query: Option<String>,
}

pub fn run(args: Args) -> CliResult {
    args.log.init()?;
    let config = PipelineConfig::from_path(&args.config)?;
    let question = || -> CliResult<String> {
        args.query
            .clone()
            .or_else(|| args.question.clone())
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| "a question is needed (the last argument, or --query TEXT)".into())
    };
    let out = if args.classify_only {
        // The classifier sees the corpus the pipeline would (it learns the domain's words
        // from it), so that --classify-only classifies as the full query does.
        let docs = match &config.corpus {
            Some(path) => rerank::Document::read_jsonl(path)?,
            None => Vec::new(),
        };
        let classifier = config.classifier.clone().unwrap_or_default().build(&docs)?;
        let q = question()?;
        // The query is printed back: personal data is refused first, as the pipeline does.
        config.pii.clone().unwrap_or_default().build().check(&q)?;
        json!({
            "query": q,
            "classification": rerank::QueryClassifier::classify(&classifier, &q),
        })
    } else if args.dry_run {
        dry_run(&config, &args, question()?)?
    } else {
        let pipeline = config.build(Vec::new())?;
        if args.cache_stats || args.invalidate_act.is_some() {
            let cache = pipeline
                .cache()
                .ok_or("the configuration has no `cache` section")?;
            match &args.invalidate_act {
                Some(act) => {
                    let tag = LegalExtractor::act_tag(act);
                    let removed = cache.try_invalidate_tag(&tag)?;
                    json!({"invalidated": removed, "tag": tag, "cache": cache.try_stats()?})
                }
                None => {
                    json!({"cache": cache.try_stats()?, "store": config.cache.as_ref().map(|c| c.store)})
                }
            }
        } else {
            let mut request = SearchRequest::new(question()?);
            request.mode = args.retriever.as_deref().map(recall_mode);
            let options = config.answer_options()?;
            if !args.json {
                crate::answer::print_streamed(&pipeline, &request, &options)?;
                return Ok(());
            }
            let answer = pipeline.answer_with(&request, &options)?;
            let classification = answer.classification.clone();
            json!({
                "query": answer.query,
                "answer": answer.text,
                "confidence": answer.confidence,
                "grounding_band": answer.grounding_band,
                "relevance": answer.relevance,
                "relevance_basis": answer.relevance_basis,
                "relevance_band": answer.relevance_band,
                "confidence_band": answer.confidence_band,
                "sources": answer.brief_sources(),
                "classification": classification,
                "flags": answer.flags,
                "timings": answer.timings,
            })
        }
    };
    // A closed pipe (`| head`) is an error, not a panic. Without --json the object is
    // indented for reading.
    let text = match args.json {
        true => serde_json::to_string(&out)?,
        false => serde_json::to_string_pretty(&out)?,
    };
    writeln!(std::io::stdout().lock(), "{text}")?;
    Ok(())
}

/// `--dry-run`: the plan of `question` from a pipeline built without side effects. The
/// corpus is read for the classifier (which learns the domain's words from it, as in the full
/// query) but not indexed; the `store` section is left out and the cache is kept in memory
/// (so no SQLite file is created and no Redis server is reached), and a Milvus retriever is
/// read as the in-memory dense one of its embedder ([`offline`]). The answer names what the
/// full query would use: the corpus, the store, the cache's store and the Milvus collections.
fn dry_run(config: &PipelineConfig, args: &Args, question: String) -> CliResult<serde_json::Value> {
    let docs = match &config.corpus {
        Some(path) => rerank::Document::read_jsonl(path)?,
        None => Vec::new(),
    };
    let mut quiet = config.clone();
    quiet.corpus = None;
    quiet.store = None;
    let mut milvus = Vec::new();
    offline(&mut quiet.retriever, &mut milvus);
    if let Some(cache) = &mut quiet.cache {
        cache.store = rerank::pipeline::CacheStoreKind::Memory;
        cache.path = None;
        cache.url = None;
    }
    let mut builder = quiet.builder(Vec::new())?;
    if let Some(classifier) = &config.classifier {
        builder = builder.classifier(classifier.build(&docs)?);
    }
    let pipeline = builder.build()?;
    let mut request = SearchRequest::new(question);
    request.mode = args.retriever.as_deref().map(recall_mode);
    Ok(json!({
        "plan": pipeline.plan(&request)?,
        "would_use": {
            "corpus": config.corpus,
            "documents": docs.len(),
            "store": config.store.as_ref().map(|s| &s.path),
            "cache": config.cache.as_ref().map(|c| json!({"store": c.store, "path": c.path})),
            "milvus": milvus,
        },
    }))
}

/// `retriever` with every Milvus leaf read as the in-memory dense retriever of its embedder,
/// each leaf's `{url, collection}` pushed to `milvus`: the plan is the same (both are the
/// `vector` recall mode) and no server is reached (building a Milvus retriever creates its
/// collection and writes the documents it lacks).
fn offline(retriever: &mut RetrieverConfig, milvus: &mut Vec<serde_json::Value>) {
    match retriever {
        RetrieverConfig::Milvus {
            url,
            collection,
            model,
        } => {
            milvus.push(json!({"url": url, "collection": collection}));
            let model = model.clone();
            *retriever = RetrieverConfig::Dense { model };
        }
        RetrieverConfig::Hybrid { retrievers, .. } => {
            retrievers.iter_mut().for_each(|r| offline(r, milvus));
        }
        _ => {}
    }
}

/// The pipeline's recall-mode name for a `--retriever` value: `dense`, the CLI's name of the
/// embedding retriever (`search --retriever dense`), is the config's `vector` mode; any other
/// value is the mode's own name.
fn recall_mode(retriever: &str) -> String {
    match retriever.trim() {
        r if r.eq_ignore_ascii_case("dense") => "vector".to_string(),
        r => r.to_string(),
    }
}

/// Sends `tracing` events at `level` and above to stderr, coloured only when stderr is a
/// terminal (a log file or a pipe gets no escape codes).
pub(crate) fn init_logging(level: &str) -> CliResult {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .map_err(|e| format!("--log-level {level:?}: {e}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init()
        .map_err(|e| format!("logging: {e}"))?;
    Ok(())
}
