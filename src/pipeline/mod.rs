//! The [`Pipeline`], which runs a query through the stages in order, and what goes in and out.
//!
//! - [`Pipeline`] (here) and [`PipelineBuilder`] (`builder`): the components, checked at
//!   `build()`; [`PipelineConfig`] (`config`): the same from YAML / TOML / JSON;
//! - [`SearchRequest`] (`request`) and [`SearchOptions`] (`options`): per-call and per-pipeline
//!   settings; [`Filter`] and [`DedupKey`];
//! - the query-side steps (`query_stages`): guard, cache, HyDE and expansion, protected order;
//! - post-processing (`postprocess`): threshold, dedup, top-k;
//! - the panic boundary around the host's components (`guarded`);
//! - [`SearchResponse`] (`response`) with per-stage [`Timings`];
//! - [`Pipeline::answer`] (`answer`) and its [`Answer`] (`answer_response`).

mod answer;
mod answer_response;
mod builder;
mod config;
mod guarded;
mod options;
mod postprocess;
mod query_stages;
mod request;
mod response;

use std::sync::Arc;
use std::time::Instant;

pub use answer_response::{
    canned_chitchat_reply, Answer, AnswerFlags, AnswerOptions, AnswerTimings, ChitchatMode,
    CHITCHAT_SYSTEM_PROMPT,
};
pub use builder::PipelineBuilder;
pub use config::{PipelineConfig, RerankerConfig, RetrieverConfig, StoreConfig};
pub use options::{DedupKey, Filter, SearchOptions};
pub use request::SearchRequest;
pub use response::{SearchResponse, Timings};

use query_stages::QueryStages;

use crate::answer::Generator;
use crate::cache::SemanticCache;
use crate::classify::{Classification, QueryClassifier};
use crate::parse::{self, TwoPhaseMode};
use crate::rerankers::RerankQuery;
use crate::{Embedder, Error, Hit, Reranker, Result, Retriever};

/// A two-stage retrieval pipeline. Build it with [`Pipeline::builder`]; it is `Send + Sync`,
/// so one instance behind an `Arc` serves many threads.
pub struct Pipeline {
    retriever: Box<dyn Retriever>,
    reranker: Option<Box<dyn Reranker>>,
    classifier: Option<Box<dyn QueryClassifier>>,
    generator: Option<Arc<dyn Generator>>,
    embedder: Option<Arc<dyn Embedder>>,
    options: SearchOptions,
    query: QueryStages,
    two_phase: Option<TwoPhaseMode>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("retriever", &self.retriever.name())
            .field("reranker", &self.reranker.as_ref().map(|r| r.name()))
            .field("classifier", &self.classifier.is_some())
            .field("generator", &self.generator.as_ref().map(|g| g.name()))
            .field("embedder", &self.embedder.is_some())
            .field("options", &self.options)
            .field("query", &self.query)
            .field("two_phase", &self.two_phase)
            .finish()
    }
}

/// The outcome of stage 2.
struct Stage2 {
    hits: Vec<Hit>,
    reranked: bool,
    scorer: String,
    error: Option<String>,
}

impl Pipeline {
    /// A builder; only the retriever is required.
    pub fn builder() -> PipelineBuilder {
        PipelineBuilder::default()
    }

    /// The search options.
    pub fn options(&self) -> &SearchOptions {
        &self.options
    }

    /// The generator, when one is set.
    pub fn generator(&self) -> Option<&Arc<dyn Generator>> {
        self.generator.as_ref()
    }

    /// The embedder, when one is set.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// The semantic cache, when one is set (to invalidate entries or read its stats).
    pub fn cache(&self) -> Option<&Arc<SemanticCache<SearchResponse>>> {
        self.query.cache.as_ref()
    }

    /// Searches with the pipeline's defaults.
    pub fn search(&self, query: &str) -> Result<SearchResponse> {
        self.search_with(&SearchRequest::new(query))
    }

    /// Searches with per-call overrides.
    ///
    /// Steps: the PII guard refuses a query (or variant) holding personal data with
    /// [`Error::PiiRefused`] before anything else runs; a two-phase query is split (when
    /// [`PipelineBuilder::two_phase`] is on: the `[SEARCH]` phrase drives recall and lexical
    /// protection, the `[TASK]` context and `[INSTRUCT]` the reranker); classify (when a classifier is set);
    /// the semantic cache answers when it holds a close enough query (when a cache is set);
    /// stage 1 fetches [`SearchOptions::candidates_for`]`(top_k)` candidates (with HyDE and
    /// query variants when configured) and numbers them (stage-1 rank);
    /// metadata filters drop candidates (before reranking, so no model time is spent on them);
    /// stage 2 reranks when a reranker is set and more than `top_k` candidates remain, falling
    /// back to stage-1 order if it fails, and keeps the top lexical matches of factual queries
    /// first ([`ProtectPolicy`](crate::rerankers::ProtectPolicy)); then threshold (protected hits are kept), dedup and top-k.
    pub fn search_with(&self, request: &SearchRequest) -> Result<SearchResponse> {
        let start = Instant::now();
        let query = request.query.trim();
        if query.is_empty() {
            return Err(Error::InvalidInput("the query is empty".into()));
        }
        self.guard(request)?;
        let top_k = request.top_k.unwrap_or(self.options.top_k);
        if top_k == 0 {
            return Err(Error::InvalidInput("top_k must be at least 1".into()));
        }
        let mut timings = Timings::default();
        let plan = parse::plan(query, self.two_phase, request.instruction.as_deref())?;

        let classification = self.classifier.as_ref().map(|c| {
            let t = Instant::now();
            let out = c.classify(query);
            timings.classify_ms = Some(ms(t));
            out
        });

        let mut probe = self.cache_probe(query, request, top_k, &mut timings);
        if let Some(cached) = probe.hit.take() {
            timings.total_ms = ms(start);
            return Ok(query_stages::from_cache(
                cached,
                request,
                classification,
                timings,
            ));
        }

        let n_candidates = self.options.candidates_for(top_k);
        let recall = self.recall(
            &plan.recall,
            request,
            classification.as_ref(),
            n_candidates,
            &mut timings,
        )?;
        let mut hits = recall.hits;
        hits.truncate(n_candidates);
        for (i, h) in hits.iter_mut().enumerate() {
            h.stage1_rank = i + 1;
            h.stage1_score = h.score;
        }
        let candidates = hits.len();

        let filters: Vec<&Filter> = self
            .options
            .filters
            .iter()
            .chain(&request.filters)
            .collect();
        hits.retain(|h| filters.iter().all(|f| f.matches(&h.document)));

        let stage2 = self.rerank_stage(
            &plan.recall,
            plan.rerank,
            hits,
            top_k,
            classification.as_ref(),
            &mut timings,
        );

        let t = Instant::now();
        let hits = self.postprocess(stage2.hits, top_k);
        timings.postprocess_ms = ms(t);
        timings.total_ms = ms(start);

        let response = SearchResponse {
            query: request.query.clone(),
            hits,
            candidates,
            reranked: stage2.reranked,
            scorer: stage2.scorer,
            rerank_fallback: stage2.error.is_some(),
            rerank_error: stage2.error,
            classification,
            timings,
            cache_hit: false,
            hyde: recall.hyde,
            variants: recall.variants,
        };
        self.cache_store(probe, query, &response);
        Ok(response)
    }

    fn rerank_stage(
        &self,
        query: &str,
        rq: RerankQuery,
        hits: Vec<Hit>,
        top_k: usize,
        classification: Option<&Classification>,
        timings: &mut Timings,
    ) -> Stage2 {
        let stage1 = |hits, error| Stage2 {
            hits,
            reranked: false,
            scorer: "stage1".into(),
            error,
        };
        let Some(reranker) = &self.reranker else {
            return stage1(hits, None);
        };
        if hits.len() <= top_k {
            return stage1(hits, None);
        }
        let t = Instant::now();
        let texts: Vec<String> = hits.iter().map(|h| h.document.full_text()).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let result = reranker.score_detailed(&rq, &refs).and_then(|out| {
            if out.scores.len() == hits.len() {
                Ok(out)
            } else {
                Err(Error::rerank(format!(
                    "{} returned {} scores for {} documents",
                    out.scorer,
                    out.scores.len(),
                    hits.len()
                )))
            }
        });
        timings.rerank_ms = Some(ms(t));
        match result {
            Ok(out) => {
                let mut hits = hits;
                for (h, s) in hits.iter_mut().zip(out.scores) {
                    h.rerank_score = Some(s);
                    // A NaN or infinite score (a host reranker's bug) ranks below every real
                    // score instead of above it; `rerank_score` keeps what the reranker said.
                    h.score = if s.is_finite() { s } else { f32::NEG_INFINITY };
                }
                let hits = self.order_reranked(query, classification, hits);
                Stage2 {
                    hits,
                    reranked: true,
                    scorer: out.scorer,
                    error: out.fallback_reason,
                }
            }
            Err(e) => stage1(hits, Some(e.to_string())),
        }
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}
