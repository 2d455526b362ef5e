//! Static-embedding models (sentence-transformers' `StaticEmbedding`: the mean of per-token
//! vectors) against sentence-transformers 6.2, on the tiny random models of
//! tests/fixtures/st_static_tiny (made by the make.py beside them): the published layout
//! (`0_StaticEmbedding/`, no Normalize), sentence-transformers 6's (the module at the root)
//! with Normalize and prompts, and model2vec's weights folded at load; batched and one text at
//! a time, through `StaticEmbedder` and `load_embedder`; the empty text (zeros), a text of 600
//! tokens (no truncation); what is refused.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::models::ModelOptions;
use rerank::{load_embedder, Embedder, Role, StaticEmbedder};

use crate::model_fixtures::Broken;
use crate::st_embed_parity::{assert_matches_sentence_transformers, expected_in};

const CASES: [&str; 3] = ["model2vec", "normalize", "retrieval"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_static_tiny")
}

fn bare(dir: &Path) -> StaticEmbedder {
    StaticEmbedder::builder(dir)
        .prompt(Role::Query, "")
        .prompt(Role::Document, "")
        .build()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

#[test]
fn every_static_case_matches_sentence_transformers_single_and_batched() {
    let expected = expected_in(&root());
    assert_eq!(
        expected.keys().map(String::as_str).collect::<Vec<_>>(),
        CASES
    );
    for (case, want) in &expected {
        let dir = root().join(case);
        let e = load_embedder(&dir, &ModelOptions::default().threads(2)).unwrap();
        assert!(e.id().unwrap().starts_with("static-"), "{case}");
        let direct = bare(&dir);
        let ids = |text: &str| direct.token_ids_as(text, Role::Document).unwrap();
        let worst = assert_matches_sentence_transformers(case, want, &*e, &direct, &ids);
        assert!(worst >= 0.999999, "{case}: {worst}");
    }
}

#[test]
fn the_layouts_are_read_as_declared() {
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let retrieval = StaticEmbedder::from_dir(root().join("retrieval")).unwrap();
    assert_eq!(retrieval.dim(), 32);
    assert_eq!(retrieval.similarity_fn_name(), Some("cosine"));
    let v = retrieval.embed_one("what is rust").unwrap();
    assert!((norm(&v) - 1.0).abs() > 0.01, "no Normalize: {}", norm(&v));
    // The empty text has no token: zeros.
    assert!(retrieval.embed_one("").unwrap().iter().all(|&x| x == 0.0));
    // No truncation: 600 tokens are all averaged, and no special token is added.
    let long = long_text();
    assert_eq!(
        retrieval.token_ids_as(&long, Role::Document).unwrap().len(),
        600
    );
    let normalize = StaticEmbedder::from_dir(root().join("normalize")).unwrap();
    assert_eq!(normalize.prompt(Role::Query), Some("query: "));
    let q = normalize.embed_query("what is rust").unwrap();
    assert!((norm(&q) - 1.0).abs() < 1e-5);
    // A max_length option truncates.
    let cut = StaticEmbedder::builder(root().join("retrieval"))
        .options(ModelOptions::default().max_length(5))
        .build()
        .unwrap();
    assert_eq!(cut.token_ids_as(&long, Role::Document).unwrap().len(), 5);
    assert_ne!(cut.id(), retrieval.id());
}

/// The fixture's text of 600 tokens.
fn long_text() -> String {
    (0..300)
        .map(|i| format!("token{} word", i % 37))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn broken_static_directories_are_refused_with_what_is_wrong() {
    let src = root().join("retrieval");
    // A table of another height than the tokenizer's vocabulary.
    let b = Broken::of(&src, "static-rows");
    let tok = b.0.join("0_StaticEmbedding/tokenizer.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tok).unwrap()).unwrap();
    v["added_tokens"].as_array_mut().unwrap().push(
        serde_json::json!({"id": 800, "content": "[NEW]", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}),
    );
    std::fs::write(&tok, v.to_string()).unwrap();
    let e = StaticEmbedder::from_dir(&b.0).unwrap_err().to_string();
    assert!(e.contains("embedding.weight") && e.contains("801"), "{e}");
    // A module path outside the directory.
    let b = Broken::of(&src, "static-path");
    let modules = b.0.join("modules.json");
    let text = std::fs::read_to_string(&modules)
        .unwrap()
        .replace("0_StaticEmbedding", "../elsewhere");
    std::fs::write(&modules, text).unwrap();
    let e = load_embedder(&b.0, &ModelOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("modules.json") && e.contains("inside"), "{e}");
    // A transformer embedder's loader names the right one.
    let e = rerank::BertEmbedder::from_dir(root().join("normalize"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("StaticEmbedder") || e.contains("config.json"),
        "{e}"
    );
}
