//! Step 4: the semantic query cache.
//!
//! - [`SemanticCache`] (`semantic`): answers keyed by query embedding, with TTLs, tags, stats;
//! - [`may_share_answer`] (`guard`): the guard against near-identical queries that mean
//!   different things;
//! - [`CacheStore`] (`store`): where entries live; [`MemoryStore`] is the default;
//!   [`SharedMemoryStore`] is one in-memory map for the response and answer caches together;
//! - [`Clock`] (`clock`): time for TTLs, [`ManualClock`] for tests;
//! - [`RedisCacheStore`] (`redis`, feature `redis`): entries, invalidations and stats in Redis,
//!   shared by every replica.

mod clock;
mod guard;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod redis_link;
mod semantic;
mod store;

#[cfg(feature = "redis")]
pub use self::redis::{RedisCacheStore, RedisCacheStoreBuilder};
pub use clock::{Clock, ManualClock, SystemClock};
pub use guard::may_share_answer;
pub use semantic::{CacheConfig, CacheStats, InsertOptions, SemanticCache, SemanticCacheBuilder};
pub use store::{CacheEntry, CacheStore, MemoryStore, SharedMemoryStore, TypedMemoryStore};
