//! `Pipeline::answer`: chitchat, not enough information, errors from search, citation format,
//! context budget, grounding scores on hand-made answers.

use std::sync::{Arc, Mutex};

use rerank::answer::{
    Citation, ContextBudget, ContextSource, GroundingChecker, PromptBuilder, SentenceStatus,
    NOT_ENOUGH_INFORMATION, SYSTEM_PROMPT,
};
use rerank::answer::{Generation, GenerationRequest};
use rerank::classify::{Classification, Intent};
use rerank::guard::PiiKind;
use rerank::pipeline::{Answer, AnswerOptions, ChitchatMode, CHITCHAT_SYSTEM_PROMPT};
use rerank::recall::SearchQuery;
use rerank::{
    Bm25Index, Document, Error, Generator, Hit, Pipeline, QueryClassifier, Result, Retriever,
};

/// Chitchat for greetings, knowledge search for anything else.
struct ToyClassifier;
impl QueryClassifier for ToyClassifier {
    fn classify(&self, query: &str) -> Classification {
        let q = query.to_lowercase();
        let intent = if ["hello", "hi", "thanks", "bye"]
            .iter()
            .any(|w| q.split_whitespace().any(|x| x.trim_matches('!') == *w))
        {
            Intent::Chitchat
        } else {
            Intent::KnowledgeSearch
        };
        Classification {
            intent,
            confidence: 1.0,
            ..Default::default()
        }
    }
}

/// Returns fixed hits (scores as given) and counts the calls.
struct Fixed {
    hits: Vec<(Document, f32)>,
    calls: Arc<Mutex<usize>>,
}
impl Retriever for Fixed {
    fn retrieve(&self, _q: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        *self.calls.lock().unwrap() += 1;
        Ok(self
            .hits
            .iter()
            .take(k)
            .map(|(d, s)| Hit::new(Arc::new(d.clone()), *s))
            .collect())
    }
}

/// Replies with a fixed text and records every request.
#[derive(Clone)]
struct Scripted {
    reply: String,
    seen: Arc<Mutex<Vec<GenerationRequest>>>,
}
impl Scripted {
    fn new(reply: &str) -> Self {
        Scripted {
            reply: reply.into(),
            seen: Arc::new(Mutex::new(Vec::new())),
        }
    }
    fn calls(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}
impl Generator for Scripted {
    fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
        self.seen.lock().unwrap().push(request.clone());
        Ok(Generation {
            text: self.reply.clone(),
            finish_reason: Some("stop".into()),
            usage: None,
        })
    }
    fn name(&self) -> &str {
        "scripted"
    }
}

fn corpus() -> Vec<(Document, f32)> {
    vec![
        (
            Document::new("r1", "Revenue was $5M in 2023. Costs were $3M in 2023.")
                .with_source("report.pdf")
                .with_page(3),
            0.9,
        ),
        (
            Document::new("n1", "The office moved to Oslo in May.").with_source("notes.md"),
            0.4,
        ),
    ]
}

fn pipeline(
    generator: Option<Scripted>,
    hits: Vec<(Document, f32)>,
) -> (Pipeline, Arc<Mutex<usize>>) {
    let calls = Arc::new(Mutex::new(0));
    let mut b = Pipeline::builder()
        .retriever(Fixed {
            hits,
            calls: calls.clone(),
        })
        .classifier(ToyClassifier);
    if let Some(g) = generator {
        b = b.generator(g);
    }
    (b.build().unwrap(), calls)
}

#[test]
fn chitchat_is_answered_without_retrieval_or_sources() {
    let g = Scripted::new("should not be used");
    let (p, calls) = pipeline(Some(g.clone()), corpus());
    let a = p.answer("Hello!").unwrap();
    assert!(a.flags.chitchat);
    assert_eq!(a.intent, Some(Intent::Chitchat));
    assert!(a.sources.is_empty());
    assert!(a.citations.is_empty());
    assert!(a.text.starts_with("Hello"), "{}", a.text);
    assert_eq!(*calls.lock().unwrap(), 0, "chitchat must not retrieve");
    assert_eq!(g.calls(), 0, "canned chitchat does not call the generator");
    assert!(a.timings.search.is_none());

    // With ChitchatMode::Generator the generator replies, still without context.
    let opts = AnswerOptions::new().chitchat(ChitchatMode::Generator);
    let a = p
        .answer_with(&rerank::pipeline::SearchRequest::new("thanks"), &opts)
        .unwrap();
    assert_eq!(a.text, "should not be used");
    assert!(a.sources.is_empty());
    assert_eq!(*calls.lock().unwrap(), 0);
    let seen = g.seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].system(), CHITCHAT_SYSTEM_PROMPT);
    assert_eq!(seen[0].last_user(), "thanks");
}

#[test]
fn nothing_relevant_gives_the_exact_sentence_without_a_generator_call() {
    // Nothing retrieved.
    let g = Scripted::new("made up");
    let (p, calls) = pipeline(Some(g.clone()), vec![]);
    let a = p.answer("What was the revenue?").unwrap();
    assert_eq!(a.text, NOT_ENOUGH_INFORMATION);
    assert_eq!(
        a.text,
        "I don't have enough information in the provided documents to answer this question."
    );
    assert_eq!(a.confidence, 0.0);
    assert!(a.flags.not_enough_information);
    assert!(a.sources.is_empty());
    assert_eq!(*calls.lock().unwrap(), 1);
    assert_eq!(g.calls(), 0);

    // Hits exist but none reaches the relevance threshold.
    let (p, _) = pipeline(Some(g.clone()), corpus());
    let opts = AnswerOptions::new().min_score(0.95);
    let a = p
        .answer_with(&rerank::pipeline::SearchRequest::new("revenue?"), &opts)
        .unwrap();
    assert_eq!(a.text, NOT_ENOUGH_INFORMATION);
    assert_eq!(a.confidence, 0.0);
    assert_eq!(g.calls(), 0);

    // The pipeline's own score threshold counts too.
    let calls = Arc::new(Mutex::new(0));
    let p = Pipeline::builder()
        .retriever(Fixed {
            hits: corpus(),
            calls,
        })
        .generator(g.clone())
        .score_threshold(1.0)
        .build()
        .unwrap();
    assert_eq!(p.answer("revenue?").unwrap().text, NOT_ENOUGH_INFORMATION);
    assert_eq!(g.calls(), 0);

    // BM25 with no matching term, default extractive generator.
    let index = Bm25Index::new();
    index.add(corpus().into_iter().map(|(d, _)| d)).unwrap();
    let p = Pipeline::builder().retriever(index).build().unwrap();
    let a = p.answer("Who won the football cup?").unwrap();
    assert_eq!(a.text, NOT_ENOUGH_INFORMATION);
    assert!(a.flags.not_enough_information);
}

#[test]
fn a_generator_saying_not_enough_information_gets_confidence_zero() {
    let g = Scripted::new(NOT_ENOUGH_INFORMATION);
    let (p, _) = pipeline(Some(g.clone()), corpus());
    let a = p.answer("What is the CEO's name?").unwrap();
    assert_eq!(g.calls(), 1);
    assert!(a.flags.not_enough_information);
    assert_eq!(a.confidence, 0.0);
    assert!(a.unsupported.is_empty(), "the meta sentence is not a claim");
}

struct Failing;
impl Retriever for Failing {
    fn retrieve(&self, _q: &SearchQuery, _k: usize) -> Result<Vec<Hit>> {
        Err(Error::PiiRefused {
            kinds: vec![PiiKind::Email],
            message: "refused".into(),
        })
    }
}

#[test]
fn search_errors_are_returned_unchanged_and_the_generator_is_not_called() {
    let g = Scripted::new("x");
    let p = Pipeline::builder()
        .retriever(Failing)
        .generator(g.clone())
        .build()
        .unwrap();
    let e = p.answer("mail me at a@b.example").unwrap_err();
    assert!(
        matches!(&e, Error::PiiRefused { kinds, .. } if kinds == &[PiiKind::Email]),
        "{e}"
    );
    assert_eq!(g.calls(), 0);
    assert!(matches!(p.answer("  "), Err(Error::InvalidInput(_))));
}

#[test]
fn the_prompt_has_numbered_labelled_blocks_and_the_citation_rules() {
    let g = Scripted::new("Revenue was $5M in 2023 [Source: report.pdf, Page 3].");
    let (p, _) = pipeline(Some(g.clone()), corpus());
    let a = p.answer("What was the revenue in 2023?").unwrap();
    let seen = g.seen.lock().unwrap();
    let req = &seen[0];
    assert_eq!(req.system(), SYSTEM_PROMPT);
    assert!(req.system().contains("[Source: file, Page N]"));
    assert!(req.system().contains(NOT_ENOUGH_INFORMATION));
    // Each block's header carries its hit's score, to two decimals.
    assert_eq!(
        req.last_user(),
        format!(
            "Context:\n\n[1] [Source: report.pdf, Page 3] (Score: {:.2})\nRevenue was $5M in \
             2023. Costs were $3M in 2023.\n\n[2] [Source: notes.md] (Score: {:.2})\nThe office \
             moved to Oslo in May.\n\nQuestion: What was the revenue in 2023?",
            a.sources[0].score, a.sources[1].score
        )
    );
    assert_eq!(a.citations, [Citation::new("report.pdf", Some(3))]);
    assert_eq!(a.sources.len(), 2);
    assert_eq!(a.sources[0].id, "r1");
    assert_eq!(a.sources[0].page, Some(3));
    assert_eq!(a.sources[1].page, None);
    assert_eq!(a.confidence, 1.0);
    assert!(!a.flags.invalid_citations);
    assert_eq!(a.generator.as_deref(), Some("scripted"));
}

#[test]
fn the_extractive_default_cites_the_sentences_it_quotes() {
    let (p, _) = pipeline(None, corpus());
    let a = p.answer("What were the costs in 2023?").unwrap();
    assert_eq!(
        a.text,
        "Costs were $3M in 2023 [Source: report.pdf, Page 3]."
    );
    assert_eq!(a.citations, [Citation::new("report.pdf", Some(3))]);
    assert_eq!(a.confidence, 1.0);
    assert_eq!(a.generator.as_deref(), Some("extractive"));
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["sources"][0]["source"], "report.pdf");
    assert_eq!(
        json["sources"][0]["excerpt"],
        "Revenue was $5M in 2023. Costs were $3M in 2023."
    );
}

#[test]
fn the_context_budget_keeps_the_best_sources() {
    let g = Scripted::new("Revenue was $5M in 2023 [Source: report.pdf, Page 3].");
    let (p, _) = pipeline(Some(g.clone()), corpus());
    // Block 1 is "[1] [Source: report.pdf, Page 3] (Score: x)\n" + 48 chars of text.
    let score = p.answer("revenue").unwrap().sources[0].score;
    let header = format!("[1] [Source: report.pdf, Page 3] (Score: {score:.2})\n")
        .chars()
        .count();
    let budget = |text: usize| {
        AnswerOptions::new()
            .prompt(PromptBuilder::new().budget(ContextBudget::Chars(header + text)))
    };
    let opts = budget(48);
    let a = p
        .answer_with(&rerank::pipeline::SearchRequest::new("revenue"), &opts)
        .unwrap();
    assert_eq!(a.sources.len(), 1);
    assert_eq!(a.sources[0].id, "r1");
    assert!(!a.flags.context_truncated);
    let seen = g.seen.lock().unwrap();
    assert!(!seen.last().unwrap().last_user().contains("notes.md"));
    drop(seen);

    let opts = budget(27);
    let a = p
        .answer_with(&rerank::pipeline::SearchRequest::new("revenue"), &opts)
        .unwrap();
    assert_eq!(a.sources.len(), 1);
    assert_eq!(a.sources[0].excerpt, "Revenue was $5M in 2023.");
    assert!(a.flags.context_truncated);
}

#[test]
fn thinking_is_removed_and_an_empty_reply_is_an_error() {
    let g =
        Scripted::new("<think>\nmaybe\n</think>\n\nRevenue was $5M [Source: report.pdf, Page 3].");
    let (p, _) = pipeline(Some(g), corpus());
    let a = p.answer("revenue").unwrap();
    assert_eq!(a.text, "Revenue was $5M [Source: report.pdf, Page 3].");

    let (p, _) = pipeline(Some(Scripted::new("<think>x</think>  ")), corpus());
    assert!(matches!(p.answer("revenue"), Err(Error::Generation { .. })));
}

fn sources() -> Vec<ContextSource> {
    let src = |number: usize, source: &str, page: Option<u32>, text: &str| ContextSource {
        number,
        id: format!("d{number}"),
        source: source.into(),
        page,
        excerpt: text.into(),
        score: 1.0,
        truncated: false,
    };
    vec![
        src(
            1,
            "report.pdf",
            Some(3),
            "Revenue was $5M in 2023. Costs were $3M in 2023.",
        ),
        src(2, "notes.md", None, "The office moved to Oslo in May."),
    ]
}

#[test]
fn grounding_of_a_supported_answer() {
    let r = GroundingChecker::new()
        .check(
            "Revenue was $5M in 2023 [Source: report.pdf, Page 3]. The office moved to Oslo \
             [Source: notes.md].",
            &sources(),
        )
        .unwrap();
    assert_eq!((r.supported, r.counted), (2, 2));
    assert_eq!(r.confidence, 1.0);
    assert!(r.unsupported.is_empty());
    assert!(r.invalid_citations.is_empty());
    assert_eq!(r.sentences[0].best_source, Some(1));
    assert_eq!(r.sentences[1].best_source, Some(2));
    // "revenu", "5m", "2023" all in source 1.
    assert_eq!(r.sentences[0].score, 1.0);
}

#[test]
fn grounding_of_an_unsupported_answer() {
    let r = GroundingChecker::new()
        .check(
            "Profits tripled in Berlin [Source: report.pdf, Page 9]. Employees got bonuses.",
            &sources(),
        )
        .unwrap();
    assert_eq!((r.supported, r.counted), (0, 2));
    assert_eq!(r.confidence, 0.0);
    assert_eq!(
        r.unsupported,
        [
            "Profits tripled in Berlin [Source: report.pdf, Page 9].",
            "Employees got bonuses."
        ]
    );
    // Page 9 of report.pdf was never provided.
    assert_eq!(r.invalid_citations, [Citation::new("report.pdf", Some(9))]);
}

#[test]
fn grounding_of_a_mixed_answer() {
    // Sentence 2: content tokens "cost", "3m", "2023", "berlin" -> 3 of 4 in source 1 (0.75).
    // Sentence 3: "offic", "move", "pari", "june" -> 2 of 4 in source 2 (0.5, the threshold).
    // Sentence 4: "ceo", "resign" -> none.
    let answer = "Based on the documents, here is what I found. Costs were $3M in 2023 in \
                  Berlin. The office moved to Paris in June [Source: notes.md]. The CEO \
                  resigned [Source: memo.txt].";
    let r = GroundingChecker::new().check(answer, &sources()).unwrap();
    let status: Vec<SentenceStatus> = r.sentences.iter().map(|s| s.status).collect();
    assert_eq!(
        status,
        [
            SentenceStatus::Meta,
            SentenceStatus::Supported,
            SentenceStatus::Supported,
            SentenceStatus::Unsupported
        ]
    );
    assert_eq!(r.sentences[1].score, 0.75);
    assert_eq!(r.sentences[2].score, 0.5);
    assert_eq!((r.supported, r.counted), (2, 3));
    assert!((r.confidence - 2.0 / 3.0).abs() < 1e-6);
    assert_eq!(r.unsupported, ["The CEO resigned [Source: memo.txt]."]);
    assert_eq!(r.invalid_citations, [Citation::new("memo.txt", None)]);

    // A stricter threshold drops sentence 3.
    let strict = GroundingChecker::new().threshold(0.6).unwrap();
    let r = strict.check(answer, &sources()).unwrap();
    assert_eq!((r.supported, r.counted), (1, 3));
}

#[test]
fn grounding_skips_citation_only_and_meta_sentences() {
    let answer = "Revenue was $5M in 2023. [Source: report.pdf, Page 3]\n[Source: notes.md]\n\
                  I don't have more details on costs.";
    let r = GroundingChecker::new().check(answer, &sources()).unwrap();
    let status: Vec<SentenceStatus> = r.sentences.iter().map(|s| s.status).collect();
    assert_eq!(
        status,
        [
            SentenceStatus::Supported,
            SentenceStatus::CitationOnly,
            SentenceStatus::CitationOnly,
            SentenceStatus::Meta
        ]
    );
    assert_eq!((r.supported, r.counted), (1, 1));
    assert_eq!(r.confidence, 1.0);

    let only = GroundingChecker::new()
        .check("[Source: report.pdf, Page 3]", &sources())
        .unwrap();
    assert_eq!((only.supported, only.counted, only.confidence), (0, 0, 0.0));
}

#[test]
fn the_answer_reports_grounding_through_the_pipeline() {
    let g = Scripted::new(
        "Revenue was $5M in 2023 [Source: report.pdf, Page 3]. The CEO resigned [Source: \
         memo.txt].",
    );
    let (p, _) = pipeline(Some(g), corpus());
    let a: Answer = p.answer("revenue and the CEO?").unwrap();
    assert_eq!(a.confidence, 0.5);
    assert_eq!(a.unsupported, ["The CEO resigned [Source: memo.txt]."]);
    assert!(a.flags.invalid_citations);
    assert_eq!(a.invalid_citations, [Citation::new("memo.txt", None)]);
    let report = a.grounding.as_ref().unwrap();
    assert_eq!((report.supported, report.counted), (1, 2));
    assert!(a.timings.generate_ms.is_some() && a.timings.grounding_ms.is_some());
}

#[test]
fn a_shared_pipeline_answers_from_many_threads() {
    let (p, _) = pipeline(None, corpus());
    let p = Arc::new(p);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let p = p.clone();
            std::thread::spawn(move || p.answer("What were the costs in 2023?").unwrap().text)
        })
        .collect();
    for h in handles {
        assert_eq!(
            h.join().unwrap(),
            "Costs were $3M in 2023 [Source: report.pdf, Page 3]."
        );
    }
}

#[test]
fn pii_in_a_chitchat_query_is_refused_before_answering() {
    let query = "hi there, my email is someone@example.com";
    // The classifier alone would answer this as chitchat, without any search.
    assert_eq!(ToyClassifier.classify(query).intent, Intent::Chitchat);
    let index = rerank::Bm25Index::new();
    index
        .add(vec![rerank::Document::new("1", "hello world")])
        .unwrap();
    let pipeline = rerank::Pipeline::builder()
        .retriever(index)
        .classifier(ToyClassifier)
        .build()
        .unwrap();
    let err = pipeline.answer(query).unwrap_err();
    assert!(matches!(err, rerank::Error::PiiRefused { .. }), "{err}");
    assert!(!err.to_string().contains("someone@example.com"));
}

/// Scores every document with the same logit.
struct FixedLogit(f32);
impl rerank::Reranker for FixedLogit {
    fn score(&self, _q: &rerank::rerankers::RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(vec![self.0; docs.len()])
    }
    fn name(&self) -> &str {
        "fixed-logit"
    }
}

#[test]
fn relevance_comes_from_the_question_terms_or_the_rerankers_calibrated_score() {
    use rerank::answer::{ConfidenceBand, RelevanceMeasure};
    // Query terms: "costs" and "2023" are in the report, "Oslo" is not: 2 of 3.
    let (p, _) = pipeline(None, corpus());
    let a = p.answer("What were the costs in 2023 in Oslo?").unwrap();
    assert_eq!(a.relevance_basis, Some(RelevanceMeasure::QueryTerms));
    assert!((a.relevance - 2.0 / 3.0).abs() < 1e-6, "{}", a.relevance);
    assert_eq!(a.relevance_band, ConfidenceBand::High);
    // The answer's band is the weaker of grounding's and relevance's.
    let strict = AnswerOptions::new()
        .relevance_bands(rerank::answer::ConfidenceBands::new(0.9, 0.5).unwrap());
    let a = p
        .answer_with(
            &rerank::pipeline::SearchRequest::new("What were the costs in 2023 in Oslo?"),
            &strict,
        )
        .unwrap();
    assert_eq!(a.grounding_band, ConfidenceBand::High);
    assert_eq!(
        (a.relevance_band, a.confidence_band),
        (ConfidenceBand::Medium, ConfidenceBand::Medium)
    );
    assert!(!a.flags.low_relevance);

    // A cross-encoder's logit through its sigmoid: -2 is p = 0.12, low whatever the terms.
    let reranked = |logit: f32| {
        Pipeline::builder()
            .retriever(Fixed {
                hits: corpus(),
                calls: Arc::new(Mutex::new(0)),
            })
            .reranker(FixedLogit(logit))
            .build()
            .unwrap()
    };
    let sigmoid = AnswerOptions::new().relevance(RelevanceMeasure::RerankerSigmoid);
    let q = rerank::pipeline::SearchRequest::new("What were the costs in 2023?");
    let a = reranked(-2.0).answer_with(&q, &sigmoid).unwrap();
    assert_eq!(a.relevance_basis, Some(RelevanceMeasure::RerankerSigmoid));
    assert!((a.relevance - 1.0 / (1.0 + 2f32.exp())).abs() < 1e-6);
    assert_eq!(a.confidence, 1.0);
    assert_eq!(a.confidence_band, ConfidenceBand::Low);
    assert!(a.flags.low_relevance);
    let a = reranked(3.0).answer_with(&q, &sigmoid).unwrap();
    assert_eq!(a.confidence_band, ConfidenceBand::High);
    // Without reranker scores (no reranker) the measure falls back to the question's terms.
    let (p, _) = pipeline(None, corpus());
    let a = p.answer_with(&q, &sigmoid).unwrap();
    assert_eq!(a.relevance_basis, Some(RelevanceMeasure::QueryTerms));

    // Chitchat measures nothing; not-enough-information has no sources to measure.
    let a = p.answer("Hello!").unwrap();
    assert_eq!((a.relevance, a.relevance_basis), (1.0, None));
    let (none, _) = pipeline(None, Vec::new());
    let a = none.answer("What were the costs?").unwrap();
    assert_eq!((a.relevance, a.relevance_basis), (0.0, None));
    assert_eq!(a.confidence_band, ConfidenceBand::Low);

    // An answer stored before these fields existed still reads back (the answer cache).
    let mut old = serde_json::to_value(&a).unwrap();
    for key in ["grounding_band", "relevance", "relevance_band"] {
        old.as_object_mut().unwrap().remove(key);
    }
    let back: Answer = serde_json::from_value(old).unwrap();
    assert_eq!(back.relevance_band, ConfidenceBand::Low);
}

/// Issue 53, PDF QA: a request can leave the sources out; the citations stay in the text, and
/// grounding is still checked against the sources the generator was given.
#[test]
fn include_sources_false_leaves_the_sources_out() {
    let (p, _) = pipeline(None, corpus());
    let q = rerank::pipeline::SearchRequest::new("What were the costs in 2023?");
    let with = p.answer_with(&q, &AnswerOptions::new()).unwrap();
    let without = p
        .answer_with(&q, &AnswerOptions::new().include_sources(false))
        .unwrap();
    assert!(!with.sources.is_empty());
    assert!(without.sources.is_empty() && without.brief_sources().is_empty());
    assert_eq!(without.text, with.text);
    assert!(without.text.contains("[Source: report.pdf, Page 3]"));
    assert_eq!(without.citations, with.citations);
    assert_eq!(
        (without.confidence, without.confidence_band),
        (with.confidence, with.confidence_band)
    );
    assert!(without.grounding.is_some());
    // And from a config: `grounding.include_sources: false`.
    let config = rerank::pipeline::PipelineConfig::from_yaml_str(
        "retriever: { type: bm25 }\ngrounding: { include_sources: false }\n",
    )
    .unwrap();
    assert!(!config.answer_options().unwrap().includes_sources());
}

/// Streams its fixed reply three characters at a time, stopping when asked to.
struct Trickle(Scripted);
impl Generator for Trickle {
    fn generate(&self, request: &GenerationRequest) -> Result<Generation> {
        self.0.generate(request)
    }
    fn generate_stream(
        &self,
        request: &GenerationRequest,
        on_text: &mut (dyn FnMut(&str) -> std::ops::ControlFlow<()> + Send),
    ) -> Result<Generation> {
        let whole = self.0.generate(request)?;
        let chars: Vec<char> = whole.text.chars().collect();
        let mut written = String::new();
        for piece in chars.chunks(3) {
            let piece: String = piece.iter().collect();
            written.push_str(&piece);
            if on_text(&piece).is_break() {
                return Ok(Generation {
                    text: written,
                    ..whole
                });
            }
        }
        Ok(whole)
    }
    fn name(&self) -> &str {
        "trickle"
    }
}

#[test]
fn answers_stream_their_text_without_thinking_and_add_up_to_the_answer() {
    use std::ops::ControlFlow;
    let reply = "<think>\nThe report says so.\n</think>\n\n Revenue was $5M in 2023 [Source: report.pdf, Page 3].\n";
    let build = || {
        Pipeline::builder()
            .retriever(Fixed {
                hits: corpus(),
                calls: Arc::new(Mutex::new(0)),
            })
            .classifier(ToyClassifier)
            .generator(Trickle(Scripted::new(reply)))
            .build()
            .unwrap()
    };
    let pipeline = build();
    let request = rerank::pipeline::SearchRequest::new("What was the revenue in 2023?");
    let options = AnswerOptions::default();
    let mut pieces = Vec::new();
    let streamed = pipeline
        .answer_stream(&request, &options, &mut |p| {
            pieces.push(p.to_string());
            ControlFlow::Continue(())
        })
        .unwrap();
    let whole = build().answer_with(&request, &options).unwrap();
    assert_eq!(
        streamed.text,
        "Revenue was $5M in 2023 [Source: report.pdf, Page 3]."
    );
    assert_eq!(pieces.concat(), streamed.text);
    assert!(pieces.len() > 5, "{pieces:?}");
    assert!(pieces.iter().all(|p| !p.contains("think") && !p.is_empty()));
    assert_eq!(streamed.text, whole.text);
    assert_eq!(streamed.citations, whole.citations);
    assert_eq!(streamed.confidence, whole.confidence);

    // Replies that are not generated come in one piece: chitchat, not enough information.
    for (query, hits) in [("hello!", corpus()), ("What was the revenue?", Vec::new())] {
        let (p, _) = pipeline_with(Trickle(Scripted::new(reply)), hits);
        let mut pieces = Vec::new();
        let answer = p
            .answer_stream(
                &rerank::pipeline::SearchRequest::new(query),
                &options,
                &mut |t| {
                    pieces.push(t.to_string());
                    ControlFlow::Continue(())
                },
            )
            .unwrap();
        assert_eq!(pieces, std::slice::from_ref(&answer.text), "{query}");
    }

    // Breaking after the first piece stops the generator there.
    let mut calls = 0;
    let cut = build()
        .answer_stream(&request, &options, &mut |_| {
            calls += 1;
            ControlFlow::Break(())
        })
        .unwrap();
    assert_eq!(calls, 1);
    assert!(cut.text.len() < streamed.text.len(), "{}", cut.text);
}

fn pipeline_with(
    generator: impl Generator + 'static,
    hits: Vec<(Document, f32)>,
) -> (Pipeline, Arc<Mutex<usize>>) {
    let calls = Arc::new(Mutex::new(0));
    let p = Pipeline::builder()
        .retriever(Fixed {
            hits,
            calls: calls.clone(),
        })
        .classifier(ToyClassifier)
        .generator(generator)
        .build()
        .unwrap();
    (p, calls)
}
