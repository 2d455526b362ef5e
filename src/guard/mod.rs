//! Step 1: the PII guard, which refuses a query holding personal data before anything else runs.
//!
//! - [`PiiGuard`] (`pii`): detection of social security numbers, Luhn-checked card numbers,
//!   email addresses and phone numbers; only the kinds are reported, never the values;
//! - [`PiiKind`] (`kind`): the kinds.

mod kind;
mod pii;

pub use kind::PiiKind;
pub use pii::{luhn_valid, PiiGuard, DEFAULT_REFUSAL};
