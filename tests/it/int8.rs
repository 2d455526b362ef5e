//! The opt-in int8 path of the BERT-family encoders and the Qwen3 reranker
//! ([`Precision::Int8`]), and the Qwen3 reranker's bf16 ([`Precision::Bf16`]): close to f32 on the shared fixtures (embeddings of the real
//! all-MiniLM-L6-v2, logits of the tiny cross-encoder and of the tiny Qwen3), a different
//! embedder id.
//!
//! The thresholds are the quality bars, scaled to what a fast test can show: a cosine
//! of at least 0.99 per text, and the cross-encoder's ranking of the fixture pairs kept (a
//! Spearman correlation of at least 0.99). The full-size measurements (SciFact nDCG@10, the
//! 100-pair benchmark) are in `scripts/bench_int8.py`.
#![cfg(feature = "models")]

use std::path::{Path, PathBuf};

use rerank::embed::BertEmbedder;
use rerank::models::{ModelOptions, Precision};
use rerank::rerankers::qwen3::Qwen3Reranker;
use rerank::rerankers::CrossEncoder;
use rerank::{Embedder, Error};
use serde_json::Value;

const MINILM_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/minilm_embed/embeddings.json"
);
const CE_FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/ce_tiny_a");
const QWEN3_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/qwen3_tiny_a/model"
);

fn minilm_dir() -> PathBuf {
    std::env::var_os("RERANK_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models")))
        .join("all-MiniLM-L6-v2")
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// Ranks (0-based, ties by position; the fixtures' logits have no ties).
fn ranks(v: &[f32]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    for (rank, i) in order.into_iter().enumerate() {
        r[i] = rank as f64;
    }
    r
}

fn spearman(a: &[f32], b: &[f32]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let d2: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - y).powi(2)).sum();
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

/// How int8 logits agree with reference ones.
pub(crate) struct Agreement {
    /// Spearman correlation.
    pub rho: f64,
    /// Largest absolute difference.
    pub worst: f32,
    /// Largest reference magnitude.
    pub spread: f32,
}

/// The agreement of `logits` with `reference`, printed under `name`.
pub(crate) fn agreement(name: &str, logits: &[f32], reference: &[f32]) -> Agreement {
    let rho = spearman(logits, reference);
    let spread = reference.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = logits
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    eprintln!("{name}: spearman {rho:.4}, max |logit error| {worst:.4} (max |logit| {spread:.3})");
    Agreement { rho, worst, spread }
}

#[test]
fn int8_minilm_embeddings_are_close_to_the_reference() {
    let dir = minilm_dir();
    if !dir.join("model.safetensors").is_file() {
        crate::common::skip(&format!(
            "skipping: {} has no model (run scripts/fetch_minilm.sh)",
            dir.display()
        ));
        return;
    }
    let Ok(text) = std::fs::read_to_string(MINILM_FIXTURE) else {
        crate::common::skip(&format!("skipping: {MINILM_FIXTURE} is absent"));
        return;
    };
    let fixture: Value = serde_json::from_str(&text).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let load = |precision| {
        BertEmbedder::builder(&dir)
            .options(ModelOptions::default().threads(2).precision(precision))
            .build()
            .unwrap()
    };
    let (f32_model, int8_model) = (load(Precision::F32), load(Precision::Int8));
    assert_eq!(int8_model.precision(), Precision::Int8);
    let got = int8_model.embed(&texts).unwrap();
    let exact = f32_model.embed(&texts).unwrap();
    let mut worst = 1.0f64;
    for (i, case) in cases.iter().enumerate() {
        let reference: Vec<f32> = case["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let row = got.row(i).to_vec();
        let c = cosine(&row, &reference);
        worst = worst.min(c);
        assert!(c >= 0.99, "cosine {c} for {:?}", texts[i]);
        assert!(cosine(&row, &exact.row(i).to_vec()) >= 0.99);
        let norm: f32 = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        // Not the f32 path under another name.
        assert_ne!(row, exact.row(i).to_vec(), "int8 gave the f32 embedding");
    }
    eprintln!("int8 MiniLM: worst cosine to sentence-transformers {worst:.5}");
    // Batched or one at a time, the same vectors (quantization is per row, not per batch).
    let one = int8_model.embed(&texts[..1]).unwrap();
    assert!(cosine(&one.row(0).to_vec(), &got.row(0).to_vec()) > 0.999_999);
    // Stored vectors of one precision are never read as the other's.
    assert_ne!(int8_model.id(), f32_model.id());
    assert!(int8_model.id().is_some());
}

#[test]
fn int8_cross_encoder_keeps_the_ranking_of_the_fixture_pairs() {
    let path = Path::new(CE_FIXTURE).join("scores.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        crate::common::skip(&format!("skipping: {} not found", path.display()));
        return;
    };
    let v: Value = serde_json::from_str(&text).unwrap();
    let cases = v["cases"].as_array().unwrap();
    let pairs: Vec<(&str, &str)> = cases
        .iter()
        .map(|c| {
            (
                c["query"].as_str().unwrap(),
                c["document"].as_str().unwrap(),
            )
        })
        .collect();
    let reference: Vec<f32> = cases
        .iter()
        .map(|c| c["logit"].as_f64().unwrap() as f32)
        .collect();
    let model = CrossEncoder::builder(Path::new(CE_FIXTURE).join("model"))
        .options(
            ModelOptions::default()
                .threads(2)
                .precision(Precision::Int8),
        )
        .build()
        .unwrap();
    assert_eq!(model.precision(), Precision::Int8);
    let logits = model.logits(&pairs).unwrap();
    let Agreement { rho, worst, spread } = agreement("int8 ce_tiny_a", &logits, &reference);
    assert!(rho >= 0.99, "spearman {rho}");
    assert!(worst <= 0.05 * spread.max(1.0), "max logit error {worst}");
    // One pair at a time gives the same logits as the batch.
    let single = model.logits(&pairs[..1]).unwrap();
    assert!((single[0] - logits[0]).abs() < 1e-5);
}

/// The Qwen3 reranker in int8 and in bf16 keeps the ranking of the fixture's 32 triples (the
/// reference logits of transformers), one triple at a time and in one batch alike. The int8
/// bar (a Spearman correlation of 0.98) is lower than the cross-encoder's: the tiny random
/// model's logit is a small difference (`yes - no`) of two large ones, which magnifies every
/// rounding, and AVX2's 7-bit weights give 0.989 here (VNNI's 8-bit ones 0.996). bf16 rounds
/// to 8 significant bits rather than to a 256th of a row's range, and must keep 0.99.
#[test]
fn qwen3_reranker_in_int8_and_bf16_keeps_the_ranking_of_the_fixture_triples() {
    let scores = Path::new(QWEN3_FIXTURE).join("../scores.json");
    let Ok(text) = std::fs::read_to_string(&scores) else {
        crate::common::skip(&format!("skipping: {} not found", scores.display()));
        return;
    };
    let v: Value = serde_json::from_str(&text).unwrap();
    let cases = v["cases"].as_array().unwrap();
    let inputs = crate::common::qwen3_score_inputs(cases);
    let reference: Vec<f32> = cases
        .iter()
        .map(|c| (c["logit_yes"].as_f64().unwrap() - c["logit_no"].as_f64().unwrap()) as f32)
        .collect();
    for (precision, min_rho, max_error) in
        [(Precision::Int8, 0.98, 0.15), (Precision::Bf16, 0.99, 0.1)]
    {
        let model = Qwen3Reranker::builder(QWEN3_FIXTURE)
            .options(ModelOptions::default().threads(2).precision(precision))
            .build()
            .unwrap();
        assert_eq!(model.precision(), precision);
        let logits: Vec<f32> = model
            .score_inputs(&inputs)
            .unwrap()
            .iter()
            .map(|s| s.logit)
            .collect();
        let name = format!("{precision} qwen3_tiny_a");
        let Agreement { rho, worst, spread } = agreement(&name, &logits, &reference);
        assert!(rho >= min_rho, "{precision}: spearman {rho}");
        assert!(
            worst <= max_error * spread.max(1.0),
            "{precision}: max logit error {worst}"
        );
        assert!(
            logits
                .iter()
                .zip(&reference)
                .any(|(a, b)| (a - b).abs() > 1e-4),
            "{precision} gave the f32 logits"
        );
        // A triple alone gives the logit it gets in the batch (rounding is per value or per
        // row, never across rows).
        for i in [0, 7, 31] {
            let one = model.score_inputs(&inputs[i..=i]).unwrap()[0].logit;
            assert!(
                (one - logits[i]).abs() < 1e-4,
                "{precision} triple {i}: {one} vs {}",
                logits[i]
            );
        }
    }
}

/// bf16 is for Qwen3: the encoders refuse it.
#[test]
fn encoders_refuse_bf16() {
    let dir = Path::new(CE_FIXTURE).join("model");
    if !dir.join("config.json").is_file() {
        crate::common::skip(&format!("skipping: {CE_FIXTURE} is absent"));
        return;
    }
    let e = CrossEncoder::builder(dir)
        .options(ModelOptions::default().precision(Precision::Bf16))
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(e.to_string().contains("bf16"), "{e}");
}

#[test]
fn precision_names_round_trip() {
    for p in [Precision::F32, Precision::Int8, Precision::Bf16] {
        assert_eq!(p.as_str().parse::<Precision>().unwrap(), p);
        let json = serde_json::to_string(&ModelOptions::default().precision(p)).unwrap();
        assert!(json.contains(&format!("\"precision\":\"{p}\"")), "{json}");
    }
    assert!(matches!("fp16".parse::<Precision>(), Err(Error::Config(_))));
}

/// A pipeline config's `precision` key reaches the models: the reranker and the embedder it
/// builds score and embed exactly as the int8 models built by hand, not as the f32 ones; a
/// precision a model cannot run (bf16 on an encoder, int8 on Qwen3 generation), or one on the
/// model-free reranker, is refused by name.
#[test]
fn a_pipeline_config_runs_its_models_in_the_precision_it_names() {
    use rerank::pipeline::PipelineConfig;
    use rerank::rerankers::RerankQuery;
    use rerank::Reranker;
    let ce = Path::new(CE_FIXTURE).join("model");
    let minilm = minilm_dir();
    if !ce.join("config.json").is_file()
        || !minilm.join("model.safetensors").is_file()
        || !Path::new(QWEN3_FIXTURE).join("config.json").is_file()
    {
        crate::common::skip(
            "skipping: the tiny cross-encoder, the tiny Qwen3 or all-MiniLM-L6-v2 is absent",
        );
        return;
    }
    let yaml = |reranker: &str| {
        format!(
            "retriever: {{ type: bm25 }}\nreranker: {reranker}\n\
             embedder: {{ type: bert, model: {:?}, precision: int8 }}\n",
            minilm.display().to_string()
        )
    };
    let config = PipelineConfig::from_yaml_str(&yaml(&format!(
        "{{ type: cross_encoder, model: {:?}, precision: int8 }}",
        ce.display().to_string()
    )))
    .unwrap();
    let pipeline = config.build(vec![]).unwrap();

    let query = RerankQuery::new("how do vaccines train the immune system");
    let docs = [
        "Vaccines expose the immune system to a harmless antigen.",
        "The recipe needs two cups of flour.",
        "Ünïcödé naïve café",
    ];
    let by_hand = |precision| {
        CrossEncoder::builder(&ce)
            .options(ModelOptions::default().precision(precision))
            .build()
            .unwrap()
    };
    let got = pipeline.reranker().unwrap().score(&query, &docs).unwrap();
    assert_eq!(got, by_hand(Precision::Int8).score(&query, &docs).unwrap());
    assert_ne!(got, by_hand(Precision::F32).score(&query, &docs).unwrap());

    let int8 = BertEmbedder::builder(&minilm)
        .options(ModelOptions::default().precision(Precision::Int8))
        .build()
        .unwrap();
    let embedder = pipeline.embedder().unwrap();
    assert_eq!(embedder.id(), int8.id());
    assert_eq!(embedder.embed(&docs).unwrap(), int8.embed(&docs).unwrap());

    // What cannot run is refused when the pipeline is built, naming the precision or the key.
    let refused = |reranker: &str| {
        let config = PipelineConfig::from_yaml_str(&yaml(reranker)).unwrap();
        config.build(vec![]).err().unwrap().to_string()
    };
    let e = refused(&format!(
        "{{ type: cross_encoder, model: {:?}, precision: bf16 }}",
        ce.display().to_string()
    ));
    assert!(e.contains("bf16"), "{e}");
    let e = refused("{ type: lexical, precision: int8 }");
    assert!(e.contains("reranker.precision"), "{e}");
    let e = PipelineConfig::from_yaml_str(&yaml("{ type: lexical, precision: int4 }"))
        .err()
        .unwrap();
    assert!(e.to_string().contains("int4"), "{e}");

    // The generator's key: Qwen3 generation takes bf16 and refuses int8.
    let generator = |precision: &str| {
        PipelineConfig::from_yaml_str(&format!(
            "retriever: {{ type: bm25 }}\n\
             generator: {{ type: qwen3_chat, model: {QWEN3_FIXTURE:?}, precision: {precision} }}\n"
        ))
        .unwrap()
        .build(vec![])
    };
    generator("bf16").unwrap();
    let e = generator("int8").err().unwrap();
    assert!(e.to_string().contains("int8"), "{e}");
}
