//! Texts through the tokenizer's chat template, as sentence-transformers 6.2 formats them for a
//! model saved with a `message` modality: the tiny Qwen3 embedders of
//! tests/fixtures/st_qwen3_chat (made by the make.py there, whose docstring is the
//! specification): `flat/` (a Qwen3-style template, string contents, left padding, max 48) and
//! `structured/` (content parts, a template that reads `task`, `add_generation_prompt` saved in
//! `processing_kwargs`, max 72). Every text (empty, non-ASCII, Jinja-looking, line breaks,
//! spaces, literal special tokens, one cut to the maximum) as a query and as a document: the
//! token ids fed to the model, and the embeddings in one call and one at a time.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::models::ModelOptions;
use rerank::{load_embedder, Embedder, Qwen3Embedder, Role};
use serde_json::Value;

use crate::common::u32s;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_qwen3_chat")
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// The largest absolute difference of `got` from `want`.
fn diff(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max)
}

const TOL: f32 = 1e-5;

#[test]
fn chat_formatted_texts_match_sentence_transformers() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("expected.json")).unwrap())
            .unwrap();
    let texts: Vec<&str> = expected["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for case in ["flat", "structured"] {
        let want = &expected[case];
        let dir = fixture().join(case);
        let e = Qwen3Embedder::from_dir(&dir).unwrap();
        assert_eq!(
            e.max_length() as u64,
            want["max_seq_length"].as_u64().unwrap()
        );
        let loaded = load_embedder(&dir, &ModelOptions::default()).unwrap();
        let cases = want["cases"].as_array().unwrap();
        assert!(cases.iter().any(|c| c["query"]["truncated"] == true));
        let mut worst = 0f32;
        for (role, key) in [(Role::Query, "query"), (Role::Document, "document")] {
            for (c, text) in cases.iter().zip(&texts) {
                let got = e.token_ids_as(text, role).unwrap();
                let want_ids = u32s(&c[key]["input_ids"]);
                assert_eq!(got, want_ids, "{case} {key}: {text:?}");
                // Without the template the ids differ (the check above is not vacuous).
                assert_ne!(got, u32s(&c[key]["nochat_input_ids"]), "{case} {key}");
            }
            for embedder in [&e as &dyn Embedder, loaded.as_ref()] {
                let batch = embedder.embed_as(&texts, role).unwrap();
                for (i, c) in cases.iter().enumerate() {
                    let row = batch.row(i).to_vec();
                    let d = diff(&row, &floats(&c[key]["embedding"]));
                    assert!(d <= TOL, "{case} {key} text {i}: {d}");
                    worst = worst.max(d);
                    let one = embedder.embed_as(&texts[i..=i], role).unwrap();
                    let d = diff(&one.row(0).to_vec(), &floats(&c[key]["embedding_single"]));
                    assert!(d <= TOL, "{case} {key} text {i} alone: {d}");
                    worst = worst.max(d);
                }
            }
        }
        println!("{case}: largest difference from sentence-transformers {worst:.1e}");
    }
}

#[test]
fn the_id_covers_the_chat_template() {
    // The same weights, tokenizer and prompts with and without the template give other ids.
    let flat = Qwen3Embedder::from_dir(fixture().join("flat")).unwrap();
    let structured = Qwen3Embedder::from_dir(fixture().join("structured")).unwrap();
    assert!(flat.id().is_some());
    assert_ne!(flat.id(), structured.id());
}
