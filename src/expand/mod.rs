//! Step 5: query expansion before recall.
//!
//! - HyDE (`hyde`): for complex and analytical routes, dense recall searches with the embedding
//!   of a generated hypothetical answer ([`HydeConfig`], [`hyde_embedding`]);
//! - multi-query (`multi_query`): the query and its variants are retrieved separately and fused
//!   by reciprocal rank ([`ExpansionConfig`], [`retrieve_expanded`]).

mod hyde;
mod multi_query;

pub use hyde::{hyde_embedding, hypothetical_document, HydeConfig};
pub use multi_query::{clean_variants, generate_variants, retrieve_expanded, ExpansionConfig};
