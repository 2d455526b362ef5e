//! The [`Answer`] that [`Pipeline::answer`](crate::Pipeline::answer) returns, and the
//! [`AnswerOptions`] that shape it.

use serde::{Deserialize, Serialize};

use super::Timings;
use crate::answer::{
    distinct_citations, Citation, ConfidenceBand, ConfidenceBands, ContextSource, GroundingChecker,
    GroundingReport, PromptBuilder, RelevanceMeasure, SourceBrief,
};
use crate::classify::{Classification, Intent};
use crate::{Error, Result};

/// How chitchat (greetings, thanks, farewells) is answered. Either way nothing is retrieved and
/// the answer has no sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChitchatMode {
    /// A fixed friendly reply (the default; no generator call).
    #[default]
    Canned,
    /// Ask the pipeline's generator, with [`CHITCHAT_SYSTEM_PROMPT`] and no context; falls back
    /// to the canned reply when the pipeline has no generator.
    Generator,
}

/// The system prompt for chitchat in [`ChitchatMode::Generator`].
pub const CHITCHAT_SYSTEM_PROMPT: &str = "You are a friendly assistant for questions about the \
user's documents. Reply to the user's small talk in one or two short sentences, and invite them \
to ask a question about their documents. Do not state any facts.";

/// The answer to an off-topic question (intent [`Intent::OffTopic`]: none of its words is in
/// the domain the classifier knows, e.g. from `classifier.domain_from_corpus`), given without
/// searching when [`AnswerOptions::route_intents`] is on; [`AnswerFlags::off_topic`] marks it.
pub const OFF_TOPIC_REPLY: &str = "Your question is outside the domain of this knowledge base, \
so I can't answer it from its documents. Please ask about a subject the documents cover.";

/// The answer to a question with nothing to search for (intent [`Intent::Clarification`]:
/// only stopwords, or a reference back to an earlier turn that was not given), given without
/// searching when [`AnswerOptions::route_intents`] is on; [`AnswerFlags::needs_clarification`]
/// marks it.
pub const CLARIFICATION_REPLY: &str = "Could you clarify your question? It does not say what to \
look for: please name the topic, document or person you mean.";

/// The canned chitchat reply for `query`: thanks, farewell or greeting.
pub fn canned_chitchat_reply(query: &str) -> &'static str {
    let q = query.to_lowercase();
    let has = |words: &[&str]| {
        q.split(|c: char| !c.is_alphanumeric())
            .any(|w| words.contains(&w))
    };
    if has(&["thanks", "thank", "thx", "ty", "cheers", "appreciate"]) {
        "You're welcome! Ask me anything about your documents."
    } else if has(&["bye", "goodbye", "farewell", "later", "cya"]) {
        "Goodbye! Come back any time you have a question about your documents."
    } else {
        "Hello! Ask me a question about your documents and I will answer from them, with sources."
    }
}

/// Settings for one [`Pipeline::answer_with`](crate::Pipeline::answer_with) call.
///
/// ```
/// use rerank::answer::{ContextBudget, GroundingChecker, PromptBuilder};
/// use rerank::pipeline::AnswerOptions;
/// let options = AnswerOptions::new()
///     .prompt(PromptBuilder::new().budget(ContextBudget::Tokens(1500)).max_sources(5))
///     .checker(GroundingChecker::new().threshold(0.6)?)
///     .min_score(0.2)
///     .max_new_tokens(300);
/// options.validate()?;
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct AnswerOptions {
    prompt: PromptBuilder,
    checker: GroundingChecker,
    min_score: Option<f32>,
    max_new_tokens: usize,
    temperature: f32,
    top_p: f32,
    seed: u64,
    chitchat: ChitchatMode,
    bands: ConfidenceBands,
    relevance: RelevanceMeasure,
    relevance_bands: ConfidenceBands,
    include_sources: bool,
    route_intents: bool,
}

impl Default for AnswerOptions {
    fn default() -> Self {
        AnswerOptions {
            prompt: PromptBuilder::default(),
            checker: GroundingChecker::default(),
            min_score: None,
            max_new_tokens: 512,
            temperature: 0.0,
            top_p: 1.0,
            seed: 42,
            chitchat: ChitchatMode::default(),
            bands: ConfidenceBands::default(),
            relevance: RelevanceMeasure::default(),
            relevance_bands: ConfidenceBands::relevance(),
            include_sources: true,
            route_intents: true,
        }
    }
}

impl AnswerOptions {
    /// Defaults: [`PromptBuilder::new`], [`GroundingChecker::new`], no extra score threshold,
    /// 512 new tokens, greedy decoding, canned chitchat.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the prompt builder (system prompt, context budget, source count).
    pub fn prompt(mut self, prompt: PromptBuilder) -> Self {
        self.prompt = prompt;
        self
    }

    /// Sets the grounding checker.
    pub fn checker(mut self, checker: GroundingChecker) -> Self {
        self.checker = checker;
        self
    }

    /// Hits scoring below `score` are not relevant enough to answer from (applied after the
    /// pipeline's own `score_threshold`).
    pub fn min_score(mut self, score: f32) -> Self {
        self.min_score = Some(score);
        self
    }

    /// Upper bound on generated tokens.
    pub fn max_new_tokens(mut self, n: usize) -> Self {
        self.max_new_tokens = n;
        self
    }

    /// Sampling temperature (0 = greedy), nucleus mass and seed.
    pub fn sampling(mut self, temperature: f32, top_p: f32, seed: u64) -> Self {
        self.temperature = temperature;
        self.top_p = top_p;
        self.seed = seed;
        self
    }

    /// How chitchat is answered.
    pub fn chitchat(mut self, mode: ChitchatMode) -> Self {
        self.chitchat = mode;
        self
    }

    /// Sets where the confidence bands start (default: high from 0.8, medium from 0.5).
    pub fn bands(mut self, bands: ConfidenceBands) -> Self {
        self.bands = bands;
        self
    }

    /// The confidence bands.
    pub fn confidence_bands(&self) -> ConfidenceBands {
        self.bands
    }

    /// Sets how the relevance of the sources to the question is measured (default
    /// [`RelevanceMeasure::QueryTerms`]; a config picks it from the reranker type).
    pub fn relevance(mut self, measure: RelevanceMeasure) -> Self {
        self.relevance = measure;
        self
    }

    /// The relevance measure.
    pub fn relevance_measure(&self) -> RelevanceMeasure {
        self.relevance
    }

    /// Sets where the relevance bands start (default [`ConfidenceBands::relevance`]: high from
    /// 0.6, medium from 0.4).
    pub fn relevance_bands(mut self, bands: ConfidenceBands) -> Self {
        self.relevance_bands = bands;
        self
    }

    /// The relevance bands.
    pub fn relevance_confidence_bands(&self) -> ConfidenceBands {
        self.relevance_bands
    }

    /// Whether the answer lists its sources (default true). With `false`, [`Answer::sources`]
    /// is empty: the text keeps its `[Source: ...]` citations, and grounding and relevance are
    /// still measured against the sources the generator was given.
    pub fn include_sources(mut self, include: bool) -> Self {
        self.include_sources = include;
        self
    }

    /// Whether the answer lists its sources.
    pub fn includes_sources(&self) -> bool {
        self.include_sources
    }

    /// Whether off-topic and clarification questions get their own answer without a search
    /// (default true): an off-topic question is answered with [`OFF_TOPIC_REPLY`], one with
    /// nothing to search for with [`CLARIFICATION_REPLY`]. With `false`, both are searched and
    /// answered like any question. Needs a classifier on the pipeline; chitchat is answered
    /// without a search either way ([`ChitchatMode`]).
    pub fn route_intents(mut self, route: bool) -> Self {
        self.route_intents = route;
        self
    }

    /// Whether off-topic and clarification questions are answered without a search.
    pub fn routes_intents(&self) -> bool {
        self.route_intents
    }

    /// The prompt builder.
    pub fn prompt_builder(&self) -> &PromptBuilder {
        &self.prompt
    }

    /// The grounding checker.
    pub fn grounding_checker(&self) -> &GroundingChecker {
        &self.checker
    }

    /// The extra score threshold.
    pub fn relevance_threshold(&self) -> Option<f32> {
        self.min_score
    }

    /// The chitchat mode.
    pub fn chitchat_mode(&self) -> ChitchatMode {
        self.chitchat
    }

    /// Applies the generation settings to `request`.
    pub fn apply_to(&self, request: &mut crate::answer::GenerationRequest) {
        request.max_new_tokens = self.max_new_tokens;
        request.temperature = self.temperature;
        request.top_p = self.top_p;
        request.seed = self.seed;
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        self.prompt.validate()?;
        if self.max_new_tokens == 0 {
            return Err(Error::Config("max_new_tokens must be at least 1".into()));
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Error::Config(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::Config(format!(
                "top_p must be in (0, 1], got {}",
                self.top_p
            )));
        }
        if self.min_score.is_some_and(f32::is_nan) {
            return Err(Error::Config("min_score must not be NaN".into()));
        }
        Ok(())
    }
}

/// Flags that say how an answer came about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerFlags {
    /// The query was chitchat: answered without retrieval.
    pub chitchat: bool,
    /// The question is outside the knowledge base's domain: answered with [`OFF_TOPIC_REPLY`]
    /// without retrieval ([`AnswerOptions::route_intents`]).
    #[serde(default)]
    pub off_topic: bool,
    /// The question gave nothing to search for: the answer ([`CLARIFICATION_REPLY`]) asks the
    /// user to clarify, without retrieval ([`AnswerOptions::route_intents`]).
    #[serde(default)]
    pub needs_clarification: bool,
    /// The answer is the not-enough-information sentence.
    pub not_enough_information: bool,
    /// The reranker failed and stage-1 order was used.
    pub rerank_fallback: bool,
    /// The hits came from the semantic cache (a response cached for a close enough query),
    /// or, with an answer cache, the whole answer did: then nothing was retrieved or generated
    /// for this call, and the timings say so.
    #[serde(default)]
    pub cache_hit: bool,
    /// At least one source was cut to fit the context budget.
    pub context_truncated: bool,
    /// The answer cites something that is not among the sources.
    pub invalid_citations: bool,
    /// The sources hardly match the question: the answer's relevance is in the `low` band
    /// (see [`Answer::relevance`]), so the answer is at most `low` however well grounded.
    #[serde(default)]
    pub low_relevance: bool,
}

/// Milliseconds spent in each step of one answer; steps that did not run are `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerTimings {
    /// Query classification (before retrieval).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classify_ms: Option<f64>,
    /// The search, with its own per-stage timings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<Timings>,
    /// Prompt building.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_ms: Option<f64>,
    /// The generator call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate_ms: Option<f64>,
    /// The grounding check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grounding_ms: Option<f64>,
    /// Everything.
    pub total_ms: f64,
}

/// A grounded answer. It round-trips through serde (JSON), as the answer cache stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The question as asked.
    pub query: String,
    /// The answer text, with inline `[Source: file, Page N]` citations.
    pub text: String,
    /// The distinct citations in the text, in order of first appearance.
    pub citations: Vec<Citation>,
    /// The sources the generator was given (id, source, page, excerpt, score), best first;
    /// empty when the call asked for none ([`AnswerOptions::include_sources`]).
    pub sources: Vec<ContextSource>,
    /// Grounding: the share of the answer's claim sentences a source supports; 0 for a
    /// not-enough-information answer, 1 for a chitchat reply (nothing is claimed about the
    /// documents). It says whether the answer keeps to its sources, not whether they are about
    /// the question: that is [`Answer::relevance`].
    pub confidence: f32,
    /// The band of `confidence` (grounding) on [`AnswerOptions::bands`].
    #[serde(default = "low_band")]
    pub grounding_band: ConfidenceBand,
    /// Relevance: how well the sources the generator was given match the question, in
    /// `[0, 1]`, for the best source, measured as `relevance_basis` says (the share of the
    /// question's terms a source has, or the reranker's calibrated score). 0 without sources,
    /// 1 for a chitchat reply.
    #[serde(default)]
    pub relevance: f32,
    /// What `relevance` was computed from; `None` when nothing was measured (chitchat, no
    /// sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relevance_basis: Option<RelevanceMeasure>,
    /// The band of `relevance` on [`AnswerOptions::relevance_bands`].
    #[serde(default = "low_band")]
    pub relevance_band: ConfidenceBand,
    /// The answer's band: the weaker of `grounding_band` and `relevance_band`. A well-grounded
    /// answer from sources that do not match the question is not `high`.
    pub confidence_band: ConfidenceBand,
    /// The query's intent, when a classifier is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent: Option<Intent>,
    /// The full classification, when a classifier is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classification: Option<Classification>,
    /// Sentences no source supports.
    pub unsupported: Vec<String>,
    /// Citations that point at no provided source.
    pub invalid_citations: Vec<Citation>,
    /// The full grounding report, when the answer was checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grounding: Option<GroundingReport>,
    /// How the answer came about.
    pub flags: AnswerFlags,
    /// The generator's name, when it was called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generator: Option<String>,
    /// Why generation stopped, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Per-step timings.
    pub timings: AnswerTimings,
}

impl Answer {
    /// The sources as a user sees them: source, page, a short excerpt, a rounded score.
    pub fn brief_sources(&self) -> Vec<SourceBrief> {
        self.sources.iter().map(SourceBrief::from_source).collect()
    }

    /// Sets the grounding and relevance figures, their bands, the answer's band (the weaker)
    /// and [`AnswerFlags::low_relevance`].
    pub fn set_confidence(
        &mut self,
        grounding: f32,
        relevance: f32,
        basis: Option<RelevanceMeasure>,
        options: &AnswerOptions,
    ) {
        self.confidence = grounding;
        self.grounding_band = options.confidence_bands().band(grounding);
        self.relevance = relevance;
        self.relevance_basis = basis;
        self.relevance_band = options.relevance_confidence_bands().band(relevance);
        self.confidence_band = self.grounding_band.weaker(self.relevance_band);
        self.flags.low_relevance = self.relevance_band == ConfidenceBand::Low;
    }

    /// An answer with `text` and nothing else filled in.
    pub fn bare(query: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        Answer {
            query: query.into(),
            citations: distinct_citations(&text),
            text,
            sources: Vec::new(),
            confidence: 0.0,
            grounding_band: ConfidenceBand::Low,
            relevance: 0.0,
            relevance_basis: None,
            relevance_band: ConfidenceBand::Low,
            confidence_band: ConfidenceBand::Low,
            intent: None,
            classification: None,
            unsupported: Vec::new(),
            invalid_citations: Vec::new(),
            grounding: None,
            flags: AnswerFlags::default(),
            generator: None,
            finish_reason: None,
            timings: AnswerTimings::default(),
        }
    }
}

/// The band of answers stored before bands were split (they read back as `low`).
fn low_band() -> ConfidenceBand {
    ConfidenceBand::Low
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_replies() {
        assert!(canned_chitchat_reply("Thanks a lot!").starts_with("You're welcome"));
        assert!(canned_chitchat_reply("ok bye").starts_with("Goodbye"));
        assert!(canned_chitchat_reply("hi there").starts_with("Hello"));
    }

    #[test]
    fn options_are_validated() {
        assert!(AnswerOptions::new().validate().is_ok());
        assert!(AnswerOptions::new().max_new_tokens(0).validate().is_err());
        assert!(AnswerOptions::new()
            .sampling(-1.0, 1.0, 0)
            .validate()
            .is_err());
        assert!(AnswerOptions::new()
            .sampling(0.7, 0.0, 0)
            .validate()
            .is_err());
        assert!(AnswerOptions::new().min_score(f32::NAN).validate().is_err());
    }
}
