//! DeBERTa-v2 / v3 cross-encoders against transformers 5.24 / sentence-transformers 6.2 on the
//! tiny random checkpoints of tests/fixtures/deberta_ce_tiny (made by the make.py beside them):
//! v3/ in mxbai-rerank-v1's layout (shared position projections, layer-normed relative
//! embeddings, log buckets from 4 tokens apart, no absolute positions, no token types), v2/
//! with the other options (its own position projections, plain relative positions clamped at
//! 24, absolute positions, token types, an embedding projection, a tanh pooler), through
//! `CrossEncoder` and `load_reranker`, one pair at a time and in batches; the tokenizer
//! transformers 5 builds for DebertaV2Tokenizer; int8; configs the crate cannot honour, refused
//! naming config.json and the key.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::models::registry::{self, Support};
use rerank::models::{Architecture, ModelOptions, Precision};
use rerank::rerankers::{load_reranker, CrossEncoder, RerankQuery};
use rerank::Error;
use serde_json::Value;

/// Logits agree with transformers' to this.
const TOL: f32 = 1e-5;
/// int8 logits agree with f32 ones to this (the fixture's weights, normal with deviation 0.2,
/// are far from a trained model's; 0.012 and 0.027 are the largest differences seen).
const INT8_TOL: f32 = 0.05;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/deberta_ce_tiny")
        .join(case)
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

fn expected(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// One case of expected.json.
struct Pair {
    query: String,
    document: String,
    input_ids: Vec<u32>,
    token_type_ids: Vec<u32>,
    logit: f32,
    logit_batched: f32,
    st_score: f32,
}

fn pairs_of(dir: &Path) -> Vec<Pair> {
    let v = expected(dir);
    let ids = |c: &Value, k: &str| -> Vec<u32> {
        c[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let num = |c: &Value, k: &str| c[k].as_f64().unwrap() as f32;
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Pair {
            query: c["query"].as_str().unwrap().to_string(),
            document: c["document"].as_str().unwrap().to_string(),
            input_ids: ids(c, "input_ids"),
            token_type_ids: ids(c, "token_type_ids"),
            logit: num(c, "logit"),
            logit_batched: num(c, "logit_batched"),
            st_score: num(c, "st_score"),
        })
        .collect()
}

/// The largest difference of `got` from `want`, which must be within `tol`.
fn assert_close(got: &[f32], want: impl Iterator<Item = f32>, tol: f32, what: &str) -> f32 {
    let want: Vec<f32> = want.collect();
    assert_eq!(got.len(), want.len(), "{what}");
    let mut worst = 0f32;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let d = (g - w).abs();
        assert!(d <= tol, "{what}: pair {i}: got {g}, want {w} (diff {d})");
        worst = worst.max(d);
    }
    worst
}

#[test]
fn deberta_cross_encoders_match_transformers_single_and_batched() {
    for case in ["v3", "v2"] {
        let dir = fixture(case);
        let cases = pairs_of(&dir);
        assert_eq!(cases.len(), 7);
        // Pairs longer than the buckets (8) and than 64 tokens, one cut to 512, an empty
        // document, non-ASCII text, tabs and line breaks.
        let lens: Vec<usize> = cases.iter().map(|c| c.input_ids.len()).collect();
        assert!(lens.iter().all(|&n| n > 8), "{lens:?}");
        assert!(lens.iter().filter(|&&n| n > 64).count() >= 2, "{lens:?}");
        assert!(lens.contains(&512), "{lens:?}");
        assert!(cases.iter().any(|c| c.document.is_empty()));
        assert!(cases.iter().any(|c| !c.query.is_ascii()));
        assert!(cases.iter().any(|c| c.document.contains('\n')));
        let ce = CrossEncoder::builder(&dir)
            .options(options())
            .build()
            .unwrap();
        assert_eq!(
            ce.architecture(),
            &Architecture::DebertaV2ForSequenceClassification
        );
        assert_eq!(ce.max_length(), 512);
        let pairs: Vec<(&str, &str)> = cases
            .iter()
            .map(|c| (c.query.as_str(), c.document.as_str()))
            .collect();
        // The ids transformers 5's DebertaV2Tokenizer gives (not those of tokenizer.json as
        // written: its normalizer differs on tabs, line breaks and leading spaces).
        for (c, p) in cases.iter().zip(&pairs) {
            let enc = ce.encode_pair(p.0, p.1).unwrap();
            assert_eq!(enc.input_ids, c.input_ids, "{case}: {p:?}");
            assert_eq!(enc.token_type_ids, c.token_type_ids, "{case}: {p:?}");
        }
        let single: Vec<f32> = pairs
            .iter()
            .map(|p| ce.logits(std::slice::from_ref(p)).unwrap()[0])
            .collect();
        let mut worst = assert_close(&single, cases.iter().map(|c| c.logit), TOL, case);
        // One batch of all (the reference's padded batch), then budgets that mix them.
        for (tokens, size) in [(usize::MAX, 64), (600, 2), (100, 3)] {
            let ce = CrossEncoder::builder(&dir)
                .options(options().token_budget(tokens).max_batch_size(size))
                .build()
                .unwrap();
            let batched = ce.logits(&pairs).unwrap();
            let what = format!("{case} batched ({tokens}, {size})");
            worst = worst.max(assert_close(
                &batched,
                cases.iter().map(|c| c.logit_batched),
                TOL,
                &what,
            ));
            worst = worst.max(assert_close(&batched, single.iter().copied(), TOL, &what));
        }
        println!("{case}: largest logit difference from transformers {worst:.1e}");
        // sentence-transformers' CrossEncoder.predict: the logits' sigmoid.
        let scores: Vec<f32> = ce
            .predict(&pairs)
            .unwrap()
            .iter()
            .map(|s| s.score)
            .collect();
        let st = assert_close(&scores, cases.iter().map(|c| c.st_score), TOL, case);
        println!("{case}: largest score difference from sentence-transformers {st:.1e}");
        // load_reranker picks the cross-encoder, with the same scores.
        let reranker = load_reranker(&dir, &options()).unwrap();
        assert_eq!(reranker.name(), "cross-encoder");
        let query = RerankQuery::new(cases[0].query.clone());
        let docs: Vec<&str> = cases.iter().map(|c| c.document.as_str()).collect();
        let got = reranker.score(&query, &docs).unwrap();
        let want: Vec<(&str, &str)> = docs.iter().map(|d| (pairs[0].0, *d)).collect();
        let want: Vec<f32> = ce.predict(&want).unwrap().iter().map(|s| s.score).collect();
        assert_eq!(got, want, "{case}");
        assert_close(&got[..1], std::iter::once(cases[0].st_score), TOL, case);
        // int8 stays close.
        let int8 = CrossEncoder::builder(&dir)
            .options(options().precision(Precision::Int8))
            .build()
            .unwrap();
        assert_eq!(int8.precision(), Precision::Int8);
        let got = int8.logits(&pairs).unwrap();
        let d = assert_close(
            &got,
            single.iter().copied(),
            INT8_TOL,
            &format!("{case} int8"),
        );
        println!("{case}: largest int8 logit difference from f32 {d:.1e}");
    }
}

#[test]
fn bf16_is_refused() {
    let e = CrossEncoder::builder(fixture("v3"))
        .options(ModelOptions::default().precision(Precision::Bf16))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(e.to_string().contains("bf16"), "{e}");
}

/// A scratch copy of a fixture folder to break.
struct Broken(PathBuf);

impl Broken {
    fn of(from: &Path, tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rerank-deberta-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        crate::common::copy_dir(from, &dir);
        Broken(dir)
    }

    fn edit_config(&self, f: impl FnOnce(&mut Value)) {
        let path = self.0.join("config.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }

    /// The error of loading the folder, through `CrossEncoder` and `load_reranker`; it must
    /// be an [`Error::Model`] naming the folder's config.json and `key`.
    fn refused(&self, key: &str) {
        let errors = [
            CrossEncoder::from_dir(&self.0).unwrap_err(),
            load_reranker(&self.0, &options()).err().unwrap(),
        ];
        for e in errors {
            let Error::Model { message, .. } = &e else {
                panic!("{key}: expected Error::Model, got {e:?}");
            };
            let config = self.0.join("config.json").display().to_string();
            assert!(message.contains(&config), "{key}: {message}");
            assert!(message.contains(key), "{key}: {message}");
        }
    }
}

impl Drop for Broken {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn configs_that_cannot_be_honoured_are_refused_naming_config_json_and_the_key() {
    type Edit = fn(&mut Value);
    let cases: [(&str, &str, Edit); 13] = [
        ("v3", "relative_attention", |c| {
            c["relative_attention"] = false.into()
        }),
        ("v3", "relative_attention", |c| {
            c.as_object_mut().unwrap().remove("relative_attention");
        }),
        ("v3", "pos_att_type", |c| {
            c["pos_att_type"] = serde_json::json!(["c2p", "p2p"])
        }),
        ("v2", "pos_att_type", |c| {
            c["pos_att_type"] = "p2c|c2c".into()
        }),
        ("v3", "conv_kernel_size", |c| {
            c["conv_kernel_size"] = 3.into()
        }),
        ("v3", "norm_rel_ebd", |c| {
            c["norm_rel_ebd"] = "rms_norm".into()
        }),
        ("v3", "pooler_hidden_act", |c| {
            c["pooler_hidden_act"] = "quick_gelu".into()
        }),
        ("v3", "pooler_hidden_size", |c| {
            c["pooler_hidden_size"] = 64.into()
        }),
        ("v2", "hidden_act", |c| {
            c["hidden_act"] = "quick_gelu".into()
        }),
        // Tensor shapes that do not match the config.
        ("v3", "position_buckets", |c| {
            c["position_buckets"] = 16.into()
        }),
        ("v2", "max_relative_positions", |c| {
            c["max_relative_positions"] = 48.into()
        }),
        ("v2", "embedding_size", |c| c["embedding_size"] = 16.into()),
        ("v3", "num_hidden_layers", |c| {
            c["num_hidden_layers"] = 4.into()
        }),
    ];
    for (i, (case, key, edit)) in cases.into_iter().enumerate() {
        let b = Broken::of(&fixture(case), &format!("{i}"));
        b.edit_config(edit);
        b.refused(key);
    }
    // v1 DeBERTa: another architecture, refused naming config.json and it.
    let b = Broken::of(&fixture("v3"), "v1");
    b.edit_config(|c| c["architectures"] = serde_json::json!(["DebertaForSequenceClassification"]));
    b.refused("DebertaForSequenceClassification");
    // Two labels where the classifier has one row.
    let b = Broken::of(&fixture("v3"), "labels");
    b.edit_config(|c| c["id2label"] = serde_json::json!({"0": "a", "1": "b"}));
    let e = CrossEncoder::from_dir(&b.0).unwrap_err().to_string();
    assert!(
        e.contains("classifier.weight") && e.contains("num_labels"),
        "{e}"
    );
}

#[test]
fn the_registry_supports_mxbai_rerank_v1() {
    for id in [
        "mixedbread-ai/mxbai-rerank-base-v1",
        "mixedbread-ai/mxbai-rerank-large-v1",
    ] {
        let m = registry::find(id).unwrap();
        assert_eq!(m.support, Support::Supported, "{id}");
        assert_eq!((m.model_type, m.max_length), ("deberta-v2", 512), "{id}");
    }
}
