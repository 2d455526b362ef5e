//! `DenseIndex` with compact vector storage (f16, int8) and exact f32 rescoring, against the
//! exact f32 scan, on a seeded random collection of 20,000 x 384 unit vectors.

use std::collections::HashMap;
use std::sync::Arc;

use ndarray::Array2;
use rerank::recall::{SearchQuery, VectorStorage};
use rerank::{DenseIndex, Document, Embedder, Retriever};

const ROWS: usize = 20_000;
const DIM: usize = 384;
const QUERIES: u64 = 100;

/// Queries come as embeddings; documents through `from_embeddings`.
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

fn index(storage: VectorStorage) -> DenseIndex {
    let docs = (0..ROWS)
        .map(|i| Document::new(format!("d{i}"), ""))
        .collect();
    let m = Array2::from_shape_vec((ROWS, DIM), uniform(14, ROWS * DIM)).unwrap();
    let idx = DenseIndex::from_embeddings(Arc::new(Fixed(DIM)), docs, m).unwrap();
    idx.set_storage(storage);
    idx
}

fn top(idx: &DenseIndex, q: &[f32], k: usize) -> Vec<(String, f32)> {
    idx.retrieve(&SearchQuery::new("").with_embedding(q.to_vec()), k)
        .unwrap()
        .iter()
        .map(|h| (h.id().to_string(), h.score))
        .collect()
}

#[test]
fn compact_storage_with_rescoring_finds_the_exact_top_10() {
    let exact = index(VectorStorage::F32);
    let compact = index(VectorStorage::f16());
    for storage in [VectorStorage::f16(), VectorStorage::int8()] {
        compact.set_storage(storage);
        assert_eq!(compact.vector_bytes(), ROWS * storage.bytes_per_vector(DIM));
        let (mut found, mut identical) = (0usize, 0usize);
        for i in 0..QUERIES {
            let q = uniform(1000 + i, DIM);
            let norm = q.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            let want = top(&exact, &q, 10);
            let got = top(&compact, &q, 10);
            assert_eq!(got.len(), 10);
            let want_scores: HashMap<&str, f32> =
                want.iter().map(|(id, s)| (id.as_str(), *s)).collect();
            for (id, score) in &got {
                // the returned score is the exact f32 cosine of that document ...
                let v = exact.vector(id).unwrap();
                let cosine: f64 = v
                    .iter()
                    .zip(&q)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum::<f64>()
                    / norm;
                assert!(
                    (f64::from(*score) - cosine).abs() < 1e-5,
                    "{storage:?} {id}"
                );
                // ... bit for bit the score the exact scan gives it
                if let Some(s) = want_scores.get(id.as_str()) {
                    found += 1;
                    assert_eq!(s.to_bits(), score.to_bits(), "{storage:?} {id}");
                }
            }
            identical += usize::from(got == want);
        }
        let recall = found as f64 / (10 * QUERIES) as f64;
        eprintln!(
            "{}: recall@10 {recall:.4}, identical top 10 {identical}/{QUERIES}",
            storage.name()
        );
        assert!(recall >= 0.99, "{storage:?}: recall@10 {recall}");
        assert!(identical >= 95, "{storage:?}: {identical}/{QUERIES}");
    }
}

#[test]
fn compact_storage_is_shared_across_threads_while_updated() {
    let idx = Arc::new(index(VectorStorage::int8()));
    let q = uniform(7, DIM);
    let before = top(&idx, &q, 10);
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let idx = idx.clone();
            s.spawn(move || {
                for i in 0..5 {
                    let hits = top(&idx, &uniform(t * 100 + i, DIM), 10);
                    assert_eq!(hits.len(), 10);
                }
            });
        }
        let idx = idx.clone();
        s.spawn(move || {
            for i in 0..50 {
                assert!(idx.remove(&format!("d{}", ROWS - 1 - i)));
            }
        });
    });
    assert_eq!(idx.len(), ROWS - 50);
    // the removed rows were the last ones; the top 10 of `q` keeps the rows still present
    let after = top(&idx, &q, 10);
    let kept: Vec<_> = before
        .iter()
        .filter(|(id, _)| id[1..].parse::<usize>().unwrap() < ROWS - 50)
        .cloned()
        .collect();
    assert_eq!(after[..kept.len()], kept[..]);
}
