//! `rerank index`: upsert a JSONL corpus into an SQLite store.
//!
//! ```text
//! cargo run --release --example rerank -- index --db notes.db --corpus notes.jsonl \
//!     [--model models/all-MiniLM-L6-v2] [--batch 512] [--json]
//! ```
//! The store ends up holding exactly the corpus: new and changed documents are (re)analyzed,
//! and with `--model` embedded when no vector for their content and model is stored;
//! unchanged ones cost a hash; documents no longer in the corpus are removed. The whole corpus
//! is read and checked (every line a document with a non-empty id) before the first batch is
//! written. A corpus that would remove every stored document (an empty file, or one that shares
//! no id with the store) is refused unless `--replace-all` says that is meant. Each batch is one
//! transaction, so an interrupted run keeps every batch it finished; a second `index` run on the
//! same store while one runs fails at once (`Store::lock_writer`). At the end the write-ahead
//! log is checkpointed, so the store is one whole file when the command returns. Prints one JSON object
//! (`documents`, `added`, `updated`, `unchanged`, `removed`, `embedded`, `seconds`), or a line
//! without `--json`. A progress bar goes to stderr when the run is long and stderr is a terminal.

use std::collections::HashSet;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rerank::store::UpsertReport;
use rerank::{Document, Embedder, Store};

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// The store's SQLite file (created if missing).
    #[arg(long, value_name = "FILE")]
    db: PathBuf,
    /// JSONL corpus: one {"id", "text", "title"?, "source"?, "page"?, "metadata"?} per line.
    #[arg(long, value_name = "FILE")]
    corpus: PathBuf,
    /// Also store embeddings from this BERT bi-encoder directory (for dense and hybrid recall).
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// Threads for the embedding model (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Allow a corpus that removes every document the store holds (an empty corpus, or one
    /// that shares no id with the store).
    #[arg(long)]
    replace_all: bool,
    /// Documents per transaction.
    #[arg(long, default_value_t = 512)]
    batch: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    if args.batch == 0 {
        return Err("--batch must be at least 1".into());
    }
    let start = Instant::now();
    let docs = Document::read_jsonl(&args.corpus)?;
    let embedder = match &args.model {
        Some(dir) => Some(crate::embed::load_embedder(
            dir,
            args.threads,
            crate::embed::PrecisionArg::default(),
        )?),
        None => None,
    };
    if let Some(n) = docs.iter().position(|d| d.id.trim().is_empty()) {
        return Err(format!(
            "{}:{}: a document with an empty id; nothing was written",
            args.corpus.display(),
            line_of_document(&args.corpus, n)
        )
        .into());
    }
    let store = Arc::new(Store::open(&args.db)?);
    // Two runs with different corpora would interleave their batches: one at a time.
    let _lock = store.lock_writer()?;
    let keep: HashSet<&str> = docs.iter().map(|d| d.id.as_str()).collect();
    let stored = store.ids()?;
    let gone: Vec<String> = stored
        .iter()
        .filter(|id| !keep.contains(id.as_str()))
        .cloned()
        .collect();
    if !stored.is_empty() && gone.len() == stored.len() && !args.replace_all {
        return Err(format!(
            "{} would remove all {} documents of {}: {}; nothing was written (pass \
             --replace-all if that is meant)",
            args.corpus.display(),
            stored.len(),
            args.db.display(),
            if docs.is_empty() {
                "it holds no document"
            } else {
                "it shares no id with the store"
            }
        )
        .into());
    }

    let bar = progress(docs.len() as u64);
    let mut total = UpsertReport::default();
    for chunk in docs.chunks(args.batch) {
        let r = match &embedder {
            Some(e) => store.upsert_embedded(chunk.to_vec(), e.as_ref() as &dyn Embedder)?,
            None => store.upsert(chunk.to_vec())?,
        };
        total.added += r.added;
        total.updated += r.updated;
        total.unchanged += r.unchanged;
        total.embedded += r.embedded;
        bar.inc(chunk.len() as u64);
    }
    let removed = store.remove(&gone)?;
    bar.finish_and_clear();
    // The file alone holds the store once the log is copied into it.
    store.checkpoint()?;
    let out = serde_json::json!({
        "db": args.db,
        "documents": store.len()?,
        "added": total.added,
        "updated": total.updated,
        "unchanged": total.unchanged,
        "removed": removed,
        "embedded": total.embedded,
        "seconds": start.elapsed().as_secs_f64(),
    });
    if args.json {
        println!("{out}");
    } else {
        println!(
            "{}: {} documents ({} added, {} updated, {} unchanged, {} removed; {} embedded) in {:.2} s",
            args.db.display(),
            out["documents"],
            total.added,
            total.updated,
            total.unchanged,
            removed,
            total.embedded,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The line of `path` that holds its `n`-th document (0-based), counting as
/// `Document::read_jsonl` does (blank lines hold none).
fn line_of_document(path: &std::path::Path, n: usize) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .nth(n)
                .map(|(i, _)| i + 1)
        })
        .unwrap_or(n + 1)
}

/// A progress bar on stderr that shows itself only after a second, and never when stderr is
/// not a terminal (stdout stays clean for the JSON).
fn progress(len: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(len),
        indicatif::ProgressDrawTarget::stderr_with_hz(4),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "indexing {bar:40} {pos}/{len} docs {per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    // indicatif draws at the first tick after this delay, so short runs print nothing.
    bar.enable_steady_tick(Duration::from_millis(250));
    bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    let shown = bar.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        if !shown.is_finished() {
            shown.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(4));
        }
    });
    bar
}
