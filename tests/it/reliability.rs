//! Bad inputs and failing host components: a typed error or a documented result, never a panic,
//! and the pipeline stays usable. The catalogue is `docs/reliability.md`.

use rerank::answer::{Generation, GenerationRequest, Generator};
use rerank::classify::{Classification, QueryClassifier};
use rerank::recall::SearchQuery;
use rerank::rerankers::RerankQuery;
use rerank::{Bm25Index, Document, Error, Hit, Pipeline, Reranker, Result, Retriever};

fn index() -> Bm25Index {
    let index = Bm25Index::new();
    index
        .add((0..30).map(|i| {
            Document::new(
                format!("d{i}"),
                format!(
                    "document {i} about rust search ranking {}",
                    "word ".repeat(i % 5)
                ),
            )
        }))
        .unwrap();
    index
}

/// Panics on queries containing "boom", works otherwise.
struct Flaky(Bm25Index);

impl Retriever for Flaky {
    fn retrieve(&self, query: &SearchQuery, k: usize) -> Result<Vec<Hit>> {
        if query.text.contains("boom") {
            panic!("the host retriever blew up");
        }
        self.0.retrieve(query, k)
    }
}

#[test]
fn a_panicking_retriever_is_an_error_and_the_pipeline_stays_usable() {
    let p = Pipeline::builder()
        .retriever(Flaky(index()))
        .build()
        .unwrap();
    match p.search("boom rust") {
        Err(Error::Backend { component, source }) => {
            assert!(component.starts_with("retriever"), "{component}");
            assert!(source.to_string().contains("the host retriever blew up"));
        }
        other => panic!("expected Error::Backend, got {other:?}"),
    }
    assert!(!p.search("rust search").unwrap().hits.is_empty());
}

struct Scores(fn(usize) -> f32, bool);

impl Reranker for Scores {
    fn score(&self, _: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        if self.1 {
            panic!("reranker bug");
        }
        Ok((0..docs.len()).map(self.0).collect())
    }
}

#[test]
fn a_panicking_reranker_falls_back_to_stage_one_and_says_why() {
    let p = Pipeline::builder()
        .retriever(index())
        .reranker(Scores(|i| i as f32, true))
        .top_k(3)
        .build()
        .unwrap();
    let r = p.search("rust search ranking").unwrap();
    assert!(r.rerank_fallback);
    assert!(r.rerank_error.unwrap().contains("panicked: reranker bug"));
    assert_eq!(r.hits.len(), 3);
    assert_eq!(r.hits[0].stage1_rank, 1);
}

#[test]
fn nan_and_infinite_scores_never_rank_above_real_ones() {
    // Odd positions get NaN or +inf; even positions a real, decreasing score.
    let p = Pipeline::builder()
        .retriever(index())
        .reranker(Scores(
            |i| match i % 4 {
                1 => f32::NAN,
                3 => f32::INFINITY,
                _ => 100.0 - i as f32,
            },
            false,
        ))
        .top_k(5)
        .build()
        .unwrap();
    let r = p.search("rust search ranking").unwrap();
    assert!(r.reranked && !r.rerank_fallback);
    for h in &r.hits {
        let s = h.rerank_score.unwrap();
        assert!(s.is_finite(), "{} ranked with {s}", h.id());
    }
    assert!(r.hits.windows(2).all(|w| w[0].score >= w[1].score));
}

struct WrongCount;

impl Reranker for WrongCount {
    fn score(&self, _: &RerankQuery, docs: &[&str]) -> Result<Vec<f32>> {
        Ok(vec![1.0; docs.len() + 1])
    }
}

#[test]
fn a_reranker_returning_the_wrong_number_of_scores_falls_back() {
    let p = Pipeline::builder()
        .retriever(index())
        .reranker(WrongCount)
        .top_k(3)
        .build()
        .unwrap();
    let r = p.search("rust").unwrap();
    assert!(r.rerank_fallback);
    assert!(r.rerank_error.unwrap().contains("scores for"));
}

struct PanickingClassifier;

impl QueryClassifier for PanickingClassifier {
    fn classify(&self, _: &str) -> Classification {
        panic!("classifier bug")
    }
}

#[test]
fn a_panicking_classifier_gives_the_default_classification_marked() {
    let p = Pipeline::builder()
        .retriever(index())
        .classifier(PanickingClassifier)
        .build()
        .unwrap();
    let r = p.search("rust").unwrap();
    let c = r.classification.unwrap();
    assert_eq!(c.confidence, 0.0);
    assert_eq!(c.signals, ["classifier_panicked"]);
}

struct PanickingGenerator;

impl Generator for PanickingGenerator {
    fn generate(&self, _: &GenerationRequest) -> Result<Generation> {
        panic!("generator bug")
    }
}

#[test]
fn a_panicking_generator_is_an_error_of_answer() {
    let p = Pipeline::builder()
        .retriever(index())
        .generator(PanickingGenerator)
        .build()
        .unwrap();
    let e = p.answer("what about rust search").unwrap_err();
    assert!(matches!(e, Error::Backend { .. }), "{e:?}");
    assert!(p.search("rust").is_ok());
}

#[test]
fn empty_blank_huge_and_control_character_queries() {
    let p = Pipeline::builder().retriever(index()).build().unwrap();
    for q in ["", "   ", "\n\t"] {
        assert!(matches!(p.search(q), Err(Error::InvalidInput(_))), "{q:?}");
    }
    let huge = "rust ".repeat(200_000); // 1 MB
    let r = p.search(&huge).unwrap();
    assert!(!r.hits.is_empty());
    let control = "rust\u{0}\u{7}\u{1b}[31m search\u{202e}";
    assert!(!p.search(control).unwrap().hits.is_empty());
    let only_control = "\u{0}\u{1}\u{2}";
    assert!(p.search(only_control).unwrap().hits.is_empty());
}

#[test]
fn invalid_jsonl_names_the_line() {
    let e = Document::parse_jsonl(
        "{\"id\": \"a\", \"text\": \"x\"}\n\n{\"id\": \"b\", \"text\": 3}\n",
        "corpus.jsonl",
    )
    .unwrap_err();
    assert!(matches!(e, Error::Parse { .. }), "{e:?}");
    assert!(e.to_string().contains("corpus.jsonl:3"), "{e}");
}

#[test]
fn a_config_with_an_unknown_key_names_it() {
    let e =
        rerank::PipelineConfig::from_yaml_str("retriever: { type: bm25 }\nretreiver_depth: 3\n")
            .unwrap_err();
    assert!(e.to_string().contains("retreiver_depth"), "{e}");
}

#[test]
fn a_ten_megabyte_document_is_indexed_and_found() {
    let index = Bm25Index::new();
    let big = format!("{} needle", "hay ".repeat(2_500_000));
    index
        .add([
            Document::new("big", big),
            Document::new("small", "needle in a note"),
        ])
        .unwrap();
    let hits = index.search("needle", 2);
    assert_eq!(hits.len(), 2);
    // The short document that is mostly needle ranks first.
    assert_eq!(hits[0].id(), "small");
}

#[test]
fn an_empty_query_to_the_classifier_gets_low_confidence_defaults() {
    let c = rerank::RuleClassifier::default().classify("");
    assert_eq!(c.intent, rerank::classify::Intent::Clarification, "{c:?}");
    assert!(c.confidence <= 1.0);
}

#[test]
fn the_same_id_twice_in_one_batch_keeps_the_last() {
    let index = Bm25Index::new();
    index
        .add([
            Document::new("a", "first version about apples"),
            Document::new("a", "second version about pears"),
        ])
        .unwrap();
    assert_eq!(index.len(), 1);
    assert!(index.search("apples", 5).is_empty());
    assert_eq!(index.search("pears", 5)[0].id(), "a");
}

#[cfg(feature = "sqlite")]
#[test]
fn store_batches_refuse_empty_ids_and_keep_the_last_duplicate() {
    let path = std::env::temp_dir().join(format!("rerank-reliability-{}.db", std::process::id()));
    let clean = || {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    };
    clean();
    let store = rerank::Store::open(&path).unwrap();
    let e = store
        .upsert([Document::new("ok", "fine"), Document::new("", "no id")])
        .unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
    assert_eq!(
        store.len().unwrap(),
        0,
        "nothing of the refused batch was written"
    );
    let r = store
        .upsert([Document::new("a", "first"), Document::new("a", "second")])
        .unwrap();
    assert_eq!(r.added, 1);
    assert_eq!(store.get("a").unwrap().unwrap().text, "second");

    /// An embedder that cannot name its model.
    struct Anonymous;
    impl rerank::Embedder for Anonymous {
        fn embed_as(&self, texts: &[&str], _role: rerank::Role) -> Result<ndarray::Array2<f32>> {
            Ok(ndarray::Array2::ones((texts.len(), 2)))
        }
        fn dim(&self) -> usize {
            2
        }
    }
    let e = store
        .upsert_embedded([Document::new("b", "x")], &Anonymous)
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e:?}");
    drop(store);
    clean();
}
