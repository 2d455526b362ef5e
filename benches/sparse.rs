//! Learned sparse encoding throughput and search latency, in one JSON line each.
//!
//! Encoding (what `scripts/bench_splade_vs_st.py` runs next to sentence-transformers'
//! `SparseEncoder` on the same texts):
//! ```text
//! RERANK_BENCH_SPARSE_MODEL=DIR RERANK_BENCH_TEXTS=texts.txt RERANK_BENCH_ROLE=document \
//!     cargo bench --features full --bench sparse
//! ```
//! The texts, one per line, are encoded as `RERANK_BENCH_ROLE` (`query` or `document`, default
//! document) in one `encode` call per run, on `RERANK_BENCH_THREADS` threads (default 2),
//! after `RERANK_BENCH_WARMUP` untimed runs (default 1), `RERANK_BENCH_REPEATS` timed ones
//! (default 3). The line has the load time, the seconds of each run, the token count, the
//! mean non-zero count, and the vectors of the first four texts (for the parity check).
//!
//! Latency (with `RERANK_BENCH_DOCS` set, e.g. 100000 or 1000000): a `SparseIndex` over that
//! many synthetic document vectors of the model's vocabulary, `RERANK_BENCH_DOC_NNZ` non-zero
//! ids each on average (default 200, what SPLADE models give MS MARCO passages) and queries of
//! `RERANK_BENCH_QUERY_NNZ` (default 40). Ids are drawn from a Zipf distribution (exponent 1)
//! over a seeded permutation of the vocabulary, as words are, so that a few ids have long
//! postings; weights are log-normal, independent of the id (`RERANK_BENCH_WEIGHTS=flat`, the
//! default: nothing for pruning to use) or scaled by the id's rarity (`idf`: frequent ids weigh
//! less, as a trained model's FLOPS regularizer makes them). `RERANK_BENCH_QUERIES` timed
//! searches (default 200, top 10, one thread each: a search is serial), each run pruned
//! (`search_vector`) and exhaustive (`search_vector_exhaustive`). The line has the build time,
//! the resident memory the index added per document, the median and 95th percentile
//! milliseconds of both searches (the vector search alone: the query encoding is the encoding
//! figure above), and how many queries' top 10 (ids and score bits) the two agree on.

mod common;

#[cfg(feature = "models")]
fn main() {
    use std::sync::Arc;
    use std::time::Instant;

    use rerank::embed::SparseEncoder;
    use rerank::models::ModelOptions;

    use common::{count, setting as env};
    let Some(model) = env("RERANK_BENCH_SPARSE_MODEL") else {
        eprintln!("set RERANK_BENCH_SPARSE_MODEL (and RERANK_BENCH_TEXTS or RERANK_BENCH_DOCS)");
        return;
    };
    let threads = count("RERANK_BENCH_THREADS", 2);
    eprintln!("kernels: {}", rerank::simd_isa());
    let start = Instant::now();
    let encoder = Arc::new(
        SparseEncoder::builder(&model)
            .options(ModelOptions::default().threads(threads))
            .build()
            .expect("the model loads"),
    );
    let load_seconds = start.elapsed().as_secs_f64();

    if let Some(docs) = env("RERANK_BENCH_DOCS").and_then(|v| v.parse().ok()) {
        latency::run(encoder, docs);
        return;
    }

    let text = common::bench_texts();
    let texts: Vec<&str> = text.lines().collect();
    let role = common::bench_role();
    let tokens: usize = texts
        .iter()
        .map(|t| encoder.token_ids(t, role).expect("tokenizes").len())
        .sum();
    for _ in 0..count("RERANK_BENCH_WARMUP", 1) {
        std::hint::black_box(encoder.encode(&texts, role).expect("encodes"));
    }
    let mut seconds = Vec::new();
    let mut last = Vec::new();
    for _ in 0..count("RERANK_BENCH_REPEATS", 3).max(1) {
        let t = Instant::now();
        last = std::hint::black_box(encoder.encode(&texts, role).expect("encodes"));
        seconds.push(t.elapsed().as_secs_f64());
    }
    let nonzero = last.iter().map(|v| v.len()).sum::<usize>() as f64 / last.len().max(1) as f64;
    let first: Vec<serde_json::Value> = last
        .iter()
        .take(4)
        .map(|v| serde_json::json!({"indices": v.indices, "values": v.values}))
        .collect();
    let line = serde_json::json!({
        "impl": "rerank",
        "model": model,
        "role": role.as_str(),
        "threads": threads,
        "texts": texts.len(),
        "tokens": tokens,
        "mean_nonzero": nonzero,
        "load_seconds": load_seconds,
        "seconds": seconds,
        "first": first,
    });
    println!("{line}");
}

#[cfg(feature = "models")]
mod latency {
    use std::sync::Arc;
    use std::time::Instant;

    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    use rerank::embed::{SparseEncoder, SparseVector};
    use rerank::recall::SparseIndex;
    use rerank::Document;

    /// Samples vocabulary ids with Zipf frequencies (exponent 1) over a shuffled vocabulary.
    struct Zipf {
        cumulative: Vec<f64>,
        ids: Vec<u32>,
    }

    impl Zipf {
        fn new(vocab: usize, rng: &mut impl Rng) -> Self {
            let mut ids: Vec<u32> = (0..vocab as u32).collect();
            ids.shuffle(rng);
            let mut total = 0.0;
            let cumulative = (1..=vocab)
                .map(|rank| {
                    total += 1.0 / rank as f64;
                    total
                })
                .collect();
            Zipf { cumulative, ids }
        }

        /// A vector of about `nnz` distinct ids (drawn until that many, or 4 x nnz draws),
        /// with log-normal weights (mean log 0, sd 0.5: SPLADE's are positive and few large),
        /// times `ln(1 + rank) / ln(1 + vocabulary) x 3` when `idf` (the frequent ids weigh
        /// less, as a trained model's regularizer makes them).
        fn vector(&self, nnz: usize, idf: bool, rng: &mut impl Rng) -> SparseVector {
            let total = *self.cumulative.last().expect("a vocabulary");
            let mut ranks = Vec::with_capacity(nnz);
            for _ in 0..nnz * 4 {
                let x = rng.random::<f64>() * total;
                ranks.push(
                    self.cumulative
                        .partition_point(|&c| c < x)
                        .min(self.ids.len() - 1),
                );
                if ranks.len() >= nnz {
                    ranks.sort_unstable();
                    ranks.dedup();
                    if ranks.len() >= nnz {
                        break;
                    }
                }
            }
            ranks.sort_unstable();
            ranks.dedup();
            ranks.truncate(nnz);
            let vocab = self.ids.len() as f64;
            let mut pairs: Vec<(u32, f32)> = ranks
                .iter()
                .map(|&rank| {
                    let (u, v): (f64, f64) = (rng.random(), rng.random());
                    let normal = (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos();
                    let scale = if idf {
                        3.0 * (2.0 + rank as f64).ln() / (1.0 + vocab).ln()
                    } else {
                        1.0
                    };
                    (self.ids[rank], ((0.5 * normal).exp() * scale) as f32)
                })
                .collect();
            pairs.sort_unstable_by_key(|p| p.0);
            SparseVector {
                indices: pairs.iter().map(|p| p.0).collect(),
                values: pairs.iter().map(|p| p.1).collect(),
            }
        }
    }

    /// Resident memory of this process in bytes (Linux), 0 elsewhere.
    fn resident() -> u64 {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |pages| pages * 4096)
    }

    pub fn run(encoder: Arc<SparseEncoder>, docs: usize) {
        use super::common::count;
        let idf = match std::env::var("RERANK_BENCH_WEIGHTS").as_deref() {
            Err(_) | Ok("flat") => false,
            Ok("idf") => true,
            Ok(other) => panic!("RERANK_BENCH_WEIGHTS={other}: flat or idf"),
        };
        let (doc_nnz, query_nnz) = (
            count("RERANK_BENCH_DOC_NNZ", 200),
            count("RERANK_BENCH_QUERY_NNZ", 40),
        );
        let vocab = encoder.vocab_size();
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let zipf = Zipf::new(vocab, &mut rng);
        let before = resident();
        let index = SparseIndex::new(encoder);
        let start = Instant::now();
        let mut nonzero = 0usize;
        const BATCH: usize = 10_000;
        for first in (0..docs).step_by(BATCH) {
            let n = BATCH.min(docs - first);
            let batch: Vec<(Document, SparseVector)> = (first..first + n)
                .map(|i| {
                    let v = zipf.vector(doc_nnz, idf, &mut rng);
                    nonzero += v.len();
                    (Document::new(i.to_string(), ""), v)
                })
                .collect();
            index.add_vectors(batch).expect("adds");
        }
        let build_seconds = start.elapsed().as_secs_f64();
        let bytes_per_document = resident().saturating_sub(before) as f64 / docs.max(1) as f64;
        let queries: Vec<SparseVector> = (0..count("RERANK_BENCH_QUERIES", 200))
            .map(|_| zipf.vector(query_nnz, idf, &mut rng))
            .collect();
        let exact = |hits: &[rerank::Hit]| -> Vec<(String, u32)> {
            hits.iter()
                .map(|h| (h.id().to_string(), h.score.to_bits()))
                .collect()
        };
        std::hint::black_box(
            index
                .search_vector_exhaustive(&queries[0], 10)
                .expect("searches"),
        );
        let mut pruned = Vec::new();
        let mut exhaustive = Vec::new();
        let mut equal = 0;
        for q in &queries {
            let t = Instant::now();
            let a = std::hint::black_box(index.search_vector(q, 10).expect("searches"));
            pruned.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let b = std::hint::black_box(index.search_vector_exhaustive(q, 10).expect("searches"));
            exhaustive.push(t.elapsed().as_secs_f64() * 1e3);
            equal += (exact(&a) == exact(&b)) as usize;
        }
        let at = |ms: &mut Vec<f64>, p: f64| {
            ms.sort_by(f64::total_cmp);
            ms[((ms.len() - 1) as f64 * p).round() as usize]
        };
        let line = serde_json::json!({
            "impl": "rerank",
            "bench": "sparse_latency",
            "documents": docs,
            "vocab": vocab,
            "mean_doc_nonzero": nonzero as f64 / docs.max(1) as f64,
            "query_nonzero": query_nnz,
            "weights": if idf { "idf" } else { "flat" },
            "build_seconds": build_seconds,
            "resident_bytes_per_document": bytes_per_document,
            "search_ms_p50": at(&mut pruned, 0.5),
            "search_ms_p95": at(&mut pruned, 0.95),
            "exhaustive_ms_p50": at(&mut exhaustive, 0.5),
            "exhaustive_ms_p95": at(&mut exhaustive, 0.95),
            "exhaustive_equal": equal,
            "queries": queries.len(),
        });
        println!("{line}");
    }
}

#[cfg(not(feature = "models"))]
fn main() {
    eprintln!("the sparse bench needs the `models` feature");
}
