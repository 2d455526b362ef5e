//! [`SemanticCache`]: answers keyed by query embedding, with TTLs, tags, stats and a guard
//! against near-identical queries that mean different things.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{may_share_answer, CacheEntry, CacheStore, Clock, MemoryStore, SystemClock};
use crate::embed::cosine;
use crate::text::plain_words;
use crate::{Error, Result};

/// Tolerance on the similarity threshold, so that float rounding in the cosine does not turn
/// a similarity equal to the threshold into a miss.
const THRESHOLD_EPSILON: f32 = 1e-6;

/// Settings of a [`SemanticCache`].
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// Minimum cosine similarity for a hit (default 0.92).
    pub threshold: f32,
    /// Lifetime of an entry (default one hour); `None` keeps entries until invalidated.
    pub ttl: Option<Duration>,
    /// Lifetime of entries inserted with [`InsertOptions::short_ttl`] (default one minute),
    /// e.g. degraded answers or fast-changing data.
    pub short_ttl: Duration,
    /// How many nearest entries a lookup examines before giving up (default 8).
    pub candidates: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            threshold: 0.92,
            ttl: Some(Duration::from_secs(3600)),
            short_ttl: Duration::from_secs(60),
            candidates: 8,
        }
    }
}

impl CacheConfig {
    fn validate(&self) -> Result<()> {
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(Error::Config(format!(
                "semantic cache: threshold must be in (0, 1], got {}",
                self.threshold
            )));
        }
        if self.ttl.is_some_and(|t| t.is_zero()) || self.short_ttl.is_zero() {
            return Err(Error::Config(
                "semantic cache: TTLs must be longer than zero (use no_ttl() for no expiry)".into(),
            ));
        }
        if self.candidates == 0 {
            return Err(Error::Config(
                "semantic cache: candidates must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// How to insert one entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InsertOptions {
    /// The scope (see [`CacheEntry::scope`]); empty by default.
    pub scope: String,
    /// Tags for [`SemanticCache::invalidate_tag`].
    pub tags: Vec<String>,
    /// Use the short TTL.
    pub short_ttl: bool,
    /// An explicit TTL for this entry (wins over the others).
    pub ttl: Option<Duration>,
}

impl InsertOptions {
    /// Options with these tags.
    pub fn tagged<S: Into<String>>(tags: impl IntoIterator<Item = S>) -> Self {
        InsertOptions {
            tags: tags.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// Sets the scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = scope.into();
        self
    }

    /// Uses the short TTL.
    pub fn short(mut self) -> Self {
        self.short_ttl = true;
        self
    }

    /// Uses this TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

/// Counters of a [`SemanticCache`].
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct CacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups not answered (including store failures).
    pub misses: u64,
    /// Entries held by the store (0 when the store cannot tell).
    pub entries: usize,
    /// `hits / (hits + misses)`, 0 before any lookup.
    pub hit_rate: f64,
}

/// Invalidations that the store failed to carry out: entries they cover are treated as misses
/// by this process, so a failed invalidation never serves stale data.
#[derive(Debug, Default)]
struct Barriers {
    all: Option<Duration>,
    keys: HashMap<String, Duration>,
    tags: HashMap<String, Duration>,
}

impl Barriers {
    fn blocks<V>(&self, e: &CacheEntry<V>) -> bool {
        let covers = |t: Option<&Duration>| t.is_some_and(|t| e.inserted_at <= *t);
        covers(self.all.as_ref())
            || covers(self.keys.get(&e.key))
            || e.tags.iter().any(|tag| covers(self.tags.get(tag)))
    }
}

/// A semantic cache: a lookup hits when a stored query's embedding has cosine similarity
/// `>= threshold` with the new one (default 0.92), the entry has not expired, and the two
/// queries pass the guard ([`may_share_answer`]): same negations, same numbers, and the words
/// they share in the same order (so "flights that allow pets" never answers "flights that do
/// not allow pets", nor "Alice sued Bob" "Bob sued Alice").
///
/// Every store failure is a miss (reads) or a no-op (writes); a failed invalidation is
/// remembered in-process so the entries it should have removed are never served. Thread-safe:
/// share it behind an `Arc`.
///
/// ```
/// use rerank::cache::{InsertOptions, SemanticCache};
///
/// let cache: SemanticCache<String> = SemanticCache::new();
/// cache.insert_with("refund policy for flights", vec![1.0, 0.0], "30 days".into(),
///     &InsertOptions::tagged(["policies.md"]));
/// assert_eq!(cache.get("flights refund policy?", &[0.99, 0.05]), None); // word order differs
/// assert_eq!(cache.get("the refund policy for flights", &[0.99, 0.05]).as_deref(), Some("30 days"));
/// assert_eq!(cache.get("the refund policy for flights", &[0.0, 1.0]), None); // not similar
/// cache.invalidate_tag("policies.md");
/// assert_eq!(cache.get("refund policy for flights", &[1.0, 0.0]), None);
/// assert_eq!(cache.stats().hits, 1);
/// ```
pub struct SemanticCache<V> {
    config: CacheConfig,
    store: Box<dyn CacheStore<V>>,
    clock: Arc<dyn Clock>,
    hits: AtomicU64,
    misses: AtomicU64,
    barriers: Mutex<Barriers>,
}

impl<V> std::fmt::Debug for SemanticCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemanticCache")
            .field("config", &self.config)
            .field("hits", &self.hits.load(Ordering::Relaxed))
            .field("misses", &self.misses.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<V: Clone + Send + Sync + 'static> Default for SemanticCache<V> {
    fn default() -> Self {
        SemanticCache::new()
    }
}

impl<V: Clone + Send + Sync + 'static> SemanticCache<V> {
    /// An in-memory cache with the default settings.
    pub fn new() -> Self {
        SemanticCache {
            config: CacheConfig::default(),
            store: Box::new(MemoryStore::default()),
            clock: Arc::new(SystemClock),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            barriers: Mutex::new(Barriers::default()),
        }
    }

    /// A builder (in-memory store, system clock, default settings).
    pub fn builder() -> SemanticCacheBuilder<V> {
        SemanticCacheBuilder {
            config: CacheConfig::default(),
            store: None,
            clock: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// The normalized form of a query used as its key: lower-cased words joined by spaces.
    pub fn key_for(query: &str) -> String {
        plain_words(query).join(" ")
    }

    /// Looks `query` up in the default (empty) scope.
    pub fn get(&self, query: &str, embedding: &[f32]) -> Option<V> {
        self.get_scoped("", query, embedding)
    }

    /// Looks `query` up among entries of `scope`.
    pub fn get_scoped(&self, scope: &str, query: &str, embedding: &[f32]) -> Option<V> {
        let found = self.lookup(scope, query, embedding);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        // A store that keeps counters (persistent or shared) gets them too; a failure there
        // costs only the count.
        let _ = if found.is_some() {
            self.store.record(1, 0)
        } else {
            self.store.record(0, 1)
        };
        found
    }

    fn lookup(&self, scope: &str, query: &str, embedding: &[f32]) -> Option<V> {
        if embedding.is_empty() || embedding.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let now = self.clock.now();
        let threshold = self.config.threshold - THRESHOLD_EPSILON;
        let candidates = self
            .store
            .nearest(scope, embedding, threshold, self.config.candidates, now)
            .ok()?;
        let barriers = self.barriers.lock().ok()?;
        candidates.into_iter().find_map(|(_, e)| {
            // Check everything again: a foreign store may be loose about any of it.
            let usable = e.scope == scope
                && !e.is_expired(now)
                && e.embedding.len() == embedding.len()
                && cosine(embedding, &e.embedding) >= threshold
                && !barriers.blocks(&e)
                && may_share_answer(query, &e.query);
            usable.then_some(e.value)
        })
    }

    /// Inserts an answer with the default TTL and no tags; returns false when the store failed.
    pub fn insert(&self, query: &str, embedding: Vec<f32>, value: V) -> bool {
        self.insert_with(query, embedding, value, &InsertOptions::default())
    }

    /// Inserts an answer; returns false when the store failed (the entry is then not cached).
    pub fn insert_with(
        &self,
        query: &str,
        embedding: Vec<f32>,
        value: V,
        options: &InsertOptions,
    ) -> bool {
        if embedding.is_empty() || embedding.iter().any(|x| !x.is_finite()) {
            return false;
        }
        let now = self.clock.now();
        let ttl = options.ttl.or(if options.short_ttl {
            Some(self.config.short_ttl)
        } else {
            self.config.ttl
        });
        let entry = CacheEntry {
            scope: options.scope.clone(),
            key: Self::key_for(query),
            query: query.to_string(),
            embedding: Arc::new(embedding),
            value,
            tags: options.tags.clone(),
            inserted_at: now,
            expires_at: ttl.map(|t| now.saturating_add(t)),
        };
        self.store.put(entry).is_ok()
    }

    /// Removes the entries for `query` (compared by [`SemanticCache::key_for`]) in every scope;
    /// returns how many the store removed (0 when the store failed: see
    /// [`SemanticCache::try_invalidate_key`]).
    pub fn invalidate_key(&self, query: &str) -> usize {
        self.try_invalidate_key(query).unwrap_or(0)
    }

    /// [`SemanticCache::invalidate_key`], with the store's error when it failed. Either way
    /// this cache stops answering for `query` from entries older than the call.
    pub fn try_invalidate_key(&self, query: &str) -> Result<usize> {
        let key = Self::key_for(query);
        self.store.remove_key(&key).inspect_err(|_| {
            self.remember(|b, now| {
                b.keys.insert(key.clone(), now);
            });
        })
    }

    /// Removes the entries carrying `tag`; returns how many the store removed (0 when the
    /// store failed: see [`SemanticCache::try_invalidate_tag`]).
    pub fn invalidate_tag(&self, tag: &str) -> usize {
        self.try_invalidate_tag(tag).unwrap_or(0)
    }

    /// [`SemanticCache::invalidate_tag`], with the store's error when it failed. Either way
    /// this cache stops answering from entries with `tag` older than the call.
    pub fn try_invalidate_tag(&self, tag: &str) -> Result<usize> {
        self.store.remove_tag(tag).inspect_err(|_| {
            self.remember(|b, now| {
                b.tags.insert(tag.to_string(), now);
            });
        })
    }

    /// Removes every entry (see [`SemanticCache::try_clear`] for the store's error).
    pub fn clear(&self) {
        let _ = self.try_clear();
    }

    /// [`SemanticCache::clear`], with the store's error when it failed (a Redis that stopped
    /// answering): the entries may still be there for other processes, though this cache no
    /// longer answers from any entry older than the call.
    pub fn try_clear(&self) -> Result<()> {
        let result = self.store.clear();
        let ok = result.is_ok();
        self.remember(|b, now| {
            if ok {
                *b = Barriers::default();
            } else {
                b.all = Some(now);
            }
        });
        result
    }

    /// Removes expired entries from the store; returns how many.
    pub fn purge_expired(&self) -> usize {
        self.store.remove_expired(self.clock.now()).unwrap_or(0)
    }

    /// Hits, misses, entries and hit rate. With a store that keeps counters (the SQLite store
    /// does), the counts are the store's: they survive restarts and cover every process. A
    /// store that fails gives this process's counts and no entries (see
    /// [`SemanticCache::try_stats`] for its error).
    pub fn stats(&self) -> CacheStats {
        let recorded = self.store.recorded().ok().flatten();
        self.stats_from(recorded, self.store.len().unwrap_or(0))
    }

    /// [`SemanticCache::stats`], with the store's error when it failed (a Redis that stopped
    /// answering), rather than counts that are not the store's.
    pub fn try_stats(&self) -> Result<CacheStats> {
        let recorded = self.store.recorded()?;
        let entries = self.store.len()?;
        Ok(self.stats_from(recorded, entries))
    }

    fn stats_from(&self, recorded: Option<(u64, u64)>, entries: usize) -> CacheStats {
        let (hits, misses) = recorded.unwrap_or_else(|| {
            (
                self.hits.load(Ordering::Relaxed),
                self.misses.load(Ordering::Relaxed),
            )
        });
        let total = hits + misses;
        CacheStats {
            hits,
            misses,
            entries,
            hit_rate: if total == 0 {
                0.0
            } else {
                hits as f64 / total as f64
            },
        }
    }

    /// Records a failed invalidation. A poisoned lock is recovered: the barriers are plain data.
    fn remember(&self, update: impl FnOnce(&mut Barriers, Duration)) {
        let now = self.clock.now();
        let mut b = match self.barriers.lock() {
            Ok(b) => b,
            Err(poison) => poison.into_inner(),
        };
        update(&mut b, now);
        // Barriers older than the longest TTL cover nothing that is still alive.
        if let Some(ttl) = self.config.ttl {
            let horizon = now.saturating_sub(ttl.max(self.config.short_ttl));
            b.keys.retain(|_, t| *t >= horizon);
            b.tags.retain(|_, t| *t >= horizon);
            if b.all.is_some_and(|t| t < horizon) {
                b.all = None;
            }
        }
    }
}

/// Builds a [`SemanticCache`]; [`SemanticCacheBuilder::build`] checks the settings.
pub struct SemanticCacheBuilder<V> {
    config: CacheConfig,
    store: Option<Box<dyn CacheStore<V>>>,
    clock: Option<Arc<dyn Clock>>,
}

impl<V: Clone + Send + Sync + 'static> SemanticCacheBuilder<V> {
    /// Minimum cosine similarity for a hit (default 0.92).
    pub fn threshold(mut self, threshold: f32) -> Self {
        self.config.threshold = threshold;
        self
    }

    /// Entry lifetime (default one hour).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = Some(ttl);
        self
    }

    /// Entries never expire (until invalidated).
    pub fn no_ttl(mut self) -> Self {
        self.config.ttl = None;
        self
    }

    /// Lifetime of short-lived entries (default one minute).
    pub fn short_ttl(mut self, ttl: Duration) -> Self {
        self.config.short_ttl = ttl;
        self
    }

    /// How many nearest entries a lookup examines (default 8).
    pub fn candidates(mut self, n: usize) -> Self {
        self.config.candidates = n;
        self
    }

    /// Replaces all settings.
    pub fn config(mut self, config: CacheConfig) -> Self {
        self.config = config;
        self
    }

    /// Uses this store instead of the in-memory one.
    pub fn store(mut self, store: impl CacheStore<V> + 'static) -> Self {
        self.store = Some(Box::new(store));
        self
    }

    /// Uses this clock instead of the system clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Checks the settings and builds the cache.
    pub fn build(self) -> Result<SemanticCache<V>> {
        self.config.validate()?;
        Ok(SemanticCache {
            config: self.config,
            store: self
                .store
                .unwrap_or_else(|| Box::new(MemoryStore::default())),
            clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            barriers: Mutex::new(Barriers::default()),
        })
    }
}
