//! System 4: a knowledge base with two-phase queries and instruction-aware reranking.
//!
//! `[SEARCH] phrase [TASK] context [INSTRUCT] instruction`: the phrase drives recall, the task
//! the reranker. The reranker instruction comes from the request, then `[INSTRUCT]`, then the
//! task type the classifier finds (implementation, troubleshooting, design, general), then the
//! default; documents whose `entity_type` is `experience` or `manual` get that type's
//! instruction. The response says which instruction each candidate got. The reranked
//! candidates are ranked by `0.6 x reranker + 0.3 x stage 1 + 0.1 x recency` (the documents'
//! `date`); the pipeline logs its reranker mode when built and counts how queries used the
//! format (a plain question is refused in strict mode and counted as a parse failure).
//! Configuration:
//! `examples/configs/two_phase_kb.toml` (the lexical reranker scores offline; with
//! `type = "qwen3"` and a model the instructions steer Qwen3-Reranker).
//!
//! ```text
//! cargo run --example two_phase_kb
//! ```

use rerank::pipeline::{PipelineConfig, SearchRequest};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = PipelineConfig::from_path(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/configs/two_phase_kb.toml"
    ))?;
    let pipeline = config.build(Vec::new())?;
    let requests = [
        SearchRequest::new(
            "[SEARCH] shutdown runtime [TASK] my service hangs on exit and the shutdown fails",
        ),
        SearchRequest::new(
            "[SEARCH] event sourcing [TASK] should billing keep every change as an event \
             [INSTRUCT] Prefer passages that report what happened in production",
        ),
        SearchRequest::new("[SEARCH] deploy service [TASK] how to deploy a new service")
            .instruction("Judge whether the passage is a checklist for deployments"),
    ];
    for request in requests {
        let r = pipeline.search_with(&request)?;
        println!("> {}", request.query);
        if let Some(c) = &r.classification {
            println!("  task type: {:?}", c.task_type);
        }
        for u in &r.instructions {
            let what = match (&u.entity, u.task_type) {
                (Some(e), _) => format!("{:?} {e}", u.source),
                (_, Some(t)) => format!("{:?} {t:?}", u.source),
                _ => format!("{:?}", u.source),
            };
            println!("  instruction [{what}] x{}: {}", u.candidates, u.text);
        }
        for h in &r.hits {
            let meta = |key: &str| {
                h.document
                    .metadata
                    .get(key)
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
            };
            println!(
                "  - {} ({}, {}) score {:.3}",
                h.document.title.as_deref().unwrap_or(&h.document.id),
                meta("entity_type").unwrap_or_else(|| "untyped".into()),
                meta("date").unwrap_or_else(|| "undated".into()),
                h.score
            );
        }
    }
    if let Err(e) = pipeline.search("why does my service hang on exit?") {
        println!(
            "> a plain question: refused ({})",
            e.to_string().lines().next().unwrap_or("")
        );
    }
    let stats = pipeline.two_phase_stats();
    println!(
        "two-phase format: {} parsed, {} parse failures ({:.0}% adoption)",
        stats.parsed,
        stats.parse_failures,
        stats.adoption() * 100.0
    );
    Ok(())
}
