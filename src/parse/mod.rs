//! Step 2: two-phase queries, `[SEARCH] phrase [TASK] context [INSTRUCT] instruction`.
//!
//! The `[SEARCH]` phrase feeds recall; the task (and instruction) feeds the reranker. See
//! [`TwoPhaseQuery`] for the format and [`plan`] for how a query becomes the two phases.

mod two_phase;

pub use two_phase::{plan, QueryPlan, TwoPhaseMode, TwoPhaseQuery, EXAMPLE, FORMAT};
