//! ColBERT against PyLate 1.6 (sentence-transformers 5.3, transformers 5.3) on the tiny random
//! models of tests/fixtures/colbert_tiny (made by the make.py there; reference.py is the
//! encoding spelled out in float64):
//! - every case (PyLate's layout on BERT with and without attended expansion tokens and a
//!   biased Dense, on ModernBERT with `[Q] `/`[D] ` prefixes and sliding layers, and Stanford's
//!   colbertv2.0 layout) through `ColbertEncoder`: the token ids PyLate fed the model, and per
//!   token vector cosine >= 0.99999, one text at a time and batched; MaxSim of every query and
//!   document within 1e-5 of `pylate.scores.colbert_scores`;
//! - the empty text, punctuation only, over-long queries and documents, a literal `[MASK]`;
//! - layouts the crate cannot reproduce are refused naming the file and the key.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use ndarray::Array2;
use rerank::embed::{maxsim, ColbertEncoder};
use rerank::models::ModelOptions;
use rerank::Role;
use serde_json::Value;

const CASES: [&str; 4] = ["bert", "bert_attend", "modernbert", "stanford"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/colbert_tiny")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(root().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(dir: &Path) -> ColbertEncoder {
    ColbertEncoder::builder(dir)
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn matrix(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The smallest per-token cosine between `got` and `want` (which must have as many rows).
fn smallest_cosine(name: &str, got: &Array2<f32>, want: &[Vec<f32>]) -> f64 {
    assert_eq!(got.nrows(), want.len(), "{name}: token count");
    let mut worst = 1.0f64;
    for (g, w) in got.rows().into_iter().zip(want) {
        let dot: f64 = g.iter().zip(w).map(|(a, b)| *a as f64 * *b as f64).sum();
        let ng: f64 = g.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let nw: f64 = w.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        worst = worst.min(dot / (ng * nw));
    }
    worst
}

#[test]
fn every_colbert_case_matches_pylate_single_and_batched() {
    let expected = expected();
    let cases: Vec<&str> = expected
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(cases, CASES);
    for case in CASES {
        let want = &expected[case];
        let encoder = load(&root().join(case));
        assert_eq!(encoder.layout(), want["layout"].as_str().unwrap(), "{case}");
        assert_eq!(
            encoder.dim() as u64,
            want["dim"].as_u64().unwrap(),
            "{case}"
        );
        assert_eq!(
            encoder.query_length() as u64,
            want["query_length"].as_u64().unwrap()
        );
        let mut worst = 1.0f64;
        let mut encoded = Vec::new();
        for (role, key) in [(Role::Query, "queries"), (Role::Document, "documents")] {
            let items = want[key].as_array().unwrap();
            let texts: Vec<&str> = items.iter().map(|t| t["text"].as_str().unwrap()).collect();
            let batched = encoder.encode(&texts, role).unwrap();
            for (i, item) in items.iter().enumerate() {
                let name = format!("{case} {key}[{i}] {:?}", texts[i]);
                let (got_ids, keys) = encoder.token_ids(texts[i], role).unwrap();
                assert_eq!(got_ids, ids(&item["ids"]), "{name}: token ids");
                let attended = ids(&item["attention_mask"]).iter().sum::<u32>() as usize;
                assert_eq!(keys, attended, "{name}: attended tokens");
                let single = encoder.encode(&texts[i..=i], role).unwrap().remove(0);
                for (got, want_key) in [(&single, "vectors"), (&batched[i], "vectors_batched")] {
                    let cos = smallest_cosine(&name, got, &matrix(&item[want_key]));
                    assert!(cos >= 0.99999, "{name} ({want_key}): cosine {cos}");
                    worst = worst.min(cos);
                }
            }
            encoded.push(batched);
        }
        let scores = want["scores"].as_array().unwrap();
        let mut score_error = 0f64;
        for (qi, row) in scores.iter().enumerate() {
            for (di, s) in row.as_array().unwrap().iter().enumerate() {
                let got = maxsim(encoded[0][qi].view(), encoded[1][di].view()) as f64;
                score_error = score_error.max((got - s.as_f64().unwrap()).abs());
            }
        }
        println!(
            "{case}: smallest token cosine {worst:.9} (1 - cos = {:.1e}), MaxSim max |error| \
             {score_error:.1e}",
            1.0 - worst
        );
        assert!(score_error < 1e-5, "{case}: MaxSim error {score_error}");
    }
}

/// A scratch copy of a case, with `edit` applied to one of its JSON files.
fn edited(case: &str, file: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("rerank-colbert-{}-{case}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    crate::common::copy_dir(&root().join(case), &dir);
    let path = dir.join(file);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
    dir
}

#[test]
fn layouts_the_crate_cannot_reproduce_are_refused_naming_file_and_key() {
    let st = "config_sentence_transformers.json";
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            edited("bert", st, |v| v["query_prefix"] = "[nope]".into()),
            "query_prefix",
        ),
        (
            edited("bert", st, |v| v["similarity_fn_name"] = "cosine".into()),
            "similarity_fn_name",
        ),
        (
            edited("bert", st, |v| {
                v.as_object_mut().unwrap().remove("document_length");
            }),
            "document_length",
        ),
        (
            edited("bert", "1_Dense/config.json", |v| {
                v["use_residual"] = true.into()
            }),
            "use_residual",
        ),
        (
            edited("bert", "1_Dense/config.json", |v| {
                v["activation_function"] = "torch.nn.modules.activation.ReLU".into()
            }),
            "activation_function",
        ),
        (
            edited("bert", "modules.json", |v| {
                v.as_array_mut().unwrap().push(serde_json::json!({
                    "idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"}))
            }),
            "modules.json",
        ),
        (
            edited("stanford", "artifact.metadata", |v| {
                v["similarity"] = "l2".into()
            }),
            "similarity",
        ),
        (
            edited("stanford", "artifact.metadata", |v| v["dim"] = 8.into()),
            "linear.weight",
        ),
    ];
    for (dir, needle) in cases {
        let e = ColbertEncoder::from_dir(&dir).unwrap_err().to_string();
        assert!(e.contains(needle), "{}: {e}", dir.display());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn builder_lengths_are_checked_and_change_the_query_shape() {
    let dir = root().join("bert");
    let e = ColbertEncoder::builder(&dir)
        .query_length(2)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("query_length 2"), "{e}");
    let e = ColbertEncoder::builder(&dir)
        .document_length(100_000)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("document_length 100000"), "{e}");
    let longer = ColbertEncoder::builder(&dir)
        .query_length(20)
        .build()
        .unwrap();
    let q = longer.encode(&["what is rust"], Role::Query).unwrap();
    assert_eq!(q[0].nrows(), 20);
    assert!(
        longer.id() != load(&dir).id(),
        "the length is part of the id"
    );
    assert!(longer.encode(&[], Role::Document).unwrap().is_empty());
}
