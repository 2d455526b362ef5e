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

use crate::model_fixtures::{assert_close, check_cross_encoder, Broken};

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

#[test]
fn deberta_cross_encoders_match_transformers_single_and_batched() {
    for case in ["v3", "v2"] {
        let dir = fixture(case);
        // The ids transformers 5's DebertaV2Tokenizer gives (not those of tokenizer.json as
        // written: its normalizer differs on tabs, line breaks and leading spaces); one batch
        // of all (the reference's padded batch), then budgets that mix them.
        let budgets = [(usize::MAX, 64), (600, 2), (100, 3)];
        let checked = check_cross_encoder(&dir, case, options(), &budgets, TOL);
        let (ce, cases, single) = (&checked.ce, &checked.cases, &checked.single);
        let pairs = checked.pairs();
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
        assert_eq!(
            ce.architecture(),
            &Architecture::DebertaV2ForSequenceClassification
        );
        assert_eq!(ce.max_length(), 512);
        let st_scores = cases.iter().map(|c| c.st_score.unwrap());
        // sentence-transformers' CrossEncoder.predict: the logits' sigmoid.
        let scores: Vec<f32> = ce
            .predict(&pairs)
            .unwrap()
            .iter()
            .map(|s| s.score)
            .collect();
        let st = assert_close(&scores, st_scores, TOL, case);
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
        assert_close(&got[..1], cases[0].st_score.into_iter(), TOL, case);
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
        b.refused("cross-encoder", key);
    }
    // v1 DeBERTa: another architecture, refused naming config.json and it.
    let b = Broken::of(&fixture("v3"), "v1");
    b.edit_config(|c| c["architectures"] = serde_json::json!(["DebertaForSequenceClassification"]));
    b.refused("cross-encoder", "DebertaForSequenceClassification");
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

/// `rerank score` on a DeBERTa cross-encoder prints the logit beside the score, as for BERT
/// (the score is the logit's sigmoid).
#[test]
fn the_cli_prints_the_logit_beside_the_score() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let dir = fixture("v3");
    let pairs = [
        ("what is rust", "Rust is a systems programming language."),
        ("what is rust", "Bananas are yellow."),
    ];
    let want = CrossEncoder::builder(&dir)
        .options(options())
        .build()
        .unwrap()
        .predict(&pairs)
        .unwrap();
    let lines: Vec<Value> = pairs
        .iter()
        .map(|(q, d)| serde_json::json!({"query": q, "document": d}))
        .collect();
    let got = crate::common::cli_score(&bin, &dir, &lines, &[]);
    assert_eq!(got.len(), want.len());
    for (&(score, logit), w) in got.iter().zip(&want) {
        assert!(
            (logit - w.logit as f64).abs() < 1e-6,
            "{logit} vs {}",
            w.logit
        );
        assert!(
            (score - w.score as f64).abs() < 1e-6,
            "{score} vs {}",
            w.score
        );
        assert!(
            (score - logit).abs() > 1e-3,
            "the score is the logit's sigmoid"
        );
    }
}
