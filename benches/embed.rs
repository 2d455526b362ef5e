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
mod common;

#[cfg(feature = "models")]
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};
#[cfg(feature = "models")]
use criterion::{SamplingMode, Throughput};

#[cfg(feature = "models")]
use rerank::models::ModelOptions;
#[cfg(feature = "models")]
use rerank::{embed::BertEmbedder, Embedder};

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
    let Some(docs) = common::scifact_documents(DOCS) else {
        eprintln!("skipping: SciFact not found under {}", common::SCIFACT);
        return;
    };
    let threads = common::threads();
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
            .options(
                ModelOptions::default()
                    .threads(threads)
                    .token_budget(tokens)
                    .max_batch_size(size),
            )
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
