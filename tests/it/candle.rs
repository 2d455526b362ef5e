//! The candle engine (feature `candle`) against every parity fixture: the cross-encoders
//! (BERT, XLM-R, DeBERTa v2 and v3, ModernBERT cls and mean), the sentence-transformers
//! embedders (BERT in five layouts, XLM-R, ModernBERT, Qwen3 with left and right padding, the
//! real all-MiniLM-L6-v2 when it is there), Qwen3-Reranker and mxbai-rerank-v2 (also converted
//! to sequence classification), each within 1e-4 of the references (cosine >= 0.99999 for
//! embeddings), printed next to the CPU engine's error on the same inputs; and the Qwen
//! decoders' sliding-window variants.
//!
//! The device is `RERANK_TEST_DEVICE` (`candle-cpu` when unset, as in CI; `cuda:0` on a GPU
//! machine, through `scripts/gpu_check.sh`); `RERANK_SHARED_FIXTURES` points at the shared
//! fixtures when the test binary runs away from its checkout.
#![cfg(feature = "candle")]

use std::path::{Path, PathBuf};

use rerank::models::{Device, ModelOptions, Precision};
use rerank::rerankers::mxbai::MxbaiReranker;
use rerank::rerankers::qwen3::Qwen3Reranker;
use rerank::rerankers::{CrossEncoder, RerankQuery};
use rerank::{
    load_embedder, BertEmbedder, Embedder, ModernBertEmbedder, Qwen3Embedder, Reranker, Role,
};
use serde_json::Value;

use crate::st_embed_parity::{assert_matches_sentence_transformers, expected_in};

/// Logits and scores agree with the references to this on the candle engine (f32).
const TOL: f64 = 1e-4;

fn device() -> Device {
    match std::env::var("RERANK_TEST_DEVICE") {
        Ok(name) => name.parse().expect("RERANK_TEST_DEVICE"),
        Err(_) => Device::CandleCpu,
    }
}

fn candle() -> ModelOptions {
    ModelOptions::default().threads(2).device(device())
}

fn native() -> ModelOptions {
    ModelOptions::default().threads(2)
}

/// The checkout's root: where the test was built, or the working directory when the binary
/// runs elsewhere (a GPU machine).
fn repo() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match built.join("tests/fixtures").is_dir() {
        true => built,
        false => PathBuf::from("."),
    }
}

fn local(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

fn shared(name: &str) -> Option<PathBuf> {
    let root = std::env::var_os("RERANK_SHARED_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/fixtures"));
    let dir = root.join(name);
    if dir.is_dir() {
        Some(dir)
    } else {
        crate::common::skip(&format!("skipping: {} not found", dir.display()));
        None
    }
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn max_error(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).abs())
        .fold(0.0, f64::max)
}

/// The (query, document) pairs of a cross-encoder fixture's `cases[]` and their `logit`s.
fn pairs_and_logits(v: &Value) -> (Vec<(&str, &str)>, Vec<f64>) {
    let cases = v["cases"].as_array().unwrap();
    let pairs = cases
        .iter()
        .map(|c| {
            (
                c["query"].as_str().unwrap(),
                c["document"].as_str().unwrap(),
            )
        })
        .collect();
    let want = cases.iter().map(|c| c["logit"].as_f64().unwrap()).collect();
    (pairs, want)
}

/// Every case of a cross-encoder fixture (`cases[]` with `query`, `document`, `logit`) scored
/// in one call and one pair at a time on the device; returns (candle, CPU) largest errors.
fn cross_encoder(name: &str, model: &Path, reference: &Path) -> (f64, f64) {
    let v = json(reference);
    let (pairs, want) = pairs_and_logits(&v);
    let on_device = CrossEncoder::builder(model)
        .options(candle())
        .build()
        .unwrap();
    let on_cpu = CrossEncoder::builder(model)
        .options(native())
        .build()
        .unwrap();
    assert_eq!(on_device.max_length(), on_cpu.max_length(), "{name}");
    let batched = on_device.logits(&pairs).unwrap();
    let mut err = max_error(&batched, &want);
    for (pair, w) in pairs.iter().zip(&want) {
        let one = on_device.logits(&[*pair]).unwrap();
        err = err.max(max_error(&one, &[*w]));
    }
    let cpu = max_error(&on_cpu.logits(&pairs).unwrap(), &want);
    println!(
        "{name}: {} pairs, candle max |error| {err:.2e}, cpu {cpu:.2e}",
        pairs.len()
    );
    assert!(err < TOL, "{name}: candle error {err}");
    (err, cpu)
}

/// `xlmr_tiny` with the `ce_tiny_a` tokenizer it was made with, in a directory of its own
/// (removed on drop).
struct Xlmr(PathBuf);

impl Xlmr {
    fn new(tag: &str) -> Option<Self> {
        let tokenizer = shared("ce_tiny_a")?.join("model");
        let dir = std::env::temp_dir().join(format!("rerank-candle-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["config.json", "model.safetensors", "expected.json"] {
            std::fs::copy(local("xlmr_tiny").join(f), dir.join(f)).unwrap();
        }
        std::fs::copy(tokenizer.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
        Some(Xlmr(dir))
    }
}

impl Drop for Xlmr {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn cross_encoders_match_the_references() {
    let xlmr = Xlmr::new("parity");
    let mut fixtures = Vec::new();
    for name in ["deberta_ce_tiny/v2", "deberta_ce_tiny/v3"]
        .into_iter()
        .chain(["modernbert_ce_tiny/cls", "modernbert_ce_tiny/mean"])
    {
        fixtures.push((
            name.to_string(),
            local(name),
            local(name).join("expected.json"),
        ));
    }
    if let Some(dir) = shared("ce_tiny_a") {
        let reference = dir.join("scores.json");
        fixtures.push(("ce_tiny_a (bert)".into(), dir.join("model"), reference));
    }
    if let Some(x) = &xlmr {
        fixtures.push(("xlmr_tiny".into(), x.0.clone(), x.0.join("expected.json")));
    }
    for (name, model, reference) in &fixtures {
        cross_encoder(name, model, reference);
    }
    assert_eq!(fixtures.len(), 6, "every cross-encoder fixture");
}

/// The configuration sweep (tests/fixtures/sweep: heads, activations, epsilons, vocabularies,
/// token types, relative-position buckets, ModernBERT's windows and biases; and
/// tests/fixtures/jina_v2_tiny, XLM-R in jina-reranker-v2's layout) on the device:
/// every variant of the families the engine runs, against transformers' logits, one pair at a
/// time and in batches split by token budgets. GTE, ELECTRA and DistilBERT variants run on the
/// CPU kernels only (refused by name on the engine: below).
#[test]
fn every_sweep_variant_the_engine_runs_matches_transformers() {
    let budgets = [(usize::MAX, 64), (300, 2)];
    let mut checked = Vec::new();
    let sweeps = ["sweep", "jina_v2_tiny"].map(crate::model_fixtures::sweep_variants);
    for (arch, dir) in sweeps.into_iter().flatten() {
        if ["gte", "electra", "distilbert"].contains(&arch.as_str()) {
            continue;
        }
        let name = format!("{arch}/{}", dir.file_name().unwrap().to_string_lossy());
        let run =
            crate::model_fixtures::check_cross_encoder(&dir, &name, candle(), &budgets, TOL as f32);
        let err = run
            .single
            .iter()
            .zip(&run.cases)
            .map(|(got, c)| (got - c.logit).abs())
            .fold(0f32, f32::max);
        println!("{name}: candle max |error| {err:.2e}");
        checked.push(arch);
    }
    for arch in [
        "bert",
        "xlmr",
        "xlmr_flash",
        "roberta",
        "camembert",
        "deberta",
        "modernbert",
    ] {
        assert!(checked.iter().any(|a| a == arch), "no {arch} variant ran");
    }
    assert!(checked.len() >= 21, "{} variants", checked.len());
}

/// A model of `dir` on the device with its prompts turned off, and its tokenizer's ids.
#[allow(clippy::type_complexity)]
fn bare(dir: &Path) -> (Box<dyn Embedder>, Box<dyn Fn(&str) -> Vec<u32>>) {
    let model_type = json(&dir.join("config.json"))["model_type"]
        .as_str()
        .unwrap()
        .to_string();
    macro_rules! build {
        ($t:ty) => {{
            let e = <$t>::builder(dir)
                .options(candle())
                .prompt(Role::Query, "")
                .prompt(Role::Document, "")
                .build()
                .unwrap();
            let e = std::sync::Arc::new(e);
            let ids = e.clone();
            let ids = Box::new(move |t: &str| ids.token_ids_as(t, Role::Document).unwrap());
            (
                Box::new(e) as Box<dyn Embedder>,
                ids as Box<dyn Fn(&str) -> Vec<u32>>,
            )
        }};
    }
    match model_type.as_str() {
        "bert" | "xlm-roberta" => build!(BertEmbedder),
        "modernbert" => build!(ModernBertEmbedder),
        "qwen3" | "qwen2" | "llama" | "mistral" => build!(Qwen3Embedder),
        other => panic!("no embedder for {other}"),
    }
}

/// The decoder sweep's sliding-window variants (layers that see only the last `window` keys,
/// texts longer than the window) on the device, as on the CPU.
#[test]
fn sliding_window_decoders_match_sentence_transformers() {
    let mut checked = 0;
    for (arch, dir) in crate::model_fixtures::sweep_variants("sweep_decoders") {
        let name = format!("{arch}/{}", dir.file_name().unwrap().to_string_lossy());
        if !name.contains("sliding") {
            continue;
        }
        let want = &expected_in(&dir)["case"];
        let e = load_embedder(&dir, &candle()).unwrap();
        let (bare, ids) = bare(&dir);
        let worst = assert_matches_sentence_transformers(&name, want, &*e, &*bare, &*ids);
        println!("{name}: candle smallest cosine {worst:.9}");
        checked += 1;
    }
    assert_eq!(
        checked, 5,
        "the five sliding-window variants (Qwen3, Qwen2, Mistral)"
    );
}

#[test]
fn embedders_match_sentence_transformers() {
    let fixtures = [
        "st_bert_tiny",
        "st_xlmr_tiny",
        "st_modernbert_tiny",
        "st_qwen3_tiny",
    ];
    let mut layouts = 0;
    for fixture in fixtures {
        let root = local(fixture);
        for (case, want) in &expected_in(&root) {
            let dir = root.join(case);
            let e = load_embedder(&dir, &candle()).unwrap();
            let (bare, ids) = bare(&dir);
            let name = format!("{fixture}/{case}");
            let worst = assert_matches_sentence_transformers(&name, want, &*e, &*bare, &*ids);
            let cpu = load_embedder(&dir, &native()).unwrap();
            let texts: Vec<&str> = want.cases().iter().map(|(t, _)| *t).collect();
            let (a, b) = (
                e.embed_queries(&texts).unwrap(),
                cpu.embed_queries(&texts).unwrap(),
            );
            let apart = (&a - &b).iter().fold(0f32, |m, d| m.max(d.abs()));
            println!("{name}: candle smallest cosine {worst:.9}; max |candle - cpu| {apart:.2e}");
            layouts += 1;
        }
    }
    assert_eq!(layouts, 11, "every layout of the four fixtures");
}

#[test]
fn the_real_minilm_matches_sentence_transformers() {
    let Some(fixture) = shared("minilm_embed") else {
        return;
    };
    let base = std::env::var_os("RERANK_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("models"));
    let dir = base.join("all-MiniLM-L6-v2");
    if !dir.join("model.safetensors").is_file() {
        crate::common::skip(&format!("skipping: {} has no model", dir.display()));
        return;
    }
    let v = json(&fixture.join("embeddings.json"));
    let cases = v["cases"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let e = load_embedder(&dir, &candle()).unwrap();
    let got = e.embed(&texts).unwrap();
    let mut worst = 1f64;
    for (row, c) in got.rows().into_iter().zip(cases) {
        let want: Vec<f64> = c["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let dot: f64 = row.iter().zip(&want).map(|(a, b)| *a as f64 * b).sum();
        let norm: f64 = row.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let cos = dot / norm / want.iter().map(|b| b * b).sum::<f64>().sqrt();
        worst = worst.min(cos);
    }
    println!(
        "all-MiniLM-L6-v2 on candle: {} texts, smallest cosine {worst:.9}",
        texts.len()
    );
    assert!(worst >= 0.99999, "{worst}");
}

#[test]
fn qwen3_reranker_matches_the_reference() {
    let Some(dir) = shared("qwen3_tiny_a") else {
        return;
    };
    let v = json(&dir.join("scores.json"));
    let cases = v["cases"].as_array().unwrap();
    let inputs = crate::common::qwen3_score_inputs(cases);
    let want: Vec<f64> = cases.iter().map(|c| c["score"].as_f64().unwrap()).collect();
    let run = |options: ModelOptions| {
        let r = Qwen3Reranker::builder(dir.join("model"))
            .options(options)
            .build()
            .unwrap();
        let scores: Vec<f32> = r
            .score_inputs(&inputs)
            .unwrap()
            .iter()
            .map(|s| s.score)
            .collect();
        let singles: Vec<f32> = inputs
            .iter()
            .map(|i| r.score_inputs(std::slice::from_ref(i)).unwrap()[0].score)
            .collect();
        max_error(&scores, &want).max(max_error(&singles, &want))
    };
    let (err, cpu) = (run(candle()), run(native()));
    println!(
        "qwen3_tiny_a: {} triples, candle max |error| {err:.2e}, cpu {cpu:.2e}",
        cases.len()
    );
    assert!(err < TOL, "{err}");
}

#[test]
fn mxbai_rerank_v2_matches_the_package() {
    let root = local("mxbai_v2_tiny");
    let v = json(&root.join("expected.json"));
    let setting = &v["settings"]["default"];
    let cases = setting["cases"].as_array().unwrap();
    let want: Vec<f64> = cases.iter().map(|c| c["logit"].as_f64().unwrap()).collect();
    let run = |options: ModelOptions| {
        let r = MxbaiReranker::builder(root.join("model"))
            .options(options)
            .build()
            .unwrap();
        let one: Vec<f32> = cases
            .iter()
            .map(|c| {
                let q = RerankQuery::new(c["query"].as_str().unwrap());
                r.score_with_logits(&q, &[c["document"].as_str().unwrap()])
                    .unwrap()[0]
                    .logit
            })
            .collect();
        // Each query's documents in one call: on a device their prompts share the template
        // and the query, which run once.
        let mut batched = vec![0f32; cases.len()];
        let mut shared = 0;
        for query in cases.iter().map(|c| c["query"].as_str().unwrap()) {
            let same: Vec<usize> = (0..cases.len())
                .filter(|&i| cases[i]["query"].as_str() == Some(query))
                .collect();
            let docs: Vec<&str> = same
                .iter()
                .map(|&i| cases[i]["document"].as_str().unwrap())
                .collect();
            let out = r
                .score_with_logits(&RerankQuery::new(query), &docs)
                .unwrap();
            for (&i, s) in same.iter().zip(out) {
                batched[i] = s.logit;
            }
            shared += usize::from(same.len() > 1);
        }
        assert!(shared > 0, "no query with several documents");
        max_error(&one, &want).max(max_error(&batched, &want))
    };
    let (err, cpu) = (run(candle()), run(native()));
    println!(
        "mxbai_v2_tiny: {} cases, candle max |error| {err:.2e}, cpu {cpu:.2e}",
        cases.len()
    );
    assert!(err < TOL, "{err}");
}

/// Qwen3-Reranker and mxbai-rerank-v2 converted to sequence classification
/// (tests/fixtures/qwen_seq_cls_tiny): the `score` head on the device's decoder.
#[test]
fn converted_llm_rerankers_match_transformers() {
    use crate::seq_cls::{cases, fixture, max_error, mxbai_logits, qwen3_logits};
    let qwen3 = cases("qwen3");
    let run = |options: ModelOptions| {
        let r = Qwen3Reranker::builder(fixture("qwen3"))
            .options(options)
            .build()
            .unwrap();
        max_error(&qwen3_logits(&r, &qwen3), &qwen3)
    };
    let (err, cpu) = (run(candle()), run(native()));
    eprintln!("qwen_seq_cls_tiny/qwen3: candle max |error| {err:.2e}, cpu {cpu:.2e}");
    assert!(err < TOL, "qwen3: {err:.2e}");
    let qwen2 = cases("qwen2");
    let run = |options: ModelOptions| {
        let r = MxbaiReranker::builder(fixture("qwen2"))
            .options(options)
            .build()
            .unwrap();
        max_error(&mxbai_logits(&r, &qwen2), &qwen2)
    };
    let (err, cpu) = (run(candle()), run(native()));
    eprintln!("qwen_seq_cls_tiny/qwen2: candle max |error| {err:.2e}, cpu {cpu:.2e}");
    assert!(err < TOL, "qwen2: {err:.2e}");
}

#[test]
fn half_precisions_stay_close_to_f32() {
    // XLM-R, DeBERTa, ModernBERT and BERT in half precision: the padding mask stays finite in the
    // activations' format (a mask of f32::MIN turns into -inf in f16, and 0 · -inf into NaN),
    // as cross-encoders (batched, so that rows are padded) and as an embedder.
    let xlmr = Xlmr::new("half");
    let mut half: Vec<_> = ["deberta_ce_tiny/v3", "modernbert_ce_tiny/mean"]
        .into_iter()
        .map(|name| (name, local(name), local(name).join("expected.json")))
        .collect();
    if let Some(x) = &xlmr {
        half.push(("xlmr_tiny", x.0.clone(), x.0.join("expected.json")));
    }
    if let Some(ce) = shared("ce_tiny_a") {
        half.push(("ce_tiny_a", ce.join("model"), ce.join("scores.json")));
    }
    for (name, dir, reference) in half {
        let v = json(&reference);
        let (pairs, want) = pairs_and_logits(&v);
        for precision in [Precision::F16, Precision::Bf16] {
            let model = CrossEncoder::builder(&dir)
                .options(candle().precision(precision))
                .build()
                .unwrap();
            assert_eq!(model.precision(), precision);
            let logits = model.logits(&pairs).unwrap();
            assert!(logits.iter().all(|l| l.is_finite()), "{name} {precision}");
            let err = max_error(&logits, &want);
            println!("{name} in {precision}: max |error| {err:.2e}");
            assert!(err < 0.05, "{name} {precision}: {err}");
        }
    }
    let dir = local("st_bert_tiny/plain");
    let texts = [
        "what is rust",
        "Bananas are yellow and grow in bunches.",
        "a",
    ];
    let f32s = load_embedder(&dir, &candle())
        .unwrap()
        .embed(&texts)
        .unwrap();
    for precision in [Precision::F16, Precision::Bf16] {
        let e = load_embedder(&dir, &candle().precision(precision)).unwrap();
        let half = e.embed(&texts).unwrap();
        for (a, b) in f32s.rows().into_iter().zip(half.rows()) {
            let cos = a.dot(&b) / (a.dot(&a).sqrt() * b.dot(&b).sqrt());
            println!("st_bert_tiny/plain in {precision}: cosine to f32 {cos:.6}");
            assert!(cos > 0.999, "{precision}: cosine {cos}");
        }
    }
    // The decoder (attention scores and softmax in f32); bf16 keeps 8 bits of mantissa to
    // f16's 11, hence its looser bound.
    let Some(qwen3) = shared("qwen3_tiny_a") else {
        return;
    };
    let v = json(&qwen3.join("scores.json"));
    let cases = v["cases"].as_array().unwrap();
    let inputs = crate::common::qwen3_score_inputs(cases);
    let want: Vec<f64> = cases.iter().map(|c| c["score"].as_f64().unwrap()).collect();
    for precision in [Precision::F16, Precision::Bf16] {
        let model = Qwen3Reranker::builder(qwen3.join("model"))
            .options(candle().precision(precision))
            .build()
            .unwrap();
        let scores: Vec<f32> = model
            .score_inputs(&inputs)
            .unwrap()
            .iter()
            .map(|s| s.score)
            .collect();
        let err = max_error(&scores, &want);
        println!("qwen3_tiny_a in {precision}: max |error| {err:.2e}");
        let bound = match precision {
            Precision::F16 => 0.01,
            _ => 0.1,
        };
        assert!(err < bound, "{precision}: {err}");
    }
}

#[test]
fn what_the_candle_engine_does_not_run_is_refused_at_build() {
    let dir = local("deberta_ce_tiny/v3");
    let int8 = CrossEncoder::builder(&dir)
        .options(candle().precision(Precision::Int8))
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        int8.contains("int8 runs on the crate's own CPU kernels"),
        "{int8}"
    );
    let f16 = CrossEncoder::builder(&dir)
        .options(native().precision(Precision::F16))
        .build()
        .unwrap_err()
        .to_string();
    assert!(f16.contains("f16 runs through candle only"), "{f16}");
    // The cross-encoder families the engine has no module for are named.
    for (variant, family) in [
        (
            "sweep/electra/base_shape",
            "ElectraForSequenceClassification",
        ),
        (
            "sweep/distilbert/gelu_heads2",
            "DistilBertForSequenceClassification",
        ),
    ] {
        let e = CrossEncoder::builder(local(variant))
            .options(candle())
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(family) && e.contains("CPU kernels only") && e.contains("config.json"),
            "{e}"
        );
    }
    let chat = rerank::answer::LocalChat::builder(local("mxbai_v2_tiny/model"))
        .options(candle())
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        chat.contains("generation runs on the crate's own CPU kernels"),
        "{chat}"
    );
    // A config names the device as a string.
    let options: ModelOptions =
        serde_json::from_str(r#"{"device": "candle-cpu", "precision": "f16"}"#).unwrap();
    assert_eq!(options.device, Device::CandleCpu);
    assert!(serde_json::from_str::<ModelOptions>(r#"{"device": "tpu"}"#).is_err());
}

/// A model loaded on one thread and scoring on four at once, each call in several batches
/// (at most 3 a batch) run on the model's own pool of two threads, gives every thread, every
/// time, the scores of one call alone: on a GPU, the weights the loading thread copied are
/// ordered on the device's one stream before any call's work, and the calls take turns on it
/// (`layers::candle::Turns`; `RERANK_CUDA_CONCURRENT_CALLS=1` lifts them, under which this test
/// failed for DeBERTa on an H200: `scripts/gpu_check.sh` repeats it so, to find out why).
/// DeBERTa (its scores one batched product with the position terms as C),
/// ModernBERT (its scores one batched product with the mask as the bias) and BERT (on a CUDA
/// device, one product per head, read in place); every model is checked before the test
/// fails, so that a failure names each model it reaches.
#[test]
fn models_on_the_candle_engine_are_send_and_sync_and_agree_across_threads() {
    let mut dirs = vec![local("deberta_ce_tiny/v3"), local("modernbert_ce_tiny/cls")];
    dirs.extend(shared("ce_tiny_a").map(|dir| dir.join("model")));
    let mut failed = Vec::new();
    for dir in dirs {
        let model = CrossEncoder::builder(&dir)
            .options(candle().max_batch_size(3))
            .build()
            .unwrap();
        let q = RerankQuery::new("what is rust");
        let docs = uneven_texts();
        let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let score = || model.score(&q, &docs).unwrap();
        let runs: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..3).map(|_| score()).collect::<Vec<_>>()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let want = score();
        let name = dir.display();
        assert!(
            want.iter().any(|s| (s - want[0]).abs() > 1e-4),
            "{name}: every document scored alike: a mix-up would go unnoticed"
        );
        // Every call that differs, with the items that differ, so that a failure says how
        // often and where.
        let failures: Vec<String> = runs
            .iter()
            .enumerate()
            .flat_map(|(t, thread)| thread.iter().enumerate().map(move |(r, got)| (t, r, got)))
            .filter(|(_, _, got)| *got != &want)
            .map(|(t, r, got)| {
                let items: Vec<String> = (0..want.len().max(got.len()))
                    .filter(|&i| got.get(i) != want.get(i))
                    .map(|i| format!("{i}: {:?} against {:?}", got.get(i), want.get(i)))
                    .collect();
                format!("thread {t}, call {r}: {}", items.join(", "))
            })
            .collect();
        if !failures.is_empty() {
            failed.push(format!(
                "{name}: {} of {} calls differ from one call alone:\n{}",
                failures.len(),
                runs.len() * 3,
                failures.join("\n")
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn the_cli_scores_and_embeds_on_the_device_it_is_given() {
    let Some(bin) = crate::common::rerank_cli() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("rerank-candle-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pairs = dir.join("pairs.jsonl");
    std::fs::write(
        &pairs,
        "{\"query\": \"what is rust\", \"document\": \"Rust is a systems language.\"}\n\
         {\"query\": \"what is rust\", \"document\": \"Bananas are yellow.\"}\n",
    )
    .unwrap();
    let texts = dir.join("texts.txt");
    std::fs::write(
        &texts,
        "{\"text\": \"what is rust\"}\n{\"text\": \"Bananas are yellow.\"}\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&bin)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            { String::from_utf8_lossy(&out.stderr).to_string() },
        )
    };
    let model = local("deberta_ce_tiny/v3");
    let (model, pairs) = (model.to_str().unwrap(), pairs.to_str().unwrap());
    let numbers = |stdout: &str, key: &str| -> Vec<f64> {
        stdout
            .lines()
            .flat_map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                match &v[key] {
                    Value::Array(a) => a.iter().map(|x| x.as_f64().unwrap()).collect(),
                    other => vec![other.as_f64().unwrap()],
                }
            })
            .collect()
    };
    let device = device().to_string();
    let score = ["score", "--model", model, "--input", pairs];
    let (ok_cpu, cpu, _) = run(&score);
    let (ok_dev, dev, err) = run(&[&score[..], &["--device", &device]].concat());
    assert!(ok_cpu && ok_dev, "{err}");
    let (a, b) = (numbers(&cpu, "score"), numbers(&dev, "score"));
    assert_eq!(a.len(), 2);
    assert!(
        a.iter().zip(&b).all(|(x, y)| (x - y).abs() < TOL),
        "{a:?} {b:?}"
    );
    let embedder = local("st_bert_tiny/plain");
    let embed = ["embed", "--model", embedder.to_str().unwrap(), "--input"];
    let embed = [&embed[..], &[texts.to_str().unwrap()]].concat();
    let (ok_cpu, cpu, _) = run(&embed);
    let (ok_dev, dev, err) = run(&[&embed[..], &["--device", &device]].concat());
    assert!(ok_cpu && ok_dev, "{err}");
    let (a, b) = (numbers(&cpu, "embedding"), numbers(&dev, "embedding"));
    assert!(!a.is_empty() && a.iter().zip(&b).all(|(x, y)| (x - y).abs() < TOL));
    // A device the build cannot run, or no device at all, is an error that names it.
    let (ok, _, err) = run(&[&score[..], &["--device", "tpu"]].concat());
    assert!(!ok && err.contains("unknown device \"tpu\""), "{err}");
    let (ok, _, err) = run(&[&score[..], &["--precision", "f16"]].concat());
    assert!(!ok && err.contains("f16 runs through candle only"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn long_documents_score_by_passages_on_the_device_as_on_the_cpu() {
    use rerank::rerankers::Passages;
    let dir = local("deberta_ce_tiny/v3");
    let passages = Passages::default().window(16).stride(12);
    let long = "Rust is a systems programming language. ".repeat(12)
        + "Bananas are yellow and grow in bunches. "
            .repeat(6)
            .as_str();
    let docs = [long.as_str(), "", "Bananas are yellow."];
    let q = RerankQuery::new("what colour are bananas");
    let score = |options: ModelOptions| {
        let model = CrossEncoder::builder(&dir)
            .options(options.passages(passages))
            .build()
            .unwrap();
        model.score_detailed(&q, &docs).unwrap()
    };
    let (on_device, on_cpu) = (score(candle()), score(native()));
    for (a, b) in on_device.scores.iter().zip(&on_cpu.scores) {
        assert!((a - b).abs() < TOL as f32, "{a} vs {b}");
    }
    assert_eq!(
        on_device.passages, on_cpu.passages,
        "the same winning passages"
    );
}

/// Texts of very different lengths (1 to 300 words), each different, for runs of several
/// batches.
fn uneven_texts() -> Vec<String> {
    [1, 240, 3, 60, 150, 2, 90, 7, 300, 15, 40]
        .iter()
        .enumerate()
        .map(|(i, &words)| {
            (0..words)
                .map(|w| ["rust", "bananas", "yellow", "systems", "ranking"][(w + i) % 5])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Inputs run in several batches at once (at most 3 a batch, so that the device engine
/// prepares and starts each batch while the one before runs) come back in input order, each
/// as it comes when it runs alone.
#[test]
fn pipelined_batches_match_one_batch_at_a_time() {
    let texts = uneven_texts();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let options = || candle().max_batch_size(3);
    let close = |name: &str, all: &[f32], alone: &[f32]| {
        assert_eq!(all.len(), alone.len(), "{name}");
        let apart = all
            .iter()
            .zip(alone)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        println!(
            "{name}: {} values, max |batched - alone| {apart:.2e}",
            all.len()
        );
        assert!(apart < 1e-5, "{name}: {apart}");
        assert!(
            alone.iter().any(|v| (v - alone[0]).abs() > 1e-4),
            "{name}: every input scored alike: order would go unnoticed"
        );
    };

    // Cross-encoders: a first-token head and a masked-mean one.
    let pairs: Vec<(&str, &str)> = texts.iter().map(|t| ("what is rust", *t)).collect();
    for name in ["deberta_ce_tiny/v3", "modernbert_ce_tiny/mean"] {
        let model = CrossEncoder::builder(local(name))
            .options(options())
            .build()
            .unwrap();
        let all = model.logits(&pairs).unwrap();
        let alone: Vec<f32> = pairs
            .iter()
            .map(|p| model.logits(&[*p]).unwrap()[0])
            .collect();
        close(name, &all, &alone);
    }

    // Embedders: every token's states read back (mean pooling) and the first token's (cls).
    // (The Qwen3 embedder's decoder too: each text's last token.)
    for name in [
        "st_bert_tiny/plain",
        "st_modernbert_tiny/cls",
        "st_qwen3_tiny/lasttoken",
    ] {
        let model = load_embedder(local(name), &options()).unwrap();
        let all = model.embed(&texts).unwrap();
        let mut alone = Vec::new();
        for t in &texts {
            alone.extend(model.embed(&[*t]).unwrap().iter().copied());
        }
        close(name, all.as_slice().unwrap(), &alone);
    }

    // The decoder: prompts of one query share a prefix, run once a batch.
    let Some(dir) = shared("qwen3_tiny_a") else {
        return;
    };
    let model = Qwen3Reranker::builder(dir.join("model"))
        .options(options())
        .build()
        .unwrap();
    let q = RerankQuery::new("what is rust");
    let all = model.score(&q, &texts).unwrap();
    let alone: Vec<f32> = texts
        .iter()
        .map(|t| model.score(&q, &[*t]).unwrap()[0])
        .collect();
    close("qwen3_tiny_a", &all, &alone);
}
