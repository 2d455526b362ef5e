//! BM25 and fusion benchmarks.
//!
//! - `bm25_index/scifact`: building an index of SciFact's 5,183 documents (throughput in docs/s);
//! - `bm25_query/top10`, `bm25_query/top100`: one query's latency, cycling through SciFact's 300
//!   test queries;
//! - `fusion/rrf`, `fusion/weighted`: fusing two 1,000-hit lists that share half their documents.
//!
//! SciFact is read from `../shared/datasets/scifact`; without it the BM25 benches are skipped.
//!
//! ```text
//! cargo bench --bench bm25
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rerank::eval::BeirDataset;
use rerank::recall::{rrf_fuse, weighted_fuse};
use rerank::{Bm25Index, Document, Hit};

fn scifact() -> Option<BeirDataset> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets/scifact");
    match BeirDataset::load(dir) {
        Ok(data) => Some(data),
        Err(e) => {
            eprintln!("skipping the SciFact benches: {e}");
            None
        }
    }
}

fn bm25(c: &mut Criterion) {
    let Some(data) = scifact() else {
        return;
    };

    let mut group = c.benchmark_group("bm25_index");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(data.corpus.len() as u64));
    group.bench_function("scifact", |b| {
        b.iter_batched(
            || data.corpus.clone(),
            |docs| {
                let index = Bm25Index::new();
                index.add(docs).unwrap();
                index
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();

    let index = Bm25Index::new();
    index.add(data.corpus.clone()).unwrap();
    let queries: Vec<&str> = data
        .judged_queries()
        .iter()
        .map(|q| q.text.as_str())
        .collect();
    let mut group = c.benchmark_group("bm25_query");
    group.sample_size(50);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(1));
    for k in [10, 100] {
        group.bench_function(format!("top{k}"), |b| {
            let mut next = 0usize;
            b.iter(|| {
                let query = queries[next % queries.len()];
                next += 1;
                black_box(index.search(black_box(query), k))
            })
        });
    }
    group.finish();
}

/// `n` hits with descending scores, ids `d{offset}..d{offset + n}`.
fn hits(offset: usize, n: usize, top: f32) -> Vec<Hit> {
    (0..n)
        .map(|i| {
            let doc = Arc::new(Document::new(format!("d{}", offset + i), "text"));
            Hit::new(doc, top - i as f32 * top / n as f32)
        })
        .collect()
}

fn fusion(c: &mut Criterion) {
    // the second list starts halfway through the first: 500 shared documents
    let lists = vec![hits(0, 1000, 25.0), hits(500, 1000, 0.9)];
    let mut group = c.benchmark_group("fusion");
    group.sample_size(50);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("rrf", |b| {
        b.iter(|| black_box(rrf_fuse(black_box(&lists), &[1.0, 1.0], 60.0)))
    });
    group.bench_function("weighted", |b| {
        b.iter(|| black_box(weighted_fuse(black_box(&lists), &[0.3, 0.7])))
    });
    group.finish();
}

criterion_group!(benches, bm25, fusion);
criterion_main!(benches);
