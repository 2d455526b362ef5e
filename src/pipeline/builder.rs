//! [`PipelineBuilder`]: the components and options of a [`Pipeline`], checked at `build()`.

use std::sync::Arc;

use super::guarded::Guarded;
use super::modes::RecallModes;
use super::query_stages::QueryStages;
use super::{Answer, DedupKey, Filter, Pipeline, SearchOptions, SearchResponse};
use crate::cache::SemanticCache;
use crate::classify::LegalExtractor;
use crate::expand::{ExpansionConfig, HydeConfig};
use crate::guard::PiiGuard;
use crate::parse::TwoPhaseMode;
use crate::recall::Fusion;
use crate::rerankers::qwen3::Instructions;
use crate::rerankers::ProtectPolicy;
use crate::{Embedder, Error, Generator, QueryClassifier, Reranker, Result, Retriever};

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
    modes: RecallModes,
    instructions: Option<Instructions>,
    reranker_mode: Option<String>,
}

impl PipelineBuilder {
    /// Sets the stage-1 retriever (required). A `Box<dyn Retriever>` or an `Arc<dyn Retriever>`
    /// is a retriever too.
    pub fn retriever(mut self, retriever: impl Retriever + 'static) -> Self {
        self.retriever = Some(Box::new(retriever));
        self
    }

    /// Adds a named retriever a request can pick with [`SearchRequest::mode`](super::SearchRequest::mode):
    /// `"bm25"`, `"vector"`, `"keyword"`, or any name (`"graph"`). With a `"vector"` and a
    /// `"bm25"` (or `"keyword"`) retriever, the `"hybrid"` mode fuses them per request
    /// ([`PipelineBuilder::mode_fusion`]). Names must be distinct.
    pub fn recall_mode(
        mut self,
        name: impl Into<String>,
        retriever: impl Retriever + 'static,
    ) -> Self {
        let guarded: Arc<dyn Retriever> = Arc::new(Guarded::<dyn Retriever>(Box::new(retriever)));
        self.modes.named.push((name.into(), guarded));
        self
    }

    /// How the `"hybrid"` mode fuses the vector and lexical retrievers (default RRF, k 60),
    /// the vector side's default weight in `[0, 1]` (default 0.5), and the hits fetched from
    /// each side (default: as many as asked).
    pub fn mode_fusion(mut self, fusion: Fusion, vector_weight: f32, depth: Option<usize>) -> Self {
        self.modes.fusion = fusion;
        self.modes.vector_weight = vector_weight;
        self.modes.depth = depth;
        self
    }

    /// The recall mode of requests that name none (default: the retriever set with
    /// [`PipelineBuilder::retriever`]).
    pub fn default_mode(mut self, mode: impl Into<String>) -> Self {
        self.modes.default_mode = Some(mode.into());
        self
    }

    /// Sets the instruction policy: the texts, whether the classifier's task type picks one,
    /// and the metadata field with each document's entity type (see [`Instructions`] and
    /// `pipeline::instruct`). Without it only request and `[INSTRUCT]` instructions are passed
    /// to the reranker.
    pub fn instructions(mut self, instructions: Instructions) -> Self {
        self.instructions = Some(instructions);
        self
    }

    /// Tags each cached response with the acts its hits cite (`act:NAME`, found by
    /// `extractor` in the hits' text and in an `act` metadata field), so that
    /// `cache.invalidate_tag(&LegalExtractor::act_tag("Companies Act"))` drops exactly the
    /// answers that depend on that act.
    pub fn cache_act_tags(mut self, extractor: LegalExtractor) -> Self {
        self.query.act_tags = Some(extractor);
        self
    }

    /// Sets the stage-2 reranker (a `Box<dyn Reranker>` or an `Arc<dyn Reranker>` is one too).
    pub fn reranker(mut self, reranker: impl Reranker + 'static) -> Self {
        self.reranker = Some(Box::new(reranker));
        self
    }

    /// Describes the reranker's mode for the log line `build()` writes ("qwen3 (DIR),
    /// fallback: lexical overlap on failure"); without it the reranker's name is logged.
    pub fn reranker_mode(mut self, mode: impl Into<String>) -> Self {
        self.reranker_mode = Some(mode.into());
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

    /// Sets the embedder (semantic cache, HyDE). Pass an `Arc` to share one embedder with a
    /// dense index.
    pub fn embedder(mut self, embedder: impl Embedder + 'static) -> Self {
        self.embedder = Some(Arc::new(embedder));
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

    /// Skips stage 2 when stage 1 returns no more candidates than `top_k` (default: false, the
    /// reranker orders every candidate list); see [`SearchOptions::skip_rerank_within_top_k`].
    pub fn skip_rerank_within_top_k(mut self, skip: bool) -> Self {
        self.options.skip_rerank_within_top_k = skip;
        self
    }

    /// Drops hits whose final score is below `threshold` (protected hits are kept).
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

    /// Sets a semantic cache of answers (needs an embedder): [`Pipeline::answer`] looks the
    /// question up there before it retrieves anything, and a hit is returned as it was stored
    /// (text, citations, sources, confidence) with `flags.cache_hit` set, without retrieval or
    /// generation. Fresh answers are stored with the tags of their response (sources, `area:`,
    /// `act:` with [`cache_act_tags`](Self::cache_act_tags), `route:`), so
    /// `invalidate_tag` drops the answers that cite an act; a not-enough-information answer is
    /// not stored. It may share its store (SQLite file, Redis) with the response cache: answers
    /// live in their own scope.
    pub fn answer_cache(mut self, cache: impl Into<Arc<SemanticCache<Answer>>>) -> Self {
        self.query.answer_cache = Some(cache.into());
        self
    }

    /// Gives cache entries tagged `tag` (a source, `area:NAME`, `act:NAME`, `route:simple`,
    /// ...) a lifetime of `ttl`, for both caches: an entry with several such tags lives the
    /// shortest of them. For fast-changing areas: `.cache_ttl_by_tag("area:tax",
    /// Duration::from_secs(3600))` beside a one-day default.
    pub fn cache_ttl_by_tag(mut self, tag: impl Into<String>, ttl: std::time::Duration) -> Self {
        self.query.ttl_by_tag.push((tag.into(), ttl));
        self
    }

    /// Sets a semantic cache of responses (needs an embedder); pass an `Arc` to keep a handle.
    pub fn cache(mut self, cache: impl Into<Arc<SemanticCache<SearchResponse>>>) -> Self {
        self.query.cache = Some(cache.into());
        self
    }

    /// Turns HyDE on (needs a generator and an embedder; the routes come from the classifier).
    pub fn hyde(mut self, config: HydeConfig) -> Self {
        self.query.hyde = Some(config);
        self
    }

    /// Turns multi-query expansion on: generated variants (needs a generator) or, with
    /// `ExpansionConfig::host_variants_only()`, only those given in [`SearchRequest::variants`](super::SearchRequest::variants).
    pub fn expansion(mut self, config: ExpansionConfig) -> Self {
        self.query.expansion = Some(config);
        self
    }

    /// Accepts two-phase queries (`[SEARCH] ... [TASK] ... [INSTRUCT] ...`), strictly or
    /// leniently (default: off, the query drives both stages); see [`crate::parse`].
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
        self.modes.validate()?;
        self.query
            .validate(self.generator.is_some(), self.embedder.is_some())?;
        // The host's components run behind the panic boundary (`guarded`).
        let generator = self
            .generator
            .map(|g| Arc::new(Guarded::<dyn Generator>(Box::new(g))) as Arc<dyn Generator>);
        let embedder = self
            .embedder
            .map(|e| Arc::new(Guarded::<dyn Embedder>(Box::new(e))) as Arc<dyn Embedder>);
        let reranker_mode = match (&self.reranker, self.reranker_mode) {
            (None, _) => "none (stage-1 order)".to_string(),
            (Some(_), Some(mode)) => mode,
            (Some(r), None) => r.name().to_string(),
        };
        tracing::info!(
            stage = "build",
            reranker = %reranker_mode,
            two_phase = ?self.two_phase,
            instructions = self.instructions.is_some(),
            final_blend = ?self.options.final_blend,
            "pipeline built: reranker mode {reranker_mode}"
        );
        Ok(Pipeline {
            retriever: Box::new(Guarded(retriever)),
            reranker: self
                .reranker
                .map(|r| Box::new(Guarded(r)) as Box<dyn Reranker>),
            classifier: self
                .classifier
                .map(|c| Box::new(Guarded(c)) as Box<dyn QueryClassifier>),
            generator,
            embedder,
            options: self.options,
            query: self.query,
            two_phase: self.two_phase,
            modes: self.modes,
            instructions: self.instructions,
            two_phase_counts: Default::default(),
        })
    }
}
