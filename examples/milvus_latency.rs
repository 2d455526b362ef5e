//! Latency of dense recall from Milvus (`MilvusRetriever`) against the in-memory `DenseIndex`
//! on the same vectors: p50 and p99 of one query (a precomputed 384-dimensional embedding, so
//! the model is not timed), top 10 and top 100 (the pipeline's default candidate depth), for
//! growing collections. Prints one JSON line per size, store and depth.
//!
//! ```text
//! scripts/milvus.sh install && scripts/milvus.sh start milvus-data
//! cargo run --release --features milvus --example milvus_latency [-- http://127.0.0.1:19530]
//! scripts/milvus.sh stop milvus-data
//! ```
//!
//! Documents carry about 300 characters of text (returned with every hit, as the pipeline
//! needs it for reranking), a source and a page. The collection is dropped at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ndarray::Array2;
use rerank::recall::{MilvusRetriever, SearchQuery};
use rerank::{DenseIndex, Document, Embedder, Retriever};

const DIM: usize = 384;
const SIZES: [usize; 2] = [10_000, 50_000];
const QUERIES: usize = 300;

/// A seeded xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn vector(&mut self) -> Vec<f32> {
        let v: Vec<f32> = (0..DIM)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect()
    }
}

/// Never called: every query carries its embedding.
struct Precomputed;
impl Embedder for Precomputed {
    fn embed_as(&self, _: &[&str], _role: rerank::Role) -> rerank::Result<Array2<f32>> {
        Err(rerank::Error::Config(
            "queries carry their embeddings".into(),
        ))
    }
    fn dim(&self) -> usize {
        DIM
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn time(retriever: &dyn Retriever, queries: &[SearchQuery], k: usize) -> (f64, f64) {
    for q in queries.iter().take(10) {
        retriever.retrieve(q, k).expect("warm-up query");
    }
    let mut times: Vec<Duration> = queries
        .iter()
        .map(|q| {
            let t = Instant::now();
            let hits = retriever.retrieve(q, k).expect("query");
            assert_eq!(hits.len(), k);
            t.elapsed()
        })
        .collect();
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:19530".into());
    let mut rng = Rng(0x5eed);
    let text = "a document of about three hundred characters that stands for a chunk of a note, \
                a page of a manual or a function of a code base, returned with every hit so that \
                the reranker can read it; the latency includes moving it over the wire and parsing \
                it into a document";
    for &n in &SIZES {
        let docs: Vec<Document> = (0..n)
            .map(|i| {
                Document::new(format!("d{i}"), text)
                    .with_source(format!("src/{}.md", i % 100))
                    .with_page((i % 30) as u32)
            })
            .collect();
        let mut vectors = Array2::zeros((n, DIM));
        for mut row in vectors.rows_mut() {
            row.assign(&ndarray::ArrayView1::from(&rng.vector()));
        }
        let embedder: Arc<dyn Embedder> = Arc::new(Precomputed);
        let memory = DenseIndex::from_embeddings(embedder.clone(), docs.clone(), vectors.clone())?;
        let milvus = MilvusRetriever::builder(&url, format!("latency_{n}"), embedder).build()?;
        milvus.drop_collection()?;
        let t = Instant::now();
        milvus.upsert_embedded(&docs, &vectors)?;
        milvus.wait_until_count(n, Duration::from_secs(120))?;
        let load = t.elapsed().as_secs_f64();
        let queries: Vec<SearchQuery> = (0..QUERIES)
            .map(|_| SearchQuery::new("q").with_embedding(rng.vector()))
            .collect();
        for k in [10, 100] {
            for (name, r) in [
                ("milvus", &milvus as &dyn Retriever),
                ("memory", &memory as &dyn Retriever),
            ] {
                let (p50, p99) = time(r, &queries, k);
                println!(
                    "{}",
                    serde_json::json!({
                        "docs": n, "store": name, "k": k, "queries": QUERIES,
                        "p50_ms": (p50 * 1000.0).round() / 1000.0,
                        "p99_ms": (p99 * 1000.0).round() / 1000.0,
                        "milvus_load_seconds": (load * 10.0).round() / 10.0,
                    })
                );
            }
        }
        milvus.drop_collection()?;
    }
    Ok(())
}
