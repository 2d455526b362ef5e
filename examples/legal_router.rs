//! System 5: a legal query-intelligence layer.
//!
//! Each question is routed (simple / standard / complex / analytical) with a route confidence
//! (1.0 pattern, 0.7 counted references, 0.5 default) and the signals that fired; the acts,
//! sections and courts it names are extracted (two different high courts count twice); HyDE
//! runs only for complex and analytical routes, with a generator that can write a hypothetical
//! document: the local Qwen3 chat model whose directory is the first argument (without one, the
//! configured extractive generator only quotes its sources, and the plan says HyDE is off and
//! why); whole answers go through a semantic cache (TTL 24 h, 1 h for degraded answers and for
//! the fast-changing areas) tagged by the acts they cite, so a rephrased question is answered
//! without retrieval or generation and an amended act invalidates exactly its answers.
//! Configuration: `examples/configs/legal_router.yaml` (its cache file is replaced here by a
//! fresh one); the same layer as a CLI:
//! `cargo run --example rerank -- query --config examples/configs/legal_router.yaml "..."`.
//!
//! Logs (the pipeline's stages, timings, fallbacks, cache hits and misses) go to a log file,
//! `legal_router.log` in the system's temporary folder unless `--log-file` names another;
//! `--console-log` sends them to the console (stderr) as well. `--log-level` sets the level
//! (error, warn, info, debug, trace; default info).
//!
//! ```text
//! cargo run --example legal_router -- [--log-file PATH] [--console-log] [--log-level LEVEL] [QWEN3_CHAT_MODEL_DIR]
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use rerank::classify::LegalExtractor;
use rerank::pipeline::{GeneratorConfig, PipelineConfig, SearchRequest};
use tracing_subscriber::fmt::writer::MakeWriterExt;

/// The command line: the logging switches and the optional chat model directory.
struct Args {
    log_file: PathBuf,
    console_log: bool,
    log_level: String,
    model: Option<PathBuf>,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut args = Args {
            log_file: std::env::temp_dir().join("legal_router.log"),
            console_log: false,
            log_level: "info".into(),
            model: None,
        };
        let mut it = std::env::args_os().skip(1);
        while let Some(arg) = it.next() {
            match arg.to_str() {
                Some("--console-log") => args.console_log = true,
                Some("--log-file") => {
                    args.log_file = it.next().ok_or("--log-file needs a path")?.into();
                }
                Some("--log-level") => {
                    args.log_level = it
                        .next()
                        .and_then(|l| l.into_string().ok())
                        .ok_or("--log-level needs a level (error, warn, info, debug, trace)")?;
                }
                Some(flag) if flag.starts_with("--") => {
                    return Err(format!(
                        "unknown flag {flag}: use --log-file PATH, --console-log, --log-level LEVEL"
                    ))
                }
                _ if args.model.is_none() => args.model = Some(arg.into()),
                _ => return Err("one chat model directory at most".into()),
            }
        }
        Ok(args)
    }
}

/// Logs to the log file (appended, no colour codes) and, with `--console-log`, to stderr too.
fn init_logging(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.log_file)
        .map_err(|e| format!("--log-file {}: {e}", args.log_file.display()))?;
    let file = Arc::new(file);
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .map_err(|e| format!("--log-level {:?}: {e}", args.log_level))?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    if args.console_log {
        logs.with_writer(file.and(std::io::stderr))
            .try_init()
            .map_err(|e| format!("logging: {e}"))?;
    } else {
        logs.with_writer(file)
            .try_init()
            .map_err(|e| format!("logging: {e}"))?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse()?;
    init_logging(&args)?;
    let mut config = PipelineConfig::from_path(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/configs/legal_router.yaml"
    ))?;
    // A fresh cache file for this run.
    let db = std::env::temp_dir().join(format!("legal_router_{}.db", std::process::id()));
    if let Some(cache) = &mut config.cache {
        cache.path = Some(db.clone());
    }
    if let Some(model) = args.model {
        config.generator = Some(GeneratorConfig::LocalChat {
            model,
            precision: None,
        });
    }
    let pipeline = config.build(Vec::new())?;

    for question in [
        "What does section 420 of the Penal Code say?",
        "duties of directors under the Companies Act 2013",
        "Compare the Delhi High Court and the Bombay High Court on bail and on directors",
        "What are the duties of directors under the Companies Act 2013?",
    ] {
        let plan = pipeline.plan(&SearchRequest::new(question))?;
        let c = plan.classification.clone().unwrap_or_default();
        println!("> {question}");
        println!(
            "  route {:?} (confidence {:.1}), kind {:?} ({:.1}), HyDE {}, signals: {}",
            c.route,
            c.route_confidence,
            c.kind,
            c.kind_confidence,
            if plan.hyde { "yes" } else { "no" },
            c.signals.join(", ")
        );
        if let Some(why) = &plan.hyde_off {
            println!("  HyDE off: {why}");
        }
        if !c.legal.is_empty() {
            println!(
                "  acts {:?}, sections {:?}, courts {:?}",
                c.legal.acts, c.legal.sections, c.legal.jurisdictions
            );
        }
        let a = pipeline.answer(question)?;
        println!(
            "  {} answer ({:.2}): {}",
            if a.flags.cache_hit { "cached" } else { "fresh" },
            a.confidence,
            a.text
        );
    }
    if let Some(cache) = pipeline.cache() {
        let s = cache.stats();
        println!(
            "cache: {} entries, {} hits, {} misses",
            s.entries, s.hits, s.misses
        );
        let removed = cache.invalidate_tag(&LegalExtractor::act_tag("Companies Act"));
        println!(
            "Companies Act amended: {removed} cached answer(s) dropped, {} left",
            cache.stats().entries
        );
    }
    let _ = std::fs::remove_file(&db);
    Ok(())
}
