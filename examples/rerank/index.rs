//! `rerank index`: add a JSONL corpus to an SQLite store.
//!
//! ```text
//! cargo run --release --example rerank -- index --db notes.db --corpus notes.jsonl \
//!     [--embedder models/all-MiniLM-L6-v2] [--colbert-model DIR] [--sparse-model DIR]
//!     [--sync] [--duplicates refuse|first|last] [--json]
//! ```
//! `--corpus -` reads the corpus from stdin. New and changed documents are (re)analyzed, and
//! with `--embedder` embedded when no vector for their content and model is stored; unchanged
//! ones cost a hash. Documents the store holds and the corpus does not are kept, so a second
//! file adds to the first; `--sync` makes the store hold exactly the corpus (removing the
//! others), and a sync that would remove every stored document (an empty file, or one that
//! shares no id with the store) is refused unless `--replace-all` says that is meant. The whole corpus is read and checked (every line a
//! document with a non-empty id; an id on two lines refused, or one of them kept with
//! `--duplicates first|last`) before the first batch is written. Each batch is one
//! transaction, so an interrupted run keeps every batch it finished; a second `index` run on
//! the same store while one runs fails at once (`Store::lock_writer`). At the end the
//! write-ahead log is checkpointed, so the store is one whole file when the command returns.
//! Prints one JSON object (`documents`, `added`, `updated`, `unchanged`, `kept`, `removed`,
//! `duplicates`, `embedded`, `seconds`), or a line without `--json`. A progress bar goes to
//! stderr when the run is long and stderr is a terminal.

use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rerank::store::UpsertReport;
use rerank::{Document, Embedder, Store};

use crate::flags::{LogArgs, ModelArgs};
use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// The store's SQLite file (created if missing).
    #[arg(long, value_name = "FILE")]
    db: PathBuf,
    /// JSONL corpus: one {"id", "text", "title"?, "source"?, "page"?, "metadata"?} per line;
    /// `-` for stdin.
    #[arg(long, value_name = "FILE")]
    corpus: PathBuf,
    /// Also store embeddings from this embedding model (a directory, a folder name under
    /// $RERANK_MODELS_DIR, or a hub id), for dense and hybrid search; without it only BM25
    /// data is stored.
    #[arg(long, value_name = "MODEL", alias = "model")]
    embedder: Option<PathBuf>,
    /// Also store ColBERT token vectors (f16) from this late-interaction model, for a config's
    /// `retriever: {type: late_interaction}` over the store.
    #[arg(long, value_name = "MODEL")]
    colbert_model: Option<PathBuf>,
    /// Also store learned sparse vectors from this sparse encoder (SPLADE, bge-m3), for a
    /// config's `retriever: {type: sparse}` over the store.
    #[arg(long, value_name = "MODEL")]
    sparse_model: Option<PathBuf>,
    #[command(flatten)]
    models: ModelArgs,
    /// Make the store hold exactly the corpus: remove the stored documents it does not hold
    /// (by default they are kept, and the summary counts them).
    #[arg(long)]
    sync: bool,
    /// With --sync, allow a corpus that removes every document the store holds (an empty
    /// corpus, or one that shares no id with the store). Implies --sync.
    #[arg(long)]
    replace_all: bool,
    /// What to do with an id on more than one line of the corpus: refuse the corpus (naming
    /// the lines), or keep its first or last line.
    #[arg(long, value_enum, default_value_t = Duplicates::Refuse)]
    duplicates: Duplicates,
    /// Documents per transaction (and per embedding call).
    #[arg(long, value_name = "N", default_value_t = 512, alias = "batch")]
    batch_size: usize,
    /// Print one JSON object instead of a line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: LogArgs,
}

/// `--duplicates`: what an id on several lines of the corpus means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Duplicates {
    /// Refuse the corpus, naming the id and its lines; nothing is written.
    Refuse,
    /// Keep the id's first line.
    First,
    /// Keep the id's last line.
    Last,
}

pub fn run(args: Args) -> CliResult {
    args.log.init()?;
    if args.batch_size == 0 {
        return Err("--batch-size must be at least 1".into());
    }
    args.models.check()?;
    let sync = args.sync || args.replace_all;
    let start = Instant::now();
    let docs = crate::flags::read_corpus(&args.corpus)?;
    let embedder = match &args.embedder {
        Some(model) => Some(crate::embed::load_embedder(model, &args.models)?),
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
    let refusal = "nothing was written (--duplicates first or --duplicates last keeps one line \
                   of each)";
    let (docs, duplicates) = dedupe(docs, args.duplicates, &args.corpus, refusal)?;
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
    if sync && !stored.is_empty() && gone.len() == stored.len() && !args.replace_all {
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
    for chunk in docs.chunks(args.batch_size) {
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
    let (removed, kept) = match sync {
        true => (store.remove(&gone)?, 0),
        false => (0, gone.len()),
    };
    bar.finish_and_clear();
    let encoded = encode_extra(&store, &args)?;
    // The file alone holds the store once the log is copied into it.
    store.checkpoint()?;
    let mut out = serde_json::json!({
        "db": args.db,
        "documents": store.len()?,
        "added": total.added,
        "updated": total.updated,
        "unchanged": total.unchanged,
        "kept": kept,
        "removed": removed,
        "duplicates": duplicates,
        "embedded": total.embedded,
        "seconds": start.elapsed().as_secs_f64(),
    });
    for (key, value) in &encoded {
        out[key] = value.clone();
    }
    if args.json {
        println!("{out}");
    } else {
        let others = match sync {
            true => format!("{removed} not in the corpus removed (--sync)"),
            false => format!("{kept} not in the corpus kept"),
        };
        println!(
            "{}: {} documents ({} added, {} updated, {} unchanged, {others}; {} embedded) in {:.2} s",
            args.db.display(),
            out["documents"],
            total.added,
            total.updated,
            total.unchanged,
            total.embedded,
            start.elapsed().as_secs_f64()
        );
        for (key, v) in &encoded {
            println!(
                "{key}: {} computed, {} stored, {:.0} bytes a document",
                v["computed"], v["documents"], v["bytes_per_document"]
            );
        }
    }
    if embedder.is_none() {
        // Stdin was read once: the note names a file to read the corpus from again.
        let corpus = match crate::flags::is_stdin(&args.corpus) {
            true => "FILE".to_string(),
            false => args.corpus.display().to_string(),
        };
        eprintln!(
            "note: no vectors were computed (BM25 search only); for dense and hybrid search run \
             `rerank index --db {} --corpus {corpus} --embedder MODEL` with the embedding model \
             you will search with",
            args.db.display(),
        );
    }
    Ok(())
}

/// Computes the ColBERT token vectors and sparse vectors the flags ask for that the store
/// lacks; per kind (`token_vectors`, `sparse_vectors`), how many were computed, how many the
/// store holds and their mean size.
#[cfg(feature = "models")]
fn encode_extra(
    store: &Store,
    args: &Args,
) -> CliResult<serde_json::Map<String, serde_json::Value>> {
    use rerank::models::registry::{resolve, Task};
    let mut out = serde_json::Map::new();
    let summary = |computed: usize, id: Option<String>| -> CliResult<serde_json::Value> {
        let size = store.encoded_size(&id.unwrap_or_default())?;
        Ok(serde_json::json!({
            "computed": computed,
            "documents": size.documents,
            "bytes_per_document": size.bytes_per_document(),
        }))
    };
    if let Some(model) = &args.colbert_model {
        let encoder = Arc::new(
            rerank::ColbertEncoder::builder(resolve(model, Task::Embedding)?)
                .options(args.models.options()?)
                .build()?,
        );
        let computed = store.encode_missing_tokens(&encoder)?;
        out.insert("token_vectors".into(), summary(computed, encoder.id())?);
    }
    if let Some(model) = &args.sparse_model {
        let encoder = Arc::new(
            rerank::SparseEncoder::builder(resolve(model, Task::Embedding)?)
                .options(args.models.options()?)
                .build()?,
        );
        let computed = store.encode_missing_sparse(&encoder)?;
        out.insert("sparse_vectors".into(), summary(computed, encoder.id())?);
    }
    Ok(out)
}

/// Without the `models` feature there are no ColBERT or sparse models.
#[cfg(not(feature = "models"))]
fn encode_extra(
    _store: &Store,
    args: &Args,
) -> CliResult<serde_json::Map<String, serde_json::Value>> {
    match args.colbert_model.is_some() || args.sparse_model.is_some() {
        true => Err("--colbert-model and --sparse-model need the `models` feature".into()),
        false => Ok(serde_json::Map::new()),
    }
}

/// The corpus with one line per id, by `policy`, and how many lines were dropped; `refuse`
/// fails naming the first ids on several lines and their line numbers, then `refusal` (what
/// happened and what to do).
pub fn dedupe(
    docs: Vec<Document>,
    policy: Duplicates,
    corpus: &std::path::Path,
    refusal: &str,
) -> CliResult<(Vec<Document>, usize)> {
    let mut lines: HashMap<&str, Vec<usize>> = HashMap::new();
    for (n, d) in docs.iter().enumerate() {
        lines.entry(d.id.as_str()).or_default().push(n);
    }
    let mut repeated: Vec<(&str, &Vec<usize>)> = lines
        .iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(id, at)| (*id, at))
        .collect();
    if repeated.is_empty() {
        return Ok((docs, 0));
    }
    repeated.sort_by_key(|(_, at)| at[0]);
    let line_of = document_lines(corpus);
    let name = |(id, at): &(&str, &Vec<usize>)| {
        let mut shown: Vec<String> = at
            .iter()
            .take(5)
            .map(|&n| line_of.get(n).copied().unwrap_or(n + 1).to_string())
            .collect();
        if at.len() > 5 {
            shown.push(format!("and {} more", at.len() - 5));
        }
        format!("{id:?} on lines {}", shown.join(", "))
    };
    let shown: Vec<String> = repeated.iter().take(3).map(name).collect();
    let more = match repeated.len() {
        n if n > 3 => format!(" and {} more ids", n - 3),
        _ => String::new(),
    };
    let dropped: usize = repeated.iter().map(|(_, at)| at.len() - 1).sum();
    if policy == Duplicates::Refuse {
        return Err(format!(
            "{}: {}{more}; {refusal}",
            corpus.display(),
            shown.join("; ")
        )
        .into());
    }
    eprintln!(
        "note: {}: {}{more}: kept the {} line of each, {dropped} lines dropped",
        corpus.display(),
        shown.join("; "),
        if policy == Duplicates::First {
            "first"
        } else {
            "last"
        }
    );
    let keep: HashSet<usize> = lines
        .values()
        .map(|at| match policy {
            Duplicates::First => at[0],
            _ => at[at.len() - 1],
        })
        .collect();
    let docs = docs
        .into_iter()
        .enumerate()
        .filter(|(n, _)| keep.contains(n))
        .map(|(_, d)| d)
        .collect();
    Ok((docs, dropped))
}

/// The line of `path` that holds its `n`-th document (0-based), counting as
/// `Document::read_jsonl` does (blank lines hold none).
fn line_of_document(path: &std::path::Path, n: usize) -> usize {
    document_lines(path).get(n).copied().unwrap_or(n + 1)
}

/// The line of `path` (1-based) that holds each document, in order, counting as
/// `Document::read_jsonl` does (blank lines hold none): the file read once for any number of
/// lookups. Empty when the file cannot be read again (stdin).
fn document_lines(path: &std::path::Path) -> Vec<usize> {
    if crate::flags::is_stdin(path) {
        // Stdin was read once; documents are numbered in order of their lines.
        return Vec::new();
    }
    std::fs::read_to_string(path)
        .map(|text| {
            text.lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, _)| i + 1)
                .collect()
        })
        .unwrap_or_default()
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
