//! The [`Pipeline`]: recall, rerank, post-process, with per-stage timings.

mod answer;
mod config;
mod options;
mod query_stages;
mod response;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

pub use config::{PipelineConfig, RerankerConfig, RetrieverConfig};
pub use options::{DedupKey, Filter, SearchOptions};
pub use response::{SearchResponse, Timings};

use query_stages::QueryStages;

use crate::query::two_phase::{self, TwoPhaseMode};
use crate::query::{ExpansionConfig, HydeConfig, PiiGuard, SemanticCache};
use crate::{
    Classification, Embedder, Error, Generator, Hit, ProtectPolicy, QueryClassifier, RerankQuery,
    Reranker, Result, Retriever,
};

/// Per-call overrides for [`Pipeline::search_with`].
#[derive(Debug, Clone, Default)]
pub struct SearchRequest {
    /// The query text.
    pub query: String,
    /// Overrides the pipeline's `top_k`.
    pub top_k: Option<usize>,
    /// Extra filters, added to the pipeline's.
    pub filters: Vec<Filter>,
    /// An instruction for instruction-aware rerankers.
    pub instruction: Option<String>,
    /// Query variants to retrieve as well, fused with the query's own hits by RRF
    /// (multi-query expansion); the reranker still judges against the query.
    pub variants: Vec<String>,
}

impl SearchRequest {
    /// A request for `query` with the pipeline's defaults.
    pub fn new(query: impl Into<String>) -> Self {
        SearchRequest {
            query: query.into(),
            ..Default::default()
        }
    }

    /// Overrides `top_k`.
    pub fn top_k(mut self, top_k: usize) -> Self {
        self.top_k = Some(top_k);
        self
    }

    /// Adds a filter.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filters.push(filter);
        self
    }

    /// Sets the reranker instruction.
    pub fn instruction(mut self, instruction: impl Into<String>) -> Self {
        self.instruction = Some(instruction.into());
        self
    }

    /// Sets query variants for multi-query expansion.
    pub fn variants<S: Into<String>>(mut self, variants: impl IntoIterator<Item = S>) -> Self {
        self.variants = variants.into_iter().map(Into::into).collect();
        self
    }
}

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
    /// first ([`ProtectPolicy`]); then threshold (protected hits are kept), dedup and top-k.
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
        let plan = two_phase::plan(query, self.two_phase, request.instruction.as_deref())?;

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
                Err(Error::Rerank(format!(
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
                    h.score = s;
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

    /// Threshold, dedup (best hit per key wins), top-k.
    fn postprocess(&self, hits: Vec<Hit>, top_k: usize) -> Vec<Hit> {
        let mut seen: HashSet<String> = HashSet::new();
        hits.into_iter()
            .filter(|h| h.protected || self.options.score_threshold.is_none_or(|t| h.score >= t))
            .filter(|h| match self.options.dedup.key_of(&h.document) {
                Some(key) => seen.insert(key),
                None => true,
            })
            .take(top_k)
            .collect()
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Builds a [`Pipeline`]; [`PipelineBuilder::build`] checks the configuration.
#[derive(Default)]
pub struct PipelineBuilder {
    retriever: Option<Box<dyn Retriever>>,
    reranker: Option<Box<dyn Reranker>>,
    classifier: Option<Box<dyn QueryClassifier>>,
    generator: Option<Arc<dyn Generator>>,
    embedder: Option<Arc<dyn Embedder>>,
    options: SearchOptions,
    query: QueryStages,
    two_phase: Option<TwoPhaseMode>,
}

impl PipelineBuilder {
    /// Sets the stage-1 retriever (required).
    pub fn retriever(mut self, retriever: impl Retriever + 'static) -> Self {
        self.retriever = Some(Box::new(retriever));
        self
    }

    /// Sets a boxed stage-1 retriever.
    pub fn retriever_boxed(mut self, retriever: Box<dyn Retriever>) -> Self {
        self.retriever = Some(retriever);
        self
    }

    /// Sets the stage-2 reranker.
    pub fn reranker(mut self, reranker: impl Reranker + 'static) -> Self {
        self.reranker = Some(Box::new(reranker));
        self
    }

    /// Sets a boxed stage-2 reranker.
    pub fn reranker_boxed(mut self, reranker: Box<dyn Reranker>) -> Self {
        self.reranker = Some(reranker);
        self
    }

    /// Sets the query classifier.
    pub fn classifier(mut self, classifier: impl QueryClassifier + 'static) -> Self {
        self.classifier = Some(Box::new(classifier));
        self
    }

    /// Sets the generator (answers, HyDE, query variants).
    pub fn generator(mut self, generator: impl Generator + 'static) -> Self {
        self.generator = Some(Arc::new(generator));
        self
    }

    /// Sets a shared generator.
    pub fn generator_arc(mut self, generator: Arc<dyn Generator>) -> Self {
        self.generator = Some(generator);
        self
    }

    /// Sets the embedder (semantic cache, HyDE).
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// Replaces all search options.
    pub fn options(mut self, options: SearchOptions) -> Self {
        self.options = options;
        self
    }

    /// Hits returned (default 10).
    pub fn top_k(mut self, top_k: usize) -> Self {
        self.options.top_k = top_k;
        self
    }

    /// Stage-1 depth multiplier (default 10).
    pub fn candidate_multiplier(mut self, multiplier: usize) -> Self {
        self.options.candidate_multiplier = multiplier;
        self
    }

    /// Cap on stage-1 depth (default 100).
    pub fn max_candidates(mut self, cap: usize) -> Self {
        self.options.max_candidates = cap;
        self
    }

    /// Drops hits whose final score is below `threshold`.
    pub fn score_threshold(mut self, threshold: f32) -> Self {
        self.options.score_threshold = Some(threshold);
        self
    }

    /// Sets the dedup key (default source + page).
    pub fn dedup(mut self, key: DedupKey) -> Self {
        self.options.dedup = key;
        self
    }

    /// Adds a metadata filter applied to every search.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.options.filters.push(filter);
        self
    }

    /// Sets the PII guard (default: every kind). `PiiGuard::disabled()` turns it off.
    pub fn pii_guard(mut self, guard: PiiGuard) -> Self {
        self.query.pii = guard;
        self
    }

    /// Sets protected reranking for factual queries (default: up to 3 of the top 3 stage-1
    /// hits). `ProtectPolicy::disabled()` turns it off. It needs a classifier to know which
    /// queries are factual.
    pub fn protection(mut self, policy: ProtectPolicy) -> Self {
        self.query.protection = policy;
        self
    }

    /// Sets a semantic cache of responses (needs an embedder).
    pub fn cache(mut self, cache: SemanticCache<SearchResponse>) -> Self {
        self.query.cache = Some(Arc::new(cache));
        self
    }

    /// Sets a shared semantic cache of responses (needs an embedder).
    pub fn cache_arc(mut self, cache: Arc<SemanticCache<SearchResponse>>) -> Self {
        self.query.cache = Some(cache);
        self
    }

    /// Turns HyDE on (needs a generator and an embedder; the routes come from the classifier).
    pub fn hyde(mut self, config: HydeConfig) -> Self {
        self.query.hyde = Some(config);
        self
    }

    /// Turns multi-query expansion on: generated variants (needs a generator) or, with
    /// `ExpansionConfig::host_variants_only()`, only those given in [`SearchRequest::variants`].
    pub fn expansion(mut self, config: ExpansionConfig) -> Self {
        self.query.expansion = Some(config);
        self
    }

    /// Accepts two-phase queries (`[SEARCH] ... [TASK] ... [INSTRUCT] ...`), strictly or
    /// leniently (default: off, the query drives both stages); see [`crate::query::two_phase`].
    pub fn two_phase(mut self, mode: TwoPhaseMode) -> Self {
        self.two_phase = Some(mode);
        self
    }

    /// Checks the configuration and builds the pipeline.
    pub fn build(self) -> Result<Pipeline> {
        let retriever = self.retriever.ok_or_else(|| {
            Error::Config("a pipeline needs a retriever: call .retriever(...)".into())
        })?;
        self.options.validate()?;
        self.query
            .validate(self.generator.is_some(), self.embedder.is_some())?;
        Ok(Pipeline {
            retriever,
            reranker: self.reranker,
            classifier: self.classifier,
            generator: self.generator,
            embedder: self.embedder,
            options: self.options,
            query: self.query,
            two_phase: self.two_phase,
        })
    }
}
