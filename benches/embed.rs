//! Embedding throughput: all-MiniLM-L6-v2 on a fixed subset of the SciFact corpus.
//!
//! Inputs: the first 256 corpus documents as `title + " " + text` (SciFact abstracts, most
//! truncated at 256 tokens); `scripts/bench_embed_vs_st.py` feeds sentence-transformers the
//! same texts. Threads: `RERANK_BENCH_THREADS` (default: 2). Throughput is reported in
//! documents per second.
//!
//! ```text
//! scripts/fetch_minilm.sh
//! cargo bench --bench embed
//! ```

#[cfg(feature = "models")]
use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion};
#[cfg(feature = "models")]
use criterion::{SamplingMode, Throughput};

#[cfg(feature = "models")]
use rerank::{embed::BertEmbedder, Embedder};

#[cfg(feature = "models")]
const SCIFACT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets/scifact");

/// Documents per iteration.
#[cfg(feature = "models")]
const DOCS: usize = 256;

/// The model directory: `$RERANK_MODELS_DIR/all-MiniLM-L6-v2`, default `./models/...`.
#[cfg(feature = "models")]
fn model_dir() -> PathBuf {
    std::env::var_os("RERANK_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models")))
        .join("all-MiniLM-L6-v2")
}

/// The first `DOCS` SciFact documents, or `None` when the data is not there.
#[cfg(feature = "models")]
fn documents() -> Option<Vec<String>> {
    let corpus = std::fs::read_to_string(Path::new(SCIFACT).join("corpus.jsonl")).ok()?;
    let docs: Vec<String> = corpus
        .lines()
        .take(DOCS)
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            let title = v["title"].as_str().unwrap_or("");
            let text = v["text"].as_str().unwrap_or("");
            Some(format!("{title} {text}"))
        })
        .collect();
    (docs.len() == DOCS).then_some(docs)
}

#[cfg(feature = "models")]
fn threads() -> usize {
    std::env::var("RERANK_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(2)
}

#[cfg(feature = "models")]
fn bench(c: &mut Criterion) {
    let model = model_dir();
    if !model.join("model.safetensors").is_file() {
        eprintln!(
            "skipping: {} not found (run scripts/fetch_minilm.sh)",
            model.display()
        );
        return;
    }
    let Some(docs) = documents() else {
        eprintln!("skipping: SciFact not found under {SCIFACT}");
        return;
    };
    let threads = threads();
    let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let mut group = c.benchmark_group("embed");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(DOCS as u64));
    // (name, token budget, max batch size): the defaults, and sentence-transformers' batches
    // of 32 at full length.
    let configs: [(&str, usize, usize); 2] = [
        (
            "default",
            rerank::embed::DEFAULT_TOKEN_BUDGET,
            rerank::embed::DEFAULT_MAX_BATCH_SIZE,
        ),
        ("batch32", 32 * 256, 32),
    ];
    for (name, tokens, size) in configs {
        let embedder = BertEmbedder::builder(&model)
            .threads(threads)
            .token_budget(tokens)
            .max_batch_size(size)
            .build()
            .unwrap_or_else(|e| panic!("loading {}: {e}", model.display()));
        group.bench_function(format!("scifact_{DOCS}docs_{name}_t{threads}"), |b| {
            b.iter(|| embedder.embed(&docs).unwrap())
        });
    }
    group.finish();
}

#[cfg(not(feature = "models"))]
fn bench(_c: &mut Criterion) {
    eprintln!("skipping: the embedding bench needs the `models` feature");
}

criterion_group!(benches, bench);
criterion_main!(benches);
