//! HyDE (hypothetical document embeddings): for hard queries, dense recall searches with the
//! embedding of a generated answer instead of the query's own.
//!
//! Only dense recall changes: BM25 and the reranker keep the original query text. Any failure
//! (generator error, empty output, embedder error) falls back to the original query.

use serde::{Deserialize, Serialize};

use crate::answer::GenerationRequest;
use crate::classify::Route;
use crate::{Embedder, Error, Generator, Result};

/// When and how HyDE runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HydeConfig {
    /// Routes that use HyDE (default: complex and analytical). A pipeline without a classifier
    /// treats every query as `standard`.
    pub routes: Vec<Route>,
    /// The system prompt for the hypothetical answer.
    pub system_prompt: String,
    /// Upper bound on the answer's length in tokens (default 160).
    pub max_new_tokens: usize,
}

impl Default for HydeConfig {
    fn default() -> Self {
        HydeConfig {
            routes: vec![Route::Complex, Route::Analytical],
            system_prompt: "Write a short passage that answers the question the way a reference \
                            document would. State the facts plainly. Do not repeat the question \
                            and do not say that the passage is hypothetical."
                .into(),
            max_new_tokens: 160,
        }
    }
}

impl HydeConfig {
    /// HyDE for every route.
    pub fn all_routes() -> Self {
        HydeConfig {
            routes: vec![
                Route::Simple,
                Route::Standard,
                Route::Complex,
                Route::Analytical,
            ],
            ..HydeConfig::default()
        }
    }

    /// Whether queries on `route` use HyDE.
    pub fn applies_to(&self, route: Route) -> bool {
        self.routes.contains(&route)
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if self.max_new_tokens == 0 {
            return Err(Error::Config(
                "hyde: max_new_tokens must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// The generation request for `query` (greedy).
    pub fn request(&self, query: &str) -> GenerationRequest {
        GenerationRequest {
            max_new_tokens: self.max_new_tokens,
            ..GenerationRequest::new(self.system_prompt.clone(), query)
        }
    }
}

/// Asks `generator` for a hypothetical answer to `query`; an empty answer is an error.
pub fn hypothetical_document(
    generator: &dyn Generator,
    query: &str,
    config: &HydeConfig,
) -> Result<String> {
    let text = generator.generate(&config.request(query))?.text;
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::generation(
            "hyde: the generator returned an empty hypothetical document",
        ));
    }
    // A generator that answers only from sources (the extractive one) has nothing to say
    // here: its "not enough information" sentence is no hypothetical document.
    if crate::answer::is_not_enough_information(text) {
        return Err(Error::generation(
            "hyde: the generator declined to write a hypothetical document",
        ));
    }
    Ok(text.to_string())
}

/// The embedding of a hypothetical answer to `query`, for dense recall.
pub fn hyde_embedding(
    generator: &dyn Generator,
    embedder: &dyn Embedder,
    query: &str,
    config: &HydeConfig,
) -> Result<Vec<f32>> {
    let document = hypothetical_document(generator, query, config)?;
    // The hypothetical answer stands in for a document, so it is embedded as one.
    let embedding = embedder.embed_one(&document)?;
    if embedding.is_empty() || embedding.iter().any(|x| !x.is_finite()) {
        return Err(Error::model(
            "hyde: the embedder returned an empty or non-finite vector",
        ));
    }
    Ok(embedding)
}
