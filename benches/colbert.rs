//! ColBERT encoding throughput of a model directory `ColbertEncoder` reads, in one JSON line:
//! what `scripts/bench_colbert_vs_pylate.py` runs next to PyLate on the same texts.
//!
//! ```text
//! RERANK_BENCH_COLBERT_MODEL=DIR RERANK_BENCH_TEXTS=texts.txt RERANK_BENCH_ROLE=document \
//!     cargo bench --features full --bench colbert
//! ```
//! Inputs: the model directory (`RERANK_BENCH_COLBERT_MODEL`), the texts, one per line
//! (`RERANK_BENCH_TEXTS`), encoded as `RERANK_BENCH_ROLE` (`query` or `document`, default
//! document) in one `encode` call per run; `RERANK_BENCH_THREADS` threads (default 2),
//! `RERANK_BENCH_TOKEN_BUDGET` tokens a batch (default the encoder's),
//! `RERANK_BENCH_WARMUP` untimed runs (default 1), `RERANK_BENCH_REPEATS` timed ones (default
//! 3). The line has the load time, the seconds of each timed run, the token count (the ids
//! the encoder sees, prefix and query expansion included) and the seconds taken to count
//! them (tokenizing the texts one by one, on one thread), the vector count, and the vectors
//! of the first four texts (for the parity check).
//!
//! MaxSim: with `RERANK_BENCH_MAXSIM_QUERY` (a query text) and the role `document`, the query
//! is encoded too and scored against every document's vectors by `rerank::embed::maxsim`,
//! `RERANK_BENCH_MAXSIM_REPEATS` times (default 50) after one untimed round, on one thread
//! (`maxsim_seconds`) and over the documents on `RERANK_BENCH_THREADS` rayon threads
//! (`maxsim_parallel_seconds`); the line adds the seconds of each round (one query x all
//! documents) and the scores of the last.

mod common;

#[cfg(feature = "models")]
fn main() {
    use std::time::Instant;

    use rerank::embed::maxsim;
    use rerank::models::ModelOptions;
    use rerank::{ColbertEncoder, Role};

    use common::{count, setting as env};
    let Some(model) = env("RERANK_BENCH_COLBERT_MODEL") else {
        eprintln!("set RERANK_BENCH_COLBERT_MODEL (and RERANK_BENCH_TEXTS); nothing to run");
        return;
    };
    let text = common::bench_texts();
    let texts: Vec<&str> = text.lines().collect();
    let role = common::bench_role();
    let threads = count("RERANK_BENCH_THREADS", 2);
    eprintln!("kernels: {}", rerank::simd_isa());

    let start = Instant::now();
    let mut options = ModelOptions::default().threads(threads);
    if let Some(budget) = env("RERANK_BENCH_TOKEN_BUDGET").and_then(|v| v.parse().ok()) {
        options = options.token_budget(budget);
    }
    let colbert = ColbertEncoder::builder(&model)
        .options(options)
        .build()
        .expect("the model loads");
    let load_seconds = start.elapsed().as_secs_f64();
    let started = Instant::now();
    let tokens: usize = texts
        .iter()
        .map(|t| colbert.token_ids(t, role).expect("tokenizes").0.len())
        .sum();
    let tokenize_seconds = started.elapsed().as_secs_f64();

    for _ in 0..count("RERANK_BENCH_WARMUP", 1) {
        std::hint::black_box(colbert.encode(&texts, role).expect("encodes"));
    }
    let mut seconds = Vec::new();
    let mut last = None;
    for _ in 0..count("RERANK_BENCH_REPEATS", 3).max(1) {
        let t = Instant::now();
        let out = std::hint::black_box(colbert.encode(&texts, role).expect("encodes"));
        seconds.push(t.elapsed().as_secs_f64());
        last = Some(out);
    }
    let last = last.expect("one timed run");
    let vectors: usize = last.iter().map(|m| m.nrows()).sum();
    let first: Vec<Vec<Vec<f32>>> = last
        .iter()
        .take(4)
        .map(|m| m.rows().into_iter().map(|r| r.to_vec()).collect())
        .collect();
    let mut line = serde_json::json!({
        "impl": "rerank",
        "model": model,
        "role": role.as_str(),
        "threads": threads,
        "precision": colbert.precision().as_str(),
        "texts": texts.len(),
        "tokens": tokens,
        "vectors": vectors,
        "load_seconds": load_seconds,
        "tokenize_seconds": tokenize_seconds,
        "seconds": seconds,
        "first": first,
    });

    if let (Some(query), Role::Document) = (env("RERANK_BENCH_MAXSIM_QUERY"), role) {
        let q = colbert
            .encode(&[query.as_str()], Role::Query)
            .expect("encodes the query")
            .remove(0);
        // One thread, as `maxsim` is called; and over the documents on `threads` threads.
        let serial = || -> Vec<f32> { last.iter().map(|d| maxsim(q.view(), d.view())).collect() };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool");
        let parallel = || -> Vec<f32> {
            use rayon::prelude::*;
            pool.install(|| {
                last.par_iter()
                    .map(|d| maxsim(q.view(), d.view()))
                    .collect()
            })
        };
        let rounds = count("RERANK_BENCH_MAXSIM_REPEATS", 50).max(1);
        let time = |score: &dyn Fn() -> Vec<f32>| -> (Vec<f64>, Vec<f32>) {
            let mut scores = std::hint::black_box(score());
            let mut seconds = Vec::new();
            for _ in 0..rounds {
                let t = Instant::now();
                scores = std::hint::black_box(score());
                seconds.push(t.elapsed().as_secs_f64());
            }
            (seconds, scores)
        };
        let (maxsim_seconds, scores) = time(&serial);
        let (parallel_seconds, parallel_scores) = time(&parallel);
        assert_eq!(scores, parallel_scores, "the same scores on any thread");
        line["maxsim_seconds"] = serde_json::json!(maxsim_seconds);
        line["maxsim_parallel_seconds"] = serde_json::json!(parallel_seconds);
        line["maxsim_scores"] = serde_json::json!(scores);
    }
    println!("{line}");
}

#[cfg(not(feature = "models"))]
fn main() {
    eprintln!("the colbert bench needs the `models` feature");
}
