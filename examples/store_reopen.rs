//! Reopening a store against rebuilding in memory, at 100,000 synthetic documents with
//! 384-dimensional vectors. Each step runs in its own process so its peak memory is its own:
//!
//! ```text
//! cargo run --release --example store_reopen -- build  reopen.db 100000
//! cargo run --release --example store_reopen -- reopen-bm25 reopen.db 100000
//! cargo run --release --example store_reopen -- reopen reopen.db 100000
//! cargo run --release --example store_reopen -- memory reopen.db 100000
//! ```
//! `build` writes the store; `reopen-bm25` opens it and answers the first BM25 query; `reopen` opens it and answers the first hybrid query (BM25 + dense,
//! RRF); `memory` builds a `Bm25Index` and a `DenseIndex` from the same documents and vectors
//! (what a host without a store does at every start, minus embedding the corpus, which costs
//! far more with a real model) and answers the same query. Each prints one JSON line with the
//! seconds and the process's peak resident memory.
//!
//! The documents draw words from a Zipf-like vocabulary of 20,000 words (about 60 words each);
//! the vectors are a deterministic hash of the text, so the "model" is exact and free.

use std::sync::Arc;
use std::time::Instant;

use ndarray::Array2;
use rerank::recall::{Fusion, SearchQuery};
use rerank::{Bm25Index, DenseIndex, Document, Embedder, Hybrid, Retriever, Store};

const DIM: usize = 384;
const VOCABULARY: usize = 20_000;
const QUERY: &str = "w17 w203 w5 w1999";

/// A seeded xorshift generator (no dependency needed for a benchmark's data).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn documents(n: usize) -> Vec<Document> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|i| {
            let len = 30 + (rng.next() % 60) as usize;
            let words: Vec<String> = (0..len)
                .map(|_| {
                    // Zipf-like: rank ~ VOCABULARY^u.
                    let rank = (VOCABULARY as f64).powf(rng.unit()) as usize;
                    format!("w{}", rank.min(VOCABULARY - 1))
                })
                .collect();
            Document::new(format!("doc{i}"), words.join(" "))
        })
        .collect()
}

/// Text hashed into a vector: deterministic, exact, instant.
struct Hashed;

impl Embedder for Hashed {
    fn embed_as(&self, texts: &[&str], _role: rerank::Role) -> rerank::Result<Array2<f32>> {
        let mut m = Array2::zeros((texts.len(), DIM));
        for (i, t) in texts.iter().enumerate() {
            for word in t.split_whitespace() {
                let mut h = Rng(word.bytes().fold(1469598103934665603u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(1099511628211)
                }) | 1);
                for _ in 0..4 {
                    let j = (h.next() % DIM as u64) as usize;
                    m[[i, j]] += 1.0;
                }
            }
        }
        Ok(m)
    }
    fn dim(&self) -> usize {
        DIM
    }
    fn id(&self) -> Option<String> {
        Some("hashed-384".into())
    }
}

/// Peak resident memory of this process, in MB (Linux), or -1.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(-1.0, |kb| kb / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(step), Some(path), n) = (args.get(1), args.get(2), args.get(3)) else {
        return Err("usage: store_reopen build|reopen-bm25|reopen|memory FILE [N]".into());
    };
    let n: usize = n.map_or(Ok(100_000), |s| s.parse())?;
    let embedder: Arc<dyn Embedder> = Arc::new(Hashed);
    let query = SearchQuery::new(QUERY);
    match step.as_str() {
        "build" => {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
            let t = Instant::now();
            let store = Store::open(path)?;
            for chunk in documents(n).chunks(5_000) {
                store.upsert_embedded(chunk.to_vec(), embedder.as_ref())?;
            }
            let bytes = std::fs::metadata(path)?.len();
            println!(
                "{}",
                serde_json::json!({"step": "build", "docs": n, "seconds": t.elapsed().as_secs_f64(),
                    "file_mb": bytes as f64 / 1e6, "peak_rss_mb": peak_rss_mb()})
            );
        }
        "reopen" => {
            let t = Instant::now();
            let store = Arc::new(Store::open(path)?);
            let open_seconds = t.elapsed().as_secs_f64();
            let hybrid = Hybrid::new(Fusion::Rrf { k: 60.0 })
                .with(store.bm25(), 1.0)
                .with(store.dense(embedder)?, 1.0)
                .depth(100);
            let hits = hybrid.retrieve(&query, 10)?;
            let first = t.elapsed().as_secs_f64();
            let t2 = Instant::now();
            let again = hybrid.retrieve(&query, 10)?;
            println!(
                "{}",
                serde_json::json!({"step": "reopen", "docs": store.len()?, "open_seconds": open_seconds,
                    "first_hybrid_query_seconds": first, "next_query_seconds": t2.elapsed().as_secs_f64(),
                    "top": hits.first().map(|h| h.id().to_string()),
                    "same_top10": again.iter().map(|h| h.id()).eq(hits.iter().map(|h| h.id())),
                    "peak_rss_mb": peak_rss_mb()})
            );
        }
        "reopen-bm25" => {
            let t = Instant::now();
            let store = Arc::new(Store::open(path)?);
            let hits = store.bm25().search(QUERY, 10)?;
            println!(
                "{}",
                serde_json::json!({"step": "reopen-bm25", "first_bm25_query_seconds": t.elapsed().as_secs_f64(),
                    "hits": hits.len(), "peak_rss_mb": peak_rss_mb()})
            );
        }
        "memory" => {
            let docs = documents(n);
            let t = Instant::now();
            let bm25 = Bm25Index::new();
            bm25.add(docs.clone())?;
            let texts: Vec<String> = docs.iter().map(Document::full_text).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = embedder.embed(&refs)?;
            let dense = DenseIndex::from_embeddings(embedder, docs, vectors)?;
            let hybrid = Hybrid::new(Fusion::Rrf { k: 60.0 })
                .with(bm25, 1.0)
                .with(dense, 1.0)
                .depth(100);
            let hits = hybrid.retrieve(&query, 10)?;
            println!(
                "{}",
                serde_json::json!({"step": "memory", "docs": n,
                    "rebuild_and_first_hybrid_query_seconds": t.elapsed().as_secs_f64(),
                    "top": hits.first().map(|h| h.id().to_string()),
                    "peak_rss_mb": peak_rss_mb()})
            );
        }
        other => return Err(format!("unknown step {other:?}").into()),
    }
    Ok(())
}
