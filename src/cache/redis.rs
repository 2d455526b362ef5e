//! [`RedisCacheStore`]: semantic-cache entries in Redis, shared by every process that uses the
//! same server and namespace (feature `redis`).
//!
//! Layout under the namespace `ns` (every data key starts with `ns:c:`, so
//! [`CacheStore::clear`] leaves the counters alone):
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `ns:c:e:{id}` | string, with a TTL | the entry as JSON: scope, key, query, value, tags, times, version |
//! | `ns:c:v:{id}` | string, same TTL | the embedding: an 8-byte version, then little-endian `f32`s |
//! | `ns:c:scope:{scope}` | set | the ids of the scope's entries (what a lookup scans) |
//! | `ns:c:tag:{tag}` | set | the ids of the entries carrying the tag |
//! | `ns:c:key:{key}` | set | the ids of the entries with this normalized key (any scope) |
//! | `ns:c:all` | set | every id (for `len`, `remove_expired`) |
//! | `ns:stats:hits`, `ns:stats:misses` | integers | the shared counters (`INCRBY`) |
//!
//! A lookup reads the scope's ids (`SMEMBERS`) and their embeddings (`MGET`, pipelined in
//! chunks) and compares them here. Packing them into one reply with a Lua script was tried and
//! measured slower: Redis's Lua spends more converting the values than the client parsing them.
//!
//! `{id}` is a 128-bit hash of (scope, key) in hex. The sets live at least as long as their
//! longest-lived member; members whose entry has expired are dropped as lookups meet them.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::redis_link::Connection;
use super::{CacheEntry, CacheStore};
use crate::embed::cosine;
use crate::{Error, Result};

const COMPONENT: &str = "redis cache store";

/// The default bound on one reply's bytes ([`RedisCacheStoreBuilder::max_reply_bytes`]).
const DEFAULT_MAX_REPLY: u64 = 16 << 20;

/// How many keys one `MGET` asks for.
const MGET_CHUNK: usize = 1024;

/// Writes an entry, its embedding and its set memberships atomically. Sets get the entry's TTL
/// when they are new or would expire sooner; an entry without TTL makes its sets persistent.
///
/// KEYS: entry, embedding, then the sets. ARGV: JSON, embedding bytes, id, TTL in ms (0: none).
const PUT_SCRIPT: &str = r#"
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
else
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], ARGV[2])
end
for i = 3, #KEYS do
  local existed = redis.call('EXISTS', KEYS[i])
  redis.call('SADD', KEYS[i], ARGV[3])
  if ttl > 0 then
    local left = redis.call('PTTL', KEYS[i])
    if existed == 0 or (left >= 0 and left < ttl) then
      redis.call('PEXPIRE', KEYS[i], ttl)
    end
  else
    redis.call('PERSIST', KEYS[i])
  end
end
return 1
"#;

/// Removes every entry listed in one set (a tag's or a key's) and the set itself, atomically;
/// returns how many entries existed. KEYS: the set. ARGV: the data prefix (`ns:c:`).
const REMOVE_SET_SCRIPT: &str = r#"
local ids = redis.call('SMEMBERS', KEYS[1])
local n = 0
for _, id in ipairs(ids) do
  n = n + redis.call('DEL', ARGV[1] .. 'e:' .. id)
  redis.call('DEL', ARGV[1] .. 'v:' .. id)
  redis.call('SREM', ARGV[1] .. 'all', id)
end
redis.call('DEL', KEYS[1])
return n
"#;

/// Counts the live entries, dropping ids whose entry has expired. KEYS: the `all` set.
/// ARGV: the data prefix.
const LEN_SCRIPT: &str = r#"
local ids = redis.call('SMEMBERS', KEYS[1])
local n = 0
for _, id in ipairs(ids) do
  if redis.call('EXISTS', ARGV[1] .. 'e:' .. id) == 1 then
    n = n + 1
  else
    redis.call('SREM', KEYS[1], id)
  end
end
return n
"#;

/// An entry as JSON in Redis (its embedding is kept apart, in binary).
#[derive(Serialize)]
struct StoredRef<'a, V> {
    scope: &'a str,
    key: &'a str,
    query: &'a str,
    value: &'a V,
    tags: &'a [String],
    inserted_at_ms: u64,
    expires_at_ms: Option<u64>,
    version: u64,
}

#[derive(Deserialize)]
struct Stored<V> {
    scope: String,
    key: String,
    query: String,
    value: V,
    tags: Vec<String>,
    inserted_at_ms: u64,
    expires_at_ms: Option<u64>,
    version: u64,
}

/// An invalidation that could not reach Redis, replayed on the next connection.
#[derive(Debug, Clone, PartialEq)]
enum Pending {
    Key(String),
    Tag(String),
    All,
}

/// The connections and the health of the link.
#[derive(Default)]
struct Link {
    /// Connections not in use.
    idle: Vec<Connection>,
    /// After a failure, no new connection is tried before this instant.
    down_until: Option<Instant>,
    /// Invalidations that failed, oldest first.
    pending: Vec<Pending>,
}

/// A [`CacheStore`] in Redis, for a [`SemanticCache`](super::SemanticCache) shared by many
/// processes (feature `redis`).
///
/// - Entries are JSON values with a Redis TTL of `expires_at - inserted_at` (the cache
///   [`Clock`](super::Clock)'s times): Redis drops them by its own clock, and lookups also skip
///   entries expired by the caller's clock. Entries without an expiry stay until invalidated.
/// - Invalidation by tag or key and [`clear`](CacheStore::clear) act on Redis itself, so every
///   replica sees them at its next lookup. A tag or key invalidation is one atomic script.
/// - Hit and miss counters are kept in Redis (`INCRBY`), so [`SemanticCache::stats`](super::SemanticCache::stats)
///   covers every replica.
/// - A lookup scans the scope's entries: it reads their embeddings (binary, 4 bytes a
///   dimension), compares them in Rust, then reads only the best entries' JSON. See
///   `docs/scale-out.md` for the entry count up to which this stays under 5 ms.
///
/// Failures: every command is bounded by the [timeout](RedisCacheStoreBuilder::timeout)
/// (connecting too). A Redis that is down, slow or answers garbage makes the call an error,
/// which the cache turns into a miss (or a no-op write); an entry whose JSON does not parse is
/// a miss. After a failure the store waits [`retry_after`](RedisCacheStoreBuilder::retry_after)
/// before connecting again (calls fail at once meanwhile), then reconnects by itself.
/// Invalidations that failed are kept and replayed, first thing, on the next connection, so
/// other replicas stop seeing the entries once Redis is reachable again.
///
/// ```no_run
/// use std::time::Duration;
/// use rerank::cache::{RedisCacheStore, SemanticCache};
///
/// let store = RedisCacheStore::<String>::builder("redis://127.0.0.1:6379/0")
///     .namespace("rerank")
///     .timeout(Duration::from_millis(50))
///     .build()?; // does not connect yet
/// let cache: SemanticCache<String> = SemanticCache::builder().store(store).build()?;
/// cache.insert("refund policy", vec![1.0, 0.0], "30 days".into());
/// # Ok::<(), rerank::Error>(())
/// ```
pub struct RedisCacheStore<V> {
    client: redis::Client,
    /// The URL, its password hidden: what errors show.
    url: String,
    namespace: String,
    timeout: Duration,
    max_reply: u64,
    retry_after: Duration,
    max_idle: usize,
    link: Mutex<Link>,
    value: PhantomData<fn() -> V>,
}

impl<V> std::fmt::Debug for RedisCacheStore<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCacheStore")
            .field("url", &self.url)
            .field("namespace", &self.namespace)
            .field("timeout", &self.timeout)
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RedisCacheStore`]; see [`RedisCacheStore::builder`].
#[derive(Debug, Clone)]
pub struct RedisCacheStoreBuilder<V> {
    url: String,
    namespace: String,
    timeout: Duration,
    max_reply: u64,
    retry_after: Duration,
    max_idle: usize,
    value: PhantomData<fn() -> V>,
}

impl<V> RedisCacheStoreBuilder<V> {
    /// The prefix of every key the store writes (default `"rerank"`); caches that must not
    /// share entries use different namespaces on one server.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The limit on connecting, and on each command from sending it to the last byte of its
    /// reply (default 50 ms): a server that keeps sending, however slowly, is cut off there.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most bytes one reply may take on the wire (default 16 MiB, far above what a lookup
    /// reads: 1,024 embeddings of 1,024 dimensions are 4 MiB). A longer reply fails the call
    /// and drops its connection, so a broken or hostile server cannot grow the process.
    pub fn max_reply_bytes(mut self, bytes: u64) -> Self {
        self.max_reply = bytes;
        self
    }

    /// How long calls fail at once after a failure before a new connection is tried (default
    /// 100 ms), so a Redis that is down costs each lookup nothing rather than a timeout.
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// How many idle connections are kept for reuse (default 8); more threads than that still
    /// work, with a connection of their own each time.
    pub fn max_idle(mut self, max_idle: usize) -> Self {
        self.max_idle = max_idle;
        self
    }

    /// Checks the URL and the settings. Does not connect: a Redis that is down at build time
    /// makes lookups misses until it is up ([`RedisCacheStore::ping`] checks that it answers).
    pub fn build(self) -> Result<RedisCacheStore<V>> {
        let url = redact_url(&self.url);
        let client = redis::Client::open(self.url.as_str()).map_err(|e| {
            Error::Config(format!(
                "redis cache store: invalid URL {url:?} ({e}); expected \
                 redis://[USER:PASSWORD@]HOST:PORT[/DB]"
            ))
        })?;
        if self.timeout.is_zero() {
            return Err(Error::Config(
                "redis cache store: the timeout must be longer than zero".into(),
            ));
        }
        if self.namespace.is_empty() {
            return Err(Error::Config(
                "redis cache store: the namespace must not be empty".into(),
            ));
        }
        if self.max_reply == 0 {
            return Err(Error::Config(
                "redis cache store: max_reply_bytes must be at least 1".into(),
            ));
        }
        Ok(RedisCacheStore {
            client,
            url,
            namespace: self.namespace,
            timeout: self.timeout,
            max_reply: self.max_reply,
            retry_after: self.retry_after,
            max_idle: self.max_idle,
            link: Mutex::new(Link::default()),
            value: PhantomData,
        })
    }
}

impl<V> RedisCacheStore<V> {
    /// A builder for a store at `url` (`redis://host:port/db`, with `user:password@` if needed).
    pub fn builder(url: impl Into<String>) -> RedisCacheStoreBuilder<V> {
        RedisCacheStoreBuilder {
            url: url.into(),
            namespace: "rerank".into(),
            timeout: Duration::from_millis(50),
            max_reply: DEFAULT_MAX_REPLY,
            retry_after: Duration::from_millis(100),
            max_idle: 8,
            value: PhantomData,
        }
    }

    /// The namespace (prefix of every key).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The URL the store connects to, with any password replaced by `***` (as errors show it).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Checks that Redis answers (a `PING`, within the timeout). The cache treats a Redis that
    /// is down as empty, so a tool that reports on it (stats, invalidation) calls this first;
    /// the error names the URL and what to check.
    pub fn ping(&self) -> Result<()> {
        self.run(|conn| redis::cmd("PING").query::<String>(conn).map(|_| ()))
    }

    /// The number of invalidations that could not reach Redis yet (they are replayed on the
    /// next connection).
    pub fn pending_invalidations(&self) -> usize {
        self.lock().pending.len()
    }

    fn lock(&self) -> MutexGuard<'_, Link> {
        // The link is plain data: a panic elsewhere leaves it usable.
        self.link.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn data(&self, rest: &str) -> String {
        format!("{}:c:{rest}", self.namespace)
    }

    fn prefix(&self) -> String {
        self.data("")
    }

    fn counter(&self, name: &str) -> String {
        format!("{}:stats:{name}", self.namespace)
    }

    fn connect(&self) -> RedisResult<Connection> {
        Connection::connect(
            self.client.get_connection_info(),
            self.timeout,
            self.max_reply,
        )
    }

    /// Runs `f` on a connection (an idle one, or a new one), after replaying any pending
    /// invalidation. A connection that failed is dropped; a failure other than an error reply
    /// holds off new connections for `retry_after`.
    fn run<T>(&self, f: impl FnOnce(&mut Connection) -> RedisResult<T>) -> Result<T> {
        let (idle, pending) = {
            let mut link = self.lock();
            let idle = link.idle.pop();
            if idle.is_none() && link.down_until.is_some_and(|t| Instant::now() < t) {
                return Err(Error::backend(
                    COMPONENT,
                    Failure {
                        url: self.url.clone(),
                        address: self.address(),
                        cause: Cause::Waiting(self.retry_after),
                    },
                ));
            }
            (idle, std::mem::take(&mut link.pending))
        };
        let mut conn = match idle {
            Some(conn) => conn,
            None => match self.connect() {
                Ok(conn) => conn,
                Err(e) => return Err(self.failed(e, true, false, pending)),
            },
        };
        for (i, p) in pending.iter().enumerate() {
            if let Err(e) = self.invalidate(&mut conn, p) {
                let link_down = link_failure(&e);
                return Err(self.failed(e, link_down, true, pending[i..].to_vec()));
            }
        }
        match f(&mut conn) {
            Ok(out) => {
                let mut link = self.lock();
                link.down_until = None;
                if link.idle.len() < self.max_idle {
                    link.idle.push(conn);
                }
                Ok(out)
            }
            Err(e) => {
                let link_down = link_failure(&e);
                Err(self.failed(e, link_down, true, Vec::new()))
            }
        }
    }

    /// Records a failure (the connection it happened on is dropped): puts back the
    /// invalidations not replayed and, when the link itself failed, holds off reconnecting.
    /// `connected`: the failure came on a connection that was up (a command's reply broke
    /// off), not while connecting.
    fn failed(
        &self,
        e: RedisError,
        link_down: bool,
        connected: bool,
        unreplayed: Vec<Pending>,
    ) -> Error {
        let mut link = self.lock();
        if !unreplayed.is_empty() {
            let newer = std::mem::replace(&mut link.pending, unreplayed);
            link.pending.extend(newer);
        }
        if link_down {
            link.down_until = Some(Instant::now() + self.retry_after);
            // The other idle connections go to the same server: let them be tried anew.
            link.idle.clear();
        }
        let cause = match (link_down, connected) {
            (true, false) => Cause::Link(e),
            (true, true) => Cause::Broken(e),
            (false, _) => Cause::Reply(e),
        };
        Error::backend(
            COMPONENT,
            Failure {
                url: self.url.clone(),
                address: self.address(),
                cause,
            },
        )
    }

    /// Where the server should listen: `host:port`, or the socket's path.
    fn address(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }

    fn invalidate(&self, conn: &mut Connection, p: &Pending) -> RedisResult<usize> {
        match p {
            Pending::Key(key) => self.remove_set(conn, &self.data(&format!("key:{key}"))),
            Pending::Tag(tag) => self.remove_set(conn, &self.data(&format!("tag:{tag}"))),
            Pending::All => self.clear_all(conn).map(|()| 0),
        }
    }

    fn remove_set(&self, conn: &mut Connection, set: &str) -> RedisResult<usize> {
        redis::cmd("EVAL")
            .arg(REMOVE_SET_SCRIPT)
            .arg(1)
            .arg(set)
            .arg(self.prefix())
            .query(conn)
    }

    fn clear_all(&self, conn: &mut Connection) -> RedisResult<()> {
        let pattern = format!("{}*", glob_escape(&self.prefix()));
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query(conn)?;
            if !keys.is_empty() {
                redis::cmd("UNLINK").arg(keys).exec(conn)?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// A failed invalidation is kept for replay, then reported.
    fn invalidation(&self, p: Pending) -> Result<usize> {
        let result = self.run(|conn| self.invalidate(conn, &p));
        if result.is_err() {
            let mut link = self.lock();
            if !link.pending.contains(&p) {
                link.pending.push(p);
            }
        }
        result
    }
}

/// What went wrong with Redis.
#[derive(Debug)]
enum Cause {
    /// The link failed (connection refused, reset, timeout): Redis is down or elsewhere.
    Link(RedisError),
    /// A connection that was up failed mid-command: reset, timed out, or a reply past the
    /// byte bound.
    Broken(RedisError),
    /// Redis answered with an error, or with a reply that does not convert.
    Reply(RedisError),
    /// The last connection failed less than this long ago: not retried yet.
    Waiting(Duration),
}

/// A failure of the store, shown with its URL (password hidden) and what to check; the
/// [`RedisError`] stays reachable as its source.
#[derive(Debug)]
struct Failure {
    url: String,
    address: String,
    cause: Cause,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Failure {
            url,
            address,
            cause,
        } = self;
        let check = || {
            if address.starts_with('/') {
                format!("is redis-server listening on the socket {address}?")
            } else {
                format!(
                    "is redis-server running at {address}? (`scripts/redis.sh start PORT DIR` \
                     starts a local one)"
                )
            }
        };
        match cause {
            Cause::Link(e) => write!(f, "{url} is unreachable: {e}; {}", check()),
            Cause::Broken(e) => write!(
                f,
                "{url} broke off a command: {e}; the connection was dropped (the next call \
                 reconnects); {}",
                check()
            ),
            Cause::Waiting(after) => write!(
                f,
                "{url} is unreachable (the last connection failed less than {after:?} ago, not \
                 retried yet); {}",
                check()
            ),
            Cause::Reply(e) if is_auth_error(e) => write!(
                f,
                "{url} refused the login: {e}; check the user and password in the URL"
            ),
            Cause::Reply(e) => write!(f, "{url}: {e}"),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            Cause::Link(e) | Cause::Broken(e) | Cause::Reply(e) => Some(e),
            Cause::Waiting(_) => None,
        }
    }
}

fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// `url` with its password hidden: the password of the user info
/// (`redis://user:PASSWORD@host`; a user info without `:` is hidden whole) and the value of a
/// `pass` or `password` query parameter (`redis+unix:///run/redis.sock?pass=PASSWORD`) become
/// `***`.
pub(crate) fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let query_at = rest.find('?').unwrap_or(rest.len());
    let (before_query, query) = rest.split_at(query_at);
    let before_query = match before_query.rfind('@') {
        Some(at) => {
            let (userinfo, host) = (&before_query[..at], &before_query[at + 1..]);
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***@{host}"),
                None => format!("***@{host}"),
            }
        }
        None => before_query.to_string(),
    };
    let query = match query.strip_prefix('?') {
        Some(params) => {
            let params: Vec<String> = params
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((key, _)) if matches!(key, "pass" | "password") => format!("{key}=***"),
                    _ => p.to_string(),
                })
                .collect();
            format!("?{}", params.join("&"))
        }
        None => String::new(),
    };
    format!("{scheme}{before_query}{query}")
}

/// Whether an error says the link is unusable (I/O, timeout), as opposed to an error reply or
/// a reply that does not convert (garbage in a key) on a working link. Garbage on the wire
/// breaks the connection's setup, which always counts as a link failure.
fn link_failure(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The id of (scope, key): FNV-1a over 128 bits, in hex (stable across processes).
fn entry_id(scope: &str, key: &str) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h = OFFSET;
    for b in scope.bytes().chain([0xff]).chain(key.bytes()) {
        h ^= u128::from(b);
        h = h.wrapping_mul(PRIME);
    }
    format!("{h:032x}")
}

/// A version tying an entry's JSON to its embedding (different for every write).
fn next_version() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    nanos ^ (u64::from(std::process::id()) << 40) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn encode_embedding(version: u64, embedding: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 4 * embedding.len());
    out.extend_from_slice(&version.to_le_bytes());
    for x in embedding {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Decodes a stored embedding of `dim` dimensions into `vector`; returns its version, or
/// `None` when the bytes are not such an embedding.
fn decode_embedding_into(bytes: &[u8], dim: usize, vector: &mut Vec<f32>) -> Option<u64> {
    if bytes.len() != 8 + 4 * dim {
        return None;
    }
    let version = u64::from_le_bytes(bytes[..8].try_into().ok()?);
    vector.clear();
    vector.extend(
        bytes[8..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    Some(version)
}

/// Runs `MGET` over `keys` in chunks, in one round trip.
fn mget(conn: &mut Connection, keys: &[String]) -> RedisResult<Vec<Option<Vec<u8>>>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for chunk in keys.chunks(MGET_CHUNK) {
        pipe.cmd("MGET").arg(chunk);
    }
    let chunks: Vec<Vec<Option<Vec<u8>>>> = pipe.query(conn)?;
    Ok(chunks.into_iter().flatten().collect())
}

impl<V: Serialize + DeserializeOwned + Send + Sync> CacheStore<V> for RedisCacheStore<V> {
    fn put(&self, entry: CacheEntry<V>) -> Result<()> {
        let ttl_ms = match entry.expires_at {
            Some(expires) => {
                let ttl = expires.saturating_sub(entry.inserted_at);
                if ttl.is_zero() {
                    return Ok(()); // expired already: nothing to keep
                }
                ms(ttl).max(1)
            }
            None => 0,
        };
        let version = next_version();
        let json = serde_json::to_vec(&StoredRef {
            scope: &entry.scope,
            key: &entry.key,
            query: &entry.query,
            value: &entry.value,
            tags: &entry.tags,
            inserted_at_ms: ms(entry.inserted_at),
            expires_at_ms: entry.expires_at.map(ms),
            version,
        })
        .map_err(|e| Error::parse("a cache value (to JSON)", e))?;
        let id = entry_id(&entry.scope, &entry.key);
        let mut keys = vec![
            self.data(&format!("e:{id}")),
            self.data(&format!("v:{id}")),
            self.data("all"),
            self.data(&format!("scope:{}", entry.scope)),
            self.data(&format!("key:{}", entry.key)),
        ];
        keys.extend(entry.tags.iter().map(|t| self.data(&format!("tag:{t}"))));
        let embedding = encode_embedding(version, &entry.embedding);
        self.run(|conn| {
            redis::cmd("EVAL")
                .arg(PUT_SCRIPT)
                .arg(keys.len())
                .arg(&keys)
                .arg(&json)
                .arg(&embedding)
                .arg(&id)
                .arg(ttl_ms)
                .exec(conn)
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
        if limit == 0 || embedding.is_empty() {
            return Ok(Vec::new());
        }
        let scope_set = self.data(&format!("scope:{scope}"));
        self.run(|conn| {
            let ids: Vec<String> = redis::cmd("SMEMBERS").arg(&scope_set).query(conn)?;
            let vkeys: Vec<String> = ids.iter().map(|id| self.data(&format!("v:{id}"))).collect();
            let vectors = mget(conn, &vkeys)?;
            let mut gone = Vec::new();
            let mut scored: Vec<(f32, usize, u64, Vec<f32>)> = Vec::new();
            let mut vector = Vec::with_capacity(embedding.len());
            for (i, bytes) in vectors.into_iter().enumerate() {
                let Some(bytes) = bytes else {
                    gone.push(&ids[i]);
                    continue;
                };
                // A vector of another dimension or a garbled one is a miss.
                let Some(version) = decode_embedding_into(&bytes, embedding.len(), &mut vector)
                else {
                    continue;
                };
                let similarity = cosine(embedding, &vector);
                if similarity >= min_similarity {
                    scored.push((similarity, i, version, vector.clone()));
                }
            }
            if !gone.is_empty() {
                // Expired entries: drop them from the scope (best effort).
                let _ = redis::cmd("SREM").arg(&scope_set).arg(gone).exec(conn);
            }
            scored.sort_by(|a, b| crate::document::cmp_score_desc(a.0, b.0));
            scored.truncate(limit);
            let ekeys: Vec<String> = scored
                .iter()
                .map(|(_, i, _, _)| self.data(&format!("e:{}", ids[*i])))
                .collect();
            let jsons = mget(conn, &ekeys)?;
            let mut out = Vec::with_capacity(scored.len());
            for ((similarity, _, version, vector), json) in scored.into_iter().zip(jsons) {
                // Gone since, garbled, from another write than the vector: a miss.
                let Some(stored) = json.and_then(|j| serde_json::from_slice::<Stored<V>>(&j).ok())
                else {
                    continue;
                };
                let entry = CacheEntry {
                    scope: stored.scope,
                    key: stored.key,
                    query: stored.query,
                    embedding: Arc::new(vector),
                    value: stored.value,
                    tags: stored.tags,
                    inserted_at: Duration::from_millis(stored.inserted_at_ms),
                    expires_at: stored.expires_at_ms.map(Duration::from_millis),
                };
                if stored.version != version || entry.scope != scope || entry.is_expired(now) {
                    continue;
                }
                out.push((similarity, entry));
            }
            Ok(out)
        })
    }

    fn remove_key(&self, key: &str) -> Result<usize> {
        self.invalidation(Pending::Key(key.to_string()))
    }

    fn remove_tag(&self, tag: &str) -> Result<usize> {
        self.invalidation(Pending::Tag(tag.to_string()))
    }

    fn remove_expired(&self, now: Duration) -> Result<usize> {
        let all = self.data("all");
        self.run(|conn| {
            let ids: Vec<String> = redis::cmd("SMEMBERS").arg(&all).query(conn)?;
            let ekeys: Vec<String> = ids.iter().map(|id| self.data(&format!("e:{id}"))).collect();
            let jsons = mget(conn, &ekeys)?;
            let mut gone = Vec::new();
            let mut expired = Vec::new();
            for (id, json) in ids.iter().zip(jsons) {
                match json {
                    None => gone.push(id),
                    Some(json) => {
                        let expires = serde_json::from_slice::<serde_json::Value>(&json)
                            .ok()
                            .and_then(|v| v.get("expires_at_ms").and_then(|t| t.as_u64()));
                        if expires.is_some_and(|t| Duration::from_millis(t) <= now) {
                            expired.push(id);
                        }
                    }
                }
            }
            let mut pipe = redis::pipe();
            for id in &expired {
                pipe.cmd("DEL")
                    .arg(self.data(&format!("e:{id}")))
                    .arg(self.data(&format!("v:{id}")))
                    .ignore();
            }
            gone.extend(expired.iter().copied());
            if !gone.is_empty() {
                pipe.cmd("SREM").arg(&all).arg(&gone).ignore();
                pipe.exec(conn)?;
            }
            Ok(expired.len())
        })
    }

    fn clear(&self) -> Result<()> {
        self.invalidation(Pending::All).map(|_| ())
    }

    fn len(&self) -> Result<usize> {
        let all = self.data("all");
        self.run(|conn| {
            redis::cmd("EVAL")
                .arg(LEN_SCRIPT)
                .arg(1)
                .arg(&all)
                .arg(self.prefix())
                .query(conn)
        })
    }

    fn record(&self, hits: u64, misses: u64) -> Result<()> {
        if hits == 0 && misses == 0 {
            return Ok(());
        }
        self.run(|conn| {
            let mut pipe = redis::pipe();
            for (name, n) in [("hits", hits), ("misses", misses)] {
                if n > 0 {
                    pipe.cmd("INCRBY").arg(self.counter(name)).arg(n).ignore();
                }
            }
            pipe.exec(conn)
        })
    }

    fn recorded(&self) -> Result<Option<(u64, u64)>> {
        self.run(|conn| {
            let counts: Vec<Option<String>> = redis::cmd("MGET")
                .arg(self.counter("hits"))
                .arg(self.counter("misses"))
                .query(conn)?;
            // A counter that is not a number is garbage: no counts (the cache then reports
            // its own), but the link is fine.
            let parse = |c: Option<&Option<String>>| match c {
                Some(Some(text)) => text.parse::<u64>().ok(),
                _ => Some(0),
            };
            match (parse(counts.first()), parse(counts.get(1))) {
                (Some(hits), Some(misses)) => Ok(Some((hits, misses))),
                _ => Err(RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a cache counter in redis is not a number",
                ))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_tell_scope_from_key() {
        assert_eq!(entry_id("a", "b"), entry_id("a", "b"));
        assert_ne!(entry_id("a", "b"), entry_id("ab", ""));
        assert_eq!(entry_id("", "").len(), 32);
    }

    #[test]
    fn embeddings_round_trip_and_garbage_is_refused() {
        let bytes = encode_embedding(7, &[1.0, -2.5]);
        let mut v = Vec::new();
        assert_eq!(decode_embedding_into(&bytes, 2, &mut v), Some(7));
        assert_eq!(v, vec![1.0, -2.5]);
        assert_eq!(decode_embedding_into(&bytes, 3, &mut v), None);
        assert_eq!(decode_embedding_into(b"garbage", 2, &mut v), None);
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn passwords_are_hidden_in_urls() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://:s3cret@host:6379", "redis://:***@host:6379"),
            (
                "redis://alice:s3cret@host:6379/2",
                "redis://alice:***@host:6379/2",
            ),
            ("rediss://alice:p@ss:w/rd@host", "rediss://alice:***@host"),
            ("redis://s3cret@host", "redis://***@host"),
            (
                "redis+unix:///run/redis.sock?db=1&pass=s3cret",
                "redis+unix:///run/redis.sock?db=1&pass=***",
            ),
            (
                "unix:///run/redis.sock?password=s3cret",
                "unix:///run/redis.sock?password=***",
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn a_redis_that_is_down_is_named_with_what_to_check() {
        // Port 1 on the loopback: nothing listens there.
        let store = RedisCacheStore::<String>::builder("redis://bob:s3cret@127.0.0.1:1/0")
            .retry_after(Duration::from_secs(60))
            .build()
            .unwrap();
        assert_eq!(store.url(), "redis://bob:***@127.0.0.1:1/0");
        let e = store.ping().unwrap_err().to_string();
        assert!(
            e.starts_with(
                "redis cache store failed: redis://bob:***@127.0.0.1:1/0 is unreachable: "
            ),
            "{e}"
        );
        assert!(
            e.contains("is redis-server running at 127.0.0.1:1? (`scripts/redis.sh start"),
            "{e}"
        );
        assert!(!e.contains("s3cret"), "{e}");
        // The next call is not tried yet, and says so in the same terms.
        let e = store.len().unwrap_err().to_string();
        assert!(e.contains("not retried yet"), "{e}");
        assert!(e.contains("is redis-server running at 127.0.0.1:1?"), "{e}");
        let e = RedisCacheStore::<String>::builder("http://u:s3cret@x")
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"http://u:***@x\""), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn build_checks_settings_without_connecting() {
        let store = RedisCacheStore::<String>::builder("redis://127.0.0.1:1/0")
            .build()
            .unwrap();
        assert_eq!(store.namespace(), "rerank");
        assert!(RedisCacheStore::<String>::builder("not a url")
            .build()
            .is_err());
        assert!(RedisCacheStore::<String>::builder("redis://127.0.0.1/0")
            .timeout(Duration::ZERO)
            .build()
            .is_err());
        assert!(store.nearest("", &[1.0], 0.5, 3, Duration::ZERO).is_err());
        assert!(store.remove_tag("t").is_err());
        assert_eq!(store.pending_invalidations(), 1);
    }
}
