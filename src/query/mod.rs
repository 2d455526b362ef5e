//! Query-side processing before retrieval: PII guard, two-phase queries, semantic cache, HyDE.

mod pii_kind;

pub use pii_kind::PiiKind;
