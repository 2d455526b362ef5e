//! DistilBERT embedders against sentence-transformers 6.2 on transformers 5.24, on the tiny
//! random models of tests/fixtures/st_distilbert_tiny (made by the make.py beside them, which
//! also checks them against a float64 NumPy DistilBERT):
//! - every case folder (msmarco-distilbert-base-tas-b's CLS pooling without Normalize up to 512
//!   tokens, multi-qa-distilbert-cos-v1's mean + Normalize, distiluse's mean + a tanh Dense,
//!   ReLU with 4 heads, a plain transformers folder, a `DistilBertForMaskedLM` checkpoint)
//!   through `DistilBertEmbedder` and `load_embedder`, batched and one text at a time, within
//!   the BERT embedders' bound (cosine >= 0.99999); texts longer than max_seq_length, the
//!   empty text, a literal `[PAD]` and `[SEP]` inside a text, upper case, an unknown sign;
//! - int8, and what is refused: bf16, the candle engine, configs the crate cannot honour
//!   (naming config.json and the key); the registry's DistilBERT models.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::embed::PoolingMode;
use rerank::models::registry::{self, Support};
use rerank::models::ModelOptions;
use rerank::{load_embedder, DistilBertEmbedder, Embedder, Role};

use crate::model_fixtures::{
    each_edit_is_refused, int8_close_and_bf16_and_candle_refused, ConfigEdit,
};
use crate::st_embed_parity::{assert_matches_sentence_transformers, expected_in};

const CASES: [&str; 6] = [
    "dense_tanh",
    "masked_lm",
    "mean_norm",
    "plain",
    "relu_heads4",
    "tas_b_cls",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_distilbert_tiny")
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

/// The case's embedder with its prompts turned off (sentence-transformers' `encode()` without
/// a prompt).
fn bare(dir: &Path, options: ModelOptions) -> DistilBertEmbedder {
    DistilBertEmbedder::builder(dir)
        .options(options)
        .prompt(Role::Query, "")
        .prompt(Role::Document, "")
        .build()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

#[test]
fn every_distilbert_case_matches_sentence_transformers_single_and_batched() {
    let expected = expected_in(&root());
    assert_eq!(
        expected.keys().map(String::as_str).collect::<Vec<_>>(),
        CASES
    );
    for (case, want) in &expected {
        let dir = root().join(case);
        let e = load_embedder(&dir, &options()).unwrap();
        assert!(e.id().unwrap().starts_with("distilbert-"), "{case}");
        let direct = bare(&dir, options());
        assert_eq!(direct.max_length(), want.max_seq_length, "{case}");
        assert_eq!(
            direct.is_sentence_transformers(),
            *case != "plain",
            "{case}"
        );
        let ids = |text: &str| direct.token_ids(text).unwrap();
        let worst = assert_matches_sentence_transformers(case, want, &*e, &direct, &ids);
        assert!(worst >= 0.99999, "{case}: {worst}");
        // The same, in batches of a few texts (the longest runs alone), through the type.
        let small = bare(&dir, options().token_budget(600).max_batch_size(3));
        let worst = assert_matches_sentence_transformers(case, want, &small, &small, &ids);
        assert!(worst >= 0.99999, "{case} in small batches: {worst}");
    }
}

#[test]
fn the_cases_are_read_as_declared() {
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let tas_b = bare(&root().join("tas_b_cls"), options());
    assert_eq!(tas_b.pooling(), [PoolingMode::Cls]);
    assert_eq!((tas_b.dim(), tas_b.max_length()), (32, 512));
    // No Normalize: TAS-B's vectors keep their norm (it ranks by dot product).
    let v = tas_b.embed_one("what is rust").unwrap();
    assert!((norm(&v) - 1.0).abs() > 0.01);
    let mean = bare(&root().join("mean_norm"), options());
    assert_eq!(mean.pooling(), [PoolingMode::Mean]);
    let v = mean.embed_one("what is rust").unwrap();
    assert!((norm(&v) - 1.0).abs() < 1e-5);
    // distiluse's Dense: 32 -> 16, tanh.
    let dense = bare(&root().join("dense_tanh"), options());
    assert_eq!(dense.dim(), 16);
    let v = dense.embed_one("what is rust").unwrap();
    assert!(v.iter().all(|x| x.abs() < 1.0), "{v:?}");
    // The MLM checkpoint's encoder is the bare model's (the same weights, under distilbert.).
    let mlm = bare(&root().join("masked_lm"), options());
    let texts = ["what is rust", "WHAT IS THE FASTEST WAY TO LEARN RUST", ""];
    assert_eq!(mlm.embed(&texts).unwrap(), mean.embed(&texts).unwrap());
    // The literal [PAD] inside a text is its id, attended to as any token.
    let ids = mean.token_ids("padding [PAD] inside the text").unwrap();
    assert!(ids[1..ids.len() - 1].contains(&0), "{ids:?}");
    // Every case has its own id (the model's files and layout are hashed).
    let ids: std::collections::BTreeSet<String> = CASES
        .iter()
        .map(|c| bare(&root().join(c), options()).id().unwrap())
        .collect();
    assert_eq!(ids.len(), CASES.len());
}

#[test]
fn int8_stays_close_and_bf16_and_candle_are_refused() {
    int8_close_and_bf16_and_candle_refused(&root().join("relu_heads4"), "DistilBERT");
}

#[test]
fn distilbert_configs_that_cannot_be_honoured_are_refused_naming_config_json_and_the_key() {
    let cases: [(&str, ConfigEdit); 7] = [
        ("sinusoidal_pos_embds", |c| {
            c["sinusoidal_pos_embds"] = true.into()
        }),
        ("n_heads", |c| c["n_heads"] = 3.into()),
        ("activation", |c| c["activation"] = "quick_gelu".into()),
        // Sizes that do not match the tensors.
        ("dim", |c| c["dim"] = 64.into()),
        ("n_layers", |c| c["n_layers"] = 3.into()),
        ("hidden_dim", |c| c["hidden_dim"] = 64.into()),
        ("max_position_embeddings", |c| {
            c["max_position_embeddings"] = 512.into()
        }),
    ];
    // The plain folder: no pooling module to notice a width first.
    each_edit_is_refused(&root().join("plain"), "embedder", &cases);
}

#[test]
fn the_registry_knows_the_distilbert_models() {
    for (id, pooling, dim, length) in [
        (
            "sentence-transformers/msmarco-distilbert-base-tas-b",
            PoolingMode::Cls,
            768,
            512,
        ),
        (
            "sentence-transformers/multi-qa-distilbert-cos-v1",
            PoolingMode::Mean,
            768,
            512,
        ),
        (
            "sentence-transformers/distiluse-base-multilingual-cased-v2",
            PoolingMode::Mean,
            512,
            128,
        ),
    ] {
        let m = registry::find(id).unwrap();
        assert_eq!(m.support, Support::Supported, "{id}");
        assert_eq!(
            (m.model_type, m.pooling, m.dim, m.max_length),
            ("distilbert", Some(pooling), Some(dim), length),
            "{id}"
        );
    }
    let electra = registry::find("cross-encoder/ms-marco-electra-base").unwrap();
    assert_eq!(
        (electra.model_type, electra.support),
        ("electra", Support::Supported)
    );
}
