//! Query-side processing before retrieval: PII guard, two-phase queries, semantic cache, HyDE,
//! multi-query expansion.

mod cache;
mod expand;
mod hyde;
mod pii;
mod pii_kind;
pub mod two_phase;

pub use cache::{
    may_share_answer, CacheConfig, CacheEntry, CacheStats, CacheStore, Clock, InsertOptions,
    ManualClock, MemoryStore, SemanticCache, SemanticCacheBuilder, SystemClock,
};
pub use expand::{clean_variants, generate_variants, retrieve_expanded, ExpansionConfig};
pub use hyde::{hyde_embedding, hypothetical_document, HydeConfig};
pub use pii::{luhn_valid, PiiGuard};
pub use pii_kind::PiiKind;
pub use two_phase::{QueryPlan, TwoPhaseMode, TwoPhaseQuery};
