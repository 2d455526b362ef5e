//! Parity over the decoders' configuration space: the tiny random Qwen3, Qwen2, Llama and
//! Mistral embedders of tests/fixtures/sweep_decoders (made by the make.py there, one folder per config
//! variant: grouped-query ratios, head sizes wider and narrower than the hidden size, tied and
//! untied embeddings, the `model.` prefix, norm epsilons, RoPE thetas and scalings, attention
//! biases (Llama's on q/k/v/o), sliding windows (Qwen2's chosen layers, Mistral's every
//! layer), `LlamaModel` / `MistralModel` as e5-mistral publishes it), each through `load_embedder` against sentence-transformers, in one
//! call and one text at a time. Every variant is checked, and every one that differs or is
//! refused is named, before the test fails. The sliding-window variants (`sliding*`) have
//! texts longer than their windows, so a layer that attends past its window fails them.
#![cfg(feature = "models")]

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use rerank::models::ModelOptions;
use rerank::{load_embedder, Qwen3Embedder, Role};

use crate::model_fixtures::sweep_variants;
use crate::st_embed_parity::{assert_matches_sentence_transformers, expected_in};

#[test]
fn every_decoder_variant_matches_sentence_transformers() {
    let variants = sweep_variants("sweep_decoders");
    assert!(variants.len() >= 20, "{} variants", variants.len());
    let mut worst: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    let mut failed = Vec::new();
    for (arch, dir) in &variants {
        let name = format!("{arch}/{}", dir.file_name().unwrap().to_string_lossy());
        let run = catch_unwind(AssertUnwindSafe(|| {
            let expected = expected_in(dir);
            let want = &expected["case"];
            let options = ModelOptions::default().threads(2);
            let e = load_embedder(dir, &options).unwrap();
            let bare = Qwen3Embedder::builder(dir)
                .options(options)
                .prompt(Role::Query, "")
                .prompt(Role::Document, "")
                .build()
                .unwrap();
            let ids = |text: &str| bare.token_ids_as(text, Role::Document).unwrap();
            assert_matches_sentence_transformers(&name, want, &*e, &bare, &ids)
        }));
        match run {
            Ok(cos) => {
                let entry = worst.entry(arch.clone()).or_insert((0, 1.0));
                entry.0 += 1;
                entry.1 = entry.1.min(cos);
            }
            Err(_) => failed.push(name),
        }
    }
    for (arch, (n, cos)) in &worst {
        println!(
            "{arch}: {n} variants pass, smallest cosine {cos:.9} (1 - cos = {:.1e})",
            1.0 - cos
        );
    }
    assert!(
        failed.is_empty(),
        "variants that differ or are refused: {failed:?}"
    );
}

#[test]
fn every_architecture_of_the_sweep_is_there_and_the_registry_knows_e5_mistral() {
    let variants = sweep_variants("sweep_decoders");
    for arch in ["llama", "mistral", "qwen2", "qwen3"] {
        assert!(variants.iter().any(|(a, _)| a == arch), "no {arch} variant");
    }
    let m = rerank::models::registry::find("intfloat/e5-mistral-7b-instruct").unwrap();
    assert_eq!(
        (m.model_type, m.pooling, m.dim, m.max_length),
        (
            "mistral",
            Some(rerank::embed::PoolingMode::LastToken),
            Some(4096),
            32768
        )
    );
}
