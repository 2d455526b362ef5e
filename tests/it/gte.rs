//! GTE ("new") and NomicBERT against transformers 5.24 and sentence-transformers 6.2 on tiny
//! random checkpoints, each made by the make.py beside it:
//! - the cross-encoder of tests/fixtures/gte_ce_tiny (gte-multilingual-reranker-base) in both
//!   of its spellings: the hub's (`NewForSequenceClassification`, NTK-scaled RoPE, tensors under
//!   `new.`) and transformers 5's (`GteForSequenceClassification`, `rope_parameters`, tensors
//!   under `gte.`); one pair at a time and in batches, a pair longer than the tokenizer's 128
//!   tokens, an empty document, non-ASCII text; int8;
//! - the embedders of tests/fixtures/st_gte_tiny (gte-base-en-v1.5's CLS pooling without token
//!   types, nomic-embed-text-v1.5's mean pooling, SwiGLU and search_query / search_document
//!   prompts) through `load_embedder`, in the hub's config spelling and in transformers 5's;
//! - configs the crate cannot honour, refused naming config.json and the key.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::models::registry::{self, Support};
use rerank::models::{Architecture, ModelOptions, Precision};
use rerank::rerankers::{load_reranker, CrossEncoder, RerankQuery};
use rerank::{load_embedder, Embedder, Error, GteEmbedder, Role};
use serde_json::Value;

use crate::model_fixtures::{check_cross_encoder, each_edit_is_refused, Broken, ConfigEdit};
use crate::st_embed_parity::{assert_matches_sentence_transformers, expected_in};

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gte_ce_tiny")
        .join(case)
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

#[test]
fn gte_cross_encoders_match_transformers_single_and_batched() {
    for (case, arch) in [
        ("new", Architecture::NewForSequenceClassification),
        ("gte", Architecture::GteForSequenceClassification),
    ] {
        let dir = fixture(case);
        let budgets = [(usize::MAX, 64), (200, 2), (60, 3)];
        let checked = check_cross_encoder(&dir, case, options(), &budgets, 1e-5);
        let (ce, cases, single) = (&checked.ce, &checked.cases, &checked.single);
        let pairs = checked.pairs();
        assert_eq!(cases.len(), 6);
        // A pair cut at the tokenizer's 128 tokens, an empty document, non-ASCII text.
        assert!(cases.iter().any(|c| c.input_ids.len() == 128));
        assert!(cases.iter().any(|c| c.document.is_empty()));
        assert!(cases.iter().any(|c| !c.query.is_ascii()));
        assert_eq!(ce.architecture(), &arch);
        assert_eq!(ce.max_length(), 128);
        // load_reranker picks the cross-encoder; its scores are sentence-transformers'.
        let reranker = load_reranker(&dir, &options()).unwrap();
        assert_eq!(reranker.name(), "cross-encoder");
        for (i, c) in cases.iter().enumerate() {
            let got = reranker
                .score(&RerankQuery::new(c.query.clone()), &[c.document.as_str()])
                .unwrap();
            let want = c.st_score.unwrap();
            assert!(
                (got[0] - want).abs() < 1e-5,
                "{case} {i}: {} vs {want}",
                got[0]
            );
        }
        // int8 stays close (within 0.1 of logits spread over 3.5: the tiny model's 32-wide
        // rows quantize coarsely) and ranks the pairs alike.
        let int8 = CrossEncoder::builder(&dir)
            .options(ModelOptions::default().precision(Precision::Int8))
            .build()
            .unwrap();
        assert_eq!(int8.precision(), Precision::Int8);
        let quantized = int8.logits(&pairs).unwrap();
        for (g, w) in quantized.iter().zip(single) {
            assert!((g - w).abs() < 0.1, "{case} int8: {g} vs {w}");
        }
        let order = |x: &[f32]| {
            let mut i: Vec<usize> = (0..x.len()).collect();
            i.sort_by(|&a, &b| x[b].total_cmp(&x[a]));
            i
        };
        assert_eq!(order(&quantized), order(single), "{case} int8 ranking");
    }
    let e = CrossEncoder::builder(fixture("new"))
        .options(ModelOptions::default().precision(Precision::Bf16))
        .build()
        .unwrap_err();
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("bf16"),
        "{e}"
    );
}

#[test]
fn gte_configs_that_cannot_be_honoured_are_refused_naming_config_json_and_the_key() {
    type Edit = fn(&mut Value);
    let cases: [(&str, &str, Edit); 6] = [
        ("new", "rope_scaling.mixed_b", |c| {
            c["rope_scaling"]["mixed_b"] = 0.7.into()
        }),
        ("new", "logn_attention_scale", |c| {
            c["logn_attention_scale"] = true.into()
        }),
        ("new", "layer_norm_type", |c| {
            c["layer_norm_type"] = "rms_norm".into()
        }),
        ("gte", "rope_parameters.rope_type", |c| {
            c["rope_parameters"]["rope_type"] = "dynamic".into()
        }),
        // Tensor shapes that do not match the config.
        ("new", "intermediate_size", |c| {
            c["intermediate_size"] = 64.into()
        }),
        ("gte", "num_hidden_layers", |c| {
            c["num_hidden_layers"] = 4.into()
        }),
    ];
    for (i, (case, key, edit)) in cases.into_iter().enumerate() {
        let b = Broken::of(&fixture(case), &format!("gte-{i}"));
        b.edit_config(edit);
        b.refused("cross-encoder", key);
    }
}

fn st_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/st_gte_tiny")
}

#[test]
fn gte_and_nomic_embedders_match_sentence_transformers_in_both_spellings() {
    let root = st_fixture();
    let expected = expected_in(&root);
    assert_eq!(
        expected.keys().collect::<Vec<_>>(),
        ["gte_cls", "nomic_mean"]
    );
    let raw: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("expected.json")).unwrap())
            .unwrap();
    for (case, want) in &expected {
        let dir = root.join(case);
        let e = load_embedder(&dir, &options()).unwrap();
        assert!(e.id().unwrap().starts_with("gte-"), "{case}");
        let bare = GteEmbedder::builder(&dir)
            .prompt(Role::Query, "")
            .prompt(Role::Document, "")
            .build()
            .unwrap();
        assert_eq!(bare.max_length(), want.max_seq_length, "{case}");
        let ids = |text: &str| bare.token_ids(text).unwrap();
        let worst = assert_matches_sentence_transformers(case, want, &*e, &bare, &ids);
        assert!(worst >= 0.99999, "{case}: {worst}");
        // The same folder with config.json in transformers 5's spelling: the same vectors.
        let b = Broken::of(&dir, &format!("gte-st-{case}"));
        let native = serde_json::to_string_pretty(&raw[case]["transformers_config"]).unwrap();
        std::fs::write(b.0.join("config.json"), native).unwrap();
        let texts = [
            "what is rust",
            "Berlin had a population of 3,520,031 in 2019.",
            "",
        ];
        let again = load_embedder(&b.0, &options()).unwrap();
        for role in [Role::Query, Role::Document] {
            let (x, y) = (
                e.embed_as(&texts, role).unwrap(),
                again.embed_as(&texts, role).unwrap(),
            );
            for (a, b) in x.iter().zip(y.iter()) {
                assert!((a - b).abs() < 1e-6, "{case} {role:?}: {a} vs {b}");
            }
        }
    }
    let nomic = GteEmbedder::from_dir(root.join("nomic_mean")).unwrap();
    assert_eq!(nomic.prompt(Role::Query), Some("search_query: "));
    // Documents and queries get their own prompt's tokens.
    let document = nomic.token_ids("what is rust").unwrap();
    let query = nomic.token_ids_as("what is rust", Role::Query).unwrap();
    assert_ne!(query, document);
    assert_eq!(
        document,
        nomic.token_ids_as("what is rust", Role::Document).unwrap()
    );
    assert_eq!(nomic.prompt(Role::Document), Some("search_document: "));
    assert_eq!(nomic.pooling(), [rerank::embed::PoolingMode::Mean]);
    let gte = GteEmbedder::from_dir(root.join("gte_cls")).unwrap();
    assert_eq!(gte.prompt(Role::Query), None);
    assert_eq!(gte.pooling(), [rerank::embed::PoolingMode::Cls]);
    // int8 stays close; bf16 is refused.
    let int8 = GteEmbedder::builder(root.join("nomic_mean"))
        .options(ModelOptions::default().precision(Precision::Int8))
        .build()
        .unwrap();
    let texts = ["what is rust", "Rust is a systems programming language."];
    let (q, f) = (int8.embed(&texts).unwrap(), nomic.embed(&texts).unwrap());
    for (a, b) in q.rows().into_iter().zip(f.rows()) {
        let c = rerank::embed::cosine(a.as_slice().unwrap(), b.as_slice().unwrap());
        assert!(c > 0.99, "int8 cosine {c}");
    }
}

#[test]
fn nomic_configs_that_cannot_be_honoured_are_refused_naming_config_json_and_the_key() {
    let cases: [(&str, ConfigEdit); 5] = [
        ("qkv_proj_bias", |c| c["qkv_proj_bias"] = true.into()),
        ("rotary_emb_fraction", |c| {
            c["rotary_emb_fraction"] = 0.5.into()
        }),
        ("rotary_scaling_factor", |c| {
            c["rotary_scaling_factor"] = 2.0.into()
        }),
        ("activation_function", |c| {
            c["activation_function"] = "gelu".into()
        }),
        // A size that does not match the tensors.
        ("n_inner", |c| c["n_inner"] = 64.into()),
    ];
    each_edit_is_refused(&st_fixture().join("nomic_mean"), "embedder", &cases);
}

#[test]
fn the_registry_knows_the_gte_and_nomic_models() {
    let m = registry::find("Alibaba-NLP/gte-multilingual-reranker-base").unwrap();
    assert_eq!(m.support, Support::Supported);
    assert_eq!((m.model_type, m.max_length), ("new", 8192));
    for id in [
        "Alibaba-NLP/gte-multilingual-base",
        "Alibaba-NLP/gte-base-en-v1.5",
        "nomic-ai/nomic-embed-text-v1.5",
    ] {
        assert_eq!(
            registry::find(id).unwrap().support,
            Support::Supported,
            "{id}"
        );
    }
    let nomic = registry::find("nomic-ai/nomic-embed-text-v1.5").unwrap();
    assert_eq!(nomic.query_prompt, Some("search_query: "));
    assert_eq!(nomic.matryoshka, [768, 512, 256, 128, 64]);
}

/// The candle engine has no GTE: refused by name, not a missing tensor.
#[cfg(feature = "candle")]
#[test]
fn candle_refuses_gte_by_name() {
    let e = CrossEncoder::builder(fixture("new"))
        .options(options().device(rerank::models::Device::CandleCpu))
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("NewForSequenceClassification"), "{e}");
}
