//! Latency of `SemanticCache::get` over a `RedisCacheStore` against a real Redis, and over the
//! in-memory `MemoryStore` for comparison, for growing numbers of entries in one scope
//! (384-dimensional embeddings, answers of about 1 KB). Prints one JSON line per store and size.
//!
//! ```text
//! cargo build --release --features full --example redis_cache_latency
//! target/release/examples/redis_cache_latency            # starts its own redis-server
//! REDIS_URL=redis://127.0.0.1:6379/0 target/release/examples/redis_cache_latency
//! ```
//!
//! Without `REDIS_URL` it starts `redis-server` on a free port through `scripts/redis.sh`
//! (no persistence, loopback only) and stops it at the end. Half the lookups hit (the stored
//! query with a slightly perturbed embedding), half miss (a random embedding); every lookup
//! also counts itself in Redis (`INCRBY`), as it does in production. The store keeps its
//! default 50 ms timeout: a lookup that ran into it would show as a missing hit.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use rerank::cache::{MemoryStore, RedisCacheStore, SemanticCache};

const DIM: usize = 384;
const SIZES: [usize; 7] = [100, 250, 500, 1_000, 2_000, 5_000, 10_000];
const LOOKUPS: usize = 400;
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/redis.sh");

/// A seeded xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn signed(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn vector(&mut self) -> Vec<f32> {
        (0..DIM).map(|_| self.signed()).collect()
    }
}

/// The server this run started, stopped on drop.
struct Server {
    port: u16,
    dir: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(SCRIPT)
            .args(["stop", &self.port.to_string()])
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_server() -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("rerank-redis-bench-{port}"));
    let ok = Command::new("bash")
        .arg(SCRIPT)
        .args(["start", &port.to_string()])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "could not start redis-server (scripts/redis.sh install)"
    );
    Server { port, dir }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn measure(store: &str, entries: usize, cache: &SemanticCache<String>, seed: u64) {
    let mut rng = Rng(seed);
    let vectors: Vec<Vec<f32>> = (0..entries).map(|_| rng.vector()).collect();
    let answer = "x".repeat(1000);
    let started = Instant::now();
    for (i, v) in vectors.iter().enumerate() {
        assert!(
            cache.insert(&format!("question number {i}"), v.clone(), answer.clone()),
            "insert failed"
        );
    }
    let insert_s = started.elapsed().as_secs_f64();
    let mut times = Vec::with_capacity(LOOKUPS);
    let mut hits = 0;
    for l in 0..LOOKUPS {
        let i = (rng.next() as usize) % entries;
        let (query, embedding) = if l % 2 == 0 {
            let v: Vec<f32> = vectors[i].iter().map(|x| x + 0.01 * rng.signed()).collect();
            (format!("question number {i}"), v)
        } else {
            (format!("another question {l}"), rng.vector())
        };
        let t = Instant::now();
        let found = cache.get(&query, &embedding);
        times.push(t.elapsed());
        hits += usize::from(found.is_some());
    }
    times.sort();
    let mean = times.iter().sum::<Duration>().as_secs_f64() * 1e3 / times.len() as f64;
    println!(
        "{{\"store\":\"{store}\",\"entries\":{entries},\"dim\":{DIM},\"lookups\":{LOOKUPS},\"hits\":{hits},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"mean_ms\":{mean:.3},\"insert_s\":{insert_s:.2}}}",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
    );
}

fn main() {
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = start_server();
            let url = format!("redis://127.0.0.1:{}/0", server.port);
            (Some(server), url)
        }
    };
    for (k, &entries) in SIZES.iter().enumerate() {
        let store = RedisCacheStore::<String>::builder(&url)
            .namespace(format!("bench-{entries}"))
            .build()
            .unwrap();
        let cache: SemanticCache<String> = SemanticCache::builder().store(store).build().unwrap();
        cache.clear();
        measure("redis", entries, &cache, 7 + k as u64);
        cache.clear();

        let memory: SemanticCache<String> = SemanticCache::builder()
            .store(MemoryStore::with_capacity(entries))
            .build()
            .unwrap();
        measure("memory", entries, &memory, 7 + k as u64);
    }
}
