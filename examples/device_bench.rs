//! Throughput of one model on one device: the Rust side of `scripts/gpu_check.sh`.
//!
//! ```sh
//! cargo run --release --features cuda --example device_bench -- \
//!     --kind cross-encoder --model DIR --device cuda:0 --dtype f16 --items 512 --batch 32
//! ```
//!
//! Scores (cross-encoder, qwen3-reranker) or embeds (embedder) `--items` generated texts in
//! one call, as the peer hands all its items to `CrossEncoder.predict` / `encode` with a
//! `batch_size`: the model splits them into batches of at most `--batch` (`max_batch_size`),
//! sorted by length, and runs them through the device two deep (the next batch prepared while
//! the device runs this one). Once to warm up (on `--warmup-items`, every item by default)
//! and once timed; prints one JSON line:
//! `{"kind", "device", "dtype", "tf32", "items", "warmup_items", "seconds", "items_per_s"}`.
//! The texts are `scripts/gpu_peer.py`'s: document `i` is `--doc-words` words of [`WORDS`]
//! starting at word `7 i`, query `i` `--query-words` words starting at `3 i`, so both sides
//! see the same lengths. With `--stages`, each call's time on a device is split on stderr
//! into the host's work and the wait for the device (`layers::candle::pipeline`).

use std::time::Instant;

use clap::Parser;
use rerank::models::{Device, ModelOptions, Precision};
use rerank::rerankers::qwen3::{Qwen3Reranker, ScoreInput};
use rerank::rerankers::CrossEncoder;
use rerank::{load_embedder, Embedder};

/// The words the texts are made of (the same list as `scripts/gpu_peer.py`'s).
const WORDS: &[&str] = &[
    "the",
    "model",
    "ranks",
    "documents",
    "by",
    "their",
    "relevance",
    "to",
    "a",
    "query",
    "search",
    "engines",
    "use",
    "inverted",
    "indexes",
    "and",
    "dense",
    "vectors",
    "for",
    "retrieval",
    "of",
    "passages",
    "from",
    "large",
    "collections",
    "rust",
    "is",
    "fast",
    "memory",
    "safe",
    "language",
    "with",
    "zero",
    "cost",
    "abstractions",
    "graphics",
    "cards",
    "multiply",
    "matrices",
    "in",
    "parallel",
    "attention",
    "layers",
    "compare",
    "every",
    "token",
    "other",
    "one",
    "batch",
    "sizes",
    "grow",
    "until",
    "throughput",
    "stops",
    "rising",
    "latency",
    "matters",
    "when",
    "users",
    "wait",
    "answers",
    "should",
    "cite",
    "sources",
];

#[derive(Parser)]
struct Args {
    /// cross-encoder, embedder or qwen3-reranker.
    #[arg(long)]
    kind: String,
    /// The model directory.
    #[arg(long)]
    model: std::path::PathBuf,
    /// cpu (the crate's kernels), candle-cpu, cuda:N or metal:N.
    #[arg(long, default_value = "cpu")]
    device: Device,
    /// f32, f16 or bf16 (int8 on cpu).
    #[arg(long, default_value = "f32")]
    dtype: Precision,
    #[arg(long, default_value_t = 512)]
    items: usize,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    #[arg(long, default_value_t = 120)]
    doc_words: usize,
    #[arg(long, default_value_t = 8)]
    query_words: usize,
    /// Print, on stderr, where each call's time went on a device: preparing batches on the
    /// host, queueing them, waiting for the device (and copying back), finishing them.
    #[arg(long)]
    stages: bool,
    /// Let f32 products on a CUDA device run on TF32 tensor cores (`models::allow_tf32`).
    #[arg(long)]
    tf32: bool,
    /// Warm up on the first N items only (default: every item; 0: no warm-up pass), as
    /// `scripts/gpu_peer.py --warmup-items` does: what a first call pays once (the device's
    /// context, its kernels' modules, the memory pool) is paid by the first batches.
    #[arg(long)]
    warmup_items: Option<usize>,
}

fn text(start: usize, words: usize) -> String {
    (0..words)
        .map(|j| WORDS[(start + j) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.stages {
        tracing_subscriber::fmt()
            .with_env_filter("rerank::device=debug")
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
    if args.tf32 {
        rerank::models::allow_tf32(true)?;
    }
    let docs: Vec<String> = (0..args.items)
        .map(|i| text(7 * i, args.doc_words))
        .collect();
    let queries: Vec<String> = (0..args.items)
        .map(|i| text(3 * i, args.query_words))
        .collect();
    let options = ModelOptions::default()
        .device(args.device)
        .precision(args.dtype)
        .max_batch_size(args.batch)
        .token_budget(args.batch * 2048);
    // Each closure scores or embeds the first `n` items.
    let run: Box<dyn Fn(usize) -> Result<(), rerank::Error>> = match args.kind.as_str() {
        "cross-encoder" => {
            let model = CrossEncoder::builder(&args.model)
                .options(options)
                .build()?;
            Box::new(move |n| {
                let pairs: Vec<(&str, &str)> = queries[..n]
                    .iter()
                    .zip(&docs)
                    .map(|(q, d)| (q.as_str(), d.as_str()))
                    .collect();
                model.logits(&pairs).map(drop)
            })
        }
        "embedder" => {
            let model = load_embedder(&args.model, &options)?;
            Box::new(move |n| {
                let texts: Vec<&str> = docs[..n].iter().map(String::as_str).collect();
                model.embed(&texts).map(drop)
            })
        }
        "qwen3-reranker" => {
            let model = Qwen3Reranker::builder(&args.model)
                .options(options)
                .build()?;
            Box::new(move |n| {
                let inputs: Vec<ScoreInput<'_>> = queries[..n]
                    .iter()
                    .zip(&docs)
                    .map(|(q, d)| ScoreInput {
                        instruction: None,
                        query: q,
                        document: d,
                    })
                    .collect();
                model.score_inputs(&inputs).map(drop)
            })
        }
        other => return Err(format!("unknown --kind {other}").into()),
    };
    let warmup = args.warmup_items.unwrap_or(args.items).min(args.items);
    if warmup > 0 {
        run(warmup)?;
    }
    let start = Instant::now();
    run(args.items)?;
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "kind": args.kind,
            "device": args.device.to_string(),
            "dtype": args.dtype.as_str(),
            "tf32": args.tf32,
            "items": args.items,
            "warmup_items": warmup,
            "seconds": seconds,
            "items_per_s": args.items as f64 / seconds,
        })
    );
    Ok(())
}
