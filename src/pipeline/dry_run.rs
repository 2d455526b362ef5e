//! [`Pipeline::plan`]: what a search would do, without retrieval, generation or model calls.

use serde::Serialize;

use super::{stage2, InstructionSource, Pipeline, SearchRequest};
use crate::classify::{Classification, Route};
use crate::parse;
use crate::{Error, Result};

/// The plan of one search: the steps that would run and with what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchPlan {
    /// The query as given.
    pub query: String,
    /// The classification (when a classifier is set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classification: Option<Classification>,
    /// The route the query takes (`standard` without a classifier).
    pub route: Route,
    /// The text recall searches for (the `[SEARCH]` phrase of a two-phase query).
    pub recall_text: String,
    /// The text the reranker judges against.
    pub rerank_text: String,
    /// Whether the query was split as a two-phase query.
    pub two_phase: bool,
    /// The recall mode (`None`: the pipeline's default retriever).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The recall modes the pipeline holds.
    pub modes: Vec<String>,
    /// Stage-1 candidates that would be fetched.
    pub candidates: usize,
    /// Whether a reranker is set. It runs on every non-empty candidate list, unless
    /// [`SearchOptions::skip_rerank_within_top_k`](super::SearchOptions::skip_rerank_within_top_k)
    /// is set (see `rerank_skipped_within_top_k`).
    pub rerank: bool,
    /// Whether stage 2 is skipped when stage 1 returns no more candidates than `top_k`.
    pub rerank_skipped_within_top_k: bool,
    /// Rerank depth (`None`: every candidate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerank_depth: Option<usize>,
    /// Where the query-level instruction would come from (entity-type instructions depend on
    /// the candidates); `None` when no instruction would be passed on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instruction: Option<InstructionSource>,
    /// Whether HyDE would run (configured for this route, with an embedder and a generator
    /// that writes freely: see [`Generator::writes_freely`](crate::Generator::writes_freely)).
    pub hyde: bool,
    /// Why HyDE, configured for this route, would not run; `None` when it runs or is not
    /// configured for the route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyde_off: Option<String>,
    /// Whether the semantic cache would be looked up.
    pub cache: bool,
    /// Whether the answer cache would be looked up (by `answer`; a search does not use it).
    pub answer_cache: bool,
    /// Whether query variants would be generated.
    pub expansion: bool,
}

impl Pipeline {
    /// The plan of `request`: the guard, the two-phase split and the classifier run (they are
    /// cheap and model-free); recall, the cache, HyDE, the reranker and the generator do not.
    /// A query with personal data is refused as [`Pipeline::search_with`] would refuse it.
    pub fn plan(&self, request: &SearchRequest) -> Result<SearchPlan> {
        let query = request.query.trim();
        if query.is_empty() {
            return Err(Error::InvalidInput("the query is empty".into()));
        }
        self.guard(request)?;
        let top_k = request.top_k.unwrap_or(self.options.top_k);
        let plan = parse::plan(query, self.two_phase, request.instruction.as_deref())?;
        let classification = self.classifier.as_ref().map(|c| c.classify(query));
        let route = classification.as_ref().map_or(Route::Standard, |c| c.route);
        let (_, mode) = self.modes.pick(self.retriever.as_ref(), request)?;
        let candidates = self.options.candidates_for(top_k);
        let rerank_depth = request.rerank_depth.or(self.options.rerank_depth);
        let probe = [crate::Hit::new(
            std::sync::Arc::new(crate::Document::new("", "")),
            0.0,
        )];
        let instruction = stage2::assign(
            self.instructions.as_ref(),
            request.instruction.as_deref(),
            plan.two_phase
                .as_ref()
                .and_then(|q| q.instruction.as_deref()),
            classification.as_ref(),
            &probe,
        )
        .pop()
        .filter(|a| a.text.is_some())
        .map(|a| a.source);
        let hyde_off = self.hyde_off(route);
        let hyde = self
            .query
            .hyde
            .as_ref()
            .is_some_and(|h| h.applies_to(route))
            && hyde_off.is_none();
        Ok(SearchPlan {
            query: request.query.clone(),
            route,
            recall_text: super::with_people(&plan.recall, classification.as_ref()),
            rerank_text: plan.rerank.text.clone(),
            two_phase: plan.two_phase.is_some(),
            mode,
            modes: self.modes.names(),
            candidates,
            rerank: self.reranker.is_some(),
            rerank_skipped_within_top_k: self.options.skip_rerank_within_top_k,
            rerank_depth,
            instruction,
            hyde,
            hyde_off,
            cache: self.query.cache.is_some() && self.embedder.is_some(),
            answer_cache: self.query.answer_cache.is_some() && self.embedder.is_some(),
            expansion: !request.variants.is_empty()
                || self
                    .query
                    .expansion
                    .as_ref()
                    .is_some_and(|x| x.generate && self.generator.is_some()),
            classification,
        })
    }
}
