//! MPNet against sentence-transformers 6.2 on transformers 5.24, on the tiny random models of
//! tests/fixtures/st_mpnet_tiny (made by the make.py beside them; reference.py there is the
//! forward pass spelled out in float64):
//! - every case folder (all-mpnet-base-v2's published layout with mean pooling + Normalize,
//!   multi-qa-mpnet-base-dot-v1's CLS pooling without Normalize up to 512 tokens, 4 heads, two
//!   layer_norm_eps on the same weights, ReLU, a 64-row relative bias table of which 32 rows
//!   are read) through `MpnetEmbedder` and `load_embedder`, batched and one text at a time,
//!   within the BERT embedders' bound (cosine >= 0.99999, norms within 1e-4); texts longer than
//!   max_seq_length, the empty text, a literal `</s>` and `<pad>` (id 1: position 1) inside a
//!   text;
//! - the same weights under `mpnet.` (`MPNetForMaskedLM`'s checkpoint layout), int8, and what
//!   is refused: bf16, the candle engine, configs the crate cannot honour (naming config.json
//!   and the key).
#![cfg(feature = "models")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rerank::models::registry::{self, Support};
use rerank::models::ModelOptions;
use rerank::{load_embedder, Embedder, MpnetEmbedder, Role};

use crate::model_fixtures::{
    each_edit_is_refused, int8_close_and_bf16_and_candle_refused, Broken, ConfigEdit,
};
use crate::st_embed_parity::{assert_matches_sentence_transformers, expected_in};

const CASES: [&str; 7] = [
    "buckets64",
    "cls_dot",
    "eps12",
    "eps5",
    "heads4",
    "mean",
    "relu",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_mpnet_tiny")
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

/// The case's embedder with its prompts turned off (sentence-transformers' `encode()` without
/// a prompt).
fn bare(dir: &Path, options: ModelOptions) -> MpnetEmbedder {
    MpnetEmbedder::builder(dir)
        .options(options)
        .prompt(Role::Query, "")
        .prompt(Role::Document, "")
        .build()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

/// The largest absolute difference between the rows of `got` and `want`.
fn largest_difference(got: &ndarray::Array2<f32>, want: &[(&str, &[f32])]) -> f32 {
    let mut largest = 0f32;
    for (row, (_, want)) in got.rows().into_iter().zip(want) {
        for (a, b) in row.iter().zip(*want) {
            largest = largest.max((a - b).abs());
        }
    }
    largest
}

#[test]
fn every_mpnet_case_matches_sentence_transformers_single_and_batched() {
    let expected = expected_in(&root());
    assert_eq!(
        expected.keys().map(String::as_str).collect::<Vec<_>>(),
        CASES
    );
    for (case, want) in &expected {
        let dir = root().join(case);
        let e = load_embedder(&dir, &options()).unwrap();
        assert!(e.id().unwrap().starts_with("mpnet-"), "{case}");
        let direct = bare(&dir, options());
        assert_eq!(direct.max_length(), want.max_seq_length, "{case}");
        assert!(direct.is_sentence_transformers(), "{case}");
        let ids = |text: &str| direct.token_ids(text).unwrap();
        let worst = assert_matches_sentence_transformers(case, want, &*e, &direct, &ids);
        assert!(worst >= 0.99999, "{case}: {worst}");
        // The same, in batches of a few texts (the longest runs alone), through the type.
        let small = bare(&dir, options().token_budget(600).max_batch_size(3));
        let texts: Vec<&str> = want.cases().iter().map(|(t, _)| *t).collect();
        let worst = assert_matches_sentence_transformers(case, want, &small, &small, &ids);
        assert!(worst >= 0.99999, "{case} in small batches: {worst}");
        // No case has prompts: the query vectors are sentence-transformers' encode().
        let got = direct.embed_queries(&texts).unwrap();
        println!(
            "{case}: largest |rerank - sentence-transformers| {:.1e}",
            largest_difference(&got, &want.cases())
        );
    }
}

#[test]
fn the_cases_are_read_as_declared() {
    let mean = bare(&root().join("mean"), options());
    assert_eq!(mean.pooling(), [rerank::embed::PoolingMode::Mean]);
    assert_eq!((mean.dim(), mean.max_length()), (32, 64));
    // Normalize: unit vectors.
    let v = mean.embed_one("what is rust").unwrap();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    let dot = bare(&root().join("cls_dot"), options());
    assert_eq!(dot.pooling(), [rerank::embed::PoolingMode::Cls]);
    assert_eq!(dot.max_length(), 512);
    // No Normalize: the dot-product model's vectors keep their norm.
    let v = dot.embed_one("what is rust").unwrap();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 0.01, "{norm}");
    // The literal <pad> and </s> inside a text are their special ids.
    let ids = mean
        .token_ids("padding <pad> inside the text moves the positions")
        .unwrap();
    assert_eq!((ids[0], ids[ids.len() - 1]), (0, 2));
    assert!(ids[1..ids.len() - 1].contains(&1), "{ids:?}");
    assert_eq!(mean.token_ids("").unwrap(), [0, 2]);
    // The id follows the model and its settings.
    let ids: std::collections::BTreeSet<String> = CASES
        .iter()
        .map(|c| bare(&root().join(c), options()).id().unwrap())
        .collect();
    assert_eq!(ids.len(), CASES.len());
}

/// A copy of the `mean` case with every tensor under `mpnet.`, as an `MPNetForMaskedLM`
/// checkpoint holds its encoder.
fn under_mpnet_prefix() -> Broken {
    let b = Broken::of(&root().join("mean"), "mpnet-prefix");
    let path = b.0.join("model.safetensors");
    let device = candle_core::Device::Cpu;
    let tensors = candle_core::safetensors::load(&path, &device).unwrap();
    assert!(tensors.contains_key("embeddings.position_ids"));
    assert!(tensors.contains_key("pooler.dense.weight"));
    let renamed: HashMap<String, candle_core::Tensor> = tensors
        .into_iter()
        .map(|(name, t)| (format!("mpnet.{name}"), t))
        .collect();
    candle_core::safetensors::save(&renamed, &path).unwrap();
    b
}

#[test]
fn the_encoder_is_read_under_the_mpnet_prefix_too() {
    let texts = [
        "what is rust",
        "padding <pad> inside the text moves the positions",
        "",
    ];
    let plain = load_embedder(root().join("mean"), &options()).unwrap();
    let b = under_mpnet_prefix();
    let prefixed = load_embedder(&b.0, &options()).unwrap();
    let (x, y) = (
        plain.embed(&texts).unwrap(),
        prefixed.embed(&texts).unwrap(),
    );
    assert_eq!(x, y);
}

#[test]
fn int8_stays_close_and_bf16_and_candle_are_refused() {
    int8_close_and_bf16_and_candle_refused(&root().join("heads4"), "MPNet");
}

#[test]
fn mpnet_configs_that_cannot_be_honoured_are_refused_naming_config_json_and_the_key() {
    let cases: [(&str, ConfigEdit); 10] = [
        // transformers reads 32 buckets whatever the config says: a smaller table fails there.
        ("relative_attention_num_buckets", |c| {
            c["relative_attention_num_buckets"] = 16.into()
        }),
        ("num_attention_heads", |c| {
            c["num_attention_heads"] = 3.into()
        }),
        ("max_position_embeddings", |c| {
            c["max_position_embeddings"] = 2.into()
        }),
        ("layer_norm_eps", |c| c["layer_norm_eps"] = "small".into()),
        ("hidden_act", |c| c["hidden_act"] = "quick_gelu".into()),
        // Sizes that do not match the tensors.
        ("relative_attention_num_buckets", |c| {
            c["relative_attention_num_buckets"] = 64.into()
        }),
        ("num_attention_heads", |c| {
            c["num_attention_heads"] = 4.into()
        }),
        ("num_hidden_layers", |c| c["num_hidden_layers"] = 3.into()),
        ("intermediate_size", |c| c["intermediate_size"] = 48.into()),
        ("max_position_embeddings", |c| {
            c["max_position_embeddings"] = 512.into()
        }),
    ];
    each_edit_is_refused(&root().join("mean"), "embedder", &cases);
}

#[test]
fn the_registry_knows_the_mpnet_models() {
    for (id, pooling, length) in [
        (
            "sentence-transformers/all-mpnet-base-v2",
            rerank::embed::PoolingMode::Mean,
            384,
        ),
        (
            "sentence-transformers/multi-qa-mpnet-base-dot-v1",
            rerank::embed::PoolingMode::Cls,
            512,
        ),
    ] {
        let m = registry::find(id).unwrap();
        assert_eq!(m.support, Support::Supported, "{id}");
        assert_eq!(
            (m.model_type, m.pooling, m.dim, m.max_length),
            ("mpnet", Some(pooling), Some(768), length),
            "{id}"
        );
    }
}
