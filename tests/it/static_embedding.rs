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

/// A static model by hub id: `modules.json`, then its module's tokenizer and table and the
/// Normalize module's folder are fetched (no `config.json` in the repository), from a
/// loopback server in the hub's layout, through `rerank embed`; then from the cache alone.
#[cfg(feature = "hf-hub")]
#[test]
fn a_static_model_downloads_by_hub_id_without_a_config_json() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let want = &expected_in(&root())["normalize"];
    let dir = root().join("normalize");
    assert!(!dir.join("config.json").exists());
    let (base, server) = crate::common::hub_server("test-org/tiny-static", dir);
    let tmp = std::env::temp_dir().join(format!("rerank-static-hub-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let input = tmp.join("texts.jsonl");
    let lines: Vec<String> = want
        .cases()
        .iter()
        .map(|(t, _)| serde_json::json!({ "text": t }).to_string())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let cache = tmp.join("hub-cache");
    let embed =
        |env: &[(&str, &str)]| crate::common::cli_embed(&bin, "test-org/tiny-static", &input, env);
    let check = |got: Vec<Vec<f32>>, how: &str| {
        assert_eq!(got.len(), want.cases().len(), "{how}");
        for ((text, query), got) in want.cases().iter().zip(&got) {
            if query.iter().all(|&x| x == 0.0) {
                assert!(got.iter().all(|&x| x == 0.0), "{how}: {text:?}");
                continue;
            }
            let c = rerank::embed::cosine(got, query);
            assert!(c >= 0.99999, "{how}: {text:?}: cosine {c}");
        }
    };
    let cache_s = cache.to_str().unwrap();
    check(
        embed(&[("HF_ENDPOINT", base.as_str()), ("HF_HUB_CACHE", cache_s)]),
        "downloaded",
    );
    crate::common::stop_hub(&base);
    server.join().unwrap();
    check(
        embed(&[("HF_HUB_OFFLINE", "1"), ("HF_HUB_CACHE", cache_s)]),
        "offline",
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn the_registry_knows_the_static_models() {
    use rerank::models::registry::{self, Support};
    for id in [
        "sentence-transformers/static-retrieval-mrl-en-v1",
        "sentence-transformers/static-similarity-mrl-multilingual-v1",
    ] {
        let m = registry::find(id).unwrap();
        assert_eq!(m.support, Support::Supported, "{id}");
        assert_eq!(
            (m.model_type, m.dim, m.max_length),
            ("static", Some(1024), usize::MAX)
        );
        assert_eq!(m.matryoshka.first(), Some(&1024));
    }
}
