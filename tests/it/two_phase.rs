//! Two-phase queries: the parser (the echo, the lenient fallback; every well-formed and error
//! case is data in `tests/data/two_phase_cases.toml`) and the pipeline
//! (the search phrase drives recall, the task context and instruction drive the reranker).

use std::sync::{Arc, Mutex};

use rerank::parse::TwoPhaseMode;
use rerank::parse::{plan, TwoPhaseQuery};
use rerank::pipeline::SearchRequest;
use rerank::recall::SearchQuery;
use rerank::rerankers::RerankQuery;
use rerank::{Document, Error, Hit, Pipeline, Reranker, Result, Retriever};

fn format_error(query: &str) -> String {
    match TwoPhaseQuery::parse(query) {
        Err(Error::QueryFormat(message)) => message,
        other => panic!("{query:?}: expected Error::QueryFormat, got {other:?}"),
    }
}

#[test]
fn the_echo_is_the_first_200_characters_cut_on_a_char_boundary() {
    // 300 three-byte characters: a byte-based cut at 200 would split one.
    let query = "語".repeat(300);
    let message = format_error(&query);
    let echo = "語".repeat(200);
    assert!(message.contains(&format!("\"{echo}\"...")), "{message}");
    assert!(!message.contains(&"語".repeat(201)));
    // A short query is echoed whole, without an ellipsis.
    let message = format_error("short");
    assert!(message.ends_with("\"short\""), "{message}");
}

#[test]
fn strict_lenient_and_off_modes() {
    let good = "[SEARCH] bm25 saturation [TASK] why do long documents rank low?";
    for mode in [TwoPhaseMode::Strict, TwoPhaseMode::Lenient] {
        let p = plan(good, Some(mode), Some("per-call instruction")).unwrap();
        assert_eq!(p.recall, "bm25 saturation");
        assert_eq!(
            p.rerank.text,
            "why do long documents rank low?\n\nRelevant concepts: bm25 saturation"
        );
        // Without [INSTRUCT], the per-call instruction applies.
        assert_eq!(
            p.rerank.instruction.as_deref(),
            Some("per-call instruction")
        );
        assert!(p.two_phase.is_some());
    }
    // The per-call instruction comes before the query's [INSTRUCT] (issue 15's order).
    let p = plan(
        "[SEARCH] a [TASK] b [INSTRUCT] from the query",
        Some(TwoPhaseMode::Strict),
        Some("per call"),
    )
    .unwrap();
    assert_eq!(p.rerank.instruction.as_deref(), Some("per call"));
    let p = plan(
        "[SEARCH] a [TASK] b [INSTRUCT] from the query",
        Some(TwoPhaseMode::Strict),
        None,
    )
    .unwrap();
    assert_eq!(p.rerank.instruction.as_deref(), Some("from the query"));

    // Malformed: strict refuses; lenient uses the whole query for both phases.
    for bad in [
        "how do I tune bm25",
        "[SEARCH] bm25 [TASK]",
        "[TASK] x [SEARCH] y",
    ] {
        let e = plan(bad, Some(TwoPhaseMode::Strict), None).unwrap_err();
        assert!(matches!(e, Error::QueryFormat(_)), "{e}");
        let p = plan(bad, Some(TwoPhaseMode::Lenient), Some("i")).unwrap();
        assert_eq!(p.recall, bad);
        assert_eq!(p.rerank, RerankQuery::new(bad).with_instruction("i"));
        assert_eq!(p.two_phase, None);
    }

    // Off: even a well-formed two-phase query is taken literally.
    let p = plan(good, None, None).unwrap();
    assert_eq!((p.recall.as_str(), p.rerank.text.as_str()), (good, good));
}

/// Records the query text it was asked for; returns all its documents.
struct Recording {
    docs: Vec<Arc<Document>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Retriever for Recording {
    fn retrieve(&self, q: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        self.seen.lock().unwrap().push(q.text.clone());
        Ok(self
            .docs
            .iter()
            .take(k)
            .enumerate()
            .map(|(i, d)| Hit::new(d.clone(), 1.0 / (i + 1) as f32))
            .collect())
    }
}

/// Records the rerank query; scores documents by length.
struct RecordingReranker {
    seen: Arc<Mutex<Vec<RerankQuery>>>,
}

impl Reranker for RecordingReranker {
    fn score(&self, q: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        self.seen.lock().unwrap().push(q.clone());
        Ok(docs.iter().map(|d| d.len() as f32).collect())
    }
}

type Seen = (Arc<Mutex<Vec<String>>>, Arc<Mutex<Vec<RerankQuery>>>);

fn pipeline(mode: Option<TwoPhaseMode>) -> (Pipeline, Seen) {
    let recall_seen = Arc::new(Mutex::new(Vec::new()));
    let rerank_seen = Arc::new(Mutex::new(Vec::new()));
    let docs = (0..5)
        .map(|i| Arc::new(Document::new(format!("d{i}"), "x".repeat(i + 1))))
        .collect();
    let mut b = Pipeline::builder()
        .retriever(Recording {
            docs,
            seen: recall_seen.clone(),
        })
        .reranker(RecordingReranker {
            seen: rerank_seen.clone(),
        })
        .top_k(2);
    if let Some(m) = mode {
        b = b.two_phase(m);
    }
    (b.build().unwrap(), (recall_seen, rerank_seen))
}

#[test]
fn the_pipeline_sends_each_phase_to_its_stage() {
    let (p, (recall, rerank)) = pipeline(Some(TwoPhaseMode::Strict));
    let r = p
        .search_with(
            &SearchRequest::new(
                "[SEARCH] pod restarts [TASK] my pods restart hourly [INSTRUCT] runbooks only",
            )
            .instruction("the request's instruction comes first"),
        )
        .unwrap();
    assert!(r.reranked);
    assert_eq!(r.hits[0].id(), "d4");
    assert_eq!(recall.lock().unwrap().as_slice(), ["pod restarts"]);
    assert_eq!(
        rerank.lock().unwrap().as_slice(),
        [
            RerankQuery::new("my pods restart hourly\n\nRelevant concepts: pod restarts")
                .with_instruction("the request's instruction comes first")
        ]
    );
    // Without one, the query's [INSTRUCT] is used.
    rerank.lock().unwrap().clear();
    p.search("[SEARCH] pod restarts [TASK] my pods restart hourly [INSTRUCT] runbooks only")
        .unwrap();
    assert_eq!(
        rerank.lock().unwrap()[0].instruction.as_deref(),
        Some("runbooks only")
    );
    assert_eq!(
        r.query,
        "[SEARCH] pod restarts [TASK] my pods restart hourly [INSTRUCT] runbooks only"
    );

    // Strict mode refuses a plain query before any retrieval.
    let e = p.search("plain question").unwrap_err();
    assert!(matches!(e, Error::QueryFormat(_)));
    // Two searches above reached recall; the refused one did not.
    assert_eq!(recall.lock().unwrap().len(), 2);
}

#[test]
fn lenient_and_off_pipelines_use_the_whole_query() {
    for mode in [Some(TwoPhaseMode::Lenient), None] {
        let (p, (recall, rerank)) = pipeline(mode);
        p.search_with(&SearchRequest::new("plain question").instruction("inst"))
            .unwrap();
        assert_eq!(recall.lock().unwrap().as_slice(), ["plain question"]);
        assert_eq!(
            rerank.lock().unwrap().as_slice(),
            [RerankQuery::new("plain question").with_instruction("inst")]
        );
    }
    // Off (the default): the markers are just text.
    let (p, (recall, _)) = pipeline(None);
    p.search("[SEARCH] a [TASK] b").unwrap();
    assert_eq!(recall.lock().unwrap().as_slice(), ["[SEARCH] a [TASK] b"]);
}
