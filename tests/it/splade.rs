//! Learned sparse encoders (SPLADE) against sentence-transformers 6.2's `SparseEncoder` on the
//! tiny random models of tests/fixtures/splade_tiny (made by the make.py beside them;
//! reference.py there is the computation spelled out in float64):
//! - every case (max and sum pooling, a tied and an untied decoder, max_active_dims, the
//!   inference-free Router with its static query table and log1p_relu documents, DistilBERT),
//!   every role, one text at a time and batched: the same indices, values within 1e-5
//!   (relative above 1), the query x document dot scores within 1e-4; the ids fed to the
//!   model; empty and punctuation-only texts, a text longer than max_seq_length, a literal
//!   `[MASK]`;
//! - the layouts it refuses (another pooling strategy, activation or module, a route it
//!   cannot run, prompts, a vocabulary that is not the tokenizer's), each naming the file and
//!   the key.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::embed::{SparseEncoder, SparseVector, SpladeStrategy};
use rerank::models::ModelOptions;
use rerank::{Error, Role};
use serde_json::Value;

use crate::model_fixtures::Broken;

const CASES: [&str; 5] = ["distilbert", "inference_free", "max", "sum", "topk"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/splade_tiny")
}

fn expected() -> serde_json::Map<String, Value> {
    expected_object(&root())
}

/// The object of a fixture folder's `expected.json` (the sparse fixtures' references).
pub(crate) fn expected_object(dir: &Path) -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    match serde_json::from_str(&text).unwrap() {
        Value::Object(m) => m,
        other => panic!("expected.json: {other}"),
    }
}

fn encoder(case: &str) -> SparseEncoder {
    SparseEncoder::builder(root().join(case))
        .options(ModelOptions::default().threads(2))
        .build()
        .unwrap_or_else(|e| panic!("{case}: {e}"))
}

/// `v[key]` as a list of numbers.
pub(crate) fn numbers<T: serde::de::DeserializeOwned>(v: &Value, key: &str) -> Vec<T> {
    serde_json::from_value(v[key].clone()).unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// The largest difference between `got` and the expected `values` (relative above 1), after
/// checking the indices are the same.
fn compare(got: &SparseVector, indices: &[u32], values: &[f32], what: &str) -> f32 {
    assert_eq!(got.indices, indices, "{what}: indices");
    let mut largest = 0f32;
    for (g, w) in got.values.iter().zip(values) {
        let err = (g - w).abs() / w.abs().max(1.0);
        assert!(err <= 1e-5, "{what}: {g} vs {w}");
        largest = largest.max(err);
    }
    largest
}

#[test]
fn every_case_and_role_matches_sentence_transformers_single_and_batched() {
    let expected = expected();
    assert_eq!(
        expected.keys().map(String::as_str).collect::<Vec<_>>(),
        CASES
    );
    let mut table = Vec::new();
    for (case, want) in &expected {
        let e = encoder(case);
        assert_eq!(
            e.vocab_size(),
            want["vocab_size"].as_u64().unwrap() as usize
        );
        assert_eq!(
            e.max_active_dims(),
            want["max_active_dims"].as_u64().map(|k| k as usize)
        );
        let mut by_role = Vec::new();
        for (role, key) in [(Role::Query, "queries"), (Role::Document, "documents")] {
            let items = want[key].as_array().unwrap();
            let texts: Vec<&str> = items.iter().map(|t| t["text"].as_str().unwrap()).collect();
            let batched = e.encode(&texts, role).unwrap();
            assert_eq!(batched.len(), texts.len());
            let (mut single_err, mut batch_err) = (0f32, 0f32);
            let mut singles = Vec::new();
            for (item, got_batched) in items.iter().zip(&batched) {
                let text = item["text"].as_str().unwrap();
                let what = format!("{case} {role} {text:?}");
                assert_eq!(
                    e.token_ids(text, role).unwrap(),
                    numbers::<u32>(item, "ids"),
                    "{what}"
                );
                let single = e.encode_one(text, role).unwrap();
                let (i, v) = (
                    numbers::<u32>(item, "indices"),
                    numbers::<f32>(item, "values"),
                );
                single_err = single_err.max(compare(&single, &i, &v, &what));
                let (i, v) = (
                    numbers::<u32>(item, "indices_batched"),
                    numbers::<f32>(item, "values_batched"),
                );
                batch_err = batch_err.max(compare(got_batched, &i, &v, &format!("{what} batched")));
                singles.push(single);
            }
            table.push(format!(
                "{case:>14} {role:>8}: single {single_err:.2e}, batched {batch_err:.2e}"
            ));
            by_role.push(singles);
        }
        let scores: Vec<Vec<f32>> = serde_json::from_value(want["scores"].clone()).unwrap();
        for (q, row) in by_role[0].iter().zip(&scores) {
            for (d, want) in by_role[1].iter().zip(row) {
                let got = q.dot(d);
                assert!((got - want).abs() <= 1e-4, "{case}: score {got} vs {want}");
            }
        }
    }
    eprintln!("{}", table.join("\n"));
}

#[test]
fn routes_pooling_and_limits_are_the_directory_s() {
    let free = encoder("inference_free");
    assert!(!free.runs_model(Role::Query) && free.runs_model(Role::Document));
    assert_eq!(free.pooling(Role::Query), None);
    assert_eq!(free.max_length(Role::Query), 512);
    assert_eq!(free.max_length(Role::Document), 32);
    // An empty query has no token, so no weight.
    assert!(free.encode_one("", Role::Query).unwrap().is_empty());
    assert!(free.encode(&[], Role::Document).unwrap().is_empty());
    let sum = encoder("sum");
    assert_eq!(sum.pooling(Role::Query), Some(SpladeStrategy::Sum));
    assert!(sum.runs_model(Role::Query));
    // A shorter max_length truncates with [SEP] kept last.
    let short = SparseEncoder::builder(root().join("max"))
        .options(ModelOptions::default().max_length(4))
        .build()
        .unwrap();
    let ids = short
        .token_ids("rust is a language", Role::Document)
        .unwrap();
    assert_eq!((ids.len(), ids[0], ids[3]), (4, 2, 3));
    for (options, what) in [
        (ModelOptions::default().max_length(1000), "max_length"),
        (
            ModelOptions::default().precision(rerank::Precision::Bf16),
            "precision",
        ),
    ] {
        let e = SparseEncoder::builder(root().join("max"))
            .options(options)
            .build();
        assert!(e.is_err(), "{what}");
    }
    let int8 = SparseEncoder::builder(root().join("max"))
        .options(ModelOptions::default().precision(rerank::Precision::Int8))
        .build()
        .unwrap();
    let a = int8.encode_one("what is rust", Role::Query).unwrap();
    let b = encoder("max")
        .encode_one("what is rust", Role::Query)
        .unwrap();
    assert!(a.dot(&b) > 0.9 * b.dot(&b));
}

/// Rewrites the JSON file `name` of `dir` with `f`.
fn edit(dir: &Path, name: &str, f: impl FnOnce(&mut Value)) {
    let path = dir.join(name);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Loading `dir` fails with an [`Error::Model`] naming `file` (relative to `dir`) and `key`.
fn refused(dir: &Path, file: &str, key: &str) {
    let e = SparseEncoder::from_dir(dir).unwrap_err();
    let Error::Model { message, .. } = &e else {
        panic!("{file} {key}: expected Error::Model, got {e:?}");
    };
    let path = dir.join(file).display().to_string();
    assert!(message.contains(&path), "{file} {key}: {message}");
    assert!(message.contains(key), "{file} {key}: {message}");
}

#[test]
fn layouts_it_cannot_reproduce_are_refused_naming_file_and_key() {
    type Edit = fn(&mut Value);
    let cases: Vec<(&str, &str, &str, Edit)> = vec![
        (
            "max",
            "1_SpladePooling/config.json",
            "pooling_strategy",
            |v| v["pooling_strategy"] = "mean".into(),
        ),
        (
            "max",
            "1_SpladePooling/config.json",
            "activation_function",
            |v| v["activation_function"] = "gelu".into(),
        ),
        (
            "max",
            "1_SpladePooling/config.json",
            "embedding_dimension",
            |v| v["embedding_dimension"] = 100.into(),
        ),
        ("max", "modules.json", "[1].type", |v| {
            v[1]["type"] = "sentence_transformers.models.Pooling".into()
        }),
        ("max", "modules.json", "[0].type", |v| {
            v[0]["type"] = "sentence_transformers.models.Transformer".into()
        }),
        (
            "max",
            "config_sentence_transformers.json",
            "prompts.query",
            |v| v["prompts"]["query"] = "query: ".into(),
        ),
        (
            "max",
            "config_sentence_transformers.json",
            "similarity_fn_name",
            |v| v["similarity_fn_name"] = "cosine".into(),
        ),
        (
            "max",
            "sentence_bert_config.json",
            "transformer_task",
            |v| v["transformer_task"] = "feature-extraction".into(),
        ),
        ("max", "config.json", "model_type", |v| {
            v["model_type"] = "roberta".into()
        }),
        ("max", "config.json", "vocab_size", |v| {
            v["vocab_size"] = 600.into()
        }),
        (
            "inference_free",
            "router_config.json",
            "types.query_0_SparseStaticEmbedding",
            |v| v["types"]["query_0_SparseStaticEmbedding"] = "x.IDF".into(),
        ),
        (
            "inference_free",
            "router_config.json",
            "structure.query",
            |v| {
                v["structure"].as_object_mut().unwrap().remove("query");
                v["parameters"]["default_route"] = Value::Null;
            },
        ),
        (
            "inference_free",
            "router_config.json",
            "parameters.route_mappings",
            |v| v["parameters"]["route_mappings"] = serde_json::json!({"search": "query"}),
        ),
        ("distilbert", "config.json", "sinusoidal_pos_embds", |v| {
            v["sinusoidal_pos_embds"] = true.into()
        }),
    ];
    for (case, file, key, f) in cases {
        let copy = Broken::of(&root().join(case), "splade");
        edit(&copy.0, file, f);
        refused(&copy.0, file, key);
    }
    // Without modules.json, only a *ForMaskedLM checkpoint loads (as max pooling).
    let copy = Broken::of(&root().join("max"), "splade-plain");
    std::fs::remove_file(copy.0.join("modules.json")).unwrap();
    let plain = SparseEncoder::from_dir(&copy.0).unwrap();
    let want = encoder("max")
        .encode_one("what is rust", Role::Document)
        .unwrap();
    assert_eq!(
        plain.encode_one("what is rust", Role::Document).unwrap(),
        want
    );
    edit(&copy.0, "config.json", |v| {
        v["architectures"] = serde_json::json!(["BertModel"])
    });
    refused(&copy.0, "config.json", "architectures");
    // The static table must cover the tokenizer's vocabulary.
    let copy = Broken::of(&root().join("inference_free"), "splade-table");
    let table = copy.0.join("query_0_SparseStaticEmbedding");
    std::fs::copy(
        root().join("max/model.safetensors"),
        table.join("model.safetensors"),
    )
    .unwrap();
    assert!(SparseEncoder::from_dir(&copy.0).is_err());
}

#[test]
fn older_module_type_names_load_as_the_current_ones() {
    let copy = Broken::of(&root().join("inference_free"), "splade-older");
    edit(&copy.0, "modules.json", |v| {
        v[0]["type"] = "sentence_transformers.models.Router".into()
    });
    edit(&copy.0, "router_config.json", |v| {
        let t = &mut v["types"];
        t["query_0_SparseStaticEmbedding"] =
            "sentence_transformers.sparse_encoder.models.SparseStaticEmbedding".into();
        t["document_0_MLMTransformer"] =
            "sentence_transformers.sparse_encoder.models.MLMTransformer".into();
        t["document_1_SpladePooling"] =
            "sentence_transformers.sparse_encoder.models.SpladePooling".into();
    });
    let older = SparseEncoder::from_dir(&copy.0).unwrap();
    let current = encoder("inference_free");
    for role in [Role::Query, Role::Document] {
        let text = "Rust is a systems programming language";
        assert_eq!(
            older.encode_one(text, role).unwrap(),
            current.encode_one(text, role).unwrap()
        );
    }
}

/// `SparseIndex` ranks the documents of every case by the dot product sentence-transformers
/// gives (`scores`), best first; a document added again under its id replaces the first.
#[test]
fn the_sparse_index_ranks_by_sentence_transformers_scores() {
    use rerank::recall::{SearchQuery, SparseIndex};
    use rerank::{Document, Retriever};

    for case in ["max", "inference_free"] {
        let want = &expected()[case];
        let index = SparseIndex::new(std::sync::Arc::new(encoder(case)));
        let docs: Vec<Document> = want["documents"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, d)| Document::new(i.to_string(), d["text"].as_str().unwrap()))
            .collect();
        index.add(docs.clone()).unwrap();
        assert_eq!(index.len(), docs.len());
        let scores: Vec<Vec<f32>> = serde_json::from_value(want["scores"].clone()).unwrap();
        for (q, row) in want["queries"].as_array().unwrap().iter().zip(&scores) {
            let text = q["text"].as_str().unwrap();
            let hits = index.retrieve(&SearchQuery::new(text), 3).unwrap();
            let mut order: Vec<usize> = (0..row.len()).filter(|&d| row[d] > 0.0).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            order.truncate(3);
            assert_eq!(hits.len(), order.len(), "{case} {text:?}");
            for (hit, &d) in hits.iter().zip(&order) {
                assert!((hit.score - row[d]).abs() <= 1e-4, "{case} {text:?}");
                // Near-ties may swap; the score is what must match.
                let id: usize = hit.document.id.parse().unwrap();
                assert!((row[id] - row[d]).abs() <= 1e-4, "{case} {text:?}");
            }
        }
        assert_eq!(index.name(), "sparse");
        index.add(vec![Document::new("0", "")]).unwrap();
        assert_eq!(index.len(), docs.len());
    }
}

/// Block-max pruning in `SparseIndex::search_vector` returns exactly what scoring every
/// posting returns (ids, order, score bits), over several windows of documents, after
/// replacements; a negative weight (which the bounds cannot hold) is searched exhaustively
/// and still ranks by the dot product; weights that are not finite or too large are refused.
#[test]
fn the_sparse_index_prunes_without_changing_a_hit() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use rerank::recall::SparseIndex;
    use rerank::Document;

    let encoder = std::sync::Arc::new(encoder("max"));
    let vocab = encoder.vocab_size() as u32;
    let exact = |hits: &[rerank::Hit]| -> Vec<(String, u32)> {
        hits.iter()
            .map(|h| (h.id().to_string(), h.score.to_bits()))
            .collect()
    };
    // a vector of up to `nnz` ids, the low ids far more often (long postings), from `seed`
    let vector = move |seed: u64, nnz: usize| {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut indices: Vec<u32> = (0..nnz)
            .map(|_| {
                let u = (next() % 10_000) as f64 / 1e4;
                (u * u * u * vocab as f64) as u32
            })
            .collect();
        indices.sort_unstable();
        indices.dedup();
        let values = indices
            .iter()
            .map(|_| (1 + next() % 2000) as f32 / 800.0)
            .collect();
        SparseVector { indices, values }
    };
    let mut runner = TestRunner::new(Config {
        cases: 8,
        ..Config::default()
    });
    runner
        .run(
            &(any::<u64>(), 500usize..12_000, 0usize..300),
            |(seed, n, replaced)| {
                let index = SparseIndex::new(std::sync::Arc::clone(&encoder));
                let docs = (0..n as u64).map(|i| {
                    let id = format!("d{i}");
                    (
                        Document::new(id, ""),
                        vector(seed ^ (i * 7919), 1 + (i % 60) as usize),
                    )
                });
                index.add_vectors(docs).unwrap();
                let again = (0..replaced as u64).map(|i| {
                    let id = format!("d{}", (i * 37) % n as u64);
                    (Document::new(id, ""), vector(seed ^ !i, 20))
                });
                index.add_vectors(again).unwrap();
                prop_assert_eq!(index.len(), n);
                for q in 0..20u64 {
                    let query = vector(seed.wrapping_add(q), 1 + (q * 3) as usize);
                    for k in [1, 10, 50] {
                        prop_assert_eq!(
                            exact(&index.search_vector(&query, k).unwrap()),
                            exact(&index.search_vector_exhaustive(&query, k).unwrap()),
                            "query {} top {}",
                            q,
                            k
                        );
                    }
                }
                Ok(())
            },
        )
        .unwrap();

    // a negative document weight: exhaustive, by the dot product
    let index = SparseIndex::new(std::sync::Arc::clone(&encoder));
    let v = |pairs: &[(u32, f32)]| SparseVector {
        indices: pairs.iter().map(|p| p.0).collect(),
        values: pairs.iter().map(|p| p.1).collect(),
    };
    index
        .add_vectors([
            (Document::new("a", ""), v(&[(1, 2.0), (2, -1.5)])),
            (Document::new("b", ""), v(&[(1, 1.0)])),
            (Document::new("c", ""), v(&[(2, 3.0)])),
        ])
        .unwrap();
    let hits = index.search_vector(&v(&[(1, 1.0), (2, 1.0)]), 10).unwrap();
    let got: Vec<(&str, f32)> = hits.iter().map(|h| (h.id(), h.score)).collect();
    assert_eq!(got, [("c", 3.0), ("b", 1.0), ("a", 0.5)]);
    // and a negative query weight
    let hits = index.search_vector(&v(&[(1, 1.0), (2, -1.0)]), 10).unwrap();
    let got: Vec<(&str, f32)> = hits.iter().map(|h| (h.id(), h.score)).collect();
    assert_eq!(got, [("a", 3.5), ("b", 1.0)]);
    // weights that are not finite or too large are refused, naming the document or the query
    for bad in [f32::NAN, f32::INFINITY, -2.0 * SparseIndex::MAX_WEIGHT] {
        let err = index
            .add_vectors([(Document::new("d", ""), v(&[(3, bad)]))])
            .unwrap_err();
        assert!(
            matches!(&err, rerank::Error::InvalidInput(m) if m.contains("\"d\"")),
            "{err}"
        );
        let err = index.search_vector(&v(&[(1, bad)]), 3).unwrap_err();
        assert!(
            matches!(&err, rerank::Error::InvalidInput(m) if m.contains("query")),
            "{err}"
        );
    }
    assert_eq!(index.len(), 3);
}
