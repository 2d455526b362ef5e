//! Cross-encoder parity with sentence-transformers / transformers on the shared `ce_tiny_a`
//! fixture (a tiny random BertForSequenceClassification), plus load errors and thread safety.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rerank::models::ModelOptions;
use rerank::rerankers::RerankQuery;
use rerank::rerankers::{Activation, CrossEncoder};
use rerank::{Error, Reranker};
use serde_json::Value;

use crate::model_fixtures::{self, pairs_in, Pair as Case};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/ce_tiny_a");
/// The fixtures' logits and ours agree to better than 1e-6; 1e-5 leaves room for kernels.
const TOL: f32 = 1e-5;

fn model_dir() -> PathBuf {
    Path::new(FIXTURE).join("model")
}

/// The fixture's cases, or `None` (with a message) when the shared data is absent; every case
/// has both `predict` scores.
fn cases() -> Option<Vec<Case>> {
    let path = Path::new(FIXTURE).join("scores.json");
    if !path.exists() {
        crate::common::skip(&format!("skipping: {} not found", path.display()));
        return None;
    }
    let cases = pairs_in(&path);
    assert_eq!(cases.len(), 40);
    assert!(cases
        .iter()
        .all(|c| c.predict_default.is_some() && c.predict_identity.is_some()));
    Some(cases)
}

/// A case's `predict` score with the default activation.
fn default_score(c: &Case) -> f32 {
    c.predict_default.unwrap()
}

/// A case's `predict` score with the identity activation.
fn identity_score(c: &Case) -> f32 {
    c.predict_identity.unwrap()
}

fn pairs(cases: &[Case]) -> Vec<(&str, &str)> {
    cases
        .iter()
        .map(|c| (c.query.as_str(), c.document.as_str()))
        .collect()
}

fn assert_close(got: &[f32], want: impl Iterator<Item = f32>, what: &str) {
    let worst = model_fixtures::assert_close(got, want, TOL, what);
    eprintln!("{what}: max abs diff {worst:e}");
}

#[test]
fn input_ids_and_token_types_match_for_all_pairs() {
    let Some(cases) = cases() else { return };
    let ce = CrossEncoder::from_dir(model_dir()).unwrap();
    assert_eq!(ce.max_length(), 512);
    for (i, c) in cases.iter().enumerate() {
        let enc = ce.encode_pair(&c.query, &c.document).unwrap();
        assert_eq!(enc.input_ids, c.input_ids, "case {i} input ids");
        assert_eq!(enc.token_type_ids, c.token_type_ids, "case {i} token types");
    }
}

#[test]
fn empty_document_keeps_the_pair_form() {
    if cases().is_none() {
        return;
    }
    let ce = CrossEncoder::from_dir(model_dir()).unwrap();
    let enc = ce.encode_pair("the document is empty", "").unwrap();
    let n = enc.input_ids.len();
    assert_eq!(enc.input_ids[0], 101);
    assert_eq!(&enc.input_ids[n - 2..], &[102, 102]);
    assert_eq!(&enc.token_type_ids[n - 2..], &[0, 1]);
}

#[test]
fn logits_one_at_a_time_match_the_reference() {
    let Some(cases) = cases() else { return };
    let ce = CrossEncoder::from_dir(model_dir()).unwrap();
    let got: Vec<f32> = pairs(&cases)
        .iter()
        .map(|p| ce.logits(std::slice::from_ref(p)).unwrap()[0])
        .collect();
    assert_close(&got, cases.iter().map(|c| c.logit), "single logits");
}

#[test]
fn logits_batched_match_the_reference_under_any_batching() {
    let Some(cases) = cases() else { return };
    let p = pairs(&cases);
    // One padded batch of all 40 (the reference's right-padded batch), then small budgets
    // that mix lengths differently.
    for (tokens, size) in [(usize::MAX, 64), (8192, 32), (1024, 7), (600, 3)] {
        let ce = CrossEncoder::builder(model_dir())
            .options(
                ModelOptions::default()
                    .token_budget(tokens)
                    .max_batch_size(size),
            )
            .build()
            .unwrap();
        let got = ce.logits(&p).unwrap();
        let what = format!("batched logits (budget {tokens}, size {size})");
        assert_close(&got, cases.iter().map(|c| c.logit_batched), &what);
        assert_close(&got, cases.iter().map(|c| c.logit), &what);
    }
}

#[test]
fn predict_default_is_sigmoid_like_sentence_transformers() {
    let Some(cases) = cases() else { return };
    let ce = CrossEncoder::from_dir(model_dir()).unwrap();
    assert_eq!(ce.activation(), Activation::Sigmoid);
    let out = ce.predict(&pairs(&cases)).unwrap();
    let scores: Vec<f32> = out.iter().map(|s| s.score).collect();
    let logits: Vec<f32> = out.iter().map(|s| s.logit).collect();
    assert_close(&scores, cases.iter().map(default_score), "predict_default");
    assert_close(&logits, cases.iter().map(|c| c.logit), "predict logits");

    // The Reranker view: one query, many documents, in input order.
    let q = &cases[4].query;
    let docs: Vec<&str> = cases[4..6].iter().map(|c| c.document.as_str()).collect();
    let s = ce.score(&RerankQuery::new(q.clone()), &docs).unwrap();
    assert_close(&s, cases[4..6].iter().map(default_score), "reranker");
    assert_eq!(ce.name(), "cross-encoder");
    assert!(ce.score(&RerankQuery::new("q"), &[]).unwrap().is_empty());
}

#[test]
fn raw_logits_on_request_and_activation_from_config() {
    let Some(cases) = cases() else { return };
    let p = pairs(&cases);
    let ce = CrossEncoder::builder(model_dir())
        .raw_logits()
        .build()
        .unwrap();
    let scores: Vec<f32> = ce.predict(&p).unwrap().iter().map(|s| s.score).collect();
    assert_close(&scores, cases.iter().map(identity_score), "raw");

    // config.json saying Identity (new key and legacy key) changes the default.
    for (key, value) in [
        (
            "sentence_transformers",
            serde_json::json!({"activation_fn": "torch.nn.modules.linear.Identity"}),
        ),
        (
            "sbert_ce_default_activation_function",
            serde_json::json!("torch.nn.modules.linear.Identity"),
        ),
    ] {
        let dir = TempModel::copy(&format!("act-{key}"));
        dir.edit_config(|c| c[key] = value.clone());
        let ce = CrossEncoder::from_dir(&dir.0).unwrap();
        assert_eq!(ce.activation(), Activation::Identity, "{key}");
        let scores: Vec<f32> = ce
            .predict(&p[..3])
            .unwrap()
            .iter()
            .map(|s| s.score)
            .collect();
        assert_close(&scores, cases[..3].iter().map(identity_score), key);
        // An explicit choice wins over the config.
        let ce = CrossEncoder::builder(&dir.0)
            .activation(Activation::Sigmoid)
            .build()
            .unwrap();
        let scores: Vec<f32> = ce
            .predict(&p[..3])
            .unwrap()
            .iter()
            .map(|s| s.score)
            .collect();
        assert_close(&scores, cases[..3].iter().map(default_score), key);
    }
}

#[test]
fn a_shorter_max_length_truncates_longest_first() {
    let Some(cases) = cases() else { return };
    let ce = CrossEncoder::builder(model_dir())
        .options(ModelOptions::default().max_length(16))
        .build()
        .unwrap();
    assert_eq!(ce.max_length(), 16);
    // Case 20: short query, long document: only the document is cut.
    let c = &cases[20];
    let enc = ce.encode_pair(&c.query, &c.document).unwrap();
    assert_eq!(enc.input_ids.len(), 16);
    let q_len = c.token_type_ids.iter().filter(|&&t| t == 0).count();
    assert_eq!(&enc.input_ids[..q_len], &c.input_ids[..q_len]);
    assert_eq!(enc.input_ids[15], 102);
    // Both sides longer than half the 13 content tokens: the shorter side keeps 6 and the
    // longer 7; on a tie (case 24, 300 + 300) the query keeps 6 and the document 7; when the
    // query is the longer (case 22, 526 + 522) it keeps 7.
    for (i, q_kept, d_kept) in [(24, 6, 7), (22, 7, 6), (23, 6, 7)] {
        let c = &cases[i];
        let enc = ce.encode_pair(&c.query, &c.document).unwrap();
        let q = enc.token_type_ids.iter().filter(|&&t| t == 0).count();
        let d = enc.token_type_ids.iter().filter(|&&t| t == 1).count();
        assert_eq!((q, d), (1 + q_kept + 1, d_kept + 1), "case {i}");
        assert_eq!(
            &enc.input_ids[1..1 + q_kept],
            &c.input_ids[1..1 + q_kept],
            "case {i}"
        );
    }
}

#[test]
fn one_instance_shared_by_many_threads_gives_the_same_scores() {
    let Some(cases) = cases() else { return };
    let ce = Arc::new(
        CrossEncoder::builder(model_dir())
            .options(ModelOptions::default().threads(2))
            .build()
            .unwrap(),
    );
    assert_eq!(ce.threads(), Some(2));
    let all: Vec<(String, String)> = cases
        .iter()
        .map(|c| (c.query.clone(), c.document.clone()))
        .collect();
    let handles: Vec<_> = (0..6)
        .map(|t| {
            let ce = Arc::clone(&ce);
            let all = all.clone();
            std::thread::spawn(move || {
                // Each thread scores a different rotation, several times.
                let mut out = vec![0f32; all.len()];
                for round in 0..3 {
                    let start = (t * 7 + round) % all.len();
                    let order: Vec<usize> =
                        (0..all.len()).map(|i| (start + i) % all.len()).collect();
                    let p: Vec<(&str, &str)> = order
                        .iter()
                        .map(|&i| (all[i].0.as_str(), all[i].1.as_str()))
                        .collect();
                    let got = ce.logits(&p).unwrap();
                    for (k, &i) in order.iter().enumerate() {
                        out[i] = got[k];
                    }
                }
                out
            })
        })
        .collect();
    for h in handles {
        let got = h.join().unwrap();
        assert_close(&got, cases.iter().map(|c| c.logit), "threaded");
    }
    // A one-thread pool computes the same.
    let one = CrossEncoder::builder(model_dir())
        .options(ModelOptions::default().threads(1))
        .build()
        .unwrap();
    let got = one.logits(&pairs(&cases)).unwrap();
    assert_close(&got, cases.iter().map(|c| c.logit), "1 thread");
}

// ---- load errors -------------------------------------------------------------------------

/// A scratch copy of the fixture model that a test can edit.
struct TempModel(PathBuf);

impl TempModel {
    fn copy(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rerank-ce-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["config.json", "tokenizer.json", "model.safetensors"] {
            std::fs::copy(model_dir().join(f), dir.join(f)).unwrap();
        }
        TempModel(dir)
    }

    fn edit_config(&self, f: impl FnOnce(&mut Value)) {
        let path = self.0.join("config.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }
}

impl Drop for TempModel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn model_err(dir: &Path) -> String {
    match CrossEncoder::from_dir(dir).unwrap_err() {
        Error::Model { message: m, .. } => m,
        other => panic!("expected Error::Model, got {other:?}"),
    }
}

#[test]
fn missing_directory_or_file_is_named() {
    if cases().is_none() {
        return;
    }
    let e = model_err(Path::new("/nonexistent/ce"));
    assert!(e.contains("/nonexistent/ce: does not exist"), "{e}");
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        let dir = TempModel::copy(&format!("missing-{f}"));
        std::fs::remove_file(dir.0.join(f)).unwrap();
        let e = model_err(&dir.0);
        // Without config.json the folder is no model directory at all.
        let named = match f {
            "config.json" => e.contains("has no config.json"),
            _ => e.contains(f) && e.contains("missing"),
        };
        assert!(named, "{f}: {e}");
    }
}

#[test]
fn unsupported_architectures_are_refused() {
    if cases().is_none() {
        return;
    }
    for arch in ["Qwen3ForCausalLM", "BertModel", "GPT2LMHeadModel"] {
        let dir = TempModel::copy(&format!("arch-{arch}"));
        dir.edit_config(|c| c["architectures"] = serde_json::json!([arch]));
        let e = model_err(&dir.0);
        assert!(
            e.contains("unsupported architecture") && e.contains(arch),
            "{e}"
        );
    }
}

#[test]
fn a_pad_token_id_outside_the_vocabulary_is_refused() {
    if cases().is_none() {
        return;
    }
    for pad in [
        serde_json::json!(1_000_000_000u64),
        serde_json::json!(u64::MAX),
    ] {
        let dir = TempModel::copy("bad-pad");
        dir.edit_config(|c| c["pad_token_id"] = pad.clone());
        let e = model_err(&dir.0);
        assert!(
            e.contains("pad_token_id") && e.contains("vocab_size"),
            "{e}"
        );
    }
}

#[test]
fn config_that_does_not_match_the_weights_is_refused() {
    if cases().is_none() {
        return;
    }
    // Wrong hidden size: the embedding matrices have 32 columns, not 64.
    let dir = TempModel::copy("hidden");
    dir.edit_config(|c| c["hidden_size"] = 64.into());
    let e = model_err(&dir.0);
    assert!(
        e.contains("model.safetensors") && e.contains("config.json"),
        "{e}"
    );
    assert!(e.contains("shape"), "{e}");

    // More layers than the weights hold: a missing tensor.
    let dir = TempModel::copy("layers");
    dir.edit_config(|c| c["num_hidden_layers"] = 3.into());
    let e = model_err(&dir.0);
    assert!(e.contains("encoder.layer.2"), "{e}");

    // Two labels where the classifier has one row.
    let dir = TempModel::copy("labels");
    dir.edit_config(|c| c["id2label"] = serde_json::json!({"0": "a", "1": "b"}));
    let e = model_err(&dir.0);
    assert!(e.contains("classifier"), "{e}");

    // A head that is not a multiple of the heads.
    let dir = TempModel::copy("heads");
    dir.edit_config(|c| c["num_attention_heads"] = 3.into());
    let e = model_err(&dir.0);
    assert!(e.contains("num_attention_heads"), "{e}");

    // A weights file without the classifier.
    let dir = TempModel::copy("no-classifier");
    let path = dir.0.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
    tensors.remove("classifier.weight");
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let e = model_err(&dir.0);
    assert!(e.contains("classifier.weight"), "{e}");
}

#[test]
fn invalid_options_fail_at_build() {
    if cases().is_none() {
        return;
    }
    let cfg_err = |b: rerank::rerankers::CrossEncoderBuilder| match b.build().unwrap_err() {
        Error::Config(m) => m,
        other => panic!("expected Error::Config, got {other:?}"),
    };
    let e = cfg_err(
        CrossEncoder::builder(model_dir()).options(ModelOptions::default().max_length(513)),
    );
    assert!(e.contains("513"), "{e}");
    let e =
        cfg_err(CrossEncoder::builder(model_dir()).options(ModelOptions::default().max_length(3)));
    assert!(e.contains("max_length"), "{e}");
    let e = cfg_err(
        CrossEncoder::builder(model_dir()).options(ModelOptions::default().max_batch_size(0)),
    );
    assert!(e.contains("batch_size"), "{e}");
    let e = cfg_err(
        CrossEncoder::builder(model_dir()).options(ModelOptions::default().token_budget(0)),
    );
    assert!(e.contains("token_budget"), "{e}");
    let e = cfg_err(CrossEncoder::builder(model_dir()).options(ModelOptions::default().threads(0)));
    assert!(e.contains("threads"), "{e}");
}

#[cfg(feature = "hf-hub")]
mod hub {
    use super::*;
    use rerank::models::HubModel;

    /// A hub cache laid out as the Python and Rust clients write it, holding the fixture.
    fn fake_cache(tag: &str) -> (PathBuf, String) {
        let root = std::env::temp_dir().join(format!("rerank-hub-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let commit = "0123456789abcdef0123456789abcdef01234567".to_string();
        let repo = root.join("models--test-org--ce-tiny");
        let snap = repo.join("snapshots").join(&commit);
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs").join("main"), &commit).unwrap();
        for f in ["config.json", "tokenizer.json", "model.safetensors"] {
            std::fs::copy(model_dir().join(f), snap.join(f)).unwrap();
        }
        (root, commit)
    }

    #[test]
    fn offline_cache_hit_loads_and_miss_is_a_clear_error() {
        let Some(cases) = cases() else { return };
        let (root, commit) = fake_cache("offline");
        for rev in ["main", commit.as_str()] {
            let model = HubModel::new("test-org/ce-tiny")
                .revision(rev)
                .cache_dir(&root)
                .offline(true);
            let ce = CrossEncoder::builder_from_hub(model).build().unwrap();
            let got = ce.logits(&pairs(&cases[..5])).unwrap();
            assert_close(&got, cases[..5].iter().map(|c| c.logit), "hub cache");
        }
        let model = HubModel::new("test-org/absent")
            .cache_dir(&root)
            .offline(true);
        let e = CrossEncoder::builder_from_hub(model).build().unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, Error::Model { .. }), "{m}");
        assert!(
            m.contains("test-org/absent") && m.contains("HF_HUB_OFFLINE"),
            "{m}"
        );
        let model = HubModel::new("test-org/ce-tiny")
            .revision("v9")
            .cache_dir(&root)
            .offline(true);
        let m = CrossEncoder::builder_from_hub(model)
            .build()
            .unwrap_err()
            .to_string();
        assert!(m.contains("@v9") && m.contains("config.json"), "{m}");
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[test]
fn a_pipeline_config_builds_the_cross_encoder() {
    let Some(cases) = cases() else { return };
    let yaml = format!(
        "retriever: {{ type: bm25 }}\nreranker: {{ type: cross_encoder, model: {:?} }}\n\
         search: {{ top_k: 1 }}\n",
        model_dir().display().to_string()
    );
    let config = rerank::pipeline::PipelineConfig::from_yaml_str(&yaml).unwrap();
    let docs = vec![
        rerank::Document::new("a", cases[4].document.clone()),
        rerank::Document::new("b", cases[5].document.clone()),
    ];
    let pipeline = config.build(docs).unwrap();
    let response = pipeline.search(&cases[4].query).unwrap();
    assert_eq!(response.scorer, "cross-encoder");
    // The better of the two by the reference scores comes first, with its reference score.
    let best = if default_score(&cases[4]) > default_score(&cases[5]) {
        ("a", 4)
    } else {
        ("b", 5)
    };
    assert_eq!(response.hits.len(), 1);
    assert_eq!(response.hits[0].document.id, best.0);
    let got = response.hits[0].rerank_score.unwrap();
    assert!((got - default_score(&cases[best.1])).abs() <= TOL, "{got}");
    let bad = "retriever: { type: bm25 }\nreranker: { type: cross_encoder, model: /nonexistent }\n";
    let e = rerank::pipeline::PipelineConfig::from_yaml_str(bad)
        .unwrap()
        .build(vec![])
        .unwrap_err();
    assert!(matches!(e, Error::Model { .. }), "{e}");
}

/// A tiny random XLMRobertaForSequenceClassification (tests/fixtures/xlmr_tiny, made by its
/// make.py with transformers) with the ce_tiny_a WordPiece tokenizer.
#[test]
fn xlm_roberta_matches_transformers_single_and_batched() {
    if cases().is_none() {
        return;
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/xlmr_tiny");
    let dir = TempModel::copy("xlmr");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(here.join(f), dir.0.join(f)).unwrap();
    }
    let cases = model_fixtures::pairs_of(&here);
    let ce = CrossEncoder::from_dir(&dir.0).unwrap();
    assert_eq!(
        ce.architecture(),
        &rerank::models::Architecture::XlmRobertaForSequenceClassification
    );
    // Positions start after the padding id: 514 positions hold 512 tokens.
    assert_eq!(ce.max_length(), 512);
    let pairs = pairs(&cases);
    assert_eq!(cases.len(), pairs.len());
    for c in &cases {
        let enc = ce.encode_pair(&c.query, &c.document).unwrap();
        assert_eq!(enc.input_ids, c.input_ids);
        assert_eq!(enc.token_type_ids, c.token_type_ids);
    }
    let single: Vec<f32> = pairs
        .iter()
        .map(|p| ce.logits(std::slice::from_ref(p)).unwrap()[0])
        .collect();
    assert_close(&single, cases.iter().map(|c| c.logit), "xlm-r single");
    let batched = ce.logits(&pairs).unwrap();
    assert_close(
        &batched,
        cases.iter().map(|c| c.logit_batched),
        "xlm-r batched",
    );
}
