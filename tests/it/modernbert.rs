//! ModernBERT against transformers 5.24 / sentence-transformers 6.2 on tiny random checkpoints
//! (4 layers, global and sliding-window ones, a local window of 16 tokens, two RoPE thetas):
//! the embedders of tests/fixtures/st_modernbert_tiny (gte-modernbert's cls pooling with the
//! transformers 4.x config spelling, modernbert-embed's mean pooling and search_query /
//! search_document prompts with transformers 5's) through `load_embedder`, and the
//! cross-encoders of tests/fixtures/modernbert_ce_tiny (cls and mean pooling heads, the last
//! layer a sliding one) through `CrossEncoder` and `load_reranker`, one pair at a time and in
//! batches; texts longer than the window; int8; configs the crate cannot honour, refused
//! naming config.json and the key. Each fixture is made by the make.py beside it.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::models::registry::{self, Support};
use rerank::models::{Architecture, ModelOptions, Precision};
use rerank::rerankers::{load_reranker, CrossEncoder, RerankQuery};
use rerank::{load_embedder, Embedder, Error, ModernBertEmbedder, Role};
use serde_json::Value;

use crate::model_fixtures::{check_cross_encoder, Broken};
use crate::st_embed_parity::{assert_matches_sentence_transformers, expected_in};

/// A sliding layer's token sees `local_attention / 2 = 8` tokens on either side.
const WINDOW: usize = 8;
/// Logits agree with transformers' to this.
const TOL: f32 = 1e-5;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

#[test]
fn modernbert_embedders_match_sentence_transformers() {
    let root = fixture("st_modernbert_tiny");
    let expected = expected_in(&root);
    assert_eq!(expected.keys().collect::<Vec<_>>(), ["cls", "mean_prompts"]);
    for (case, want) in &expected {
        let dir = root.join(case);
        let e = load_embedder(&dir, &options()).unwrap();
        assert!(e.id().unwrap().starts_with("modernbert-"), "{case}");
        let bare = ModernBertEmbedder::builder(&dir)
            .prompt(Role::Query, "")
            .prompt(Role::Document, "")
            .build()
            .unwrap();
        assert_eq!(bare.max_length(), want.max_seq_length, "{case}");
        let ids = |text: &str| bare.token_ids(text).unwrap();
        let worst = assert_matches_sentence_transformers(case, want, &*e, &bare, &ids);
        assert!(worst >= 0.99999, "{case}: {worst}");
        // Texts longer than a sliding layer's window (and than max_seq_length) are among them.
        let long = want
            .cases()
            .iter()
            .filter(|(text, _)| ids(text).len() > 2 * WINDOW + 1)
            .count();
        assert!(long >= 3, "{case}: {long} texts longer than the window");
    }
    let mean = ModernBertEmbedder::from_dir(root.join("mean_prompts")).unwrap();
    assert_eq!(mean.prompt(Role::Query), Some("search_query: "));
    assert_eq!(mean.prompt(Role::Document), Some("search_document: "));
    assert_eq!(mean.pooling(), [rerank::embed::PoolingMode::Mean]);
    let cls = ModernBertEmbedder::from_dir(root.join("cls")).unwrap();
    assert_eq!(cls.prompt(Role::Query), None);
    assert_eq!(cls.pooling(), [rerank::embed::PoolingMode::Cls]);
    assert_ne!(cls.id(), mean.id());
}

/// A text far longer than the window, alone and packed between short ones under any budget,
/// and up to the model's 512 positions: the same vector, a different one per length.
#[test]
fn long_texts_embed_the_same_alone_and_packed() {
    let dir = fixture("st_modernbert_tiny").join("mean_prompts");
    let long: String = (0..300).map(|i| format!("word{} ", i % 23)).collect();
    let texts = ["x", long.as_str(), "what is rust", ""];
    let full = ModernBertEmbedder::builder(&dir)
        .options(options().max_length(512))
        .build()
        .unwrap();
    assert!(full.token_ids(&long).unwrap().len() > 300);
    let alone: Vec<Vec<f32>> = texts.iter().map(|t| full.embed_one(t).unwrap()).collect();
    for (tokens, size) in [(usize::MAX, 64), (600, 2), (40, 3)] {
        let e = ModernBertEmbedder::builder(&dir)
            .options(
                options()
                    .max_length(512)
                    .token_budget(tokens)
                    .max_batch_size(size),
            )
            .build()
            .unwrap();
        let got = e.embed(&texts).unwrap();
        for (row, want) in got.rows().into_iter().zip(&alone) {
            let c = rerank::embed::cosine(row.as_slice().unwrap(), want);
            assert!(c > 0.99999, "budget {tokens}: cosine {c}");
        }
    }
    let short = ModernBertEmbedder::from_dir(&dir).unwrap();
    let cut = short.embed_one(&long).unwrap();
    assert!(rerank::embed::cosine(&cut, &alone[1]) < 0.99999);
}

#[test]
fn int8_stays_close_to_f32_and_bf16_is_refused() {
    let dir = fixture("st_modernbert_tiny").join("cls");
    let texts = [
        "what is rust",
        "Rust is a systems programming language focused on safety, speed and concurrency.",
    ];
    let f32 = ModernBertEmbedder::from_dir(&dir)
        .unwrap()
        .embed(&texts)
        .unwrap();
    let int8 = ModernBertEmbedder::builder(&dir)
        .options(ModelOptions::default().precision(Precision::Int8))
        .build()
        .unwrap();
    assert_eq!(int8.precision(), Precision::Int8);
    let f32_id = ModernBertEmbedder::from_dir(&dir).unwrap().id();
    assert_ne!(int8.id(), f32_id);
    for (a, b) in int8
        .embed(&texts)
        .unwrap()
        .rows()
        .into_iter()
        .zip(f32.rows())
    {
        let c = rerank::embed::cosine(a.as_slice().unwrap(), b.as_slice().unwrap());
        assert!(c > 0.99, "int8 cosine {c}");
    }
    let e = ModernBertEmbedder::builder(&dir)
        .options(ModelOptions::default().precision(Precision::Bf16))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(e.to_string().contains("bf16"), "{e}");
    let ce = fixture("modernbert_ce_tiny").join("cls");
    let e = CrossEncoder::builder(&ce)
        .options(ModelOptions::default().precision(Precision::Bf16))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("bf16"), "{e}");
}

#[test]
fn modernbert_cross_encoders_match_transformers_single_and_batched() {
    for case in ["cls", "mean"] {
        let dir = fixture("modernbert_ce_tiny").join(case);
        // One batch of all (the reference's padded batch), then budgets that mix them.
        let budgets = [(usize::MAX, 64), (100, 2), (40, 3)];
        let checked = check_cross_encoder(&dir, case, options(), &budgets, TOL);
        let (ce, cases, single) = (&checked.ce, &checked.cases, &checked.single);
        let pairs = checked.pairs();
        assert_eq!(cases.len(), 6);
        // A pair longer than the window, an empty document, non-ASCII text.
        assert!(cases.iter().any(|c| c.input_ids.len() > 4 * WINDOW));
        assert!(cases.iter().any(|c| c.document.is_empty()));
        assert!(cases.iter().any(|c| !c.query.is_ascii()));
        assert_eq!(
            ce.architecture(),
            &Architecture::ModernBertForSequenceClassification
        );
        assert_eq!(ce.max_length(), 512);
        // load_reranker picks the cross-encoder; its scores are the logits' sigmoid.
        let reranker = load_reranker(&dir, &options()).unwrap();
        assert_eq!(reranker.name(), "cross-encoder");
        let docs: Vec<&str> = cases[..2].iter().map(|c| c.document.as_str()).collect();
        let got = reranker
            .score(&RerankQuery::new(cases[0].query.clone()), &docs)
            .unwrap();
        let want = ce
            .logits(&[(pairs[0].0, docs[0]), (pairs[0].0, docs[1])])
            .unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!((g - 1.0 / (1.0 + (-w).exp())).abs() < 1e-6, "{g} {w}");
        }
        // int8 stays close. On this tiny random model (a few dozen inputs per product, so
        // little averaging of rounding errors; logits up to 1.3 (cls) and 2.2 (mean)) the
        // largest difference was 0.046 and 0.028 with 8-bit activations, 0.063 and 0.026 with
        // the 7 bits the encoders keep on AVX2 (`models::layers::quant`).
        let int8 = CrossEncoder::builder(&dir)
            .options(ModelOptions::default().precision(Precision::Int8))
            .build()
            .unwrap();
        let logits = int8.logits(&pairs).unwrap();
        crate::int8::agreement(&format!("{case} int8"), &logits, single);
        for (g, w) in logits.iter().zip(single) {
            assert!((g - w).abs() < 0.08, "{case} int8: {g} vs {w}");
        }
    }
}

#[test]
fn configs_that_cannot_be_honoured_are_refused_naming_config_json_and_the_key() {
    let ce_dir = fixture("modernbert_ce_tiny").join("cls");
    let st_dir = fixture("st_modernbert_tiny").join("mean_prompts");
    let (ce, st) = (ce_dir.as_path(), st_dir.as_path());
    type Edit = fn(&mut Value);
    let cases: [(&Path, &str, &str, Edit); 9] = [
        (ce, "cross-encoder", "hidden_activation", |c| {
            c["hidden_activation"] = "swiglu".into()
        }),
        (st, "embedder", "hidden_activation", |c| {
            c["hidden_activation"] = "quick_gelu".into()
        }),
        (ce, "cross-encoder", "classifier_activation", |c| {
            c["classifier_activation"] = "tanh".into()
        }),
        (ce, "cross-encoder", "classifier_pooling", |c| {
            c["classifier_pooling"] = "max".into()
        }),
        // Tensor shapes that do not match the config.
        (ce, "cross-encoder", "intermediate_size", |c| {
            c["intermediate_size"] = 64.into()
        }),
        (st, "embedder", "hidden_size", |c| {
            c["hidden_size"] = 64.into()
        }),
        (st, "embedder", "num_hidden_layers", |c| {
            c["num_hidden_layers"] = 5.into();
            c["layer_types"]
                .as_array_mut()
                .unwrap()
                .push("sliding_attention".into());
        }),
        (st, "embedder", "layer_types", |c| {
            c["layer_types"].as_array_mut().unwrap().pop();
        }),
        (
            st,
            "embedder",
            "rope_parameters.full_attention.rope_type",
            |c| c["rope_parameters"]["full_attention"]["rope_type"] = "dynamic".into(),
        ),
    ];
    for (i, (from, what, key, edit)) in cases.into_iter().enumerate() {
        let b = Broken::of(from, &format!("{i}"));
        b.edit_config(edit);
        b.refused(what, key);
    }
    // Two labels where the classifier has one row.
    let b = Broken::of(ce, "labels");
    b.edit_config(|c| c["id2label"] = serde_json::json!({"0": "a", "1": "b"}));
    let e = CrossEncoder::from_dir(&b.0).unwrap_err().to_string();
    assert!(
        e.contains("classifier.weight") && e.contains("num_labels"),
        "{e}"
    );
}

#[test]
fn the_registry_knows_the_modernbert_models() {
    for id in [
        "Alibaba-NLP/gte-modernbert-base",
        "nomic-ai/modernbert-embed-base",
        "Alibaba-NLP/gte-reranker-modernbert-base",
    ] {
        let m = registry::find(id).unwrap();
        assert_eq!(m.support, Support::Supported, "{id}");
        assert_eq!((m.model_type, m.max_length), ("modernbert", 8192), "{id}");
    }
    let nomic = registry::find("nomic-ai/modernbert-embed-base").unwrap();
    assert_eq!(nomic.query_prompt, Some("search_query: "));
    assert_eq!(nomic.document_prompt, Some("search_document: "));
    assert_eq!(nomic.matryoshka, [768, 512, 256, 128, 64]);
    assert_eq!(nomic.dim, Some(768));
    // The cls fixture declares no prompts; in a folder named after modernbert-embed-base it
    // gets the model card's.
    let tmp = std::env::temp_dir().join(format!("rerank-modernbert-{}-reg", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let dir = tmp.join("modernbert-embed-base");
    crate::common::copy_dir(&fixture("st_modernbert_tiny").join("cls"), &dir);
    let e = load_embedder(&dir, &options()).unwrap();
    let by_hand = ModernBertEmbedder::builder(&dir)
        .prompt(Role::Query, "search_query: ")
        .prompt(Role::Document, "search_document: ")
        .build()
        .unwrap();
    let text = "what is rust";
    assert_eq!(
        e.embed_query(text).unwrap(),
        by_hand.embed_query(text).unwrap()
    );
    assert_eq!(e.embed_one(text).unwrap(), by_hand.embed_one(text).unwrap());
    std::fs::remove_dir_all(&tmp).unwrap();
}
