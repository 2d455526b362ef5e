//! mxbai-rerank-v2 (`MxbaiReranker`, a Qwen2 decoder) against mixedbread's `mxbai-rerank`
//! package on tests/fixtures/mxbai_v2_tiny (made by its make.py): the prompt's token ids, the
//! logits in f32, one pair at a time and batched, through `load_reranker` too; bf16 and int8
//! close to f32; configs the decoder cannot honour refused.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::models::{ModelOptions, Precision};
use rerank::rerankers::mxbai::{MxbaiReranker, LARGE_ESTIMATED_MAX};
use rerank::rerankers::{load_reranker, RerankQuery};
use rerank::{Error, Reranker};
use serde_json::Value;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mxbai_v2_tiny");

/// The most |logit - package logit| allowed in f32, and the most |logit - exact logit|, the
/// exact one being the fixture's model run in float64. (The package's own f32 logits are up to
/// 5e-6 from the exact ones, and its batched and single runs differ by up to 6.3e-6: left
/// padding shifts the RoPE positions of a padded row.)
const TOL: f64 = 1e-5;

fn model_dir() -> PathBuf {
    Path::new(FIXTURE).join("model")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(Path::new(FIXTURE).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

struct Case {
    query: String,
    document: String,
    input_ids: Vec<u32>,
    truncated: bool,
    logit: f64,
    logit_batched: f64,
    logit_f64: f64,
    normalized: f64,
}

/// Whether `got` is within [`TOL`] of the package's logit and of the exact one.
fn close_to_package(got: f32, c: &Case) -> bool {
    let got = got as f64;
    (got - c.logit).abs() < TOL && (got - c.logit_f64).abs() < TOL
}

struct Setting {
    max_length: Option<usize>,
    instruction: Option<String>,
    effective_max_length: usize,
    cases: Vec<Case>,
}

fn setting(json: &Value, name: &str) -> Setting {
    let s = &json["settings"][name];
    let cases = s["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            query: c["query"].as_str().unwrap().to_string(),
            document: c["document"].as_str().unwrap().to_string(),
            input_ids: c["input_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect(),
            truncated: c["query_truncated"].as_bool().unwrap()
                || c["document_truncated"].as_bool().unwrap(),
            logit: c["logit"].as_f64().unwrap(),
            logit_batched: c["logit_batched"].as_f64().unwrap(),
            logit_f64: c["logit_f64"].as_f64().unwrap(),
            normalized: c["normalized"].as_f64().unwrap(),
        })
        .collect();
    Setting {
        max_length: s["kwargs"]["max_length"].as_u64().map(|n| n as usize),
        instruction: s["instruction"].as_str().map(str::to_string),
        effective_max_length: s["max_length"].as_u64().unwrap() as usize,
        cases,
    }
}

const SETTINGS: [&str; 3] = ["default", "max_length_48", "instruction"];

fn options(s: &Setting) -> ModelOptions {
    let options = ModelOptions::default().threads(2);
    match s.max_length {
        Some(n) => options.max_length(n),
        None => options,
    }
}

fn query(s: &Setting, c: &Case) -> RerankQuery {
    let q = RerankQuery::new(c.query.as_str());
    match &s.instruction {
        Some(i) => q.with_instruction(i.as_str()),
        None => q,
    }
}

#[test]
fn prompts_are_the_packages_token_for_token() {
    let json = expected();
    for name in SETTINGS {
        let s = setting(&json, name);
        let r = MxbaiReranker::builder(model_dir())
            .options(options(&s))
            .build()
            .unwrap();
        assert_eq!(r.max_length(), s.effective_max_length, "{name}");
        let yes = json["settings"][name]["yes_id"].as_u64().unwrap() as u32;
        let no = json["settings"][name]["no_id"].as_u64().unwrap() as u32;
        assert_eq!((r.yes_id(), r.no_id()), (yes, no));
        for (i, c) in s.cases.iter().enumerate() {
            let p = r
                .encode(s.instruction.as_deref(), &c.query, &c.document)
                .unwrap();
            assert_eq!(p.ids, c.input_ids, "{name} case {i}");
            assert_eq!(p.truncated(), c.truncated, "{name} case {i}");
        }
        // The fixture has cut queries and cut documents, and pairs cut in neither.
        assert!(s.cases.iter().any(|c| c.truncated) && s.cases.iter().any(|c| !c.truncated));
    }
}

/// Every logit close to the package's `predict` on the pair alone ([`close_to_package`]),
/// whether the reranker scores one pair at a time or all pairs of a query in one call.
#[test]
fn logits_match_the_package_one_at_a_time_and_batched() {
    let json = expected();
    let (mut worst, mut worst_exact, mut worst_package): (f64, f64, f64) = (0.0, 0.0, 0.0);
    for name in SETTINGS {
        let s = setting(&json, name);
        let r = MxbaiReranker::builder(model_dir())
            .options(options(&s))
            .build()
            .unwrap();
        for (i, c) in s.cases.iter().enumerate() {
            let got = r.score_with_logits(&query(&s, c), &[&c.document]).unwrap()[0];
            worst = worst.max((got.logit as f64 - c.logit).abs());
            worst_exact = worst_exact.max((got.logit as f64 - c.logit_f64).abs());
            worst_package = worst_package.max((c.logit - c.logit_f64).abs());
            assert!(
                close_to_package(got.logit, c),
                "{name} case {i}: {} vs the package's {} (exact {})",
                got.logit,
                c.logit,
                c.logit_f64
            );
            assert_eq!(got.score, got.logit, "raw logits are the default score");
            assert!(
                (got.logit as f64 - c.logit_batched).abs() < 2.0 * TOL,
                "{name} {i}"
            );
        }
        // All the documents of one query in one call, in one packed pass or several.
        let first = &s.cases[0].query;
        let same: Vec<&Case> = s.cases.iter().filter(|c| &c.query == first).collect();
        assert!(same.len() >= 3);
        let docs: Vec<&str> = same.iter().map(|c| c.document.as_str()).collect();
        for budget in [8192, 200] {
            let r = MxbaiReranker::builder(model_dir())
                .options(options(&s).token_budget(budget))
                .build()
                .unwrap();
            let out = r.score_detailed(&query(&s, same[0]), &docs).unwrap();
            assert_eq!(out.scorer, "mxbai-rerank-v2");
            assert_eq!(
                out.truncated,
                same.iter().filter(|c| c.truncated).count(),
                "{name}"
            );
            for (c, got) in same.iter().zip(&out.scores) {
                assert!(close_to_package(*got, c), "{name} budget {budget}");
            }
        }
    }
    eprintln!(
        "mxbai-rerank-v2 f32: max |logit - package| = {worst:.2e}, max |logit - float64| = \
         {worst_exact:.2e} (package: {worst_package:.2e})"
    );
}

#[test]
fn normalized_scores_are_the_packages() {
    let json = expected();
    let s = setting(&json, "default");
    let r = MxbaiReranker::builder(model_dir())
        .options(options(&s))
        .normalize(LARGE_ESTIMATED_MAX)
        .build()
        .unwrap();
    for c in &s.cases {
        let got = r.score_with_logits(&query(&s, c), &[&c.document]).unwrap()[0];
        assert!((got.score as f64 - c.normalized).abs() < 2.0 * TOL);
        assert!(close_to_package(got.logit, c));
    }
}

#[test]
fn load_reranker_takes_a_qwen2_causal_lm_for_mxbai() {
    let json = expected();
    let s = setting(&json, "default");
    let r = load_reranker(model_dir(), &ModelOptions::default().threads(2)).unwrap();
    assert_eq!(r.name(), "mxbai-rerank-v2");
    let docs: Vec<&str> = s.cases.iter().map(|c| c.document.as_str()).collect();
    // One query per call: the fixture's pairs grouped by query.
    for c in &s.cases {
        let got = r
            .score(&RerankQuery::new(c.query.as_str()), &[&c.document])
            .unwrap();
        assert!(close_to_package(got[0], c));
    }
    let ranked = r
        .score_detailed(&RerankQuery::new(s.cases[0].query.as_str()), &docs)
        .unwrap();
    assert_eq!(ranked.scores.len(), docs.len());
}

/// bf16 and int8 stay close to f32 (the package's logits) and keep the order of the pairs
/// apart by more than twice the tolerance; neither gives the f32 logits themselves (the
/// matrices really are rounded). The tolerances are relative to the spread of the fixture's
/// logits (3.0); measured with AVX-512: bf16 0.035 (1.2%), int8 0.11 (3.8%).
#[test]
fn bf16_and_int8_are_close_to_f32() {
    let json = expected();
    let s = setting(&json, "default");
    let reference: Vec<f64> = s.cases.iter().map(|c| c.logit).collect();
    let spread = reference.iter().cloned().fold(f64::MIN, f64::max)
        - reference.iter().cloned().fold(f64::MAX, f64::min);
    for (precision, max_error) in [(Precision::Bf16, 0.04), (Precision::Int8, 0.08)] {
        let r = MxbaiReranker::builder(model_dir())
            .options(options(&s).precision(precision))
            .build()
            .unwrap();
        assert_eq!(r.precision(), precision);
        let logits: Vec<f64> = s
            .cases
            .iter()
            .map(|c| r.score_with_logits(&query(&s, c), &[&c.document]).unwrap()[0].logit as f64)
            .collect();
        let worst = logits
            .iter()
            .zip(&reference)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        eprintln!(
            "mxbai-rerank-v2 {precision}: max |logit - f32| = {worst:.3e} (spread {spread:.2})"
        );
        assert!(worst <= max_error * spread, "{precision}: {worst}");
        assert!(worst > 1e-5, "{precision} gave the f32 logits");
        for i in 0..reference.len() {
            for j in 0..reference.len() {
                if reference[i] - reference[j] > 2.0 * max_error * spread {
                    assert!(logits[i] > logits[j], "{precision}: order of {i} and {j}");
                }
            }
        }
    }
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rerank-mxbai-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    crate::common::copy_dir(&model_dir(), &dir);
    dir
}

/// A Qwen2 config the decoder cannot honour is refused, naming config.json and the key.
#[test]
fn unsupported_qwen2_configs_are_refused_naming_file_and_key() {
    let edits: [(&str, Value, &str); 5] = [
        (
            "layer_types",
            serde_json::json!(["sliding_attention"]),
            "layer_types has 1 entries",
        ),
        ("hidden_act", Value::from("gelu"), "hidden_act"),
        ("intermediate_size", Value::from(96), "intermediate_size"),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "longrope", "factor": 4.0}),
            "rope_scaling: rope_type \"longrope\" is not supported",
        ),
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "linear"}),
            "needs factor",
        ),
    ];
    for (key, value, needle) in edits {
        let dir = scratch(key);
        let path = dir.join("config.json");
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        config[key] = value;
        std::fs::write(&path, config.to_string()).unwrap();
        let e = MxbaiReranker::from_dir(&dir).unwrap_err();
        assert!(matches!(e, Error::Model { .. }), "{key}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("config.json") && msg.contains(needle),
            "{key}: {msg}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    // A Qwen3 checkpoint is not an mxbai reranker.
    let dir = scratch("qwen3");
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("Qwen2ForCausalLM", "Qwen3ForCausalLM")).unwrap();
    let msg = MxbaiReranker::from_dir(&dir).unwrap_err().to_string();
    assert!(msg.contains("is not Qwen2ForCausalLM"), "{msg}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pipeline config selects mxbai-v2 by `type: mxbai`, and any supported model by
/// `type: model`: the pipeline's stage 2 gives the package's logits either way.
#[test]
fn a_pipeline_config_selects_mxbai_by_type() {
    let json = expected();
    let s = setting(&json, "default");
    for kind in ["mxbai", "model"] {
        let yaml = format!(
            "retriever: {{type: bm25}}\nreranker: {{type: {kind}, model: {:?}}}\n",
            model_dir().display().to_string()
        );
        let config = rerank::PipelineConfig::from_yaml_str(&yaml).unwrap();
        let pipeline = config.build(Vec::new()).unwrap();
        let r = pipeline.reranker().expect("a reranker");
        assert_eq!(r.name(), "mxbai-rerank-v2", "{kind}");
        for c in &s.cases {
            let got = r
                .score(&RerankQuery::new(c.query.as_str()), &[&c.document])
                .unwrap();
            assert!(close_to_package(got[0], c), "{kind}");
        }
    }
}
