//! Qwen3-Reranker: instruction-aware yes/no relevance from a Qwen3 causal LM.
//!
//! - [`Qwen3Reranker`] (feature `models`): loads a local `Qwen3ForCausalLM` directory and scores
//!   documents with the official prompt ([`template`]), `score = sigmoid(l_yes - l_no)`. The
//!   documents of one query share the prompt's system part, instruction and query: a batch
//!   runs those tokens through the model once, not once per document.
//! - [`Instructions`]: the default, task-type and entity-type instructions a host can override.
//! - [`Qwen3Config`] (feature `models`): the `config.json` keys the forward pass reads (it
//!   lives with the model in `models::qwen3`).

mod instructions;
#[cfg(feature = "models")]
mod reranker;
pub mod template;

#[cfg(feature = "models")]
pub use crate::models::qwen3::{Qwen3Config, ARCHITECTURE};
pub use instructions::{
    Instructions, DEFAULT_INSTRUCTION, DESIGN_INSTRUCTION, EXPERIENCE_INSTRUCTION,
    GENERAL_INSTRUCTION, IMPLEMENTATION_INSTRUCTION, MANUAL_INSTRUCTION,
    TROUBLESHOOTING_INSTRUCTION,
};
#[cfg(feature = "models")]
pub use reranker::{
    Qwen3Reranker, Qwen3RerankerBuilder, Qwen3Score, ScoreInput, DEFAULT_TOKEN_BUDGET,
};
