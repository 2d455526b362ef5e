//! Parity of `BertEmbedder` with sentence-transformers on the real all-MiniLM-L6-v2.
//!
//! Needs the model (`scripts/fetch_minilm.sh`, into `$RERANK_MODELS_DIR` or `./models`) and the
//! shared fixtures; skips with a message when either is absent.
#![cfg(feature = "models")]

use std::path::PathBuf;

use rerank::embed::BertEmbedder;
use rerank::models::ModelOptions;
use rerank::Embedder;
use serde::Deserialize;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/minilm_embed/embeddings.json"
);

#[derive(Deserialize)]
struct Fixture {
    max_seq_length: usize,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    input_ids: Vec<u32>,
    embedding: Vec<f32>,
}

fn model_dir() -> PathBuf {
    let base = std::env::var_os("RERANK_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models")));
    base.join("all-MiniLM-L6-v2")
}

fn setup() -> Option<(Fixture, BertEmbedder)> {
    let dir = model_dir();
    if !dir.join("model.safetensors").is_file() {
        crate::common::skip(&format!(
            "skipping: {} has no model (run scripts/fetch_minilm.sh)",
            dir.display()
        ));
        return None;
    }
    let Ok(text) = std::fs::read_to_string(FIXTURE) else {
        crate::common::skip(&format!("skipping: {FIXTURE} is absent"));
        return None;
    };
    let fixture: Fixture = serde_json::from_str(&text).unwrap();
    let embedder = BertEmbedder::builder(&dir)
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap();
    Some((fixture, embedder))
}

/// Cosine in f64 (both sides are already close to unit norm).
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "dimensions differ");
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn check(case: &Case, got: &[f32], how: &str) {
    assert_eq!(got.len(), case.embedding.len(), "{how}: {:?}", case.text);
    let c = cosine(got, &case.embedding);
    assert!(c >= 0.99999, "{how}: cosine {c} for {:?}", case.text);
    let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "{how}: norm {norm}");
}

#[test]
fn input_ids_match_sentence_transformers() {
    let Some((fixture, embedder)) = setup() else {
        return;
    };
    assert_eq!(fixture.cases.len(), 41);
    assert_eq!(embedder.max_length(), fixture.max_seq_length);
    for case in &fixture.cases {
        assert_eq!(
            embedder.token_ids(&case.text).unwrap(),
            case.input_ids,
            "{:?}",
            case.text
        );
    }
}

#[test]
fn embeddings_one_at_a_time() {
    let Some((fixture, embedder)) = setup() else {
        return;
    };
    for case in &fixture.cases {
        let got = embedder.embed_one(&case.text).unwrap();
        check(case, &got, "single");
    }
}

#[test]
fn embeddings_batched_in_input_order() {
    let Some((fixture, embedder)) = setup() else {
        return;
    };
    let texts: Vec<&str> = fixture.cases.iter().map(|c| c.text.as_str()).collect();
    let got = embedder.embed(&texts).unwrap();
    assert_eq!(got.shape(), &[41, 384]);
    for (case, row) in fixture.cases.iter().zip(got.rows()) {
        check(case, row.as_slice().unwrap(), "batched");
    }
    // A small token budget forces many batches of mixed lengths: same rows, same order.
    let small = BertEmbedder::builder(model_dir())
        .options(ModelOptions::default().token_budget(300).max_batch_size(5))
        .build()
        .unwrap();
    let got_small = small.embed(&texts).unwrap();
    assert_eq!(got_small.nrows(), fixture.cases.len());
    for (case, row) in fixture.cases.iter().zip(got_small.rows()) {
        check(case, row.as_slice().unwrap(), "small batches");
    }
}

/// A text's embedding has the same bits in any batch: alone (every step spread over the
/// threads), among 120 documents (a batch large enough to run in groups of sequences, each
/// group on one thread) and in small batches of mixed lengths.
#[test]
fn a_texts_embedding_does_not_depend_on_its_batch() {
    let Some((_, embedder)) = setup() else {
        return;
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets/cranfield");
    let data = rerank::eval::BeirDataset::load(std::path::Path::new(dir)).unwrap();
    let texts: Vec<String> = data.corpus[..120].iter().map(|d| d.full_text()).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let together = embedder.embed(&refs).unwrap();
    let small = BertEmbedder::builder(model_dir())
        .options(
            ModelOptions::default()
                .threads(2)
                .token_budget(700)
                .max_batch_size(7),
        )
        .build()
        .unwrap()
        .embed(&refs)
        .unwrap();
    for (i, text) in refs.iter().enumerate() {
        let alone = embedder.embed_one(text).unwrap();
        assert!(
            together.row(i).to_vec() == alone,
            "document {i}: alone, other bits"
        );
        assert!(
            small.row(i) == together.row(i),
            "document {i}: small batches, other bits"
        );
    }
}

#[test]
fn shared_across_threads() {
    let Some((fixture, embedder)) = setup() else {
        return;
    };
    let embedder = std::sync::Arc::new(embedder);
    std::thread::scope(|s| {
        for chunk in fixture.cases.chunks(11) {
            let embedder = embedder.clone();
            s.spawn(move || {
                let texts: Vec<&str> = chunk.iter().map(|c| c.text.as_str()).collect();
                let got = embedder.embed(&texts).unwrap();
                assert_eq!(got.nrows(), chunk.len());
                for (case, row) in chunk.iter().zip(got.rows()) {
                    check(case, row.as_slice().unwrap(), "threads");
                }
            });
        }
    });
}

#[test]
fn config_mismatch_is_a_model_error_naming_the_file() {
    let dir = model_dir();
    if !dir.join("model.safetensors").is_file() {
        crate::common::skip(&format!("skipping: no model in {}", dir.display()));
        return;
    }
    // A copy of the directory whose config.json claims a different hidden size.
    let bad = std::env::temp_dir().join(format!("rerank-minilm-bad-{}", std::process::id()));
    std::fs::create_dir_all(&bad).unwrap();
    for f in ["tokenizer.json", "model.safetensors"] {
        std::fs::copy(dir.join(f), bad.join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config["hidden_size"] = 768.into();
    std::fs::write(bad.join("config.json"), config.to_string()).unwrap();
    let e = BertEmbedder::from_dir(&bad).unwrap_err();
    assert!(matches!(e, rerank::Error::Model { .. }), "{e}");
    assert!(e.to_string().contains("model.safetensors"), "{e}");

    config["hidden_size"] = 384.into();
    config["model_type"] = "qwen3".into();
    std::fs::write(bad.join("config.json"), config.to_string()).unwrap();
    let e = BertEmbedder::from_dir(&bad).unwrap_err();
    assert!(e.to_string().contains("unsupported model_type"), "{e}");

    config["model_type"] = "bert".into();
    std::fs::write(bad.join("config.json"), config.to_string()).unwrap();
    std::fs::remove_file(bad.join("tokenizer.json")).unwrap();
    let e = BertEmbedder::from_dir(&bad).unwrap_err();
    assert!(e.to_string().contains("tokenizer.json"), "{e}");
    std::fs::remove_dir_all(&bad).unwrap();
}

#[test]
fn pipeline_config_builds_dense_hybrid_and_embedding_reranker() {
    let dir = model_dir();
    if !dir.join("model.safetensors").is_file() {
        crate::common::skip(&format!("skipping: no model in {}", dir.display()));
        return;
    }
    let config = serde_json::json!({
        "retriever": {"type": "hybrid", "retrievers": [
            {"type": "bm25"}, {"type": "dense", "model": dir}]},
        "reranker": {"type": "embedding", "model": dir},
        "search": {"top_k": 2}
    });
    let config = rerank::pipeline::PipelineConfig::from_json_str(&config.to_string()).unwrap();
    let docs = vec![
        rerank::Document::new(
            "berlin",
            "Berlin is the capital and largest city of Germany.",
        ),
        rerank::Document::new("rust", "Rust is a systems programming language."),
        rerank::Document::new("bake", "How to bake sourdough bread at home."),
    ];
    let pipeline = config.build(docs).unwrap();
    let response = pipeline.search("What is the capital of Germany?").unwrap();
    assert_eq!(response.hits[0].id(), "berlin");
    assert!(response.hits[0].rerank_score.is_some());
    assert!(response.hits[0].vector_score.is_some());
}
