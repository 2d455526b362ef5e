//! Query latency and memory of stage-1 late interaction (`LateInteractionIndex`: every
//! document's ColBERT token vectors as f16, an exact MaxSim scan) at a given collection size,
//! on synthetic token vectors of the model's width, in one JSON line.
//!
//! ```text
//! RERANK_BENCH_COLBERT_MODEL=DIR RERANK_BENCH_DOCS=100000 cargo bench --bench late_interaction
//! ```
//! Inputs: the ColBERT model (`RERANK_BENCH_COLBERT_MODEL`: its width, and the query encoder),
//! `RERANK_BENCH_DOCS` documents (default 100,000) of `RERANK_BENCH_TOKENS` tokens on average
//! (default 128; each document between half and 1.5 times that), random unit vectors (seeded);
//! `RERANK_BENCH_THREADS` threads (default 2), `RERANK_BENCH_QUERIES` timed searches (default
//! 10, top 100). The line has the bytes of vectors per document and in all, the seconds of
//! each search (query encoding included) and of encoding a query alone.

#[cfg(feature = "models")]
fn main() {
    use std::time::Instant;

    use ndarray::Array2;
    use rand::{Rng, SeedableRng};
    use rerank::embed::ColbertEncoder;
    use rerank::models::ModelOptions;
    use rerank::recall::{LateInteractionIndex, Retriever, SearchQuery};
    use rerank::{Document, Role};

    let env = |k: &str| std::env::var(k).ok();
    let count = |k: &str, default: usize| env(k).and_then(|v| v.parse().ok()).unwrap_or(default);
    let Some(model) = env("RERANK_BENCH_COLBERT_MODEL") else {
        eprintln!("set RERANK_BENCH_COLBERT_MODEL; nothing to run");
        return;
    };
    let (docs, tokens) = (
        count("RERANK_BENCH_DOCS", 100_000),
        count("RERANK_BENCH_TOKENS", 128),
    );
    let threads = count("RERANK_BENCH_THREADS", 2);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .expect("the global pool is set once");
    let options = ModelOptions::default().threads(threads);
    let encoder = ColbertEncoder::builder(&model)
        .options(options)
        .build()
        .expect("the model loads");
    let dim = encoder.dim();
    let index = LateInteractionIndex::new(encoder);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let start = Instant::now();
    const BATCH: usize = 10_000;
    for first in (0..docs).step_by(BATCH) {
        let n = BATCH.min(docs - first);
        let mut batch = Vec::with_capacity(n);
        let mut vectors = Vec::with_capacity(n);
        for i in first..first + n {
            let t = rng.random_range(tokens / 2..=tokens * 3 / 2).max(1);
            let mut m = Array2::from_shape_fn((t, dim), |_| rng.random::<f32>() - 0.5);
            for mut row in m.rows_mut() {
                let norm = row.dot(&row).sqrt();
                row.mapv_inplace(|x| x / norm);
            }
            batch.push(Document::new(format!("d{i}"), ""));
            vectors.push(m);
        }
        index.add_encoded(batch, vectors).expect("adds");
    }
    let build_seconds = start.elapsed().as_secs_f64();
    let queries = [
        "what causes antibiotic resistance in bacteria",
        "vitamin d deficiency and bone density",
        "does smoking increase the risk of lung cancer",
        "gene expression in t cells",
        "effects of exercise on blood pressure",
    ];
    let mut search = Vec::new();
    let mut encode = Vec::new();
    for i in 0..count("RERANK_BENCH_QUERIES", 10) {
        let q = queries[i % queries.len()];
        let t = Instant::now();
        let hits = index.retrieve(&SearchQuery::new(q), 100).expect("searches");
        search.push(t.elapsed().as_secs_f64());
        assert_eq!(hits.len(), 100.min(docs));
        let t = Instant::now();
        std::hint::black_box(index.encoder().encode(&[q], Role::Query).expect("encodes"));
        encode.push(t.elapsed().as_secs_f64());
    }
    let per_doc = index.bytes_per_document();
    println!(
        "{}",
        serde_json::json!({
            "impl": "rerank",
            "docs": docs,
            "mean_tokens": tokens,
            "dim": dim,
            "threads": threads,
            "bytes_per_document": per_doc,
            "vector_gib": per_doc * docs as f64 / (1u64 << 30) as f64,
            "build_seconds": build_seconds,
            "search_seconds": search,
            "query_encode_seconds": encode,
        })
    );
}

#[cfg(not(feature = "models"))]
fn main() {
    eprintln!("the late_interaction bench needs the `models` feature");
}
