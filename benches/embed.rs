//! Embedding throughput: all-MiniLM-L6-v2 on a fixed subset of the SciFact corpus.
//!
//! Inputs: the first 256 corpus documents as `title + " " + text` (SciFact abstracts, most
//! truncated at 256 tokens); `scripts/bench_embed_vs_st.py` feeds sentence-transformers the
//! same texts. Threads: `RERANK_BENCH_THREADS` (default: 2). Throughput is reported in
//! documents per second.
//!
//! A group `gemm_peak` times one f32 matrix product of the encoder's feed-forward shape
//! (`2048 x 384` times `384 x 1536`) on the `gemm` crate the encoder calls, on the same
//! threads: the machine's f32 peak as the encoder can reach it, measured on the spot; and a
//! group `fma_peak`, the CPU's own: independent chains of AVX-512 (or, without it, AVX2)
//! multiply-adds on registers, one set per thread.
//!
//! A second group, `embed_precision`, embeds the first 64 documents in f32 and in int8
//! (`Precision::Int8`); `scripts/bench_int8.py` runs it between its peers (onnxruntime's
//! dynamic int8 and sentence-transformers).
//!
//! ```text
//! scripts/fetch_minilm.sh
//! cargo bench --bench embed
//! ```

#[cfg(feature = "models")]
mod common;

#[cfg(feature = "models")]
use criterion::{criterion_group, criterion_main, Criterion};
#[cfg(feature = "models")]
use criterion::{SamplingMode, Throughput};

#[cfg(feature = "models")]
use rerank::models::{ModelOptions, Precision};
#[cfg(feature = "models")]
use rerank::{embed::BertEmbedder, Embedder};

/// Documents per iteration.
#[cfg(feature = "models")]
const DOCS: usize = 256;

/// Documents per iteration of the f32 / int8 group.
#[cfg(feature = "models")]
const PRECISION_DOCS: usize = 64;

/// `2 m n k` floating-point operations per iteration, reported as elements per second.
#[cfg(feature = "models")]
fn gemm_peak(c: &mut Criterion, threads: usize) {
    let (m, k, n) = (2048usize, 384usize, 1536usize);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut out = vec![0.0f32; m * n];
    let mut group = c.benchmark_group("gemm_peak");
    group
        .sample_size(20)
        .throughput(Throughput::Elements((2 * m * n * k) as u64));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    group.bench_function(format!("gemm_{m}x{k}x{n}_t{threads}"), |bench| {
        bench.iter(|| {
            pool.install(|| {
                // SAFETY: `a` is (m, k), `b` is (k, n) and `out` is (m, n), all row-major and
                // dense, as the strides below say; `out` overlaps neither input.
                #[allow(unsafe_code)]
                unsafe {
                    gemm::gemm(
                        m,
                        n,
                        k,
                        out.as_mut_ptr(),
                        1,
                        n as isize,
                        false,
                        a.as_ptr(),
                        1,
                        k as isize,
                        b.as_ptr(),
                        1,
                        n as isize,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::Rayon(threads),
                    )
                }
            })
        })
    });
    group.finish();
}

/// Independent chains of multiply-adds per core: enough to cover the instruction's latency
/// (4 cycles) on two FMA units.
#[cfg(all(feature = "models", target_arch = "x86_64"))]
const FMA_CHAINS: usize = 12;

/// The CPU's f32 peak: each thread runs [`FMA_CHAINS`] independent chains of multiply-adds on
/// registers (no memory), AVX-512 (32 floating-point operations each) where the CPU has it,
/// else AVX2 (16 each); reported as elements (operations) per second. The ceiling the panel
/// tiles are measured against.
#[cfg(all(feature = "models", target_arch = "x86_64"))]
fn fma_peak(c: &mut Criterion, threads: usize) {
    use std::arch::x86_64::*;
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx512f")]
    unsafe fn chains_avx512(steps: usize) -> f32 {
        let mut acc = [_mm512_set1_ps(1.0); FMA_CHAINS];
        let (m, a) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
        for _ in 0..steps {
            for v in acc.iter_mut() {
                *v = _mm512_fmadd_ps(*v, m, a);
            }
        }
        acc.iter().map(|&v| _mm512_reduce_add_ps(v)).sum()
    }
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn chains_avx2(steps: usize) -> f32 {
        let mut acc = [_mm256_set1_ps(1.0); FMA_CHAINS];
        let (m, a) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        for _ in 0..steps {
            for v in acc.iter_mut() {
                *v = _mm256_fmadd_ps(*v, m, a);
            }
        }
        let mut lanes = [0.0f32; 8];
        for v in acc {
            _mm256_storeu_ps(
                lanes.as_mut_ptr(),
                _mm256_add_ps(v, _mm256_loadu_ps(lanes.as_ptr())),
            );
        }
        lanes.iter().sum()
    }
    // SAFETY (both): each is only picked where the CPU reports its instructions.
    #[allow(unsafe_code)]
    let (name, flops, chains): (&str, usize, fn(usize) -> f32) =
        if std::arch::is_x86_feature_detected!("avx512f") {
            ("avx512", 32, |steps| unsafe { chains_avx512(steps) })
        } else if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            ("avx2", 16, |steps| unsafe { chains_avx2(steps) })
        } else {
            eprintln!("fma_peak: neither AVX-512 nor AVX2 + FMA here, not measured");
            return;
        };
    let steps = 1 << 20;
    let mut group = c.benchmark_group("fma_peak");
    group.sample_size(20).throughput(Throughput::Elements(
        (threads * steps * FMA_CHAINS * flops) as u64,
    ));
    group.bench_function(format!("{name}_t{threads}"), |bench| {
        bench.iter(|| {
            std::thread::scope(|s| {
                let runs: Vec<_> = (0..threads)
                    .map(|_| s.spawn(|| chains(std::hint::black_box(steps))))
                    .collect();
                runs.into_iter().map(|r| r.join().unwrap()).sum::<f32>()
            })
        })
    });
    group.finish();
}

#[cfg(feature = "models")]
fn bench(c: &mut Criterion) {
    eprintln!(
        "kernels: {} (int8: {})",
        rerank::simd_isa(),
        rerank::models::int8_kernel()
    );
    #[cfg(target_arch = "x86_64")]
    fma_peak(c, common::threads());
    gemm_peak(c, common::threads());
    let model = common::model_dir("all-MiniLM-L6-v2");
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

    let mut group = c.benchmark_group("embed_precision");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(PRECISION_DOCS as u64));
    let docs = &docs[..PRECISION_DOCS];
    for precision in [Precision::F32, Precision::Int8] {
        let embedder = BertEmbedder::builder(&model)
            .options(
                ModelOptions::default()
                    .threads(threads)
                    .precision(precision),
            )
            .build()
            .unwrap_or_else(|e| panic!("loading {}: {e}", model.display()));
        let name = format!("scifact_{PRECISION_DOCS}docs_{precision}_t{threads}");
        group.bench_function(name, |b| b.iter(|| embedder.embed(docs).unwrap()));
    }
    group.finish();
}

#[cfg(not(feature = "models"))]
fn bench(_c: &mut Criterion) {
    eprintln!("skipping: the embedding bench needs the `models` feature");
}

criterion_group!(benches, bench);
criterion_main!(benches);
