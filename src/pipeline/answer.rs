//! [`Pipeline::answer`]: search, build a cited prompt, generate, check grounding.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use super::with_people;
use super::{canned_chitchat_reply, Answer, AnswerOptions, ChitchatMode, CHITCHAT_SYSTEM_PROMPT};
use super::{ms, AnswerTimings, Pipeline, SearchRequest};
use super::{CLARIFICATION_REPLY, OFF_TOPIC_REPLY};
use crate::answer::{
    distinct_citations, is_not_enough_information, strip_thinking, Extractive, Generation,
    GenerationRequest, SourceScores, ThinkingFilter, NOT_ENOUGH_INFORMATION,
};
use crate::classify::Intent;
use crate::parse;
use crate::{Error, Generator, Result};

impl Pipeline {
    /// Answers `query` from the indexed documents with the default [`AnswerOptions`].
    ///
    /// ```
    /// use rerank::{Bm25Index, Document, Pipeline};
    /// let index = Bm25Index::new();
    /// index.add(vec![
    ///     Document::new("1", "Revenue was $5M in 2023. The office is in Oslo.")
    ///         .with_source("report.pdf").with_page(3),
    ///     Document::new("2", "Cats sleep a lot.").with_source("cats.md"),
    /// ])?;
    /// let pipeline = Pipeline::builder().retriever(index).build()?;
    /// let answer = pipeline.answer("What was the revenue in 2023?")?;
    /// assert_eq!(answer.text, "Revenue was $5M in 2023 [Source: report.pdf, Page 3].");
    /// assert_eq!(answer.confidence, 1.0);
    ///
    /// let none = pipeline.answer("Who won the 1998 World Cup?")?;
    /// assert!(none.flags.not_enough_information);
    /// # Ok::<(), rerank::Error>(())
    /// ```
    pub fn answer(&self, query: &str) -> Result<Answer> {
        self.answer_with(&SearchRequest::new(query), &AnswerOptions::default())
    }

    /// Answers with per-call search overrides and answer options.
    ///
    /// Steps:
    /// 1. classify (when a classifier is set); chitchat is answered right away, without
    ///    retrieval and without sources ([`ChitchatMode`]); so are, with
    ///    [`AnswerOptions::route_intents`] (the default), an off-topic question
    ///    ([`OFF_TOPIC_REPLY`], [`AnswerFlags::off_topic`](super::AnswerFlags::off_topic)) and
    ///    one with nothing to search for ([`CLARIFICATION_REPLY`], a request to clarify,
    ///    [`AnswerFlags::needs_clarification`](super::AnswerFlags::needs_clarification)), both
    ///    with confidence and relevance 0;
    /// 2. search with [`Pipeline::search_with`] (its errors, such as a refused query, are
    ///    returned as they are);
    /// 3. keep the hits at or above [`AnswerOptions::min_score`]; when none is left, the answer is
    ///    [`NOT_ENOUGH_INFORMATION`] with confidence 0, and the generator is not called;
    /// 4. build the prompt: numbered `[Source: file, Page N]` blocks, best first, within the
    ///    context budget;
    /// 5. generate with the pipeline's generator ([`Extractive`] when none is set); `<think>`
    ///    blocks are removed;
    /// 6. check grounding: confidence = supported / counted sentences (0 when the reply is the
    ///    not-enough-information sentence); unsupported sentences and citations that point at
    ///    no source are listed;
    /// 7. measure relevance: how well the best source given to the generator matches the
    ///    question ([`RelevanceMeasure`](crate::answer::RelevanceMeasure): the question's terms
    ///    in the source, or the reranker's calibrated score). The answer's band is the weaker
    ///    of the grounding band and the relevance band, so a faithful quote from sources that
    ///    are not about the question is not `high` ([`Answer::confidence_band`]).
    pub fn answer_with(&self, request: &SearchRequest, options: &AnswerOptions) -> Result<Answer> {
        self.answer_inner(request, options, &mut None)
    }

    /// [`answer_with`](Self::answer_with), handing the answer's text to `on_text` as it is
    /// written: the generator's reply piece by piece as it decodes (without its `<think>`
    /// blocks and surrounding whitespace, [`ThinkingFilter`]), or a reply that is not generated
    /// (a canned one, a cached answer, the not-enough-information sentence) in one piece. The
    /// pieces make [`Answer::text`]; the returned answer then adds what needs the whole text
    /// (citations, grounding, confidence). `on_text` returning `ControlFlow::Break` stops the
    /// generation (a client that went away); the answer is then built from what was written.
    pub fn answer_stream(
        &self,
        request: &SearchRequest,
        options: &AnswerOptions,
        on_text: &mut (dyn FnMut(&str) -> ControlFlow<()> + Send),
    ) -> Result<Answer> {
        let mut streamed = false;
        let mut sink = |piece: &str| {
            streamed = true;
            on_text(piece)
        };
        let answer = self.answer_inner(request, options, &mut Some(&mut sink))?;
        if !streamed && !answer.text.is_empty() {
            let _ = on_text(&answer.text);
        }
        Ok(answer)
    }

    fn answer_inner(
        &self,
        request: &SearchRequest,
        options: &AnswerOptions,
        on_text: &mut TextSink<'_>,
    ) -> Result<Answer> {
        options.validate()?;
        let start = Instant::now();
        let query = request.query.trim();
        if query.is_empty() {
            return Err(Error::InvalidInput("the query is empty".into()));
        }
        // Personal data is refused before anything else, chitchat included.
        self.guard(request)?;

        let t = Instant::now();
        let classification = self.classifier.as_ref().map(|c| c.classify(query));
        let classify_ms = classification.as_ref().map(|_| ms(t));
        let intent = classification.as_ref().map(|c| c.intent);

        if intent == Some(Intent::Chitchat) {
            let mut answer = self.chitchat(query, options, on_text)?;
            answer.query = request.query.clone();
            answer.intent = intent;
            answer.classification = classification;
            answer.timings.classify_ms = classify_ms;
            answer.timings.total_ms = ms(start);
            // A reply to small talk claims nothing about the documents, and is about the
            // question by construction.
            answer.set_confidence(1.0, 1.0, None, options);
            tracing::info!(stage = "answer", "chitchat answered without retrieval");
            return Ok(answer);
        }
        if let Some(text) = intent
            .filter(|_| options.routes_intents())
            .and_then(routed_reply)
        {
            let mut answer = Answer::bare(request.query.clone(), text);
            answer.flags.off_topic = intent == Some(Intent::OffTopic);
            answer.flags.needs_clarification = intent == Some(Intent::Clarification);
            answer.intent = intent;
            answer.classification = classification;
            answer.timings.classify_ms = classify_ms;
            answer.timings.total_ms = ms(start);
            // Nothing is answered from the documents: no grounding, no relevance.
            answer.set_confidence(0.0, 0.0, None, options);
            tracing::info!(stage = "answer", intent = ?intent, "answered without retrieval");
            return Ok(answer);
        }

        let t = Instant::now();
        let probe = self.answer_cache_probe(query, request, &options_key(options));
        if let Some(mut cached) = probe.hit {
            cached.query = request.query.clone();
            cached.intent = intent;
            cached.classification = classification;
            cached.flags.cache_hit = true;
            cached.timings = AnswerTimings {
                classify_ms,
                total_ms: ms(start),
                ..AnswerTimings::default()
            };
            tracing::info!(
                stage = "answer",
                ms = ms(t),
                "answered from the answer cache"
            );
            return Ok(cached);
        }
        let (answer, tags) = self.answer_fresh(
            request,
            options,
            classification,
            classify_ms,
            start,
            on_text,
        )?;
        self.answer_cache_store(probe, query, &answer, tags);
        Ok(answer)
    }

    /// `answer_with` from the search on: the answer and the cache tags of its response.
    fn answer_fresh(
        &self,
        request: &SearchRequest,
        options: &AnswerOptions,
        classification: Option<crate::classify::Classification>,
        classify_ms: Option<f64>,
        start: Instant,
        on_text: &mut TextSink<'_>,
    ) -> Result<(Answer, Vec<String>)> {
        let query = request.query.trim();
        let intent = classification.as_ref().map(|c| c.intent);
        // What the sources are held against for relevance: the text recall searched for (the
        // [SEARCH] phrase of a two-phase query, with the full names of aliased people).
        let relevance_text = match parse::plan(query, self.two_phase, None) {
            Ok(plan) => with_people(&plan.recall, classification.as_ref()),
            Err(_) => query.to_string(),
        };
        let response = self.search_with(request)?;
        let tags = match self.query.answer_cache {
            Some(_) => self.cache_tags(&response),
            None => Vec::new(),
        };
        let hits: Vec<_> = response
            .hits
            .into_iter()
            .filter(|h| options.relevance_threshold().is_none_or(|m| h.score >= m))
            .collect();

        let mut answer = Answer::bare(request.query.clone(), NOT_ENOUGH_INFORMATION);
        answer.intent = intent;
        answer.classification = classification;
        answer.flags.rerank_fallback = response.rerank_fallback;
        answer.flags.cache_hit = response.cache_hit;
        answer.flags.not_enough_information = true;
        answer.timings.classify_ms = classify_ms;
        answer.timings.search = Some(response.timings);

        let t = Instant::now();
        let prompt = options.prompt_builder().build(query, &hits)?;
        answer.timings.prompt_ms = Some(ms(t));
        if prompt.sources.is_empty() {
            answer.timings.total_ms = ms(start);
            return Ok((answer, tags));
        }
        let mut generation_request = prompt.request;
        options.apply_to(&mut generation_request);

        let generator: Arc<dyn Generator> = match self.generator() {
            Some(g) => g.clone(),
            None => Arc::new(Extractive::default()),
        };
        let t = Instant::now();
        let generation = generate_filtered(generator.as_ref(), &generation_request, on_text)?;
        answer.timings.generate_ms = Some(ms(t));
        let text = strip_thinking(&generation.text);
        if text.is_empty() {
            return Err(Error::generation(format!(
                "{} returned an empty answer (finish reason: {})",
                generator.name(),
                generation.finish_reason.as_deref().unwrap_or("unknown")
            )));
        }

        let t = Instant::now();
        let report = options.grounding_checker().check(&text, &prompt.sources)?;
        answer.timings.grounding_ms = Some(ms(t));

        let nei = is_not_enough_information(&text);
        answer.citations = distinct_citations(&text);
        answer.text = text;
        // The sources the generator was given, with their full text and reranker score.
        let given: Vec<(String, Option<f32>)> = prompt
            .sources
            .iter()
            .filter_map(|s| hits.iter().find(|h| h.id() == s.id))
            .map(|h| (h.document.full_text(), h.rerank_score))
            .collect();
        let given: Vec<SourceScores<'_>> = given
            .iter()
            .map(|(text, rerank_score)| SourceScores {
                text,
                rerank_score: *rerank_score,
            })
            .collect();
        let (relevance, basis) =
            match crate::answer::relevance(options.relevance_measure(), &relevance_text, &given) {
                Some((r, used)) => (r, Some(used)),
                None => (0.0, None),
            };
        let grounding = if nei { 0.0 } else { report.confidence };
        answer.set_confidence(grounding, relevance, basis, options);
        tracing::info!(
            stage = "answer",
            confidence = answer.confidence,
            relevance = answer.relevance,
            band = ?answer.confidence_band,
            not_enough_information = nei,
            generate_ms = answer.timings.generate_ms,
            "answer done"
        );
        answer.unsupported = report.unsupported.clone();
        answer.invalid_citations = report.invalid_citations.clone();
        answer.flags.not_enough_information = nei;
        answer.flags.invalid_citations = !report.invalid_citations.is_empty();
        answer.flags.context_truncated = prompt.sources.iter().any(|s| s.truncated);
        if options.includes_sources() {
            answer.sources = prompt.sources;
        }
        answer.grounding = Some(report);
        answer.generator = Some(generator.name().to_string());
        answer.finish_reason = generation.finish_reason;
        answer.timings.total_ms = ms(start);
        Ok((answer, tags))
    }

    /// The reply to chitchat: canned, or from the generator when asked for and set.
    fn chitchat(
        &self,
        query: &str,
        options: &AnswerOptions,
        on_text: &mut TextSink<'_>,
    ) -> Result<Answer> {
        let generator = match options.chitchat_mode() {
            ChitchatMode::Generator => self.generator(),
            ChitchatMode::Canned => None,
        };
        let mut answer = match generator {
            None => Answer::bare(query, canned_chitchat_reply(query)),
            Some(g) => {
                let mut request = GenerationRequest::new(CHITCHAT_SYSTEM_PROMPT, query);
                options.apply_to(&mut request);
                let t = Instant::now();
                let generation = generate_filtered(g.as_ref(), &request, on_text)?;
                let text = strip_thinking(&generation.text);
                let text = if text.is_empty() {
                    canned_chitchat_reply(query).to_string()
                } else {
                    text
                };
                let mut a = Answer::bare(query, text);
                a.timings.generate_ms = Some(ms(t));
                a.generator = Some(g.name().to_string());
                a.finish_reason = generation.finish_reason;
                a
            }
        };
        answer.flags.chitchat = true;
        Ok(answer)
    }
}

/// Where an answer's text goes as it is written: nowhere (`None`: the generator is asked for
/// the whole reply, as [`Pipeline::answer_with`] does), or to a caller's `on_text`.
type TextSink<'a> = Option<&'a mut (dyn FnMut(&str) -> ControlFlow<()> + Send)>;

/// The generator's reply to `request`: whole without a sink; with one, streamed to it without
/// thinking blocks (the pieces add up to `strip_thinking` of the reply).
fn generate_filtered(
    generator: &dyn Generator,
    request: &GenerationRequest,
    sink: &mut TextSink<'_>,
) -> Result<Generation> {
    let Some(on_text) = sink else {
        return generator.generate(request);
    };
    let mut filter = ThinkingFilter::new();
    let mut flow = ControlFlow::Continue(());
    let generation = generator.generate_stream(request, &mut |piece| {
        let out = filter.push(piece);
        if !out.is_empty() {
            flow = on_text(&out);
        }
        flow
    })?;
    let rest = filter.finish();
    if flow.is_continue() && !rest.is_empty() {
        let _ = on_text(&rest);
    }
    Ok(generation)
}

/// The reply to a question of `intent` that is answered without a search: off-topic and
/// clarification questions ([`AnswerOptions::route_intents`]).
fn routed_reply(intent: Intent) -> Option<&'static str> {
    match intent {
        Intent::OffTopic => Some(OFF_TOPIC_REPLY),
        Intent::Clarification => Some(CLARIFICATION_REPLY),
        Intent::Chitchat | Intent::KnowledgeSearch => None,
    }
}

/// A short key for the answer options, part of an answer cache entry's scope: an answer made
/// with other options (threshold, context budget, prompt) is not served for these.
fn options_key(options: &AnswerOptions) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{options:?}").hash(&mut h);
    format!("{:016x}", h.finish())
}
