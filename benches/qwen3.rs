//! Qwen3-Reranker throughput: 20 documents of ~300 tokens against one query, with a model of
//! the Qwen3-Reranker-0.6B shape (28 layers, hidden 1024, 16/8 heads, head_dim 128, ffn 3072).
//!
//! The model comes from `scripts/make_qwen3_bench_model.py` (random weights, ~2.4 GB, written to
//! `models/qwen3-0.6b-shape/`, or the directory in `RERANK_QWEN3_BENCH_MODEL`); the bench skips
//! when it is absent. Threads: `RERANK_BENCH_THREADS` (default: all cores); set
//! `RAYON_NUM_THREADS` to the same value so the matrix products split the work the same way.
//! `RERANK_BENCH_PRECISION=int8` or `bf16` loads the model with `Precision::Int8` or
//! `Precision::Bf16` (default f32).
//!
//! ```text
//! cargo bench --bench qwen3                       # criterion (10 samples)
//! RERANK_BENCH_JSON=1 cargo bench --bench qwen3   # a few timed runs, one JSON line
//! ```
//! JSON mode: `RERANK_BENCH_REPEATS` timed runs (default 3) after `RERANK_BENCH_WARMUP`
//! untimed ones (default 1); the line has the load time, the resident memory after loading
//! and at its peak (`/proc/self/status` `VmRSS`, `VmHWM`; absent off Linux), the prompt
//! lengths, the times and the logits.
//! `scripts/bench_qwen3_vs_transformers.py` runs the JSON mode next to transformers.
//!
//! `RERANK_BENCH_RERANKER=mxbai` benches mxbai-rerank-v2 (`MxbaiReranker`, a Qwen2 decoder)
//! instead, on the same documents, with a model of the mxbai-rerank-base-v2 shape (Qwen2-0.5B:
//! 24 layers, hidden 896, 14/2 heads, ffn 4864) from `scripts/make_qwen3_bench_model.py --shape
//! mxbai-rerank-base-v2` (`models/mxbai-base-v2-shape`, or `RERANK_QWEN3_BENCH_MODEL`);
//! `scripts/bench_mxbai_vs_transformers.py` runs it next to the `mxbai-rerank` package.

#[cfg(feature = "models")]
mod bench {
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use criterion::{Criterion, Throughput};
    use rerank::models::{ModelOptions, Precision};
    use rerank::rerankers::qwen3::Qwen3Reranker;
    use rerank::rerankers::{MxbaiReranker, RerankQuery};

    /// The same recipe as `scripts/bench_qwen3_vs_transformers.py`.
    const WORDS: &str = "the server process memory leak grows slowly over days until the kernel \
        kills it because allocations in a cache are never released and references keep objects \
        alive while background threads retain buffers connection pools hold sockets logs show \
        garbage collection pauses heap profiles reveal fragmentation after deployments restart \
        workers periodically";
    const QUERY: &str = "What causes memory leaks in long-running server processes?";
    const N_DOCS: usize = 20;
    const N_WORDS: usize = 300;

    /// Document `i`: 300 words (about 300 tokens) picked from `WORDS` by a fixed rule.
    fn document(i: usize) -> String {
        let words: Vec<&str> = WORDS.split_whitespace().collect();
        let n = words.len();
        let picked: Vec<&str> = (0..N_WORDS)
            .map(|j| words[(i * 7 + j * 13 + (j * j) % 5) % n])
            .collect();
        format!("{}.", picked.join(" "))
    }

    /// A `/proc/self/status` memory line (`VmRSS`, `VmHWM`) in MiB; `None` where there is none.
    fn status_mb(key: &str) -> Option<f64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with(key))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    }

    fn env_usize(name: &str) -> Option<usize> {
        std::env::var(name).ok().and_then(|v| v.parse().ok())
    }

    /// The reranker under test.
    enum Model {
        Qwen3(Qwen3Reranker),
        Mxbai(MxbaiReranker),
    }

    impl Model {
        fn load(mxbai: bool, dir: &PathBuf, options: ModelOptions) -> rerank::Result<Self> {
            Ok(if mxbai {
                Model::Mxbai(MxbaiReranker::builder(dir).options(options).build()?)
            } else {
                Model::Qwen3(Qwen3Reranker::builder(dir).options(options).build()?)
            })
        }

        /// The prompt's length for `doc` against [`QUERY`] (0 if it cannot be encoded).
        fn prompt_len(&self, doc: &str) -> usize {
            match self {
                Model::Qwen3(r) => r.encode(None, QUERY, doc).map_or(0, |ids| ids.len()),
                Model::Mxbai(r) => r.encode(None, QUERY, doc).map_or(0, |p| p.ids.len()),
            }
        }

        fn logits(&self, query: &RerankQuery, docs: &[&str]) -> Vec<f32> {
            let logits: rerank::Result<Vec<f32>> = match self {
                Model::Qwen3(r) => r
                    .score_with_logits(query, docs)
                    .map(|s| s.iter().map(|s| s.logit).collect()),
                Model::Mxbai(r) => r
                    .score_with_logits(query, docs)
                    .map(|s| s.iter().map(|s| s.logit).collect()),
            };
            logits.expect("scoring the bench documents")
        }
    }

    pub fn main() {
        let mxbai = std::env::var("RERANK_BENCH_RERANKER").is_ok_and(|r| r == "mxbai");
        let default_dir = if mxbai {
            "models/mxbai-base-v2-shape"
        } else {
            "models/qwen3-0.6b-shape"
        };
        let dir = std::env::var("RERANK_QWEN3_BENCH_MODEL")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(default_dir));
        // One file or shards named by an index (the seq-cls twin of
        // scripts/bench_qwen3_vs_transformers.py).
        let weights = ["model.safetensors", "model.safetensors.index.json"];
        if !weights.iter().any(|f| dir.join(f).is_file()) {
            eprintln!(
                "skipping: no model in {} (run scripts/make_qwen3_bench_model.py)",
                dir.display()
            );
            return;
        }
        let threads = env_usize("RERANK_BENCH_THREADS")
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let precision: Precision = match std::env::var("RERANK_BENCH_PRECISION") {
            Ok(p) => p.parse().unwrap_or_else(|e| {
                eprintln!("RERANK_BENCH_PRECISION: {e}");
                std::process::exit(2);
            }),
            Err(_) => Precision::F32,
        };
        let t = Instant::now();
        let options = ModelOptions::default()
            .threads(threads)
            .precision(precision);
        let reranker = match Model::load(mxbai, &dir, options) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("cannot load {}: {e}", dir.display());
                std::process::exit(1);
            }
        };
        let load_s = t.elapsed().as_secs_f64();
        let rss_after_load = status_mb("VmRSS");
        let docs: Vec<String> = (0..N_DOCS).map(document).collect();
        let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let query = RerankQuery::new(QUERY);
        let prompt_lens: Vec<usize> = refs.iter().map(|d| reranker.prompt_len(d)).collect();
        let tokens: usize = prompt_lens.iter().sum();
        let doc_tokens: Vec<usize> = refs
            .iter()
            .map(|d| reranker.prompt_len(d) - reranker.prompt_len(""))
            .collect();
        let score = || reranker.logits(&query, &refs);

        if std::env::var("RERANK_BENCH_JSON").is_ok() {
            let repeats = env_usize("RERANK_BENCH_REPEATS").unwrap_or(3).max(1);
            let warmup = env_usize("RERANK_BENCH_WARMUP").unwrap_or(1);
            for _ in 0..warmup {
                std::hint::black_box(score());
            }
            let mut seconds = Vec::new();
            let mut last = Vec::new();
            for _ in 0..repeats {
                let t = Instant::now();
                let out = std::hint::black_box(score());
                seconds.push(t.elapsed().as_secs_f64());
                last = out;
            }
            let mut sorted = seconds.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[sorted.len() / 2];
            let logits = last;
            println!(
                "{}",
                serde_json::json!({
                    "impl": "rerank",
                    "reranker": if mxbai { "mxbai" } else { "qwen3" },
                    "threads": threads,
                    "docs": N_DOCS,
                    "prompt_tokens": tokens,
                    "doc_tokens_min": doc_tokens.iter().min(),
                    "doc_tokens_max": doc_tokens.iter().max(),
                    "prompt_lens": prompt_lens,
                    "load_s": load_s,
                    "rss_after_load_mb": rss_after_load,
                    "peak_rss_mb": status_mb("VmHWM"),
                    "seconds": seconds,
                    "median_s": median,
                    "tokens_per_s": tokens as f64 / median,
                    "logits": logits,
                })
            );
            return;
        }

        let mut c = Criterion::default()
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(60))
            .configure_from_args();
        let mut group = c.benchmark_group(if mxbai {
            "mxbai_rerank_base_v2_shape"
        } else {
            "qwen3_reranker_0.6b_shape"
        });
        group.throughput(Throughput::Elements(tokens as u64));
        group.bench_function(
            format!("score_{N_DOCS}_docs_x300_tokens_{threads}_threads"),
            |b| b.iter(|| std::hint::black_box(score())),
        );
        group.finish();
        c.final_summary();
    }
}

fn main() {
    #[cfg(feature = "models")]
    bench::main();
    #[cfg(not(feature = "models"))]
    eprintln!("the qwen3 bench needs the `models` feature");
}
