//! Query-side processing before retrieval: PII guard, two-phase queries, semantic cache, HyDE.

mod pii_kind;
pub mod two_phase;

pub use pii_kind::PiiKind;
pub use two_phase::{QueryPlan, TwoPhaseMode, TwoPhaseQuery};
