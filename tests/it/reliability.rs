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

/// A copy of a shared fixture model (`ce_tiny_a`, `qwen3_tiny_a`) whose `config.json` has
/// `key` set to `value`; `None` (the test returns) when the fixture is not there.
#[cfg(feature = "models")]
fn hostile_copy(fixture: &str, key: &str, value: serde_json::Value) -> Option<std::path::PathBuf> {
    let from = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures"))
        .join(fixture)
        .join("model");
    if !from.join("model.safetensors").is_file() {
        crate::common::skip(&format!("skipping: {} not found", from.display()));
        return None;
    }
    let tag = format!("{fixture}-{key}-{value}").replace(|c: char| !c.is_alphanumeric(), "_");
    let dir = std::env::temp_dir().join(format!("rerank-hostile-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config[key] = value;
    std::fs::write(&path, config.to_string()).unwrap();
    Some(dir)
}

/// Sizes from `config.json` far beyond the weights (10^9, 10^12, 2^62): each load path returns
/// an `Error::Model` naming `config.json` and the key before it allocates, never an abort
/// ("memory allocation failed") or a "capacity overflow" panic.
#[cfg(feature = "models")]
#[test]
fn hostile_sizes_in_a_cross_encoder_config_are_model_errors_naming_the_key() {
    use rerank::models::ModelOptions;
    use rerank::rerankers::{load_reranker, CrossEncoder};
    const HUGE: [u64; 3] = [1_000_000_000, 1_000_000_000_000, 1 << 62];
    let keys = [
        "hidden_size",
        "vocab_size",
        "max_position_embeddings",
        "type_vocab_size",
        "intermediate_size",
        "num_hidden_layers",
    ];
    for key in keys {
        for value in HUGE {
            let Some(dir) = hostile_copy("ce_tiny_a", key, value.into()) else {
                return;
            };
            let errors = [
                CrossEncoder::from_dir(&dir).err(),
                load_reranker(&dir, &ModelOptions::default()).err(),
                rerank::BertEmbedder::from_dir(&dir).err(),
            ];
            for e in errors {
                let e = e.unwrap_or_else(|| panic!("{key} {value} was accepted"));
                assert!(matches!(e, Error::Model { .. }), "{key} {value}: {e:?}");
                let msg = e.to_string();
                assert!(msg.contains("config.json"), "{key} {value}: {msg}");
                // A position table bigger than the weights' is refused by name; the other
                // keys are compared with the tensor shapes.
                assert!(msg.contains(key), "{key} {value}: {msg}");
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    // The label count of the head (no id2label, a huge num_labels).
    let Some(dir) = hostile_copy("ce_tiny_a", "id2label", serde_json::Value::Null) else {
        return;
    };
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["num_labels"] = (1u64 << 62).into();
    std::fs::write(&path, config.to_string()).unwrap();
    let e = CrossEncoder::from_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains("num_labels") && e.contains("classifier.weight"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "models")]
#[test]
fn hostile_sizes_in_a_qwen3_config_are_model_errors_naming_the_key() {
    use rerank::answer::LocalChat;
    use rerank::models::ModelOptions;
    use rerank::rerankers::{load_reranker, Qwen3Reranker};
    let cases: [(&str, u64); 8] = [
        ("hidden_size", 1_000_000_000),
        ("hidden_size", 1 << 62),
        ("head_dim", 1_000_000_000),
        ("head_dim", 1 << 62),
        ("intermediate_size", 1 << 62),
        ("num_hidden_layers", 1_000_000_000),
        // 2^61 heads of 8: the product overflows nothing, but matches no projection.
        ("num_attention_heads", 1 << 61),
        ("max_position_embeddings", 1_000_000_000_000),
    ];
    for (key, value) in cases {
        let Some(dir) = hostile_copy("qwen3_tiny_a", key, value.into()) else {
            return;
        };
        if key == "num_attention_heads" {
            // Heads that are a multiple of the key/value heads, so only the sizes are wrong.
            let path = dir.join("config.json");
            let mut config: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            config["num_key_value_heads"] = (1u64 << 60).into();
            std::fs::write(&path, config.to_string()).unwrap();
        }
        let errors = [
            Qwen3Reranker::from_dir(&dir).err(),
            load_reranker(&dir, &ModelOptions::default()).err(),
            LocalChat::builder(&dir).build().err(),
        ];
        for e in errors {
            let e = e.unwrap_or_else(|| panic!("{key} {value} was accepted"));
            assert!(matches!(e, Error::Model { .. }), "{key} {value}: {e:?}");
            let msg = e.to_string();
            assert!(
                msg.contains("config.json") && msg.contains(key),
                "{key} {value}: {msg}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // head_dim x heads that overflows usize.
    let Some(dir) = hostile_copy("qwen3_tiny_a", "head_dim", (1u64 << 62).into()) else {
        return;
    };
    let e = Qwen3Reranker::from_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("config.json") && e.contains("head_dim"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `top_k` meaning "all" (2^32, 2^40, `usize::MAX`) returns every matching document from
/// every recall path, without sizing anything by it.
#[test]
fn a_huge_top_k_returns_every_document() {
    let huge = [1usize << 32, 1 << 40, usize::MAX];
    let index = index();
    for k in huge {
        assert_eq!(index.search("rust", k).len(), 30, "bm25 k={k}");
        assert_eq!(index.search_exhaustive("rust", k).len(), 30, "k={k}");
    }
    // The pipeline, from a config as a user writes it.
    let docs: Vec<Document> = (0..30)
        .map(|i| Document::new(format!("d{i}"), format!("rust note {i}")))
        .collect();
    let hybrid = "{ type: hybrid, retrievers: [{ type: bm25 }, { type: vector }] }";
    for retriever in ["{ type: bm25 }", "{ type: vector }", hybrid] {
        let yaml = format!(
            "retriever: {retriever}\nembedder: {{ type: hashing }}\n\
             search: {{ top_k: 1099511627776, max_candidates: 1099511627776 }}\n"
        );
        let p = rerank::PipelineConfig::from_yaml_str(&yaml)
            .unwrap()
            .build(docs.clone())
            .unwrap();
        assert_eq!(p.search("rust note").unwrap().hits.len(), 30, "{retriever}");
    }
    #[cfg(feature = "sqlite")]
    {
        let path = std::env::temp_dir().join(format!("rerank-huge-k-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let store = std::sync::Arc::new(rerank::Store::open(&path).unwrap());
        store.upsert(docs.clone()).unwrap();
        for k in huge {
            assert_eq!(
                store.bm25().search("rust", k).unwrap().len(),
                30,
                "store k={k}"
            );
        }
        drop(store);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}

#[test]
fn a_hashing_dimension_beyond_the_bound_is_a_config_error() {
    let yaml = "retriever: { type: vector }\nembedder: { type: hashing, dim: 100000000 }\n";
    let Err(e) = rerank::PipelineConfig::from_yaml_str(yaml)
        .unwrap()
        .build(Vec::new())
    else {
        panic!("dim 10^8 was accepted");
    };
    assert!(matches!(e, Error::Config(_)), "{e:?}");
    assert!(e.to_string().contains("65536"), "{e}");
}
