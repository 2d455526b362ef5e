//! Properties of the in-memory BM25 index under any sequence of writes, bounded memory under
//! repeated updates, and pruned top-k equal to exhaustive scoring.

use proptest::prelude::*;
use rerank::{Bm25Index, Document};

#[derive(Debug, Clone)]
enum Op {
    Add(usize, usize),
    Remove(usize),
}

const WORDS: [&str; 8] = [
    "alpha", "beta", "gamma", "delta", "rust", "search", "rank", "index",
];

fn text_of(seed: usize) -> String {
    (0..1 + seed % 6)
        .map(|i| WORDS[(seed * 5 + i * 3) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..15, 0usize..50).prop_map(|(d, t)| Op::Add(d, t)),
        1 => (0usize..15).prop_map(Op::Remove),
    ]
}

fn exact(hits: &[rerank::Hit]) -> Vec<(String, u32)> {
    hits.iter()
        .map(|h| (h.id().to_string(), h.score.to_bits()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// After any add/update/remove sequence, the index ranks exactly like a fresh build over
    /// the surviving documents in the order they were last written.
    #[test]
    fn bm25_after_any_writes_equals_a_fresh_build(ops in proptest::collection::vec(op(), 1..60)) {
        let index = Bm25Index::new();
        let mut live: Vec<Document> = Vec::new();
        for op in &ops {
            match *op {
                Op::Add(d, t) => {
                    let doc = Document::new(format!("d{d}"), text_of(t));
                    live.retain(|x| x.id != doc.id);
                    live.push(doc.clone());
                    index.add([doc]).unwrap();
                }
                Op::Remove(d) => {
                    let id = format!("d{d}");
                    let was = live.iter().any(|x| x.id == id);
                    live.retain(|x| x.id != id);
                    prop_assert_eq!(index.remove(&id), was);
                }
            }
        }
        let fresh = Bm25Index::new();
        fresh.add(live.clone()).unwrap();
        prop_assert_eq!(index.len(), live.len());
        for q in ["alpha rust", "search rank index", "gamma gamma beta", "delta"] {
            for k in [1, 4, 20] {
                prop_assert_eq!(exact(&index.search(q, k)), exact(&fresh.search(q, k)), "{} top {}", q, k);
                prop_assert_eq!(exact(&index.search(q, k)), exact(&index.search_exhaustive(q, k)), "{} top {}", q, k);
            }
        }
    }
}

#[test]
fn repeated_updates_do_not_grow_the_index_without_bound() {
    let index = Bm25Index::new();
    for round in 0..600 {
        index
            .add((0..10).map(|d| Document::new(format!("d{d}"), text_of(round + d))))
            .unwrap();
    }
    assert_eq!(index.len(), 10);
    // 6000 writes of 10 documents: the removed slots are compacted away.
    assert!(index.slots() <= 2 * 10 + 1024, "{} slots", index.slots());
    // Ranking is unchanged by compaction: the last written text of each document counts.
    let fresh = Bm25Index::new();
    fresh
        .add((0..10).map(|d| Document::new(format!("d{d}"), text_of(599 + d))))
        .unwrap();
    for q in ["alpha", "rust search", "beta gamma delta"] {
        assert_eq!(
            exact(&index.search(q, 10)),
            exact(&fresh.search(q, 10)),
            "{q}"
        );
    }
}

/// A skewed word from a small vocabulary: word `i` about twice as likely as word `2i`.
fn zipf_word(r: u64) -> String {
    let x = (r % 1_000_000) as f64 / 1_000_000.0;
    let rank = (40f64.powf(x) - 1.0) as usize; // 0..39, low ranks most likely
    format!("w{rank}")
}

/// A deterministic pseudo-random stream (splitmix64).
fn stream(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Block-max pruning returns exactly the exhaustive top-k (ids, order and score bits) on
    /// collections large enough for many blocks and windows, after removals and updates.
    #[test]
    fn pruned_top_k_equals_exhaustive(seed in any::<u64>(), n in 300usize..9000, churn in 0usize..400) {
        let mut next = stream(seed);
        let text = |next: &mut dyn FnMut() -> u64| {
            let len = 3 + (next() % 40) as usize;
            (0..len).map(|_| zipf_word(next())).collect::<Vec<_>>().join(" ")
        };
        let index = Bm25Index::new();
        index.add((0..n).map(|d| Document::new(format!("d{d}"), text(&mut next)))).unwrap();
        for _ in 0..churn {
            let d = (next() % n as u64) as usize;
            if next().is_multiple_of(3) {
                index.remove(&format!("d{d}"));
            } else {
                index.update(Document::new(format!("d{d}"), text(&mut next))).unwrap();
            }
        }
        for _ in 0..12 {
            let q = (0..1 + next() % 5).map(|_| zipf_word(next())).collect::<Vec<_>>().join(" ");
            for k in [1, 10, 100] {
                prop_assert_eq!(exact(&index.search(&q, k)), exact(&index.search_exhaustive(&q, k)), "{} top {}", q, k);
            }
        }
    }
}
