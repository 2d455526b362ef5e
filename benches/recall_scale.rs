//! Recall at scale: our side of `scripts/bench_recall_scale.py` (run it through the script,
//! which also runs bm25s and tantivy on the same collection and prints the ratios).
//!
//! ```text
//! cargo bench --bench recall_scale -- bm25 DATA_DIR THREADS OUT_JSON [english|whitespace]
//! cargo bench --bench recall_scale -- dense ROWS DIM QUERIES OUT_JSON
//! ```
//!
//! `bm25`: loads a BEIR-layout collection (e.g. from `scripts/make_zipf_corpus.py`), indexes
//! it with the default [`EnglishAnalyzer`](rerank::text::EnglishAnalyzer) (`english`, the
//! default: what `rerank beir` uses) or whitespace tokens, k1 1.2 / b 0.75 (tantivy's fixed
//! values), on THREADS threads; `build_seconds` is reading and parsing the collection
//! (`load_seconds`) plus indexing (`index_seconds`), as the tantivy peer's build reads and
//! parses the JSON lines. Then it answers every query for its top 10: latencies on one thread
//! (each query's best of `RERANK_SCALE_REPEAT` passes, default 3), queries/s on THREADS threads
//! that each take the next query not yet taken (the median of `RERANK_SCALE_REPEAT` passes),
//! and whether every top 10 (ids and score bits) equals exhaustive scoring. Writes build
//! seconds, latencies, queries/s, peak resident memory (VmHWM), the compressed postings' size
//! and every top 10.
//!
//! `dense`: ROWS random unit vectors of DIM dimensions (seeded); exact top 10 for QUERIES
//! random queries with [`DenseIndex`], against the previous implementation (ndarray
//! matrix-vector products per chunk of 1,024 rows, every score collected, then selected),
//! kept here as the baseline; the two top 10s must agree. Then the same index is switched to
//! each compact storage (`VectorStorage::f16()`, `VectorStorage::int8()`: the scan reads f16 or
//! int8 copies, the best `10 x rescore` are rescored in f32) and the queries are run again:
//! p50, the time to build the compact copy, the vectors' memory, recall@10 against the exact
//! f32 top 10 and how many top 10s are identical (ids and score bits), under `storages`.

use std::sync::Arc;
use std::time::Instant;

use ndarray::{Array2, ArrayView1, Axis};
use rayon::prelude::*;
use rerank::eval::BeirDataset;
use rerank::recall::{Bm25Params, SearchQuery, VectorStorage};
use rerank::text::Analyzer;
use rerank::{Bm25Index, DenseIndex, Document, Embedder, Retriever};

/// Tokens are what is between spaces (the synthetic corpus needs no analysis).
struct Whitespace;

impl Analyzer for Whitespace {
    fn analyze(&self, text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }
    fn for_each_term(&self, text: &str, f: &mut dyn FnMut(&str)) {
        text.split_whitespace().for_each(f);
    }
}

/// Queries per second over `n` queries on `threads` threads, each taking the next query
/// not yet taken (so a few slow queries do not leave a thread idle), one figure per pass
/// (`RERANK_SCALE_REPEAT`).
fn throughput(n: usize, threads: usize, search: impl Fn(usize) + Sync) -> Vec<f64> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    (0..repeat())
        .map(|_| {
            let next = AtomicUsize::new(0);
            let t = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads.max(1) {
                    s.spawn(|| loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        search(i);
                    });
                }
            });
            n as f64 / t.elapsed().as_secs_f64()
        })
        .collect()
}

/// Timed passes over the queries (`RERANK_SCALE_REPEAT`, default 3); latencies are the best
/// pass of each query.
fn repeat() -> usize {
    std::env::var("RERANK_SCALE_REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
        .max(1)
}

fn vm_hwm_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn bm25(dir: &str, threads: usize, out: &str, analysis: &str) {
    let t = Instant::now();
    let data = BeirDataset::load(dir).expect("load the collection");
    let load_seconds = t.elapsed().as_secs_f64();
    let queries: Vec<String> = data.queries.iter().map(|q| q.text.clone()).collect();
    let docs = data.corpus.len();
    let corpus = data.corpus;

    let t = Instant::now();
    let index = Bm25Index::with_params(Bm25Params { k1: 1.2, b: 0.75 }).expect("params");
    let index = match analysis {
        "whitespace" => index.analyzer(Whitespace),
        _ => index,
    };
    index.add(corpus).expect("add");
    index.shrink_to_fit();
    let index_seconds = t.elapsed().as_secs_f64();
    let build_seconds = load_seconds + index_seconds;

    for q in queries.iter().take(50) {
        std::hint::black_box(index.search(q, 10));
    }
    // each query's latency is the best of `repeat` passes (a shared machine preempts)
    let mut latency_ms = vec![f64::INFINITY; queries.len()];
    let mut tops = Vec::with_capacity(queries.len());
    for pass in 0..repeat() {
        for (i, q) in queries.iter().enumerate() {
            let t = Instant::now();
            let hits = index.search(q, 10);
            latency_ms[i] = latency_ms[i].min(t.elapsed().as_secs_f64() * 1e3);
            if pass == 0 {
                tops.push(hits);
            }
        }
    }
    let qps_passes = throughput(queries.len(), threads, |i| {
        std::hint::black_box(index.search(&queries[i], 10));
    });
    let qps = median(qps_passes.clone());
    let t = Instant::now();
    let exhaustive: Vec<_> = queries
        .par_iter()
        .map(|q| index.search_exhaustive(q, 10))
        .collect();
    let exhaustive_seconds = t.elapsed().as_secs_f64();
    let same = |a: &[rerank::Hit], b: &[rerank::Hit]| {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.id() == y.id() && x.score.to_bits() == y.score.to_bits())
    };
    let equal = tops
        .iter()
        .zip(&exhaustive)
        .filter(|(a, b)| same(a, b))
        .count();
    let top10: Vec<Vec<(String, f32)>> = tops
        .iter()
        .map(|h| h.iter().map(|h| (h.id().to_string(), h.score)).collect())
        .collect();
    let report = serde_json::json!({
        "engine": "rerank",
        "docs": docs,
        "threads": threads,
        "analysis": analysis,
        "build_seconds": build_seconds,
        "load_seconds": load_seconds,
        "index_seconds": index_seconds,
        "latency_ms": latency_ms,
        "qps": qps,
        "qps_passes": qps_passes,
        "peak_rss_mb": vm_hwm_mb(),
        "postings_mb": index.postings_bytes() as f64 / (1024.0 * 1024.0),
        "exhaustive_equal": equal,
        "exhaustive_queries": queries.len(),
        "exhaustive_seconds": exhaustive_seconds,
        "top10": top10,
    });
    std::fs::write(out, report.to_string()).expect("write");
}

/// Hands back the vectors it was built with; queries come as embeddings.
struct Fixed(usize);

impl Embedder for Fixed {
    fn embed_as(&self, texts: &[&str], _role: rerank::Role) -> rerank::Result<Array2<f32>> {
        Ok(Array2::zeros((texts.len(), self.0)))
    }
    fn dim(&self) -> usize {
        self.0
    }
}

/// splitmix64 uniform floats in [-1, 1).
fn uniform(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// The previous `DenseIndex` top-k: ndarray products per chunk, all scores, then selection.
fn baseline_top_k(matrix: &Array2<f32>, query: &[f32], k: usize) -> Vec<(usize, f32)> {
    const CHUNK_ROWS: usize = 1024;
    let q = ArrayView1::from(query);
    let mut scored: Vec<(usize, f32)> = matrix
        .axis_chunks_iter(Axis(0), CHUNK_ROWS)
        .into_par_iter()
        .enumerate()
        .flat_map_iter(|(c, chunk)| {
            let scores = chunk.dot(&q);
            scores
                .into_iter()
                .enumerate()
                .map(move |(r, s)| (c * CHUNK_ROWS + r, s))
        })
        .collect();
    let by = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    scored.select_nth_unstable_by(k - 1, by);
    scored.truncate(k);
    scored.sort_by(by);
    scored
}

/// The SIMD features of this CPU that the dense kernels use.
fn cpu_flags() -> Vec<&'static str> {
    let mut flags = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {
                $(if std::arch::is_x86_feature_detected!($f) {
                    flags.push($f);
                })*
            };
        }
        probe!("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vnni");
    }
    flags
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn dense(rows: usize, dim: usize, queries: usize, out: &str) {
    let mut matrix = Array2::from_shape_vec((rows, dim), uniform(1, rows * dim)).expect("shape");
    for mut row in matrix.rows_mut() {
        let n = row.dot(&row).sqrt();
        row /= n;
    }
    let docs: Vec<Document> = (0..rows)
        .map(|i| Document::new(format!("d{i}"), ""))
        .collect();
    let t = Instant::now();
    let index =
        DenseIndex::from_embeddings(Arc::new(Fixed(dim)), docs, matrix.clone()).expect("index");
    let build_seconds = t.elapsed().as_secs_f64();
    let qs: Vec<Vec<f32>> = (0..queries)
        .map(|i| {
            let q = uniform(1000 + i as u64, dim);
            let n = q.iter().map(|x| x * x).sum::<f32>().sqrt();
            q.iter().map(|x| x / n).collect()
        })
        .collect();
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let mut agree = 0;
    let mut exact_tops: Vec<Vec<(String, u32)>> = Vec::new();
    for q in &qs {
        let t = Instant::now();
        let hits = index
            .retrieve(&SearchQuery::new("").with_embedding(q.clone()), 10)
            .expect("search");
        ours.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let old = baseline_top_k(&matrix, q, 10);
        base.push(t.elapsed().as_secs_f64() * 1e3);
        let same = hits.len() == old.len()
            && hits
                .iter()
                .zip(&old)
                .all(|(h, (r, s))| h.id() == format!("d{r}") && (h.score - s).abs() <= 1e-5);
        agree += usize::from(same);
        exact_tops.push(
            hits.iter()
                .map(|h| (h.id().to_string(), h.score.to_bits()))
                .collect(),
        );
    }
    let exact = exact_tops;
    let f32_p50 = median(ours.clone());
    let mut storages = serde_json::Map::new();
    storages.insert(
        "f32".into(),
        serde_json::json!({
            "p50_ms": f32_p50,
            "vector_mb": index.vector_bytes() as f64 / (1024.0 * 1024.0),
        }),
    );
    for storage in [VectorStorage::f16(), VectorStorage::int8()] {
        let t = Instant::now();
        index.set_storage(storage);
        let encode_seconds = t.elapsed().as_secs_f64();
        let (mut latency, mut found, mut identical) = (Vec::new(), 0usize, 0usize);
        for (q, want) in qs.iter().zip(&exact) {
            let t = Instant::now();
            let hits = index
                .retrieve(&SearchQuery::new("").with_embedding(q.clone()), 10)
                .expect("search");
            latency.push(t.elapsed().as_secs_f64() * 1e3);
            let got: Vec<(String, u32)> = hits
                .iter()
                .map(|h| (h.id().to_string(), h.score.to_bits()))
                .collect();
            found += got
                .iter()
                .filter(|g| want.iter().any(|w| w.0 == g.0))
                .count();
            identical += usize::from(&got == want);
        }
        let p50 = median(latency);
        storages.insert(
            storage.name().into(),
            serde_json::json!({
                "rescore": storage.candidates(1),
                "p50_ms": p50,
                "speedup_vs_f32": f32_p50 / p50,
                "encode_seconds": encode_seconds,
                "vector_mb": index.vector_bytes() as f64 / (1024.0 * 1024.0),
                "recall_at_10": found as f64 / (10 * qs.len()) as f64,
                "identical_top10": identical,
            }),
        );
    }
    let report = serde_json::json!({
        "rows": rows,
        "dim": dim,
        "queries": queries,
        "threads": rayon::current_num_threads(),
        "cpu_flags": cpu_flags(),
        "build_seconds": build_seconds,
        "p50_ms": f32_p50,
        "baseline_p50_ms": median(base.clone()),
        "speedup_p50": median(base) / f32_p50,
        "top10_agree": agree,
        "storages": storages,
        "peak_rss_mb": vm_hwm_mb(),
    });
    println!("{report}");
    std::fs::write(out, report.to_string()).expect("write");
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let usage = "usage: recall_scale bm25 DATA_DIR THREADS OUT_JSON [english|whitespace] | dense \
                 ROWS DIM QUERIES OUT_JSON";
    match args.first().map(String::as_str) {
        Some("bm25") if args.len() == 4 || args.len() == 5 => {
            let threads: usize = args[2].parse().expect("threads");
            let analysis = args.get(4).map_or("english", String::as_str);
            if !matches!(analysis, "english" | "whitespace") {
                eprintln!("{usage}");
                return;
            }
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build_global()
                .expect("thread pool");
            bm25(&args[1], threads, &args[3], analysis);
        }
        Some("dense") if args.len() == 5 => dense(
            args[1].parse().expect("rows"),
            args[2].parse().expect("dim"),
            args[3].parse().expect("queries"),
            &args[4],
        ),
        _ => eprintln!("{usage}"),
    }
}
