//! `MilvusRetriever` against a real Milvus (standalone, `scripts/milvus.sh`): collections,
//! upserts, deletes, filters evaluated by Milvus (and never injectable), the pipeline and hybrid
//! fusion on top, a server that goes down and comes back, and Cranfield hybrid recall equal to
//! the in-memory one.
//!
//! `.ci/run` starts the server and sets `RERANK_MILVUS_URL` (and `RERANK_MILVUS_DIR`, its data
//! directory, which the restart test needs). Without them the tests skip with a message, and
//! fail in CI. Milvus's ports are fixed, so the tests take turns (one lock).
#![cfg(feature = "milvus")]

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ndarray::Array2;
use rerank::pipeline::{Filter, SearchRequest};
use rerank::recall::{FallbackRetriever, MilvusRetriever, SearchQuery};
use rerank::{Bm25Index, Document, Embedder, Error, Hybrid, Pipeline, Result, Retriever};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/milvus.sh");
/// How long a write may take to show in searches: Milvus's bounded staleness (about a second)
/// with room for a 2-core machine running the rest of the suite. Only a failure waits it out.
const VISIBLE: Duration = Duration::from_secs(60);

/// How long a restarted server may take to load its collections again (a minute or two on a
/// loaded 2-core machine; only a failure waits it out).
const RELOAD: Duration = Duration::from_secs(300);

static TURN: Mutex<()> = Mutex::new(());

/// The server's URL and this test's turn, or `None` (skipped) without a server.
fn server() -> Option<(MutexGuard<'static, ()>, String)> {
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    match std::env::var("RERANK_MILVUS_URL") {
        Ok(url) if !url.is_empty() => Some((turn, url)),
        _ => {
            crate::common::skip(
                "skipping: RERANK_MILVUS_URL is not set (scripts/milvus.sh start DIR starts one)",
            );
            None
        }
    }
}

/// A collection name of this test and process.
fn collection(tag: &str) -> String {
    format!("rerank_it_{tag}_{}", std::process::id())
}

/// Words hashed into 64 buckets, L2-normalized: documents sharing words are close.
struct Words;
impl Embedder for Words {
    fn embed_as(&self, texts: &[&str], _role: rerank::Role) -> Result<Array2<f32>> {
        let mut m = Array2::<f32>::zeros((texts.len(), 64));
        for (i, t) in texts.iter().enumerate() {
            for w in t.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
                if w.is_empty() {
                    continue;
                }
                let h = w.bytes().fold(2166136261u32, |h, b| {
                    (h ^ u32::from(b)).wrapping_mul(16777619)
                });
                m[[i, (h % 64) as usize]] += 1.0;
            }
            let norm = m.row(i).dot(&m.row(i)).sqrt().max(1e-6);
            m.row_mut(i).mapv_inplace(|x| x / norm);
        }
        Ok(m)
    }
    fn dim(&self) -> usize {
        64
    }
}

fn retriever(url: &str, name: &str) -> MilvusRetriever {
    let m = MilvusRetriever::builder(url, name, Arc::new(Words))
        .build()
        .unwrap();
    m.drop_collection().unwrap();
    m
}

fn corpus() -> Vec<Document> {
    vec![
        Document::new("rust", "rust ownership and borrowing rules")
            .with_source("notes/rust.md")
            .with_metadata("lang", "en"),
        Document::new("py", "python garbage collector and reference counting")
            .with_source("notes/python.md")
            .with_page(2)
            .with_metadata("lang", "en"),
        Document::new("milvus", "milvus is a vector database that scales out")
            .with_title("Milvus")
            .with_source("docs/milvus.md")
            .with_metadata("lang", "de"),
        Document::new("redis", "redis keeps a shared cache for replicas")
            .with_source("docs/redis.md")
            .with_metadata("lang", "en"),
    ]
}

/// Polls `f` until it is true or `VISIBLE` passes.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < VISIBLE,
            "not visible after {VISIBLE:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn ids(hits: &[rerank::Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.id()).collect()
}

#[test]
fn upsert_search_replace_delete_and_drop() {
    let Some((_turn, url)) = server() else { return };
    let m = retriever(&url, &collection("crud"));
    assert!(!m.exists().unwrap());
    assert!(m.ensure_collection().unwrap());
    assert!(!m.ensure_collection().unwrap(), "the second call finds it");
    assert_eq!(m.upsert(&corpus()).unwrap(), 4);
    eventually("4 rows", || m.count().unwrap() == 4);

    let hits = m.retrieve(&SearchQuery::new("vector database"), 2).unwrap();
    assert_eq!(hits[0].id(), "milvus");
    let doc = &hits[0].document;
    assert_eq!(doc.text, "milvus is a vector database that scales out");
    assert_eq!(doc.title.as_deref(), Some("Milvus"));
    assert_eq!(doc.source.as_deref(), Some("docs/milvus.md"));
    assert_eq!(doc.metadata.get("lang"), Some(&serde_json::json!("de")));
    assert!(hits[0].score > hits[1].score);
    assert_eq!(hits[0].vector_score, Some(hits[0].score));
    let py = m.retrieve(&SearchQuery::new("python garbage"), 1).unwrap();
    assert_eq!(py[0].document.page, Some(2));

    // An upsert replaces the row of the same id.
    let new = Document::new("milvus", "milvus now stores embeddings of images");
    m.upsert(std::slice::from_ref(&new)).unwrap();
    eventually("the replaced text", || {
        let hits = m
            .retrieve(&SearchQuery::new("embeddings images"), 1)
            .unwrap();
        hits[0].id() == "milvus" && hits[0].document.text == new.text
    });
    eventually("4 rows after the replace", || m.count().unwrap() == 4);

    assert_eq!(m.delete(&["rust", "no-such-id"]).unwrap(), 1);
    eventually("rust deleted", || {
        let hits = m.retrieve(&SearchQuery::new("rust ownership"), 4).unwrap();
        !ids(&hits).contains(&"rust")
    });
    let present = m.existing_ids(&["rust", "py", "redis", "zzz"]).unwrap();
    let mut present: Vec<&str> = present.iter().map(String::as_str).collect();
    present.sort();
    assert_eq!(present, ["py", "redis"]);

    assert!(m.retrieve(&SearchQuery::new("x"), 0).unwrap().is_empty());
    assert!(m.drop_collection().unwrap());
    assert!(!m.exists().unwrap());
}

#[test]
fn filters_are_evaluated_by_milvus_and_values_cannot_inject() {
    let Some((_turn, url)) = server() else { return };
    let m = retriever(&url, &collection("filters"));
    m.upsert(&corpus()).unwrap();
    eventually("4 rows", || m.count().unwrap() == 4);
    let search = |filters: Vec<Filter>, k: usize| {
        let q = SearchQuery::new("rust ownership").with_filters(filters);
        let mut got: Vec<String> = m
            .retrieve(&q, k)
            .unwrap()
            .iter()
            .map(|h| h.id().to_string())
            .collect();
        got.sort();
        got
    };
    // k = 1 and a filter that excludes the best match: Milvus returns the best passing one.
    assert_eq!(
        search(vec![Filter::eq("source", "docs/redis.md")], 1),
        ["redis"]
    );
    assert_eq!(search(vec![Filter::eq("lang", "de")], 4), ["milvus"]);
    assert_eq!(
        search(vec![Filter::one_of("lang", ["de", "xx"])], 4),
        ["milvus"]
    );
    assert_eq!(
        search(vec![Filter::prefix("source", "notes/")], 4),
        ["py", "rust"]
    );
    assert_eq!(search(vec![Filter::eq("page", 2)], 4), ["py"]);
    assert_eq!(
        search(
            vec![Filter::eq("lang", "en"), Filter::prefix("source", "docs/")],
            4
        ),
        ["redis"]
    );
    assert_eq!(search(vec![Filter::eq("id", "py")], 4), ["py"]);
    // A value that would close the literal and widen the expression matches nothing.
    for evil in [
        r#"x" || doc_id != ""#,
        r#"x\" || doc_id != \""#,
        "x\" or 1 == 1 or \"",
    ] {
        assert!(
            search(vec![Filter::eq("source", evil)], 4).is_empty(),
            "{evil}"
        );
        assert!(search(vec![Filter::eq(evil, "en")], 4).is_empty(), "{evil}");
    }
    // Prefixes Milvus cannot express are left to the pipeline: the search is unfiltered.
    assert_eq!(search(vec![Filter::prefix("source", "docs_")], 4).len(), 4);
    m.drop_collection().unwrap();
}

#[test]
fn pipeline_and_hybrid_use_milvus_like_any_retriever() {
    let Some((_turn, url)) = server() else { return };
    let m = Arc::new(retriever(&url, &collection("pipeline")));
    m.upsert(&corpus()).unwrap();
    eventually("4 rows", || m.count().unwrap() == 4);
    let bm25 = Arc::new(Bm25Index::new());
    bm25.add(corpus()).unwrap();
    let hybrid = Hybrid::new(rerank::recall::Fusion::Rrf { k: 60.0 })
        .with(bm25.clone(), 1.0)
        .with(m.clone(), 1.0);
    let pipeline = Pipeline::builder()
        .retriever(hybrid)
        .top_k(2)
        .build()
        .unwrap();
    let response = pipeline.search("shared cache for replicas").unwrap();
    assert_eq!(response.hits[0].id(), "redis");

    let pipeline = Pipeline::builder()
        .retriever(m.clone())
        .top_k(3)
        .build()
        .unwrap();
    let request = SearchRequest::new("garbage collector").filter(Filter::eq("lang", "de"));
    let response = pipeline.search_with(&request).unwrap();
    assert_eq!(ids(&response.hits), ["milvus"]);
    m.drop_collection().unwrap();
}

#[test]
fn a_collection_of_another_dimension_is_refused() {
    let Some((_turn, url)) = server() else { return };
    let name = collection("dim");
    let m = retriever(&url, &name);
    m.ensure_collection().unwrap();
    struct Small;
    impl Embedder for Small {
        fn embed_as(&self, texts: &[&str], _role: rerank::Role) -> Result<Array2<f32>> {
            Ok(Array2::ones((texts.len(), 8)))
        }
        fn dim(&self) -> usize {
            8
        }
    }
    let other = MilvusRetriever::builder(&url, &name, Arc::new(Small))
        .build()
        .unwrap();
    let e = other.ensure_collection().unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e:?}");
    assert!(e.to_string().contains("dimension 64"), "{e}");
    let e = other.upsert(&corpus()).unwrap_err();
    assert!(e.to_string().contains("dimension 64"), "{e}");
    // Searching a collection that does not exist names it and is not retried.
    let missing = MilvusRetriever::builder(&url, collection("missing"), Arc::new(Words))
        .build()
        .unwrap();
    let t = Instant::now();
    let e = missing.retrieve(&SearchQuery::new("x"), 3).unwrap_err();
    assert!(e.to_string().contains("rerank_it_missing"), "{e}");
    assert!(e.to_string().contains("not retried"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    m.drop_collection().unwrap();
}

fn script(args: &[&str]) {
    let status = Command::new("bash")
        .arg(SCRIPT)
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "scripts/milvus.sh {args:?} failed");
}

#[test]
fn milvus_down_is_a_typed_error_or_the_fallback_and_comes_back_after_a_restart() {
    let Some((_turn, url)) = server() else { return };
    let Some(dir) = std::env::var_os("RERANK_MILVUS_DIR").map(PathBuf::from) else {
        crate::common::skip("skipping: RERANK_MILVUS_DIR (the server's data directory) is not set");
        return;
    };
    let dir = dir.to_str().unwrap().to_string();
    let name = collection("restart");
    let m = Arc::new(
        MilvusRetriever::builder(&url, &name, Arc::new(Words))
            // Generous for the live server on a loaded machine; the stopped one refuses
            // connections at once, whatever the timeouts.
            .timeouts(Duration::from_secs(30), Duration::from_secs(5))
            .max_retries(2)
            .backoff(Duration::from_millis(100), Duration::from_millis(400))
            .build()
            .unwrap(),
    );
    m.drop_collection().unwrap();
    m.upsert(&corpus()).unwrap();
    eventually("4 rows", || m.count().unwrap() == 4);
    let bm25 = Arc::new(Bm25Index::new());
    bm25.add(corpus()).unwrap();
    let fallback = Arc::new(FallbackRetriever::new(m.clone(), bm25));
    let with_fallback = Pipeline::builder()
        .retriever(fallback.clone())
        .top_k(2)
        .build()
        .unwrap();
    let plain = Pipeline::builder()
        .retriever(m.clone())
        .top_k(2)
        .build()
        .unwrap();

    script(&["stop", &dir]);
    let t = Instant::now();
    let e = plain.search("vector database").unwrap_err();
    let elapsed = t.elapsed();
    assert!(matches!(e, Error::Http { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("milvus collection") && text.contains(&name),
        "{text}"
    );
    assert!(text.contains("gave up after 3 attempts"), "{text}");
    // Three refused connections and two backoffs: well under one call timeout each.
    assert!(elapsed < Duration::from_secs(8), "{elapsed:?}");
    let response = with_fallback.search("vector database").unwrap();
    assert_eq!(
        response.hits[0].id(),
        "milvus",
        "BM25 answers while Milvus is down"
    );
    assert!(!m.is_healthy());

    // Back on the same data: while the collection loads, searches are typed errors (not
    // retried: Milvus reports them in its reply); then the rows are all there again.
    script(&["start", &dir]);
    assert!(m.is_healthy());
    let start = Instant::now();
    while let Err(e) = plain.search("vector database") {
        assert!(matches!(e, Error::Http { .. }), "{e:?}");
        assert!(
            start.elapsed() < RELOAD,
            "Milvus did not serve the collection again: {e}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        plain.search("vector database").unwrap().hits[0].id(),
        "milvus"
    );
    assert_eq!(m.count().unwrap(), 4);
    let before = fallback.fallbacks();
    assert_eq!(
        with_fallback.search("vector database").unwrap().hits[0].id(),
        "milvus"
    );
    assert_eq!(fallback.fallbacks(), before, "Milvus answers again");
    m.drop_collection().unwrap();
}

/// Cranfield hybrid (BM25 + MiniLM, RRF) with Milvus as the dense side equals the in-memory
/// hybrid within 0.002 nDCG@10.
#[cfg(feature = "models")]
#[test]
fn cranfield_hybrid_with_milvus_matches_in_memory() {
    let Some((_turn, url)) = server() else { return };
    let Some(s) = crate::dense_beir::setup("cranfield") else {
        return;
    };
    let m = MilvusRetriever::builder(&url, collection("cranfield"), s.embedder.clone())
        .store_text(false, 0)
        .build()
        .unwrap();
    m.drop_collection().unwrap();
    let n = s.data.corpus.len();
    assert_eq!(
        m.upsert_embedded(&s.data.corpus, &s.corpus_embeddings)
            .unwrap(),
        n
    );
    assert_eq!(m.wait_until_count(n, VISIBLE).unwrap(), n);
    let m = Arc::new(m);
    let milvus_hybrid = Hybrid::new(crate::dense_beir::HYBRID_FUSION)
        .with(s.bm25.clone(), 1.0)
        .with(m.clone(), 1.0)
        .depth(crate::dense_beir::DEPTH);
    let dense_memory = s.ndcg10(&s.run(s.dense.as_ref()));
    let dense_milvus = s.ndcg10(&s.run(m.as_ref()));
    let memory = s.ndcg10(&s.run(&s.hybrid()));
    let milvus = s.ndcg10(&s.run(&milvus_hybrid));
    eprintln!(
        "cranfield nDCG@10: dense in memory {dense_memory:.4}, Milvus {dense_milvus:.4}; \
         hybrid in memory {memory:.4}, with Milvus {milvus:.4}"
    );
    assert!((dense_memory - dense_milvus).abs() <= 0.002);
    assert!((memory - milvus).abs() <= 0.002);
    m.drop_collection().unwrap();
}
