//! Parity over each architecture's configuration space: the tiny random cross-encoders of
//! tests/fixtures/sweep (made by the make.py there, one folder per config variant that
//! published checkpoints use: heads and head sizes, position buckets and relative distances,
//! WordPiece / Unigram / BPE vocabularies, activations, norms and their epsilons, pooler
//! activations, token types, local attention windows, biases), each against transformers'
//! logits one pair at a time and batched. Every variant is checked, and every one that differs
//! is named, before the test fails.
#![cfg(feature = "models")]

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use rerank::models::ModelOptions;
use rerank::rerankers::{load_reranker, RerankQuery};

use crate::model_fixtures::{assert_close, check_cross_encoder, sweep_variants, Checked};

/// Logits agree with transformers' to this.
const TOL: f32 = 1e-5;

#[test]
fn every_config_variant_matches_transformers() {
    let variants = sweep_variants("sweep");
    assert!(variants.len() >= 20, "{} variants", variants.len());
    // (tokens, batch size): everything in one batch, then budgets that split it.
    let budgets = [(usize::MAX, 64), (300, 2)];
    let mut worst: BTreeMap<String, (usize, f32)> = BTreeMap::new();
    let mut failed = Vec::new();
    for (arch, dir) in &variants {
        let name = format!("{arch}/{}", dir.file_name().unwrap().to_string_lossy());
        let options = ModelOptions::default().threads(2);
        let run = catch_unwind(AssertUnwindSafe(|| {
            let checked = check_cross_encoder(dir, &name, options.clone(), &budgets, TOL);
            scores_as_sentence_transformers(dir, &checked, &options, &name);
            checked
                .single
                .iter()
                .zip(&checked.cases)
                .map(|(got, c)| (got - c.logit).abs())
                .fold(0f32, f32::max)
        }));
        match run {
            Ok(err) => {
                let entry = worst.entry(arch.clone()).or_insert((0, 0.0));
                entry.0 += 1;
                entry.1 = entry.1.max(err);
            }
            Err(_) => failed.push(name),
        }
    }
    for (arch, (n, err)) in &worst {
        println!("{arch}: {n} variants pass, largest logit difference {err:.1e}");
    }
    assert!(
        failed.is_empty(),
        "variants that differ from transformers: {failed:?}"
    );
}

/// jina-reranker-v2's layout (tests/fixtures/jina_v2_tiny: an XLM-R saved as its remote code
/// keeps it, `roberta.encoder.layers.N.mixer.Wqkv`, in f32 and in bf16 as jina publishes it):
/// read under transformers' names, its logits are transformers' on the same weights, one pair
/// at a time and batched, and within [`TOL`] of what jina's own code computed (recorded by
/// the fixture's make.py); `load_reranker` scores as sentence-transformers' CrossEncoder.
#[test]
fn jinas_flash_layout_matches_transformers_and_its_remote_code() {
    let variants = sweep_variants("jina_v2_tiny");
    assert_eq!(variants.len(), 2, "{variants:?}");
    let budgets = [(usize::MAX, 64), (300, 2)];
    for (arch, dir) in &variants {
        let name = format!("{arch}/{}", dir.file_name().unwrap().to_string_lossy());
        let options = ModelOptions::default().threads(2);
        let checked = check_cross_encoder(dir, &name, options.clone(), &budgets, TOL);
        let expected: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap())
                .unwrap();
        let remote: Vec<f32> = expected["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["remote_logit"].as_f64().expect("remote_logit") as f32)
            .collect();
        assert_close(
            &checked.single,
            remote.iter().copied(),
            TOL,
            &format!("{name} against jina's remote code"),
        );
        // The long pair runs past 512 positions (jina's table has 1026).
        assert!(checked.cases.iter().any(|c| c.input_ids.len() > 512));
        scores_as_sentence_transformers(dir, &checked, &options, &name);
    }
}

/// `load_reranker` (what configs, the CLI and the server load) scores each pair of a checked
/// fixture as sentence-transformers' `CrossEncoder.predict` did (`st_score`).
fn scores_as_sentence_transformers(
    dir: &Path,
    checked: &Checked,
    options: &ModelOptions,
    name: &str,
) {
    let reranker = load_reranker(dir, options).unwrap();
    let scores: Vec<f32> = checked
        .cases
        .iter()
        .map(|c| {
            let query = RerankQuery::new(c.query.clone());
            reranker.score(&query, &[c.document.as_str()]).unwrap()[0]
        })
        .collect();
    let st = checked.cases.iter().map(|c| c.st_score.unwrap());
    assert_close(&scores, st, TOL, &format!("{name} load_reranker"));
}

/// The sweep has every cross-encoder architecture the crate runs, each folder's variants of
/// its own architecture (`config.json` says which), among them the families that share BERT's
/// layers under other names and heads: RoBERTa and CamemBERT (XLM-R's classifier),
/// ELECTRA (a GELU head; electra-small's embeddings narrower than its layers, projected) and
/// DistilBERT (`pre_classifier`, ReLU, no token types).
#[test]
fn the_sweep_covers_every_cross_encoder_architecture() {
    let want = [
        ("bert", "BertForSequenceClassification"),
        ("camembert", "CamembertForSequenceClassification"),
        ("deberta", "DebertaV2ForSequenceClassification"),
        ("distilbert", "DistilBertForSequenceClassification"),
        ("electra", "ElectraForSequenceClassification"),
        ("gte", "GteForSequenceClassification"),
        ("modernbert", "ModernBertForSequenceClassification"),
        ("roberta", "RobertaForSequenceClassification"),
        ("xlmr", "XLMRobertaForSequenceClassification"),
    ];
    let variants = sweep_variants("sweep");
    let mut arches: Vec<&str> = variants.iter().map(|(a, _)| a.as_str()).collect();
    arches.dedup();
    assert_eq!(arches, want.map(|(a, _)| a));
    for (arch, dir) in &variants {
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap();
        let named = want.iter().find(|(a, _)| a == arch).unwrap().1;
        assert_eq!(config["architectures"][0], named, "{}", dir.display());
    }
    // ELECTRA with embeddings narrower than its layers (electra-small's 128 -> 256).
    let project = variants.iter().any(|(arch, dir)| {
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap();
        arch == "electra" && config["embedding_size"] != config["hidden_size"]
    });
    assert!(
        project,
        "no ELECTRA variant with embedding_size != hidden_size"
    );
}

/// The new families' int8 encoders (ELECTRA with its projected embeddings, DistilBERT) stay
/// within 0.1 of the f32 logits, the bound of the other families' int8 tests (the tiny random
/// models' 32-wide rows quantize coarsely: 0.059 and 0.033 with AVX2's 7-bit activations, on
/// logits spread over about 1); their f32 parity is `every_config_variant_matches_transformers`'.
#[test]
fn electra_and_distilbert_run_in_int8_close_to_f32() {
    for variant in ["electra/small_shape_project", "distilbert/gelu_heads2"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sweep")
            .join(variant);
        let pairs: Vec<(String, String)> = crate::model_fixtures::pairs_of(&dir)
            .into_iter()
            .map(|c| (c.query, c.document))
            .collect();
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(q, d)| (&**q, &**d)).collect();
        let load = |precision| {
            rerank::CrossEncoder::builder(&dir)
                .options(ModelOptions::default().threads(2).precision(precision))
                .build()
                .unwrap()
        };
        let f32s = load(rerank::models::Precision::F32).logits(&pairs).unwrap();
        let int8 = load(rerank::models::Precision::Int8);
        assert_eq!(int8.precision(), rerank::models::Precision::Int8);
        let quantized = int8.logits(&pairs).unwrap();
        let worst = quantized
            .iter()
            .zip(&f32s)
            .map(|(q, f)| (q - f).abs())
            .fold(0f32, f32::max);
        println!("{variant}: int8 largest logit difference {worst:.1e}");
        assert!(worst < 0.1, "{variant} int8: {quantized:?} vs {f32s:?}");
        // Quantized, not the f32 encoder under another name.
        assert!(worst > 0.0, "{variant}");
    }
}

/// `rerank score` on a variant of each family added beside BERT's (RoBERTa, CamemBERT,
/// ELECTRA, DistilBERT) prints transformers' logit and sentence-transformers' score (its
/// sigmoid) for every pair, as it does for BERT: the CLI takes them for cross-encoders, not for
/// embedding rerankers whose score is their logit.
#[test]
fn the_cli_scores_the_new_families_as_cross_encoders() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sweep");
    for variant in [
        "roberta/heads2",
        "camembert/heads4",
        "electra/small_shape_project",
        "distilbert/relu_heads4",
    ] {
        let dir = root.join(variant);
        let cases = crate::model_fixtures::pairs_of(&dir);
        let lines: Vec<serde_json::Value> = cases
            .iter()
            .map(|c| serde_json::json!({"query": c.query, "document": c.document}))
            .collect();
        let got = crate::common::cli_score(&bin, &dir, &lines, &[]);
        assert_eq!(got.len(), cases.len(), "{variant}");
        for ((score, logit), c) in got.iter().zip(&cases) {
            assert!(
                (logit - c.logit as f64).abs() < 1e-5,
                "{variant}: {logit} vs {}",
                c.logit
            );
            let st = c.st_score.unwrap() as f64;
            assert!((score - st).abs() < 1e-5, "{variant}: {score} vs {st}");
        }
    }
}
