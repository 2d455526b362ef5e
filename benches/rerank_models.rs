//! Reranker throughput of any model directory `CrossEncoder` or `load_reranker` reads, in one
//! JSON line: what `scripts/bench_rerank_models.py` runs next to its Python peer on the same
//! pairs.
//!
//! ```text
//! RERANK_BENCH_RERANK_MODEL=DIR RERANK_BENCH_PAIRS=pairs.jsonl cargo bench --bench rerank_models
//! ```
//! Inputs: the model directory (`RERANK_BENCH_RERANK_MODEL`), the pairs, one JSON object
//! `{"query": ..., "document": ...}` per line (`RERANK_BENCH_PAIRS`), all scored in one call
//! per run; `RERANK_BENCH_THREADS` threads (default 2), `RERANK_BENCH_WARMUP` untimed runs
//! (default 1), `RERANK_BENCH_REPEATS` timed ones (default 3), `RERANK_BENCH_PRECISION`
//! (`f32` or `int8`; default f32). The line has the loader, the load time, the seconds of each
//! timed run, the token count, and the logits of every pair (for the parity check).
//!
//! `RERANK_BENCH_LOADER` picks how the model is loaded and timed:
//! - `cross_encoder`: `CrossEncoder::builder(dir)`, timed with `CrossEncoder::logits`; the
//!   token count is `encode_pair`'s;
//! - `load_reranker`: `rerank::rerankers::load_reranker(dir, &options)` (monoT5, Qwen3, ...),
//!   timed with `Reranker::raw_score_pairs`, whose raw scores are printed as the "logits"
//!   (monoT5: `l_true - l_false`); the token count is `Reranker::token_count`'s (0 where the
//!   reranker cannot tell);
//! - unset: `cross_encoder` when `config.json`'s first architecture is a
//!   `...ForSequenceClassification`, `load_reranker` otherwise (so a Qwen3 / Qwen2 reranker
//!   converted to sequence classification needs `load_reranker` set).
//!
//! `scripts/bench_rerank_models.py` sets it: `load_reranker` for `--arch monot5`.

use std::time::Instant;

use rerank::models::{ModelOptions, Precision};
use rerank::rerankers::{load_reranker, RerankQuery};
use rerank::{CrossEncoder, Reranker};

/// A loaded model and how it scores all pairs in one call.
enum Model {
    CrossEncoder(Box<CrossEncoder>),
    Reranker(Box<dyn Reranker>),
}

impl Model {
    fn loader(&self) -> &'static str {
        match self {
            Model::CrossEncoder(_) => "cross_encoder",
            Model::Reranker(_) => "load_reranker",
        }
    }

    fn logits(&self, pairs: &[(&str, &str)], queried: &[(&RerankQuery, &str)]) -> Vec<f32> {
        match self {
            Model::CrossEncoder(ce) => ce.logits(pairs).expect("scores"),
            Model::Reranker(r) => r
                .raw_score_pairs(queried)
                .expect("scores")
                .expect("raw scores (passages off)"),
        }
    }

    fn tokens(&self, pairs: &[(&str, &str)], queried: &[(&RerankQuery, &str)]) -> usize {
        match self {
            Model::CrossEncoder(ce) => pairs
                .iter()
                .map(|(q, d)| ce.encode_pair(q, d).expect("tokenizes").len())
                .sum(),
            Model::Reranker(r) => queried
                .iter()
                .map(|(q, d)| r.token_count(q, d).unwrap_or(0))
                .sum(),
        }
    }
}

/// Whether `dir/config.json` names a `...ForSequenceClassification` first.
fn is_sequence_classifier(dir: &str) -> bool {
    let path = std::path::Path::new(dir).join("config.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return false;
    };
    let value: serde_json::Value = serde_json::from_str(&text).expect("config.json is JSON");
    value["architectures"][0]
        .as_str()
        .is_some_and(|a| a.ends_with("ForSequenceClassification"))
}

fn main() {
    let env = |k: &str| std::env::var(k).ok();
    let count = |k: &str, default: usize| env(k).and_then(|v| v.parse().ok()).unwrap_or(default);
    let Some(model) = env("RERANK_BENCH_RERANK_MODEL") else {
        eprintln!("set RERANK_BENCH_RERANK_MODEL (and RERANK_BENCH_PAIRS); nothing to run");
        return;
    };
    let pairs_file =
        env("RERANK_BENCH_PAIRS").expect("RERANK_BENCH_PAIRS: a file, one JSON pair per line");
    let text = std::fs::read_to_string(&pairs_file).expect("RERANK_BENCH_PAIRS is readable");
    let owned: Vec<(String, String)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON pair per line");
            let field = |k: &str| {
                v[k].as_str()
                    .expect("query and document strings")
                    .to_string()
            };
            (field("query"), field("document"))
        })
        .collect();
    let pairs: Vec<(&str, &str)> = owned
        .iter()
        .map(|(q, d)| (q.as_str(), d.as_str()))
        .collect();
    let queries: Vec<RerankQuery> = owned.iter().map(|(q, _)| RerankQuery::new(q)).collect();
    let queried: Vec<(&RerankQuery, &str)> = queries
        .iter()
        .zip(&owned)
        .map(|(q, (_, d))| (q, d.as_str()))
        .collect();
    let threads = count("RERANK_BENCH_THREADS", 2);
    let precision = match env("RERANK_BENCH_PRECISION").as_deref() {
        None | Some("f32") => Precision::F32,
        Some("int8") => Precision::Int8,
        Some(other) => panic!("RERANK_BENCH_PRECISION={other}: f32 or int8"),
    };
    let options = ModelOptions::default()
        .threads(threads)
        .precision(precision);
    let cross_encoder = match env("RERANK_BENCH_LOADER").as_deref() {
        None | Some("") => is_sequence_classifier(&model),
        Some("cross_encoder") => true,
        Some("load_reranker") => false,
        Some(other) => panic!("RERANK_BENCH_LOADER={other}: cross_encoder or load_reranker"),
    };
    let start = Instant::now();
    let scorer = if cross_encoder {
        Model::CrossEncoder(Box::new(
            CrossEncoder::builder(&model)
                .options(options)
                .build()
                .expect("the model loads"),
        ))
    } else {
        Model::Reranker(load_reranker(&model, &options).expect("the model loads"))
    };
    let load_seconds = start.elapsed().as_secs_f64();
    let tokens = scorer.tokens(&pairs, &queried);
    for _ in 0..count("RERANK_BENCH_WARMUP", 1) {
        std::hint::black_box(scorer.logits(&pairs, &queried));
    }
    let mut seconds = Vec::new();
    let mut logits = Vec::new();
    for _ in 0..count("RERANK_BENCH_REPEATS", 3).max(1) {
        let t = Instant::now();
        logits = std::hint::black_box(scorer.logits(&pairs, &queried));
        seconds.push(t.elapsed().as_secs_f64());
    }
    println!(
        "{}",
        serde_json::json!({
            "impl": "rerank",
            "model": model,
            "loader": scorer.loader(),
            "threads": threads,
            "precision": precision.as_str(),
            "pairs": pairs.len(),
            "tokens": tokens,
            "load_seconds": load_seconds,
            "seconds": seconds,
            "logits": logits,
        })
    );
}
