//! [`SqliteCacheStore`]: semantic-cache entries in the store's file.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{params, OptionalExtension};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{vector_from_blob, vector_to_blob, Store};
use crate::cache::{CacheEntry, CacheStore};
use crate::embed::cosine;
use crate::{Error, Result};

/// Removes the tags whose entry is gone (after entries are removed by tag or by expiry).
const DELETE_ORPHAN_TAGS: &str = "DELETE FROM cache_tags WHERE (scope, key) NOT IN \
     (SELECT scope, key FROM cache_entries)";

/// A [`CacheStore`] in a [`Store`]'s file: entries (values as JSON), TTLs, tags and the hit
/// and miss counters survive a restart and are shared by every process using the file.
///
/// Times are the cache [`Clock`](crate::cache::Clock)'s (the default clock counts from the Unix
/// epoch, so a TTL keeps running while the process is down). Lookups scan the entries of one
/// scope and compare embeddings in Rust: fine for the thousands of entries a cache holds.
pub struct SqliteCacheStore<V> {
    store: Arc<Store>,
    value: PhantomData<fn() -> V>,
}

impl<V> std::fmt::Debug for SqliteCacheStore<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteCacheStore")
            .field("store", &self.store.path())
            .finish()
    }
}

impl<V> SqliteCacheStore<V> {
    pub(super) fn new(store: Arc<Store>) -> Self {
        SqliteCacheStore {
            store,
            value: PhantomData,
        }
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn from_ms(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

type StoredEntry = (String, String, Vec<u8>, String, i64, Option<i64>);

impl<V: Serialize + DeserializeOwned + Send + Sync> CacheStore<V> for SqliteCacheStore<V> {
    fn put(&self, entry: CacheEntry<V>) -> Result<()> {
        let value = serde_json::to_string(&entry.value)
            .map_err(|e| Error::parse("a cache value (to JSON)", e))?;
        let blob = vector_to_blob(&entry.embedding);
        self.store.write_cache(|tx| {
            tx.execute(
                "INSERT OR REPLACE INTO cache_entries \
                 (scope, key, query, embedding, value, inserted_at_ms, expires_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    entry.scope,
                    entry.key,
                    entry.query,
                    blob,
                    value,
                    ms(entry.inserted_at),
                    entry.expires_at.map(ms)
                ],
            )?;
            tx.execute(
                "DELETE FROM cache_tags WHERE scope = ?1 AND key = ?2",
                params![entry.scope, entry.key],
            )?;
            for tag in &entry.tags {
                tx.execute(
                    "INSERT OR IGNORE INTO cache_tags (tag, scope, key) VALUES (?1, ?2, ?3)",
                    params![tag, entry.scope, entry.key],
                )?;
            }
            Ok(())
        })
    }

    fn nearest(
        &self,
        scope: &str,
        embedding: &[f32],
        min_similarity: f32,
        limit: usize,
        now: Duration,
    ) -> Result<Vec<(f32, CacheEntry<V>)>> {
        let (rows, tags): (Vec<StoredEntry>, Vec<(String, String)>) = self.store.read(|tx| {
            let mut stmt = tx.prepare_cached(
                "SELECT key, query, embedding, value, inserted_at_ms, expires_at_ms \
                 FROM cache_entries WHERE scope = ?1 AND (expires_at_ms IS NULL OR expires_at_ms > ?2)",
            )?;
            let rows = stmt
                .query_map(params![scope, ms(now)], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                })?
                .collect::<rusqlite::Result<Vec<StoredEntry>>>()?;
            let mut stmt = tx.prepare_cached("SELECT key, tag FROM cache_tags WHERE scope = ?1")?;
            let tags = stmt
                .query_map([scope], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<(String, String)>>>()?;
            Ok((rows, tags))
        })?;
        let mut scored: Vec<(f32, StoredEntry)> = rows
            .into_iter()
            .map(|row| (cosine(embedding, &vector_from_blob(&row.2)), row))
            .filter(|(s, _)| *s >= min_similarity)
            .collect();
        scored.sort_by(|a, b| crate::document::cmp_score_desc(a.0, b.0));
        scored.truncate(limit);
        let mut out = Vec::with_capacity(scored.len());
        for (similarity, (key, query, blob, value, inserted, expires)) in scored {
            // A value that no longer parses (an older format) is a miss, not an error.
            let Ok(value) = serde_json::from_str::<V>(&value) else {
                continue;
            };
            let tags = tags
                .iter()
                .filter(|(k, _)| *k == key)
                .map(|(_, t)| t.clone())
                .collect();
            out.push((
                similarity,
                CacheEntry {
                    scope: scope.to_string(),
                    key,
                    query,
                    embedding: Arc::new(vector_from_blob(&blob)),
                    value,
                    tags,
                    inserted_at: from_ms(inserted),
                    expires_at: expires.map(from_ms),
                },
            ));
        }
        Ok(out)
    }

    fn remove_key(&self, key: &str) -> Result<usize> {
        self.store.write_cache(|tx| {
            tx.execute("DELETE FROM cache_tags WHERE key = ?1", [key])?;
            tx.execute("DELETE FROM cache_entries WHERE key = ?1", [key])
        })
    }

    fn remove_tag(&self, tag: &str) -> Result<usize> {
        self.store.write_cache(|tx| {
            let n = tx.execute(
                "DELETE FROM cache_entries WHERE (scope, key) IN \
                 (SELECT scope, key FROM cache_tags WHERE tag = ?1)",
                [tag],
            )?;
            tx.execute(DELETE_ORPHAN_TAGS, [])?;
            Ok(n)
        })
    }

    fn remove_expired(&self, now: Duration) -> Result<usize> {
        self.store.write_cache(|tx| {
            let n = tx.execute(
                "DELETE FROM cache_entries WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?1",
                [ms(now)],
            )?;
            tx.execute(DELETE_ORPHAN_TAGS, [])?;
            Ok(n)
        })
    }

    fn clear(&self) -> Result<()> {
        self.store.write_cache(|tx| {
            tx.execute("DELETE FROM cache_tags", [])?;
            tx.execute("DELETE FROM cache_entries", [])?;
            Ok(())
        })
    }

    fn len(&self) -> Result<usize> {
        self.store.read(|tx| {
            tx.query_row("SELECT count(*) FROM cache_entries", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as usize)
        })
    }

    fn record(&self, hits: u64, misses: u64) -> Result<()> {
        self.store.write_cache(|tx| {
            tx.execute(
                "UPDATE cache_counters SET value = value + ?1 WHERE name = 'hits'",
                [hits as i64],
            )?;
            tx.execute(
                "UPDATE cache_counters SET value = value + ?1 WHERE name = 'misses'",
                [misses as i64],
            )?;
            Ok(())
        })
    }

    fn recorded(&self) -> Result<Option<(u64, u64)>> {
        self.store.read(|tx| {
            let get = |name: &str| {
                tx.query_row(
                    "SELECT value FROM cache_counters WHERE name = ?1",
                    [name],
                    |r| r.get::<_, i64>(0),
                )
                .optional()
            };
            Ok(match (get("hits")?, get("misses")?) {
                (Some(h), Some(m)) => Some((h.max(0) as u64, m.max(0) as u64)),
                _ => None,
            })
        })
    }
}
