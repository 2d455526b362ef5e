//! Where cache entries live: the [`CacheStore`] trait, the in-memory [`MemoryStore`], and
//! [`SharedMemoryStore`], one in-memory map for caches of different value types.

use std::any::Any;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::embed::cosine;
use crate::{Error, Result};

/// One cached answer as a store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheEntry<V> {
    /// What else the answer depends on (e.g. `top_k` and filters); entries only match lookups
    /// with the same scope.
    pub scope: String,
    /// The normalized query text ([`SemanticCache::key_for`](super::SemanticCache::key_for)).
    pub key: String,
    /// The query as given.
    pub query: String,
    /// The query embedding.
    pub embedding: Arc<Vec<f32>>,
    /// The cached answer.
    pub value: V,
    /// Tags for invalidation (e.g. a source file or an act name).
    pub tags: Vec<String>,
    /// When it was inserted ([`Clock::now`](super::Clock::now)).
    pub inserted_at: Duration,
    /// When it expires, if ever.
    pub expires_at: Option<Duration>,
}

impl<V> CacheEntry<V> {
    /// Whether the entry has expired at `now`.
    pub fn is_expired(&self, now: Duration) -> bool {
        self.expires_at.is_some_and(|t| now >= t)
    }

    /// The same entry with its value changed by `f`.
    fn map_value<W>(self, f: impl FnOnce(V) -> W) -> CacheEntry<W> {
        CacheEntry {
            value: f(self.value),
            scope: self.scope,
            key: self.key,
            query: self.query,
            embedding: self.embedding,
            tags: self.tags,
            inserted_at: self.inserted_at,
            expires_at: self.expires_at,
        }
    }
}

/// Where a [`SemanticCache`](super::SemanticCache) keeps its entries. Implement it to back the cache with Redis or
/// another shared store; every error is treated by the cache as a miss (or a no-op write).
pub trait CacheStore<V>: Send + Sync {
    /// Inserts an entry, replacing any entry with the same scope and key.
    fn put(&self, entry: CacheEntry<V>) -> Result<()>;

    /// Up to `limit` unexpired entries of `scope` whose cosine similarity to `embedding` is at
    /// least `min_similarity`, most similar first, each with its similarity.
    fn nearest(
        &self,
        scope: &str,
        embedding: &[f32],
        min_similarity: f32,
        limit: usize,
        now: Duration,
    ) -> Result<Vec<(f32, CacheEntry<V>)>>;

    /// Removes the entries with this key (in every scope); returns how many.
    fn remove_key(&self, key: &str) -> Result<usize>;

    /// Removes the entries carrying this tag; returns how many.
    fn remove_tag(&self, tag: &str) -> Result<usize>;

    /// Removes the entries expired at `now`; returns how many.
    fn remove_expired(&self, now: Duration) -> Result<usize>;

    /// Removes everything.
    fn clear(&self) -> Result<()>;

    /// The number of entries held (expired ones included until removed).
    fn len(&self) -> Result<usize>;

    /// Whether the store holds no entry.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Adds to the hit and miss counters a persistent or shared store keeps (the default keeps
    /// none: the cache's own in-process counters are then the stats).
    fn record(&self, hits: u64, misses: u64) -> Result<()> {
        let _ = (hits, misses);
        Ok(())
    }

    /// The hit and miss counters the store keeps, if it keeps any (they then replace the
    /// cache's in-process counters in [`SemanticCache::stats`](super::SemanticCache::stats)).
    fn recorded(&self) -> Result<Option<(u64, u64)>> {
        Ok(None)
    }
}

impl<V, S: CacheStore<V> + ?Sized> CacheStore<V> for Arc<S> {
    fn put(&self, entry: CacheEntry<V>) -> Result<()> {
        (**self).put(entry)
    }
    fn nearest(
        &self,
        scope: &str,
        embedding: &[f32],
        min_similarity: f32,
        limit: usize,
        now: Duration,
    ) -> Result<Vec<(f32, CacheEntry<V>)>> {
        (**self).nearest(scope, embedding, min_similarity, limit, now)
    }
    fn remove_key(&self, key: &str) -> Result<usize> {
        (**self).remove_key(key)
    }
    fn remove_tag(&self, tag: &str) -> Result<usize> {
        (**self).remove_tag(tag)
    }
    fn remove_expired(&self, now: Duration) -> Result<usize> {
        (**self).remove_expired(now)
    }
    fn clear(&self) -> Result<()> {
        (**self).clear()
    }
    fn len(&self) -> Result<usize> {
        (**self).len()
    }
    fn record(&self, hits: u64, misses: u64) -> Result<()> {
        (**self).record(hits, misses)
    }
    fn recorded(&self) -> Result<Option<(u64, u64)>> {
        (**self).recorded()
    }
}

/// The default in-memory [`CacheStore`]: a map behind a read-write lock, with a capacity
/// (oldest entries are evicted first, after expired ones).
#[derive(Debug)]
pub struct MemoryStore<V> {
    entries: RwLock<HashMap<(String, String), CacheEntry<V>>>,
    capacity: usize,
}

impl<V> Default for MemoryStore<V> {
    /// Holds up to 10,000 entries.
    fn default() -> Self {
        MemoryStore::with_capacity(10_000)
    }
}

impl<V> MemoryStore<V> {
    /// A store holding at most `capacity` entries (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        MemoryStore {
            entries: RwLock::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }
}

fn poisoned() -> Error {
    Error::InvalidInput("the in-memory cache lock is poisoned".into())
}

impl<V: Clone + Send + Sync> CacheStore<V> for MemoryStore<V> {
    fn put(&self, entry: CacheEntry<V>) -> Result<()> {
        let mut map = self.entries.write().map_err(|_| poisoned())?;
        let id = (entry.scope.clone(), entry.key.clone());
        if !map.contains_key(&id) && map.len() >= self.capacity {
            let now = entry.inserted_at;
            map.retain(|_, e| !e.is_expired(now));
            while map.len() >= self.capacity {
                let oldest = map
                    .iter()
                    .min_by_key(|(_, e)| e.inserted_at)
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => map.remove(&k),
                    None => break,
                };
            }
        }
        map.insert(id, entry);
        Ok(())
    }

    fn nearest(
        &self,
        scope: &str,
        embedding: &[f32],
        min_similarity: f32,
        limit: usize,
        now: Duration,
    ) -> Result<Vec<(f32, CacheEntry<V>)>> {
        let map = self.entries.read().map_err(|_| poisoned())?;
        let mut scored: Vec<(f32, &CacheEntry<V>)> = map
            .values()
            .filter(|e| e.scope == scope && !e.is_expired(now))
            .map(|e| (cosine(embedding, &e.embedding), e))
            .filter(|(s, _)| *s >= min_similarity)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(scored
            .into_iter()
            .take(limit)
            .map(|(s, e)| (s, e.clone()))
            .collect())
    }

    fn remove_key(&self, key: &str) -> Result<usize> {
        let mut map = self.entries.write().map_err(|_| poisoned())?;
        let before = map.len();
        map.retain(|_, e| e.key != key);
        Ok(before - map.len())
    }

    fn remove_tag(&self, tag: &str) -> Result<usize> {
        let mut map = self.entries.write().map_err(|_| poisoned())?;
        let before = map.len();
        map.retain(|_, e| !e.tags.iter().any(|t| t == tag));
        Ok(before - map.len())
    }

    fn remove_expired(&self, now: Duration) -> Result<usize> {
        let mut map = self.entries.write().map_err(|_| poisoned())?;
        let before = map.len();
        map.retain(|_, e| !e.is_expired(now));
        Ok(before - map.len())
    }

    fn clear(&self) -> Result<()> {
        self.entries.write().map_err(|_| poisoned())?.clear();
        Ok(())
    }

    fn len(&self) -> Result<usize> {
        Ok(self.entries.read().map_err(|_| poisoned())?.len())
    }
}

/// A value of any type in a [`SharedMemoryStore`].
type AnyValue = Arc<dyn Any + Send + Sync>;

/// One in-memory map that caches of different value types share: the pipeline's response
/// cache and its answer cache keep their entries here under their own scopes, so that one
/// invalidation by tag or key drops the entries of both, as the SQLite and Redis stores do.
/// [`SharedMemoryStore::typed`] gives each cache its view; `len` and `clear` count and clear
/// every view's entries.
#[derive(Clone)]
pub struct SharedMemoryStore {
    map: Arc<MemoryStore<AnyValue>>,
}

impl Default for SharedMemoryStore {
    /// Holds up to 10,000 entries (all views together).
    fn default() -> Self {
        SharedMemoryStore::with_capacity(10_000)
    }
}

impl std::fmt::Debug for SharedMemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemoryStore")
            .field("capacity", &self.map.capacity)
            .finish_non_exhaustive()
    }
}

impl SharedMemoryStore {
    /// A store holding at most `capacity` entries (at least 1), all views together.
    pub fn with_capacity(capacity: usize) -> Self {
        SharedMemoryStore {
            map: Arc::new(MemoryStore::with_capacity(capacity)),
        }
    }

    /// The view of the store that holds values of type `V`.
    pub fn typed<V: Clone + Send + Sync + 'static>(&self) -> TypedMemoryStore<V> {
        TypedMemoryStore {
            map: self.map.clone(),
            value: PhantomData,
        }
    }
}

/// The view of a [`SharedMemoryStore`] for values of type `V`: lookups see the entries of this
/// type only; removals by key and tag, expiry and `clear` reach every view.
pub struct TypedMemoryStore<V> {
    map: Arc<MemoryStore<AnyValue>>,
    value: PhantomData<fn() -> V>,
}

impl<V> std::fmt::Debug for TypedMemoryStore<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedMemoryStore")
            .field("value", &std::any::type_name::<V>())
            .finish_non_exhaustive()
    }
}

impl<V: Clone + Send + Sync + 'static> CacheStore<V> for TypedMemoryStore<V> {
    fn put(&self, entry: CacheEntry<V>) -> Result<()> {
        self.map.put(entry.map_value(|v| Arc::new(v) as AnyValue))
    }

    fn nearest(
        &self,
        scope: &str,
        embedding: &[f32],
        min_similarity: f32,
        limit: usize,
        now: Duration,
    ) -> Result<Vec<(f32, CacheEntry<V>)>> {
        // A scope holds one cache's entries, hence one type; another type there is skipped.
        let found = self
            .map
            .nearest(scope, embedding, min_similarity, limit, now)?;
        Ok(found
            .into_iter()
            .filter_map(|(s, e)| {
                let value = e.value.downcast_ref::<V>()?.clone();
                Some((s, e.map_value(|_| value)))
            })
            .collect())
    }

    fn remove_key(&self, key: &str) -> Result<usize> {
        self.map.remove_key(key)
    }

    fn remove_tag(&self, tag: &str) -> Result<usize> {
        self.map.remove_tag(tag)
    }

    fn remove_expired(&self, now: Duration) -> Result<usize> {
        self.map.remove_expired(now)
    }

    fn clear(&self) -> Result<()> {
        self.map.clear()
    }

    fn len(&self) -> Result<usize> {
        self.map.len()
    }
}
