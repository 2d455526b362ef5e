//! Properties of the in-memory BM25 index under any sequence of writes, and bounded memory
//! under repeated updates.

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
                    index.add([doc]);
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
        fresh.add(live.clone());
        prop_assert_eq!(index.len(), live.len());
        for q in ["alpha rust", "search rank index", "gamma gamma beta", "delta"] {
            for k in [1, 4, 20] {
                prop_assert_eq!(exact(&index.search(q, k)), exact(&fresh.search(q, k)), "{} top {}", q, k);
            }
        }
    }
}

#[test]
fn repeated_updates_do_not_grow_the_index_without_bound() {
    let index = Bm25Index::new();
    for round in 0..600 {
        index.add((0..10).map(|d| Document::new(format!("d{d}"), text_of(round + d))));
    }
    assert_eq!(index.len(), 10);
    // 6000 writes of 10 documents: the removed slots are compacted away.
    assert!(index.slots() <= 2 * 10 + 1024, "{} slots", index.slots());
    // Ranking is unchanged by compaction: the last written text of each document counts.
    let fresh = Bm25Index::new();
    fresh.add((0..10).map(|d| Document::new(format!("d{d}"), text_of(599 + d))));
    for q in ["alpha", "rust search", "beta gamma delta"] {
        assert_eq!(
            exact(&index.search(q, 10)),
            exact(&fresh.search(q, 10)),
            "{q}"
        );
    }
}
