//! SemanticCache: threshold, TTLs, tags and keys, stats, the negation / swapped-entity guard,
//! store failures, concurrency, and the pipeline integration.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ndarray::Array2;
use rerank::cache::{
    CacheEntry, CacheStore, InsertOptions, ManualClock, MemoryStore, SemanticCache,
};
use rerank::recall::SearchQuery;
use rerank::{Bm25Index, Document, Embedder, Error, Hit, Pipeline, Result, Retriever};

/// A unit vector at cosine `c` from `[1, 0, 0]`.
fn at_cosine(c: f32) -> Vec<f32> {
    vec![c, (1.0 - c * c).sqrt(), 0.0]
}

const BASE: [f32; 3] = [1.0, 0.0, 0.0];

fn cache_with_clock() -> (SemanticCache<String>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let cache = SemanticCache::builder()
        .ttl(Duration::from_secs(10))
        .short_ttl(Duration::from_secs(2))
        .clock(clock.clone())
        .build()
        .unwrap();
    (cache, clock)
}

#[test]
fn hit_at_the_threshold_and_miss_below_it() {
    let cache: SemanticCache<String> = SemanticCache::new();
    assert_eq!(cache.config().threshold, 0.92);
    assert!(cache.insert("refund policy", BASE.to_vec(), "30 days".into()));
    assert_eq!(
        cache.get("refund policy", &at_cosine(0.92)).as_deref(),
        Some("30 days")
    );
    assert_eq!(cache.get("refund policy", &at_cosine(0.919)), None);
    assert_eq!(cache.get("refund policy", &at_cosine(0.5)), None);
    assert_eq!(
        cache.get("refund policy", &at_cosine(1.0)).as_deref(),
        Some("30 days")
    );
    // Length does not matter, direction does.
    assert_eq!(
        cache.get("refund policy", &[3.0, 0.0, 0.0]).as_deref(),
        Some("30 days")
    );
    // A custom threshold.
    let strict: SemanticCache<String> = SemanticCache::builder().threshold(0.99).build().unwrap();
    strict.insert("refund policy", BASE.to_vec(), "30 days".into());
    assert_eq!(strict.get("refund policy", &at_cosine(0.98)), None);
    assert!(strict.get("refund policy", &at_cosine(0.99)).is_some());
    // Bad settings fail at build time.
    for bad in [0.0, 1.5, f32::NAN] {
        assert!(SemanticCache::<String>::builder()
            .threshold(bad)
            .build()
            .is_err());
    }
    assert!(SemanticCache::<String>::builder()
        .ttl(Duration::ZERO)
        .build()
        .is_err());
}

#[test]
fn the_best_match_wins() {
    let cache: SemanticCache<String> = SemanticCache::new();
    cache.insert("refund policy", at_cosine(0.95), "far".into());
    cache.insert("refund policy details", at_cosine(0.99), "near".into());
    assert_eq!(cache.get("refund policy", &BASE).as_deref(), Some("near"));
}

#[test]
fn ttl_expiry_and_short_ttl() {
    let (cache, clock) = cache_with_clock();
    cache.insert("refund policy", BASE.to_vec(), "normal".into());
    cache.insert_with(
        "baggage allowance",
        vec![0.0, 1.0, 0.0],
        "short".into(),
        &InsertOptions::default().short(),
    );
    cache.insert_with(
        "lounge access",
        vec![0.0, 0.0, 1.0],
        "custom".into(),
        &InsertOptions::default().ttl(Duration::from_secs(30)),
    );
    clock.advance(Duration::from_millis(1999));
    assert!(cache.get("baggage allowance", &[0.0, 1.0, 0.0]).is_some());
    clock.advance(Duration::from_millis(1));
    assert!(cache.get("baggage allowance", &[0.0, 1.0, 0.0]).is_none());
    assert!(cache.get("refund policy", &BASE).is_some());
    clock.set(Duration::from_millis(9999));
    assert!(cache.get("refund policy", &BASE).is_some());
    clock.set(Duration::from_secs(10));
    assert!(cache.get("refund policy", &BASE).is_none());
    assert!(cache.get("lounge access", &[0.0, 0.0, 1.0]).is_some());
    assert_eq!(cache.stats().entries, 3);
    assert_eq!(cache.purge_expired(), 2);
    assert_eq!(cache.stats().entries, 1);
    // No TTL: entries live until invalidated.
    let clock = Arc::new(ManualClock::new());
    let forever: SemanticCache<String> = SemanticCache::builder()
        .no_ttl()
        .clock(clock.clone())
        .build()
        .unwrap();
    forever.insert("refund policy", BASE.to_vec(), "x".into());
    clock.advance(Duration::from_secs(10 * 365 * 24 * 3600));
    assert!(forever.get("refund policy", &BASE).is_some());
}

#[test]
fn invalidation_by_tag_key_and_clear() {
    let cache: SemanticCache<String> = SemanticCache::new();
    let a = vec![1.0, 0.0, 0.0];
    let b = vec![0.0, 1.0, 0.0];
    let c = vec![0.0, 0.0, 1.0];
    cache.insert_with(
        "directors duties",
        a.clone(),
        "companies".into(),
        &InsertOptions::tagged(["Companies Act"]),
    );
    cache.insert_with(
        "liquidator powers",
        b.clone(),
        "insolvency".into(),
        &InsertOptions::tagged(["Insolvency Act", "Companies Act 2"]),
    );
    cache.insert("What is the refund policy?", c.clone(), "refund".into());
    assert_eq!(cache.stats().entries, 3);

    assert_eq!(cache.invalidate_tag("Companies Act"), 1);
    assert_eq!(cache.get("directors duties", &a), None);
    assert!(cache.get("liquidator powers", &b).is_some());
    assert_eq!(cache.invalidate_tag("Companies Act"), 0);

    // Keys are normalized query texts.
    assert_eq!(
        SemanticCache::<String>::key_for("What is the refund POLICY?"),
        "what is the refund policy"
    );
    assert_eq!(cache.invalidate_key("what is the refund policy"), 1);
    assert_eq!(cache.get("What is the refund policy?", &c), None);
    assert!(cache.get("liquidator powers", &b).is_some());

    cache.clear();
    assert_eq!(cache.get("liquidator powers", &b), None);
    assert_eq!(cache.stats().entries, 0);
}

#[test]
fn scopes_do_not_mix() {
    let cache: SemanticCache<String> = SemanticCache::new();
    cache.insert_with(
        "refund policy",
        BASE.to_vec(),
        "top 5".into(),
        &InsertOptions::default().scope("top_k=5"),
    );
    assert!(cache
        .get_scoped("top_k=5", "refund policy", &BASE)
        .is_some());
    assert!(cache
        .get_scoped("top_k=10", "refund policy", &BASE)
        .is_none());
    assert!(cache.get("refund policy", &BASE).is_none());
    // Key invalidation reaches every scope.
    assert_eq!(cache.invalidate_key("refund policy"), 1);
}

#[test]
fn stats_count_hits_misses_entries_and_rate() {
    let cache: SemanticCache<String> = SemanticCache::new();
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.entries), (0, 0, 0));
    assert_eq!(s.hit_rate, 0.0);
    cache.insert("refund policy", BASE.to_vec(), "x".into());
    cache.get("refund policy", &BASE);
    cache.get("refund policy", &BASE);
    cache.get("refund policy", &BASE);
    cache.get("other", &[0.0, 1.0, 0.0]);
    let s = cache.stats();
    assert_eq!((s.hits, s.misses, s.entries), (3, 1, 1));
    assert_eq!(s.hit_rate, 0.75);
}

#[test]
fn negation_and_swapped_entities_never_hit_each_other() {
    // Identical embeddings: only the guard stands between these queries.
    let cache: SemanticCache<String> = SemanticCache::new();
    let e = vec![0.6, 0.8, 0.0];
    cache.insert("flights that allow pets", e.clone(), "allow".into());
    assert_eq!(cache.get("flights that do not allow pets", &e), None);
    assert_eq!(cache.get("flights that don't allow pets", &e), None);
    assert_eq!(
        cache.get("Flights that allow pets?", &e).as_deref(),
        Some("allow")
    );

    let cache: SemanticCache<String> = SemanticCache::new();
    cache.insert("flights that do not allow pets", e.clone(), "deny".into());
    assert_eq!(cache.get("flights that allow pets", &e), None);
    assert_eq!(
        cache.get("flights that don't allow pets", &e).as_deref(),
        Some("deny")
    );

    let cache: SemanticCache<String> = SemanticCache::new();
    cache.insert("flights from Boston to Denver", e.clone(), "BOS-DEN".into());
    assert_eq!(cache.get("flights from Denver to Boston", &e), None);
    cache.insert("did Alice sue Bob", vec![0.0, 0.0, 1.0], "yes".into());
    assert_eq!(cache.get("did Bob sue Alice", &[0.0, 0.0, 1.0]), None);
    // Different numbers are different questions.
    cache.insert("what does section 5 say", vec![1.0, 1.0, 0.0], "s5".into());
    assert_eq!(cache.get("what does section 6 say", &[1.0, 1.0, 0.0]), None);
    assert!(rerank::cache::may_share_answer(
        "what does section 5 say",
        "What does Section 5 say?"
    ));
}

/// Real all-MiniLM-L6-v2 embeddings of the guard's query pairs (tests/data/minilm_guard.json).
fn minilm_fixture() -> Vec<(String, Vec<f32>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/minilm_guard.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let e = c["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            (c["text"].as_str().unwrap().to_string(), e)
        })
        .collect()
}

#[test]
fn guard_holds_with_real_minilm_embeddings() {
    let cases = minilm_fixture();
    let get = |text: &str| cases.iter().find(|(t, _)| t == text).unwrap().1.clone();
    for (a, b) in [
        ("flights that allow pets", "flights that do not allow pets"),
        (
            "flights from Boston to Denver",
            "flights from Denver to Boston",
        ),
    ] {
        let (ea, eb) = (get(a), get(b));
        assert_eq!(ea.len(), 384);
        // MiniLM puts each pair above the default threshold (0.95 and 0.997): only the guard
        // keeps their answers apart.
        let similarity = rerank::embed::cosine(&ea, &eb);
        assert!(similarity >= 0.92, "{a} / {b}: {similarity}");
        for (stored, stored_e, asked, asked_e) in [(a, &ea, b, &eb), (b, &eb, a, &ea)] {
            let cache: SemanticCache<String> = SemanticCache::new();
            cache.insert(stored, stored_e.clone(), stored.to_string());
            assert_eq!(cache.get(asked, asked_e), None, "{asked} hit {stored}");
            assert_eq!(cache.get(stored, stored_e).as_deref(), Some(stored));
        }
    }
}

/// A store whose operations fail on demand.
struct Flaky {
    inner: MemoryStore<String>,
    fail_reads: AtomicBool,
    fail_writes: AtomicBool,
}

impl Flaky {
    fn new() -> Self {
        Flaky {
            inner: MemoryStore::default(),
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
        }
    }
    fn check(&self, flag: &AtomicBool) -> Result<()> {
        if flag.load(Ordering::SeqCst) {
            Err(Error::InvalidInput("store down".into()))
        } else {
            Ok(())
        }
    }
}

impl CacheStore<String> for Flaky {
    fn put(&self, entry: CacheEntry<String>) -> Result<()> {
        self.check(&self.fail_writes)?;
        self.inner.put(entry)
    }
    fn nearest(
        &self,
        scope: &str,
        embedding: &[f32],
        min_similarity: f32,
        limit: usize,
        now: Duration,
    ) -> Result<Vec<(f32, CacheEntry<String>)>> {
        self.check(&self.fail_reads)?;
        self.inner
            .nearest(scope, embedding, min_similarity, limit, now)
    }
    fn remove_key(&self, key: &str) -> Result<usize> {
        self.check(&self.fail_writes)?;
        self.inner.remove_key(key)
    }
    fn remove_tag(&self, tag: &str) -> Result<usize> {
        self.check(&self.fail_writes)?;
        self.inner.remove_tag(tag)
    }
    fn remove_expired(&self, now: Duration) -> Result<usize> {
        self.check(&self.fail_writes)?;
        self.inner.remove_expired(now)
    }
    fn clear(&self) -> Result<()> {
        self.check(&self.fail_writes)?;
        self.inner.clear()
    }
    fn len(&self) -> Result<usize> {
        self.check(&self.fail_reads)?;
        self.inner.len()
    }
}

#[test]
fn store_failures_are_misses_never_errors_or_stale_data() {
    let store = Arc::new(Flaky::new());
    let clock = Arc::new(ManualClock::new());
    let cache: SemanticCache<String> = SemanticCache::builder()
        .store(store.clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    let a = vec![1.0, 0.0, 0.0];
    let b = vec![0.0, 1.0, 0.0];
    assert!(cache.insert_with(
        "directors duties",
        a.clone(),
        "v1".into(),
        &InsertOptions::tagged(["act"])
    ));
    assert!(cache.insert("refund policy", b.clone(), "r1".into()));

    // Reads fail: misses, and stats still work.
    store.fail_reads.store(true, Ordering::SeqCst);
    assert_eq!(cache.get("directors duties", &a), None);
    assert_eq!(cache.stats().entries, 0);
    assert_eq!(cache.stats().misses, 1);
    store.fail_reads.store(false, Ordering::SeqCst);
    assert!(cache.get("directors duties", &a).is_some());

    // Writes fail: an insert is a no-op, and failed invalidations still hide what they cover.
    store.fail_writes.store(true, Ordering::SeqCst);
    assert!(!cache.insert("lounge access", vec![0.0, 0.0, 1.0], "l".into()));
    assert_eq!(cache.invalidate_tag("act"), 0);
    assert_eq!(cache.invalidate_key("refund policy"), 0);
    assert_eq!(
        cache.get("directors duties", &a),
        None,
        "stale after a failed tag invalidation"
    );
    assert_eq!(
        cache.get("refund policy", &b),
        None,
        "stale after a failed key invalidation"
    );
    store.fail_writes.store(false, Ordering::SeqCst);
    // A fresh entry written later is served again.
    clock.advance(Duration::from_millis(5));
    assert!(cache.insert_with(
        "directors duties",
        a.clone(),
        "v2".into(),
        &InsertOptions::tagged(["act"])
    ));
    assert_eq!(cache.get("directors duties", &a).as_deref(), Some("v2"));

    // A failed clear hides everything inserted before it.
    store.fail_writes.store(true, Ordering::SeqCst);
    cache.clear();
    store.fail_writes.store(false, Ordering::SeqCst);
    assert_eq!(cache.get("directors duties", &a), None);
    // Embeddings with NaN never hit and are never stored.
    assert!(!cache.insert("nan", vec![f32::NAN, 0.0, 0.0], "n".into()));
    assert_eq!(cache.get("directors duties", &[f32::NAN, 0.0, 0.0]), None);
}

#[test]
fn concurrent_get_set_invalidate() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SemanticCache<rerank::SearchResponse>>();
    assert_send_sync::<rerank::PiiGuard>();
    let cache: Arc<SemanticCache<String>> = Arc::new(SemanticCache::new());
    let threads = 8;
    let rounds = 200;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                let mut gets = 0u64;
                for i in 0..rounds {
                    // Each thread owns one direction; entries are tagged by thread.
                    let mut e = vec![0.0f32; threads];
                    e[t] = 1.0;
                    let query = format!("topic{t} question");
                    let tag = format!("thread-{t}");
                    cache.insert_with(
                        &query,
                        e.clone(),
                        format!("{t}:{i}"),
                        &InsertOptions::tagged([tag.as_str()]),
                    );
                    if let Some(v) = cache.get(&query, &e) {
                        // Only this thread writes this key: a hit is one of its own values.
                        assert!(v.starts_with(&format!("{t}:")), "{v}");
                    }
                    gets += 1;
                    match i % 3 {
                        0 => {
                            cache.invalidate_tag(&tag);
                        }
                        1 => {
                            cache.invalidate_key(&query);
                        }
                        _ => {
                            let _ = cache.stats();
                        }
                    }
                    // Another thread's direction never matches this one.
                    let mut other = vec![0.0f32; threads];
                    other[(t + 1) % threads] = 1.0;
                    if let Some(v) = cache.get(&query, &other) {
                        panic!("cross-thread hit: {v}");
                    }
                    gets += 1;
                }
                gets
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let s = cache.stats();
    assert_eq!(s.hits + s.misses, total);
    assert!(s.hits > 0);
    assert!(s.entries <= threads);
    cache.clear();
    assert_eq!(cache.stats().entries, 0);
}

/// Embeds the content words of a text as a normalized bag of hashed words, ignoring the
/// function words and negations: "allow" and "do not allow" embed identically, the worst case
/// for a cache.
struct ContentWords {
    calls: AtomicUsize,
    fail: bool,
}

const IGNORED: [&str; 10] = [
    "that", "do", "not", "don't", "the", "is", "what", "a", "of", "?",
];

impl Embedder for ContentWords {
    fn embed_as(&self, texts: &[&str], _role: rerank::Role) -> Result<Array2<f32>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err(Error::model("embedder down"));
        }
        let dim = 64;
        let mut m = Array2::<f32>::zeros((texts.len(), dim));
        for (i, t) in texts.iter().enumerate() {
            for w in t.to_lowercase().split_whitespace() {
                let w = w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'');
                if w.is_empty() || IGNORED.contains(&w) {
                    continue;
                }
                let h = w
                    .bytes()
                    .fold(7usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
                m[[i, h % dim]] += 1.0;
            }
            let norm = m.row(i).dot(&m.row(i)).sqrt();
            if norm > 0.0 {
                m.row_mut(i).mapv_inplace(|x| x / norm);
            }
        }
        Ok(m)
    }
    fn dim(&self) -> usize {
        64
    }
}

struct Counting {
    inner: Bm25Index,
    calls: Arc<AtomicUsize>,
}

impl Retriever for Counting {
    fn retrieve(&self, q: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.retrieve(q, k)
    }
}

fn travel_index() -> Bm25Index {
    let index = Bm25Index::new();
    index
        .add(vec![
            Document::new("pets", "Airlines whose flights allow pets in the cabin")
                .with_source("pets.md"),
            Document::new("nopets", "Flights that never take pets").with_source("nopets.md"),
            Document::new("refund", "The refund policy gives 30 days").with_source("refund.md"),
        ])
        .unwrap();
    index
}

#[test]
fn the_pipeline_caches_responses() {
    let calls = Arc::new(AtomicUsize::new(0));
    let cache = Arc::new(SemanticCache::new());
    let pipeline = Pipeline::builder()
        .retriever(Counting {
            inner: travel_index(),
            calls: calls.clone(),
        })
        .embedder(Arc::new(ContentWords {
            calls: AtomicUsize::new(0),
            fail: false,
        }))
        .cache(cache.clone())
        .top_k(2)
        .build()
        .unwrap();

    let first = pipeline.search("flights that allow pets").unwrap();
    assert!(!first.cache_hit);
    assert!(first.timings.cache_ms.is_some());
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Same meaning, different surface: served from the cache without retrieval.
    let second = pipeline.search("Flights that allow pets?").unwrap();
    assert!(second.cache_hit);
    assert_eq!(second.query, "Flights that allow pets?");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let ids = |r: &rerank::SearchResponse| {
        r.hits
            .iter()
            .map(|h| h.id().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&first), ids(&second));

    // The negated query embeds identically here, but must not be answered from the cache.
    let negated = pipeline.search("flights that do not allow pets").unwrap();
    assert!(!negated.cache_hit);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // Another top_k is another answer.
    let wider = pipeline
        .search_with(&rerank::pipeline::SearchRequest::new("flights that allow pets").top_k(3))
        .unwrap();
    assert!(!wider.cache_hit);
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // Entries are tagged with their hits' sources: invalidating a source drops them.
    assert!(pipeline.cache().unwrap().invalidate_tag("pets.md") >= 1);
    assert!(
        !pipeline
            .search("flights that allow pets")
            .unwrap()
            .cache_hit
    );
    let s = cache.stats();
    assert_eq!(s.hits, 1);
    assert!(s.misses >= 4);
}

#[test]
fn the_pipeline_without_a_working_embedder() {
    // A cache needs an embedder.
    assert!(matches!(
        Pipeline::builder()
            .retriever(travel_index())
            .cache(SemanticCache::new())
            .build(),
        Err(Error::Config(_))
    ));
    // A failing embedder means no caching, never a failed search.
    let calls = Arc::new(AtomicUsize::new(0));
    let pipeline = Pipeline::builder()
        .retriever(Counting {
            inner: travel_index(),
            calls: calls.clone(),
        })
        .embedder(Arc::new(ContentWords {
            calls: AtomicUsize::new(0),
            fail: true,
        }))
        .cache(SemanticCache::new())
        .build()
        .unwrap();
    for _ in 0..2 {
        let r = pipeline.search("refund policy").unwrap();
        assert!(!r.cache_hit);
        assert_eq!(r.hits[0].id(), "refund");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
