//! Cross-encoder throughput: rerank 100 SciFact documents for one query with a
//! MiniLM-L6-shaped cross-encoder (the real all-MiniLM-L6-v2 encoder with a seeded random
//! head, built by `scripts/make_ce_minilm.py` into `$RERANK_MODELS_DIR/ce-minilm-l6-random`,
//! default `./models/...`).
//!
//! Inputs: the first SciFact query judged in `qrels/test.tsv`, and the first 100 corpus
//! documents as `title + " " + text` (scripts/bench_vs_sentence_transformers.py feeds
//! sentence-transformers the same). Threads: `RERANK_BENCH_THREADS` (default: 2).
//!
//! ```text
//! python scripts/make_ce_minilm.py
//! cargo bench --bench cross_encoder
//! ```
//!
//! Then the cost of passage scoring: the same 100 documents at `max_length` 512 and 128,
//! truncated and by passages (the number of windows is printed).

mod common;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};

use rerank::models::{ModelOptions, Precision};
use rerank::rerankers::{Passages, RerankQuery};
use rerank::{CrossEncoder, Reranker};

const DOCS: usize = 100;

/// The query and documents, or `None` when the data is not there.
fn inputs() -> Option<(String, Vec<String>)> {
    Some((
        common::scifact_first_judged_query()?,
        common::scifact_documents(DOCS)?,
    ))
}

fn bench(c: &mut Criterion) {
    let model = common::model_dir("ce-minilm-l6-random");
    if !model.join("model.safetensors").is_file() {
        eprintln!(
            "skipping: {} not found (run scripts/fetch_minilm.sh, then scripts/make_ce_minilm.py)",
            model.display()
        );
        return;
    }
    let Some((query, docs)) = inputs() else {
        eprintln!("skipping: SciFact not found under {}", common::SCIFACT);
        return;
    };
    let threads = common::threads();
    let query = RerankQuery::new(query);
    let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let mut group = c.benchmark_group("cross_encoder");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(DOCS as u64));
    // `default` is f32 (the name the side-by-side script reads); `int8` is Precision::Int8.
    for (name, precision) in [("default", Precision::F32), ("int8", Precision::Int8)] {
        let ce = CrossEncoder::builder(&model)
            .options(
                ModelOptions::default()
                    .threads(threads)
                    .precision(precision),
            )
            .build()
            .unwrap_or_else(|e| panic!("loading {}: {e}", model.display()));
        group.bench_function(format!("scifact_100docs_{name}_t{threads}"), |b| {
            b.iter(|| ce.score(&query, &docs).unwrap())
        });
    }
    // The cost of passage scoring (`ModelOptions::passages`, f32): at the model's 512 tokens
    // (the few longer documents get more windows) and at 128 (most do), each beside the same
    // length truncating instead.
    for max_length in [512, 128] {
        for passages in [false, true] {
            let mut options = ModelOptions::default()
                .threads(threads)
                .max_length(max_length);
            if passages {
                options = options.passages(Passages::default());
            }
            let ce = CrossEncoder::builder(&model)
                .options(options)
                .build()
                .unwrap();
            let out = ce.score_detailed(&query, &docs).unwrap();
            let windows = if passages {
                docs.iter()
                    .map(|d| ce.passage_windows(&query.text, d).unwrap().len())
                    .sum()
            } else {
                docs.len()
            };
            eprintln!(
                "max_length {max_length}, passages {passages}: {windows} inputs, {} cut",
                out.truncated
            );
            let name = if passages { "passages" } else { "truncated" };
            group.bench_function(
                format!("scifact_100docs_max{max_length}_{name}_t{threads}"),
                |b| b.iter(|| ce.score(&query, &docs).unwrap()),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
