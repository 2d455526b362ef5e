//! Cross-encoder throughput of any model directory `CrossEncoder` reads, in one JSON line: what
//! `scripts/bench_rerank_models.py` runs next to sentence-transformers on the same pairs.
//!
//! ```text
//! RERANK_BENCH_RERANK_MODEL=DIR RERANK_BENCH_PAIRS=pairs.jsonl cargo bench --bench rerank_models
//! ```
//! Inputs: the model directory (`RERANK_BENCH_RERANK_MODEL`), the pairs, one JSON object
//! `{"query": ..., "document": ...}` per line (`RERANK_BENCH_PAIRS`), scored in one `logits`
//! call per run; `RERANK_BENCH_THREADS` threads (default 2), `RERANK_BENCH_WARMUP` untimed
//! runs (default 1), `RERANK_BENCH_REPEATS` timed ones (default 3), `RERANK_BENCH_PRECISION`
//! (`f32` or `int8`; default f32). The line has the load time, the seconds of each timed run,
//! the token count, and the logits of every pair (for the parity check).

use std::time::Instant;

use rerank::models::{ModelOptions, Precision};
use rerank::CrossEncoder;

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
    let threads = count("RERANK_BENCH_THREADS", 2);
    let precision = match env("RERANK_BENCH_PRECISION").as_deref() {
        None | Some("f32") => Precision::F32,
        Some("int8") => Precision::Int8,
        Some(other) => panic!("RERANK_BENCH_PRECISION={other}: f32 or int8"),
    };
    let options = ModelOptions::default()
        .threads(threads)
        .precision(precision);
    let start = Instant::now();
    let ce = CrossEncoder::builder(&model)
        .options(options)
        .build()
        .expect("the model loads");
    let load_seconds = start.elapsed().as_secs_f64();
    let tokens: usize = pairs
        .iter()
        .map(|(q, d)| ce.encode_pair(q, d).expect("tokenizes").len())
        .sum();
    for _ in 0..count("RERANK_BENCH_WARMUP", 1) {
        std::hint::black_box(ce.logits(&pairs).expect("scores"));
    }
    let mut seconds = Vec::new();
    let mut logits = Vec::new();
    for _ in 0..count("RERANK_BENCH_REPEATS", 3).max(1) {
        let t = Instant::now();
        logits = std::hint::black_box(ce.logits(&pairs).expect("scores"));
        seconds.push(t.elapsed().as_secs_f64());
    }
    println!(
        "{}",
        serde_json::json!({
            "impl": "rerank",
            "model": model,
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
