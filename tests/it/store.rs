//! The SQLite store: exact BM25 parity with a fresh in-memory index (also under random
//! upsert/remove sequences), incremental indexing, vectors per (content, model), the cache
//! surviving a reopen, a newer schema refused, readers beside a writer, and a writer killed with
//! SIGKILL in the middle of indexing.
#![cfg(feature = "sqlite")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ndarray::Array2;
use proptest::prelude::*;
use rerank::cache::{InsertOptions, ManualClock, SemanticCache};
use rerank::recall::SearchQuery;
use rerank::store::Store;
use rerank::{Bm25Index, DenseIndex, Document, Embedder, Error, Result, Retriever};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/handbook.jsonl");

/// A fresh file path; the file and its WAL side files are removed on drop.
pub(crate) struct TempDb(pub(crate) PathBuf);

impl TempDb {
    pub(crate) fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "rerank-store-{name}-{}-{:?}.db",
            std::process::id(),
            std::thread::current().id()
        ));
        let db = TempDb(path);
        db.clean();
        db
    }
    fn clean(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        self.clean();
    }
}

/// Letter counts, L2-normalized by the index: a deterministic embedder that says its id and
/// counts how many texts it embedded.
struct Letters {
    calls: AtomicUsize,
}

impl Letters {
    fn new() -> Arc<Self> {
        Arc::new(Letters {
            calls: AtomicUsize::new(0),
        })
    }
}

impl Embedder for Letters {
    fn embed_as(&self, texts: &[&str], _role: rerank::Role) -> Result<Array2<f32>> {
        self.calls.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(Array2::from_shape_fn((texts.len(), 26), |(i, j)| {
            let c = (b'a' + j as u8) as char;
            texts[i].to_lowercase().matches(c).count() as f32
        }))
    }
    fn dim(&self) -> usize {
        26
    }
    fn id(&self) -> Option<String> {
        Some("letters-v1".into())
    }
}

fn corpus() -> Vec<Document> {
    Document::read_jsonl(CORPUS).unwrap()
}

const QUERIES: [&str; 6] = [
    "Taylor's KTN",
    "roll back a failed deployment",
    "2023 revenue",
    "dog business trip pets",
    "hotel receipt per diem",
    "the the the",
];

/// Hits as (id, score bits), so equality is exact.
fn exact(hits: &[rerank::Hit]) -> Vec<(String, u32)> {
    hits.iter()
        .map(|h| (h.id().to_string(), h.score.to_bits()))
        .collect()
}

/// The store's BM25 against a fresh in-memory index over the store's documents, in its order.
fn assert_bm25_parity(store: &Arc<Store>, queries: &[&str]) {
    let fresh = Bm25Index::new();
    fresh.add(store.documents().unwrap()).unwrap();
    let bm25 = store.bm25();
    for q in queries {
        for k in [1, 3, 10, 100] {
            let want = fresh.search(q, k);
            let got = bm25.search(q, k).unwrap();
            assert_eq!(exact(&got), exact(&want), "{q:?} top {k}");
        }
    }
}

#[test]
fn reopened_store_ranks_exactly_like_a_fresh_index() {
    let db = TempDb::new("parity");
    {
        let store = Store::open(&db.0).unwrap();
        let report = store.upsert(corpus()).unwrap();
        assert_eq!(report.added, corpus().len());
    }
    let store = Arc::new(Store::open(&db.0).unwrap());
    assert_eq!(store.len().unwrap(), corpus().len());
    assert_eq!(store.documents().unwrap(), corpus());
    assert_bm25_parity(&store, &QUERIES);
    store.integrity_check().unwrap();
}

#[test]
fn upserts_are_incremental_and_vectors_are_computed_once_per_content_and_model() {
    let db = TempDb::new("incremental");
    let store = Arc::new(Store::open(&db.0).unwrap());
    let letters = Letters::new();
    let docs = corpus();
    let first = store.upsert_embedded(docs.clone(), &*letters).unwrap();
    assert_eq!((first.added, first.embedded), (docs.len(), docs.len()));
    // The same corpus again: nothing to do, nothing embedded.
    let again = store.upsert_embedded(docs.clone(), &*letters).unwrap();
    assert_eq!((again.unchanged, again.embedded), (docs.len(), 0));
    assert_eq!(letters.calls.load(Ordering::SeqCst), docs.len());

    // A metadata-only change updates the row without re-embedding.
    let mut moved = docs[0].clone();
    moved.page = Some(99);
    let r = store.upsert_embedded([moved.clone()], &*letters).unwrap();
    assert_eq!((r.updated, r.embedded), (1, 0));
    assert_eq!(store.get(&moved.id).unwrap().unwrap().page, Some(99));

    // New text is re-analyzed and re-embedded once; a copy of existing content is not.
    let mut changed = docs[1].clone();
    changed.text.push_str(" Updated for 2026.");
    let copy =
        Document::new("copy-of-0", docs[0].text.clone()).with_title(docs[0].title.clone().unwrap());
    let r = store.upsert_embedded([changed, copy], &*letters).unwrap();
    assert_eq!((r.updated, r.added, r.embedded), (1, 1, 1));
    assert_bm25_parity(&store, &QUERIES);

    // Removing a document whose content another shares keeps the vector: dense recall still
    // finds both, and nothing is re-embedded.
    assert_eq!(store.remove([docs[0].id.as_str(), "not-there"]).unwrap(), 1);
    let dense = store.dense(letters.clone()).unwrap();
    let hits = dense.retrieve(&SearchQuery::new(&docs[0].text), 3).unwrap();
    assert_eq!(hits[0].id(), "copy-of-0");
    assert_eq!(store.embed_missing(&*letters).unwrap(), 0);
    store.integrity_check().unwrap();
}

#[test]
fn dense_recall_from_the_store_equals_a_dense_index() {
    let db = TempDb::new("dense");
    let letters = Letters::new();
    {
        let store = Store::open(&db.0).unwrap();
        store.upsert_embedded(corpus(), &*letters).unwrap();
    }
    let before = letters.calls.load(Ordering::SeqCst);
    let store = Arc::new(Store::open(&db.0).unwrap());
    let dense = store.dense(letters.clone()).unwrap();
    let index = DenseIndex::new(letters.clone());
    index.add(store.documents().unwrap()).unwrap();
    let after_index = letters.calls.load(Ordering::SeqCst);
    for q in QUERIES {
        let query = SearchQuery::new(q);
        let got = dense.retrieve(&query, 5).unwrap();
        let want = index.retrieve(&query, 5).unwrap();
        assert_eq!(exact(&got), exact(&want), "{q}");
    }
    // Only the queries were embedded by the store's retriever.
    assert_eq!(
        letters.calls.load(Ordering::SeqCst) - after_index,
        2 * QUERIES.len()
    );
    assert!(after_index - before == corpus().len());

    // A document without a vector for this model is an error, not a silent gap.
    store.upsert([Document::new("plain", "no vector")]).unwrap();
    let e = dense.retrieve(&SearchQuery::new("vector"), 3).unwrap_err();
    // It says which model, what the store holds instead, and how to compute the vectors.
    let e = e.to_string();
    assert!(
        e.contains(&format!(
            "1 of {} documents have no vector from the embedding model searched with (letters-v1)",
            corpus().len() + 1
        )) && e.contains("it holds vectors of letters-v1 (")
            && e.contains("rerank index --db")
            && e.contains("--embedder MODEL"),
        "{e}"
    );
    assert_eq!(store.embed_missing(&*letters).unwrap(), 1);
    assert!(dense.retrieve(&SearchQuery::new("vector"), 3).is_ok());
}

#[test]
fn cache_entries_survive_a_reopen_with_their_ttls_tags_and_stats() {
    let db = TempDb::new("cache");
    let clock = Arc::new(ManualClock::new());
    clock.set(Duration::from_secs(1_000));
    let open = |clock: &Arc<ManualClock>| {
        let store = Arc::new(Store::open(&db.0).unwrap());
        SemanticCache::<String>::builder()
            .store(store.cache_store())
            .clock(clock.clone())
            .ttl(Duration::from_secs(60))
            .build()
            .unwrap()
    };
    {
        let cache = open(&clock);
        cache.insert_with(
            "refund policy for flights",
            vec![1.0, 0.0],
            "30 days".into(),
            &InsertOptions::tagged(["policies.md"]),
        );
        cache.insert("office address", vec![0.0, 1.0], "Oslo".into());
        assert_eq!(
            cache
                .get("refund policy for flights", &[1.0, 0.0])
                .as_deref(),
            Some("30 days")
        );
        assert_eq!(cache.get("something else", &[0.7, 0.7]), None);
    }
    let cache = open(&clock);
    let stats = cache.stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (1, 1, 2));
    assert_eq!(
        cache
            .get("refund policy for flights", &[1.0, 0.0])
            .as_deref(),
        Some("30 days")
    );
    assert_eq!(cache.invalidate_tag("policies.md"), 1);
    assert_eq!(cache.get("refund policy for flights", &[1.0, 0.0]), None);
    // The TTL keeps running across the reopen.
    clock.advance(Duration::from_secs(61));
    assert_eq!(cache.get("office address", &[0.0, 1.0]), None);
    drop(cache);
    let cache = open(&clock);
    assert_eq!(cache.purge_expired(), 1);
    assert_eq!(cache.stats().entries, 0);
}

/// Runs Python's sqlite3 `code` with the store file as its argument; its standard output.
fn python_on(db: &Path, code: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(code)
        .arg(db)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let db = TempDb::new("schema");
    drop(Store::open(&db.0).unwrap());
    let python = |code: &str| python_on(&db.0, code);
    // Another client reads the file: the schema version and the tables.
    let seen = python(
        "import sqlite3, sys\n\
         c = sqlite3.connect(sys.argv[1])\n\
         print(c.execute('PRAGMA user_version').fetchone()[0])\n\
         print(sorted(r[0] for r in c.execute(\"SELECT name FROM sqlite_master WHERE type='table'\")))",
    );
    assert_eq!(
        seen,
        "3\n['cache_counters', 'cache_entries', 'cache_tags', 'documents', 'embeddings', 'encodings', 'meta', 'postings']\n"
    );
    python("import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nc.execute('PRAGMA user_version = 7')\nc.commit()");
    let bytes = std::fs::read(&db.0).unwrap();
    match Store::open(&db.0) {
        Err(Error::UnsupportedSchema {
            found: 7,
            supported: rerank::store::SCHEMA_VERSION,
            ..
        }) => {}
        other => panic!("expected UnsupportedSchema, got {other:?}"),
    }
    assert_eq!(std::fs::read(&db.0).unwrap(), bytes, "the file was changed");

    // An SQLite file that is not a store is refused too.
    let other = TempDb::new("foreign");
    let out = Command::new("python3")
        .args(["-c", "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nc.execute('CREATE TABLE t (x)')\nc.commit()"])
        .arg(&other.0)
        .status()
        .unwrap();
    assert!(out.success());
    let e = Store::open(&other.0).unwrap_err();
    assert!(e.to_string().contains("not a rerank store"), "{e}");
}

#[test]
fn readers_run_beside_a_writer() {
    let db = TempDb::new("concurrent");
    let store = Arc::new(Store::open(&db.0).unwrap());
    let docs = corpus();
    store.upsert(docs[..5].to_vec()).unwrap();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for (i, chunk) in docs[5..].chunks(4).enumerate() {
                store.upsert(chunk.to_vec()).unwrap();
                if i % 2 == 1 {
                    store.remove([chunk[0].id.as_str()]).unwrap();
                }
            }
        });
        let readers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let bm25 = store.bm25();
                    for i in 0..60 {
                        let hits = bm25.search(QUERIES[i % QUERIES.len()], 5).unwrap();
                        assert!(hits.len() <= 5);
                        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        for r in readers {
            r.join().unwrap();
        }
    });
    assert_bm25_parity(&store, &QUERIES);
    store.integrity_check().unwrap();
}

/// Batches the child writes; each is one transaction.
const BATCH: usize = 40;

/// Not a test on its own: the child process of `a_writer_killed_mid_indexing_loses_no_committed_batch`
/// (it runs only when that test starts it).
#[test]
#[ignore = "child process of the kill -9 test"]
fn child_process_writer_for_the_kill_test() {
    let Some(path) = std::env::var_os("RERANK_STORE_CHILD") else {
        return;
    };
    let store = Store::open(Path::new(&path)).unwrap();
    for batch in 0.. {
        let docs: Vec<Document> = (0..BATCH)
            .map(|i| {
                Document::new(
                    format!("b{batch}-d{i}"),
                    format!("batch {batch} document {i} about topic{} and words", i % 7),
                )
            })
            .collect();
        store.upsert(docs).unwrap();
        println!("committed {batch}");
    }
}

#[test]
fn a_writer_killed_mid_indexing_loses_no_committed_batch() {
    let db = TempDb::new("kill");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::child_process_writer_for_the_kill_test",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RERANK_STORE_CHILD", &db.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut committed = 0usize;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("committed ") {
            committed = n.trim().parse::<usize>().unwrap() + 1;
            if committed >= 8 {
                break;
            }
        }
    }
    assert!(committed >= 8, "the child stopped early");
    // Mid-batch: the child is writing its next transaction now.
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let store = Arc::new(Store::open(&db.0).unwrap());
    store.integrity_check().unwrap();
    let ids = store.ids().unwrap();
    assert_eq!(ids.len() % BATCH, 0, "a batch was half written");
    let batches = ids.len() / BATCH;
    assert!(
        batches >= committed,
        "{batches} batches stored, {committed} committed"
    );
    for b in 0..batches {
        for i in 0..BATCH {
            assert!(
                store.get(&format!("b{b}-d{i}")).unwrap().is_some(),
                "b{b}-d{i}"
            );
        }
    }
    assert_bm25_parity(&store, &["topic3 words", "batch 2 document 5"]);
    // The file takes writes again.
    store
        .upsert([Document::new("after", "written after the crash")])
        .unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    Upsert(usize, usize, Option<u32>),
    Remove(usize),
}

const WORDS: [&str; 8] = [
    "alpha", "beta", "gamma", "delta", "rust", "search", "rank", "store",
];

fn text_of(seed: usize) -> String {
    (0..1 + seed % 5)
        .map(|i| WORDS[(seed * 7 + i * 3) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..12, 0usize..40, proptest::option::of(0u32..3))
            .prop_map(|(d, t, p)| Op::Upsert(d, t, p)),
        (0usize..12).prop_map(Op::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// After any sequence of upserts and removes, the store ranks exactly like a fresh index
    /// over its documents, and holds what a map of the same operations holds.
    #[test]
    fn any_upsert_remove_sequence_matches_a_fresh_index(ops in proptest::collection::vec(op(), 1..30)) {
        let db = TempDb::new("prop");
        let store = Arc::new(Store::open(&db.0).unwrap());
        let mut model: std::collections::BTreeMap<String, Document> = Default::default();
        for op in &ops {
            match *op {
                Op::Upsert(d, t, page) => {
                    let mut doc = Document::new(format!("d{d}"), text_of(t));
                    doc.page = page;
                    model.insert(doc.id.clone(), doc.clone());
                    store.upsert([doc]).unwrap();
                }
                Op::Remove(d) => {
                    let id = format!("d{d}");
                    let was = model.remove(&id).is_some();
                    prop_assert_eq!(store.remove([id.as_str()]).unwrap(), usize::from(was));
                }
            }
        }
        let mut stored = store.documents().unwrap();
        stored.sort_by(|a, b| a.id.cmp(&b.id));
        prop_assert_eq!(stored, model.into_values().collect::<Vec<_>>());
        assert_bm25_parity(&store, &["alpha rust", "search rank store", "gamma gamma beta"]);
    }
}

#[test]
fn a_pipeline_config_with_a_store_section_recalls_from_the_file() {
    let db = TempDb::new("config");
    let yaml = format!(
        "retriever: {{ type: bm25 }}\nstore: {{ path: {:?} }}\nsearch: {{ top_k: 3 }}\n",
        db.0.display().to_string()
    );
    let config = rerank::PipelineConfig::from_yaml_str(&yaml).unwrap();
    let first = config.build(corpus()).unwrap();
    let want = first.search("Taylor's KTN").unwrap();
    drop(first);
    // Built again without documents: the store still holds them.
    let again = config.build(Vec::new()).unwrap();
    let got = again.search("Taylor's KTN").unwrap();
    assert_eq!(exact(&got.hits), exact(&want.hits));
    assert!(!got.hits.is_empty());

    let bad = yaml.replace("type: bm25", "type: bm25, k1: 1.2");
    let e = rerank::PipelineConfig::from_yaml_str(&bad)
        .unwrap()
        .build(Vec::new())
        .unwrap_err();
    assert!(e.to_string().contains("k1 0.9"), "{e}");
}

/// After the last `Store` of a file is dropped (or `checkpoint` returns), the file alone holds
/// every document: a copy of just that file opens with all of them.
#[test]
fn the_file_alone_holds_the_store_after_checkpoint_and_after_drop() {
    let many: Vec<Document> = (0..3000)
        .map(|i| Document::new(format!("d{i}"), text_of(i)))
        .collect();
    let db = TempDb::new("whole");
    let wal = PathBuf::from(format!("{}-wal", db.0.display()));
    let copy = TempDb::new("whole-copy");
    {
        let store = Arc::new(Store::open(&db.0).unwrap());
        for chunk in many.chunks(500) {
            store.upsert(chunk.to_vec()).unwrap();
        }
        // Readers leave pooled connections behind; they must not keep the log alive.
        let bm25 = store.bm25();
        assert!(!bm25
            .retrieve(&SearchQuery::new("alpha"), 5)
            .unwrap()
            .is_empty());
        assert!(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0) > 0);
        store.checkpoint().unwrap();
        assert_eq!(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0), 0);
        std::fs::copy(&db.0, &copy.0).unwrap();
        assert_eq!(Store::open(&copy.0).unwrap().len().unwrap(), many.len());
        copy.clean();
        store
            .upsert([Document::new("late", "written after the checkpoint")])
            .unwrap();
    }
    // Dropped: the log is gone and the file has the late write too.
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0);
    std::fs::copy(&db.0, &copy.0).unwrap();
    let reopened = Store::open(&copy.0).unwrap();
    assert_eq!(reopened.len().unwrap(), many.len() + 1);
    assert!(reopened.get("late").unwrap().is_some());
}

/// A store opened read-only is searched without a byte of the file changing; writes are refused
/// with a clear error; a missing path, an empty file and a truncated copy are refused on open.
#[test]
fn read_only_stores_are_searched_unchanged_and_bad_files_are_refused_on_open() {
    let db = TempDb::new("readonly");
    {
        let store = Store::open(&db.0).unwrap();
        store.upsert(corpus()).unwrap();
    }
    let before = std::fs::read(&db.0).unwrap();
    {
        let store = Arc::new(Store::open_read_only(&db.0).unwrap());
        assert!(store.is_read_only());
        assert_bm25_parity(&store, &QUERIES);
        let err = store.upsert([Document::new("x", "y")]).unwrap_err();
        assert!(err.to_string().contains("opened read-only"), "{err}");
        store.checkpoint().unwrap();
    }
    assert_eq!(std::fs::read(&db.0).unwrap(), before);

    let missing = TempDb::new("readonly-missing");
    let err = Store::open_read_only(&missing.0).unwrap_err();
    assert!(err.to_string().contains("no such store"), "{err}");
    std::fs::write(&missing.0, b"").unwrap();
    let err = Store::open_read_only(&missing.0).unwrap_err();
    assert!(err.to_string().contains("not a rerank store"), "{err}");
    assert_eq!(std::fs::metadata(&missing.0).unwrap().len(), 0);

    // A copy cut short is refused by both opens, before anything reads or writes it.
    let cut = TempDb::new("readonly-cut");
    std::fs::write(&cut.0, &before[..before.len() / 2]).unwrap();
    let opens: [fn(&Path) -> Result<Store>; 2] = [
        |p: &Path| Store::open(p),
        |p: &Path| Store::open_read_only(p),
    ];
    for open in opens {
        let err = open(cut.0.as_path()).unwrap_err();
        assert!(err.to_string().contains("the file is truncated"), "{err}");
    }
    assert_eq!(
        std::fs::metadata(&cut.0).unwrap().len() as usize,
        before.len() / 2
    );
}

/// Several openers creating the same new file at once all get the store (one creates the
/// schema, the others find it); none fails with "table meta already exists".
#[test]
fn concurrent_creators_of_a_new_store_all_succeed() {
    for round in 0..20 {
        let db = TempDb::new(&format!("race-{round}"));
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (path, barrier) = (db.0.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    Store::open(&path).map(|s| s.len())
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap().unwrap().unwrap(), 0, "round {round}");
        }
    }
}

/// Every (term, slot, tf) posting and every (slot, id, length) row of a store file, in order.
type Dump = (Vec<(String, i64, i64)>, Vec<(i64, String, i64)>);

fn dump(path: &Path) -> Dump {
    let conn = rusqlite::Connection::open(path).unwrap();
    let postings = conn
        .prepare("SELECT term, slot, tf FROM postings ORDER BY term, slot")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    let docs = conn
        .prepare("SELECT slot, id, length FROM documents ORDER BY slot")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    (postings, docs)
}

/// A corpus with titles, stopwords, inflections, upper case and non-ASCII text, repeated ids
/// (the last wins) and enough documents for many analyzed runs.
fn mixed_corpus(n: usize, salt: usize) -> Vec<Document> {
    const W: [&str; 14] = [
        "The",
        "running",
        "runs",
        "dogs",
        "of",
        "Café",
        "ΣΊΣΥΦΟΣ",
        "naïve",
        "studies",
        "β-cells",
        "under_score",
        "42",
        "Deployment",
        "rollback",
    ];
    (0..n)
        .map(|i| {
            let words: Vec<&str> = (0..1 + (i + salt) % 17)
                .map(|j| W[(i * 5 + j * 3 + salt) % W.len()])
                .collect();
            let doc = Document::new(format!("m{}", i % (n - n / 10)), words.join(" "));
            if i % 4 == 0 {
                doc.with_title(W[(i + salt) % W.len()])
            } else {
                doc
            }
        })
        .collect()
}

/// The store written in one parallel batch equals the store written one document at a time,
/// posting for posting, and both hold the postings of a plain per-document count of
/// `EnglishAnalyzer::analyze`.
#[test]
fn batched_parallel_writes_equal_one_document_at_a_time() {
    use rerank::text::{Analyzer, EnglishAnalyzer};
    let (one, many) = (TempDb::new("batch-one"), TempDb::new("batch-many"));
    let first = mixed_corpus(700, 0);
    let second = mixed_corpus(300, 5);
    {
        let store = Store::open(&one.0).unwrap();
        store.upsert(first.clone()).unwrap();
        store.upsert(second.clone()).unwrap();
        let serial = Store::open(&many.0).unwrap();
        // the last document of each id, one at a time, as a batch keeps it
        for batch in [&first, &second] {
            let mut last = std::collections::HashMap::new();
            for (i, d) in batch.iter().enumerate() {
                last.insert(d.id.clone(), i);
            }
            for (i, d) in batch.iter().enumerate() {
                if last[&d.id] == i {
                    serial.upsert([d.clone()]).unwrap();
                }
            }
        }
    }
    let (postings, docs) = dump(&one.0);
    assert_eq!((postings.clone(), docs.clone()), dump(&many.0));
    // the reference: each stored document's terms counted from `analyze`
    let store = Arc::new(Store::open(&one.0).unwrap());
    let stored = store.documents().unwrap();
    let analyzer = EnglishAnalyzer::default();
    let mut want = Vec::new();
    for ((slot, id, length), doc) in docs.iter().zip(&stored) {
        assert_eq!(*id, doc.id);
        let terms = analyzer.analyze(&doc.full_text());
        assert_eq!(*length, terms.len() as i64);
        let mut tf: std::collections::BTreeMap<String, i64> = Default::default();
        for t in terms {
            *tf.entry(t).or_insert(0) += 1;
        }
        want.extend(tf.into_iter().map(|(t, n)| (t, *slot, n)));
    }
    want.sort();
    assert_eq!(postings, want);
    assert_bm25_parity(
        &store,
        &["running dogs", "café naïve", "σίσυφος rollback", "42"],
    );
    store.integrity_check().unwrap();
}

/// Documents enough to fill three postings blocks (16,384 slots each): the store ranks as a
/// fresh index over them, before and after removing documents from the first block.
#[test]
fn postings_across_blocks_rank_exactly_like_a_fresh_index() {
    let db = TempDb::new("blocks");
    let words = [
        "alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta",
    ];
    let docs: Vec<Document> = (0..33_000usize)
        .map(|i| {
            let text = (0..4)
                .map(|j| words[(i / (j + 1) + j * 3) % words.len()])
                .chain([if i % 997 == 0 { "rare" } else { "common" }])
                .collect::<Vec<_>>()
                .join(" ");
            Document::new(format!("d{i}"), text)
        })
        .collect();
    let store = Arc::new(Store::open(&db.0).unwrap());
    for chunk in docs.chunks(5_000) {
        store.upsert(chunk.to_vec()).unwrap();
    }
    let queries = [
        "rare alpha",
        "gamma delta",
        "omega rare kappa",
        "common theta",
    ];
    assert_bm25_parity(&store, &queries);
    let rare: Vec<String> = store
        .bm25()
        .search("rare", 100)
        .unwrap()
        .iter()
        .map(|h| h.id().to_string())
        .collect();
    assert_eq!(
        rare.len(),
        34,
        "every document with the rare term, from every block"
    );
    store.remove((0..2_000).map(|i| format!("d{i}"))).unwrap();
    assert_bm25_parity(&store, &queries);
}

/// A store of `corpus()` taken back to an older schema by the SQL `downgrade`, run by Python's
/// sqlite3 as another program would.
fn older_store(name: &str, downgrade: &str) -> TempDb {
    let db = TempDb::new(name);
    Store::open(&db.0).unwrap().upsert(corpus()).unwrap();
    python_on(
        &db.0,
        &format!(
            "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n\
             c.executescript('''{downgrade}''')\nc.commit()"
        ),
    );
    db
}

/// The store's schema version and `table`'s columns, as Python's sqlite3 reads them.
fn version_and_columns(db: &Path, table: &str) -> String {
    python_on(
        db,
        &format!(
            "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n\
             print(c.execute('PRAGMA user_version').fetchone()[0])\n\
             print([r[1] for r in c.execute('PRAGMA table_info({table})')])"
        ),
    )
}

/// A store written with schema 1 (postings keyed by term) is upgraded to schema 2 when it is
/// opened for writing, and ranks as before; a read-only open of it says how to upgrade.
#[test]
fn a_schema_1_store_is_upgraded_when_opened_for_writing() {
    // Schema 1, as the crate wrote it before.
    let db = older_store(
        "upgrade",
        "CREATE TABLE p1 (term TEXT NOT NULL, slot INTEGER NOT NULL, \
             tf INTEGER NOT NULL, PRIMARY KEY (term, slot)) WITHOUT ROWID;\n\
           INSERT INTO p1 SELECT term, slot, tf FROM postings; DROP TABLE postings;\n\
           ALTER TABLE p1 RENAME TO postings; CREATE INDEX postings_slot ON postings (slot);\n\
           DROP TABLE encodings; PRAGMA user_version = 1;",
    );
    let e = Store::open_read_only(&db.0).unwrap_err().to_string();
    assert!(
        e.contains("schema 1") && e.contains("opens the file for writing"),
        "{e}"
    );
    let store = Arc::new(Store::open(&db.0).unwrap());
    assert_bm25_parity(&store, &QUERIES);
    assert_eq!(
        version_and_columns(&db.0, "postings"),
        "3\n['block', 'term', 'slot', 'tf']\n"
    );
    drop(store);
    assert!(Store::open_read_only(&db.0).is_ok());
}

/// A store written with schema 2 (no `encodings` table) gets the table when it is opened for
/// writing (schema 3), keeping its documents; a read-only open of it says how to upgrade.
#[test]
fn a_schema_2_store_gets_the_encodings_table_when_opened_for_writing() {
    let db = older_store(
        "upgrade-2",
        "DROP TABLE encodings; PRAGMA user_version = 2;",
    );
    let e = Store::open_read_only(&db.0).unwrap_err().to_string();
    assert!(e.contains("schema 2"), "{e}");
    let store = Arc::new(Store::open(&db.0).unwrap());
    assert_eq!(store.len().unwrap(), corpus().len());
    assert_eq!(
        version_and_columns(&db.0, "encodings"),
        "3\n['content_hash', 'model', 'rows', 'data']\n"
    );
    assert_bm25_parity(&store, &QUERIES);
}
