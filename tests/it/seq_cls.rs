//! LLM rerankers converted to sequence classification (`Qwen3ForSequenceClassification`, as
//! `tomaarsen/Qwen3-Reranker-*-seq-cls`; `Qwen2ForSequenceClassification`, mxbai-rerank-v2
//! converted the same way) against transformers' classifiers and sentence-transformers'
//! CrossEncoder on tests/fixtures/qwen_seq_cls_tiny (made by its make.py): the prompt's token
//! ids, the logits one at a time and batched, through `load_reranker` too; the scores equal the
//! causal model's before conversion; a head of another shape, and the classifier loaded as an
//! embedder or a generator, refused.
#![cfg(feature = "models")]

use std::path::PathBuf;

use rerank::models::ModelOptions;
use rerank::rerankers::mxbai::MxbaiReranker;
use rerank::rerankers::qwen3::{Qwen3Reranker, ScoreInput};
use rerank::rerankers::{load_reranker, RerankQuery};
use rerank::{Error, Reranker};
use serde_json::Value;

/// The most |logit - reference| allowed in f32, against transformers' classifier in f32 and in
/// float64 (their own batched and single runs differ by up to 2.4e-6).
const TOL: f64 = 1e-5;

pub(crate) fn fixture(variant: &str) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = match built.join("tests/fixtures").is_dir() {
        true => built,
        false => PathBuf::from("."),
    };
    root.join("tests/fixtures/qwen_seq_cls_tiny").join(variant)
}

fn expected() -> Value {
    let path = fixture("expected.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub(crate) struct Case {
    pub instruction: Option<String>,
    pub query: String,
    pub document: String,
    pub input_ids: Vec<u32>,
    pub logit: f64,
    pub logit_batched: f64,
    pub logit_f64: f64,
    pub causal_logit: f64,
    pub st_predict: Option<f64>,
}

pub(crate) fn cases(variant: &str) -> Vec<Case> {
    let json = expected();
    json["variants"][variant]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            instruction: c["instruction"].as_str().map(str::to_string),
            query: c["query"].as_str().unwrap().to_string(),
            document: c["document"].as_str().unwrap().to_string(),
            input_ids: c["input_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect(),
            logit: c["logit"].as_f64().unwrap(),
            logit_batched: c["logit_batched"].as_f64().unwrap(),
            logit_f64: c["logit_f64"].as_f64().unwrap(),
            causal_logit: c["causal_logit"].as_f64().unwrap(),
            st_predict: c["st_predict"].as_f64(),
        })
        .collect()
}

/// The largest distance of `got` (one logit per case) to the classifier's logits (alone,
/// batched, in float64) and to the causal model's.
pub(crate) fn max_error(got: &[f32], cases: &[Case]) -> f64 {
    assert_eq!(got.len(), cases.len());
    got.iter()
        .zip(cases)
        .flat_map(|(&g, c)| {
            let g = g as f64;
            [c.logit, c.logit_batched, c.logit_f64, c.causal_logit].map(|want| (g - want).abs())
        })
        .fold(0.0, f64::max)
}

/// Every case's Qwen3-Reranker logit in one call (the cases' own instructions).
pub(crate) fn qwen3_logits(reranker: &Qwen3Reranker, cases: &[Case]) -> Vec<f32> {
    let inputs: Vec<ScoreInput<'_>> = cases
        .iter()
        .map(|c| ScoreInput {
            instruction: c.instruction.as_deref(),
            query: &c.query,
            document: &c.document,
        })
        .collect();
    let scores = reranker.score_inputs(&inputs).unwrap();
    scores.iter().map(|s| s.logit).collect()
}

/// Every case's mxbai logit, one query at a time.
pub(crate) fn mxbai_logits(reranker: &MxbaiReranker, cases: &[Case]) -> Vec<f32> {
    cases
        .iter()
        .map(|c| {
            let query = RerankQuery::new(c.query.as_str());
            reranker.score_with_logits(&query, &[&c.document]).unwrap()[0].logit
        })
        .collect()
}

fn options() -> ModelOptions {
    ModelOptions::default().threads(2)
}

#[test]
fn a_converted_qwen3_reranker_matches_transformers_and_sentence_transformers() {
    let dir = fixture("qwen3");
    let cases = cases("qwen3");
    assert!(cases.iter().any(|c| c.instruction.is_some()));
    let reranker = Qwen3Reranker::builder(&dir)
        .options(options())
        .build()
        .unwrap();
    assert!(reranker.config().sequence_classifier);
    for c in &cases {
        let ids = reranker
            .encode(c.instruction.as_deref(), &c.query, &c.document)
            .unwrap();
        assert_eq!(ids, c.input_ids, "{:?} / {:?}", c.query, c.document);
    }
    // All prompts packed together, and each alone.
    let batched = qwen3_logits(&reranker, &cases);
    let err = max_error(&batched, &cases);
    eprintln!(
        "qwen3 seq-cls: {} prompts, batched max |error| {err:.2e}",
        cases.len()
    );
    assert!(err < TOL, "batched: max |error| {err:.2e}");
    let single: Vec<f32> = cases
        .iter()
        .map(|c| reranker.score_token_ids(&[&c.input_ids]).unwrap()[0].logit)
        .collect();
    let err = max_error(&single, &cases);
    eprintln!("qwen3 seq-cls: one at a time max |error| {err:.2e}");
    assert!(err < TOL, "one at a time: max |error| {err:.2e}");
    // Through load_reranker, as a Reranker: the scores are sigmoid(logit), which is what
    // sentence-transformers' CrossEncoder predicts with the chat template in the fixture.
    let loaded = load_reranker(&dir, &options()).unwrap();
    assert_eq!(loaded.name(), "qwen3-reranker");
    let mut predicted = 0;
    for c in &cases {
        let mut query = RerankQuery::new(c.query.as_str());
        if let Some(instruction) = &c.instruction {
            query = query.with_instruction(instruction.as_str());
        }
        let score = loaded.score(&query, &[&c.document]).unwrap()[0] as f64;
        let sigmoid = 1.0 / (1.0 + (-c.logit).exp());
        assert!((score - sigmoid).abs() < 1e-6, "{score} vs {sigmoid}");
        if let Some(st) = c.st_predict {
            assert!((score - st).abs() < 1e-6, "{score} vs CrossEncoder {st}");
            predicted += 1;
        }
    }
    assert_eq!(
        predicted,
        cases.len() / 2,
        "one CrossEncoder score per default-instruction case"
    );
}

#[test]
fn a_converted_mxbai_reranker_matches_transformers() {
    let dir = fixture("qwen2");
    let cases = cases("qwen2");
    let reranker = MxbaiReranker::builder(&dir)
        .options(options())
        .build()
        .unwrap();
    assert!(reranker.config().sequence_classifier);
    for c in &cases {
        let prompt = reranker.encode(None, &c.query, &c.document).unwrap();
        assert_eq!(prompt.ids, c.input_ids, "{:?} / {:?}", c.query, c.document);
        assert!(!prompt.truncated());
    }
    let err = max_error(&mxbai_logits(&reranker, &cases), &cases);
    eprintln!(
        "qwen2 seq-cls: {} prompts, max |error| {err:.2e}",
        cases.len()
    );
    assert!(err < TOL, "max |error| {err:.2e}");
    // load_reranker takes it for mxbai-rerank-v2: the raw logit is the score.
    let loaded = load_reranker(&dir, &options()).unwrap();
    let c = &cases[0];
    let score = loaded
        .score(&RerankQuery::new(c.query.as_str()), &[&c.document])
        .unwrap()[0];
    assert!(
        ((score as f64) - c.logit).abs() < TOL,
        "{score} vs {}",
        c.logit
    );
}

/// Writes a copy of the qwen3 fixture whose `score.weight` is `rows` rows (the fixture's row
/// repeated), and returns what loading it says.
fn load_with_score_rows(rows: usize) -> rerank::Result<Box<dyn Reranker>> {
    let src = fixture("qwen3");
    let dir = std::env::temp_dir().join(format!("rerank-seq-cls-{rows}-{}", std::process::id()));
    crate::common::copy_dir(&src, &dir);
    let path = dir.join("model.safetensors");
    let cpu = candle_core::Device::Cpu;
    let mut tensors = candle_core::safetensors::load(&path, &cpu).unwrap();
    let score = tensors.remove("score.weight").unwrap();
    if rows > 0 {
        let repeated = candle_core::Tensor::cat(&vec![&score; rows], 0).unwrap();
        tensors.insert("score.weight".to_string(), repeated);
    }
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let result = load_reranker(&dir, &options());
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn model_error(result: rerank::Result<impl Sized>, what: &str) -> String {
    match result {
        Err(Error::Model { message, .. }) => message,
        Err(other) => panic!("{what}: expected Error::Model, got {other:?}"),
        Ok(_) => panic!("{what}: it loaded"),
    }
}

#[test]
fn a_head_of_another_shape_or_none_is_refused_by_name() {
    assert!(load_with_score_rows(1).is_ok());
    let m = model_error(load_with_score_rows(2), "two labels");
    assert!(
        m.contains("score.weight") && m.contains("[2, 32]") && m.contains("num_labels 1"),
        "{m}"
    );
    let m = model_error(load_with_score_rows(0), "no head");
    assert!(
        m.contains("no score.weight") && m.contains("Qwen3ForSequenceClassification"),
        "{m}"
    );
}

#[test]
fn a_sequence_classifier_is_not_an_embedder_or_a_generator() {
    let dir = fixture("qwen3");
    let m = model_error(
        rerank::Qwen3Embedder::builder(&dir).build(),
        "Qwen3Embedder",
    );
    assert!(
        m.contains("sequence classifier") && m.contains("load_reranker"),
        "{m}"
    );
    let m = model_error(rerank::load_embedder(&dir, &options()), "load_embedder");
    assert!(m.contains("Qwen3ForSequenceClassification"), "{m}");
    let m = model_error(
        rerank::answer::LocalChat::builder(&dir).build(),
        "LocalChat",
    );
    assert!(
        m.contains("sequence classifier") && m.contains("load_reranker"),
        "{m}"
    );
}

/// The registry's name of the published conversion, served by a loopback hub with the
/// fixture's files: `rerank score` downloads it, takes it for Qwen3-Reranker and prints the
/// scores sentence-transformers' CrossEncoder gives.
#[cfg(feature = "hf-hub")]
#[test]
fn the_published_name_downloads_from_a_hub_and_scores() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let name = "tomaarsen/Qwen3-Reranker-0.6B-seq-cls";
    let (base, server) = crate::common::hub_server(name, fixture("qwen3"));
    let tmp = std::env::temp_dir().join(format!("rerank-seq-cls-hub-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let cases: Vec<Case> = cases("qwen3")
        .into_iter()
        .filter(|c| c.st_predict.is_some())
        .collect();
    let lines: Vec<String> = cases
        .iter()
        .map(|c| serde_json::json!({"query": c.query, "document": c.document}).to_string())
        .collect();
    let pairs = tmp.join("pairs.jsonl");
    std::fs::write(&pairs, lines.join("\n")).unwrap();
    let out = std::process::Command::new(&bin)
        .args(["score", "--reranker", name, "--threads", "1", "--input"])
        .arg(&pairs)
        .env("HF_ENDPOINT", &base)
        .env("HF_HUB_CACHE", tmp.join("hub-cache"))
        .output()
        .unwrap();
    crate::common::stop_hub(&base);
    assert!(
        server.join().unwrap() >= 3,
        "config, tokenizer and weights served"
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let scores: Vec<f64> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["score"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert_eq!(scores.len(), cases.len(), "{stdout}");
    for (got, c) in scores.iter().zip(&cases) {
        let want = c.st_predict.unwrap();
        assert!((got - want).abs() < 1e-6, "{got} vs CrossEncoder {want}");
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// `rerank score` on the converted Qwen3-Reranker: each line with its own instruction, the
/// logit the classifier gives and its sigmoid as the score (`--raw`: the logit as the score).
#[test]
fn the_cli_scores_each_line_with_its_instruction() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let cases = cases("qwen3");
    let lines: Vec<Value> = cases
        .iter()
        .map(|c| {
            serde_json::json!({"query": c.query, "document": c.document,
                               "instruction": c.instruction})
        })
        .collect();
    let dir = fixture("qwen3");
    let plain = crate::common::cli_score(&bin, &dir, &lines, &[]);
    let raw = crate::common::cli_score(&bin, &dir, &lines, &["--raw"]);
    assert_eq!(plain.len(), cases.len());
    for ((&(score, logit), &(raw_score, _)), c) in plain.iter().zip(&raw).zip(&cases) {
        assert!((logit - c.logit).abs() < TOL, "{logit} vs {}", c.logit);
        let sigmoid = 1.0 / (1.0 + (-logit).exp());
        assert!(
            (score - sigmoid).abs() < 1e-6,
            "{score} vs sigmoid {sigmoid}"
        );
        assert_eq!(raw_score, logit);
    }
}

/// `Reranker::raw_score_pairs` gives the logits (the scores' sigmoid inputs for Qwen3, the
/// scores themselves for mxbai), each pair with its query's instruction.
#[test]
fn raw_scores_are_the_logits() {
    for variant in ["qwen3", "qwen2"] {
        let cases = cases(variant);
        let reranker = load_reranker(fixture(variant), &options()).unwrap();
        let queries: Vec<RerankQuery> = cases
            .iter()
            .map(|c| match &c.instruction {
                Some(i) => RerankQuery::new(c.query.as_str()).with_instruction(i.as_str()),
                None => RerankQuery::new(c.query.as_str()),
            })
            .collect();
        let pairs: Vec<(&RerankQuery, &str)> = queries
            .iter()
            .zip(&cases)
            .map(|(q, c)| (q, c.document.as_str()))
            .collect();
        let raw = reranker.raw_score_pairs(&pairs).unwrap().unwrap();
        let err = max_error(&raw, &cases);
        assert!(err < TOL, "{variant}: max |error| {err:.2e}");
    }
}
