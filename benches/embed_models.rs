//! Embedding throughput of any model directory `load_embedder` reads, in one JSON line: what
//! `scripts/bench_embed_models.py` runs next to sentence-transformers on the same texts.
//!
//! ```text
//! RERANK_BENCH_EMBED_MODEL=DIR RERANK_BENCH_TEXTS=texts.txt cargo bench --bench embed_models
//! ```
//! Inputs: the model directory (`RERANK_BENCH_EMBED_MODEL`), the texts, one per line
//! (`RERANK_BENCH_TEXTS`), embedded as documents in one `embed` call per run;
//! `RERANK_BENCH_THREADS` threads (default 2), `RERANK_BENCH_WARMUP` untimed runs (default
//! 1), `RERANK_BENCH_REPEATS` timed ones (default 3), `RERANK_BENCH_PRECISION` (`f32`,
//! `bf16`, `int8`; default f32), `RERANK_BENCH_ROLE` (`document`, the default, or `query`: the
//! texts embedded as queries). The line has the load time, the seconds of each timed run,
//! the token count, and the embeddings of the first four texts (for the parity check).

#[cfg(feature = "models")]
fn main() {
    use std::time::Instant;

    use rerank::models::{ModelOptions, Precision};

    let env = |k: &str| std::env::var(k).ok();
    let count = |k: &str, default: usize| env(k).and_then(|v| v.parse().ok()).unwrap_or(default);
    let Some(model) = env("RERANK_BENCH_EMBED_MODEL") else {
        eprintln!("set RERANK_BENCH_EMBED_MODEL (and RERANK_BENCH_TEXTS); nothing to run");
        return;
    };
    let texts_file =
        env("RERANK_BENCH_TEXTS").expect("RERANK_BENCH_TEXTS: a file, one text per line");
    let text = std::fs::read_to_string(&texts_file).expect("RERANK_BENCH_TEXTS is readable");
    let texts: Vec<&str> = text.lines().collect();
    let threads = count("RERANK_BENCH_THREADS", 2);
    let precision = match env("RERANK_BENCH_PRECISION").as_deref() {
        None | Some("f32") => Precision::F32,
        Some("bf16") => Precision::Bf16,
        Some("int8") => Precision::Int8,
        Some(other) => panic!("RERANK_BENCH_PRECISION={other}: f32, bf16 or int8"),
    };
    let role = match env("RERANK_BENCH_ROLE").as_deref() {
        None | Some("document") => rerank::Role::Document,
        Some("query") => rerank::Role::Query,
        Some(other) => panic!("RERANK_BENCH_ROLE={other}: document or query"),
    };
    let options = ModelOptions::default()
        .threads(threads)
        .precision(precision);
    let start = Instant::now();
    let embedder = rerank::load_embedder(&model, &options).expect("the model loads");
    let load_seconds = start.elapsed().as_secs_f64();
    for _ in 0..count("RERANK_BENCH_WARMUP", 1) {
        std::hint::black_box(embedder.embed_as(&texts, role).expect("embeds"));
    }
    let mut seconds = Vec::new();
    let mut last = None;
    for _ in 0..count("RERANK_BENCH_REPEATS", 3).max(1) {
        let t = Instant::now();
        let out = std::hint::black_box(embedder.embed_as(&texts, role).expect("embeds"));
        seconds.push(t.elapsed().as_secs_f64());
        last = Some(out);
    }
    let last = last.expect("one timed run");
    let first: Vec<Vec<f32>> = last
        .rows()
        .into_iter()
        .take(4)
        .map(|r| r.to_vec())
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "impl": "rerank",
            "model": model,
            "threads": threads,
            "precision": precision.as_str(),
            "role": role.as_str(),
            "texts": texts.len(),
            "load_seconds": load_seconds,
            "seconds": seconds,
            "first": first,
        })
    );
}

#[cfg(not(feature = "models"))]
fn main() {
    eprintln!("the embed_models bench needs the `models` feature");
}
