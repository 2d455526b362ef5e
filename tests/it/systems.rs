//! The five systems the crate exists for, each from its configuration in `examples/configs/`
//! and its data in `examples/data/`: what each example prints is checked here.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rerank::classify::{LegalExtractor, QueryKind, Route};
use rerank::embed::{cosine, HashingEmbedder};
use rerank::pipeline::{
    CacheStoreKind, InstructionSource, Pipeline, PipelineConfig, SearchRequest,
};
use rerank::recall::keyword_overlap;
use rerank::{Embedder, Error};

use crate::common::CountingGenerator;

fn config_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/configs")
        .join(name)
}

fn load(name: &str) -> PipelineConfig {
    PipelineConfig::from_path(config_path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A scratch SQLite path under the target directory, removed on drop.
struct TempDb(PathBuf);

impl TempDb {
    fn new(tag: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join(format!("systems_{tag}_{}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        TempDb(path)
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for ext in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", self.0.display()));
        }
    }
}

/// The legal config with its cache in `db`.
fn legal(db: &TempDb) -> PipelineConfig {
    let mut config = load("legal_router.yaml");
    config.cache.as_mut().expect("a cache section").path = Some(db.0.clone());
    config
}

const CONFIGS: [&str; 5] = [
    "personal_search.yaml",
    "agent_memory.json",
    "pdf_qa.yaml",
    "two_phase_kb.toml",
    "legal_router.yaml",
];

#[test]
fn every_example_config_loads_round_trips_and_builds() {
    let listed: Vec<String> = std::fs::read_dir(config_path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // serve.yaml is below; five_signals.yaml (sparse, BM25 and dense recall with ColBERT
    // reranking) is built and searched in tests/it/colbert.rs.
    for name in listed.iter() {
        assert!(
            CONFIGS.contains(&name.as_str())
                || ["serve.yaml", "five_signals.yaml"].contains(&name.as_str()),
            "{name} is not tested here"
        );
    }
    // The models-only serve config names its models (resolved when they load: it is served in
    // tests/it/serve.rs) and has neither corpus nor retriever.
    let serve = load("serve.yaml");
    assert!(serve.corpus.is_none());
    assert_eq!(
        serve.reranker.as_ref().and_then(|r| r.model.as_deref()),
        Some(Path::new("cross-encoder/ms-marco-MiniLM-L-6-v2"))
    );
    let yaml = serve.to_yaml_string().unwrap();
    assert_eq!(PipelineConfig::from_yaml_str(&yaml).unwrap(), serve);
    let db = TempDb::new("round_trip");
    for name in CONFIGS {
        let config = load(name);
        // YAML and JSON round trips give the same config.
        let yaml = config.to_yaml_string().unwrap();
        assert_eq!(
            PipelineConfig::from_yaml_str(&yaml).unwrap(),
            config,
            "{name} (YAML)"
        );
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(
            PipelineConfig::from_json_str(&json).unwrap(),
            config,
            "{name} (JSON)"
        );
        let config = if name == "legal_router.yaml" {
            legal(&db)
        } else {
            config
        };
        let pipeline = config
            .build(Vec::new())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let query = match name {
            // Strict two-phase: the format is required, and its absence is an error.
            "two_phase_kb.toml" => {
                let e = pipeline.search("section leave cache note").unwrap_err();
                assert!(e.to_string().contains("[SEARCH]"), "{e}");
                "[SEARCH] section leave [TASK] cache note"
            }
            _ => "section leave cache note",
        };
        assert!(pipeline.search(query).is_ok(), "{name}");
    }
}

#[test]
fn config_errors_name_the_key() {
    let e = PipelineConfig::from_yaml_str(
        "retriever: {type: bm25}\nreranker: {type: lexical, modle: x}",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("reranker") && e.to_string().contains("modle"),
        "{e}"
    );
    let e = PipelineConfig::from_yaml_str(
        "retriever: {type: hybrid, retrievers: [{type: bm25}, {type: vector, dim: 3}]}",
    )
    .unwrap_err();
    // Inside an internally tagged enum the path stops at the enum.
    assert!(
        e.to_string().contains("retriever") && e.to_string().contains("dim"),
        "{e}"
    );
    let e = PipelineConfig::from_toml_str("[retriever]\ntype = \"bm25\"\n[cache]\nttl = 3\n")
        .unwrap_err();
    assert!(
        e.to_string().contains("cache") && e.to_string().contains("ttl"),
        "{e}"
    );

    // A missing input file fails at load, with the key.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("missing_{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "retriever: {type: bm25}\nclassifier: {aliases: no-such-aliases.json}\n",
    )
    .unwrap();
    let e = PipelineConfig::from_path(&path).unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(matches!(e, Error::Config(_)), "{e:?}");
    assert!(e.to_string().contains("classifier.aliases"), "{e}");

    // The cache section's shapes: memory, sqlite with a path, redis with a url.
    let redis = PipelineConfig::from_yaml_str(
        "retriever: {type: bm25}\ncache: {store: redis, url: \"redis://127.0.0.1:6379/0\"}",
    )
    .unwrap();
    let cache = redis.cache.unwrap();
    assert_eq!(cache.store, CacheStoreKind::Redis);
    assert_eq!(cache.url.as_deref(), Some("redis://127.0.0.1:6379/0"));
    let e = PipelineConfig::from_yaml_str(
        "retriever: {type: bm25}\nembedder: {type: hashing}\ncache: {store: sqlite}",
    )
    .unwrap()
    .build(Vec::new())
    .unwrap_err();
    assert!(e.to_string().contains("cache.path"), "{e}");
    let e = PipelineConfig::from_yaml_str("retriever: {type: bm25}\ncache: {store: memory}")
        .unwrap()
        .build(Vec::new())
        .unwrap_err();
    assert!(e.to_string().contains("embedder"), "{e}");
}

/// System 1: `cargo run --example personal_search`.
#[test]
fn personal_search_keeps_the_exact_match_on_top() {
    let config = load("personal_search.yaml");
    let classifier = config.classifier.clone().unwrap().build(&[]).unwrap();
    let pipeline = config.build(Vec::new()).unwrap();

    let r = pipeline.search("Taylor's KTN").unwrap();
    // Hybrid recall over 50 candidates: every one of the 14 notes comes back (vectors find
    // them all), and the hits carry both stage-1 scores.
    assert_eq!(r.candidates, 14);
    assert!(r.hits[0].bm25_score.is_some() && r.hits[0].vector_score.is_some());
    let c = r.classification.as_ref().unwrap();
    assert_eq!(c.kind, QueryKind::Factual);
    assert_eq!(c.kind_confidence, 1.0);
    assert!(c.signals.iter().any(|s| s == "possessive_identifier"));
    assert_eq!(r.hits[0].id(), "note-01");
    assert!(r.hits[0].protected);

    // The alias resolves to the person; her note comes first.
    let q = "tay's passport";
    assert_eq!(classifier.known_names(q), ["Taylor Smith"]);
    // The pipeline adds the full name itself (no need to spell it out in the query).
    let r = pipeline.search(q).unwrap();
    assert_eq!(
        r.hits[0].id(),
        "note-01",
        "{:?}",
        r.hits.iter().map(|h| h.id()).collect::<Vec<_>>()
    );

    let r = pipeline
        .search("what did we learn from the data migration project")
        .unwrap();
    assert_eq!(r.classification.as_ref().unwrap().kind, QueryKind::Semantic);
    assert_eq!(r.hits[0].id(), "note-07");
    assert!(r.hits.iter().all(|h| !h.protected));
}

/// System 2: `cargo run --example agent_memory`.
#[test]
fn agent_memory_modes_filters_depth_and_fallback() {
    let pipeline = load("agent_memory.json").build(Vec::new()).unwrap();
    assert_eq!(pipeline.recall_modes(), ["bm25", "vector", "hybrid"]);
    let q = "how does the cache invalidate stale entries";

    let r = pipeline.search(q).unwrap();
    // Every one of the corpus's 14 documents: fewer than the 30 candidates asked for.
    assert_eq!(r.candidates, 14);
    assert!(r.reranked);
    for h in &r.hits {
        assert!(h.rerank_score.is_some() && h.stage1_rank >= 1);
    }
    let r = pipeline
        .search_with(&SearchRequest::new(q).mode("bm25"))
        .unwrap();
    assert_eq!(r.mode.as_deref(), Some("bm25"));
    assert!(r
        .hits
        .iter()
        .all(|h| h.bm25_score.is_some() && h.vector_score.is_none()));
    let r = pipeline
        .search_with(&SearchRequest::new(q).mode("vector"))
        .unwrap();
    assert!(r
        .hits
        .iter()
        .all(|h| h.vector_score.is_some() && h.bm25_score.is_none()));
    let r = pipeline
        .search_with(&SearchRequest::new(q).fusion_weight(0.8))
        .unwrap();
    assert_eq!(r.mode.as_deref(), Some("hybrid"));
    // The weight is applied: the vector side's weight moves the fused scores and ranks.
    let stage1 = |w: f32| {
        let r = pipeline
            .search_with(&SearchRequest::new(q).fusion_weight(w))
            .unwrap();
        let mut ranks: Vec<(String, usize, f32)> = r
            .hits
            .iter()
            .map(|h| (h.id().to_string(), h.stage1_rank, h.stage1_score))
            .collect();
        ranks.sort_by(|a, b| a.0.cmp(&b.0));
        ranks
    };
    let (mostly_vector, mostly_bm25) = (stage1(0.9), stage1(0.1));
    assert_ne!(mostly_vector, mostly_bm25);
    // A request's score threshold overrides the pipeline's: only hits at or above it stay.
    let all = pipeline.search(q).unwrap();
    let cut = all.hits[0].score;
    let r = pipeline
        .search_with(&SearchRequest::new(q).score_threshold(cut))
        .unwrap();
    assert!(!r.hits.is_empty() && r.hits.iter().all(|h| h.score >= cut));
    assert!(
        r.hits.len() < all.hits.len(),
        "{} of {}",
        r.hits.len(),
        all.hits.len()
    );

    let r = pipeline
        .search_with(
            &SearchRequest::new(q)
                .source_types(["code"])
                .languages(["rust"])
                .path_prefix("src/cache/"),
        )
        .unwrap();
    assert!(!r.hits.is_empty());
    for h in &r.hits {
        let m = &h.document.metadata;
        assert_eq!(m["source_type"], "code");
        assert_eq!(m["language"], "rust");
        assert!(m["path"].as_str().unwrap().starts_with("src/cache/"));
    }

    // Rerank depth 2: two reranked hits first, the rest in stage-1 order after them.
    let r = pipeline
        .search_with(&SearchRequest::new(q).rerank_depth(2).top_k(5))
        .unwrap();
    assert_eq!(r.reranked_candidates, 2);
    assert!(r.hits[..2]
        .iter()
        .all(|h| h.rerank_score.is_some() && h.stage1_rank <= 2));
    let tail: Vec<usize> = r.hits[2..].iter().map(|h| h.stage1_rank).collect();
    assert!(
        tail.iter().all(|&rank| rank > 2) && tail.windows(2).all(|w| w[0] < w[1]),
        "{tail:?}"
    );
    assert!(r.hits[2..].iter().all(|h| h.rerank_score.is_none()));

    let e = pipeline
        .search_with(&SearchRequest::new(q).mode("graph"))
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidInput(ref m) if m.contains("bm25")),
        "{e}"
    );
    let e = pipeline
        .search_with(&SearchRequest::new(q).mode("bm25").fusion_weight(0.3))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
    let e = pipeline
        .search_with(&SearchRequest::new(q).fusion_weight(1.5))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
}

/// System 3: `cargo run --example pdf_qa`.
#[test]
fn pdf_qa_refuses_cites_bands_and_scores_linearly() {
    let config = load("pdf_qa.yaml");
    let options = config.answer_options().unwrap();
    let pipeline = config.build(Vec::new()).unwrap();
    let ask = |q: &str| pipeline.answer_with(&SearchRequest::new(q), &options);

    let hi = ask("hi there!").unwrap();
    assert!(hi.flags.chitchat && hi.sources.is_empty());
    assert_eq!(hi.confidence, 1.0);

    let a = ask("How many days of paid annual leave do employees get per year?").unwrap();
    assert!(a.text.contains("25 days"), "{}", a.text);
    assert!(
        a.text.contains("[Source: employee-handbook.pdf, Page 1]"),
        "{}",
        a.text
    );
    assert!(a.confidence >= 0.8, "{}", a.confidence);
    assert_eq!(a.confidence_band, rerank::answer::ConfidenceBand::High);
    for s in a.brief_sources() {
        assert!(s.excerpt.chars().count() <= rerank::answer::EXCERPT_CHARS + 3);
        assert!(((s.score * 10_000.0).round() / 10_000.0 - s.score).abs() < 1e-6);
    }

    assert!(matches!(
        ask("My SSN is 123-45-6789, how much sick leave do I have?"),
        Err(Error::PiiRefused { .. })
    ));
    // Searched (`grounding.route_intents: false`; by default it is answered without a search,
    // see `pdf_qa_answers_off_topic_and_unclear_questions_without_searching`), the off-topic
    // question finds nothing relevant.
    let none = pipeline
        .answer_with(
            &SearchRequest::new("Who won the 1998 football world cup?"),
            &options.clone().route_intents(false),
        )
        .unwrap();
    assert!(none.flags.not_enough_information);
    assert_eq!(none.text, rerank::answer::NOT_ENOUGH_INFORMATION);
    assert_eq!(none.confidence, 0.0);

    // Linear fusion over raw scores: 0.7 x cosine + 0.3 x keyword overlap, exactly.
    let q = "Are meals reimbursed during business travel?";
    let r = pipeline.search(q).unwrap();
    let e = HashingEmbedder::new(512).unwrap();
    let qv = e.embed_one(q).unwrap();
    for h in &r.hits {
        let text = h.document.full_text();
        let want =
            0.7 * cosine(&qv, &e.embed_one(&text).unwrap()) + 0.3 * keyword_overlap(q, &text);
        assert!(
            (h.score - want).abs() < 1e-5,
            "{}: {} vs {want}",
            h.id(),
            h.score
        );
        assert!(h.score >= 0.3);
    }
    assert_eq!(r.hits[0].id(), "expense-policy_p2_c1");
}

/// Issue 53, D10: the PDF system answers a question outside its documents' domain with a note
/// saying so, and one with nothing to search for with a request to clarify, both without a
/// search or a generator call; the answer's flags say which. `grounding.route_intents: false`
/// searches them as before.
#[test]
fn pdf_qa_answers_off_topic_and_unclear_questions_without_searching() {
    use rerank::answer::ConfidenceBand;
    use rerank::classify::Intent;
    use rerank::pipeline::{CLARIFICATION_REPLY, OFF_TOPIC_REPLY};
    use std::sync::atomic::Ordering;
    let config = load("pdf_qa.yaml");
    assert!(config.grounding.as_ref().unwrap().route_intents);
    let options = config.answer_options().unwrap();
    let (pipeline, calls) = CountingGenerator::pipeline(&config);
    let ask = |q: &str, o: &rerank::pipeline::AnswerOptions| {
        pipeline.answer_with(&SearchRequest::new(q), o).unwrap()
    };

    let off = ask("Who won the 1998 football world cup?", &options);
    assert_eq!(off.text, OFF_TOPIC_REPLY);
    assert_eq!(off.intent, Some(Intent::OffTopic));
    assert!(off.flags.off_topic, "{:?}", off.flags);
    assert!(!off.flags.needs_clarification && !off.flags.not_enough_information);
    assert!(off.sources.is_empty() && off.citations.is_empty());
    assert_eq!(off.timings.search, None, "nothing was searched");
    assert!(off.timings.classify_ms.is_some());
    assert_eq!((off.confidence, off.relevance), (0.0, 0.0));
    assert_eq!(off.confidence_band, ConfidenceBand::Low);
    // The flag is in the answer's JSON, for hosts, and reads back.
    let json = serde_json::to_value(&off).unwrap();
    assert_eq!(json["flags"]["off_topic"], true, "{json}");
    assert_eq!(json["flags"]["needs_clarification"], false, "{json}");
    let back: rerank::Answer = serde_json::from_value(json).unwrap();
    assert_eq!(back, off);

    for q in ["what about that one?", "tell me more"] {
        let a = ask(q, &options);
        assert_eq!(a.text, CLARIFICATION_REPLY, "{q}");
        assert_eq!(a.intent, Some(Intent::Clarification), "{q}");
        assert!(a.flags.needs_clarification && !a.flags.off_topic, "{q}");
        assert!(a.sources.is_empty() && a.timings.search.is_none(), "{q}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no generator call");

    // A question about the documents is searched and answered as before.
    let a = ask(
        "How many days of paid annual leave do employees get per year?",
        &options,
    );
    assert!(a.text.contains("25 days"), "{}", a.text);
    assert!(!a.flags.off_topic && !a.flags.needs_clarification);
    assert!(a.timings.search.is_some());
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Personal data is refused before any routing.
    assert!(matches!(
        pipeline.answer_with(
            &SearchRequest::new("My SSN is 123-45-6789, who won the world cup?"),
            &options
        ),
        Err(Error::PiiRefused { .. })
    ));

    // One key away, today's behaviour: both are searched and answered from what was found.
    let mut searched = config.clone();
    searched.grounding.as_mut().unwrap().route_intents = false;
    let o = searched.answer_options().unwrap();
    assert!(!o.routes_intents());
    let off = ask("Who won the 1998 football world cup?", &o);
    assert_eq!(off.intent, Some(Intent::OffTopic));
    assert!(!off.flags.off_topic && off.flags.not_enough_information);
    assert!(off.timings.search.is_some(), "searched");
    let unclear = ask("what about that one?", &o);
    assert!(!unclear.flags.needs_clarification && unclear.timings.search.is_some());
    assert_ne!(unclear.text, CLARIFICATION_REPLY);

    // Without a classifier nothing is routed: the intent is unknown.
    let mut plain = config.clone();
    plain.classifier = None;
    let p = plain.build(Vec::new()).unwrap();
    let a = p
        .answer_with(
            &SearchRequest::new("Who won the 1998 football world cup?"),
            &options,
        )
        .unwrap();
    assert!(a.intent.is_none() && !a.flags.off_topic && a.timings.search.is_some());
}

/// System 4: `cargo run --example two_phase_kb`.
#[test]
fn two_phase_kb_says_which_instruction_each_candidate_got() {
    let pipeline = load("two_phase_kb.toml").build(Vec::new()).unwrap();
    let sources = |r: &rerank::pipeline::SearchResponse| -> Vec<InstructionSource> {
        r.instructions.iter().map(|u| u.source).collect()
    };
    let r = pipeline
        .search("[SEARCH] shutdown runtime [TASK] my service hangs on exit and the shutdown fails")
        .unwrap();
    assert_eq!(
        r.classification.as_ref().unwrap().task_type,
        rerank::classify::TaskType::Troubleshooting
    );
    let got = sources(&r);
    assert!(got.contains(&InstructionSource::Entity), "{got:?}");
    assert!(got.contains(&InstructionSource::TaskType), "{got:?}");
    for u in &r.instructions {
        match u.source {
            InstructionSource::Entity => {
                let e = u.entity.as_deref().unwrap();
                assert!(e == "manual" || e == "experience");
            }
            InstructionSource::TaskType => assert_eq!(
                u.text,
                rerank::rerankers::qwen3::TROUBLESHOOTING_INSTRUCTION
            ),
            other => panic!("{other:?}"),
        }
    }
    let total: usize = r.instructions.iter().map(|u| u.candidates).sum();
    assert_eq!(total, r.reranked_candidates);

    let r = pipeline
        .search(
            "[SEARCH] event sourcing [TASK] keep every change [INSTRUCT] prefer production reports",
        )
        .unwrap();
    assert_eq!(sources(&r), [InstructionSource::TwoPhase]);
    assert_eq!(r.instructions[0].text, "prefer production reports");
    let r = pipeline
        .search_with(
            &SearchRequest::new("[SEARCH] deploy service [TASK] deploy [INSTRUCT] ignored")
                .instruction("mine"),
        )
        .unwrap();
    assert_eq!(sources(&r), [InstructionSource::Request]);
    assert_eq!(r.instructions[0].text, "mine");
}

/// System 5: `cargo run --example legal_router` and `rerank query`.
#[test]
fn legal_router_routes_caches_by_act_and_persists() {
    let db = TempDb::new("legal");
    let pipeline = legal(&db).build(Vec::new()).unwrap();
    let plan = |q: &str| pipeline.plan(&SearchRequest::new(q)).unwrap();

    let p = plan("What does section 420 of the Penal Code say?");
    let c = p.classification.as_ref().unwrap();
    assert_eq!((c.route, c.route_confidence), (Route::Simple, 1.0));
    assert!(!p.hyde && p.cache);
    assert_eq!(c.legal.acts, ["penal code"]);
    let p = plan("Compare the Delhi High Court and the Bombay High Court on bail");
    let c = p.classification.as_ref().unwrap();
    assert_eq!((c.route, c.route_confidence), (Route::Analytical, 1.0));
    assert_eq!(
        c.legal.jurisdictions,
        ["delhi high court", "bombay high court"]
    );
    // HyDE is configured for the route, but the extractive generator writes no hypothetical
    // document: the plan says it will not run, and why.
    assert!(!p.hyde);
    let off = p.hyde_off.as_deref().unwrap();
    assert!(
        off.contains("extractive") && off.contains("local_chat"),
        "{off}"
    );
    assert!(p.answer_cache);
    let p = plan("duties under the Companies Act 2013 and the Contract Act 1872");
    let c = p.classification.as_ref().unwrap();
    assert_eq!((c.route, c.route_confidence), (Route::Complex, 0.7));
    assert_eq!(
        plan("directors' duties")
            .classification
            .unwrap()
            .route_confidence,
        0.5
    );

    let penal = "What does section 420 of the Penal Code say?";
    let companies = "duties of directors under the Companies Act 2013";
    assert!(!pipeline.search(penal).unwrap().cache_hit);
    assert!(!pipeline.search(companies).unwrap().cache_hit);
    // A rephrasing is answered from the cache.
    assert!(
        pipeline
            .search("What are the duties of directors under the Companies Act 2013?")
            .unwrap()
            .cache_hit
    );
    let cache = pipeline.cache().unwrap();
    assert_eq!(cache.stats().entries, 2);
    // The Companies Act changed: exactly its answers go.
    assert_eq!(
        cache.invalidate_tag(&LegalExtractor::act_tag("Companies Act")),
        1
    );
    assert!(!pipeline.search(companies).unwrap().cache_hit);
    assert!(pipeline.search(penal).unwrap().cache_hit);
    drop(pipeline);

    // The cache lives in the SQLite file: a new process finds the answers.
    let again = legal(&db).build(Vec::new()).unwrap();
    assert!(again.search(penal).unwrap().cache_hit);
    assert!(again.search(companies).unwrap().cache_hit);
    assert!(again.cache().unwrap().stats().hits >= 3);
}

/// Collects every log line written while it is the default subscriber.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    /// A subscriber writing every event at `level` and above into the lines returned.
    fn capture(level: tracing::Level) -> (Lines, impl tracing::Subscriber + Send + Sync) {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        (lines, subscriber)
    }
}

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_refused_querys_personal_data_never_reaches_a_log_line() {
    let (lines, subscriber) = Lines::capture(tracing::Level::TRACE);
    let db = TempDb::new("logs");
    let pipeline: Pipeline = legal(&db).build(Vec::new()).unwrap();
    let secret = ["123-45-6789", "4111 1111 1111 1111", "jane.doe@example.com"];
    tracing::subscriber::with_default(subscriber, || {
        // Callsites another test thread registered first must see this subscriber too.
        tracing::callsite::rebuild_interest_cache();
        for s in secret {
            let q = format!("Is {s} covered by section 43 of the Information Technology Act?");
            assert!(matches!(pipeline.search(&q), Err(Error::PiiRefused { .. })));
            assert!(pipeline.answer(&q).is_err());
            assert!(pipeline.plan(&SearchRequest::new(q)).is_err());
        }
        // A normal query logs its stages, so the subscriber did see the pipeline.
        pipeline
            .search("section 43 of the Information Technology Act")
            .unwrap();
    });
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("query refused"), "{text}");
    // Every refusal was logged (3 queries x search, answer, plan), with the kinds only.
    assert_eq!(text.matches("query refused").count(), 9, "{text}");
    assert!(
        text.contains("kinds=ssn") && text.contains("kinds=email"),
        "{text}"
    );
    for s in secret {
        assert!(!text.contains(s), "{s} reached the log:\n{text}");
    }
    // Fragments as they would appear if part of a value leaked; a digit run alone is not
    // one (stage timings are floats such as `ms=0.1111`).
    for fragment in ["45-6789", "4111 1111", "1111 1111", "jane", "example.com"] {
        assert!(
            !text.contains(fragment),
            "{fragment} reached the log:\n{text}"
        );
    }
}

#[test]
fn legal_router_answers_a_rephrasing_from_the_cache_without_the_generator() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let db = TempDb::new("legal-answers");
    let calls = Arc::new(AtomicUsize::new(0));
    let build = |calls: &Arc<AtomicUsize>| {
        legal(&db)
            .builder(Vec::new())
            .unwrap()
            .generator(CountingGenerator(calls.clone()))
            .build()
            .unwrap()
    };
    let pipeline = build(&calls);
    let asked = "duties of directors under the Companies Act 2013";
    let rephrased = "What are the duties of directors under the Companies Act 2013?";
    let first = pipeline.answer(asked).unwrap();
    assert!(!first.flags.cache_hit && !first.flags.not_enough_information);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(first.timings.search.is_some() && first.timings.generate_ms.is_some());

    // The rephrasing: the stored answer, its citations and confidence, no retrieval, no
    // generation.
    let second = pipeline.answer(rephrased).unwrap();
    assert!(second.flags.cache_hit);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(second.query, rephrased);
    assert_eq!(
        (
            &second.text,
            &second.citations,
            &second.sources,
            second.confidence
        ),
        (
            &first.text,
            &first.citations,
            &first.sources,
            first.confidence
        )
    );
    assert!(second.timings.search.is_none() && second.timings.generate_ms.is_none());

    // Another process on the same file finds it too.
    let other_calls = Arc::new(AtomicUsize::new(0));
    let other = build(&other_calls);
    assert!(other.answer(rephrased).unwrap().flags.cache_hit);
    assert_eq!(other_calls.load(Ordering::SeqCst), 0);

    // The act is amended: what cites it goes (the cached search response and the answer),
    // and the next question is answered afresh.
    let removed = pipeline
        .cache()
        .unwrap()
        .invalidate_tag(&LegalExtractor::act_tag("Companies Act 2013"));
    assert!(removed >= 1, "{removed}");
    let third = pipeline.answer(rephrased).unwrap();
    assert!(!third.flags.cache_hit);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(third.text, first.text);
}

/// The legal router's config on each store it takes here: one invalidation of an act on the
/// response cache drops the cached answers that cite it too (the in-memory store kept them,
/// in two separate maps, before).
#[test]
fn one_invalidation_drops_responses_and_answers_on_every_store() {
    use rerank::pipeline::CacheStoreKind;
    use std::sync::atomic::Ordering;
    let db = TempDb::new("legal-invalidate");
    for kind in [CacheStoreKind::Memory, CacheStoreKind::Sqlite] {
        let mut config = legal(&db);
        let cache = config.cache.as_mut().unwrap();
        cache.store = kind;
        if kind == CacheStoreKind::Memory {
            cache.path = None;
        }
        let (pipeline, calls) = CountingGenerator::pipeline(&config);
        let (responses, answers) = (pipeline.cache().unwrap(), pipeline.answer_cache().unwrap());
        responses.clear();
        let asked = "duties of directors under the Companies Act 2013";
        pipeline.answer(asked).unwrap();
        assert!(pipeline.answer(asked).unwrap().flags.cache_hit, "{kind:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{kind:?}");

        let removed = responses.invalidate_tag(&LegalExtractor::act_tag("Companies Act 2013"));
        assert!(
            removed >= 2,
            "{kind:?}: the response and the answer, {removed} removed"
        );
        assert_eq!(answers.stats().entries, 0, "{kind:?}");
        assert!(!pipeline.answer(asked).unwrap().flags.cache_hit, "{kind:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{kind:?}");
    }
}

#[test]
fn fast_changing_areas_get_their_own_ttl() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    let clock = Arc::new(rerank::cache::ManualClock::new());
    let cache = rerank::cache::SemanticCache::builder()
        .ttl(Duration::from_secs(24 * 3600))
        .clock(clock.clone())
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut config = load("legal_router.yaml");
    config.cache = None;
    let pipeline = config
        .builder(Vec::new())
        .unwrap()
        .embedder(Arc::new(HashingEmbedder::new(512).unwrap()))
        .generator(CountingGenerator(calls.clone()))
        .answer_cache(cache)
        .cache_ttl_by_tag("area:technology", Duration::from_secs(3600))
        .build()
        .unwrap();
    let it = "penalty for damage to a computer system under the Information Technology Act 2000";
    let penal = "What does section 420 of the Penal Code say?";
    for q in [it, penal, it, penal] {
        pipeline.answer(q).unwrap();
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the repeats are cache hits"
    );
    // Two hours on: the technology answer (one hour) is gone, the penal one (a day) is not.
    clock.advance(Duration::from_secs(2 * 3600));
    assert!(!pipeline.answer(it).unwrap().flags.cache_hit);
    assert!(pipeline.answer(penal).unwrap().flags.cache_hit);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // The config spells the same: seconds by tag, zero refused.
    let legal = load("legal_router.yaml");
    let by_tag = &legal.cache.as_ref().unwrap().ttl_by_tag;
    assert_eq!(by_tag.get("area:technology"), Some(&3600));
    let mut bad = legal.clone();
    bad.cache
        .as_mut()
        .unwrap()
        .ttl_by_tag
        .insert("area:x".into(), 0);
    let e = bad.build(Vec::new()).err().unwrap().to_string();
    assert!(e.contains("cache.ttl_by_tag"), "{e}");
}

#[test]
fn a_low_best_score_says_to_reformulate() {
    let mut config = load("two_phase_kb.toml");
    config.search.reformulate_below = Some(0.3);
    config.reranker.as_mut().unwrap().skip_within_top_k = false;
    let pipeline = config.build(Vec::new()).unwrap();
    let weak = pipeline
        .search("[SEARCH] quantum chromodynamics [TASK] gluon confinement lattice")
        .unwrap();
    let hint = weak.reformulate.as_deref().expect("a hint");
    assert!(
        hint.contains("rephras") || hint.contains("nothing matched"),
        "{hint}"
    );
    let strong = pipeline
        .search("[SEARCH] shutdown runtime [TASK] my service hangs on exit and the shutdown fails")
        .unwrap();
    assert!(strong.hits[0].score >= 0.3, "{:?}", strong.hits[0].score);
    assert_eq!(strong.reformulate, None);
}

#[test]
fn chitchat_by_the_generator_and_an_embedding_fallback_come_from_the_config() {
    // grounding.chitchat: generator asks the configured generator for the reply.
    let mut config = load("pdf_qa.yaml");
    let mut grounding = config.grounding.clone().unwrap_or_default();
    grounding.chitchat = rerank::pipeline::ChitchatMode::Generator;
    config.grounding = Some(grounding);
    let options = config.answer_options().unwrap();
    let (pipeline, calls) = CountingGenerator::pipeline(&config);
    let a = pipeline
        .answer_with(&SearchRequest::new("thanks a lot!"), &options)
        .unwrap();
    assert!(a.sources.is_empty());
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);

    // reranker.fallback.embedding_model: the fallback scores by embedding cosine.
    let model =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_bert_tiny/cls_prompts");
    let yaml = format!(
        "{{type: lexical, fallback: {{embedding_model: \"{}\"}}}}",
        model.display()
    );
    let reranker: rerank::pipeline::RerankerConfig = serde_yaml_ng::from_str(&yaml).unwrap();
    let mut config = load("two_phase_kb.toml");
    config.reranker = Some(reranker.clone());
    assert!(config.build(Vec::new()).is_ok());
    let mut missing = reranker;
    missing.fallback.as_mut().unwrap().embedding_model = Some("no/such/dir/x".into());
    config.reranker = Some(missing);
    let e = config.build(Vec::new()).err().unwrap().to_string();
    assert!(e.contains("no/such/dir/x"), "{e}");
}

/// Issue 52: an answer's band is the weaker of its grounding and its relevance. A question the
/// notes do not cover gets a faithful quote (grounded) from sources that do not match it (not
/// relevant): not `high`, and the answer says which figure is weak. The systems' on-topic
/// questions stay `high`.
#[test]
fn unrelated_questions_are_not_high_and_on_topic_ones_are() {
    use rerank::answer::{ConfidenceBand, RelevanceMeasure};
    for (name, off_topic, on_topic) in [
        (
            "personal_search.yaml",
            "when is Sarah's weekly sync",
            &[
                "Taylor's KTN",
                "tay's passport",
                "what did we learn from the data migration project",
            ][..],
        ),
        (
            "agent_memory.json",
            "where is the database connection pool configured",
            &["how does the cache invalidate stale entries"][..],
        ),
    ] {
        let config = load(name);
        let options = config.answer_options().unwrap();
        assert_eq!(options.relevance_measure(), RelevanceMeasure::QueryTerms);
        let pipeline = config.build(Vec::new()).unwrap();
        let ask = |q: &str| {
            pipeline
                .answer_with(&SearchRequest::new(q), &options)
                .unwrap()
        };

        let a = ask(off_topic);
        assert!(
            !a.sources.is_empty() && !a.flags.not_enough_information,
            "{name}"
        );
        // The quote is faithful to its source: grounding alone would say high...
        assert_eq!(a.confidence, 1.0, "{name}: {}", a.text);
        assert_eq!(a.grounding_band, ConfidenceBand::High, "{name}");
        // ...but no source has most of the question's terms.
        assert_eq!(a.relevance_basis, Some(RelevanceMeasure::QueryTerms));
        assert!(a.relevance < 0.4, "{name}: relevance {}", a.relevance);
        assert_eq!(a.relevance_band, ConfidenceBand::Low, "{name}");
        assert_eq!(a.confidence_band, ConfidenceBand::Low, "{name}");
        assert!(a.flags.low_relevance, "{name}");

        for q in on_topic {
            let a = ask(q);
            assert_eq!(
                (a.confidence_band, a.relevance_band, a.grounding_band),
                (
                    ConfidenceBand::High,
                    ConfidenceBand::High,
                    ConfidenceBand::High
                ),
                "{name}: {q:?}: relevance {} grounding {}: {}",
                a.relevance,
                a.confidence,
                a.text
            );
            assert!(
                a.relevance >= 0.6 && !a.flags.low_relevance,
                "{name}: {q:?}"
            );
        }
    }

    // The measure follows the reranker type unless the config names one.
    let mut config = load("personal_search.yaml");
    config.reranker = Some(rerank::pipeline::RerankerConfig::new(
        rerank::pipeline::RerankerKind::CrossEncoder,
        Some("model".into()),
    ));
    let measure = |c: &PipelineConfig| c.answer_options().unwrap().relevance_measure();
    assert_eq!(measure(&config), RelevanceMeasure::RerankerSigmoid);
    config.reranker.as_mut().unwrap().kind = rerank::pipeline::RerankerKind::Qwen3;
    assert_eq!(measure(&config), RelevanceMeasure::RerankerProbability);
    let mut grounding = config.grounding.clone().unwrap_or_default();
    grounding.relevance = Some(RelevanceMeasure::QueryTerms);
    config.grounding = Some(grounding);
    assert_eq!(measure(&config), RelevanceMeasure::QueryTerms);
}

/// Issue 52 through the CLI: `rerank query` prints the answer's band, which is no longer `high`
/// for the unrelated question, and its flags say the sources hardly match.
#[test]
fn the_cli_answers_an_unrelated_question_without_a_high_band() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let run = |q: &str| -> serde_json::Value {
        let out = std::process::Command::new(&cli)
            .args(["query", "--json", "--config"])
            .arg(config_path("personal_search.yaml"))
            .arg(q)
            .output()
            .unwrap();
        crate::common::json_output(&out)
    };
    let off = run("when is Sarah's weekly sync");
    assert_eq!(off["confidence_band"], "low", "{off}");
    assert_eq!(off["flags"]["low_relevance"], true, "{off}");
    let on = run("Taylor's KTN");
    assert_eq!(on["confidence_band"], "high", "{on}");
    assert_eq!(on["flags"]["low_relevance"], false, "{on}");
}

/// Issue 53, two-phase knowledge base: the pipeline logs its reranker mode when it is built,
/// ranks the reranked candidates by `0.6 x reranker + 0.3 x stage 1 + 0.1 x recency` (each
/// normalized over the candidates; recency from the `date` metadata, undated documents on the
/// other two terms), and counts how queries used the format.
#[test]
fn two_phase_kb_logs_its_mode_blends_recency_and_counts_the_format() {
    let (lines, subscriber) = Lines::capture(tracing::Level::INFO);
    let mut config = load("two_phase_kb.toml");
    assert_eq!(
        config.search.final_blend,
        Some(rerank::pipeline::FinalBlend::default())
    );
    // Every candidate reranked, so that the blend is seen on all of them.
    config.reranker.as_mut().unwrap().skip_within_top_k = false;
    let pipeline = tracing::subscriber::with_default(subscriber, || {
        tracing::callsite::rebuild_interest_cache();
        config.build(Vec::new()).unwrap()
    });
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("pipeline built: reranker mode lexical, no fallback"),
        "{text}"
    );

    let q =
        "[SEARCH] shutdown service pool [TASK] the service hangs on exit and the pool is exhausted";
    let r = pipeline
        .search_with(&SearchRequest::new(q).top_k(10))
        .unwrap();
    assert!(r.reranked && r.hits.len() >= 3, "{r:?}");
    let norm = |xs: Vec<f32>| -> Vec<f32> {
        let (lo, hi) = xs
            .iter()
            .fold((f32::MAX, f32::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        xs.iter()
            .map(|&x| if hi > lo { (x - lo) / (hi - lo) } else { 1.0 })
            .collect()
    };
    let rerank = norm(r.hits.iter().map(|h| h.rerank_score.unwrap()).collect());
    let stage1 = norm(r.hits.iter().map(|h| h.stage1_score).collect());
    let day = |h: &rerank::Hit| -> Option<f32> {
        Some(exact_day(h.document.metadata.get("date")?.as_str()?))
    };
    let days: Vec<Option<f32>> = r.hits.iter().map(day).collect();
    let (old, new) = days
        .iter()
        .flatten()
        .fold((f32::MAX, f32::MIN), |(l, h), &d| (l.min(d), h.max(d)));
    let mut dated = 0;
    for (i, h) in r.hits.iter().enumerate() {
        let base = 0.6 * rerank[i] + 0.3 * stage1[i];
        let want = match days[i] {
            Some(d) => {
                dated += 1;
                base + 0.1 * (d - old) / (new - old)
            }
            None => base / 0.9,
        };
        assert!(
            (h.score - want).abs() < 1e-4,
            "{}: {} vs {want}",
            h.id(),
            h.score
        );
    }
    assert!(dated >= 2 && dated < r.hits.len(), "dated and undated hits");
    // The order is the blend's (protected hits of a factual query aside).
    let free: Vec<f32> = r
        .hits
        .iter()
        .filter(|h| !h.protected)
        .map(|h| h.score)
        .collect();
    assert!(free.windows(2).all(|w| w[0] >= w[1]), "{free:?}");

    // Format adoption and parse failures: strict mode refuses the plain query and counts it.
    let before = pipeline.two_phase_stats();
    assert!(pipeline.search("my service hangs").is_err());
    pipeline
        .search("[SEARCH] deploy [TASK] deploy a new service")
        .unwrap();
    let after = pipeline.two_phase_stats();
    assert_eq!(after.parsed, before.parsed + 1);
    assert_eq!(after.parse_failures, before.parse_failures + 1);
    assert!(after.adoption() > 0.0 && after.adoption() < 1.0);
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` date, counted month by month.
fn exact_day(date: &str) -> f32 {
    let y: i64 = date[..4].parse().unwrap();
    let m: i64 = date[5..7].parse().unwrap();
    let d: i64 = date[8..10].parse().unwrap();
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let mut days: i64 = (1970..y).map(|y| if leap(y) { 366 } else { 365 }).sum();
    let lengths = [
        31,
        if leap(y) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    days += lengths[..(m - 1) as usize].iter().sum::<i64>();
    (days + d - 1) as f32
}

/// Issue 53, the legal router: logs go to the log file, and with `--console-log` to the
/// console too.
#[test]
fn the_legal_router_logs_to_its_file_and_with_console_log_to_the_console() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let bin = cli.with_file_name(format!("legal_router{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "{} (cargo test builds it)", bin.display());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for console in [false, true] {
        let log = dir.join(format!("legal_router_{console}_{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let mut cmd = std::process::Command::new(&bin);
        cmd.arg("--log-file").arg(&log);
        if console {
            cmd.arg("--console-log");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let file = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            file.contains("pipeline built") && file.contains("search done"),
            "{file}"
        );
        assert!(!file.contains('\u{1b}'), "no colour codes in the file");
        assert_eq!(stderr.contains("search done"), console, "{stderr}");
        // The answers still go to stdout.
        assert!(String::from_utf8_lossy(&out.stdout).contains("> What does section 420"));
    }
}

/// Records the generation requests it gets (HyDE's among them).
struct Recorder(Arc<Mutex<Vec<rerank::answer::GenerationRequest>>>);

impl rerank::Generator for Recorder {
    fn generate(
        &self,
        request: &rerank::answer::GenerationRequest,
    ) -> rerank::Result<rerank::answer::Generation> {
        self.0.lock().unwrap().push(request.clone());
        Ok(rerank::answer::Generation {
            text: "Section 439 of the Code of Criminal Procedure governs bail.".into(),
            finish_reason: Some("stop".into()),
            usage: None,
        })
    }
    fn name(&self) -> &str {
        "recorder"
    }
}

/// Issue 53, the legal router: HyDE asks the generator as a legal expert, for up to 200 tokens,
/// on a complex question only.
#[test]
fn legal_hyde_asks_a_legal_expert_for_200_tokens() {
    let db = TempDb::new("hyde");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let pipeline = legal(&db)
        .builder(Vec::new())
        .unwrap()
        .generator(Recorder(seen.clone()))
        .build()
        .unwrap();
    let r = pipeline
        .search("Compare the Delhi High Court and the Bombay High Court on bail and on directors")
        .unwrap();
    assert!(r.hyde, "a complex question uses HyDE");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    let system = &requests[0].messages[0];
    assert_eq!(system.role, rerank::answer::Role::System);
    assert!(
        system.content.starts_with("You are a legal expert."),
        "{}",
        system.content
    );
    assert_eq!(requests[0].max_new_tokens, 200);
    // A simple question does not.
    let r = pipeline
        .search("What does section 420 of the Penal Code say?")
        .unwrap();
    assert!(!r.hyde);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// Issue 53, PDF QA: a generator whose config names an API key variable that is not set fails
/// when the pipeline is built, naming the variable, instead of sending keyless requests.
#[test]
fn a_named_api_key_that_is_missing_fails_at_build() {
    let yaml = "retriever: { type: bm25 }\ngenerator: { type: openai, base_url: \"http://127.0.0.1:9/v1\", \
                model: m, api_key_env: RERANK_TEST_SURELY_UNSET_KEY }\n";
    let config = PipelineConfig::from_yaml_str(yaml).unwrap();
    let e = config
        .build(vec![rerank::Document::new("a", "text")])
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config(m) if m.contains("RERANK_TEST_SURELY_UNSET_KEY")),
        "{e}"
    );
    // Without api_key_env (a local server) it builds.
    let yaml = "retriever: { type: bm25 }\ngenerator: { type: openai, base_url: \"http://127.0.0.1:9/v1\", model: m }\n";
    let config = PipelineConfig::from_yaml_str(yaml).unwrap();
    assert!(config
        .build(vec![rerank::Document::new("a", "text")])
        .is_ok());
}

/// The tiny models of ../shared/fixtures (random weights, references from transformers).
const CE_TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/ce_tiny_a/model"
);
const QWEN3_TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/qwen3_tiny_a/model"
);

/// Issue 53, personal search: the plan's cross-encoder (ms-marco-MiniLM-L-6-v2's architecture,
/// here the tiny random BERT cross-encoder) reranks the system's candidates; the exact match
/// stays on top (protected), the others follow in the model's order, and the scores are the
/// model's, not the lexical reranker's.
#[test]
fn personal_search_with_a_cross_encoder_keeps_the_exact_match_on_top() {
    let lexical = load("personal_search.yaml").build(Vec::new()).unwrap();
    let mut config = load("personal_search.yaml");
    let reranker = config.reranker.as_mut().expect("a reranker section");
    reranker.kind = rerank::pipeline::RerankerKind::CrossEncoder;
    reranker.model = Some(PathBuf::from(CE_TINY));
    let pipeline = config.build(Vec::new()).unwrap();
    let request = SearchRequest::new("Taylor's KTN").top_k(8);
    let r = pipeline.search_with(&request).unwrap();
    assert!(r.reranked && !r.rerank_fallback, "{r:?}");
    assert_eq!(r.hits[0].id(), "note-01");
    assert!(r.hits[0].protected);
    let rest: Vec<f32> = r
        .hits
        .iter()
        .filter(|h| !h.protected)
        .map(|h| h.score)
        .collect();
    assert!(rest.len() > 1);
    assert!(rest.windows(2).all(|w| w[0] >= w[1]), "{rest:?}");
    let by_words = lexical.search_with(&request).unwrap();
    let scores = |r: &rerank::pipeline::SearchResponse| -> Vec<u32> {
        r.hits.iter().map(|h| h.score.to_bits()).collect()
    };
    assert_ne!(scores(&r), scores(&by_words));
}

/// Issue 53, two-phase knowledge base: Qwen3-Reranker (the tiny random Qwen3) scores the
/// `[SEARCH]` part's candidates with the instruction each candidate gets, as the plan asks.
#[test]
fn two_phase_kb_reranks_with_qwen3() {
    let mut config = load("two_phase_kb.toml");
    let reranker = config.reranker.as_mut().expect("a reranker section");
    reranker.kind = rerank::pipeline::RerankerKind::Qwen3;
    reranker.model = Some(PathBuf::from(QWEN3_TINY));
    let pipeline = config.build(Vec::new()).unwrap();
    let r = pipeline
        .search("[SEARCH] shutdown runtime [TASK] my service hangs on exit and the shutdown fails")
        .unwrap();
    assert!(r.reranked && !r.rerank_fallback, "{r:?}");
    assert!(!r.hits.is_empty());
    let total: usize = r.instructions.iter().map(|u| u.candidates).sum();
    assert_eq!(total, r.reranked_candidates);
    assert!(r
        .instructions
        .iter()
        .any(|u| u.text == rerank::rerankers::qwen3::TROUBLESHOOTING_INSTRUCTION));
    assert_eq!(pipeline.two_phase_stats().parsed, 1);
}

/// A copy of the tiny Qwen3 model in `dir` whose `tokenizer.json` has tokens added past the
/// end of the model's embedding matrix, the last of them `phrase` (as a tokenizer extended for
/// a fine-tune, left beside the base weights): the model loads (the prompt's own tokens are in
/// the matrix), and fails at run time on a text with `phrase`.
fn qwen3_with_a_tokenizer_past_its_weights(dir: &Path, phrase: &str) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let model = Path::new(QWEN3_TINY);
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(model.join(file), dir.join(file)).unwrap();
    }
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model.join("config.json")).unwrap()).unwrap();
    let rows = config["vocab_size"].as_u64().unwrap();
    let mut tokenizer: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model.join("tokenizer.json")).unwrap()).unwrap();
    let added = tokenizer["added_tokens"].as_array_mut().unwrap();
    let next = added.iter().filter_map(|t| t["id"].as_u64()).max().unwrap() + 1;
    // Ids next, next + 1, ...: reserved tokens up to the last row, then `phrase` past it.
    for id in next..=rows {
        let (content, special) = match id == rows {
            true => (phrase.to_string(), false),
            false => (format!("<|reserved_{id}|>"), true),
        };
        added.push(
            serde_json::json!({"id": id, "content": content, "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": special}),
        );
    }
    std::fs::write(
        dir.join("tokenizer.json"),
        serde_json::to_vec(&tokenizer).unwrap(),
    )
    .unwrap();
}

/// Issue 53, K17: the knowledge base with Qwen3-Reranker and the config's embedding fallback
/// (`reranker.fallback.embedding_model`). The model fails at run time (its tokenizer knows a
/// phrase whose token is past the end of the weights' embedding matrix), and the embedding
/// model scores instead: each hit's rerank score is the cosine of the query's and the
/// document's embeddings, the response names the embedding scorer and keeps the model's error.
/// A question without the phrase is still scored by Qwen3.
#[test]
fn two_phase_kb_falls_back_to_embedding_cosine_when_qwen3_fails() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("systems_qwen3_fallback_{}", std::process::id()));
    qwen3_with_a_tokenizer_past_its_weights(&dir, "graceful shutdown");
    let fallback_model =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_bert_tiny/cls_prompts");
    let mut config = load("two_phase_kb.toml");
    let reranker = config.reranker.as_mut().expect("a reranker section");
    reranker.kind = rerank::pipeline::RerankerKind::Qwen3;
    reranker.model = Some(dir.clone());
    reranker.skip_within_top_k = false;
    reranker.fallback = Some(rerank::pipeline::FallbackConfig {
        embedding_model: Some(fallback_model.clone()),
        ..Default::default()
    });
    // Only the reranker's order: no blend with stage 1 and recency.
    config.search.final_blend = None;
    let pipeline = config.build(Vec::new()).unwrap();

    let q = "[SEARCH] shutdown runtime [TASK] my service hangs on exit during graceful shutdown";
    let r = pipeline.search(q).unwrap();
    assert!(r.reranked && r.rerank_fallback, "{r:?}");
    assert_eq!(r.scorer, "embedding");
    let error = r.rerank_error.as_deref().unwrap();
    assert!(
        error.contains("qwen3-reranker failed") && error.contains("outside the embedding matrix"),
        "{error}"
    );
    assert!(r.hits.len() >= 2, "{r:?}");
    // The scores are the embedding model's cosines against the text the reranker judges.
    let embedder =
        rerank::load_embedder(&fallback_model, &rerank::models::ModelOptions::default()).unwrap();
    let rerank_text = pipeline.plan(&SearchRequest::new(q)).unwrap().rerank_text;
    let qv = embedder.embed_query(&rerank_text).unwrap();
    for h in &r.hits {
        let want = cosine(&qv, &embedder.embed_one(&h.document.full_text()).unwrap());
        let got = h.rerank_score.unwrap();
        assert!((got - want).abs() < 1e-5, "{}: {got} vs {want}", h.id());
    }

    // Without the phrase, the model scores.
    let r = pipeline
        .search("[SEARCH] shutdown runtime [TASK] my service hangs on exit and the shutdown fails")
        .unwrap();
    assert!(r.reranked && !r.rerank_fallback, "{r:?}");
    assert_eq!(r.scorer, "qwen3-reranker");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 53, legal router: HyDE runs in the shipped system with a generator that writes (the
/// tiny random Qwen3 chat model): a complex question is searched with a hypothetical answer.
#[test]
fn the_legal_router_runs_hyde_with_a_local_chat_model() {
    let db = TempDb::new("hyde-qwen3");
    let mut config = legal(&db);
    config.generator = Some(rerank::pipeline::GeneratorConfig::LocalChat {
        model: PathBuf::from(QWEN3_TINY),
        precision: None,
    });
    let pipeline = config.build(Vec::new()).unwrap();
    let r = pipeline
        .search("Compare the Delhi High Court and the Bombay High Court on bail and on directors")
        .unwrap();
    assert!(r.hyde, "a complex question uses HyDE");
    assert!(!r.hits.is_empty());
    let r = pipeline
        .search("What does section 420 of the Penal Code say?")
        .unwrap();
    assert!(!r.hyde);
}

/// A host's own retriever (the plan's knowledge graph), fixed hits for any question.
struct Graph;

impl rerank::Retriever for Graph {
    fn retrieve(
        &self,
        _query: &rerank::recall::SearchQuery,
        k: usize,
    ) -> rerank::Result<Vec<rerank::Hit>> {
        Ok(["graph-a", "graph-b"]
            .iter()
            .take(k)
            .enumerate()
            .map(|(i, id)| {
                let doc = rerank::Document::new(*id, format!("cache invalidation, graph note {i}"));
                rerank::Hit::new(Arc::new(doc), 1.0 - i as f32 * 0.1)
            })
            .collect())
    }

    fn name(&self) -> &str {
        "graph"
    }
}

/// Issue 53, agent memory (A11): a host retriever registered by name is a recall mode a
/// request picks; its hits go through stage 2 as any mode's, and the other modes are
/// unchanged.
#[test]
fn agent_memory_recalls_from_a_host_graph_by_mode() {
    let pipeline = load("agent_memory.json")
        .builder(Vec::new())
        .unwrap()
        .recall_mode("graph", Graph)
        .build()
        .unwrap();
    assert!(pipeline.recall_modes().iter().any(|m| m == "graph"));
    let q = "how does the cache invalidate stale entries";
    let r = pipeline
        .search_with(&SearchRequest::new(q).mode("graph"))
        .unwrap();
    assert_eq!(r.mode.as_deref(), Some("graph"));
    assert_eq!(r.candidates, 2);
    let mut ids: Vec<&str> = r.hits.iter().map(|h| h.id()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["graph-a", "graph-b"]);
    // Stage 2 as for any mode: here skipped, as the config says, within top_k candidates.
    assert!(r.reranked || r.stage2_skipped.is_some(), "{r:?}");
    let r = pipeline
        .search_with(&SearchRequest::new(q).mode("bm25"))
        .unwrap();
    assert!(r.hits.iter().all(|h| !h.id().starts_with("graph-")));
}

/// A model reranker that fails while `down` is set ("the model server is unavailable"), and
/// otherwise scores as the lexical reranker does.
struct Flaky(Arc<std::sync::atomic::AtomicBool>);

impl rerank::Reranker for Flaky {
    fn score(
        &self,
        query: &rerank::rerankers::RerankQuery,
        docs: &[&str],
    ) -> rerank::Result<Vec<f32>> {
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::rerank("the model server is unavailable"));
        }
        rerank::rerankers::LexicalReranker.score(query, docs)
    }
    fn name(&self) -> &str {
        "model"
    }
}

/// The legal system with the `Flaky` model and the lexical fallback, counting generator calls
/// in `calls`; its config's cache section is left out, for `builder` to give the caches.
fn legal_with_a_flaky_model(
    down: &Arc<std::sync::atomic::AtomicBool>,
    calls: &Arc<std::sync::atomic::AtomicUsize>,
    builder: impl FnOnce(rerank::PipelineBuilder) -> rerank::PipelineBuilder,
) -> Pipeline {
    let mut config = load("legal_router.yaml");
    config.cache = None;
    let reranker = rerank::FallbackReranker::builder(Flaky(down.clone()))
        .fallback(rerank::rerankers::LexicalReranker)
        .build()
        .unwrap();
    let b = config
        .builder(Vec::new())
        .unwrap()
        .generator(CountingGenerator(calls.clone()))
        .reranker(reranker)
        .skip_rerank_within_top_k(false);
    builder(b).build().unwrap()
}

/// Issue 53, L18: a degraded answer (the model reranker failed, the fallback scored) is
/// cached through the pipeline with the short TTL (an hour in the legal config, beside its
/// day): still served after 59 minutes, gone after 61, when the same question is answered
/// afresh by the model and that answer is served a day long. The response cache does the same
/// with the search under the answer.
#[test]
fn degraded_answers_are_cached_for_the_short_ttl() {
    use rerank::cache::{ManualClock, SemanticCache};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;
    let legal = load("legal_router.yaml");
    let section = legal.cache.as_ref().unwrap();
    assert_eq!((section.ttl_secs, section.short_ttl_secs), (86_400, 3_600));
    let (day, hour) = (Duration::from_secs(86_400), Duration::from_secs(3_600));
    let clock = Arc::new(ManualClock::new());
    fn cache<V: Clone + Send + Sync + 'static>(
        clock: &Arc<ManualClock>,
        (ttl, short): (Duration, Duration),
    ) -> Arc<SemanticCache<V>> {
        let builder = SemanticCache::builder().ttl(ttl).short_ttl(short);
        Arc::new(builder.clock(clock.clone()).build().unwrap())
    }
    let responses = cache(&clock, (day, hour));
    let answers = cache(&clock, (day, hour));
    let down = Arc::new(AtomicBool::new(true));
    let calls = Arc::new(AtomicUsize::new(0));
    let pipeline = legal_with_a_flaky_model(&down, &calls, |b| {
        b.cache(responses.clone()).answer_cache(answers.clone())
    });
    let q = "What are the duties of directors under the Companies Act 2013?";
    let minutes = |m: u64| clock.advance(Duration::from_secs(60 * m));

    // The model is down: the fallback scores, and the answer says it is degraded.
    let a = pipeline.answer(q).unwrap();
    assert!(
        a.flags.rerank_fallback && !a.flags.cache_hit,
        "{:?}",
        a.flags
    );
    assert!(!a.flags.not_enough_information, "{}", a.text);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let (r, t) = (responses.stats().entries, answers.stats().entries);
    assert_eq!((r, t), (1, 1), "one response and one answer cached");

    // 59 minutes on, both are served from the caches, still marked degraded.
    minutes(59);
    let a = pipeline.answer(q).unwrap();
    assert!(
        a.flags.cache_hit && a.flags.rerank_fallback,
        "{:?}",
        a.flags
    );
    let s = pipeline.search(q).unwrap();
    assert!(s.cache_hit && s.rerank_fallback);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // The model is back; at 61 minutes the degraded entries have expired: answered afresh.
    down.store(false, Ordering::SeqCst);
    minutes(2);
    let a = pipeline.answer(q).unwrap();
    assert!(
        !a.flags.cache_hit && !a.flags.rerank_fallback,
        "{:?}",
        a.flags
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let s = pipeline.search(q).unwrap();
    assert!(
        s.cache_hit && !s.rerank_fallback,
        "the fresh search was cached"
    );

    // The healthy answer lives the day: still served two hours (and 23 hours) on.
    minutes(120);
    assert!(pipeline.answer(q).unwrap().flags.cache_hit);
    minutes(21 * 60);
    assert!(pipeline.answer(q).unwrap().flags.cache_hit);
    assert!(pipeline.search(q).unwrap().cache_hit);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A retriever that counts its calls and finds one document for anything.
struct CountingRetriever(Arc<std::sync::atomic::AtomicUsize>);

impl rerank::Retriever for CountingRetriever {
    fn retrieve(
        &self,
        _query: &rerank::recall::SearchQuery,
        k: usize,
    ) -> rerank::Result<Vec<rerank::Hit>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let doc = rerank::Document::new("s-420", "Section 420 of the Penal Code: cheating.");
        Ok(vec![rerank::Hit::new(Arc::new(doc), 1.0)]
            .into_iter()
            .take(k)
            .collect())
    }
}

/// The hashing embedder, counting its calls.
struct CountingEmbedder(HashingEmbedder, Arc<std::sync::atomic::AtomicUsize>);

impl Embedder for CountingEmbedder {
    fn embed_as(&self, texts: &[&str], role: rerank::Role) -> rerank::Result<ndarray::Array2<f32>> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.0.embed_as(texts, role)
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
}

/// A generator that writes (so that HyDE would run), counting its calls.
struct WritingGenerator(Arc<std::sync::atomic::AtomicUsize>);

impl rerank::Generator for WritingGenerator {
    fn generate(
        &self,
        _request: &rerank::answer::GenerationRequest,
    ) -> rerank::Result<rerank::answer::Generation> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(rerank::answer::Generation {
            text: "Section 420 of the Penal Code punishes cheating.".into(),
            finish_reason: None,
            usage: None,
        })
    }
}

/// Issue 53, L33: `Pipeline::plan` (what `rerank query --dry-run` prints) runs no retrieval,
/// no generation and no embedding, even for a question it plans HyDE, both caches and a host
/// recall mode for; the same question searched calls all three.
#[test]
fn the_legal_routers_plan_calls_no_retriever_generator_or_embedder() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (retrieved, generated, embedded, graph) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let mut config = load("legal_router.yaml");
    config.cache = None;
    let pipeline = config
        .builder(Vec::new())
        .unwrap()
        .retriever(CountingRetriever(retrieved.clone()))
        .recall_mode("graph", CountingRetriever(graph.clone()))
        .generator(WritingGenerator(generated.clone()))
        .embedder(CountingEmbedder(
            HashingEmbedder::new(512).unwrap(),
            embedded.clone(),
        ))
        .cache(rerank::cache::SemanticCache::new())
        .answer_cache(rerank::cache::SemanticCache::new())
        .build()
        .unwrap();
    let counts = || [&retrieved, &generated, &embedded, &graph].map(|c| c.load(Ordering::SeqCst));
    let complex = "Compare the Delhi High Court and the Bombay High Court on bail and on directors";
    let plan = pipeline.plan(&SearchRequest::new(complex)).unwrap();
    assert_eq!(plan.route, Route::Analytical, "HyDE's route");
    assert!(plan.hyde && plan.cache && plan.answer_cache, "{plan:?}");
    assert!(
        plan.modes.contains(&"graph".to_string()),
        "{:?}",
        plan.modes
    );
    let mut in_graph = SearchRequest::new(complex);
    in_graph.mode = Some("graph".into());
    assert_eq!(
        pipeline.plan(&in_graph).unwrap().mode.as_deref(),
        Some("graph")
    );
    assert_eq!(counts(), [0, 0, 0, 0], "the plan ran nothing");

    // The search it plans calls each of them (so the counters do count).
    let r = pipeline.search(complex).unwrap();
    assert!(r.hyde && !r.hits.is_empty());
    let [retrieved, generated, embedded, _] = counts();
    assert!(
        retrieved >= 1 && generated >= 1 && embedded >= 1,
        "{:?}",
        counts()
    );
    pipeline.search_with(&in_graph).unwrap();
    assert!(counts()[3] >= 1);
}

/// Issue 53, L37: the logs carry each stage's timing, the fallback scorer and why, and cache
/// hits and misses (of responses and of answers), as a host's `tracing` subscriber sees them
/// (the one `rerank query --log-level debug` installs writes the same lines to stderr).
#[test]
fn the_legal_routers_logs_carry_timings_fallbacks_and_cache_hits_and_misses() {
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    let (lines, subscriber) = Lines::capture(tracing::Level::DEBUG);
    let down = Arc::new(AtomicBool::new(true));
    let calls = Arc::new(AtomicUsize::new(0));
    let pipeline = legal_with_a_flaky_model(&down, &calls, |b| {
        b.cache(rerank::cache::SemanticCache::new())
            .answer_cache(rerank::cache::SemanticCache::new())
    });
    let q = "What does section 420 of the Penal Code say?";
    let a = "What are the duties of directors under the Companies Act 2013?";
    tracing::subscriber::with_default(subscriber, || {
        tracing::callsite::rebuild_interest_cache();
        assert!(!pipeline.search(q).unwrap().cache_hit);
        assert!(pipeline.search(q).unwrap().cache_hit);
        assert!(!pipeline.answer(a).unwrap().flags.cache_hit);
        assert!(pipeline.answer(a).unwrap().flags.cache_hit);
    });
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let line =
        |needle: &str| -> Vec<&str> { text.lines().filter(|l| l.contains(needle)).collect() };

    // Stage timings: each search's summary, recall, rerank and the answer.
    let done = line("search done");
    assert_eq!(
        done.len(),
        2,
        "two fresh searches (the search and the answer's):\n{text}"
    );
    for l in &done {
        for field in [
            "retrieve_ms=",
            "rerank_ms=",
            "total_ms=",
            "classify_ms=",
            "cache_ms=",
        ] {
            assert!(l.contains(field), "{field} missing: {l}");
        }
        assert!(l.contains("rerank_fallback=true"), "{l}");
    }
    assert!(
        line("stage 1 done").iter().all(|l| l.contains(" ms=")),
        "{text}"
    );
    assert!(!line("stage 1 done").is_empty(), "{text}");
    assert!(
        line("stage 2 done").iter().any(|l| l.contains(" ms=")),
        "{text}"
    );
    assert!(
        line("answer done")
            .iter()
            .any(|l| l.contains("generate_ms=")),
        "{text}"
    );

    // The fallback: which scorer, and the model's error.
    let fallback = line("fallback scorer used");
    assert_eq!(fallback.len(), 2, "{text}");
    assert!(
        fallback.iter().all(|l| l.contains("WARN")
            && l.contains("scorer=lexical")
            && l.contains("the model server is unavailable")),
        "{fallback:?}"
    );

    // Cache misses and hits, of the search and of the answer.
    assert_eq!(
        line("cache hit").len() - line("answer cache hit").len(),
        1,
        "{text}"
    );
    assert_eq!(line("answer cache hit").len(), 1, "{text}");
    assert!(line("answer cache miss").len() == 1, "{text}");
    // Misses: the first search, and the answer's own search.
    assert_eq!(
        line("cache miss").len() - line("answer cache miss").len(),
        2,
        "{text}"
    );
    assert!(
        line("cache hit").iter().all(|l| l.contains("INFO")),
        "{text}"
    );
    assert!(
        line("cache miss").iter().all(|l| l.contains("DEBUG")),
        "{text}"
    );
}
