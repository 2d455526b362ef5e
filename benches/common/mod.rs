//! Inputs and settings shared by the model benchmarks (each bench uses a part of them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A bench setting from the environment (`RERANK_BENCH_*`), if set.
pub fn setting(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

/// A whole-number bench setting, `default` when unset or not a number.
pub fn count(key: &str, default: usize) -> usize {
    setting(key).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The texts of the file `RERANK_BENCH_TEXTS` names, one a line (panics without it: a bench
/// input).
pub fn bench_texts() -> String {
    let file =
        setting("RERANK_BENCH_TEXTS").expect("RERANK_BENCH_TEXTS: a file, one text per line");
    std::fs::read_to_string(&file).expect("RERANK_BENCH_TEXTS is readable")
}

/// `RERANK_BENCH_ROLE`: `document` (the default) or `query`.
pub fn bench_role() -> rerank::Role {
    match setting("RERANK_BENCH_ROLE").as_deref() {
        None | Some("document") => rerank::Role::Document,
        Some("query") => rerank::Role::Query,
        Some(other) => panic!("RERANK_BENCH_ROLE={other}: query or document"),
    }
}

/// The SciFact collection (read from `../shared`, never copied into the crate).
pub const SCIFACT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets/scifact");

/// The first `n` SciFact documents as `title + " " + text` (what the Python side of
/// `scripts/bench_*` builds too), or `None` when the data is not there.
pub fn scifact_documents(n: usize) -> Option<Vec<String>> {
    let corpus = std::fs::read_to_string(Path::new(SCIFACT).join("corpus.jsonl")).ok()?;
    let docs: Vec<String> = corpus
        .lines()
        .take(n)
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            let title = v["title"].as_str().unwrap_or("");
            let text = v["text"].as_str().unwrap_or("");
            Some(format!("{title} {text}"))
        })
        .collect();
    (docs.len() == n).then_some(docs)
}

/// The text of the first SciFact query judged in `qrels/test.tsv`.
pub fn scifact_first_judged_query() -> Option<String> {
    let dir = Path::new(SCIFACT);
    let qrels = std::fs::read_to_string(dir.join("qrels/test.tsv")).ok()?;
    let judged: std::collections::HashSet<&str> = qrels
        .lines()
        .skip(1)
        .filter_map(|l| l.split('\t').next())
        .collect();
    let queries = std::fs::read_to_string(dir.join("queries.jsonl")).ok()?;
    queries.lines().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        let id = v["_id"].as_str()?;
        judged
            .contains(id)
            .then(|| v["text"].as_str().map(str::to_string))?
    })
}

/// Threads per benchmark: `RERANK_BENCH_THREADS`, default 2.
pub fn threads() -> usize {
    std::env::var("RERANK_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(2)
}

/// The model directory `name` under `$RERANK_MODELS_DIR` (default `./models`).
pub fn model_dir(name: &str) -> PathBuf {
    std::env::var_os("RERANK_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models")))
        .join(name)
}
