//! T5 and mT5 against transformers 5.24 and sentence-transformers 6.2, on the tiny random
//! models of tests/fixtures/t5_tiny (made by the make.py beside them; reference.py is a
//! float64 spec of the same passes):
//! - three sentence-transformers embedders on `T5EncoderModel` (sentence-t5's layout: relu,
//!   heads wider than the model, a Dense projection without bias; T5 v1.1's: gated-gelu, a
//!   non-default bucket table; gated-silu and another eps) through `T5Embedder` and
//!   `load_embedder`, batched, in small batches and one text at a time; texts longer than the
//!   buckets' max distance and than max_seq_length, the empty text, a literal `</s>`,
//!   characters outside the vocabulary;
//! - three monoT5 rerankers on `T5ForConditionalGeneration` / `MT5ForConditionalGeneration`
//!   (T5 v1.0: relu, tied and scaled output head, more decoder than encoder blocks; mT5:
//!   gated-gelu, an untied `lm_head`, `▁yes` / `▁no`; gated-silu in transformers 5's config
//!   spelling) through `MonoT5Reranker` and `load_reranker`: both answer logits of every pair,
//!   batched and one pair at a time, the prompt's ids;
//! - int8, truncation, answer tokens, what is refused, the registry, the CLI.
#![cfg(feature = "models")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rerank::models::registry::{self, Support, Task};
use rerank::models::{ModelOptions, Precision};
use rerank::rerankers::{load_reranker, MonoT5Reranker, RerankQuery};
use rerank::{load_embedder, Embedder, Error, Reranker, T5Embedder};
use serde::Deserialize;

use crate::model_fixtures::{
    each_edit_is_refused, int8_close_and_bf16_and_candle_refused, Broken, ConfigEdit,
};
use crate::st_embed_parity::{assert_matches_sentence_transformers, Expected};

const EMBEDDERS: [&str; 3] = ["st_gated_silu", "st_gtr_gated", "st_t5"];
const RERANKERS: [&str; 3] = ["gated_silu", "monot5", "mt5_gated"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/t5_tiny")
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

/// One reranker case of expected.json.
#[derive(Deserialize)]
struct RerankCase {
    true_token: String,
    false_token: String,
    true_id: u32,
    false_id: u32,
    pairs: Vec<Pair>,
}

#[derive(Deserialize)]
struct Pair {
    query: String,
    document: String,
    input_ids: Vec<u32>,
    logit_true: f32,
    logit_false: f32,
    logit_true_single: f32,
    logit_false_single: f32,
}

/// expected.json: the embedder cases (st_*) and the reranker cases.
fn expected() -> (BTreeMap<String, Expected>, BTreeMap<String, RerankCase>) {
    let text = std::fs::read_to_string(root().join("expected.json")).unwrap();
    let all: BTreeMap<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
    let (mut embed, mut rerank) = (BTreeMap::new(), BTreeMap::new());
    for (case, v) in all {
        match case.starts_with("st_") {
            true => embed.insert(case, serde_json::from_value(v).unwrap()),
            false => rerank
                .insert(case, serde_json::from_value(v).unwrap())
                .map(|_| unreachable!()),
        };
    }
    (embed, rerank)
}

fn bare(dir: &Path, options: ModelOptions) -> T5Embedder {
    T5Embedder::builder(dir)
        .options(options)
        .build()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

#[test]
fn every_t5_embedder_matches_sentence_transformers_single_and_batched() {
    let (expected, _) = expected();
    assert_eq!(
        expected.keys().map(String::as_str).collect::<Vec<_>>(),
        EMBEDDERS
    );
    for (case, want) in &expected {
        let dir = root().join(case);
        let e = load_embedder(&dir, &options()).unwrap();
        assert!(e.id().unwrap().starts_with("t5-"), "{case}");
        let direct = bare(&dir, options());
        assert_eq!(direct.max_length(), want.max_seq_length, "{case}");
        let ids = |text: &str| direct.token_ids(text).unwrap();
        let worst = assert_matches_sentence_transformers(case, want, &*e, &direct, &ids);
        assert!(worst >= 0.99999, "{case}: {worst}");
        let small = T5Embedder::builder(&dir)
            .options(options().token_budget(60).max_batch_size(3))
            .build()
            .unwrap();
        let worst =
            assert_matches_sentence_transformers(case, want, &small, &bare(&dir, options()), &ids);
        assert!(worst >= 0.99999, "{case} in small batches: {worst}");
    }
}

/// `|got - want| <= 2e-5 + 1e-4 |want|`: float32 sums in another order.
fn close(got: f32, want: f32) -> bool {
    (got - want).abs() <= 2e-5 + 1e-4 * want.abs()
}

#[test]
fn every_monot5_case_matches_transformers_batched_and_one_pair_at_a_time() {
    let (_, expected) = expected();
    assert_eq!(
        expected.keys().map(String::as_str).collect::<Vec<_>>(),
        RERANKERS
    );
    for (case, want) in &expected {
        let dir = root().join(case);
        let r = MonoT5Reranker::builder(&dir)
            .options(options())
            .build()
            .unwrap();
        assert_eq!(
            r.yes_token(),
            (want.true_token.as_str(), want.true_id),
            "{case}"
        );
        assert_eq!(
            r.no_token(),
            (want.false_token.as_str(), want.false_id),
            "{case}"
        );
        for p in &want.pairs {
            let (ids, cut) = r.encode(&p.query, &p.document).unwrap();
            assert_eq!(
                (ids, cut),
                (p.input_ids.clone(), false),
                "{case}: {}",
                p.document
            );
        }
        // Every pair of every query in one packed pass, and each pair alone.
        let loaded = load_reranker(&dir, &options()).unwrap();
        assert_eq!(loaded.name(), "monot5");
        let queries: Vec<RerankQuery> = want
            .pairs
            .iter()
            .map(|p| RerankQuery::new(&p.query))
            .collect();
        let pairs: Vec<(&RerankQuery, &str)> = queries
            .iter()
            .zip(&want.pairs)
            .map(|(q, p)| (q, p.document.as_str()))
            .collect();
        let raw = loaded.raw_score_pairs(&pairs).unwrap().unwrap();
        let scores = loaded.score_pairs(&pairs).unwrap();
        for ((p, raw), score) in want.pairs.iter().zip(&raw).zip(&scores) {
            let diff = p.logit_true - p.logit_false;
            assert!(
                close(*raw, diff),
                "{case} {:?}: {raw} vs {diff}",
                p.document
            );
            let prob = 1.0 / (1.0 + (-diff).exp());
            assert!((score - prob).abs() < 1e-5, "{case}: {score} vs {prob}");
        }
        for p in &want.pairs {
            let q = RerankQuery::new(&p.query);
            let got = r.score_with_logits(&q, &[&p.document]).unwrap()[0];
            let what = format!("{case} {:?}", p.document);
            assert!(
                close(got.yes, p.logit_true_single),
                "{what}: {} {}",
                got.yes,
                p.logit_true_single
            );
            assert!(
                close(got.no, p.logit_false_single),
                "{what}: {} {}",
                got.no,
                p.logit_false_single
            );
            assert!(
                close(got.yes, p.logit_true) && close(got.no, p.logit_false),
                "{what}"
            );
        }
        // Small passes: the same logits.
        let small = MonoT5Reranker::builder(&dir)
            .options(options().token_budget(60).max_batch_size(2))
            .build()
            .unwrap();
        let q = RerankQuery::new(&want.pairs[0].query);
        let docs: Vec<&str> = want
            .pairs
            .iter()
            .filter(|p| p.query == q.text)
            .map(|p| p.document.as_str())
            .collect();
        let a = small.score_with_logits(&q, &docs).unwrap();
        let b = r.score_with_logits(&q, &docs).unwrap();
        for (a, b) in a.iter().zip(&b) {
            assert!(
                close(a.logit, b.logit),
                "{case}: {} vs {}",
                a.logit,
                b.logit
            );
        }
    }
}

#[test]
fn long_prompts_are_cut_from_the_end_keeping_the_end_token() {
    let dir = root().join("monot5");
    let r = MonoT5Reranker::builder(&dir)
        .options(options().max_length(20))
        .build()
        .unwrap();
    assert_eq!(r.max_length(), 20);
    let long = "Rust is a systems programming language focused on safety, speed and concurrency.";
    let (ids, cut) = r.encode("what is rust", long).unwrap();
    assert!(cut);
    assert_eq!(ids.len(), 20);
    assert_eq!(*ids.last().unwrap(), 1, "{ids:?}");
    let full = MonoT5Reranker::from_dir(&dir).unwrap();
    let (all, cut) = full.encode("what is rust", long).unwrap();
    assert!(!cut && all.len() > 20);
    assert_eq!(&ids[..19], &all[..19]);
    let scores = r
        .score_detailed(&RerankQuery::new("what is rust"), &[long, "x"])
        .unwrap();
    assert_eq!(scores.truncated, 1);
    // The cut prompt scores as its ids do.
    let direct = r.score_token_ids(&[&ids]).unwrap()[0];
    assert!((direct.score - scores.scores[0]).abs() < 1e-6);
}

#[test]
fn answer_tokens_follow_the_model_type_or_the_builder() {
    let mt5 = MonoT5Reranker::from_dir(root().join("mt5_gated")).unwrap();
    assert_eq!(mt5.yes_token().0, "▁yes");
    let swapped = MonoT5Reranker::builder(root().join("monot5"))
        .answer_tokens("▁false", "▁true")
        .build()
        .unwrap();
    let plain = MonoT5Reranker::from_dir(root().join("monot5")).unwrap();
    let q = RerankQuery::new("what is rust");
    let docs = ["Rust is a language.", "x"];
    let (a, b) = (
        swapped.score_with_logits(&q, &docs).unwrap(),
        plain.score_with_logits(&q, &docs).unwrap(),
    );
    for (a, b) in a.iter().zip(&b) {
        assert_eq!((a.yes, a.no), (b.no, b.yes));
    }
    let e = MonoT5Reranker::builder(root().join("monot5"))
        .answer_tokens("▁maybe", "▁false")
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("▁maybe") && e.contains("answer_tokens"), "{e}");
    let e = MonoT5Reranker::builder(root().join("monot5"))
        .answer_tokens("▁true", "▁true")
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("same token"), "{e}");
}

#[test]
fn int8_stays_close_and_bf16_and_candle_are_refused() {
    int8_close_and_bf16_and_candle_refused(&root().join("st_t5"), "T5");
    let dir = root().join("mt5_gated");
    let f32s = MonoT5Reranker::from_dir(&dir).unwrap();
    let int8 = MonoT5Reranker::builder(&dir)
        .options(options().precision(Precision::Int8))
        .build()
        .unwrap();
    assert_eq!(int8.precision(), Precision::Int8);
    let q = RerankQuery::new("what is rust");
    let docs = [
        "Rust is a systems programming language.",
        "A search engine scores documents.",
    ];
    let (a, b) = (
        int8.score_with_logits(&q, &docs).unwrap(),
        f32s.score_with_logits(&q, &docs).unwrap(),
    );
    for (a, b) in a.iter().zip(&b) {
        let near = |x: f32, y: f32| (x - y).abs() < 0.1 * y.abs().max(1.0);
        assert!(near(a.yes, b.yes) && near(a.no, b.no), "{a:?} {b:?}");
        assert_ne!(a.logit, b.logit);
    }
    let e = MonoT5Reranker::builder(&dir)
        .options(ModelOptions::default().precision(Precision::Bf16))
        .build()
        .unwrap_err();
    assert!(
        matches!(e, Error::Config(_)) && e.to_string().contains("bf16"),
        "{e}"
    );
    #[cfg(feature = "candle")]
    {
        let options = ModelOptions::default().device(rerank::models::Device::CandleCpu);
        let e = MonoT5Reranker::builder(&dir)
            .options(options)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("device cpu"), "{e}");
    }
}

#[test]
fn t5_configs_that_cannot_be_honoured_are_refused_naming_config_json_and_the_key() {
    let shapes: [(&str, ConfigEdit); 8] = [
        ("d_model", |c| c["d_model"] = 32.into()),
        ("vocab_size", |c| c["vocab_size"] = 256.into()),
        ("num_layers", |c| c["num_layers"] = 5.into()),
        ("num_heads", |c| c["num_heads"] = 3.into()),
        ("d_ff", |c| c["d_ff"] = 30.into()),
        ("relative_attention_num_buckets", |c| {
            c["relative_attention_num_buckets"] = 2.into()
        }),
        ("feed_forward_proj", |c| {
            c["feed_forward_proj"] = "gated-tanh".into()
        }),
        ("model_type", |c| c["model_type"] = "umt5".into()),
    ];
    // As a plain transformers folder: no pooling module to notice a width first.
    let plain = Broken::of(&root().join("st_gated_silu"), "t5-plain");
    for module in ["1_Pooling", "2_Normalize"] {
        std::fs::remove_dir_all(plain.0.join(module)).unwrap();
    }
    for file in [
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
    ] {
        std::fs::remove_file(plain.0.join(file)).unwrap();
    }
    let e = bare(&plain.0, options());
    assert!(!e.is_sentence_transformers());
    each_edit_is_refused(&plain.0, "embedder", &shapes);
    // The reranker: the same keys, and the decoder's.
    let decoder: [(&str, ConfigEdit); 2] = [
        ("num_decoder_layers", |c| c["num_decoder_layers"] = 4.into()),
        ("num_heads", |c| c["num_heads"] = 1.into()),
    ];
    let base = root().join("monot5");
    for (i, (key, edit)) in shapes.iter().chain(&decoder).enumerate() {
        let b = Broken::of(&base, &format!("monot5-{i}"));
        b.edit_config(*edit);
        let config = b.0.join("config.json").display().to_string();
        for e in [
            MonoT5Reranker::from_dir(&b.0).unwrap_err(),
            load_reranker(&b.0, &ModelOptions::default()).err().unwrap(),
        ] {
            let Error::Model { message, .. } = &e else {
                panic!("{key}: expected Error::Model, got {e:?}");
            };
            assert!(
                message.contains(&config) && message.contains(key),
                "{key}: {message}"
            );
        }
    }
}

#[test]
fn the_registry_knows_gtr_and_monot5() {
    let gtr = registry::find("sentence-transformers/gtr-t5-base").unwrap();
    assert_eq!(gtr.support, Support::Supported);
    assert_eq!(
        (gtr.model_type, gtr.dim, gtr.max_length),
        ("t5", Some(768), 512)
    );
    for id in [
        "castorini/monot5-base-msmarco",
        "castorini/monot5-base-msmarco-10k",
    ] {
        let m = registry::find(id).unwrap();
        assert_eq!(
            (m.task, m.model_type, m.max_length),
            (Task::LlmReranker, "t5", 512)
        );
    }
    // A monoT5 model is not an embedder.
    let e = load_embedder(
        "castorini/monot5-base-msmarco-10k",
        &ModelOptions::default(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("load_reranker"), "{e}");
}

/// `rerank score --model` on the monoT5 directory scores as the reference does.
#[test]
fn the_cli_scores_with_monot5() {
    let Some(cli) = crate::common::rerank_cli() else {
        return;
    };
    let (_, expected) = expected();
    let want = &expected["monot5"];
    let query = &want.pairs[0].query;
    let docs: Vec<&Pair> = want.pairs.iter().filter(|p| &p.query == query).collect();
    let input =
        std::env::temp_dir().join(format!("rerank-cli-monot5-{}.jsonl", std::process::id()));
    let lines: Vec<String> = docs
        .iter()
        .map(|p| serde_json::json!({ "query": p.query, "document": p.document }).to_string())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out = std::process::Command::new(&cli)
        .args(["score", "--model"])
        .arg(root().join("monot5"))
        .arg("--input")
        .arg(&input)
        .output()
        .unwrap();
    std::fs::remove_file(&input).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<(f64, f64)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["score"].as_f64().unwrap(), v["logit"].as_f64().unwrap())
        })
        .collect();
    assert_eq!(got.len(), docs.len());
    for ((score, logit), p) in got.iter().zip(&docs) {
        let diff = (p.logit_true - p.logit_false) as f64;
        let want = 1.0 / (1.0 + (-diff).exp());
        assert!(
            (score - want).abs() < 1e-5,
            "{:?}: {score} vs {want}",
            p.document
        );
        assert!(
            (logit - diff).abs() < 2e-5 + 1e-4 * diff.abs(),
            "{logit} vs {diff}"
        );
    }
}

/// `reranker: {type: monot5}` and `{type: model}` on the monoT5 directory build a pipeline whose
/// stage 2 scores `P(true)` as the reference does, best first; the answer relevance of
/// `monot5` is the reranker's probability.
#[test]
fn a_pipeline_config_reranks_with_monot5() {
    let (_, expected) = expected();
    let want = &expected["monot5"];
    let query = &want.pairs[0].query;
    let pairs: Vec<&Pair> = want.pairs.iter().filter(|p| &p.query == query).collect();
    let docs: Vec<rerank::Document> = pairs
        .iter()
        .enumerate()
        .map(|(i, p)| rerank::Document::new(i.to_string(), &p.document))
        .collect();
    let dir = root().join("monot5").display().to_string();
    for kind in ["monot5", "model"] {
        let yaml = format!(
            "retriever: {{ type: bm25 }}\nreranker: {{ type: {kind}, model: {dir:?} }}\n\
             search: {{ top_k: 3 }}\n"
        );
        let config = rerank::PipelineConfig::from_yaml_str(&yaml).unwrap();
        let pipeline = config.build(docs.clone()).unwrap();
        let response = pipeline.search(query).unwrap();
        assert_eq!(response.scorer, "monot5", "{kind}");
        assert!(!response.hits.is_empty(), "{kind}");
        for hit in &response.hits {
            let p = pairs[hit.document.id.parse::<usize>().unwrap()];
            let diff = (p.logit_true - p.logit_false) as f64;
            let prob = 1.0 / (1.0 + (-diff).exp());
            let got = hit.rerank_score.unwrap() as f64;
            assert!((got - prob).abs() < 1e-5, "{kind}: {got} {prob}");
        }
        let scores: Vec<f32> = response
            .hits
            .iter()
            .map(|h| h.rerank_score.unwrap())
            .collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]),
            "{kind}: best first"
        );
    }
    let yaml = format!("reranker: {{ type: monot5, model: {dir:?} }}\n");
    let options = rerank::PipelineConfig::from_yaml_str(&yaml)
        .unwrap()
        .answer_options()
        .unwrap();
    assert_eq!(
        options.relevance_measure(),
        rerank::answer::RelevanceMeasure::RerankerProbability
    );
}
