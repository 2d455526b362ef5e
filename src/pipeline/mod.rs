//! The [`Pipeline`], which runs a query through the stages in order, and what goes in and out.
//!
//! - [`Pipeline`] (here) and [`PipelineBuilder`] (`builder`): the components, checked at
//!   `build()`; [`PipelineConfig`] (`config`): the same from YAML / TOML / JSON;
//! - [`SearchRequest`] (`request`) and [`SearchOptions`] (`options`): per-call and per-pipeline
//!   settings; [`Filter`] and [`DedupKey`];
//! - the query-side steps (`query_stages`): guard, cache, HyDE and expansion;
//! - stage 2 and post-processing (`stage2`): the candidates in, reranked (with reranker
//!   instructions) and protected, then threshold, dedup and top-k;
//! - the panic boundary around the host's components (`guarded`);
//! - [`SearchResponse`] (`response`) with per-stage [`Timings`];
//! - [`Pipeline::answer`] (`answer`) and its [`Answer`] (`answer_response`).

mod answer;
mod answer_response;
mod blend;
mod builder;
mod config;
mod dry_run;
mod guarded;
mod modes;
mod options;
mod query_stages;
mod request;
mod response;
mod sections;
mod stage2;

use std::sync::Arc;
use std::time::Instant;

pub use crate::filter::{Filter, LANGUAGE_FIELD, PATH_FIELD, SOURCE_TYPE_FIELD};
pub use answer_response::{
    canned_chitchat_reply, Answer, AnswerFlags, AnswerOptions, AnswerTimings, ChitchatMode,
    CHITCHAT_SYSTEM_PROMPT, CLARIFICATION_REPLY, OFF_TOPIC_REPLY,
};
pub use blend::FinalBlend;
pub use builder::PipelineBuilder;
pub use config::{
    read_lexicon, CacheSection, CacheStoreKind, ClassifierConfig, EmbedderConfig, FallbackConfig,
    GeneratorConfig, GroundingConfig, PiiConfig, PipelineConfig, RecallConfig, RerankerConfig,
    RerankerKind, RetrieverConfig, ServeRoles, ServeSection, StoreConfig,
};
pub use dry_run::SearchPlan;
pub use modes::HYBRID_MODE;
pub use options::{DedupKey, SearchOptions};
pub use request::SearchRequest;
pub use response::{SearchResponse, Timings, TwoPhaseStats};
pub use stage2::{InstructionSource, UsedInstruction};

use modes::RecallModes;
use query_stages::QueryStages;
use stage2::Stage2Input;

use crate::answer::Generator;
use crate::cache::SemanticCache;
use crate::classify::{Classification, QueryClassifier};
use crate::parse::{self, TwoPhaseMode};
use crate::rerankers::qwen3::Instructions;
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
    modes: RecallModes,
    instructions: Option<Instructions>,
    two_phase_counts: response::TwoPhaseCounters,
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
            .field("modes", &self.modes)
            .field("instructions", &self.instructions.is_some())
            .finish()
    }
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

    /// The stage-2 reranker, when one is set (behind the pipeline's panic boundary).
    pub fn reranker(&self) -> Option<&dyn Reranker> {
        self.reranker.as_deref()
    }

    /// The embedder, when one is set.
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// The recall modes a request can pick ([`SearchRequest::mode`]).
    pub fn recall_modes(&self) -> Vec<String> {
        self.modes.names()
    }

    /// The classifier, when one is set.
    pub fn classifier(&self) -> Option<&dyn QueryClassifier> {
        self.classifier.as_deref()
    }

    /// The semantic cache, when one is set (to invalidate entries or read its stats).
    pub fn cache(&self) -> Option<&Arc<SemanticCache<SearchResponse>>> {
        self.query.cache.as_ref()
    }

    /// The answer cache, when one is set ([`PipelineBuilder::answer_cache`]).
    pub fn answer_cache(&self) -> Option<&Arc<SemanticCache<Answer>>> {
        self.query.answer_cache.as_ref()
    }

    /// How queries used the two-phase format since the pipeline was built: parsed queries and
    /// parse failures (all zero when two-phase queries are off).
    pub fn two_phase_stats(&self) -> TwoPhaseStats {
        self.two_phase_counts.stats()
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
    /// stage 2 reranks when a reranker is set (unless
    /// [`SearchOptions::skip_rerank_within_top_k`] is set and no more than `top_k` candidates
    /// remain; [`SearchResponse::stage2_skipped`] says why it did not), falling back to
    /// stage-1 order if it fails, and keeps the top lexical matches of factual queries
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
        let plan = parse::plan(query, self.two_phase, request.instruction.as_deref());
        if self.two_phase.is_some() {
            let parsed = matches!(&plan, Ok(p) if p.two_phase.is_some());
            self.two_phase_counts.count(parsed);
            if !parsed {
                tracing::info!(stage = "parse", "two-phase parse failure");
            }
        }
        let plan = plan?;

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

        let (retriever, mode) = self.modes.pick(self.retriever.as_ref(), request)?;
        let n_candidates = self.options.candidates_for(top_k);
        let recall_text = with_people(&plan.recall, classification.as_ref());
        let recall = self.recall(
            retriever.get(),
            &recall_text,
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

        let depth = request.rerank_depth.or(self.options.rerank_depth);
        if depth == Some(0) {
            return Err(Error::InvalidInput(
                "rerank_depth must be at least 1".into(),
            ));
        }
        let stage2 = self.rerank_stage(
            Stage2Input {
                query: &plan.recall,
                rerank: plan.rerank,
                request_instruction: request.instruction.as_deref(),
                two_phase_instruction: plan
                    .two_phase
                    .as_ref()
                    .and_then(|q| q.instruction.as_deref()),
                hits,
                top_k,
                depth,
                classification: classification.as_ref(),
            },
            &mut timings,
        );
        if let Some(why) = &stage2.skipped {
            tracing::debug!(stage = "rerank", reason = %why, "stage 2 did not rerank");
        }

        let t = Instant::now();
        let threshold = request.score_threshold.or(self.options.score_threshold);
        let hits = self.postprocess(stage2.hits, top_k, threshold);
        timings.postprocess_ms = ms(t);
        timings.total_ms = ms(start);
        tracing::info!(
            stage = "search",
            mode = mode.as_deref().unwrap_or("default"),
            candidates,
            hits = hits.len(),
            reranked = stage2.reranked,
            rerank_fallback = stage2.error.is_some(),
            classify_ms = timings.classify_ms,
            cache_ms = timings.cache_ms,
            expand_ms = timings.expand_ms,
            retrieve_ms = timings.retrieve_ms,
            rerank_ms = timings.rerank_ms,
            total_ms = timings.total_ms,
            "search done"
        );

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
            mode,
            reranked_candidates: stage2.scored,
            instructions: stage2.instructions,
            stage2_skipped: stage2.skipped,
            reformulate: None,
        };
        let response = SearchResponse {
            reformulate: self.reformulate_hint(&response.hits),
            ..response
        };
        self.cache_store(probe, query, &response);
        Ok(response)
    }
}

impl Pipeline {
    /// The hint to reformulate, when the best of `hits` scores below the floor (on its
    /// reranker score when stage 2 scored it: a [`FinalBlend`] score is relative to the other
    /// candidates, the reranker's is not).
    fn reformulate_hint(&self, hits: &[Hit]) -> Option<String> {
        let floor = self.options.reformulate_below?;
        match hits.first() {
            None => Some(
                "nothing matched: try other words, or a shorter [SEARCH] phrase with the key terms"
                    .into(),
            ),
            Some(best) if best.rerank_score.unwrap_or(best.score) < floor => Some(format!(
                "the best match scores {:.2}, below {floor:.2}: try rephrasing with the specific \
                 terms the documents would use, or a shorter [SEARCH] phrase",
                best.rerank_score.unwrap_or(best.score)
            )),
            Some(_) => None,
        }
    }
}

pub(crate) fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// The recall text with the canonical names of the people the query names by alias ("tay":
/// "Taylor Smith") put after it, those it does not already spell out.
pub(super) fn with_people(text: &str, classification: Option<&Classification>) -> String {
    let mut out = text.to_string();
    let lower = crate::text::plain_words(text).join(" ");
    for name in classification.map_or(&[][..], |c| c.people.as_slice()) {
        let name_words = crate::text::plain_words(name).join(" ");
        let spelled = format!(" {lower} ").contains(&format!(" {name_words} "));
        if !name_words.is_empty() && !spelled {
            out.push(' ');
            out.push_str(name);
        }
    }
    out
}
